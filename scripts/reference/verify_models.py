#!/usr/bin/env python3
"""Check that every model in tests/fixtures/reference_models loads and infers correctly on a
Triton-compatible server, over HTTP (binary and JSON tensors) and gRPC.

    python scripts/reference/verify_models.py [--http localhost:18000] [--grpc localhost:18001]

The same checks run against inferd in tests/e2e/test_e2e_verify_models.py.

Needs numpy and tritonclient[all] (the anchor venv has both). Exit code 0 = all passed.
"""
import argparse
import sys
import threading

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODELS = ["add_sub", "mul_fp32", "identity_fp32", "identity_bytes", "batched_sleep", "ensemble_add_sub"]
failures = []


def check(name, cond, detail=""):
    print(f"  {'ok  ' if cond else 'FAIL'} {name}{(' : ' + detail) if (detail and not cond) else ''}")
    if not cond:
        failures.append(name)


def infer(mod, client, model, inputs, outputs, binary=True):
    """inputs: list of (name, array, datatype); outputs: list of names -> dict name->array"""
    ins = []
    for name, arr, dt in inputs:
        t = mod.InferInput(name, list(arr.shape), dt)
        if mod is httpclient:
            t.set_data_from_numpy(arr, binary_data=binary)
        else:
            t.set_data_from_numpy(arr)
        ins.append(t)
    if mod is httpclient:
        outs = [mod.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    else:
        outs = [mod.InferRequestedOutput(o) for o in outputs]
    res = client.infer(model, ins, outputs=outs)
    return {o: res.as_numpy(o) for o in outputs}


def run(proto, mod, client, binary=True):
    tag = f"{proto}{'' if proto == 'grpc' else ('/binary' if binary else '/json')}"
    print(f"[{tag}]")
    check(f"{tag} server live", client.is_server_live())
    check(f"{tag} server ready", client.is_server_ready())
    for m in MODELS:
        check(f"{tag} model ready {m}", client.is_model_ready(m))
    rng = np.random.default_rng(0)

    a = rng.random((3, 16), dtype=np.float32)
    b = rng.random((3, 16), dtype=np.float32)
    r = infer(mod, client, "add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], ["OUTPUT0", "OUTPUT1"], binary)
    check(f"{tag} add_sub sum", np.allclose(r["OUTPUT0"], a + b) and r["OUTPUT0"].shape == (3, 16))
    check(f"{tag} add_sub diff", np.allclose(r["OUTPUT1"], a - b))

    r = infer(mod, client, "mul_fp32", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], ["OUTPUT0"], binary)
    check(f"{tag} mul_fp32", np.allclose(r["OUTPUT0"], a * b))

    for n in (0, 1, 1000, 262144 if binary else 4096):
        x = rng.random((n,), dtype=np.float32)
        r = infer(mod, client, "identity_fp32", [("INPUT0", x, "FP32")], ["OUTPUT0"], binary)
        check(f"{tag} identity_fp32 n={n}", r["OUTPUT0"].shape == (n,) and np.array_equal(r["OUTPUT0"], x))

    s = np.array([b"hello", b"", "\u00fcnic\u00f8de".encode(), bytes(range(256)) if binary else b"x" * 300], dtype=np.object_)
    r = infer(mod, client, "identity_bytes", [("INPUT0", s, "BYTES")], ["OUTPUT0"], binary)
    # in JSON mode Triton returns BYTES as JSON strings; the client then gives str objects
    got = [v.encode() if isinstance(v, str) else v for v in r["OUTPUT0"]]
    check(f"{tag} identity_bytes", r["OUTPUT0"].shape == (4,) and got == list(s), repr(r["OUTPUT0"]))

    x = rng.random((5, 4), dtype=np.float32)
    r = infer(mod, client, "batched_sleep", [("INPUT0", x, "FP32")], ["OUTPUT0", "BATCH_SIZE"], binary)
    check(f"{tag} batched_sleep echo", np.array_equal(r["OUTPUT0"], x))
    check(f"{tag} batched_sleep batch=5", r["BATCH_SIZE"].shape == (5, 1) and int(r["BATCH_SIZE"][0, 0]) == 5,
          repr(r["BATCH_SIZE"]))

    r = infer(mod, client, "ensemble_add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")],
              ["OUTPUT0", "OUTPUT1"], binary)
    check(f"{tag} ensemble OUTPUT0=(a+b)*(a-b)", np.allclose(r["OUTPUT0"], (a + b) * (a - b)))
    check(f"{tag} ensemble OUTPUT1=a-b", np.allclose(r["OUTPUT1"], a - b))


def dynamic_batching_check(url):
    """16 concurrent single-item requests to batched_sleep: at least one execute() must batch >1."""
    print("[dynamic batching]")
    sizes = []
    lock = threading.Lock()

    def worker():
        c = httpclient.InferenceServerClient(url)
        for _ in range(5):
            t = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            t.set_data_from_numpy(np.ones((1, 4), np.float32))
            res = c.infer("batched_sleep", [t])
            with lock:
                sizes.append(int(res.as_numpy("BATCH_SIZE")[0, 0]))
        c.close()

    ts = [threading.Thread(target=worker) for _ in range(16)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(f"batched_sleep max batch under concurrency 16 = {max(sizes)} (>1)", max(sizes) > 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="localhost:18000")
    ap.add_argument("--grpc", default="localhost:18001")
    args = ap.parse_args()
    h = httpclient.InferenceServerClient(args.http)
    run("http", httpclient, h, binary=True)
    run("http", httpclient, h, binary=False)
    g = grpcclient.InferenceServerClient(args.grpc)
    run("grpc", grpcclient, g)
    dynamic_batching_check(args.http)
    print(f"{'ALL OK' if not failures else 'FAILURES: ' + ', '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
