/*
 * inferd's host library for Triton backends: the objects behind the TRITONSERVER_* and TRITONBACKEND_*
 * handles, and the few functions (inferd_host_*) through which inferd's Python extension (ext/_tritonc.c)
 * drives them. Nothing here knows Python: what the extension keeps of a request (its tensors' buffers,
 * its response stream) travels as opaque pointers (`ctx`).
 *
 * Threads. A backend calls the API from any thread: the instance's execute thread, threads of its own.
 * Requests and responses are owned by one thread at a time (the backend's, until it hands them back:
 * RequestRelease, ResponseSend); what several threads share (a request's channel, the completion queue)
 * is counted with atomics or held under the queue's mutex. Everything a backend hands back reaches the
 * Python side as an event on the model's completion queue, which wakes the event loop through an eventfd
 * once per batch of events.
 */
#ifndef INFERD_HOST_H
#define INFERD_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "triton/core/tritonbackend.h"
#include "triton/core/tritonserver.h"

#define HOST_API __attribute__((visibility("default")))
#define HOST_PRINTF(a, b) __attribute__((format(printf, a, b)))

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors and messages ------------------------------------------------------------------- */
struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  char msg[];
};

/* a new error with a printf-style message (never NULL: an allocation failure gives a static one) */
TRITONSERVER_Error* host_error(TRITONSERVER_Error_Code code, const char* fmt, ...) HOST_PRINTF(2, 3);
/* the answer of every function inferd does not serve */
TRITONSERVER_Error* host_unsupported(const char* function);
TRITONSERVER_Error* host_copy_error(const TRITONSERVER_Error* error);

struct TRITONSERVER_Message {
  char* json; /* NUL-terminated */
  size_t size;
  bool borrowed; /* owned by a host object: MessageDelete must not free it */
};

struct TRITONSERVER_BufferAttributes {
  int64_t memory_type_id;
  TRITONSERVER_MemoryType memory_type;
  void* cuda_ipc_handle;
  size_t byte_size;
};

/* a copy of `s` (NULL on allocation failure) */
char* host_strdup(const char* s);

/* ---- parameters ---------------------------------------------------------------------------- */
typedef struct host_param {
  char* key;
  TRITONSERVER_ParameterType type;
  union {
    int64_t i;
    bool b;
    double d;
    char* s;
  } v;
} host_param;

struct TRITONSERVER_Parameter {
  char* name;
  TRITONSERVER_ParameterType type;
  union {
    int64_t i;
    bool b;
    double d;
    char* s;
    struct {
      void* data;
      uint64_t size;
    } bytes;
  } v;
};

/* what a parameter's value pointer is, as TRITONBACKEND_RequestParameter hands it out: the string itself
 * for STRING, else a pointer to the value */
const void* host_param_value(const host_param* p);
/* append a parameter to a growable list (false on allocation failure) */
bool host_params_add(host_param** list, uint32_t* count, const char* key, TRITONSERVER_ParameterType type,
                     const void* value);
void host_params_free(host_param* list, uint32_t count);

/* ---- the completion queue: events for the event loop --------------------------------------- */
typedef enum {
  HOST_EV_RESPONSE = 1, /* a response was sent (event = the response) */
  HOST_EV_FLAGS = 2,    /* only flags were sent (ResponseFactorySendFlags) */
  HOST_EV_RELEASED = 3, /* the backend released a request (event = the request) */
  HOST_EV_CLOSED = 4,   /* nothing refers to a channel any more (event = the channel) */
} host_event_kind;

typedef struct host_event {
  struct host_event* next;
  host_event_kind kind;
} host_event;

typedef struct host_queue {
  pthread_mutex_t mu;
  host_event* head;
  host_event** tail;
  int efd;
  bool signalled;
  bool quiet; /* the loop itself drains right after (an execute on the loop): no eventfd write */
} host_queue;

HOST_API host_queue* inferd_host_queue_new(void);
HOST_API void inferd_host_queue_free(host_queue* q);
/* every event queued so far, oldest first (the eventfd read, then the list taken under the lock);
 * read_fd false: the caller drains without having been woken (it will be woken once more at most) */
HOST_API host_event* inferd_host_queue_take(host_queue* q, bool read_fd);
HOST_API void inferd_host_queue_quiet(host_queue* q, bool quiet);
void host_queue_push(host_queue* q, host_event* ev);

