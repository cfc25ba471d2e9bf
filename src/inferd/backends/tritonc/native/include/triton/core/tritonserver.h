/*
 * inferd's declarations of the TRITONSERVER C API (server API 1.34, Triton 2.51), written for inferd's
 * host library (libtritonserver.so) and for backends built against it.
 *
 * A backend built with NVIDIA's tritonserver.h loads against this library unchanged: every enum
 * value, every function's name, parameters and result are the ones of that API version. The objects
 * are opaque: a backend only ever holds pointers to them. Where inferd does not serve a function
 * (server creation, tracing, the metrics text), it is still defined and answers a
 * TRITONSERVER_Error whose code is TRITONSERVER_ERROR_UNSUPPORTED and whose message names it.
 */
#ifndef INFERD_TRITONSERVER_H
#define INFERD_TRITONSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TRITONSERVER_DECLSPEC
#if defined(__GNUC__)
#define TRITONSERVER_DECLSPEC __attribute__((__visibility__("default")))
#else
#define TRITONSERVER_DECLSPEC
#endif
#endif
#define TS_FN TRITONSERVER_DECLSPEC

#define TRITONSERVER_API_VERSION_MAJOR 1
#define TRITONSERVER_API_VERSION_MINOR 34

/* ---- opaque objects ----------------------------------------------------------------------- */
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONSERVER_Metrics TRITONSERVER_Metrics;
typedef struct TRITONSERVER_Parameter TRITONSERVER_Parameter;
typedef struct TRITONSERVER_ResponseAllocator TRITONSERVER_ResponseAllocator;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_ServerOptions TRITONSERVER_ServerOptions;
typedef struct TRITONSERVER_Metric TRITONSERVER_Metric;
typedef struct TRITONSERVER_MetricFamily TRITONSERVER_MetricFamily;
typedef struct TRITONSERVER_MetricArgs TRITONSERVER_MetricArgs;

/* ---- enumerations (values are the ABI: never reorder) ------------------------------------- */
typedef enum TRITONSERVER_datatype_enum {
  TRITONSERVER_TYPE_INVALID = 0,
  TRITONSERVER_TYPE_BOOL = 1,
  TRITONSERVER_TYPE_UINT8 = 2,
  TRITONSERVER_TYPE_UINT16 = 3,
  TRITONSERVER_TYPE_UINT32 = 4,
  TRITONSERVER_TYPE_UINT64 = 5,
  TRITONSERVER_TYPE_INT8 = 6,
  TRITONSERVER_TYPE_INT16 = 7,
  TRITONSERVER_TYPE_INT32 = 8,
  TRITONSERVER_TYPE_INT64 = 9,
  TRITONSERVER_TYPE_FP16 = 10,
  TRITONSERVER_TYPE_FP32 = 11,
  TRITONSERVER_TYPE_FP64 = 12,
  TRITONSERVER_TYPE_BYTES = 13,
  TRITONSERVER_TYPE_BF16 = 14
} TRITONSERVER_DataType;

typedef enum TRITONSERVER_memorytype_enum {
  TRITONSERVER_MEMORY_CPU = 0,
  TRITONSERVER_MEMORY_CPU_PINNED = 1,
  TRITONSERVER_MEMORY_GPU = 2
} TRITONSERVER_MemoryType;

typedef enum TRITONSERVER_parametertype_enum {
  TRITONSERVER_PARAMETER_STRING = 0,
  TRITONSERVER_PARAMETER_INT = 1,
  TRITONSERVER_PARAMETER_BOOL = 2,
  TRITONSERVER_PARAMETER_DOUBLE = 3,
  TRITONSERVER_PARAMETER_BYTES = 4
} TRITONSERVER_ParameterType;

typedef enum TRITONSERVER_instancegroupkind_enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO = 0,
  TRITONSERVER_INSTANCEGROUPKIND_CPU = 1,
  TRITONSERVER_INSTANCEGROUPKIND_GPU = 2,
  TRITONSERVER_INSTANCEGROUPKIND_MODEL = 3
} TRITONSERVER_InstanceGroupKind;

typedef enum TRITONSERVER_loglevel_enum {
  TRITONSERVER_LOG_INFO = 0,
  TRITONSERVER_LOG_WARN = 1,
  TRITONSERVER_LOG_ERROR = 2,
  TRITONSERVER_LOG_VERBOSE = 3
} TRITONSERVER_LogLevel;

