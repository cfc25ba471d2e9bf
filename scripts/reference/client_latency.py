#!/usr/bin/env python3
"""Latency of one tiny request (add_sub, 2 x FP32[1,16]) in a sequential loop through
tritonclient, i.e. including the Python client's own overhead. measure.sh runs it (with the
reference venv's interpreter) against each server `make bench` measures.

    python scripts/reference/client_latency.py [--http localhost:18000] [--grpc localhost:18001] [-n 2000]

Pass --grpc '' to skip gRPC. Prints one line per protocol; --json for machine output.
"""
import argparse
import json
import statistics
import time

import numpy as np


def loop(mod, url, n, warmup, binary):
    client = mod.InferenceServerClient(url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [mod.InferInput("INPUT0", [1, 16], "FP32"), mod.InferInput("INPUT1", [1, 16], "FP32")]
    for t in inputs:
        if binary is None:
            t.set_data_from_numpy(a)
        else:
            t.set_data_from_numpy(a, binary_data=binary)
    lat = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        res = client.infer("add_sub", inputs)
        res.as_numpy("OUTPUT0")
        if i >= warmup:
            lat.append((time.perf_counter() - t0) * 1e6)
    client.close()
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))]
    return {"n": n, "p50_us": round(q(50), 1), "p90_us": round(q(90), 1), "p99_us": round(q(99), 1),
            "mean_us": round(statistics.fmean(lat), 1), "min_us": round(lat[0], 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="localhost:18000")
    ap.add_argument("--grpc", default="localhost:18001")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {}
    if a.http:
        import tritonclient.http as h
        out["http_binary"] = loop(h, a.http, a.n, a.warmup, True)
        out["http_json"] = loop(h, a.http, a.n, a.warmup, False)
    if a.grpc:
        import tritonclient.grpc as g
        out["grpc"] = loop(g, a.grpc, a.n, a.warmup, None)
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"client_latency {k:<12} n={v['n']} p50={v['p50_us']}us p90={v['p90_us']}us "
                  f"p99={v['p99_us']}us mean={v['mean_us']}us min={v['min_us']}us")


if __name__ == "__main__":
    main()
