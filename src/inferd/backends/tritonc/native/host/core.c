/*
 * The plain parts of the API: errors, messages, datatypes, parameters, logging, buffer attributes and the
 * memory manager. None of them reaches inferd's Python side except logging (through host_svc.log).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

host_services host_svc;
static atomic_uint log_levels = (1u << TRITONSERVER_LOG_INFO) | (1u << TRITONSERVER_LOG_WARN) |
                                (1u << TRITONSERVER_LOG_ERROR);

/* the error handed out when there is no memory for one (never freed: ErrorDelete knows it) */
static struct {
  TRITONSERVER_Error_Code code;
  char msg[32];
} no_memory = {TRITONSERVER_ERROR_INTERNAL, "out of memory"};
#define NO_MEMORY ((TRITONSERVER_Error*)&no_memory)

char* host_strdup(const char* s) {
  if (s == NULL) s = "";
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

static TRITONSERVER_Error* error_of(TRITONSERVER_Error_Code code, const char* msg, size_t n) {
  TRITONSERVER_Error* e = malloc(sizeof(*e) + n + 1);
  if (e == NULL) return NO_MEMORY;
  e->code = code;
  memcpy(e->msg, msg, n);
  e->msg[n] = '\0';
  return e;
}

TRITONSERVER_Error* host_error(TRITONSERVER_Error_Code code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n < sizeof(buf)) return error_of(code, buf, (size_t)n);
  char* big = malloc((size_t)n + 1); /* a message longer than the buffer: formatted again */
  if (big == NULL) return error_of(code, buf, sizeof(buf) - 1);
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  TRITONSERVER_Error* e = error_of(code, big, (size_t)n);
  free(big);
  return e;
}

TRITONSERVER_Error* host_unsupported(const char* function) {
  return host_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s is not supported by inferd's Triton backend host",
                    function);
}

TRITONSERVER_Error* host_copy_error(const TRITONSERVER_Error* error) {
  return error_of(error->code, error->msg, strlen(error->msg));
}

/* ---- errors ---------------------------------------------------------------------------------- */
TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  if (msg == NULL) msg = "";
  return error_of(code, msg, strlen(msg));
}

void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) {
  if (error != NULL && error != NO_MEMORY) free(error);
}

TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error) {
  return error == NULL ? TRITONSERVER_ERROR_UNKNOWN : error->code;
}

/* the words the reference's Status::CodeString gives each code */
const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error) {
  switch (TRITONSERVER_ErrorCode(error)) {
    case TRITONSERVER_ERROR_INTERNAL:
      return "Internal";
    case TRITONSERVER_ERROR_NOT_FOUND:
      return "Not found";
    case TRITONSERVER_ERROR_INVALID_ARG:
      return "Invalid argument";
    case TRITONSERVER_ERROR_UNAVAILABLE:
      return "Unavailable";
    case TRITONSERVER_ERROR_UNSUPPORTED:
      return "Unsupported";
    case TRITONSERVER_ERROR_ALREADY_EXISTS:
      return "Already exists";
    case TRITONSERVER_ERROR_CANCELLED:
      return "Cancelled";
    default:
      return "Unknown";
  }
}

const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error) { return error == NULL ? "" : error->msg; }

TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONSERVER_API_VERSION_MAJOR;
  *minor = TRITONSERVER_API_VERSION_MINOR;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONBACKEND_API_VERSION_MAJOR;
  *minor = TRITONBACKEND_API_VERSION_MINOR;
  return NULL;
}

/* ---- datatypes, memory types, kinds ---------------------------------------------------------- */
static const struct {
  const char* name;
  uint32_t size;
} datatypes[] = {
    [TRITONSERVER_TYPE_INVALID] = {"<invalid>", 0}, [TRITONSERVER_TYPE_BOOL] = {"BOOL", 1},
    [TRITONSERVER_TYPE_UINT8] = {"UINT8", 1},       [TRITONSERVER_TYPE_UINT16] = {"UINT16", 2},
    [TRITONSERVER_TYPE_UINT32] = {"UINT32", 4},     [TRITONSERVER_TYPE_UINT64] = {"UINT64", 8},
    [TRITONSERVER_TYPE_INT8] = {"INT8", 1},         [TRITONSERVER_TYPE_INT16] = {"INT16", 2},
    [TRITONSERVER_TYPE_INT32] = {"INT32", 4},       [TRITONSERVER_TYPE_INT64] = {"INT64", 8},
    [TRITONSERVER_TYPE_FP16] = {"FP16", 2},         [TRITONSERVER_TYPE_FP32] = {"FP32", 4},
    [TRITONSERVER_TYPE_FP64] = {"FP64", 8},         [TRITONSERVER_TYPE_BYTES] = {"BYTES", 0},
    [TRITONSERVER_TYPE_BF16] = {"BF16", 2},
};
#define N_DATATYPES (sizeof(datatypes) / sizeof(datatypes[0]))