typedef enum TRITONSERVER_logformat_enum {
  TRITONSERVER_LOG_DEFAULT = 0,
  TRITONSERVER_LOG_ISO8601 = 1
} TRITONSERVER_LogFormat;

typedef enum TRITONSERVER_errorcode_enum {
  TRITONSERVER_ERROR_UNKNOWN = 0,
  TRITONSERVER_ERROR_INTERNAL = 1,
  TRITONSERVER_ERROR_NOT_FOUND = 2,
  TRITONSERVER_ERROR_INVALID_ARG = 3,
  TRITONSERVER_ERROR_UNAVAILABLE = 4,
  TRITONSERVER_ERROR_UNSUPPORTED = 5,
  TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
  TRITONSERVER_ERROR_CANCELLED = 7
} TRITONSERVER_Error_Code;

typedef enum tritonserver_metricformat_enum { TRITONSERVER_METRIC_PROMETHEUS = 0 } TRITONSERVER_MetricFormat;

typedef enum tritonserver_tracelevel_enum {
  TRITONSERVER_TRACE_LEVEL_DISABLED = 0,
  TRITONSERVER_TRACE_LEVEL_MIN = 1,
  TRITONSERVER_TRACE_LEVEL_MAX = 2,
  TRITONSERVER_TRACE_LEVEL_TIMESTAMPS = 4,
  TRITONSERVER_TRACE_LEVEL_TENSORS = 8
} TRITONSERVER_InferenceTraceLevel;

typedef enum tritonserver_traceactivity_enum {
  TRITONSERVER_TRACE_REQUEST_START = 0,
  TRITONSERVER_TRACE_QUEUE_START = 1,
  TRITONSERVER_TRACE_COMPUTE_START = 2,
  TRITONSERVER_TRACE_COMPUTE_INPUT_END = 3,
  TRITONSERVER_TRACE_COMPUTE_OUTPUT_START = 4,
  TRITONSERVER_TRACE_COMPUTE_END = 5,
  TRITONSERVER_TRACE_REQUEST_END = 6,
  TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT = 7,
  TRITONSERVER_TRACE_TENSOR_BACKEND_INPUT = 8,
  TRITONSERVER_TRACE_TENSOR_BACKEND_OUTPUT = 9,
  TRITONSERVER_TRACE_CUSTOM_ACTIVITY = 10
} TRITONSERVER_InferenceTraceActivity;

typedef enum tritonserver_requestflag_enum {
  TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1,
  TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
} TRITONSERVER_RequestFlag;

typedef enum tritonserver_requestreleaseflag_enum {
  TRITONSERVER_REQUEST_RELEASE_ALL = 1,
  TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
} TRITONSERVER_RequestReleaseFlag;

typedef enum tritonserver_responsecompleteflag_enum {
  TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
} TRITONSERVER_ResponseCompleteFlag;

typedef enum tritonserver_modelcontrolmode_enum {
  TRITONSERVER_MODEL_CONTROL_NONE = 0,
  TRITONSERVER_MODEL_CONTROL_POLL = 1,
  TRITONSERVER_MODEL_CONTROL_EXPLICIT = 2
} TRITONSERVER_ModelControlMode;

typedef enum tritonserver_ratelimitmode_enum {
  TRITONSERVER_RATE_LIMIT_OFF = 0,
  TRITONSERVER_RATE_LIMIT_EXEC_COUNT = 1
} TRITONSERVER_RateLimitMode;

typedef enum tritonserver_batchflag_enum {
  TRITONSERVER_BATCH_UNKNOWN = 1,
  TRITONSERVER_BATCH_FIRST_DIM = 2
} TRITONSERVER_ModelBatchFlag;

typedef enum tritonserver_modelindexflag_enum { TRITONSERVER_INDEX_FLAG_READY = 1 } TRITONSERVER_ModelIndexFlag;

typedef enum tritonserver_txn_property_flag_enum {
  TRITONSERVER_TXN_ONE_TO_ONE = 1,
  TRITONSERVER_TXN_DECOUPLED = 2
} TRITONSERVER_ModelTxnPropertyFlag;

