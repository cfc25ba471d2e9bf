/*
 * _tritonc: inferd's Python side of the Triton backend host (libtritonserver.so).
 *
 * The request path is here, in C, so that a request costs no Python-level glue per API call:
 *  - Instance.execute(batch) turns inferd's InferRequests into TRITONBACKEND_Requests (inputs zero-copy:
 *    a Py_buffer on each tensor's received bytes, held until the backend releases the request), calls
 *    the backend's execute with the GIL let go, and returns the batch statistics it reported;
 *  - Model.drain(), the event loop's reader on the model's eventfd, takes every event the backend's
 *    threads queued since the last wake-up and turns responses into inferd's InferResponses (outputs
 *    are the buffers the backend filled, taken over without a copy), delivered to their streams.
 * Lifecycle calls (open, initialize, finalize) are here too; they let go of the GIL while the backend
 * runs, and the backend's log lines and readiness questions come back through callbacks that take it.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <dlfcn.h>
#include <Python.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../host/host.h"

/* ---- what setup() hands in: inferd's classes and callbacks ----------------------------------- */
static PyObject* g_error;         /* _tritonc.Error(code, message) */
static PyObject* g_tensor;        /* inferd.core.tensor.Tensor */
static PyObject* g_response;      /* inferd.core.response.InferResponse */
static PyObject* g_datatypes;     /* tuple: TRITONSERVER_DataType -> inferd DataType (None: unknown) */
static PyObject* g_make_error;    /* (code, message) -> InferdError */
static PyObject* g_log;           /* (level, file, line, message) -> None */
static PyObject* g_model_ready;   /* (name, version) -> bool */
static PyObject* g_model_txn;     /* (name, version) -> int flags */
static PyObject* g_bls_submit;    /* a backend's request to another model -> None or (code, message) */
static PyObject* g_bls_cancel;    /* (handle) -> None: the backend cancelled it */
static PyObject* g_metrics;       /* (operation, *arguments) -> result, or raises (custom metrics) */
static PyObject* s_deliver;       /* "deliver" */
static PyObject* s_send;          /* "send" */
static PyObject* s_on_cancel;     /* "on_cancel" */
static PyObject* s_to_bytes;      /* "to_bytes" */

/* an error from here (the host's own helpers are not exported) */
static TRITONSERVER_Error* ext_error(TRITONSERVER_Error_Code code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return TRITONSERVER_ErrorNew(code, buf);
}

