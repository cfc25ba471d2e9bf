/*
 * Every function of the API that inferd's host does not serve: defined, so that a backend naming it
 * loads, and answering a TRITONSERVER_ERROR_UNSUPPORTED error that names it (never an abort). A backend
 * calls these to create or drive a server of its own, to trace, or to read the server's metadata.
 *
 * Each STUB is checked against its declaration in the headers: a wrong parameter list does not compile.
 */
#define _GNU_SOURCE
#include "host.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define STUB(name, params) \
  TRITONSERVER_Error* name params { return host_unsupported(#name); }

STUB(TRITONSERVER_MetricsDelete, (TRITONSERVER_Metrics* metrics))
STUB(TRITONSERVER_MetricsFormatted,
     (TRITONSERVER_Metrics* metrics, TRITONSERVER_MetricFormat format, const char** base, size_t* byte_size))
STUB(TRITONSERVER_InferenceTraceNew,
     (TRITONSERVER_InferenceTrace** trace, TRITONSERVER_InferenceTraceLevel level, uint64_t parent_id, TRITONSERVER_InferenceTraceActivityFn_t activity_fn, TRITONSERVER_InferenceTraceReleaseFn_t release_fn, void* trace_userp))
STUB(TRITONSERVER_InferenceTraceTensorNew,
     (TRITONSERVER_InferenceTrace** trace, TRITONSERVER_InferenceTraceLevel level, uint64_t parent_id, TRITONSERVER_InferenceTraceActivityFn_t activity_fn, TRITONSERVER_InferenceTraceTensorActivityFn_t tensor_activity_fn, TRITONSERVER_InferenceTraceReleaseFn_t release_fn, void* trace_userp))
STUB(TRITONSERVER_InferenceTraceReportActivity,
     (TRITONSERVER_InferenceTrace* trace, uint64_t timestamp, const char* activity_name))
STUB(TRITONSERVER_InferenceTraceDelete, (TRITONSERVER_InferenceTrace* trace))
STUB(TRITONSERVER_InferenceTraceId, (TRITONSERVER_InferenceTrace* trace, uint64_t* id))
STUB(TRITONSERVER_InferenceTraceParentId, (TRITONSERVER_InferenceTrace* trace, uint64_t* parent_id))
STUB(TRITONSERVER_InferenceTraceModelName, (TRITONSERVER_InferenceTrace* trace, const char** model_name))
STUB(TRITONSERVER_InferenceTraceModelVersion, (TRITONSERVER_InferenceTrace* trace, int64_t* model_version))
STUB(TRITONSERVER_InferenceTraceRequestId, (TRITONSERVER_InferenceTrace* trace, const char** request_id))
STUB(TRITONSERVER_InferenceTraceSpawnChildTrace,
     (TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTrace** child_trace))
STUB(TRITONSERVER_InferenceTraceSetContext, (TRITONSERVER_InferenceTrace* trace, const char* trace_context))
STUB(TRITONSERVER_InferenceTraceContext, (TRITONSERVER_InferenceTrace* trace, const char** trace_context))
STUB(TRITONSERVER_InferenceRequestAddRawInput,
     (TRITONSERVER_InferenceRequest* inference_request, const char* name))
STUB(TRITONSERVER_ServerOptionsNew, (TRITONSERVER_ServerOptions** options))
STUB(TRITONSERVER_ServerOptionsDelete, (TRITONSERVER_ServerOptions* options))
STUB(TRITONSERVER_ServerOptionsSetServerId, (TRITONSERVER_ServerOptions* options, const char* server_id))
STUB(TRITONSERVER_ServerOptionsSetModelRepositoryPath,
     (TRITONSERVER_ServerOptions* options, const char* model_repository_path))
STUB(TRITONSERVER_ServerOptionsSetModelControlMode,
     (TRITONSERVER_ServerOptions* options, TRITONSERVER_ModelControlMode mode))
STUB(TRITONSERVER_ServerOptionsSetStartupModel, (TRITONSERVER_ServerOptions* options, const char* model_name))
STUB(TRITONSERVER_ServerOptionsSetStrictModelConfig, (TRITONSERVER_ServerOptions* options, bool strict))
STUB(TRITONSERVER_ServerOptionsSetModelConfigName,
     (TRITONSERVER_ServerOptions* options, const char* model_config_name))
STUB(TRITONSERVER_ServerOptionsSetRateLimiterMode,
     (TRITONSERVER_ServerOptions* options, TRITONSERVER_RateLimitMode mode))
STUB(TRITONSERVER_ServerOptionsAddRateLimiterResource,
     (TRITONSERVER_ServerOptions* options, const char* resource_name, const size_t resource_count, const int device))
STUB(TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize,
     (TRITONSERVER_ServerOptions* options, uint64_t size))
STUB(TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize,
     (TRITONSERVER_ServerOptions* options, int gpu_device, uint64_t size))
STUB(TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize,
     (TRITONSERVER_ServerOptions* options, int gpu_device, size_t cuda_virtual_address_size))
STUB(TRITONSERVER_ServerOptionsSetResponseCacheByteSize, (TRITONSERVER_ServerOptions* options, uint64_t size))
STUB(TRITONSERVER_ServerOptionsSetCacheConfig,
     (TRITONSERVER_ServerOptions* options, const char* cache_name, const char* config_json))
STUB(TRITONSERVER_ServerOptionsSetCacheDirectory,
     (TRITONSERVER_ServerOptions* options, const char* cache_dir))
STUB(TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability,
     (TRITONSERVER_ServerOptions* options, double cc))
STUB(TRITONSERVER_ServerOptionsSetExitOnError, (TRITONSERVER_ServerOptions* options, bool exit))
STUB(TRITONSERVER_ServerOptionsSetStrictReadiness, (TRITONSERVER_ServerOptions* options, bool strict))
STUB(TRITONSERVER_ServerOptionsSetExitTimeout, (TRITONSERVER_ServerOptions* options, unsigned int timeout))
STUB(TRITONSERVER_ServerOptionsSetBufferManagerThreadCount,
     (TRITONSERVER_ServerOptions* options, unsigned int thread_count))
STUB(TRITONSERVER_ServerOptionsSetModelLoadThreadCount,
     (TRITONSERVER_ServerOptions* options, unsigned int thread_count))
STUB(TRITONSERVER_ServerOptionsSetModelLoadRetryCount,
     (TRITONSERVER_ServerOptions* options, unsigned int retry_count))
STUB(TRITONSERVER_ServerOptionsSetModelNamespacing,
     (TRITONSERVER_ServerOptions* options, bool enable_namespace))
STUB(TRITONSERVER_ServerOptionsSetEnablePeerAccess,
     (TRITONSERVER_ServerOptions* options, bool enable_peer_access))
STUB(TRITONSERVER_ServerOptionsSetLogFile, (TRITONSERVER_ServerOptions* options, const char* file))
STUB(TRITONSERVER_ServerOptionsSetLogInfo, (TRITONSERVER_ServerOptions* options, bool log))
STUB(TRITONSERVER_ServerOptionsSetLogWarn, (TRITONSERVER_ServerOptions* options, bool log))
STUB(TRITONSERVER_ServerOptionsSetLogError, (TRITONSERVER_ServerOptions* options, bool log))
STUB(TRITONSERVER_ServerOptionsSetLogFormat,
     (TRITONSERVER_ServerOptions* options, const TRITONSERVER_LogFormat format))
STUB(TRITONSERVER_ServerOptionsSetLogVerbose, (TRITONSERVER_ServerOptions* options, int level))
STUB(TRITONSERVER_ServerOptionsSetMetrics, (TRITONSERVER_ServerOptions* options, bool metrics))
STUB(TRITONSERVER_ServerOptionsSetGpuMetrics, (TRITONSERVER_ServerOptions* options, bool gpu_metrics))
STUB(TRITONSERVER_ServerOptionsSetCpuMetrics, (TRITONSERVER_ServerOptions* options, bool cpu_metrics))
STUB(TRITONSERVER_ServerOptionsSetMetricsInterval,
     (TRITONSERVER_ServerOptions* options, uint64_t metrics_interval_ms))
STUB(TRITONSERVER_ServerOptionsSetBackendDirectory,
     (TRITONSERVER_ServerOptions* options, const char* backend_dir))
STUB(TRITONSERVER_ServerOptionsSetRepoAgentDirectory,
     (TRITONSERVER_ServerOptions* options, const char* repoagent_dir))
STUB(TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit,
     (TRITONSERVER_ServerOptions* options, const TRITONSERVER_InstanceGroupKind kind, const int device_id, const double fraction))
STUB(TRITONSERVER_ServerOptionsSetBackendConfig,
     (TRITONSERVER_ServerOptions* options, const char* backend_name, const char* setting, const char* value))
STUB(TRITONSERVER_ServerOptionsSetHostPolicy,
     (TRITONSERVER_ServerOptions* options, const char* policy_name, const char* setting, const char* value))
STUB(TRITONSERVER_ServerOptionsSetMetricsConfig,
     (TRITONSERVER_ServerOptions* options, const char* name, const char* setting, const char* value))
STUB(TRITONSERVER_ServerNew, (TRITONSERVER_Server** server, TRITONSERVER_ServerOptions* options))
STUB(TRITONSERVER_ServerDelete, (TRITONSERVER_Server* server))
STUB(TRITONSERVER_ServerStop, (TRITONSERVER_Server* server))
STUB(TRITONSERVER_ServerSetExitTimeout, (TRITONSERVER_Server* server, unsigned int timeout))
STUB(TRITONSERVER_ServerRegisterModelRepository,
     (TRITONSERVER_Server* server, const char* repository_path, const TRITONSERVER_Parameter** name_mapping, const uint32_t mapping_count))
STUB(TRITONSERVER_ServerUnregisterModelRepository, (TRITONSERVER_Server* server, const char* repository_path))
STUB(TRITONSERVER_ServerPollModelRepository, (TRITONSERVER_Server* server))
STUB(TRITONSERVER_ServerMetadata, (TRITONSERVER_Server* server, TRITONSERVER_Message** server_metadata))
STUB(TRITONSERVER_ServerModelMetadata,
     (TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, TRITONSERVER_Message** model_metadata))
STUB(TRITONSERVER_ServerModelStatistics,
     (TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, TRITONSERVER_Message** model_stats))
STUB(TRITONSERVER_ServerModelConfig,
     (TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, const uint32_t config_version, TRITONSERVER_Message** model_config))
STUB(TRITONSERVER_ServerModelIndex,
     (TRITONSERVER_Server* server, uint32_t flags, TRITONSERVER_Message** model_index))
STUB(TRITONSERVER_ServerLoadModel, (TRITONSERVER_Server* server, const char* model_name))
STUB(TRITONSERVER_ServerLoadModelWithParameters,
     (TRITONSERVER_Server* server, const char* model_name, const TRITONSERVER_Parameter** parameters, const uint64_t parameter_count))
STUB(TRITONSERVER_ServerUnloadModel, (TRITONSERVER_Server* server, const char* model_name))
STUB(TRITONSERVER_ServerUnloadModelAndDependents, (TRITONSERVER_Server* server, const char* model_name))
STUB(TRITONSERVER_ServerMetrics, (TRITONSERVER_Server* server, TRITONSERVER_Metrics** metrics))