/* ---- a request's channel: what its responses go through ------------------------------------ */
typedef struct host_channel {
  host_event ev; /* HOST_EV_CLOSED */
  atomic_int refs; /* the request, each response factory, each response not yet sent or deleted */
  atomic_bool cancelled;
  atomic_bool final_sent;
  struct TRITONBACKEND_State* states; /* TRITONBACKEND_StateNew's, under the queue's mutex */
  host_queue* queue;
  struct TRITONBACKEND_Model* model;
  void* ctx; /* the extension's: where responses go */
} host_channel;

void host_channel_ref(host_channel* ch);
void host_channel_unref(host_channel* ch);

/* ---- backends, models, instances ----------------------------------------------------------- */
typedef TRITONSERVER_Error* (*host_fn1)(void*);
typedef TRITONSERVER_Error* (*host_exec_fn)(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request**, const uint32_t);
typedef TRITONSERVER_Error* (*host_attr_fn)(TRITONBACKEND_Backend*, TRITONBACKEND_BackendAttribute*);

typedef struct host_group {
  TRITONSERVER_InstanceGroupKind kind;
  uint64_t count;
  uint64_t* devices;
  uint64_t n_devices;
} host_group;

struct TRITONBACKEND_BackendAttribute {
  TRITONBACKEND_ExecutionPolicy policy;
  host_group* groups;
  uint32_t n_groups;
  bool parallel_loading;
};

struct TRITONBACKEND_Backend {
  char* name;
  char* dir;
  char* libpath;
  TRITONSERVER_Message config;
  void* dl;
  host_fn1 init, fini, model_init, model_fini, inst_init, inst_fini;
  host_exec_fn exec;
  host_attr_fn attr;
  void* state;
  TRITONBACKEND_ExecutionPolicy policy;
  struct TRITONBACKEND_BackendAttribute attributes;
};

/* a tensor of the model's configuration, as far as the host needs it (reshape) */
typedef struct host_io {
  char* name;
  int64_t* dims;
  uint32_t n_dims;
  int64_t* reshape; /* NULL: none */
  uint32_t n_reshape;
} host_io;

struct TRITONBACKEND_Model {
  TRITONBACKEND_Backend* backend;
  char* name;
  uint64_t version;
  char* repository;
  TRITONSERVER_Message config;
  char* set_config; /* what TRITONBACKEND_ModelSetConfig handed in (NULL: not called) */
  bool auto_complete;
  bool decoupled;
  int64_t max_batch_size;
  void* state;
  host_io* inputs;
  uint32_t n_inputs;
  host_io* outputs;
  uint32_t n_outputs;
  host_io* states; /* sequence_batching's implicit states, by output_name */
  uint32_t n_states;
  host_queue* queue;
  atomic_long open_channels;
};

struct TRITONBACKEND_ModelInstance {
  TRITONBACKEND_Model* model;
  char* name;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id;
  bool passive;
  TRITONSERVER_Message host_policy;
  void* state;
  /* TRITONBACKEND_ModelInstanceReportBatchStatistics of the execute under way */
  bool batch_reported;
  uint64_t batch_size, exec_start, compute_start, compute_end, exec_end;
  /* what ReportStatistics said of each request of the last execute (-1: nothing, 0: failed, 1: success),
   * under stats_mu: a backend may report from its own threads while the execute returns */
  pthread_mutex_t stats_mu;
  uint64_t epoch;
  int8_t* outcomes;
  uint32_t n_outcomes, cap_outcomes;
};

/* the requests of the last execute that the backend reported as failed (their positions), into out
 * (room for n); how many */
HOST_API uint32_t inferd_host_instance_failures(TRITONBACKEND_ModelInstance* instance, uint32_t* out, uint32_t n);

/* lifecycle, driven by the extension; each returns NULL or an error the caller owns */
HOST_API TRITONSERVER_Error* inferd_host_backend_open(
    const char* name, const char* dir, const char* libpath, const char* config_json,
    TRITONBACKEND_Backend** backend);
HOST_API TRITONSERVER_Error* inferd_host_backend_initialize(TRITONBACKEND_Backend* backend);
HOST_API TRITONSERVER_Error* inferd_host_backend_finalize(TRITONBACKEND_Backend* backend);
HOST_API TRITONSERVER_Error* inferd_host_model_new(
    TRITONBACKEND_Backend* backend, const char* name, uint64_t version, const char* repository,
    const char* config_json, bool auto_complete, bool decoupled, int64_t max_batch_size,
    TRITONBACKEND_Model** model);
