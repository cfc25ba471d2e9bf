/*
 * Requests, responses, response factories, outputs and implicit state; the completion queue that carries
 * what a backend hands back to inferd's event loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "host.h"

static TRITONSERVER_Error* no_memory(void) { return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory"); }

/* ---- the completion queue ------------------------------------------------------------------- */
host_queue* inferd_host_queue_new(void) {
  host_queue* q = calloc(1, sizeof(*q));
  if (q == NULL) return NULL;
  q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (q->efd < 0) {
    free(q);
    return NULL;
  }
  pthread_mutex_init(&q->mu, NULL);
  q->tail = &q->head;
  return q;
}

void inferd_host_queue_free(host_queue* q) {
  close(q->efd);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

void host_queue_push(host_queue* q, host_event* ev) {
  ev->next = NULL;
  pthread_mutex_lock(&q->mu);
  *q->tail = ev;
  q->tail = &ev->next;
  bool wake = !q->signalled && !q->quiet; /* one write per batch of events: the loop takes them all */
  if (!q->quiet) q->signalled = true;
  pthread_mutex_unlock(&q->mu);
  if (wake) {
    uint64_t one = 1;
    ssize_t n;
    do n = write(q->efd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
  }
}

void inferd_host_queue_quiet(host_queue* q, bool quiet) {
  pthread_mutex_lock(&q->mu);
  q->quiet = quiet;
  pthread_mutex_unlock(&q->mu);
}

host_event* inferd_host_queue_take(host_queue* q, bool read_fd) {
  /* the counter is read before the list is taken: a push after the take writes again (signalled is
   * false then), and one between the two is taken now and only leaves a spurious wake-up */
  if (read_fd) {
    uint64_t count;
    ssize_t n;
    do n = read(q->efd, &count, sizeof(count));
    while (n < 0 && errno == EINTR);
  }
  pthread_mutex_lock(&q->mu);
  host_event* head = q->head;
  q->head = NULL;
  q->tail = &q->head;
  q->signalled = false;
  pthread_mutex_unlock(&q->mu);
  return head;
}

/* ---- channels ------------------------------------------------------------------------------- */
void host_channel_ref(host_channel* ch) { atomic_fetch_add_explicit(&ch->refs, 1, memory_order_relaxed); }

void host_channel_unref(host_channel* ch) {
  if (atomic_fetch_sub_explicit(&ch->refs, 1, memory_order_acq_rel) == 1) {
    ch->ev.kind = HOST_EV_CLOSED;
    host_queue_push(ch->queue, &ch->ev);
  }
}

static void output_free(TRITONBACKEND_Output* o);

void inferd_host_channel_free(host_channel* ch) {
  while (ch->states != NULL) { /* states no response carried (never updated, or no response after) */
    struct TRITONBACKEND_State* s = ch->states;
    ch->states = s->next;
    output_free(&s->output);
  }
  atomic_fetch_sub(&ch->model->open_channels, 1);
  free(ch);
}

void inferd_host_channel_cancel(host_channel* channel) { atomic_store(&channel->cancelled, true); }

/* ---- requests as inferd builds them ----------------------------------------------------------- */
TRITONBACKEND_Request* inferd_host_request_new(
    TRITONBACKEND_Model* model, void* ctx, void* channel_ctx, uint32_t n_inputs, uint32_t n_outputs) {
  TRITONBACKEND_Request* r = calloc(1, sizeof(*r));
  host_channel* ch = calloc(1, sizeof(*ch));
  if (r == NULL || ch == NULL) goto fail;
  if (n_inputs > 0 && (r->inputs = calloc(n_inputs, sizeof(TRITONBACKEND_Input))) == NULL) goto fail;
  if (n_outputs > 0 && (r->outputs = calloc(n_outputs, sizeof(char*))) == NULL) goto fail;
  r->n_inputs = n_inputs;
  r->n_outputs = n_outputs;
  r->model = model;
  r->ctx = ctx;
  r->channel = ch;
  atomic_init(&r->released, false);
  atomic_init(&ch->refs, 1);
  atomic_init(&ch->cancelled, false);
  atomic_init(&ch->final_sent, false);
  ch->queue = model->queue;
  ch->model = model;
  ch->ctx = channel_ctx;
  atomic_fetch_add(&model->open_channels, 1);
  return r;
fail:
  if (r != NULL) {
    free(r->inputs);
    free(r->outputs);
  }
  free(r);
  free(ch);
  return NULL;
}

TRITONSERVER_Error* inferd_host_request_set_input(
    TRITONBACKEND_Request* request, uint32_t i, const char* name, TRITONSERVER_DataType datatype,
    const int64_t* shape, uint32_t n_dims, const void* data, uint64_t byte_size) {
  TRITONBACKEND_Input* in = &request->inputs[i];
  TRITONBACKEND_Model* m = request->model;
  const host_io* io = host_find_io(m->inputs, m->n_inputs, name);
  uint32_t batch = m->max_batch_size > 0 && n_dims > 0 ? 1 : 0;
  uint32_t n_out = n_dims;
  if (io != NULL && io->reshape != NULL && n_dims - batch == io->n_dims) n_out = batch + io->n_reshape;
  in->name = host_strdup(name);
  in->shape = malloc(sizeof(int64_t) * (n_out + 1));
  if (in->name == NULL || in->shape == NULL) return no_memory();
  if (n_out != n_dims || (io != NULL && io->reshape != NULL)) {
    /* the reference's InferenceRequest::Normalize: the backend sees the reshaped dims */
    if (batch) in->shape[0] = shape[0];
    host_reshape(io->dims, io->n_dims, io->reshape, io->n_reshape, shape + batch, in->shape + batch);
  } else {
    memcpy(in->shape, shape, sizeof(int64_t) * n_dims);
  }
  in->n_dims = n_out;
  in->datatype = datatype;
  in->data = data;
  in->byte_size = byte_size;
  return NULL;
}

TRITONSERVER_Error* inferd_host_request_set_output(TRITONBACKEND_Request* request, uint32_t i, const char* name) {
  request->outputs[i] = host_strdup(name);
  return request->outputs[i] == NULL ? no_memory() : NULL;
}

TRITONSERVER_Error* inferd_host_request_add_param(
    TRITONBACKEND_Request* request, const char* key, TRITONSERVER_ParameterType type, const void* value) {
  return host_params_add(&request->params, &request->n_params, key, type, value) ? NULL : no_memory();
}

TRITONSERVER_Error* inferd_host_request_set_id(TRITONBACKEND_Request* request, const char* id) {
  free(request->id);
  request->id = host_strdup(id);
  return request->id == NULL ? no_memory() : NULL;
}

TRITONSERVER_Error* inferd_host_request_set_correlation(
    TRITONBACKEND_Request* request, uint64_t id, const char* id_str) {
  request->correlation_id = id;
  free(request->correlation_id_str);
  request->correlation_id_str = NULL;
  if (id_str != NULL && (request->correlation_id_str = host_strdup(id_str)) == NULL) return no_memory();
  return NULL;
}

static void request_free_fields(TRITONBACKEND_Request* r) {
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    free((char*)r->inputs[i].name);
    free(r->inputs[i].shape);
  }
  free(r->inputs);
  for (uint32_t i = 0; i < r->n_outputs; i++) free(r->outputs[i]);
  free(r->outputs);
  host_params_free(r->params, r->n_params);
  free(r->id);
  free(r->correlation_id_str);
}

void inferd_host_request_free(TRITONBACKEND_Request* request) {
  request_free_fields(request);
  host_channel* ch = request->channel;
  free(request);
  if (ch != NULL) host_channel_unref(ch);
}

void inferd_host_request_discard(TRITONBACKEND_Request* request) {
  host_channel* ch = request->channel;
  request_free_fields(request);
  free(request);
  if (ch != NULL) inferd_host_channel_free(ch);
}

/* ---- what a backend reads of a request -------------------------------------------------------- */
#define CHECK_REQUEST(r) \
  if ((r) == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "request is null")

TRITONSERVER_Error* TRITONBACKEND_RequestId(TRITONBACKEND_Request* request, const char** id) {
  CHECK_REQUEST(request);
  *id = request->id == NULL ? "" : request->id;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestIsCancelled(TRITONBACKEND_Request* request, bool* is_cancelled) {
  CHECK_REQUEST(request);
  *is_cancelled = atomic_load_explicit(&request->channel->cancelled, memory_order_relaxed);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* request, uint64_t* id) {
  CHECK_REQUEST(request);
  if (request->correlation_id_str != NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "correlation ID in request is not an unsigned int");
  *id = request->correlation_id;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* request, const char** id) {
  CHECK_REQUEST(request);
  if (request->correlation_id_str == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "correlation ID in request is not a string");
  *id = request->correlation_id_str;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(
    TRITONBACKEND_Request* request, uint64_t* timeout) {
  CHECK_REQUEST(request);
  *timeout = request->timeout_us;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* request, uint32_t* flags) {
  CHECK_REQUEST(request);
  *flags = request->flags;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_REQUEST(request);
  *count = request->n_params;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestParameter(
    TRITONBACKEND_Request* request, const uint32_t index, const char** key, TRITONSERVER_ParameterType* type,
    const void** vvalue) {
  CHECK_REQUEST(request);
  if (index >= request->n_params)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG,
                      "out of bounds index %u: request has %u parameters", (unsigned)index,
                      (unsigned)request->n_params);
  const host_param* p = &request->params[index];
  *key = p->key;
  *type = p->type;
  *vvalue = host_param_value(p);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_REQUEST(request);
  *count = request->n_inputs;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestInputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** input_name) {
  CHECK_REQUEST(request);
  if (index >= request->n_inputs)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: request has %u inputs",
                      (unsigned)index, (unsigned)request->n_inputs);
  *input_name = request->inputs[index].name;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestInput(
    TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input) {
  CHECK_REQUEST(request);
  for (uint32_t i = 0; i < request->n_inputs; i++) {
    if (strcmp(request->inputs[i].name, name) == 0) {
      *input = &request->inputs[i];
      return NULL;
    }
  }
  return host_error(TRITONSERVER_ERROR_INVALID_ARG, "unknown request input name %s", name);
}

TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(
    TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input) {
  CHECK_REQUEST(request);
  if (index >= request->n_inputs)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: request has %u inputs",
                      (unsigned)index, (unsigned)request->n_inputs);
  *input = &request->inputs[index];
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_REQUEST(request);
  *count = request->n_outputs;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** output_name) {
  CHECK_REQUEST(request);
  if (index >= request->n_outputs)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG,
                      "out of bounds index %u: request has %u requested outputs", (unsigned)index,
                      (unsigned)request->n_outputs);
  *output_name = request->outputs[index];
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestOutputBufferProperties(
    TRITONBACKEND_Request* request, const char* name, size_t* byte_size, TRITONSERVER_MemoryType* memory_type,
    int64_t* memory_type_id) {
  CHECK_REQUEST(request);
  (void)name;
  /* outputs go to host memory inferd allocates when the backend asks: no size is known beforehand */
  if (byte_size != NULL) *byte_size = 0;
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags) {
  CHECK_REQUEST(request);
  if (release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    return host_error(TRITONSERVER_ERROR_UNSUPPORTED,
                      "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE is not supported by inferd's Triton backend host");
  if (atomic_exchange(&request->released, true))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "request was already released");
  /* the loop frees it (the inputs' memory is Python's); its channel lives on while responses may come */
  host_channel* ch = request->channel;
  request->ev.kind = HOST_EV_RELEASED;
  host_queue_push(ch->queue, &request->ev);
  return NULL;
}

/* ---- inputs ---------------------------------------------------------------------------------- */
TRITONSERVER_Error* TRITONBACKEND_InputProperties(
    TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape,
    uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count) {
  if (input == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input is null");
  if (name != NULL) *name = input->name;
  if (datatype != NULL) *datatype = input->datatype;
  if (shape != NULL) *shape = input->shape;
  if (dims_count != NULL) *dims_count = input->n_dims;
  if (byte_size != NULL) *byte_size = input->byte_size;
  if (buffer_count != NULL) *buffer_count = 1;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const char** name, TRITONSERVER_DataType* datatype,
    const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count) {
  (void)host_policy_name; /* one copy of the data, whatever the policy */
  return TRITONBACKEND_InputProperties(input, name, datatype, shape, dims_count, byte_size, buffer_count);
}

TRITONSERVER_Error* TRITONBACKEND_InputBuffer(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  if (input == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input is null");
  if (index != 0)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: input '%s' has 1 buffer",
                      (unsigned)index, input->name);
  /* zero-copy: the bytes inferd received (a request body, a shared-memory region) */
  *buffer = input->data;
  *buffer_byte_size = input->byte_size;
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const uint32_t index, const void** buffer,
    uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  (void)host_policy_name;
  return TRITONBACKEND_InputBuffer(input, index, buffer, buffer_byte_size, memory_type, memory_type_id);
}

TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
    TRITONSERVER_BufferAttributes** buffer_attributes) {
  if (input == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "input is null");
  if (index != 0)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: input '%s' has 1 buffer",
                      (unsigned)index, input->name);
  input->attributes.memory_type = TRITONSERVER_MEMORY_CPU;
  input->attributes.memory_type_id = 0;
  input->attributes.cuda_ipc_handle = NULL;
  input->attributes.byte_size = input->byte_size;
  *buffer = input->data;
  *buffer_attributes = &input->attributes; /* owned by the input */
  return NULL;
}

/* ---- responses ------------------------------------------------------------------------------- */
struct TRITONBACKEND_ResponseFactory {
  host_channel* channel;
};

static TRITONSERVER_Error* response_new(TRITONBACKEND_Response** response, host_channel* ch) {
  TRITONBACKEND_Response* r = calloc(1, sizeof(*r));
  if (r == NULL) return no_memory();
  host_channel_ref(ch);
  r->channel = ch;
  *response = r;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request) {
  CHECK_REQUEST(request);
  return response_new(response, request->channel);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory(
    TRITONBACKEND_Response** response, TRITONBACKEND_ResponseFactory* factory) {
  if (factory == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response factory is null");
  return response_new(response, factory->channel);
}

static void output_free(TRITONBACKEND_Output* o) {
  free(o->name);
  free(o->shape);
  free(o->buffer);
  free(o);
}

void inferd_host_response_free(TRITONBACKEND_Response* response) {
  for (uint32_t i = 0; i < response->n_outputs; i++)
    if (response->outputs[i] != NULL) output_free(response->outputs[i]);
  free(response->outputs);
  host_params_free(response->params, response->n_params);
  TRITONSERVER_ErrorDelete(response->error);
  host_channel* ch = response->channel;
  free(response);
  host_channel_unref(ch);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response) {
  if (response != NULL) inferd_host_response_free(response);
  return NULL;
}

static TRITONSERVER_Error* set_param(TRITONBACKEND_Response* r, const char* name, TRITONSERVER_ParameterType type,
                                     const void* value) {
  if (r == NULL || name == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response or name is null");
  return host_params_add(&r->params, &r->n_params, name, type, value) ? NULL : no_memory();
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter(
    TRITONBACKEND_Response* response, const char* name, const char* value) {
  if (value == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "parameter value is null");
  return set_param(response, name, TRITONSERVER_PARAMETER_STRING, value);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter(
    TRITONBACKEND_Response* response, const char* name, const int64_t value) {
  return set_param(response, name, TRITONSERVER_PARAMETER_INT, &value);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter(
    TRITONBACKEND_Response* response, const char* name, const bool value) {
  return set_param(response, name, TRITONSERVER_PARAMETER_BOOL, &value);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter(
    TRITONBACKEND_Response* response, const char* name, const double value) {
  return set_param(response, name, TRITONSERVER_PARAMETER_DOUBLE, &value);
}

static TRITONBACKEND_Output* output_new(const char* name, TRITONSERVER_DataType datatype, const int64_t* shape,
                                        uint32_t n_dims, const host_io* io, bool batch) {
  TRITONBACKEND_Output* o = calloc(1, sizeof(*o));
  if (o == NULL) return NULL;
  uint32_t b = batch && n_dims > 0 ? 1 : 0;
  uint32_t n_out = io != NULL && io->reshape != NULL ? b + io->n_dims : n_dims;
  o->name = host_strdup(name);
  o->shape = malloc(sizeof(int64_t) * (n_out + 1));
  if (o->name == NULL || o->shape == NULL) {
    output_free(o);
    return NULL;
  }
  if (io != NULL && io->reshape != NULL) {
    /* the reference's InferenceResponse::Output::Reshape: back to the configuration's dims */
    if (b) o->shape[0] = shape[0];
    host_reshape(io->reshape, io->n_reshape, io->dims, io->n_dims, shape + b, o->shape + b);
  } else {
    memcpy(o->shape, shape, sizeof(int64_t) * n_dims);
  }
  o->n_dims = n_out;
  o->datatype = datatype;
  return o;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(
    TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count) {
  if (response == NULL || name == NULL || (shape == NULL && dims_count > 0))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response, name or shape is null");
  TRITONBACKEND_Model* m = response->channel->model;
  const host_io* io = host_find_io(m->outputs, m->n_outputs, name);
  if (io == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "unexpected inference output '%s' for model '%s'", name,
                      m->name);
  uint32_t n = response->n_outputs;
  if ((n & (n - 1)) == 0) {
    TRITONBACKEND_Output** grown = realloc(response->outputs, sizeof(*grown) * (n == 0 ? 1 : 2 * n));
    if (grown == NULL) return no_memory();
    response->outputs = grown;
  }
  TRITONBACKEND_Output* o = output_new(name, datatype, shape, dims_count, io, m->max_batch_size > 0);
  if (o == NULL) return no_memory();
  response->outputs[n] = o;
  response->n_outputs = n + 1;
  *output = o;
  return NULL;
}

static TRITONSERVER_Error* allocate(TRITONBACKEND_Output* o, void** buffer, uint64_t byte_size,
                                   TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  if (o->buffer != NULL)
    return host_error(TRITONSERVER_ERROR_ALREADY_EXISTS, "a buffer was already allocated for output '%s'", o->name);
  /* host memory whatever was asked for (no GPU here): the backend reads back what it got */
  o->buffer = malloc(byte_size == 0 ? 1 : byte_size);
  if (o->buffer == NULL)
    return host_error(TRITONSERVER_ERROR_UNAVAILABLE, "unable to allocate %llu bytes for output '%s'",
                      (unsigned long long)byte_size, o->name);
  o->byte_size = byte_size;
  *buffer = o->buffer;
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(
    TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  if (output == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "output is null");
  return allocate(output, buffer, buffer_byte_size, memory_type, memory_type_id);
}

TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes(
    TRITONBACKEND_Output* output, TRITONSERVER_BufferAttributes** buffer_attributes) {
  if (output == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "output is null");
  if (output->buffer == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "no buffer was allocated for output '%s'", output->name);
  output->attributes.memory_type = TRITONSERVER_MEMORY_CPU;
  output->attributes.memory_type_id = 0;
  output->attributes.cuda_ipc_handle = NULL;
  output->attributes.byte_size = output->byte_size;
  *buffer_attributes = &output->attributes; /* owned by the output */
  return NULL;
}

/* the updated implicit states of the response's request become outputs of the response (the sequence
 * batcher takes them out before the client sees it); NULL, or an error if there was no room */
static TRITONSERVER_Error* carry_states(TRITONBACKEND_Response* response) {
  host_channel* ch = response->channel;
  if (ch->states == NULL) return NULL; /* (read unlocked: only the request's own threads add them) */
  pthread_mutex_lock(&ch->queue->mu);
  struct TRITONBACKEND_State** at = &ch->states;
  TRITONSERVER_Error* err = NULL;
  while (*at != NULL) {
    struct TRITONBACKEND_State* s = *at;
    if (!s->updated) {
      at = &s->next;
      continue;
    }
    TRITONBACKEND_Output** grown = realloc(response->outputs, sizeof(*grown) * (response->n_outputs + 1));
    if (grown == NULL) {
      err = host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
      break;
    }
    response->outputs = grown;
    grown[response->n_outputs++] = &s->output;
    *at = s->next;
  }
  pthread_mutex_unlock(&ch->queue->mu);
  return err;
}

/* what a backend sends after a request's final response: refused, and logged (the backend may not) */
static TRITONSERVER_Error* late_send(host_channel* ch, const char* what) {
  TRITONSERVER_Error* err = host_error(
      TRITONSERVER_ERROR_INVALID_ARG, "model '%s': %s was sent after the request's final response; dropped",
      ch->model->name, what);
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_ERROR, "inferd", 0, err->msg);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSend(
    TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  host_channel* ch = response->channel;
  bool final = (send_flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) != 0;
  if (final ? atomic_exchange(&ch->final_sent, true) : atomic_load(&ch->final_sent)) {
    TRITONSERVER_Error* err = late_send(ch, "a response");
    inferd_host_response_free(response); /* owned by the host from here, sent or not */
    return err;
  }
  if (error != NULL) {
    response->error = host_copy_error(error); /* the backend still owns (and deletes) its error */
  } else if (carry_states(response) != NULL) {
    response->error = host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  }
  response->flags = final ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0;
  if (ch->model->decoupled && host_svc.decoupled_send != NULL) {
    /* flow control: the stream's window may hold this thread while the client reads slowly */
    host_svc.decoupled_send(ch, response, final);
    return NULL;
  }
  response->ev.kind = HOST_EV_RESPONSE;
  host_queue_push(ch->queue, &response->ev);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew(
    TRITONBACKEND_ResponseFactory** factory, TRITONBACKEND_Request* request) {
  CHECK_REQUEST(request);
  TRITONBACKEND_ResponseFactory* f = malloc(sizeof(*f));
  if (f == NULL) return no_memory();
  host_channel_ref(request->channel);
  f->channel = request->channel;
  *factory = f;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* factory) {
  if (factory == NULL) return NULL;
  host_channel* ch = factory->channel;
  free(factory);
  host_channel_unref(ch);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled(
    TRITONBACKEND_ResponseFactory* factory, bool* is_cancelled) {
  if (factory == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response factory is null");
  *is_cancelled = atomic_load_explicit(&factory->channel->cancelled, memory_order_relaxed);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags(
    TRITONBACKEND_ResponseFactory* factory, const uint32_t send_flags) {
  if (factory == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response factory is null");
  host_channel* ch = factory->channel;
  bool final = (send_flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) != 0;
  if (!final) return NULL; /* no other flag exists */
  if (atomic_exchange(&ch->final_sent, true)) return late_send(ch, "the final flag");
  if (ch->model->decoupled && host_svc.decoupled_send != NULL) {
    host_svc.decoupled_send(ch, NULL, true);
    return NULL;
  }
  host_flags_event* ev = malloc(sizeof(*ev));
  if (ev == NULL) return no_memory();
  host_channel_ref(ch);
  ev->channel = ch;
  ev->flags = send_flags;
  ev->ev.kind = HOST_EV_FLAGS;
  host_queue_push(ch->queue, &ev->ev);
  return NULL;
}

void inferd_host_flags_event_free(host_flags_event* ev) {
  host_channel* ch = ev->channel;
  free(ev);
  host_channel_unref(ch);
}

TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutputByName(
    TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType* datatype, const int64_t** shape,
    uint64_t* dim_count) {
  if (response == NULL || name == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  for (uint32_t i = 0; i < response->n_outputs; i++) {
    TRITONBACKEND_Output* o = response->outputs[i];
    if (strcmp(o->name, name) == 0) {
      *datatype = o->datatype;
      *shape = o->shape;
      *dim_count = o->n_dims;
      return NULL;
    }
  }
  return host_error(TRITONSERVER_ERROR_NOT_FOUND, "Output name %s not found", name);
}

TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutput(
    TRITONBACKEND_Response* response, const uint32_t index, const char** name, TRITONSERVER_DataType* datatype,
    const int64_t** shape, uint64_t* dim_count) {
  if (response == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "response is null");
  if (index >= response->n_outputs)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: response has %u outputs",
                      (unsigned)index, (unsigned)response->n_outputs);
  TRITONBACKEND_Output* o = response->outputs[index];
  *name = o->name;
  *datatype = o->datatype;
  *shape = o->shape;
  *dim_count = o->n_dims;
  return NULL;
}

/* ---- implicit state ----------------------------------------------------------------------------- */
TRITONSERVER_Error* TRITONBACKEND_StateNew(
    TRITONBACKEND_State** state, TRITONBACKEND_Request* request, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count) {
  CHECK_REQUEST(request);
  if (state == NULL || name == NULL || (shape == NULL && dims_count > 0))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "state, name or shape is null");
  TRITONBACKEND_Model* m = request->model;
  if (m->n_states == 0)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG,
                      "unable to add state '%s'. State configuration is missing for model '%s'.", name, m->name);
  if (host_find_io(m->states, m->n_states, name) == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "state '%s' is not a valid state name.", name);
  struct TRITONBACKEND_State* s = calloc(1, sizeof(*s));
  if (s == NULL) return no_memory();
  s->output.name = host_strdup(name);
  s->output.shape = malloc(sizeof(int64_t) * (dims_count + 1));
  if (s->output.name == NULL || s->output.shape == NULL) {
    output_free(&s->output);
    return no_memory();
  }
  if (dims_count > 0) memcpy(s->output.shape, shape, sizeof(int64_t) * dims_count);
  s->output.n_dims = dims_count;
  s->output.datatype = datatype;
  s->output.is_state = true;
  host_channel* ch = request->channel;
  pthread_mutex_lock(&ch->queue->mu);
  s->next = ch->states;
  ch->states = s;
  pthread_mutex_unlock(&ch->queue->mu);
  *state = s;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state) {
  if (state == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "state is null");
  state->updated = true; /* the request's next response carries it */
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_StateBuffer(
    TRITONBACKEND_State* state, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  if (state == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "state is null");
  if (state->output.buffer != NULL && state->output.byte_size == buffer_byte_size) {
    *buffer = state->output.buffer; /* asked again: the same buffer, as the reference's */
    *memory_type = TRITONSERVER_MEMORY_CPU;
    *memory_type_id = 0;
    return NULL;
  }
  free(state->output.buffer);
  state->output.buffer = NULL;
  return allocate(&state->output, buffer, buffer_byte_size, memory_type, memory_type_id);
}

TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes(
    TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** buffer_attributes) {
  if (state == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "state is null");
  return TRITONBACKEND_OutputBufferAttributes(&state->output, buffer_attributes);
}
