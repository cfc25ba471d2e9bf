/*
 * inferd's declarations of the TRITONBACKEND C API (backend API 1.19, Triton 2.51).
 *
 * Two halves: the functions a host (inferd's libtritonserver.so) provides to backends, and the entry
 * points a backend library (libtriton_<name>.so) provides to its host; only
 * TRITONBACKEND_ModelInstanceExecute is required of a backend. Same ABI as the API version above:
 * names, parameters, results and enum values.
 */
#ifndef INFERD_TRITONBACKEND_H
#define INFERD_TRITONBACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "triton/core/tritonserver.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TRITONBACKEND_DECLSPEC
#if defined(__GNUC__)
#define TRITONBACKEND_DECLSPEC __attribute__((__visibility__("default")))
#else
#define TRITONBACKEND_DECLSPEC
#endif
#endif
/* what the host provides, and what a backend provides */
#define TB_FN TRITONBACKEND_DECLSPEC
#define TB_ENTRY TRITONBACKEND_DECLSPEC
#define TB_Err TRITONSERVER_Error

#define TRITONBACKEND_API_VERSION_MAJOR 1
#define TRITONBACKEND_API_VERSION_MINOR 19

typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_State TRITONBACKEND_State;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_ModelInstanceResponseStatistics TRITONBACKEND_ModelInstanceResponseStatistics;
typedef struct TRITONBACKEND_BackendAttribute TRITONBACKEND_BackendAttribute;
typedef struct TRITONBACKEND_Batcher TRITONBACKEND_Batcher;

typedef enum TRITONBACKEND_artifacttype_enum { TRITONBACKEND_ARTIFACT_FILESYSTEM = 0 } TRITONBACKEND_ArtifactType;

typedef enum TRITONBACKEND_execpolicy_enum {
  TRITONBACKEND_EXECUTION_BLOCKING = 0,
  TRITONBACKEND_EXECUTION_DEVICE_BLOCKING = 1
} TRITONBACKEND_ExecutionPolicy;

/* ===== provided by the host ================================================================ */

TB_FN TB_Err* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);