/* a tensor of the configuration (kind 0: an input, 1: an output, 2: an implicit state's output_name);
 * reshape NULL: none */
HOST_API TRITONSERVER_Error* inferd_host_model_add_io(
    TRITONBACKEND_Model* model, int kind, const char* name, const int64_t* dims, uint32_t n_dims,
    const int64_t* reshape, uint32_t n_reshape);
HOST_API TRITONSERVER_Error* inferd_host_model_initialize(TRITONBACKEND_Model* model);
HOST_API TRITONSERVER_Error* inferd_host_model_finalize(TRITONBACKEND_Model* model);
HOST_API void inferd_host_model_free(TRITONBACKEND_Model* model);
HOST_API TRITONSERVER_Error* inferd_host_instance_new(
    TRITONBACKEND_Model* model, const char* name, TRITONSERVER_InstanceGroupKind kind, int32_t device_id,
    bool passive, const char* host_policy_json, TRITONBACKEND_ModelInstance** instance);
HOST_API TRITONSERVER_Error* inferd_host_instance_initialize(TRITONBACKEND_ModelInstance* instance);
HOST_API TRITONSERVER_Error* inferd_host_instance_finalize(TRITONBACKEND_ModelInstance* instance);
HOST_API void inferd_host_instance_free(TRITONBACKEND_ModelInstance* instance);
/* one execute; on an error the backend returns, the host releases every request it did not (the caller
 * answers them with the error, as the reference does) and the caller owns the error */
HOST_API TRITONSERVER_Error* inferd_host_execute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);

/* ---- requests ------------------------------------------------------------------------------ */
struct TRITONBACKEND_Input {
  TRITONSERVER_BufferAttributes attributes; /* what InputBufferAttributes answers (host memory) */
  const char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape; /* as the backend sees it: the batch dimension, then the reshaped dims */
  uint32_t n_dims;
  const void* data;
  uint64_t byte_size;
};

struct TRITONBACKEND_Request {
  host_event ev; /* HOST_EV_RELEASED */
  host_channel* channel;
  TRITONBACKEND_Model* model;
  void* ctx; /* the extension's: what keeps the inputs' memory alive */
  char* id;
  uint64_t correlation_id;
  char* correlation_id_str; /* NULL: the id is a number */
  uint32_t flags;
  uint64_t priority;
  uint64_t timeout_us;
  TRITONBACKEND_Input* inputs;
  uint32_t n_inputs;
  char** outputs;
  uint32_t n_outputs;
  host_param* params;
  uint32_t n_params;
  atomic_bool released;
  uint64_t epoch; /* the execute it belongs to (its instance's epoch then) and its place in the batch */
  uint32_t slot;
  /* TRITONBACKEND_ModelInstanceReportStatistics */
  bool stats_reported;
  bool success;
  uint64_t exec_start, compute_start, compute_end, exec_end;
};

/* a request with room for its inputs, outputs and parameters; its channel is new (refs 1) */
HOST_API TRITONBACKEND_Request* inferd_host_request_new(
    TRITONBACKEND_Model* model, void* ctx, void* channel_ctx, uint32_t n_inputs, uint32_t n_outputs);
/* input `i`: the name and shape are copied; the data is borrowed until the request is released */
HOST_API TRITONSERVER_Error* inferd_host_request_set_input(
    TRITONBACKEND_Request* request, uint32_t i, const char* name, TRITONSERVER_DataType datatype,
    const int64_t* shape, uint32_t n_dims, const void* data, uint64_t byte_size);
HOST_API TRITONSERVER_Error* inferd_host_request_set_output(
    TRITONBACKEND_Request* request, uint32_t i, const char* name);
HOST_API TRITONSERVER_Error* inferd_host_request_add_param(
    TRITONBACKEND_Request* request, const char* key, TRITONSERVER_ParameterType type, const void* value);
HOST_API TRITONSERVER_Error* inferd_host_request_set_id(TRITONBACKEND_Request* request, const char* id);
HOST_API TRITONSERVER_Error* inferd_host_request_set_correlation(
    TRITONBACKEND_Request* request, uint64_t id, const char* id_str);