const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype) {
  return (unsigned)datatype < N_DATATYPES ? datatypes[datatype].name : "<invalid>";
}

TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype) {
  if (dtype == NULL) return TRITONSERVER_TYPE_INVALID;
  for (unsigned i = 1; i < N_DATATYPES; i++)
    if (strcmp(dtype, datatypes[i].name) == 0) return (TRITONSERVER_DataType)i;
  return TRITONSERVER_TYPE_INVALID;
}

uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype) {
  return (unsigned)datatype < N_DATATYPES ? datatypes[datatype].size : 0;
}

const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype) {
  switch (memtype) {
    case TRITONSERVER_MEMORY_CPU:
      return "CPU";
    case TRITONSERVER_MEMORY_CPU_PINNED:
      return "CPU_PINNED";
    case TRITONSERVER_MEMORY_GPU:
      return "GPU";
    default:
      return "<invalid>";
  }
}

const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType paramtype) {
  switch (paramtype) {
    case TRITONSERVER_PARAMETER_STRING:
      return "STRING";
    case TRITONSERVER_PARAMETER_INT:
      return "INT";
    case TRITONSERVER_PARAMETER_BOOL:
      return "BOOL";
    case TRITONSERVER_PARAMETER_DOUBLE:
      return "DOUBLE";
    case TRITONSERVER_PARAMETER_BYTES:
      return "BYTES";
    default:
      return "<invalid>";
  }
}

const char* TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind kind) {
  switch (kind) {
    case TRITONSERVER_INSTANCEGROUPKIND_AUTO:
      return "AUTO";
    case TRITONSERVER_INSTANCEGROUPKIND_CPU:
      return "CPU";
    case TRITONSERVER_INSTANCEGROUPKIND_GPU:
      return "GPU";
    case TRITONSERVER_INSTANCEGROUPKIND_MODEL:
      return "MODEL";
    default:
      return "<invalid>";
  }
}

const char* TRITONSERVER_InferenceTraceLevelString(TRITONSERVER_InferenceTraceLevel level) {
  switch (level) {
    case TRITONSERVER_TRACE_LEVEL_DISABLED:
      return "DISABLED";
    case TRITONSERVER_TRACE_LEVEL_MIN:
      return "MIN";
    case TRITONSERVER_TRACE_LEVEL_MAX:
      return "MAX";
    case TRITONSERVER_TRACE_LEVEL_TIMESTAMPS:
      return "TIMESTAMPS";
    case TRITONSERVER_TRACE_LEVEL_TENSORS:
      return "TENSORS";
    default:
      return "<unknown>";
  }
}

const char* TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_InferenceTraceActivity activity) {
  static const char* names[] = {
      "REQUEST_START",        "QUEUE_START",          "COMPUTE_START",         "COMPUTE_INPUT_END",
      "COMPUTE_OUTPUT_START", "COMPUTE_END",          "REQUEST_END",           "TENSOR_QUEUE_INPUT",
      "TENSOR_BACKEND_INPUT", "TENSOR_BACKEND_OUTPUT", "CUSTOM_ACTIVITY",
  };
  return (unsigned)activity < sizeof(names) / sizeof(names[0]) ? names[activity] : "<unknown>";
}

