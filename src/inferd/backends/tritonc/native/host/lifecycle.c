/*
 * Backends, models and instances: their lifecycle as inferd drives it (open, initialize, finalize,
 * execute) and what a backend may ask of them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

static TRITONSERVER_Error* no_memory(void) { return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory"); }

static void borrowed_message(TRITONSERVER_Message* m, char* json) {
  m->json = json;
  m->size = json == NULL ? 0 : strlen(json);
  m->borrowed = true;
}

/* ---- backends -------------------------------------------------------------------------------- */
static TRITONSERVER_Error* entry_point(TRITONBACKEND_Backend* b, const char* name, bool optional, void** fn) {
  dlerror();
  *fn = dlsym(b->dl, name);
  const char* err = dlerror();
  if (*fn != NULL || optional) return NULL;
  /* the reference's text (shared_library.cc), with the backend and library inferd looked in */
  if (err != NULL)
    return host_error(TRITONSERVER_ERROR_NOT_FOUND,
                      "unable to find required entrypoint '%s' in shared library: %s", name, err);
  return host_error(TRITONSERVER_ERROR_NOT_FOUND, "unable to find required entrypoint '%s' in shared library",
                    name);
}

TRITONSERVER_Error* inferd_host_backend_open(
    const char* name, const char* dir, const char* libpath, const char* config_json,
    TRITONBACKEND_Backend** backend) {
  *backend = NULL;
  TRITONBACKEND_Backend* b = calloc(1, sizeof(*b));
  if (b == NULL) return no_memory();
  b->name = host_strdup(name);
  b->dir = host_strdup(dir);
  b->libpath = host_strdup(libpath);
  borrowed_message(&b->config, host_strdup(config_json));
  if (b->name == NULL || b->dir == NULL || b->libpath == NULL || b->config.json == NULL) {
    free(b->name);
    free(b->dir);
    free(b->libpath);
    free(b->config.json);
    free(b);
    return no_memory();
  }
  /* as the reference opens it: every symbol bound now (an unresolved one fails here, named), local */
  b->dl = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
  TRITONSERVER_Error* err = NULL;
  if (b->dl == NULL) {
    const char* why = dlerror();
    err = host_error(TRITONSERVER_ERROR_NOT_FOUND, "unable to load shared library: %s", why ? why : "?");
    goto fail;
  }
  void* fn;
#define ENTRY(field, sym, optional)                              \
  if ((err = entry_point(b, sym, optional, &fn)) != NULL) goto fail; \
  *(void**)&b->field = fn;
  ENTRY(init, "TRITONBACKEND_Initialize", true)
  ENTRY(fini, "TRITONBACKEND_Finalize", true)
  ENTRY(attr, "TRITONBACKEND_GetBackendAttribute", true)
  ENTRY(model_init, "TRITONBACKEND_ModelInitialize", true)
  ENTRY(model_fini, "TRITONBACKEND_ModelFinalize", true)
  ENTRY(inst_init, "TRITONBACKEND_ModelInstanceInitialize", true)
  ENTRY(inst_fini, "TRITONBACKEND_ModelInstanceFinalize", true)
  ENTRY(exec, "TRITONBACKEND_ModelInstanceExecute", false)
#undef ENTRY
  b->policy = TRITONBACKEND_EXECUTION_BLOCKING;
  *backend = b;
  return NULL;
fail:
  /* a library that loaded stays loaded: its static constructors ran, and dlclose would run its
   * destructors against state nobody finalized */
  free(b->name);
  free(b->dir);
  free(b->libpath);
  free(b->config.json);
  free(b);
  return err;
}

TRITONSERVER_Error* inferd_host_backend_initialize(TRITONBACKEND_Backend* backend) {
  if (backend->init != NULL) {
    TRITONSERVER_Error* err = host_guard(backend->init, backend, "TRITONBACKEND_Initialize");
    if (err != NULL) return err;
  }
  if (backend->attr != NULL) {
    struct TRITONBACKEND_BackendAttribute* a = &backend->attributes;
    a->policy = backend->policy;
    TRITONSERVER_Error* err = host_guard_attr(backend->attr, backend, a);
    if (err != NULL) return err;
    backend->policy = a->policy;
  }
  return NULL;
}