typedef enum TRITONSERVER_metrickind_enum {
  TRITONSERVER_METRIC_KIND_COUNTER = 0,
  TRITONSERVER_METRIC_KIND_GAUGE = 1,
  TRITONSERVER_METRIC_KIND_HISTOGRAM = 2
} TRITONSERVER_MetricKind;

/* ---- callbacks ---------------------------------------------------------------------------- */
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorAllocFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, const char* tensor_name, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, void* userp, void** buffer,
    void** buffer_userp, TRITONSERVER_MemoryType* actual_memory_type, int64_t* actual_memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorBufferAttributesFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, const char* tensor_name,
    TRITONSERVER_BufferAttributes* buffer_attributes, void* userp, void* buffer_userp);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorQueryFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* userp, const char* tensor_name, size_t* byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorReleaseFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* buffer, void* buffer_userp, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorStartFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* userp);
typedef void (*TRITONSERVER_InferenceTraceActivityFn_t)(
    TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity, uint64_t timestamp_ns,
    void* userp);
typedef void (*TRITONSERVER_InferenceTraceTensorActivityFn_t)(
    TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity, const char* name,
    TRITONSERVER_DataType datatype, const void* base, size_t byte_size, const int64_t* shape,
    uint64_t dim_count, TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, void* userp);
typedef void (*TRITONSERVER_InferenceTraceReleaseFn_t)(TRITONSERVER_InferenceTrace* trace, void* userp);
typedef void (*TRITONSERVER_InferenceRequestReleaseFn_t)(
    TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp);
typedef void (*TRITONSERVER_InferenceResponseCompleteFn_t)(
    TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp);

/* ---- version, datatypes, memory types, parameters, instance kinds ------------------------- */
TS_FN TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor);
TS_FN const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype);
TS_FN TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype);
TS_FN uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype);
TS_FN const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype);
TS_FN const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType paramtype);
TS_FN TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(
    const char* name, const TRITONSERVER_ParameterType type, const void* value);
TS_FN TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(
    const char* name, const void* byte_ptr, const uint64_t size);
TS_FN void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter);
TS_FN const char* TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind kind);

/* ---- logging ------------------------------------------------------------------------------ */
TS_FN bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level);
TS_FN TRITONSERVER_Error* TRITONSERVER_LogMessage(
    TRITONSERVER_LogLevel level, const char* filename, const int line, const char* msg);

/* ---- errors ------------------------------------------------------------------------------- */
TS_FN TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
TS_FN void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
TS_FN TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error);
TS_FN const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error);
TS_FN const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);

/* ---- response allocators ------------------------------------------------------------------ */
TS_FN TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(
    TRITONSERVER_ResponseAllocator** allocator, TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn,
    TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn, TRITONSERVER_ResponseAllocatorStartFn_t start_fn);
TS_FN TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(
    TRITONSERVER_ResponseAllocator* allocator,
    TRITONSERVER_ResponseAllocatorBufferAttributesFn_t buffer_attributes_fn);
TS_FN TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetQueryFunction(
    TRITONSERVER_ResponseAllocator* allocator, TRITONSERVER_ResponseAllocatorQueryFn_t query_fn);
TS_FN TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* allocator);

/* ---- messages (JSON) ---------------------------------------------------------------------- */
TS_FN TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(
    TRITONSERVER_Message** message, const char* base, size_t byte_size);
TS_FN TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);
TS_FN TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(
    TRITONSERVER_Message* message, const char** base, size_t* byte_size);

/* ---- server metrics text ------------------------------------------------------------------ */
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricsDelete(TRITONSERVER_Metrics* metrics);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricsFormatted(
    TRITONSERVER_Metrics* metrics, TRITONSERVER_MetricFormat format, const char** base, size_t* byte_size);