/* a request the backend released (its HOST_EV_RELEASED event): freed, its channel let go */
HOST_API void inferd_host_request_free(TRITONBACKEND_Request* request);
/* a request that never reached the backend: freed with its channel, no event queued */
HOST_API void inferd_host_request_discard(TRITONBACKEND_Request* request);
/* the client no longer wants the answers (any thread) */
HOST_API void inferd_host_channel_cancel(host_channel* channel);

/* ---- responses ----------------------------------------------------------------------------- */
struct TRITONBACKEND_Output {
  TRITONSERVER_BufferAttributes attributes; /* what OutputBufferAttributes answers, once allocated */
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t n_dims;
  void* buffer; /* malloc'd by the response allocator; the extension takes it over */
  uint64_t byte_size;
  bool is_state; /* an implicit state's next value (TRITONBACKEND_StateNew) */
};

struct TRITONBACKEND_Response {
  host_event ev; /* HOST_EV_RESPONSE */
  host_channel* channel;
  TRITONBACKEND_Output** outputs;
  uint32_t n_outputs;
  host_param* params;
  uint32_t n_params;
  TRITONSERVER_Error* error; /* a copy of what the backend sent */
  uint32_t flags;
};

/* what the extension's drain calls once it took a response's outputs */
HOST_API void inferd_host_response_free(TRITONBACKEND_Response* response);

/* an implicit state's next value: an output (first member: freed as one) the next response carries
 * once TRITONBACKEND_StateUpdate was called */
struct TRITONBACKEND_State {
  struct TRITONBACKEND_Output output;
  struct TRITONBACKEND_State* next;
  bool updated;
};

typedef struct host_flags_event {
  host_event ev; /* HOST_EV_FLAGS */
  host_channel* channel;
  uint32_t flags;
} host_flags_event;

/* the extension frees what the events carry */
HOST_API void inferd_host_flags_event_free(host_flags_event* ev);
HOST_API void inferd_host_channel_free(host_channel* ch);

/* ---- requests to other models (BLS) ---------------------------------------------------------- */
struct TRITONSERVER_ResponseAllocator {
  TRITONSERVER_ResponseAllocatorAllocFn_t alloc;
  TRITONSERVER_ResponseAllocatorReleaseFn_t release;
  TRITONSERVER_ResponseAllocatorStartFn_t start;
  TRITONSERVER_ResponseAllocatorQueryFn_t query;
  TRITONSERVER_ResponseAllocatorBufferAttributesFn_t attributes;
};

typedef struct bls_buffer {
  const void* base; /* the backend's, until the request is released */
  size_t size;
} bls_buffer;

typedef struct bls_input {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t n_dims;
  bls_buffer* buffers;
  uint32_t n_buffers;
  bool removed;
} bls_input;

struct TRITONSERVER_InferenceRequest {
  char* model;
  int64_t version;
  char* id;
  uint32_t flags;
  uint64_t correlation_id;
  char* correlation_id_str;
  uint64_t priority;
  uint64_t timeout_us;
  bls_input* inputs;
  uint32_t n_inputs;
  char** outputs;
  uint32_t n_outputs;
  host_param* params;
  uint32_t n_params;
  TRITONSERVER_InferenceRequestReleaseFn_t release_fn;
  void* release_userp;
  TRITONSERVER_ResponseAllocator* allocator;
  void* alloc_userp;
  TRITONSERVER_InferenceResponseCompleteFn_t response_fn;
  void* response_userp;
  atomic_bool cancelled;
  bool submitted;
};

typedef struct bls_output {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t n_dims;
  void* buffer;
  void* buffer_userp;
  size_t byte_size;
  TRITONSERVER_MemoryType memory_type;
  int64_t memory_type_id;
} bls_output;

struct TRITONSERVER_InferenceResponse {
  char* model;
  int64_t version;
  char* id;
  TRITONSERVER_Error* error;
  bls_output* outputs;
  uint32_t n_outputs;
  host_param* params;
  uint32_t n_params;
  TRITONSERVER_ResponseAllocator* allocator; /* gives the outputs' buffers back on delete */
  bool started;
};

/* what the extension calls to answer a request (on the loop, the GIL let go around the backend's
 * callbacks): a response, its outputs (allocated by the request's allocator, the bytes copied in), its
 * parameters or error (the response takes it), then respond (final: the request is released after) */