TRITONSERVER_Error* inferd_host_backend_finalize(TRITONBACKEND_Backend* backend) {
  /* the library stays loaded (see inferd_host_backend_open); the object lives as long as the process,
   * since threads the backend started may still read its name */
  if (backend->fini == NULL) return NULL;
  return host_guard(backend->fini, backend, "TRITONBACKEND_Finalize");
}

TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* backend, const char** name) {
  *name = backend->name;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* backend, TRITONSERVER_Message** config) {
  *config = &backend->config;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy* policy) {
  *policy = backend->policy;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy policy) {
  backend->policy = policy;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ArtifactType* artifact_type, const char** location) {
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = backend->dir;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager) {
  (void)backend;
  static int the_manager; /* one for every backend: host memory through malloc */
  *manager = (TRITONBACKEND_MemoryManager*)&the_manager;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendState(TRITONBACKEND_Backend* backend, void** state) {
  *state = backend->state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* backend, void* state) {
  backend->state = state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    TRITONBACKEND_BackendAttribute* attributes, const TRITONSERVER_InstanceGroupKind kind, const uint64_t count,
    const uint64_t* device_ids, const uint64_t id_count) {
  host_group* grown = realloc(attributes->groups, sizeof(host_group) * (attributes->n_groups + 1));
  if (grown == NULL) return no_memory();
  attributes->groups = grown;
  host_group* g = &grown[attributes->n_groups];
  g->kind = kind;
  g->count = count;
  g->n_devices = id_count;
  g->devices = NULL;
  if (id_count > 0) {
    g->devices = malloc(sizeof(uint64_t) * id_count);
    if (g->devices == NULL) return no_memory();
    memcpy(g->devices, device_ids, sizeof(uint64_t) * id_count);
  }
  attributes->n_groups++;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(
    TRITONBACKEND_BackendAttribute* attributes, bool enabled) {
  attributes->parallel_loading = enabled;
  return NULL;
}

/* ---- models ---------------------------------------------------------------------------------- */
TRITONSERVER_Error* inferd_host_model_new(
    TRITONBACKEND_Backend* backend, const char* name, uint64_t version, const char* repository,
    const char* config_json, bool auto_complete, bool decoupled, int64_t max_batch_size,
    TRITONBACKEND_Model** model) {
  TRITONBACKEND_Model* m = calloc(1, sizeof(*m));
  if (m == NULL) return no_memory();
  m->backend = backend;
  m->name = host_strdup(name);
  m->version = version;
  m->repository = host_strdup(repository);
  borrowed_message(&m->config, host_strdup(config_json));
  m->auto_complete = auto_complete;
  m->decoupled = decoupled;
  m->max_batch_size = max_batch_size;
  m->queue = inferd_host_queue_new();
  atomic_init(&m->open_channels, 0);
  if (m->name == NULL || m->repository == NULL || m->config.json == NULL || m->queue == NULL) {
    inferd_host_model_free(m);
    return host_error(TRITONSERVER_ERROR_INTERNAL, "unable to create the model (out of memory or file "
                                                   "descriptors)");
  }
  *model = m;
  return NULL;
}

TRITONSERVER_Error* inferd_host_model_add_io(
    TRITONBACKEND_Model* model, int kind, const char* name, const int64_t* dims, uint32_t n_dims,
    const int64_t* reshape, uint32_t n_reshape) {
  host_io** list = kind == 2 ? &model->states : kind == 1 ? &model->outputs : &model->inputs;
  uint32_t* n = kind == 2 ? &model->n_states : kind == 1 ? &model->n_outputs : &model->n_inputs;
  host_io* grown = realloc(*list, sizeof(host_io) * (*n + 1));
  if (grown == NULL) return no_memory();
  *list = grown;
  host_io* io = &grown[*n];
  memset(io, 0, sizeof(*io));
  io->name = host_strdup(name);
  io->dims = malloc(sizeof(int64_t) * (n_dims + 1));
  io->n_dims = n_dims;
  if (reshape != NULL) {
    io->reshape = malloc(sizeof(int64_t) * (n_reshape + 1));
    io->n_reshape = n_reshape;
  }
  (*n)++;
  if (io->name == NULL || io->dims == NULL || (reshape != NULL && io->reshape == NULL)) return no_memory();
  memcpy(io->dims, dims, sizeof(int64_t) * n_dims);
  if (reshape != NULL) memcpy(io->reshape, reshape, sizeof(int64_t) * n_reshape);
  return NULL;
}

TRITONSERVER_Error* inferd_host_model_initialize(TRITONBACKEND_Model* model) {
  if (model->backend->model_init == NULL) return NULL;
  return host_guard(model->backend->model_init, model, "TRITONBACKEND_ModelInitialize");
}

TRITONSERVER_Error* inferd_host_model_finalize(TRITONBACKEND_Model* model) {
  if (model->backend->model_fini == NULL) return NULL;
  return host_guard(model->backend->model_fini, model, "TRITONBACKEND_ModelFinalize");
}

static void free_ios(host_io* ios, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    free(ios[i].name);
    free(ios[i].dims);
    free(ios[i].reshape);
  }
  free(ios);
}

void inferd_host_model_free(TRITONBACKEND_Model* model) {
  if (model == NULL) return;
  free(model->name);
  free(model->repository);
  free(model->config.json);
  free(model->set_config);
  free_ios(model->inputs, model->n_inputs);
  free_ios(model->outputs, model->n_outputs);
  free_ios(model->states, model->n_states);
  if (model->queue != NULL) inferd_host_queue_free(model->queue);
  free(model);
}

TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name) {
  *name = model->name;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version) {
  *version = model->version;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelRepository(
    TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* artifact_type, const char** location) {
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = model->repository;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message** model_config) {
  if (config_version != 1)
    return host_error(TRITONSERVER_ERROR_UNSUPPORTED,
                      "model configuration version %u not supported, supported versions are: 1",
                      (unsigned)config_version);
  /* the caller owns the message: a copy (the one it set, once TRITONBACKEND_ModelSetConfig was called) */
  const char* json = model->set_config != NULL ? model->set_config : model->config.json;
  return TRITONSERVER_MessageNewFromSerializedJson(model_config, json, strlen(json));
}

TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* model, bool* auto_complete_config) {
  *auto_complete_config = model->auto_complete;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message* model_config) {
  if (config_version != 1)
    return host_error(TRITONSERVER_ERROR_UNSUPPORTED,
                      "model configuration version %u not supported, supported versions are: 1",
                      (unsigned)config_version);
  if (model_config == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "model configuration is null");
  /* read by inferd once ModelInitialize returns: parsed, completed and checked there */
  char* copy = host_strdup(model_config->json);
  if (copy == NULL) return no_memory();
  free(model->set_config);
  model->set_config = copy;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* model, TRITONSERVER_Server** server) {
  (void)model;
  static int the_server; /* one opaque handle: inferd's server, reached through host_svc */
  *server = (TRITONSERVER_Server*)&the_server;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend) {
  *backend = model->backend;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state) {
  *state = model->state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state) {
  model->state = state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelReportMemoryUsage(
    TRITONBACKEND_Model* model, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size) {
  /* accepted and not reported (the statistics' memory_usage stays empty, as for inferd's own backends) */
  (void)model;
  (void)usage;
  (void)usage_size;
  return NULL;
}

/* ---- instances -------------------------------------------------------------------------------- */
TRITONSERVER_Error* inferd_host_instance_new(
    TRITONBACKEND_Model* model, const char* name, TRITONSERVER_InstanceGroupKind kind, int32_t device_id,
    bool passive, const char* host_policy_json, TRITONBACKEND_ModelInstance** instance) {
  TRITONBACKEND_ModelInstance* i = calloc(1, sizeof(*i));
  if (i == NULL) return no_memory();
  i->model = model;
  i->name = host_strdup(name);
  i->kind = kind;
  i->device_id = device_id;
  i->passive = passive;
  borrowed_message(&i->host_policy, host_strdup(host_policy_json));
  pthread_mutex_init(&i->stats_mu, NULL);
  if (i->name == NULL || i->host_policy.json == NULL) {
    inferd_host_instance_free(i);
    return no_memory();
  }
  *instance = i;
  return NULL;
}

TRITONSERVER_Error* inferd_host_instance_initialize(TRITONBACKEND_ModelInstance* instance) {
  host_fn1 fn = instance->model->backend->inst_init;
  return fn == NULL ? NULL : host_guard(fn, instance, "TRITONBACKEND_ModelInstanceInitialize");
}

TRITONSERVER_Error* inferd_host_instance_finalize(TRITONBACKEND_ModelInstance* instance) {
  host_fn1 fn = instance->model->backend->inst_fini;
  return fn == NULL ? NULL : host_guard(fn, instance, "TRITONBACKEND_ModelInstanceFinalize");
}

void inferd_host_instance_free(TRITONBACKEND_ModelInstance* instance) {
  if (instance == NULL) return;
  pthread_mutex_destroy(&instance->stats_mu);
  free(instance->outcomes);
  free(instance->name);
  free(instance->host_policy.json);
  free(instance);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance, const char** name) {
  *name = instance->name;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind) {
  *kind = instance->kind;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance, int32_t* device_id) {
  *device_id = instance->device_id;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_Message** host_policy) {
  *host_policy = &instance->host_policy;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* instance, bool* is_passive) {
  *is_passive = instance->passive;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* instance, uint32_t* count) {
  (void)instance; /* optimization profiles are TensorRT's; none here */
  *count = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName(
    TRITONBACKEND_ModelInstance* instance, const uint32_t index, const char** profile_name) {
  (void)instance;
  (void)profile_name;
  return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: instance has 0 profiles",
                    (unsigned)index);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(
    TRITONBACKEND_ModelInstance* instance, uint32_t* count) {
  (void)instance;
  *count = 0;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(
    TRITONBACKEND_ModelInstance* instance, uint32_t index, const char** kind, int64_t* id) {
  (void)instance;
  (void)kind;
  (void)id;
  return host_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: instance has 0 secondary devices",
                    (unsigned)index);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model) {
  *model = instance->model;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state) {
  *state = instance->state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state) {
  instance->state = state;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportMemoryUsage(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size) {
  (void)instance;
  (void)usage;
  (void)usage_size;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns) {
  if (request == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "request is null");
  pthread_mutex_lock(&instance->stats_mu);
  if (request->epoch == instance->epoch && request->slot < instance->n_outcomes)
    instance->outcomes[request->slot] = success ? 1 : 0;
  pthread_mutex_unlock(&instance->stats_mu);
  request->stats_reported = true;
  request->success = success;
  request->exec_start = exec_start_ns;
  request->compute_start = compute_start_ns;
  request->compute_end = compute_end_ns;
  request->exec_end = exec_end_ns;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns,
    const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns) {
  instance->batch_reported = true;
  instance->batch_size = batch_size;
  instance->exec_start = exec_start_ns;
  instance->compute_start = compute_start_ns;
  instance->compute_end = compute_end_ns;
  instance->exec_end = exec_end_ns;
  return NULL;
}

/* ---- execute ----------------------------------------------------------------------------------- */
uint32_t inferd_host_instance_failures(TRITONBACKEND_ModelInstance* instance, uint32_t* out, uint32_t n) {
  uint32_t found = 0;
  pthread_mutex_lock(&instance->stats_mu);
  for (uint32_t i = 0; i < instance->n_outcomes && found < n; i++)
    if (instance->outcomes[i] == 0) out[found++] = i;
  pthread_mutex_unlock(&instance->stats_mu);
  return found;
}

TRITONSERVER_Error* inferd_host_execute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count) {
  instance->batch_reported = false;
  pthread_mutex_lock(&instance->stats_mu);
  instance->epoch++;
  instance->n_outcomes = 0;
  if (count > instance->cap_outcomes) {
    int8_t* grown = realloc(instance->outcomes, count);
    if (grown != NULL) {
      instance->outcomes = grown;
      instance->cap_outcomes = count;
    }
  }
  if (count <= instance->cap_outcomes) {
    instance->n_outcomes = count;
    memset(instance->outcomes, -1, count);
  }
  for (uint32_t i = 0; i < count; i++) {
    requests[i]->epoch = instance->epoch;
    requests[i]->slot = i;
  }
  pthread_mutex_unlock(&instance->stats_mu);
  TRITONSERVER_Error* err = host_guard_exec(instance->model->backend->exec, instance, requests, count);
  if (err == NULL) return NULL;
  /* the reference (backend_model_instance.cc): the backend kept no request; the caller answers each
   * with the error (inferd's pool, which counts them as failures); the host releases them, and marks
   * their channels answered so that nothing else is sent through them */
  for (uint32_t i = 0; i < count; i++) {
    TRITONBACKEND_Request* r = requests[i];
    if (r == NULL || atomic_load(&r->released)) continue;
    atomic_store(&r->channel->final_sent, true);
    TRITONSERVER_ErrorDelete(TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return err;
}
