/*
 * Requests a backend sends to other models of the server (BLS: TRITONSERVER_InferenceRequest*,
 * TRITONSERVER_ServerInferAsync) and the responses they get (TRITONSERVER_InferenceResponse*).
 *
 * A request is built by the backend, handed to inferd's core through host_svc.infer_async (the
 * extension: inferd's ServerLinks.infer_async), and answered by the extension calling
 * inferd_host_bls_respond once per response on the event loop: each output is allocated through the
 * backend's response allocator and copied in, the backend's response callback gets the response, and
 * after the final one its release callback gets the request back.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "host.h"

static TRITONSERVER_Error* no_memory(void) { return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory"); }

#define CHECK(r) \
  if ((r) == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "inference request is null")

static bls_input* find_input(TRITONSERVER_InferenceRequest* r, const char* name) {
  for (uint32_t i = 0; i < r->n_inputs; i++)
    if (!r->inputs[i].removed && strcmp(r->inputs[i].name, name) == 0) return &r->inputs[i];
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestNew(
    TRITONSERVER_InferenceRequest** inference_request, TRITONSERVER_Server* server, const char* model_name,
    const int64_t model_version) {
  (void)server;
  if (inference_request == NULL || model_name == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "request or model name is null");
  TRITONSERVER_InferenceRequest* r = calloc(1, sizeof(*r));
  if (r == NULL || (r->model = host_strdup(model_name)) == NULL) {
    free(r);
    return no_memory();
  }
  r->version = model_version;
  atomic_init(&r->cancelled, false);
  *inference_request = r;
  return NULL;
}

static void free_inputs(TRITONSERVER_InferenceRequest* r) {
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    free(r->inputs[i].name);
    free(r->inputs[i].shape);
    free(r->inputs[i].buffers);
  }
  free(r->inputs);
  r->inputs = NULL;
  r->n_inputs = 0;
}

static void free_outputs(TRITONSERVER_InferenceRequest* r) {
  for (uint32_t i = 0; i < r->n_outputs; i++) free(r->outputs[i]);
  free(r->outputs);
  r->outputs = NULL;
  r->n_outputs = 0;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest* inference_request) {
  TRITONSERVER_InferenceRequest* r = inference_request;
  if (r == NULL) return NULL;
  free_inputs(r);
  free_outputs(r);
  host_params_free(r->params, r->n_params);
  free(r->model);
  free(r->id);
  free(r->correlation_id_str);
  free(r);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestId(TRITONSERVER_InferenceRequest* r, const char** id) {
  CHECK(r);
  *id = r->id == NULL ? "" : r->id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetId(TRITONSERVER_InferenceRequest* r, const char* id) {
  CHECK(r);
  char* copy = host_strdup(id);
  if (copy == NULL) return no_memory();
  free(r->id);
  r->id = copy;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestFlags(TRITONSERVER_InferenceRequest* r, uint32_t* flags) {
  CHECK(r);
  *flags = r->flags;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetFlags(TRITONSERVER_InferenceRequest* r, uint32_t flags) {
  CHECK(r);
  r->flags = flags;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestCorrelationId(TRITONSERVER_InferenceRequest* r, uint64_t* id) {
  CHECK(r);
  if (r->correlation_id_str != NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "given request's correlation id is not an unsigned int");
  *id = r->correlation_id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestCorrelationIdString(
    TRITONSERVER_InferenceRequest* r, const char** id) {
  CHECK(r);
  if (r->correlation_id_str == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "given request's correlation id is not a string");
  *id = r->correlation_id_str;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationId(TRITONSERVER_InferenceRequest* r, uint64_t id) {
  CHECK(r);
  free(r->correlation_id_str);
  r->correlation_id_str = NULL;
  r->correlation_id = id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationIdString(
    TRITONSERVER_InferenceRequest* r, const char* id) {
  CHECK(r);
  char* copy = host_strdup(id);
  if (copy == NULL) return no_memory();
  free(r->correlation_id_str);
  r->correlation_id_str = copy;
  r->correlation_id = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestCancel(TRITONSERVER_InferenceRequest* r) {
  CHECK(r);
  if (!atomic_exchange(&r->cancelled, true) && r->submitted && host_svc.bls_cancel != NULL)
    host_svc.bls_cancel(r);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestIsCancelled(TRITONSERVER_InferenceRequest* r, bool* is_cancelled) {
  CHECK(r);
  *is_cancelled = atomic_load(&r->cancelled);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestPriority(TRITONSERVER_InferenceRequest* r, uint32_t* priority) {
  CHECK(r);
  *priority = (uint32_t)r->priority;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestPriorityUInt64(TRITONSERVER_InferenceRequest* r, uint64_t* priority) {
  CHECK(r);
  *priority = r->priority;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriority(TRITONSERVER_InferenceRequest* r, uint32_t priority) {
  CHECK(r);
  r->priority = priority;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriorityUInt64(TRITONSERVER_InferenceRequest* r, uint64_t priority) {
  CHECK(r);
  r->priority = priority;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestTimeoutMicroseconds(
    TRITONSERVER_InferenceRequest* r, uint64_t* timeout_us) {
  CHECK(r);
  *timeout_us = r->timeout_us;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(
    TRITONSERVER_InferenceRequest* r, uint64_t timeout_us) {
  CHECK(r);
  r->timeout_us = timeout_us;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddInput(
    TRITONSERVER_InferenceRequest* r, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape,
    uint64_t dim_count) {
  CHECK(r);
  if (name == NULL || (shape == NULL && dim_count > 0))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input name or shape is null");
  if (find_input(r, name) != NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' already exists in request", name);
  bls_input* grown = realloc(r->inputs, sizeof(bls_input) * (r->n_inputs + 1));
  if (grown == NULL) return no_memory();
  r->inputs = grown;
  bls_input* in = &grown[r->n_inputs];
  memset(in, 0, sizeof(*in));
  in->name = host_strdup(name);
  in->shape = malloc(sizeof(int64_t) * (dim_count + 1));
  if (in->name == NULL || in->shape == NULL) {
    free(in->name);
    free(in->shape);
    return no_memory();
  }
  if (dim_count > 0) memcpy(in->shape, shape, sizeof(int64_t) * dim_count);
  in->n_dims = (uint32_t)dim_count;
  in->datatype = datatype;
  r->n_inputs++;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveInput(TRITONSERVER_InferenceRequest* r, const char* name) {
  CHECK(r);
  bls_input* in = find_input(r, name);
  if (in == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' does not exist in request", name);
  in->removed = true;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputs(TRITONSERVER_InferenceRequest* r) {
  CHECK(r);
  free_inputs(r);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputData(
    TRITONSERVER_InferenceRequest* r, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id) {
  (void)memory_type_id;
  CHECK(r);
  bls_input* in = find_input(r, name);
  if (in == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' does not exist in request", name);
  if (memory_type == TRITONSERVER_MEMORY_GPU)
    return host_error(TRITONSERVER_ERROR_UNSUPPORTED, "input '%s': GPU memory is not served by inferd's host", name);
  bls_buffer* grown = realloc(in->buffers, sizeof(bls_buffer) * (in->n_buffers + 1));
  if (grown == NULL) return no_memory();
  in->buffers = grown;
  grown[in->n_buffers].base = base; /* the backend's, valid until the request is released */
  grown[in->n_buffers].size = byte_size;
  in->n_buffers++;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(
    TRITONSERVER_InferenceRequest* r, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, const char* host_policy_name) {
  (void)host_policy_name;
  return TRITONSERVER_InferenceRequestAppendInputData(r, name, base, byte_size, memory_type, memory_type_id);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    TRITONSERVER_InferenceRequest* r, const char* name, const void* base,
    TRITONSERVER_BufferAttributes* buffer_attributes) {
  if (buffer_attributes == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "buffer attributes are null");
  return TRITONSERVER_InferenceRequestAppendInputData(r, name, base, buffer_attributes->byte_size,
                                                      buffer_attributes->memory_type,
                                                      buffer_attributes->memory_type_id);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputData(TRITONSERVER_InferenceRequest* r, const char* name) {
  CHECK(r);
  bls_input* in = find_input(r, name);
  if (in == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' does not exist in request", name);
  free(in->buffers);
  in->buffers = NULL;
  in->n_buffers = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRequestedOutput(TRITONSERVER_InferenceRequest* r, const char* name) {
  CHECK(r);
  if (name == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "output name is null");
  char** grown = realloc(r->outputs, sizeof(char*) * (r->n_outputs + 1));
  if (grown == NULL) return no_memory();
  r->outputs = grown;
  if ((grown[r->n_outputs] = host_strdup(name)) == NULL) return no_memory();
  r->n_outputs++;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveRequestedOutput(TRITONSERVER_InferenceRequest* r, const char* name) {
  CHECK(r);
  for (uint32_t i = 0; i < r->n_outputs; i++) {
    if (strcmp(r->outputs[i], name) == 0) {
      free(r->outputs[i]);
      r->outputs[i] = r->outputs[--r->n_outputs];
      return NULL;
    }
  }
  return host_error(TRITONSERVER_ERROR_INVALID_ARG, "output '%s' does not exist in request", name);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(TRITONSERVER_InferenceRequest* r) {
  CHECK(r);
  free_outputs(r);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(
    TRITONSERVER_InferenceRequest* r, TRITONSERVER_InferenceRequestReleaseFn_t request_release_fn,
    void* request_release_userp) {
  CHECK(r);
  r->release_fn = request_release_fn;
  r->release_userp = request_release_userp;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(
    TRITONSERVER_InferenceRequest* r, TRITONSERVER_ResponseAllocator* response_allocator,
    void* response_allocator_userp, TRITONSERVER_InferenceResponseCompleteFn_t response_fn, void* response_userp) {
  CHECK(r);
  r->allocator = response_allocator;
  r->alloc_userp = response_allocator_userp;
  r->response_fn = response_fn;
  r->response_userp = response_userp;
  return NULL;
}

static TRITONSERVER_Error* set_param(TRITONSERVER_InferenceRequest* r, const char* key,
                                     TRITONSERVER_ParameterType type, const void* value) {
  CHECK(r);
  if (key == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "parameter key is null");
  return host_params_add(&r->params, &r->n_params, key, type, value) ? NULL : no_memory();
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetStringParameter(
    TRITONSERVER_InferenceRequest* request, const char* key, const char* value) {
  if (value == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "parameter value is null");
  return set_param(request, key, TRITONSERVER_PARAMETER_STRING, value);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetIntParameter(
    TRITONSERVER_InferenceRequest* request, const char* key, const int64_t value) {
  return set_param(request, key, TRITONSERVER_PARAMETER_INT, &value);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetBoolParameter(
    TRITONSERVER_InferenceRequest* request, const char* key, const bool value) {
  return set_param(request, key, TRITONSERVER_PARAMETER_BOOL, &value);
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetDoubleParameter(
    TRITONSERVER_InferenceRequest* request, const char* key, const double value) {
  return set_param(request, key, TRITONSERVER_PARAMETER_DOUBLE, &value);
}

TRITONSERVER_Error* TRITONSERVER_ServerInferAsync(
    TRITONSERVER_Server* server, TRITONSERVER_InferenceRequest* inference_request,
    TRITONSERVER_InferenceTrace* trace) {
  (void)server;
  (void)trace;
  CHECK(inference_request);
  if (host_svc.infer_async == NULL) return host_unsupported("TRITONSERVER_ServerInferAsync");
  if (inference_request->response_fn == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "inference request has no response callback");
  if (atomic_load(&inference_request->cancelled))
    return host_error(TRITONSERVER_ERROR_CANCELLED, "the inference request was cancelled before it was sent");
  /* from the call on the request is inferd's until it is released: it may be answered, released and
   * deleted by the backend before the call returns, so nothing here touches it after */
  inference_request->submitted = true;
  TRITONSERVER_Error* err = host_svc.infer_async(inference_request);
  if (err != NULL) inference_request->submitted = false; /* refused: still the backend's */
  return err;
}

/* ---- responses ------------------------------------------------------------------------------- */
TRITONSERVER_InferenceResponse* inferd_host_bls_response_new(
    TRITONSERVER_InferenceRequest* request, const char* model, int64_t version, const char* id) {
  TRITONSERVER_InferenceResponse* r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->model = host_strdup(model);
  r->id = host_strdup(id);
  r->version = version;
  r->allocator = request->allocator;
  if (r->model == NULL || r->id == NULL) {
    TRITONSERVER_InferenceResponseDelete(r);
    return NULL;
  }
  return r;
}

TRITONSERVER_Error* inferd_host_bls_response_add_output(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceResponse* response, const char* name,
    TRITONSERVER_DataType datatype, const int64_t* shape, uint32_t n_dims, const void* data, size_t byte_size) {
  TRITONSERVER_ResponseAllocator* a = request->allocator;
  if (a == NULL || a->alloc == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "the request has no response allocator");
  if (!response->started && a->start != NULL) {
    TRITONSERVER_Error* err = a->start(a, request->alloc_userp);
    if (err != NULL) return err;
  }
  response->started = true;
  bls_output* grown = realloc(response->outputs, sizeof(bls_output) * (response->n_outputs + 1));
  if (grown == NULL) return no_memory();
  response->outputs = grown;
  bls_output* o = &grown[response->n_outputs];
  memset(o, 0, sizeof(*o));
  o->name = host_strdup(name);
  o->shape = malloc(sizeof(int64_t) * (n_dims + 1));
  if (o->name == NULL || o->shape == NULL) {
    free(o->name);
    free(o->shape);
    return no_memory();
  }
  if (n_dims > 0) memcpy(o->shape, shape, sizeof(int64_t) * n_dims);
  o->n_dims = n_dims;
  o->datatype = datatype;
  o->byte_size = byte_size;
  TRITONSERVER_Error* err = a->alloc(a, name, byte_size, TRITONSERVER_MEMORY_CPU, 0, request->alloc_userp,
                                     &o->buffer, &o->buffer_userp, &o->memory_type, &o->memory_type_id);
  if (err == NULL && byte_size > 0 && o->buffer == NULL)
    err = host_error(TRITONSERVER_ERROR_INTERNAL, "the response allocator gave no buffer for output '%s'", name);
  if (err == NULL && o->memory_type == TRITONSERVER_MEMORY_GPU)
    err = host_error(TRITONSERVER_ERROR_UNSUPPORTED, "output '%s': GPU memory is not served by inferd's host", name);
  if (err != NULL) {
    free(o->name);
    free(o->shape);
    return err;
  }
  if (byte_size > 0) memcpy(o->buffer, data, byte_size);
  response->n_outputs++;
  return NULL;
}

TRITONSERVER_Error* inferd_host_bls_response_add_param(
    TRITONSERVER_InferenceResponse* response, const char* key, TRITONSERVER_ParameterType type, const void* value) {
  return host_params_add(&response->params, &response->n_params, key, type, value) ? NULL : no_memory();
}

void inferd_host_bls_response_set_error(TRITONSERVER_InferenceResponse* response, TRITONSERVER_Error* error) {
  TRITONSERVER_ErrorDelete(response->error);
  response->error = error;
}

void inferd_host_bls_respond(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceResponse* response, bool final) {
  uint32_t flags = final ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0;
  /* the backend's callbacks, in the reference's order: the response (the backend deletes it), then,
   * after the last, the request back to its owner (who may delete it: it is not touched after) */
  request->response_fn(response, flags, request->response_userp);
  if (final && request->release_fn != NULL)
    request->release_fn(request, TRITONSERVER_REQUEST_RELEASE_ALL, request->release_userp);
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* response) {
  if (response == NULL) return NULL;
  TRITONSERVER_ResponseAllocator* a = response->allocator;
  for (uint32_t i = 0; i < response->n_outputs; i++) {
    bls_output* o = &response->outputs[i];
    if (a != NULL && a->release != NULL)
      TRITONSERVER_ErrorDelete(
          a->release(a, o->buffer, o->buffer_userp, o->byte_size, o->memory_type, o->memory_type_id));
    free(o->name);
    free(o->shape);
  }
  free(response->outputs);
  host_params_free(response->params, response->n_params);
  TRITONSERVER_ErrorDelete(response->error);
  free(response->model);
  free(response->id);
  free(response);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* response) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  return response->error; /* owned by the response */
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseModel(
    TRITONSERVER_InferenceResponse* response, const char** model_name, int64_t* model_version) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  *model_name = response->model;
  *model_version = response->version;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseId(TRITONSERVER_InferenceResponse* response, const char** request_id) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  *request_id = response->id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameterCount(
    TRITONSERVER_InferenceResponse* response, uint32_t* count) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  *count = response->n_params;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameter(
    TRITONSERVER_InferenceResponse* response, const uint32_t index, const char** name,
    TRITONSERVER_ParameterType* type, const void** vvalue) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  if (index >= response->n_params)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: response has %u parameters",
                      (unsigned)index, (unsigned)response->n_params);
  *name = response->params[index].key;
  *type = response->params[index].type;
  *vvalue = host_param_value(&response->params[index]);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(TRITONSERVER_InferenceResponse* response, uint32_t* count) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  *count = response->n_outputs;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(
    TRITONSERVER_InferenceResponse* response, const uint32_t index, const char** name,
    TRITONSERVER_DataType* datatype, const int64_t** shape, uint64_t* dim_count, const void** base,
    size_t* byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id, void** userp) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  if (index >= response->n_outputs)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: response has %u outputs",
                      (unsigned)index, (unsigned)response->n_outputs);
  bls_output* o = &response->outputs[index];
  *name = o->name;
  *datatype = o->datatype;
  *shape = o->shape;
  *dim_count = o->n_dims;
  *base = o->buffer;
  *byte_size = o->byte_size;
  *memory_type = o->memory_type;
  *memory_type_id = o->memory_type_id;
  *userp = o->buffer_userp;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputClassificationLabel(
    TRITONSERVER_InferenceResponse* response, const uint32_t index, const size_t class_index, const char** label) {
  (void)response;
  (void)index;
  (void)class_index;
  *label = NULL; /* as the reference answers for a model without labels */
  return NULL;
}
