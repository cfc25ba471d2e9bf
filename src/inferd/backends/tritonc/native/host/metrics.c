/*
 * Custom metrics a backend creates (TRITONSERVER_MetricFamily*, TRITONSERVER_Metric*). Where the server
 * keeps them (host_svc.metric_*: inferd's custom metric registry, rendered on /metrics with the Python
 * models' families) every call goes there; otherwise (no server: the host's tests) they are kept here.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "host.h"

struct TRITONSERVER_MetricFamily {
  TRITONSERVER_MetricKind kind;
  char* name;
  bool kept_by_server;
  atomic_int metrics; /* alive: a family deleted before them would leave them dangling */
};

struct TRITONSERVER_MetricArgs {
  double* buckets;
  uint64_t n_buckets;
};

struct TRITONSERVER_Metric {
  TRITONSERVER_MetricFamily* family;
  int64_t server_id; /* the server's id of it (family kept by the server) */
  pthread_mutex_t mu;
  double value; /* counter, gauge; a histogram's sum */
  uint64_t count;
  double* buckets;
  uint64_t* bucket_counts;
  uint64_t n_buckets;
};

TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(
    TRITONSERVER_MetricFamily** family, const TRITONSERVER_MetricKind kind, const char* name,
    const char* description) {
  (void)description;
  if (family == NULL || name == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "family or name is null");
  if (kind != TRITONSERVER_METRIC_KIND_COUNTER && kind != TRITONSERVER_METRIC_KIND_GAUGE &&
      kind != TRITONSERVER_METRIC_KIND_HISTOGRAM)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "Unknown metric kind");
  TRITONSERVER_MetricFamily* f = calloc(1, sizeof(*f));
  if (f == NULL || (f->name = host_strdup(name)) == NULL) {
    free(f);
    return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  }
  f->kind = kind;
  atomic_init(&f->metrics, 0);
  if (host_svc.metric_family != NULL) {
    TRITONSERVER_Error* err = host_svc.metric_family(true, name, description ? description : "", (int)kind,
                                                     &f->kept_by_server);
    if (err != NULL) {
      free(f->name);
      free(f);
      return err;
    }
  }
  *family = f;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family) {
  if (family == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "family is null");
  if (atomic_load(&family->metrics) > 0)
    return host_error(TRITONSERVER_ERROR_INTERNAL,
                      "Must call MetricDelete on all dependent metrics before calling MetricFamilyDelete.");
  if (family->kept_by_server) {
    bool kept;
    TRITONSERVER_ErrorDelete(host_svc.metric_family(false, family->name, "", (int)family->kind, &kept));
  }
  free(family->name);
  free(family);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_GetMetricFamilyKind(TRITONSERVER_MetricFamily* family, TRITONSERVER_MetricKind* kind) {
  if (family == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "family is null");
  *kind = family->kind;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** args) {
  *args = calloc(1, sizeof(**args));
  return *args == NULL ? host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory") : NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricArgsSetHistogram(
    TRITONSERVER_MetricArgs* args, const double* buckets, const uint64_t buckets_count) {
  double* copy = malloc(sizeof(double) * (buckets_count + 1));
  if (copy == NULL) return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  if (buckets_count > 0) memcpy(copy, buckets, sizeof(double) * buckets_count);
  free(args->buckets);
  args->buckets = copy;
  args->n_buckets = buckets_count;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* args) {
  if (args != NULL) {
    free(args->buckets);
    free(args);
  }
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricNewWithArgs(
    TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels,
    const uint64_t label_count, const TRITONSERVER_MetricArgs* args) {
  (void)labels;
  (void)label_count;
  if (metric == NULL || family == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric or family is null");
  bool histogram = family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM;
  if (histogram && (args == NULL || args->buckets == NULL))
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "Missing required args for histogram metric");
  TRITONSERVER_Metric* m = calloc(1, sizeof(*m));
  if (m == NULL) return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  if (family->kept_by_server) {
    TRITONSERVER_Error* err =
        host_svc.metric_new(family->name, labels, label_count, histogram ? args->buckets : NULL,
                            histogram ? args->n_buckets : 0, histogram, &m->server_id);
    if (err != NULL) {
      free(m);
      return err;
    }
  } else if (histogram) {
    m->n_buckets = args->n_buckets;
    m->buckets = malloc(sizeof(double) * (m->n_buckets + 1));
    m->bucket_counts = calloc(m->n_buckets + 1, sizeof(uint64_t));
    if (m->buckets == NULL || m->bucket_counts == NULL) {
      free(m->buckets);
      free(m->bucket_counts);
      free(m);
      return host_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
    }
    if (m->n_buckets > 0) memcpy(m->buckets, args->buckets, sizeof(double) * m->n_buckets);
  }
  pthread_mutex_init(&m->mu, NULL);
  m->family = family;
  atomic_fetch_add(&family->metrics, 1);
  *metric = m;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricNew(
    TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels,
    const uint64_t label_count) {
  if (family != NULL && family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG,
                      "Histogram metric must be created with TRITONSERVER_MetricNewWithArgs");
  return TRITONSERVER_MetricNewWithArgs(metric, family, labels, label_count, NULL);
}

TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  if (metric->family->kept_by_server) host_svc.metric_delete(metric->server_id);
  atomic_fetch_sub(&metric->family->metrics, 1);
  pthread_mutex_destroy(&metric->mu);
  free(metric->buckets);
  free(metric->bucket_counts);
  free(metric);
  return NULL;
}

static TRITONSERVER_Error* wrong_kind(const char* op) {
  return host_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s is not supported for this metric kind", op);
}

/* an operation on a metric the server keeps: 0 value, 1 increment, 2 set, 3 observe */
static TRITONSERVER_Error* server_op(TRITONSERVER_Metric* metric, int op, double value, double* result) {
  double ignored;
  return host_svc.metric_op(metric->server_id, op, value, result != NULL ? result : &ignored);
}

TRITONSERVER_Error* TRITONSERVER_MetricValue(TRITONSERVER_Metric* metric, double* value) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  if (metric->family->kept_by_server) return server_op(metric, 0, 0, value);
  if (metric->family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM) return wrong_kind("Value");
  pthread_mutex_lock(&metric->mu);
  *value = metric->value;
  pthread_mutex_unlock(&metric->mu);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  if (metric->family->kept_by_server) return server_op(metric, 1, value, NULL);
  TRITONSERVER_MetricKind kind = metric->family->kind;
  if (kind == TRITONSERVER_METRIC_KIND_HISTOGRAM) return wrong_kind("Increment");
  if (kind == TRITONSERVER_METRIC_KIND_COUNTER && value < 0)
    return host_error(TRITONSERVER_ERROR_INVALID_ARG, "value must be >= 0");
  pthread_mutex_lock(&metric->mu);
  metric->value += value;
  pthread_mutex_unlock(&metric->mu);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  if (metric->family->kept_by_server) return server_op(metric, 2, value, NULL);
  if (metric->family->kind != TRITONSERVER_METRIC_KIND_GAUGE) return wrong_kind("Set");
  pthread_mutex_lock(&metric->mu);
  metric->value = value;
  pthread_mutex_unlock(&metric->mu);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricObserve(TRITONSERVER_Metric* metric, double value) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  if (metric->family->kept_by_server) return server_op(metric, 3, value, NULL);
  if (metric->family->kind != TRITONSERVER_METRIC_KIND_HISTOGRAM) return wrong_kind("Observe");
  pthread_mutex_lock(&metric->mu);
  metric->value += value;
  metric->count++;
  uint64_t i = 0;
  while (i < metric->n_buckets && value > metric->buckets[i]) i++;
  metric->bucket_counts[i]++;
  pthread_mutex_unlock(&metric->mu);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_GetMetricKind(TRITONSERVER_Metric* metric, TRITONSERVER_MetricKind* kind) {
  if (metric == NULL) return host_error(TRITONSERVER_ERROR_INVALID_ARG, "metric is null");
  *kind = metric->family->kind;
  return NULL;
}
