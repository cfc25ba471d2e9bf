// The exception guard: a backend's entry points are C functions, but a C++ backend may let an exception
// escape one. Unwinding out of the entry point into its callers (the extension, Python) would end the process
// (std::terminate); here every exception becomes an INTERNAL error naming the entry point instead, and
// the server serves on.
#include <exception>
#include <new>

#include "triton/core/tritonbackend.h"

// what host.h declares for the C side (its atomics are C11's, not C++'s)
extern "C" {
typedef TRITONSERVER_Error* (*host_fn1)(void*);
typedef TRITONSERVER_Error* (*host_exec_fn)(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request**, const uint32_t);
typedef TRITONSERVER_Error* (*host_attr_fn)(TRITONBACKEND_Backend*, TRITONBACKEND_BackendAttribute*);
TRITONSERVER_Error* host_error(TRITONSERVER_Error_Code code, const char* fmt, ...);
TRITONSERVER_Error* host_guard(host_fn1 fn, void* arg, const char* what);
TRITONSERVER_Error* host_guard_exec(
    host_exec_fn fn, TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);
TRITONSERVER_Error* host_guard_attr(host_attr_fn fn, TRITONBACKEND_Backend* backend,
                                    TRITONBACKEND_BackendAttribute* attributes);

static TRITONSERVER_Error* thrown(const char* what, const char* why) {
  return host_error(TRITONSERVER_ERROR_INTERNAL, "%s threw an exception: %s", what, why);
}

TRITONSERVER_Error* host_guard(host_fn1 fn, void* arg, const char* what) {
  try {
    return fn(arg);
  } catch (const std::exception& e) {
    return thrown(what, e.what());
  } catch (...) {
    return thrown(what, "(not a std::exception)");
  }
}

TRITONSERVER_Error* host_guard_exec(
    host_exec_fn fn, TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count) {
  try {
    return fn(instance, requests, count);
  } catch (const std::exception& e) {
    return thrown("TRITONBACKEND_ModelInstanceExecute", e.what());
  } catch (...) {
    return thrown("TRITONBACKEND_ModelInstanceExecute", "(not a std::exception)");
  }
}

TRITONSERVER_Error* host_guard_attr(host_attr_fn fn, TRITONBACKEND_Backend* backend,
                                    TRITONBACKEND_BackendAttribute* attributes) {
  try {
    return fn(backend, attributes);
  } catch (const std::exception& e) {
    return thrown("TRITONBACKEND_GetBackendAttribute", e.what());
  } catch (...) {
    return thrown("TRITONBACKEND_GetBackendAttribute", "(not a std::exception)");
  }
}
}