HOST_API TRITONSERVER_InferenceResponse* inferd_host_bls_response_new(
    TRITONSERVER_InferenceRequest* request, const char* model, int64_t version, const char* id);
HOST_API TRITONSERVER_Error* inferd_host_bls_response_add_output(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceResponse* response, const char* name,
    TRITONSERVER_DataType datatype, const int64_t* shape, uint32_t n_dims, const void* data, size_t byte_size);
HOST_API TRITONSERVER_Error* inferd_host_bls_response_add_param(
    TRITONSERVER_InferenceResponse* response, const char* key, TRITONSERVER_ParameterType type, const void* value);
HOST_API void inferd_host_bls_response_set_error(TRITONSERVER_InferenceResponse* response, TRITONSERVER_Error* error);
HOST_API void inferd_host_bls_respond(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceResponse* response, bool final);

/* ---- logging and the server's services, answered by the extension ------------------------- */
typedef void (*host_log_fn)(TRITONSERVER_LogLevel level, const char* file, int line, const char* msg);
typedef TRITONSERVER_Error* (*host_model_ready_fn)(const char* name, int64_t version, bool* ready);
typedef TRITONSERVER_Error* (*host_model_txn_fn)(const char* name, int64_t version, uint32_t* flags);
typedef TRITONSERVER_Error* (*host_infer_async_fn)(TRITONSERVER_InferenceRequest* request);
typedef void (*host_bls_cancel_fn)(TRITONSERVER_InferenceRequest* request);
/* custom metrics on the server's /metrics (metrics.c): family_new answers whether the server keeps them
 * (*kept false: the host keeps them itself); metric ops: 0 value, 1 increment, 2 set, 3 observe */
typedef TRITONSERVER_Error* (*host_metric_family_fn)(bool create, const char* name, const char* description,
                                                     int kind, bool* kept);
typedef TRITONSERVER_Error* (*host_metric_new_fn)(const char* family, const TRITONSERVER_Parameter** labels,
                                                  uint64_t n_labels, const double* buckets, uint64_t n_buckets,
                                                  bool histogram, int64_t* id);
typedef void (*host_metric_delete_fn)(int64_t id);
/* a decoupled model's response (NULL: the final flag alone), sent from the backend's thread straight
 * to its stream, which may make the thread wait while the client reads slowly; takes the response */
typedef void (*host_decoupled_send_fn)(host_channel* channel, TRITONBACKEND_Response* response, bool final);
typedef TRITONSERVER_Error* (*host_metric_op_fn)(int64_t id, int op, double value, double* result);

typedef struct host_services {
  host_log_fn log;
  host_model_ready_fn model_ready;
  host_model_txn_fn model_txn;
  host_infer_async_fn infer_async;
  host_bls_cancel_fn bls_cancel;
  host_metric_family_fn metric_family;
  host_metric_new_fn metric_new;
  host_metric_delete_fn metric_delete;
  host_metric_op_fn metric_op;
  host_decoupled_send_fn decoupled_send;
} host_services;

HOST_API void inferd_host_set_services(const host_services* services);
/* which levels TRITONSERVER_LogIsEnabled says are on: a bit per TRITONSERVER_LogLevel */
HOST_API void inferd_host_set_log_levels(uint32_t mask);
extern host_services host_svc;

/* the exception guard (guard.cc): a backend entry point run with every C++ exception turned into an
 * error naming `what`, so that none unwinds through the host's C frames */
TRITONSERVER_Error* host_guard(host_fn1 fn, void* arg, const char* what);
TRITONSERVER_Error* host_guard_exec(
    host_exec_fn fn, TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);
TRITONSERVER_Error* host_guard_attr(host_attr_fn fn, TRITONBACKEND_Backend* backend,
                                    TRITONBACKEND_BackendAttribute* attributes);

/* reshape `from` (its -1 dims' values taken from `actual`) into `to`; out has room for n_to values */
void host_reshape(const int64_t* from, uint32_t n_from, const int64_t* to, uint32_t n_to, const int64_t* actual,
                  int64_t* out);
const host_io* host_find_io(const host_io* ios, uint32_t n, const char* name);

#ifdef __cplusplus
}
#endif

#endif /* INFERD_HOST_H */