static PyObject* raise_error(TRITONSERVER_Error* err) {
  PyObject* args = Py_BuildValue("(is)", (int)TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
  if (args != NULL) {
    PyErr_SetObject(g_error, args);
    Py_DECREF(args);
  }
  return NULL;
}

/* ---- callbacks from the backend's threads ------------------------------------------------------- */
static void log_cb(TRITONSERVER_LogLevel level, const char* file, int line, const char* msg) {
  if (g_log == NULL || !Py_IsInitialized()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = PyObject_CallFunction(g_log, "isis", (int)level, file, line, msg);
  if (r == NULL)
    PyErr_WriteUnraisable(g_log);
  else
    Py_DECREF(r);
  PyGILState_Release(gil);
}

static TRITONSERVER_Error* from_python_error(const char* what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* text = value != NULL ? PyObject_Str(value) : NULL;
  const char* s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  TRITONSERVER_Error* err = ext_error(TRITONSERVER_ERROR_INTERNAL, "%s: %s", what, s != NULL ? s : "?");
  PyErr_Clear();
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return err;
}

static TRITONSERVER_Error* model_ready_cb(const char* name, int64_t version, bool* ready) {
  if (g_model_ready == NULL) return ext_error(TRITONSERVER_ERROR_UNSUPPORTED, "TRITONSERVER_ServerModelIsReady is not served here");
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* r = PyObject_CallFunction(g_model_ready, "sL", name, (long long)version);
  if (r == NULL) {
    err = from_python_error("TRITONSERVER_ServerModelIsReady");
  } else {
    *ready = PyObject_IsTrue(r) == 1;
    Py_DECREF(r);
  }
  PyGILState_Release(gil);
  return err;
}

static TRITONSERVER_Error* model_txn_cb(const char* name, int64_t version, uint32_t* flags) {
  if (g_model_txn == NULL) return ext_error(TRITONSERVER_ERROR_UNSUPPORTED, "TRITONSERVER_ServerModelTransactionProperties is not served here");
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* r = PyObject_CallFunction(g_model_txn, "sL", name, (long long)version);
  if (r == NULL) {
    if (PyErr_ExceptionMatches(PyExc_LookupError)) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyObject* text = value != NULL ? PyObject_Str(value) : NULL;
      const char* s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
      err = ext_error(TRITONSERVER_ERROR_NOT_FOUND, "%s", s != NULL ? s : name);
      PyErr_Clear();
      Py_XDECREF(text);
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
    } else {
      err = from_python_error("TRITONSERVER_ServerModelTransactionProperties");
    }
  } else {
    *flags = (uint32_t)PyLong_AsUnsignedLong(r);
    Py_DECREF(r);
    if (PyErr_Occurred()) err = from_python_error("TRITONSERVER_ServerModelTransactionProperties");
  }
  PyGILState_Release(gil);
  return err;
}

/* ---- OutBuf: an output buffer the backend filled, owned by Python from the drain on -------------- */
typedef struct {
  PyObject_HEAD void* data;
  Py_ssize_t size;
} OutBuf;

static void OutBuf_dealloc(OutBuf* self) {
  free(self->data);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static int OutBuf_getbuffer(OutBuf* self, Py_buffer* view, int flags) {
  return PyBuffer_FillInfo(view, (PyObject*)self, self->data, self->size, 0, flags);
}

static PyBufferProcs OutBuf_as_buffer = {(getbufferproc)OutBuf_getbuffer, NULL};

static PyTypeObject OutBufType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tritonc.OutBuf",
    .tp_basicsize = sizeof(OutBuf),
    .tp_dealloc = (destructor)OutBuf_dealloc,
    .tp_as_buffer = &OutBuf_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an output tensor's bytes, as a backend wrote them",
};

/* ---- Pending: where one request's responses go (a channel's ctx) ---------------------------------- */
typedef struct {
  PyObject_HEAD PyObject* stream;
  PyObject* model_name; /* str, shared with the Model */
  PyObject* version;    /* str */
  PyObject* id;         /* str: the request's id, echoed in its responses */
  PyObject* prev_cancel; /* the stream's on_cancel hook before ours (None: none) */
  host_channel* channel; /* NULL once closed */
  int decoupled;
  int final_delivered;
} Pending;

static void Pending_dealloc(Pending* self) {
  Py_XDECREF(self->stream);
  Py_XDECREF(self->model_name);
  Py_XDECREF(self->version);
  Py_XDECREF(self->id);
  Py_XDECREF(self->prev_cancel);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* the stream's on_cancel hook: the client went away (on the loop) */
static PyObject* Pending_call(Pending* self, PyObject* args, PyObject* kwargs) {
  (void)kwargs;
  if (self->channel != NULL) inferd_host_channel_cancel(self->channel);
  if (self->prev_cancel != NULL && self->prev_cancel != Py_None) return PyObject_Call(self->prev_cancel, args, NULL);
  Py_RETURN_NONE;
}

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tritonc.Pending",
    .tp_basicsize = sizeof(Pending),
    .tp_dealloc = (destructor)Pending_dealloc,
    .tp_call = (ternaryfunc)Pending_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a request a backend holds: where its responses go",
};

/* what keeps a request's input bytes alive until the backend releases it (a request's ctx) */
typedef struct {
  uint32_t n;
  Py_buffer views[];
} Inputs;

static void inputs_release(Inputs* in) {
  if (in == NULL) return;
  for (uint32_t i = 0; i < in->n; i++) PyBuffer_Release(&in->views[i]);
  free(in);
}

/* ---- Backend --------------------------------------------------------------------------------- */
typedef struct {
  PyObject_HEAD TRITONBACKEND_Backend* backend;
} Backend;

static void Backend_dealloc(Backend* self) { Py_TYPE(self)->tp_free((PyObject*)self); }

static PyObject* Backend_initialize(Backend* self, PyObject* unused) {
  (void)unused;
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_backend_initialize(self->backend);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  Py_RETURN_NONE;
}

static PyObject* Backend_finalize(Backend* self, PyObject* unused) {
  (void)unused;
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_backend_finalize(self->backend);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  Py_RETURN_NONE;
}

/* the preferred instance groups GetBackendAttribute gave: [(kind, count, (device, ...)), ...] */
static PyObject* Backend_preferred_groups(Backend* self, void* closure) {
  (void)closure;
  struct TRITONBACKEND_BackendAttribute* a = &self->backend->attributes;
  PyObject* list = PyList_New(a->n_groups);
  if (list == NULL) return NULL;
  for (uint32_t i = 0; i < a->n_groups; i++) {
    host_group* g = &a->groups[i];
    PyObject* devices = PyTuple_New((Py_ssize_t)g->n_devices);
    if (devices == NULL) goto fail;
    for (uint64_t d = 0; d < g->n_devices; d++)
      PyTuple_SET_ITEM(devices, (Py_ssize_t)d, PyLong_FromUnsignedLongLong(g->devices[d]));
    PyObject* item = Py_BuildValue("(iKN)", (int)g->kind, (unsigned long long)g->count, devices);
    if (item == NULL) goto fail;
    PyList_SET_ITEM(list, i, item);
  }
  return list;
fail:
  Py_DECREF(list);
  return NULL;
}

static PyObject* Backend_parallel_loading(Backend* self, void* closure) {
  (void)closure;
  return PyBool_FromLong(self->backend->attributes.parallel_loading);
}

static PyObject* Backend_device_blocking(Backend* self, void* closure) {
  (void)closure;
  return PyBool_FromLong(self->backend->policy == TRITONBACKEND_EXECUTION_DEVICE_BLOCKING);
}

static PyObject* Backend_model(Backend* self, PyObject* args);

static PyMethodDef Backend_methods[] = {
    {"initialize", (PyCFunction)Backend_initialize, METH_NOARGS, "TRITONBACKEND_Initialize (if any)"},
    {"finalize", (PyCFunction)Backend_finalize, METH_NOARGS, "TRITONBACKEND_Finalize (if any)"},
    {"model", (PyCFunction)Backend_model, METH_VARARGS, "a new TRITONBACKEND_Model of this backend"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Backend_getset[] = {
    {"preferred_groups", (getter)Backend_preferred_groups, NULL, "GetBackendAttribute's groups", NULL},
    {"parallel_loading", (getter)Backend_parallel_loading, NULL, "parallel instance loading", NULL},
    {"device_blocking", (getter)Backend_device_blocking, NULL, "DEVICE_BLOCKING execution policy", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BackendType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tritonc.Backend",
    .tp_basicsize = sizeof(Backend),
    .tp_dealloc = (destructor)Backend_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = Backend_methods,
    .tp_getset = Backend_getset,
    .tp_doc = "a loaded backend library (lives as long as the process)",
};

/* ---- Model ----------------------------------------------------------------------------------- */
typedef struct {
  PyObject_HEAD TRITONBACKEND_Model* model;
  PyObject* backend;
  PyObject* name;    /* str */
  PyObject* version; /* str */
  PyObject* outputs; /* tuple of str: every output, for requests that name none */
  int finalized;
} Model;

static void Model_dealloc(Model* self) {
  /* the C model is freed only once nothing can refer to it (Model.close) */
  Py_XDECREF(self->backend);
  Py_XDECREF(self->name);
  Py_XDECREF(self->version);
  Py_XDECREF(self->outputs);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static int add_ios(TRITONBACKEND_Model* m, PyObject* ios, int kind) {
  /* ios: sequence of (name, dims tuple, reshape tuple or None) */
  PyObject* seq = PySequence_Fast(ios, "inputs and outputs must be sequences");
  if (seq == NULL) return -1;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    const char* name;
    PyObject *dims, *reshape;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sOO", &name, &dims, &reshape)) goto fail;
    int64_t d[64], r[64];
    Py_ssize_t nd = PyTuple_Size(dims), nr = reshape == Py_None ? 0 : PyTuple_Size(reshape);
    if (nd < 0 || nr < 0 || nd > 64 || nr > 64) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "too many dims");
      goto fail;
    }
    for (Py_ssize_t j = 0; j < nd; j++) d[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, j));
    for (Py_ssize_t j = 0; j < nr; j++) r[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(reshape, j));
    if (PyErr_Occurred()) goto fail;
    TRITONSERVER_Error* err = inferd_host_model_add_io(m, kind, name, d, (uint32_t)nd,
                                                       reshape == Py_None ? NULL : r, (uint32_t)nr);
    if (err != NULL) {
      raise_error(err);
      goto fail;
    }
  }
  Py_DECREF(seq);
  return 0;
fail:
  Py_DECREF(seq);
  return -1;
}

static PyTypeObject ModelType;

static PyObject* Backend_model(Backend* self, PyObject* args) {
  const char *name, *repository, *config;
  unsigned long long version;
  int auto_complete, decoupled;
  long long max_batch_size;
  PyObject *inputs, *outputs, *states;
  if (!PyArg_ParseTuple(args, "sKssppLOOO", &name, &version, &repository, &config, &auto_complete, &decoupled,
                        &max_batch_size, &inputs, &outputs, &states))
    return NULL;
  Model* m = PyObject_New(Model, &ModelType);
  if (m == NULL) return NULL;
  m->model = NULL;
  m->backend = (PyObject*)self;
  Py_INCREF(self);
  m->name = PyUnicode_FromString(name);
  m->version = PyUnicode_FromFormat("%llu", version);
  m->outputs = NULL;
  m->finalized = 0;
  if (m->name == NULL || m->version == NULL) goto fail;
  TRITONSERVER_Error* err = inferd_host_model_new(self->backend, name, version, repository, config, auto_complete,
                                                  decoupled, max_batch_size, &m->model);
  if (err != NULL) {
    raise_error(err);
    goto fail;
  }
  if (add_ios(m->model, inputs, 0) < 0 || add_ios(m->model, outputs, 1) < 0 || add_ios(m->model, states, 2) < 0)
    goto fail;
  m->outputs = PyTuple_New(m->model->n_outputs);
  if (m->outputs == NULL) goto fail;
  for (uint32_t i = 0; i < m->model->n_outputs; i++) {
    PyObject* s = PyUnicode_FromString(m->model->outputs[i].name);
    if (s == NULL) goto fail;
    PyTuple_SET_ITEM(m->outputs, i, s);
  }
  return (PyObject*)m;
fail:
  if (m->model != NULL) {
    inferd_host_model_free(m->model);
    m->model = NULL;
  }
  Py_DECREF(m);
  return NULL;
}

#define LIVE_MODEL(m)                                            \
  if ((m)->model == NULL) {                                      \
    PyErr_SetString(PyExc_RuntimeError, "the model was closed"); \
    return NULL;                                                 \
  }

static PyObject* Model_initialize(Model* self, PyObject* unused) {
  (void)unused;
  LIVE_MODEL(self);
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_model_initialize(self->model);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  if (self->model->set_config == NULL) Py_RETURN_NONE;
  return PyUnicode_FromString(self->model->set_config);
}

static PyObject* Model_finalize(Model* self, PyObject* unused) {
  (void)unused;
  LIVE_MODEL(self);
  if (self->finalized) Py_RETURN_NONE;
  self->finalized = 1;
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_model_finalize(self->model);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  Py_RETURN_NONE;
}

static PyObject* Model_fd(Model* self, void* closure) {
  (void)closure;
  return PyLong_FromLong(self->model == NULL ? -1 : self->model->queue->efd);
}

static PyObject* Model_open_requests(Model* self, void* closure) {
  (void)closure;
  if (self->model == NULL) return PyLong_FromLong(0);
  return PyLong_FromLong(atomic_load(&self->model->open_channels));
}

static PyObject* Model_set_config(Model* self, void* closure) {
  (void)closure;
  if (self->model == NULL || self->model->set_config == NULL) Py_RETURN_NONE;
  return PyUnicode_FromString(self->model->set_config);
}

/* ---- the drain: events -> InferResponses on their streams ----------------------------------------- */
static PyObject* make_tensor(TRITONBACKEND_Output* o) {
  PyObject* dt = (unsigned)o->datatype < (unsigned)PyTuple_GET_SIZE(g_datatypes)
                     ? PyTuple_GET_ITEM(g_datatypes, o->datatype)
                     : Py_None;
  if (dt == Py_None) {
    PyErr_Format(PyExc_ValueError, "output '%s' has an unknown datatype %d", o->name, (int)o->datatype);
    return NULL;
  }
  OutBuf* buf = PyObject_New(OutBuf, &OutBufType);
  if (buf == NULL) return NULL;
  buf->data = o->buffer; /* taken over: freed with the OutBuf */
  buf->size = (Py_ssize_t)o->byte_size;
  if (buf->data == NULL) {
    buf->data = malloc(1); /* a backend that never asked for a buffer: no bytes */
    buf->size = 0;
  }
  o->buffer = NULL;
  PyObject* view = PyMemoryView_FromObject((PyObject*)buf);
  Py_DECREF(buf);
  if (view == NULL) return NULL;
  PyObject* shape = PyTuple_New(o->n_dims);
  if (shape == NULL) {
    Py_DECREF(view);
    return NULL;
  }
  for (uint32_t i = 0; i < o->n_dims; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(o->shape[i]));
  PyObject* name = PyUnicode_FromString(o->name);
  PyObject* tensor = NULL;
  if (name != NULL) {
    PyObject* args[5] = {name, dt, shape, Py_None, view};
    tensor = PyObject_Vectorcall(g_tensor, args, 5, NULL);
  }
  Py_XDECREF(name);
  Py_DECREF(shape);
  Py_DECREF(view);
  return tensor;
}

static PyObject* param_value(const host_param* p) {
  switch (p->type) {
    case TRITONSERVER_PARAMETER_STRING:
      return PyUnicode_DecodeUTF8(p->v.s, (Py_ssize_t)strlen(p->v.s), "replace");
    case TRITONSERVER_PARAMETER_INT:
      return PyLong_FromLongLong(p->v.i);
    case TRITONSERVER_PARAMETER_BOOL:
      return PyBool_FromLong(p->v.b);
    case TRITONSERVER_PARAMETER_DOUBLE:
      return PyFloat_FromDouble(p->v.d);
    default:
      Py_RETURN_NONE;
  }
}

static PyObject* make_error_obj(TRITONSERVER_Error_Code code, const char* msg) {
  return PyObject_CallFunction(g_make_error, "is", (int)code, msg);
}

static PyObject* make_response(Pending* p, TRITONBACKEND_Response* r) {
  PyObject* outputs = NULL;
  PyObject* params = NULL;
  PyObject* error = NULL;
  PyObject* response = NULL;
  if (r->error != NULL) {
    outputs = PyList_New(0);
    error = make_error_obj(r->error->code, r->error->msg);
  } else {
    outputs = PyList_New(r->n_outputs);
    error = Py_None;
    Py_INCREF(error);
    for (uint32_t i = 0; outputs != NULL && i < r->n_outputs; i++) {
      PyObject* t = make_tensor(r->outputs[i]);
      if (t == NULL) {
        /* a malformed output fails the response, with why, rather than the drain */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject* text = value != NULL ? PyObject_Str(value) : NULL;
        Py_DECREF(error);
        error = make_error_obj(TRITONSERVER_ERROR_INTERNAL, text != NULL ? PyUnicode_AsUTF8(text) : "?");
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_DECREF(outputs);
        outputs = PyList_New(0);
        break;
      }
      PyList_SET_ITEM(outputs, i, t);
    }
  }
  params = PyDict_New();
  if (outputs == NULL || params == NULL || error == NULL) goto done;
  for (uint32_t i = 0; i < r->n_params; i++) {
    PyObject* v = param_value(&r->params[i]);
    if (v == NULL || PyDict_SetItemString(params, r->params[i].key, v) < 0) {
      Py_XDECREF(v);
      goto done;
    }
    Py_DECREF(v);
  }
  {
    PyObject* args[6] = {p->model_name, p->version, p->id, outputs, params, error};
    response = PyObject_Vectorcall(g_response, args, 6, NULL);
  }
done:
  Py_XDECREF(outputs);
  Py_XDECREF(params);
  Py_XDECREF(error);
  return response;
}

static void deliver(Pending* p, PyObject* response, int final) {
  if (p->final_delivered) return;
  if (final) p->final_delivered = 1;
  PyObject* args[3] = {p->stream, response, final ? Py_True : Py_False};
  PyObject* r = PyObject_VectorcallMethod(s_deliver, args, 3, NULL);
  if (r == NULL)
    PyErr_WriteUnraisable(p->stream);
  else
    Py_DECREF(r);
}

static void on_response(TRITONBACKEND_Response* r) {
  Pending* p = (Pending*)r->channel->ctx;
  int final = (r->flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) || !p->decoupled;
  if (!p->final_delivered) {
    PyObject* response = make_response(p, r);
    if (response == NULL) {
      PyErr_WriteUnraisable(p->stream);
    } else {
      deliver(p, response, final);
      Py_DECREF(response);
    }
  }
  inferd_host_response_free(r);
}

/* a decoupled model's response, from the backend's thread: through ResponseStream.send, whose window
 * makes this thread wait (the GIL let go) while the client is behind */
static void decoupled_send_cb(host_channel* ch, TRITONBACKEND_Response* r, bool final) {
  PyGILState_STATE gil = PyGILState_Ensure();
  Pending* p = (Pending*)ch->ctx;
  if (!p->final_delivered) {
    PyObject* response = r == NULL ? (Py_INCREF(Py_None), Py_None) : make_response(p, r);
    if (response != NULL) {
      if (final) p->final_delivered = 1;
      PyObject* args[3] = {p->stream, response, final ? Py_True : Py_False};
      PyObject* res = PyObject_VectorcallMethod(s_send, args, 3, NULL);
      if (res == NULL)
        PyErr_WriteUnraisable(p->stream);
      else
        Py_DECREF(res);
      Py_DECREF(response);
    } else {
      PyErr_WriteUnraisable(p->stream);
    }
  }
  if (r != NULL) inferd_host_response_free(r);
  PyGILState_Release(gil);
}

static void on_closed(host_channel* ch) {
  Pending* p = (Pending*)ch->ctx;
  /* final_sent without a final delivered here: the host answered it elsewhere (an execute error,
   * answered by inferd's pool) */
  if (!p->final_delivered && !atomic_load(&ch->final_sent)) {
    /* the backend let go of everything without a final response: the client gets an error, not a hang */
    PyObject* error = make_error_obj(
        TRITONSERVER_ERROR_INTERNAL, "the backend released the request without sending its final response");
    if (error != NULL) {
      PyObject* args[6] = {p->model_name, p->version, p->id, NULL, NULL, error};
      PyObject* outputs = PyList_New(0);
      PyObject* params = PyDict_New();
      args[3] = outputs;
      args[4] = params;
      PyObject* response = outputs && params ? PyObject_Vectorcall(g_response, args, 6, NULL) : NULL;
      Py_XDECREF(outputs);
      Py_XDECREF(params);
      Py_DECREF(error);
      if (response != NULL) {
        deliver(p, response, 1);
        Py_DECREF(response);
      }
    }
    if (PyErr_Occurred()) PyErr_WriteUnraisable(p->stream);
  }
  p->channel = NULL;
  /* break the stream -> hook -> Pending -> stream cycle */
  PyObject* hook = PyObject_GetAttr(p->stream, s_on_cancel);
  if (hook == NULL) {
    PyErr_Clear();
  } else {
    if (hook == (PyObject*)p && PyObject_SetAttr(p->stream, s_on_cancel, p->prev_cancel) < 0) PyErr_Clear();
    Py_DECREF(hook);
  }
  inferd_host_channel_free(ch);
  Py_DECREF(p);
}

static void drain(Model* self, bool woken);

static PyObject* Model_drain(Model* self, PyObject* unused) {
  (void)unused;
  if (self->model != NULL) drain(self, true);
  Py_RETURN_NONE;
}

/* the events of one take, in order */
static void deliver_events(host_event* ev) {
  while (ev != NULL) {
    host_event* next = ev->next;
    switch (ev->kind) {
      case HOST_EV_RESPONSE:
        on_response((TRITONBACKEND_Response*)ev);
        break;
      case HOST_EV_FLAGS: {
        host_flags_event* fe = (host_flags_event*)ev;
        Pending* p = (Pending*)fe->channel->ctx;
        if (fe->flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) deliver(p, Py_None, 1);
        inferd_host_flags_event_free(fe);
        break;
      }
      case HOST_EV_RELEASED: {
        TRITONBACKEND_Request* r = (TRITONBACKEND_Request*)ev;
        inputs_release((Inputs*)r->ctx);
        inferd_host_request_free(r); /* may queue its channel's CLOSED event */
        break;
      }
      case HOST_EV_CLOSED:
        on_closed((host_channel*)ev);
        break;
    }
    ev = next;
  }
}

/* every event queued, delivered. woken: by the loop's reader (the eventfd is read); else by an execute on
 * the loop, right after it. While it drains the queue is quiet: what is queued meanwhile (a released
 * request's CLOSED, another thread's responses) writes no eventfd and is taken before it returns, so a
 * request costs one wake-up at most */
static void drain(Model* self, bool woken) {
  host_queue* q = self->model->queue;
  inferd_host_queue_quiet(q, true);
  host_event* ev = inferd_host_queue_take(q, woken);
  while (ev != NULL) {
    deliver_events(ev);
    ev = inferd_host_queue_take(q, false);
  }
  inferd_host_queue_quiet(q, false);
  deliver_events(inferd_host_queue_take(q, false)); /* queued between the last take and now */
}

static PyObject* Model_close(Model* self, PyObject* unused) {
  /* after finalize: frees the C model once no request is open (else it stays, for late events) */
  (void)unused;
  if (self->model == NULL) Py_RETURN_TRUE;
  drain(self, true);
  if (atomic_load(&self->model->open_channels) > 0) Py_RETURN_FALSE;
  inferd_host_model_free(self->model);
  self->model = NULL;
  Py_RETURN_TRUE;
}

static PyObject* Model_instance(Model* self, PyObject* args);

static PyMethodDef Model_methods[] = {
    {"initialize", (PyCFunction)Model_initialize, METH_NOARGS,
     "TRITONBACKEND_ModelInitialize; the configuration it set (JSON), or None"},
    {"finalize", (PyCFunction)Model_finalize, METH_NOARGS, "TRITONBACKEND_ModelFinalize"},
    {"drain", (PyCFunction)Model_drain, METH_NOARGS, "deliver what the backend sent since the last drain"},
    {"close", (PyCFunction)Model_close, METH_NOARGS, "free the model once nothing refers to it"},
    {"instance", (PyCFunction)Model_instance, METH_VARARGS, "a new TRITONBACKEND_ModelInstance"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Model_getset[] = {
    {"fd", (getter)Model_fd, NULL, "the completion queue's eventfd", NULL},
    {"open_requests", (getter)Model_open_requests, NULL, "requests whose responses may still come", NULL},
    {"set_config", (getter)Model_set_config, NULL, "what TRITONBACKEND_ModelSetConfig set (JSON), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tritonc.Model",
    .tp_basicsize = sizeof(Model),
    .tp_dealloc = (destructor)Model_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = Model_methods,
    .tp_getset = Model_getset,
    .tp_doc = "a TRITONBACKEND_Model",
};

/* ---- Instance -------------------------------------------------------------------------------- */
typedef struct {
  PyObject_HEAD TRITONBACKEND_ModelInstance* instance;
  Model* model;
} Instance;

static void Instance_dealloc(Instance* self) {
  if (self->instance != NULL) inferd_host_instance_free(self->instance);
  Py_XDECREF(self->model);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyTypeObject InstanceType;

static PyObject* Model_instance(Model* self, PyObject* args) {
  LIVE_MODEL(self);
  const char *name, *host_policy;
  int kind, device_id, passive;
  if (!PyArg_ParseTuple(args, "siips", &name, &kind, &device_id, &passive, &host_policy)) return NULL;
  Instance* i = PyObject_New(Instance, &InstanceType);
  if (i == NULL) return NULL;
  i->model = self;
  Py_INCREF(self);
  i->instance = NULL;
  TRITONSERVER_Error* err = inferd_host_instance_new(self->model, name, (TRITONSERVER_InstanceGroupKind)kind,
                                                     device_id, passive, host_policy, &i->instance);
  if (err != NULL) {
    Py_DECREF(i);
    return raise_error(err);
  }
  return (PyObject*)i;
}

static PyObject* Instance_initialize(Instance* self, PyObject* unused) {
  (void)unused;
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_instance_initialize(self->instance);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  Py_RETURN_NONE;
}

static PyObject* Instance_finalize(Instance* self, PyObject* unused) {
  (void)unused;
  TRITONSERVER_Error* err;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_instance_finalize(self->instance);
  Py_END_ALLOW_THREADS if (err != NULL) return raise_error(err);
  Py_RETURN_NONE;
}

/* the bytes of a tensor: its raw buffer as received, else its wire form (to_bytes) */
static int tensor_buffer(PyObject* tensor, Py_buffer* view) {
  PyObject* raw = PyObject_GetAttrString(tensor, "raw");
  if (raw == NULL) return -1;
  if (raw == Py_None) {
    Py_DECREF(raw);
    raw = PyObject_CallMethodNoArgs(tensor, s_to_bytes);
    if (raw == NULL) return -1;
  }
  int rc = PyObject_GetBuffer(raw, view, PyBUF_C_CONTIGUOUS);
  Py_DECREF(raw);
  return rc;
}

static int int64s(PyObject* seq, int64_t* out, Py_ssize_t max, Py_ssize_t* n) {
  PyObject* fast = PySequence_Fast(seq, "a shape must be a sequence");
  if (fast == NULL) return -1;
  *n = PySequence_Fast_GET_SIZE(fast);
  if (*n > max) {
    Py_DECREF(fast);
    PyErr_SetString(PyExc_ValueError, "a tensor has too many dimensions");
    return -1;
  }
  for (Py_ssize_t i = 0; i < *n; i++) out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
  Py_DECREF(fast);
  return PyErr_Occurred() ? -1 : 0;
}

static int add_params(TRITONBACKEND_Request* r, PyObject* params) {
  if (params == NULL || params == Py_None || !PyDict_Check(params)) return 0;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(params, &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (k == NULL) return -1;
    TRITONSERVER_Error* err;
    if (PyBool_Check(value)) {
      bool b = value == Py_True;
      err = inferd_host_request_add_param(r, k, TRITONSERVER_PARAMETER_BOOL, &b);
    } else if (PyLong_Check(value)) {
      int64_t i = PyLong_AsLongLong(value);
      if (i == -1 && PyErr_Occurred()) return -1;
      err = inferd_host_request_add_param(r, k, TRITONSERVER_PARAMETER_INT, &i);
    } else if (PyFloat_Check(value)) {
      double d = PyFloat_AS_DOUBLE(value);
      err = inferd_host_request_add_param(r, k, TRITONSERVER_PARAMETER_DOUBLE, &d);
    } else {
      PyObject* s = PyUnicode_Check(value) ? (Py_INCREF(value), value) : PyObject_Str(value);
      const char* v = s != NULL ? PyUnicode_AsUTF8(s) : NULL;
      if (v == NULL) {
        Py_XDECREF(s);
        return -1;
      }
      err = inferd_host_request_add_param(r, k, TRITONSERVER_PARAMETER_STRING, v);
      Py_DECREF(s);
    }
    if (err != NULL) {
      raise_error(err);
      return -1;
    }
  }
  return 0;
}

/* a TRITONBACKEND_Request for one InferRequest (NULL with an exception set) */
static TRITONBACKEND_Request* build_request(Instance* self, PyObject* req) {
  Model* model = self->model;
  TRITONBACKEND_Request* r = NULL;
  Inputs* inputs = NULL;
  Pending* pending = NULL;
  PyObject *in_dict = NULL, *outputs = NULL, *id = NULL, *stream = NULL, *cid = NULL, *params = NULL;
  PyObject *flags = NULL, *priority = NULL, *timeout = NULL, *names = NULL;

  in_dict = PyObject_GetAttrString(req, "inputs");
  outputs = PyObject_GetAttrString(req, "outputs");
  id = PyObject_GetAttrString(req, "id");
  stream = PyObject_GetAttrString(req, "stream");
  cid = PyObject_GetAttrString(req, "correlation_id");
  params = PyObject_GetAttrString(req, "parameters");
  flags = PyObject_GetAttrString(req, "flags");
  priority = PyObject_GetAttrString(req, "priority");
  timeout = PyObject_GetAttrString(req, "timeout_us");
  if (!in_dict || !outputs || !id || !stream || !cid || !params || !flags || !priority || !timeout) goto fail;
  if (!PyDict_Check(in_dict)) {
    PyErr_SetString(PyExc_TypeError, "request inputs must be a dict");
    goto fail;
  }
  /* the requested outputs: those named, else every output of the model (as the reference) */
  if (outputs == Py_None) {
    names = model->outputs;
    Py_INCREF(names);
  } else {
    Py_ssize_t n = PySequence_Size(outputs);
    if (n < 0) goto fail;
    names = PyTuple_New(n);
    if (names == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject* o = PySequence_GetItem(outputs, i);
      PyObject* name = o != NULL ? PyObject_GetAttrString(o, "name") : NULL;
      Py_XDECREF(o);
      if (name == NULL) goto fail;
      PyTuple_SET_ITEM(names, i, name);
    }
  }
  uint32_t n_in = (uint32_t)PyDict_Size(in_dict);
  uint32_t n_out = (uint32_t)PyTuple_GET_SIZE(names);
  inputs = calloc(1, sizeof(Inputs) + sizeof(Py_buffer) * (n_in + 1));
  pending = PyObject_New(Pending, &PendingType);
  if (inputs == NULL || pending == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  pending->stream = stream;
  Py_INCREF(stream);
  pending->model_name = model->name;
  Py_INCREF(model->name);
  pending->version = model->version;
  Py_INCREF(model->version);
  pending->id = id;
  Py_INCREF(id);
  pending->prev_cancel = NULL;
  pending->channel = NULL;
  pending->decoupled = model->model->decoupled;
  pending->final_delivered = 0;

  r = inferd_host_request_new(model->model, inputs, pending, n_in, n_out);
  if (r == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  pending->channel = r->channel;

  TRITONSERVER_Error* err = NULL;
  const char* id_s = PyUnicode_AsUTF8(id);
  if (id_s == NULL) goto fail;
  if (id_s[0] != '\0' && (err = inferd_host_request_set_id(r, id_s)) != NULL) goto fail_err;
  if (PyLong_Check(cid)) {
    r->correlation_id = PyLong_AsUnsignedLongLongMask(cid);
  } else {
    const char* c = PyUnicode_AsUTF8(cid);
    if (c == NULL) goto fail;
    if ((err = inferd_host_request_set_correlation(r, 0, c)) != NULL) goto fail_err;
  }
  r->flags = (uint32_t)PyLong_AsUnsignedLongMask(flags);
  r->priority = PyLong_AsUnsignedLongLongMask(priority);
  r->timeout_us = PyLong_AsUnsignedLongLongMask(timeout);
  if (PyErr_Occurred()) goto fail;
  for (uint32_t i = 0; i < n_out; i++) {
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
    if (name == NULL) goto fail;
    if ((err = inferd_host_request_set_output(r, i, name)) != NULL) goto fail_err;
  }
  Py_ssize_t pos = 0;
  PyObject *key, *tensor;
  uint32_t i = 0;
  while (PyDict_Next(in_dict, &pos, &key, &tensor)) {
    const char* name = PyUnicode_AsUTF8(key);
    if (name == NULL) goto fail;
    PyObject* datatype = PyObject_GetAttrString(tensor, "datatype");
    PyObject* code = datatype != NULL ? PyObject_GetAttrString(datatype, "triton_code") : NULL;
    Py_XDECREF(datatype);
    PyObject* shape = code != NULL ? PyObject_GetAttrString(tensor, "shape") : NULL;
    int64_t dims[64];
    Py_ssize_t n_dims = 0;
    int rc = shape != NULL ? int64s(shape, dims, 64, &n_dims) : -1;
    Py_XDECREF(shape);
    long dt = code != NULL ? PyLong_AsLong(code) : -1;
    Py_XDECREF(code);
    if (rc < 0 || PyErr_Occurred()) goto fail;
    if (tensor_buffer(tensor, &inputs->views[i]) < 0) goto fail;
    inputs->n = i + 1;
    err = inferd_host_request_set_input(r, i, name, (TRITONSERVER_DataType)dt, dims, (uint32_t)n_dims,
                                        inputs->views[i].buf, (uint64_t)inputs->views[i].len);
    if (err != NULL) goto fail_err;
    i++;
  }
  if (add_params(r, params) < 0) goto fail;

  /* the client may go away while the backend holds the request: its cancel reaches the channel */
  if (stream != Py_None) {
    PyObject* cancelled = PyObject_GetAttrString(stream, "cancelled");
    if (cancelled == NULL) goto fail;
    if (cancelled == Py_True) inferd_host_channel_cancel(r->channel);
    Py_DECREF(cancelled);
    PyObject* prev = PyObject_GetAttr(stream, s_on_cancel);
    if (prev == NULL) goto fail;
    pending->prev_cancel = prev;
    if (PyObject_SetAttr(stream, s_on_cancel, (PyObject*)pending) < 0) goto fail;
  }
  Py_DECREF(in_dict);
  Py_DECREF(outputs);
  Py_DECREF(id);
  Py_DECREF(stream);
  Py_DECREF(cid);
  Py_DECREF(params);
  Py_DECREF(flags);
  Py_DECREF(priority);
  Py_DECREF(timeout);
  Py_DECREF(names);
  return r; /* pending's reference now belongs to the channel */

fail_err:
  raise_error(err);
fail:
  if (r != NULL) {
    if (pending != NULL && pending->prev_cancel != NULL && stream != NULL && stream != Py_None) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      if (PyObject_SetAttr(stream, s_on_cancel, pending->prev_cancel) < 0) PyErr_Clear();
      PyErr_Restore(t, v, tb);
    }
    inferd_host_request_discard(r);
  }
  inputs_release(inputs);
  Py_XDECREF(pending);
  Py_XDECREF(in_dict);
  Py_XDECREF(outputs);
  Py_XDECREF(id);
  Py_XDECREF(stream);
  Py_XDECREF(cid);
  Py_XDECREF(params);
  Py_XDECREF(flags);
  Py_XDECREF(priority);
  Py_XDECREF(timeout);
  Py_XDECREF(names);
  return NULL;
}

/* execute(batch, on_loop=False) -> (timings, failed): timings (input_ns, infer_ns, output_ns) from
 * ReportBatchStatistics or None, failed the positions of the requests ReportStatistics said failed.
 * on_loop: the caller is the event loop's thread, which drains the responses the backend sent as soon as
 * it returns (no eventfd write and wake-up for them) */
static PyObject* Instance_execute(Instance* self, PyObject* args) {
  PyObject* batch;
  int on_loop = 0;
  if (!PyArg_ParseTuple(args, "O|p", &batch, &on_loop)) return NULL;
  PyObject* seq = PySequence_Fast(batch, "a batch must be a list of requests");
  if (seq == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  TRITONBACKEND_Request* local[64];
  TRITONBACKEND_Request** reqs = n <= 64 ? local : malloc(sizeof(*reqs) * (size_t)n);
  if (reqs == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    reqs[i] = build_request(self, PySequence_Fast_GET_ITEM(seq, i));
    if (reqs[i] == NULL) {
      /* none reached the backend: each is let go of as if never made */
      for (Py_ssize_t j = 0; j < i; j++) {
        Inputs* in = (Inputs*)reqs[j]->ctx;
        Pending* p = (Pending*)reqs[j]->channel->ctx;
        inferd_host_request_discard(reqs[j]);
        inputs_release(in);
        if (p->prev_cancel != NULL && PyObject_SetAttr(p->stream, s_on_cancel, p->prev_cancel) < 0) PyErr_Clear();
        Py_DECREF(p);
      }
      if (reqs != local) free(reqs);
      Py_DECREF(seq);
      return NULL;
    }
  }
  TRITONSERVER_Error* err;
  TRITONBACKEND_ModelInstance* inst = self->instance;
  host_queue* queue = self->model->model->queue;
  if (on_loop) inferd_host_queue_quiet(queue, true);
  Py_BEGIN_ALLOW_THREADS err = inferd_host_execute(inst, reqs, (uint32_t)n);
  Py_END_ALLOW_THREADS if (reqs != local) free(reqs);
  Py_DECREF(seq);
  if (on_loop) {  /* what was queued meanwhile wrote no eventfd: taken now, whatever execute returned */
    inferd_host_queue_quiet(queue, false);
    drain(self->model, false);
  }
  if (err != NULL) return raise_error(err);
  uint32_t failed_local[64];
  uint32_t* failed = n <= 64 ? failed_local : malloc(sizeof(uint32_t) * (size_t)n);
  uint32_t n_failed = failed == NULL ? 0 : inferd_host_instance_failures(inst, failed, (uint32_t)n);
  PyObject* failures = PyTuple_New(n_failed);
  for (uint32_t i = 0; failures != NULL && i < n_failed; i++)
    PyTuple_SET_ITEM(failures, i, PyLong_FromUnsignedLong(failed[i]));
  if (failed != failed_local) free(failed);
  if (failures == NULL) return NULL;
  if (!inst->batch_reported) return Py_BuildValue("(ON)", Py_None, failures);
  uint64_t in_ns = inst->compute_start > inst->exec_start ? inst->compute_start - inst->exec_start : 0;
  uint64_t infer_ns = inst->compute_end > inst->compute_start ? inst->compute_end - inst->compute_start : 0;
  uint64_t out_ns = inst->exec_end > inst->compute_end ? inst->exec_end - inst->compute_end : 0;
  return Py_BuildValue("((KKK)N)", (unsigned long long)in_ns, (unsigned long long)infer_ns,
                       (unsigned long long)out_ns, failures);
}

static PyMethodDef Instance_methods[] = {
    {"initialize", (PyCFunction)Instance_initialize, METH_NOARGS, "TRITONBACKEND_ModelInstanceInitialize"},
    {"finalize", (PyCFunction)Instance_finalize, METH_NOARGS, "TRITONBACKEND_ModelInstanceFinalize"},
    {"execute", (PyCFunction)Instance_execute, METH_VARARGS,
     "execute(batch, on_loop=False): TRITONBACKEND_ModelInstanceExecute on a batch"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject InstanceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tritonc.Instance",
    .tp_basicsize = sizeof(Instance),
    .tp_dealloc = (destructor)Instance_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = Instance_methods,
    .tp_doc = "a TRITONBACKEND_ModelInstance",
};

/* ---- requests a backend sends to other models (BLS) --------------------------------------------- */
/* the request's description for inferd (bls.submit): its inputs' bytes are copied here */
static PyObject* bls_args(TRITONSERVER_InferenceRequest* r) {
  PyObject* inputs = PyList_New(0);
  PyObject* outputs = PyTuple_New(r->n_outputs);
  PyObject* params = PyDict_New();
  if (inputs == NULL || outputs == NULL || params == NULL) goto fail;
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    bls_input* in = &r->inputs[i];
    if (in->removed) continue;
    size_t size = 0;
    for (uint32_t b = 0; b < in->n_buffers; b++) size += in->buffers[b].size;
    PyObject* data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (data == NULL) goto fail;
    char* at = PyBytes_AS_STRING(data);
    for (uint32_t b = 0; b < in->n_buffers; b++) {
      if (in->buffers[b].size > 0) memcpy(at, in->buffers[b].base, in->buffers[b].size);
      at += in->buffers[b].size;
    }
    PyObject* shape = PyTuple_New(in->n_dims);
    if (shape == NULL) {
      Py_DECREF(data);
      goto fail;
    }
    for (uint32_t d = 0; d < in->n_dims; d++) PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(in->shape[d]));
    PyObject* item = Py_BuildValue("(siNN)", in->name, (int)in->datatype, shape, data);
    if (item == NULL || PyList_Append(inputs, item) < 0) {
      Py_XDECREF(item);
      goto fail;
    }
    Py_DECREF(item);
  }
  for (uint32_t i = 0; i < r->n_outputs; i++) PyTuple_SET_ITEM(outputs, i, PyUnicode_FromString(r->outputs[i]));
  for (uint32_t i = 0; i < r->n_params; i++) {
    PyObject* v = param_value(&r->params[i]);
    if (v == NULL || PyDict_SetItemString(params, r->params[i].key, v) < 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  PyObject* correlation = r->correlation_id_str != NULL ? PyUnicode_FromString(r->correlation_id_str)
                                                        : PyLong_FromUnsignedLongLong(r->correlation_id);
  return Py_BuildValue("(NsLsINKKNNN)", PyLong_FromVoidPtr(r), r->model, (long long)r->version,
                       r->id == NULL ? "" : r->id, (unsigned)r->flags, correlation,
                       (unsigned long long)r->priority, (unsigned long long)r->timeout_us, inputs, outputs,
                       params);
fail:
  Py_XDECREF(inputs);
  Py_XDECREF(outputs);
  Py_XDECREF(params);
  return NULL;
}

static TRITONSERVER_Error* infer_async_cb(TRITONSERVER_InferenceRequest* r) {
  if (g_bls_submit == NULL) return ext_error(TRITONSERVER_ERROR_UNSUPPORTED, "BLS is not served here");
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* args = bls_args(r);
  PyObject* result = args != NULL ? PyObject_Call(g_bls_submit, args, NULL) : NULL;
  Py_XDECREF(args);
  if (result == NULL) {
    err = from_python_error("TRITONSERVER_ServerInferAsync");
  } else if (result != Py_None) {
    int code;
    const char* message;
    if (PyArg_ParseTuple(result, "is", &code, &message))
      err = TRITONSERVER_ErrorNew((TRITONSERVER_Error_Code)code, message);
    else
      err = from_python_error("TRITONSERVER_ServerInferAsync");
  }
  Py_XDECREF(result);
  PyGILState_Release(gil);
  return err;
}

static void bls_cancel_cb(TRITONSERVER_InferenceRequest* r) {
  if (g_bls_cancel == NULL || !Py_IsInitialized()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_CallFunction(g_bls_cancel, "N", PyLong_FromVoidPtr(r));
  if (result == NULL)
    PyErr_WriteUnraisable(g_bls_cancel);
  else
    Py_DECREF(result);
  PyGILState_Release(gil);
}

/* bls_respond(handle, final, response): response None (the final flag alone) or (model, version, id,
 * error (code, message) or None, outputs [(name, datatype, shape, buffer)], parameters {name: value}).
 * On the loop; the backend's allocator and callbacks run with the GIL let go. */
static PyObject* bls_respond(PyObject* module, PyObject* args) {
  (void)module;
  PyObject *handle, *response;
  int final;
  if (!PyArg_ParseTuple(args, "OpO", &handle, &final, &response)) return NULL;
  TRITONSERVER_InferenceRequest* r = PyLong_AsVoidPtr(handle);
  if (r == NULL) return NULL;
  if (response == Py_None) {
    Py_BEGIN_ALLOW_THREADS inferd_host_bls_respond(r, NULL, final);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
  }
  const char *model, *id;
  long long version;
  PyObject *error, *outputs, *params;
  if (!PyArg_ParseTuple(response, "sLsOOO", &model, &version, &id, &error, &outputs, &params)) return NULL;
  TRITONSERVER_InferenceResponse* resp = inferd_host_bls_response_new(r, model, version, id);
  if (resp == NULL) return PyErr_NoMemory();
  TRITONSERVER_Error* err = NULL;
  if (error != Py_None) {
    int code;
    const char* message;
    if (!PyArg_ParseTuple(error, "is", &code, &message)) goto fail;
    inferd_host_bls_response_set_error(resp, TRITONSERVER_ErrorNew((TRITONSERVER_Error_Code)code, message));
  }
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(params, &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (k == NULL) goto fail;
    if (PyBool_Check(value)) {
      bool b = value == Py_True;
      err = inferd_host_bls_response_add_param(resp, k, TRITONSERVER_PARAMETER_BOOL, &b);
    } else if (PyLong_Check(value)) {
      int64_t i = PyLong_AsLongLong(value);
      err = inferd_host_bls_response_add_param(resp, k, TRITONSERVER_PARAMETER_INT, &i);
    } else if (PyFloat_Check(value)) {
      double d = PyFloat_AS_DOUBLE(value);
      err = inferd_host_bls_response_add_param(resp, k, TRITONSERVER_PARAMETER_DOUBLE, &d);
    } else {
      PyObject* s = PyObject_Str(value);
      const char* v = s != NULL ? PyUnicode_AsUTF8(s) : NULL;
      if (v != NULL) err = inferd_host_bls_response_add_param(resp, k, TRITONSERVER_PARAMETER_STRING, v);
      Py_XDECREF(s);
      if (v == NULL) goto fail;
    }
    if (err != NULL) break;
  }
  Py_ssize_t n = err == NULL ? PySequence_Size(outputs) : 0;
  if (n < 0) goto fail;
  Py_buffer* views = calloc((size_t)n + 1, sizeof(Py_buffer));
  const char** names = calloc((size_t)n + 1, sizeof(char*));
  int64_t(*shapes)[64] = calloc((size_t)n + 1, sizeof(*shapes));
  uint32_t* dims = calloc((size_t)n + 1, sizeof(uint32_t));
  int* datatypes = calloc((size_t)n + 1, sizeof(int));
  PyObject** items = calloc((size_t)n + 1, sizeof(PyObject*));
  Py_ssize_t got = 0;
  if (views == NULL || names == NULL || shapes == NULL || dims == NULL || datatypes == NULL || items == NULL) {
    PyErr_NoMemory();
  } else {
    for (; got < n; got++) {
      PyObject *shape, *buffer;
      items[got] = PySequence_GetItem(outputs, got);
      if (items[got] == NULL || !PyArg_ParseTuple(items[got], "siOO", &names[got], &datatypes[got], &shape, &buffer))
        break;
      Py_ssize_t nd = 0;
      if (int64s(shape, shapes[got], 64, &nd) < 0) break;
      dims[got] = (uint32_t)nd;
      if (PyObject_GetBuffer(buffer, &views[got], PyBUF_C_CONTIGUOUS) < 0) break;
    }
  }
  if (!PyErr_Occurred()) {
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n && err == NULL; i++) err =
        inferd_host_bls_response_add_output(r, resp, names[i], (TRITONSERVER_DataType)datatypes[i], shapes[i], dims[i],
                                            views[i].buf, (size_t)views[i].len);
    if (err != NULL) inferd_host_bls_response_set_error(resp, err); /* the response says why */
    inferd_host_bls_respond(r, resp, final);
    resp = NULL;
    Py_END_ALLOW_THREADS
  }
  for (Py_ssize_t i = 0; i < got && views != NULL; i++) PyBuffer_Release(&views[i]);
  for (Py_ssize_t i = 0; items != NULL && i <= got && i < n; i++) Py_XDECREF(items[i]);
  free(views);
  free(names);
  free(shapes);
  free(dims);
  free(datatypes);
  free(items);
  if (resp == NULL) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
fail:
  /* a malformed description: the backend still gets its response, an error saying why */
  if (resp != NULL) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    inferd_host_bls_response_set_error(resp, ext_error(TRITONSERVER_ERROR_INTERNAL, "inferd could not pass the response on"));
    Py_BEGIN_ALLOW_THREADS inferd_host_bls_respond(r, resp, final);
    Py_END_ALLOW_THREADS PyErr_Restore(type, value, tb);
  }
  return NULL;
}

/* ---- custom metrics: calls into the server's registry (library.metrics_call) ----------------------- */
static TRITONSERVER_Error* metrics_error(void) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* text = value != NULL ? PyObject_Str(value) : NULL;
  const char* s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  TRITONSERVER_Error* err = ext_error(TRITONSERVER_ERROR_INVALID_ARG, "%s", s != NULL ? s : "metric error");
  PyErr_Clear();
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return err;
}

static TRITONSERVER_Error* metric_family_cb(bool create, const char* name, const char* description, int kind,
                                            bool* kept) {
  *kept = false;
  if (g_metrics == NULL) return NULL;
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* r = create ? PyObject_CallFunction(g_metrics, "sssi", "family_new", name, description, kind)
                       : PyObject_CallFunction(g_metrics, "ss", "family_delete", name);
  if (r == NULL)
    err = metrics_error();
  else
    *kept = PyObject_IsTrue(r) == 1;
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return err;
}

static TRITONSERVER_Error* metric_new_cb(const char* family, const TRITONSERVER_Parameter** labels, uint64_t n_labels,
                                         const double* buckets, uint64_t n_buckets, bool histogram, int64_t* id) {
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* pairs = PyTuple_New((Py_ssize_t)n_labels);
  PyObject* bounds = histogram ? PyTuple_New((Py_ssize_t)n_buckets) : (Py_INCREF(Py_None), Py_None);
  for (uint64_t i = 0; pairs != NULL && i < n_labels; i++) {
    const TRITONSERVER_Parameter* p = labels[i];
    const char* v = p != NULL && p->type == TRITONSERVER_PARAMETER_STRING ? p->v.s : "";
    PyTuple_SET_ITEM(pairs, (Py_ssize_t)i, Py_BuildValue("(ss)", p != NULL ? p->name : "", v));
  }
  for (uint64_t i = 0; histogram && bounds != NULL && i < n_buckets; i++)
    PyTuple_SET_ITEM(bounds, (Py_ssize_t)i, PyFloat_FromDouble(buckets[i]));
  PyObject* r = pairs != NULL && bounds != NULL
                    ? PyObject_CallFunction(g_metrics, "ssOO", "metric_new", family, pairs, bounds)
                    : NULL;
  if (r == NULL)
    err = metrics_error();
  else
    *id = PyLong_AsLongLong(r);
  Py_XDECREF(r);
  Py_XDECREF(pairs);
  Py_XDECREF(bounds);
  PyGILState_Release(gil);
  return err;
}

static void metric_delete_cb(int64_t id) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = PyObject_CallFunction(g_metrics, "sL", "metric_delete", (long long)id);
  if (r == NULL) PyErr_Clear();
  Py_XDECREF(r);
  PyGILState_Release(gil);
}

static TRITONSERVER_Error* metric_op_cb(int64_t id, int op, double value, double* result) {
  static const char* ops[] = {"value", "increment", "set", "observe"};
  PyGILState_STATE gil = PyGILState_Ensure();
  TRITONSERVER_Error* err = NULL;
  PyObject* r = PyObject_CallFunction(g_metrics, "sLsd", "metric_op", (long long)id, ops[op & 3], value);
  if (r == NULL)
    err = metrics_error();
  else
    *result = PyFloat_AsDouble(r);
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return err;
}

/* ---- module functions ------------------------------------------------------------------------ */
static PyObject* open_backend(PyObject* module, PyObject* args) {
  (void)module;
  const char *name, *dir, *libpath, *config;
  if (!PyArg_ParseTuple(args, "ssss", &name, &dir, &libpath, &config)) return NULL;
  Backend* b = PyObject_New(Backend, &BackendType);
  if (b == NULL) return NULL;
  b->backend = NULL;
  TRITONSERVER_Error* err;
  TRITONBACKEND_Backend* backend = NULL;
  Py_BEGIN_ALLOW_THREADS err = inferd_host_backend_open(name, dir, libpath, config, &backend);
  Py_END_ALLOW_THREADS if (err != NULL) {
    Py_DECREF(b);
    return raise_error(err);
  }
  b->backend = backend;
  return (PyObject*)b;
}

/* alias(name): have the host library known to the dynamic loader by `name` too (a backend linked against
 * a renamed core, libtritonserver-<hash>.so). `name` must resolve, from this extension's RUNPATH ($ORIGIN),
 * to a symlink to libtritonserver.so: the loader finds the file already loaded and records the bare
 * name for it, which a backend's DT_NEEDED then matches (a path would be recorded as the path). */
static PyObject* alias(PyObject* module, PyObject* arg) {
  (void)module;
  const char* name = PyUnicode_AsUTF8(arg);
  if (name == NULL) return NULL;
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char* why = dlerror();
    PyErr_Format(PyExc_OSError, "%s", why ? why : name);
    return NULL;
  }
  void* ours = dlsym(handle, "inferd_host_queue_take");
  if (ours != (void*)inferd_host_queue_take) {
    dlclose(handle);
    PyErr_Format(PyExc_OSError, "%s resolved to another library than inferd's host", name);
    return NULL;
  }
  Py_RETURN_NONE; /* the handle stays open: the name lives as long as it */
}

#define SET(global, value) \
  do {                     \
    Py_XINCREF(value);     \
    Py_XSETREF(global, value); \
  } while (0)

static PyObject* setup(PyObject* module, PyObject* args, PyObject* kwargs) {
  (void)module;
  static char* kw[] = {"tensor",    "response",  "datatypes",  "make_error", "log",     "model_ready",
                       "model_txn", "bls_submit", "bls_cancel", "metrics",    NULL};
  PyObject *tensor, *response, *datatypes, *make_error, *log, *ready, *txn, *submit, *cancel, *metrics;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOOOOOO", kw, &tensor, &response, &PyTuple_Type,
                                   &datatypes, &make_error, &log, &ready, &txn, &submit, &cancel, &metrics))
    return NULL;
  SET(g_tensor, tensor);
  SET(g_response, response);
  SET(g_datatypes, datatypes);
  SET(g_make_error, make_error);
  SET(g_log, log);
  SET(g_model_ready, ready);
  SET(g_model_txn, txn);
  SET(g_bls_submit, submit);
  SET(g_bls_cancel, cancel);
  SET(g_metrics, metrics);
  host_services svc = {log_cb,        model_ready_cb,   model_txn_cb,     infer_async_cb, bls_cancel_cb,
                       metric_family_cb, metric_new_cb, metric_delete_cb, metric_op_cb, decoupled_send_cb};
  inferd_host_set_services(&svc);
  Py_RETURN_NONE;
}

static PyObject* set_log_levels(PyObject* module, PyObject* arg) {
  (void)module;
  unsigned long mask = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return NULL;
  inferd_host_set_log_levels((uint32_t)mask);
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"open_backend", open_backend, METH_VARARGS,
     "open_backend(name, dir, libpath, config_json): load a backend library and find its entry points"},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_VARARGS | METH_KEYWORDS,
     "hand in inferd's classes and callbacks (once)"},
    {"set_log_levels", set_log_levels, METH_O, "which TRITONSERVER_LogLevels are on (a bit each)"},
    {"alias", alias, METH_O, "alias(name): the host library known by `name` too (see the C source)"},
    {"bls_respond", bls_respond, METH_VARARGS,
     "bls_respond(handle, final, response): a response to a backend's request to another model"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tritonc", "inferd's Triton backend host: the Python side", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tritonc(void) {
  PyTypeObject* types[] = {&OutBufType, &PendingType, &BackendType, &ModelType, &InstanceType};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    if (PyType_Ready(types[i]) < 0) return NULL;
  PyObject* m = PyModule_Create(&module_def);
  if (m == NULL) return NULL;
  g_error = PyErr_NewExceptionWithDoc("_tritonc.Error", "a TRITONSERVER_Error: args are (code, message)", NULL,
                                      NULL);
  s_deliver = PyUnicode_InternFromString("deliver");
  s_send = PyUnicode_InternFromString("send");
  s_on_cancel = PyUnicode_InternFromString("on_cancel");
  s_to_bytes = PyUnicode_InternFromString("to_bytes");
  if (g_error == NULL || s_deliver == NULL || s_send == NULL || s_on_cancel == NULL || s_to_bytes == NULL ||
      PyModule_AddObjectRef(m, "Error", g_error) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  PyModule_AddIntConstant(m, "API_MAJOR", TRITONBACKEND_API_VERSION_MAJOR);
  PyModule_AddIntConstant(m, "API_MINOR", TRITONBACKEND_API_VERSION_MINOR);
  return m;
}