/* ---- memory manager ----------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_MemoryManagerAllocate(
    TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id, const uint64_t byte_size);
TB_FN TB_Err* TRITONBACKEND_MemoryManagerFree(
    TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id);

/* ---- request inputs and response outputs -------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_InputProperties(
    TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape,
    uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
TB_FN TB_Err* TRITONBACKEND_InputPropertiesForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const char** name,
    TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size,
    uint32_t* buffer_count);
TB_FN TB_Err* TRITONBACKEND_InputBuffer(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
TB_FN TB_Err* TRITONBACKEND_InputBufferForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const uint32_t index, const void** buffer,
    uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
TB_FN TB_Err* TRITONBACKEND_InputBufferAttributes(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
    TRITONSERVER_BufferAttributes** buffer_attributes);
TB_FN TB_Err* TRITONBACKEND_OutputBuffer(
    TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
TB_FN TB_Err* TRITONBACKEND_OutputBufferAttributes(
    TRITONBACKEND_Output* output, TRITONSERVER_BufferAttributes** buffer_attributes);

/* ---- requests ----------------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_RequestId(TRITONBACKEND_Request* request, const char** id);
TB_FN TB_Err* TRITONBACKEND_RequestIsCancelled(TRITONBACKEND_Request* request, bool* is_cancelled);
TB_FN TB_Err* TRITONBACKEND_ResponseFactoryIsCancelled(
    TRITONBACKEND_ResponseFactory* factory, bool* is_cancelled);
TB_FN TB_Err* TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* request, uint64_t* id);
TB_FN TB_Err* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(
    TRITONBACKEND_Request* request, uint64_t* timeout);
TB_FN TB_Err* TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* request, const char** id);
TB_FN TB_Err* TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* request, uint32_t* flags);
TB_FN TB_Err* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* request, uint32_t* count);
TB_FN TB_Err* TRITONBACKEND_RequestParameter(
    TRITONBACKEND_Request* request, const uint32_t index, const char** key, TRITONSERVER_ParameterType* type,
    const void** vvalue);
TB_FN TB_Err* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count);
TB_FN TB_Err* TRITONBACKEND_RequestInputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** input_name);
TB_FN TB_Err* TRITONBACKEND_RequestInput(
    TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input);
TB_FN TB_Err* TRITONBACKEND_RequestInputByIndex(
    TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input);
TB_FN TB_Err* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count);
TB_FN TB_Err* TRITONBACKEND_RequestOutputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** output_name);
TB_FN TB_Err* TRITONBACKEND_RequestOutputBufferProperties(
    TRITONBACKEND_Request* request, const char* name, size_t* byte_size, TRITONSERVER_MemoryType* memory_type,
    int64_t* memory_type_id);
TB_FN TB_Err* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags);
TB_FN TB_Err* TRITONBACKEND_RequestTrace(TRITONBACKEND_Request* request, TRITONSERVER_InferenceTrace** trace);

/* ---- responses ---------------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_ResponseFactoryNew(
    TRITONBACKEND_ResponseFactory** factory, TRITONBACKEND_Request* request);
TB_FN TB_Err* TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* factory);
TB_FN TB_Err* TRITONBACKEND_ResponseFactorySendFlags(
    TRITONBACKEND_ResponseFactory* factory, const uint32_t send_flags);
TB_FN TB_Err* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
TB_FN TB_Err* TRITONBACKEND_ResponseNewFromFactory(
    TRITONBACKEND_Response** response, TRITONBACKEND_ResponseFactory* factory);
TB_FN TB_Err* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
TB_FN TB_Err* TRITONBACKEND_ResponseSetStringParameter(
    TRITONBACKEND_Response* response, const char* name, const char* value);
TB_FN TB_Err* TRITONBACKEND_ResponseSetIntParameter(
    TRITONBACKEND_Response* response, const char* name, const int64_t value);
TB_FN TB_Err* TRITONBACKEND_ResponseSetBoolParameter(
    TRITONBACKEND_Response* response, const char* name, const bool value);
TB_FN TB_Err* TRITONBACKEND_ResponseSetDoubleParameter(
    TRITONBACKEND_Response* response, const char* name, const double value);
TB_FN TB_Err* TRITONBACKEND_ResponseOutput(
    TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count);
TB_FN TB_Err* TRITONBACKEND_ResponseSend(
    TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error);

/* ---- implicit state of a sequence --------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_StateNew(
    TRITONBACKEND_State** state, TRITONBACKEND_Request* request, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count);
TB_FN TB_Err* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state);
TB_FN TB_Err* TRITONBACKEND_StateBuffer(
    TRITONBACKEND_State* state, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
TB_FN TB_Err* TRITONBACKEND_StateBufferAttributes(
    TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** buffer_attributes);

/* ---- the backend -------------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* backend, const char** name);
TB_FN TB_Err* TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* backend, TRITONSERVER_Message** backend_config);
TB_FN TB_Err* TRITONBACKEND_BackendExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy* policy);
TB_FN TB_Err* TRITONBACKEND_BackendSetExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy policy);
TB_FN TB_Err* TRITONBACKEND_BackendArtifacts(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ArtifactType* artifact_type, const char** location);
TB_FN TB_Err* TRITONBACKEND_BackendMemoryManager(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager);
TB_FN TB_Err* TRITONBACKEND_BackendState(TRITONBACKEND_Backend* backend, void** state);
TB_FN TB_Err* TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* backend, void* state);

/* ---- a model ------------------------------------------------------------------------------ */
TB_FN TB_Err* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name);
TB_FN TB_Err* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version);
TB_FN TB_Err* TRITONBACKEND_ModelRepository(
    TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* artifact_type, const char** location);