/* ---- traces ------------------------------------------------------------------------------- */
TS_FN const char* TRITONSERVER_InferenceTraceLevelString(TRITONSERVER_InferenceTraceLevel level);
TS_FN const char* TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_InferenceTraceActivity activity);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceNew(
    TRITONSERVER_InferenceTrace** trace, TRITONSERVER_InferenceTraceLevel level, uint64_t parent_id,
    TRITONSERVER_InferenceTraceActivityFn_t activity_fn, TRITONSERVER_InferenceTraceReleaseFn_t release_fn,
    void* trace_userp);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceTensorNew(
    TRITONSERVER_InferenceTrace** trace, TRITONSERVER_InferenceTraceLevel level, uint64_t parent_id,
    TRITONSERVER_InferenceTraceActivityFn_t activity_fn,
    TRITONSERVER_InferenceTraceTensorActivityFn_t tensor_activity_fn,
    TRITONSERVER_InferenceTraceReleaseFn_t release_fn, void* trace_userp);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceReportActivity(
    TRITONSERVER_InferenceTrace* trace, uint64_t timestamp, const char* activity_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceDelete(TRITONSERVER_InferenceTrace* trace);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceId(TRITONSERVER_InferenceTrace* trace, uint64_t* id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceParentId(
    TRITONSERVER_InferenceTrace* trace, uint64_t* parent_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelName(
    TRITONSERVER_InferenceTrace* trace, const char** model_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelVersion(
    TRITONSERVER_InferenceTrace* trace, int64_t* model_version);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceRequestId(
    TRITONSERVER_InferenceTrace* trace, const char** request_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceSpawnChildTrace(
    TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTrace** child_trace);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceSetContext(
    TRITONSERVER_InferenceTrace* trace, const char* trace_context);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceTraceContext(
    TRITONSERVER_InferenceTrace* trace, const char** trace_context);

/* ---- inference requests (what a backend sends to another model: BLS) ----------------------- */
#define TS_Req TRITONSERVER_InferenceRequest
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestNew(
    TS_Req** inference_request, TRITONSERVER_Server* server, const char* model_name,
    const int64_t model_version);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestDelete(TS_Req* inference_request);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestId(TS_Req* inference_request, const char** id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetId(TS_Req* inference_request, const char* id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestFlags(TS_Req* inference_request, uint32_t* flags);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetFlags(TS_Req* inference_request, uint32_t flags);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestCorrelationId(
    TS_Req* inference_request, uint64_t* correlation_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestCorrelationIdString(
    TS_Req* inference_request, const char** correlation_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationId(
    TS_Req* inference_request, uint64_t correlation_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationIdString(
    TS_Req* inference_request, const char* correlation_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestCancel(TS_Req* inference_request);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestIsCancelled(TS_Req* inference_request, bool* is_cancelled);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestPriority(TS_Req* inference_request, uint32_t* priority);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestPriorityUInt64(
    TS_Req* inference_request, uint64_t* priority);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriority(TS_Req* inference_request, uint32_t priority);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriorityUInt64(
    TS_Req* inference_request, uint64_t priority);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestTimeoutMicroseconds(
    TS_Req* inference_request, uint64_t* timeout_us);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(
    TS_Req* inference_request, uint64_t timeout_us);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddInput(
    TS_Req* inference_request, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape,
    uint64_t dim_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRawInput(TS_Req* inference_request, const char* name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveInput(TS_Req* inference_request, const char* name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputs(TS_Req* inference_request);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputData(
    TS_Req* inference_request, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(
    TS_Req* inference_request, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, const char* host_policy_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    TS_Req* inference_request, const char* name, const void* base,
    TRITONSERVER_BufferAttributes* buffer_attributes);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputData(
    TS_Req* inference_request, const char* name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRequestedOutput(
    TS_Req* inference_request, const char* name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveRequestedOutput(
    TS_Req* inference_request, const char* name);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(TS_Req* inference_request);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(
    TS_Req* inference_request, TRITONSERVER_InferenceRequestReleaseFn_t request_release_fn,
    void* request_release_userp);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(
    TS_Req* inference_request, TRITONSERVER_ResponseAllocator* response_allocator,
    void* response_allocator_userp, TRITONSERVER_InferenceResponseCompleteFn_t response_fn,
    void* response_userp);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetStringParameter(
    TS_Req* request, const char* key, const char* value);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetIntParameter(
    TS_Req* request, const char* key, const int64_t value);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetBoolParameter(
    TS_Req* request, const char* key, const bool value);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetDoubleParameter(
    TS_Req* request, const char* key, const double value);

/* ---- inference responses (what comes back to a BLS request) ------------------------------- */
#define TS_Resp TRITONSERVER_InferenceResponse
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TS_Resp* inference_response);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TS_Resp* inference_response);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseModel(
    TS_Resp* inference_response, const char** model_name, int64_t* model_version);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseId(TS_Resp* inference_response, const char** request_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameterCount(
    TS_Resp* inference_response, uint32_t* count);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameter(
    TS_Resp* inference_response, const uint32_t index, const char** name, TRITONSERVER_ParameterType* type,
    const void** vvalue);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(TS_Resp* inference_response, uint32_t* count);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(
    TS_Resp* inference_response, const uint32_t index, const char** name, TRITONSERVER_DataType* datatype,
    const int64_t** shape, uint64_t* dim_count, const void** base, size_t* byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id, void** userp);
TS_FN TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputClassificationLabel(
    TS_Resp* inference_response, const uint32_t index, const size_t class_index, const char** label);

/* ---- buffer attributes -------------------------------------------------------------------- */
#define TS_BufAttr TRITONSERVER_BufferAttributes
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TS_BufAttr** buffer_attributes);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TS_BufAttr* buffer_attributes);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(
    TS_BufAttr* buffer_attributes, int64_t memory_type_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(
    TS_BufAttr* buffer_attributes, TRITONSERVER_MemoryType memory_type);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetCudaIpcHandle(
    TS_BufAttr* buffer_attributes, void* cuda_ipc_handle);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TS_BufAttr* buffer_attributes, size_t byte_size);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryTypeId(
    TS_BufAttr* buffer_attributes, int64_t* memory_type_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(
    TS_BufAttr* buffer_attributes, TRITONSERVER_MemoryType* memory_type);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesCudaIpcHandle(
    TS_BufAttr* buffer_attributes, void** cuda_ipc_handle);
TS_FN TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TS_BufAttr* buffer_attributes, size_t* byte_size);

/* ---- server options (creating a server: not served by inferd's host) ----------------------- */
#define TS_Opts TRITONSERVER_ServerOptions
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsNew(TS_Opts** options);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsDelete(TS_Opts* options);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetServerId(TS_Opts* options, const char* server_id);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelRepositoryPath(
    TS_Opts* options, const char* model_repository_path);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelControlMode(
    TS_Opts* options, TRITONSERVER_ModelControlMode mode);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStartupModel(TS_Opts* options, const char* model_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStrictModelConfig(TS_Opts* options, bool strict);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelConfigName(
    TS_Opts* options, const char* model_config_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetRateLimiterMode(
    TS_Opts* options, TRITONSERVER_RateLimitMode mode);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsAddRateLimiterResource(
    TS_Opts* options, const char* resource_name, const size_t resource_count, const int device);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize(TS_Opts* options, uint64_t size);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize(
    TS_Opts* options, int gpu_device, uint64_t size);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize(
    TS_Opts* options, int gpu_device, size_t cuda_virtual_address_size);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetResponseCacheByteSize(TS_Opts* options, uint64_t size);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCacheConfig(
    TS_Opts* options, const char* cache_name, const char* config_json);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCacheDirectory(TS_Opts* options, const char* cache_dir);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(TS_Opts* options, double cc);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetExitOnError(TS_Opts* options, bool exit);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStrictReadiness(TS_Opts* options, bool strict);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetExitTimeout(TS_Opts* options, unsigned int timeout);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBufferManagerThreadCount(
    TS_Opts* options, unsigned int thread_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadThreadCount(
    TS_Opts* options, unsigned int thread_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadRetryCount(
    TS_Opts* options, unsigned int retry_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelNamespacing(TS_Opts* options, bool enable_namespace);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetEnablePeerAccess(TS_Opts* options, bool enable_peer_access);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogFile(TS_Opts* options, const char* file);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogInfo(TS_Opts* options, bool log);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogWarn(TS_Opts* options, bool log);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogError(TS_Opts* options, bool log);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogFormat(
    TS_Opts* options, const TRITONSERVER_LogFormat format);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogVerbose(TS_Opts* options, int level);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetrics(TS_Opts* options, bool metrics);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetGpuMetrics(TS_Opts* options, bool gpu_metrics);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCpuMetrics(TS_Opts* options, bool cpu_metrics);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetricsInterval(
    TS_Opts* options, uint64_t metrics_interval_ms);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBackendDirectory(TS_Opts* options, const char* backend_dir);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetRepoAgentDirectory(
    TS_Opts* options, const char* repoagent_dir);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(
    TS_Opts* options, const TRITONSERVER_InstanceGroupKind kind, const int device_id, const double fraction);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBackendConfig(
    TS_Opts* options, const char* backend_name, const char* setting, const char* value);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetHostPolicy(
    TS_Opts* options, const char* policy_name, const char* setting, const char* value);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetricsConfig(
    TS_Opts* options, const char* name, const char* setting, const char* value);

/* ---- the server ----------------------------------------------------------------------------- */
#define TS_Srv TRITONSERVER_Server
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerNew(TS_Srv** server, TS_Opts* options);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerDelete(TS_Srv* server);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerStop(TS_Srv* server);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerSetExitTimeout(TS_Srv* server, unsigned int timeout);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerRegisterModelRepository(
    TS_Srv* server, const char* repository_path, const TRITONSERVER_Parameter** name_mapping,
    const uint32_t mapping_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerUnregisterModelRepository(TS_Srv* server, const char* repository_path);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerPollModelRepository(TS_Srv* server);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerIsLive(TS_Srv* server, bool* live);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerIsReady(TS_Srv* server, bool* ready);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelIsReady(
    TS_Srv* server, const char* model_name, const int64_t model_version, bool* ready);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelBatchProperties(
    TS_Srv* server, const char* model_name, const int64_t model_version, uint32_t* flags, void** voidp);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelTransactionProperties(
    TS_Srv* server, const char* model_name, const int64_t model_version, uint32_t* txn_flags, void** voidp);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerMetadata(TS_Srv* server, TRITONSERVER_Message** server_metadata);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelMetadata(
    TS_Srv* server, const char* model_name, const int64_t model_version, TRITONSERVER_Message** model_metadata);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelStatistics(
    TS_Srv* server, const char* model_name, const int64_t model_version, TRITONSERVER_Message** model_stats);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelConfig(
    TS_Srv* server, const char* model_name, const int64_t model_version, const uint32_t config_version,
    TRITONSERVER_Message** model_config);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerModelIndex(
    TS_Srv* server, uint32_t flags, TRITONSERVER_Message** model_index);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerLoadModel(TS_Srv* server, const char* model_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerLoadModelWithParameters(
    TS_Srv* server, const char* model_name, const TRITONSERVER_Parameter** parameters,
    const uint64_t parameter_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerUnloadModel(TS_Srv* server, const char* model_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerUnloadModelAndDependents(TS_Srv* server, const char* model_name);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerMetrics(TS_Srv* server, TRITONSERVER_Metrics** metrics);
TS_FN TRITONSERVER_Error* TRITONSERVER_ServerInferAsync(
    TS_Srv* server, TS_Req* inference_request, TRITONSERVER_InferenceTrace* trace);

/* ---- custom metrics ----------------------------------------------------------------------- */
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(
    TRITONSERVER_MetricFamily** family, const TRITONSERVER_MetricKind kind, const char* name,
    const char* description);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family);
TS_FN TRITONSERVER_Error* TRITONSERVER_GetMetricFamilyKind(
    TRITONSERVER_MetricFamily* family, TRITONSERVER_MetricKind* kind);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** args);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricArgsSetHistogram(
    TRITONSERVER_MetricArgs* args, const double* buckets, const uint64_t buckets_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* args);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricNew(
    TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels,
    const uint64_t label_count);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricNewWithArgs(
    TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels,
    const uint64_t label_count, const TRITONSERVER_MetricArgs* args);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricValue(TRITONSERVER_Metric* metric, double* value);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value);
TS_FN TRITONSERVER_Error* TRITONSERVER_MetricObserve(TRITONSERVER_Metric* metric, double value);
TS_FN TRITONSERVER_Error* TRITONSERVER_GetMetricKind(TRITONSERVER_Metric* metric, TRITONSERVER_MetricKind* kind);

/* the shorthands above are this file's own */
#undef TS_FN
#undef TS_Req
#undef TS_Resp
#undef TS_BufAttr
#undef TS_Opts
#undef TS_Srv

#ifdef __cplusplus
}
#endif

#endif /* INFERD_TRITONSERVER_H */