/* ---- parameters ------------------------------------------------------------------------------ */
TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(
    const char* name, const TRITONSERVER_ParameterType type, const void* value) {
  if (name == NULL || value == NULL || type == TRITONSERVER_PARAMETER_BYTES) return NULL;
  TRITONSERVER_Parameter* p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->name = host_strdup(name);
  p->type = type;
  switch (type) {
    case TRITONSERVER_PARAMETER_STRING:
      p->v.s = host_strdup((const char*)value);
      if (p->v.s == NULL) goto fail;
      break;
    case TRITONSERVER_PARAMETER_INT:
      p->v.i = *(const int64_t*)value;
      break;
    case TRITONSERVER_PARAMETER_BOOL:
      p->v.b = *(const bool*)value;
      break;
    case TRITONSERVER_PARAMETER_DOUBLE:
      p->v.d = *(const double*)value;
      break;
    default:
      goto fail;
  }
  if (p->name != NULL) return p;
fail:
  TRITONSERVER_ParameterDelete(p);
  return NULL;
}

TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(const char* name, const void* byte_ptr, const uint64_t size) {
  if (name == NULL || (byte_ptr == NULL && size > 0)) return NULL;
  TRITONSERVER_Parameter* p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->name = host_strdup(name);
  p->type = TRITONSERVER_PARAMETER_BYTES;
  /* the reference keeps the caller's pointer: the bytes must outlive the parameter */
  p->v.bytes.data = (void*)byte_ptr;
  p->v.bytes.size = size;
  if (p->name == NULL) {
    free(p);
    return NULL;
  }
  return p;
}

void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter) {
  if (parameter == NULL) return;
  if (parameter->type == TRITONSERVER_PARAMETER_STRING) free(parameter->v.s);
  free(parameter->name);
  free(parameter);
}

const void* host_param_value(const host_param* p) {
  switch (p->type) {
    case TRITONSERVER_PARAMETER_STRING:
      return p->v.s;
    case TRITONSERVER_PARAMETER_INT:
      return &p->v.i;
    case TRITONSERVER_PARAMETER_BOOL:
      return &p->v.b;
    case TRITONSERVER_PARAMETER_DOUBLE:
      return &p->v.d;
    default:
      return NULL;
  }
}

bool host_params_add(host_param** list, uint32_t* count, const char* key, TRITONSERVER_ParameterType type,
                     const void* value) {
  uint32_t n = *count;
  if ((n & (n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
    host_param* grown = realloc(*list, sizeof(host_param) * (n == 0 ? 1 : 2 * n));
    if (grown == NULL) return false;
    *list = grown;
  }
  host_param* p = &(*list)[n];
  p->key = host_strdup(key);
  if (p->key == NULL) return false;
  p->type = type;
  switch (type) {
    case TRITONSERVER_PARAMETER_STRING:
      p->v.s = host_strdup((const char*)value);
      if (p->v.s == NULL) {
        free(p->key);
        return false;
      }
      break;
    case TRITONSERVER_PARAMETER_INT:
      p->v.i = *(const int64_t*)value;
      break;
    case TRITONSERVER_PARAMETER_BOOL:
      p->v.b = *(const bool*)value;
      break;
    case TRITONSERVER_PARAMETER_DOUBLE:
      p->v.d = *(const double*)value;
      break;
    default:
      free(p->key);
      return false;
  }
  *count = n + 1;
  return true;
}

void host_params_free(host_param* list, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) {
    free(list[i].key);
    if (list[i].type == TRITONSERVER_PARAMETER_STRING) free(list[i].v.s);
  }
  free(list);
}

/* ---- messages -------------------------------------------------------------------------------- */
TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(
    TRITONSERVER_Message** message, const char* base, size_t byte_size) {
  if (message == NULL || (base == NULL && byte_size > 0))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "message JSON is null");
  TRITONSERVER_Message* m = malloc(sizeof(*m));
  char* json = malloc(byte_size + 1);
  if (m == NULL || json == NULL) {
    free(m);
    free(json);
    return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  }
  if (byte_size > 0) memcpy(json, base, byte_size);
  json[byte_size] = '\0';
  m->json = json;
  m->size = byte_size;
  m->borrowed = false;
  *message = m;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message) {
  if (message != NULL && !message->borrowed) {
    free(message->json);
    free(message);
  }
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(
    TRITONSERVER_Message* message, const char** base, size_t* byte_size) {
  if (message == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "message is null");
  *base = message->json;
  *byte_size = message->size;
  return NULL;
}

/* ---- logging --------------------------------------------------------------------------------- */
void inferd_host_set_services(const host_services* services) { host_svc = *services; }

void inferd_host_set_log_levels(uint32_t mask) { atomic_store(&log_levels, mask); }

bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
  return (unsigned)level < 32 && (atomic_load(&log_levels) & (1u << level)) != 0;
}

