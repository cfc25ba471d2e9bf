/*
 * What a backend may ask of the server that hosts it (TRITONSERVER_Server*). inferd answers readiness and
 * transaction properties through the extension (host_svc); creating, stopping or driving a server from
 * inside a backend is not served.
 */
#define _GNU_SOURCE
#include "host.h"

TRITONSERVER_Error* TRITONSERVER_ServerIsLive(TRITONSERVER_Server* server, bool* live) {
  (void)server;
  *live = true;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ServerIsReady(TRITONSERVER_Server* server, bool* ready) {
  (void)server;
  *ready = true;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ServerModelIsReady(
    TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, bool* ready) {
  (void)server;
  if (model_name == NULL || ready == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "model name is null");
  if (host_svc.model_ready == NULL) return host_unsupported("TRITONSERVER_ServerModelIsReady");
  return host_svc.model_ready(model_name, model_version, ready);
}

TRITONSERVER_Error* TRITONSERVER_ServerModelTransactionProperties(
    TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, uint32_t* txn_flags,
    void** voidp) {
  (void)server;
  if (model_name == NULL || txn_flags == NULL)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "model name is null");
  if (voidp != NULL) *voidp = NULL;
  if (host_svc.model_txn == NULL) return host_unsupported("TRITONSERVER_ServerModelTransactionProperties");
  return host_svc.model_txn(model_name, model_version, txn_flags);
}

TRITONSERVER_Error* TRITONSERVER_ServerModelBatchProperties(
    TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, uint32_t* flags,
    void** voidp) {
  (void)server;
  (void)model_name;
  (void)model_version;
  /* as the reference answers for any model: batching, if any, is along the first dimension */
  if (flags != NULL) *flags = TRITONSERVER_BATCH_FIRST_DIM;
  if (voidp != NULL) *voidp = NULL;
  return NULL;
}
