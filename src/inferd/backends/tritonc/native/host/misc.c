/*
 * Response allocators (what a backend's requests to other models get their outputs' buffers from) and
 * per-response statistics (accepted, not used).
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "host.h"

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(
    TRITONSERVER_ResponseAllocator** allocator, TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn,
    TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn, TRITONSERVER_ResponseAllocatorStartFn_t start_fn) {
  TRITONSERVER_ResponseAllocator* a = calloc(1, sizeof(*a));
  if (a == NULL) return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  a->alloc = alloc_fn;
  a->release = release_fn;
  a->start = start_fn;
  *allocator = a;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(
    TRITONSERVER_ResponseAllocator* allocator, TRITONSERVER_ResponseAllocatorBufferAttributesFn_t fn) {
  allocator->attributes = fn;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetQueryFunction(
    TRITONSERVER_ResponseAllocator* allocator, TRITONSERVER_ResponseAllocatorQueryFn_t query_fn) {
  allocator->query = query_fn;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* allocator) {
  free(allocator);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_RequestTrace(TRITONBACKEND_Request* request, TRITONSERVER_InferenceTrace** trace) {
  (void)request;
  *trace = NULL; /* as the reference answers for a request that is not traced */
  return NULL;
}

/* per-response statistics: accepted; inferd's statistics come from the request and batch reports */
struct TRITONBACKEND_ModelInstanceResponseStatistics {
  TRITONBACKEND_ModelInstance* instance;
};

typedef TRITONBACKEND_ModelInstanceResponseStatistics ResponseStats;

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsNew(ResponseStats** response_statistics) {
  *response_statistics = calloc(1, sizeof(ResponseStats));
  return *response_statistics == NULL ? host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory") : NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(ResponseStats* response_statistics) {
  free(response_statistics);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    ResponseStats* response_statistics, TRITONBACKEND_ModelInstance* model_instance) {
  response_statistics->instance = model_instance;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    ResponseStats* response_statistics, TRITONBACKEND_ResponseFactory* response_factory) {
  (void)response_statistics;
  (void)response_factory;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    ResponseStats* response_statistics, uint64_t response_start) {
  (void)response_statistics;
  (void)response_start;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    ResponseStats* response_statistics, uint64_t compute_output_start) {
  (void)response_statistics;
  (void)compute_output_start;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    ResponseStats* response_statistics, uint64_t response_end) {
  (void)response_statistics;
  (void)response_end;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    ResponseStats* response_statistics, TRITONSERVER_Error* error) {
  (void)response_statistics;
  (void)error;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportResponseStatistics(ResponseStats* response_statistics) {
  (void)response_statistics;
  return NULL;
}