TRITONSERVER_Error* TRITONSERVER_LogMessage(
    TRITONSERVER_LogLevel level, const char* filename, const int line, const char* msg) {
  if (!TRITONSERVER_LogIsEnabled(level)) return NULL;
  const char* base = filename == NULL ? "" : strrchr(filename, '/');
  base = base == NULL ? filename : base + 1;
  if (host_svc.log != NULL) {
    host_svc.log(level, base, line, msg == NULL ? "" : msg);
  } else {
    static const char levels[] = "IWEV";
    fprintf(stderr, "%c %s:%d] %s\n", (unsigned)level < 4 ? levels[level] : '?', base, line, msg ? msg : "");
  }
  return NULL;
}

/* ---- buffer attributes: host memory only ------------------------------------------------------ */

TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** buffer_attributes) {
  *buffer_attributes = calloc(1, sizeof(**buffer_attributes));
  return *buffer_attributes == NULL ? host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory") : NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* buffer_attributes) {
  free(buffer_attributes);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(
    TRITONSERVER_BufferAttributes* buffer_attributes, int64_t memory_type_id) {
  buffer_attributes->memory_type_id = memory_type_id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(
    TRITONSERVER_BufferAttributes* buffer_attributes, TRITONSERVER_MemoryType memory_type) {
  buffer_attributes->memory_type = memory_type;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetCudaIpcHandle(
    TRITONSERVER_BufferAttributes* buffer_attributes, void* cuda_ipc_handle) {
  buffer_attributes->cuda_ipc_handle = cuda_ipc_handle;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(
    TRITONSERVER_BufferAttributes* buffer_attributes, size_t byte_size) {
  buffer_attributes->byte_size = byte_size;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryTypeId(
    TRITONSERVER_BufferAttributes* buffer_attributes, int64_t* memory_type_id) {
  *memory_type_id = buffer_attributes->memory_type_id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(
    TRITONSERVER_BufferAttributes* buffer_attributes, TRITONSERVER_MemoryType* memory_type) {
  *memory_type = buffer_attributes->memory_type;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesCudaIpcHandle(
    TRITONSERVER_BufferAttributes* buffer_attributes, void** cuda_ipc_handle) {
  *cuda_ipc_handle = buffer_attributes->cuda_ipc_handle;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(
    TRITONSERVER_BufferAttributes* buffer_attributes, size_t* byte_size) {
  *byte_size = buffer_attributes->byte_size;
  return NULL;
}

/* ---- the memory manager: host memory (GPU memory is not served) -------------------------------- */
TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate(
    TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id, const uint64_t byte_size) {
  (void)manager;
  (void)memory_type_id;
  if (memory_type == TRITONSERVER_MEMORY_GPU)
    return host_error(TRITONSERVER_ERROR_UNSUPPORTED, "GPU memory is not available to backends in inferd");
  *buffer = malloc(byte_size == 0 ? 1 : byte_size);
  if (*buffer == NULL)
    return host_error(TRITONSERVER_ERROR_UNAVAILABLE, "unable to allocate %llu bytes",
                      (unsigned long long)byte_size);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree(
    TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id) {
  (void)manager;
  (void)memory_type;
  (void)memory_type_id;
  free(buffer);
  return NULL;
}

/* ---- reshape ---------------------------------------------------------------------------------- */
void host_reshape(const int64_t* from, uint32_t n_from, const int64_t* to, uint32_t n_to, const int64_t* actual,
                  int64_t* out) {
  uint32_t next = 0; /* the -1 dims of `from`, in order, fill the -1 dims of `to` */
  for (uint32_t j = 0; j < n_to; j++) {
    if (to[j] != -1) {
      out[j] = to[j];
      continue;
    }
    while (next < n_from && from[next] != -1) next++;
    out[j] = next < n_from ? actual[next++] : -1;
  }
}

const host_io* host_find_io(const host_io* ios, uint32_t n, const char* name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(ios[i].name, name) == 0) return &ios[i];
  return NULL;
}