TB_FN TB_Err* TRITONBACKEND_ModelConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message** model_config);
TB_FN TB_Err* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* model, bool* auto_complete_config);
TB_FN TB_Err* TRITONBACKEND_ModelSetConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message* model_config);
TB_FN TB_Err* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* model, TRITONSERVER_Server** server);
TB_FN TB_Err* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend);
TB_FN TB_Err* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
TB_FN TB_Err* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);
TB_FN TB_Err* TRITONBACKEND_ModelReportMemoryUsage(
    TRITONBACKEND_Model* model, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size);

/* ---- a model instance --------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance, const char** name);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceKind(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance, int32_t* device_id);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceHostPolicy(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_Message** host_policy);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* instance, bool* is_passive);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* instance, uint32_t* count);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceProfileName(
    TRITONBACKEND_ModelInstance* instance, const uint32_t index, const char** profile_name);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(
    TRITONBACKEND_ModelInstance* instance, uint32_t* count);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(
    TRITONBACKEND_ModelInstance* instance, uint32_t index, const char** kind, int64_t* id);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceReportMemoryUsage(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsNew(
    TRITONBACKEND_ModelInstanceResponseStatistics** response_statistics);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics,
    TRITONBACKEND_ModelInstance* model_instance);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics,
    TRITONBACKEND_ResponseFactory* response_factory);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t response_start);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t compute_output_start);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t response_end);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, TRITONSERVER_Error* error);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceReportResponseStatistics(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics);
TB_FN TB_Err* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns,
    const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns);

/* ---- backend attributes ------------------------------------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    TRITONBACKEND_BackendAttribute* backend_attributes, const TRITONSERVER_InstanceGroupKind kind,
    const uint64_t count, const uint64_t* device_ids, const uint64_t id_count);
TB_FN TB_Err* TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(
    TRITONBACKEND_BackendAttribute* backend_attributes, bool enabled);

/* ---- what a backend may read of a response it built --------------------------------------- */
TB_FN TB_Err* TRITONBACKEND_InferenceResponseOutputByName(
    TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType* datatype, const int64_t** shape,
    uint64_t* dim_count);
TB_FN TB_Err* TRITONBACKEND_InferenceResponseOutput(
    TRITONBACKEND_Response* response, const uint32_t index, const char** name, TRITONSERVER_DataType* datatype,
    const int64_t** shape, uint64_t* dim_count);

/* ===== provided by a backend (looked up by name when its library loads) ===================== */

TB_ENTRY TB_Err* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend);
TB_ENTRY TB_Err* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend);
TB_ENTRY TB_Err* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model);
TB_ENTRY TB_Err* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model);
TB_ENTRY TB_Err* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance);
TB_ENTRY TB_Err* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance);
TB_ENTRY TB_Err* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count);
TB_ENTRY TB_Err* TRITONBACKEND_GetBackendAttribute(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_BackendAttribute* backend_attributes);
/* a custom batching strategy (inferd does not load these: the dynamic batcher forms batches) */
TB_ENTRY TB_Err* TRITONBACKEND_ModelBatcherInitialize(TRITONBACKEND_Batcher** batcher, TRITONBACKEND_Model* model);
TB_ENTRY TB_Err* TRITONBACKEND_ModelBatcherFinalize(TRITONBACKEND_Batcher* batcher);
TB_ENTRY TB_Err* TRITONBACKEND_ModelBatchIncludeRequest(
    TRITONBACKEND_Request* request, void* userp, bool* should_include);
TB_ENTRY TB_Err* TRITONBACKEND_ModelBatchInitialize(const TRITONBACKEND_Batcher* batcher, void** userp);
TB_ENTRY TB_Err* TRITONBACKEND_ModelBatchFinalize(void* userp);

#undef TB_FN
#undef TB_ENTRY
#undef TB_Err

#ifdef __cplusplus
}
#endif

#endif /* INFERD_TRITONBACKEND_H */
