"""Compare the two servers' runs of Triton's QA files (run.sh's cases.tsv files) as a markdown table.

  python scripts/triton_qa/report.py [RESULTS]      RESULTS: $QA_DIR/results (the default, slice 1)
                                                    or $QA_DIR/results/slice2

Prints the per-file counts, the cases the reference passes and inferd does not (each with inferd's
message, and the reason where the difference is deliberate), and the reverse; writes the same text
to RESULTS/summary.md.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

# run ids (run.sh) -> the QA file they run; a prefix ending in "." covers one file run several times
FILES = [
    ("bp_python", "L0_backend_python/python_test.py"),
    ("bp_lifecycle", "L0_backend_python/lifecycle/lifecycle_test.py"),
    ("bp_decoupled", "L0_backend_python/decoupled/decoupled_test.py"),
    (
        "bp_response_sender_complete_final",
        "L0_backend_python/response_sender/response_sender_complete_final_test.py",
    ),
    ("bp_response_sender", "L0_backend_python/response_sender/response_sender_test.py"),
    ("bp_async_execute", "L0_backend_python/async_execute/concurrency_test.py"),
    ("bp_ensemble", "L0_backend_python/ensemble/ensemble_test.py"),
    ("bp_bls_parameters", "L0_backend_python/bls/bls_parameters_test.py"),
    ("bp_bls.", "L0_backend_python/bls (test_infer_shm_leak.py x4 models x2 BLS_KIND)"),
    ("bp_argument_validation", "L0_backend_python/argument_validation (test_infer_shm_leak.py)"),
    ("bp_custom_metrics", "L0_backend_python/custom_metrics (test_infer_shm_leak.py)"),
    ("http_test", "L0_http/http_test.py"),
    ("generate_endpoint", "L0_http/generate_endpoint_test.py"),
    ("http_aio", "L0_http/python_http_aio_test.py"),
    ("grpc_aio", "L0_grpc/python_grpc_aio_test.py"),
    ("input_validation.", "L0_input_validation/input_validation_test.py"),
    ("parameters.", "L0_parameters/parameters_test.py (x4 server configs)"),
    ("shared_memory.", "L0_shared_memory/shared_memory_test.py (x http/grpc)"),
    # slice 2 (run.sh SERVER slice2; results/slice2)
    ("model_update.", "L0_model_update/instance_update_test.py (x3 rate-limit modes)"),
    ("metrics_queue_size", "L0_metrics/metrics_queue_size_test.py"),
    ("grpc_client_plugin", "L0_grpc/grpc_client_plugin_test.py"),
    ("bp_io", "L0_backend_python/io/io_test.py"),
    ("bp_logging.", "L0_backend_python/logging/logging_test.py (x3 log settings)"),
    ("bp_model_control", "L0_backend_python/model_control/model_control_test.py"),
    (
        "bp_request_rescheduling.",
        "L0_backend_python/request_rescheduling (test_infer_shm_leak.py, grpc_endpoint_test.py)",
    ),
    ("nan_inf", "L0_nan_inf/nan_inf_test.py"),
    ("optional_input.", "L0_optional_input/optional_input_test.py"),
    ("model_namespacing.", "L0_model_namespacing/test.py (x POLL/EXPLICIT)"),
]

# differences inferd keeps on purpose: (file, case) -> why
DELIBERATE = {
    ("L0_backend_python/python_test.py", "test_growth_error"): (
        "the test sends a 1 GiB body to see the Python backend's shared-memory pool fail to grow; "
        "inferd refuses a body over --http-max-input-size (64 MiB by default) with 413 before reading it, "
        "and its Python backend has no shared-memory pool to grow"
    ),
}

Cases = dict[tuple[str, str], tuple[str, str]]


def file_of(run_id: str) -> str:
    for prefix, name in FILES:
        if run_id == prefix or (prefix.endswith(".") and run_id.startswith(prefix)):
            return name
    return run_id


def load(path: Path) -> Cases:
    """(file, case) -> (outcome, message); a case run under several configs is named config::case, and
    a test name two classes of one run share is qualified with its class (Class.test)."""
    out: Cases = {}
    if not path.exists():
        return out
    rows = [([*line.split("\t"), "", "", ""])[:4] for line in path.read_text().splitlines()]
    seen = Counter((run_id, case.split("::")[-1]) for run_id, case, _, _ in rows)
    for run_id, case, outcome, msg in rows:
        short = case.split("::")[-1]
        if seen[(run_id, short)] > 1:
            short = f"{case.split('::')[0].rsplit('.', 1)[-1]}.{short}"
        sub = run_id.split(".", 1)[1] if "." in run_id else ""
        out[(file_of(run_id), f"{sub}::{short}" if sub else short)] = (outcome, msg)
    return out


def version(results: Path, server: str) -> str:
    p = results / server / "VERSION"
    return p.read_text().splitlines()[0] if p.exists() else "(not run)"


def report(results: Path) -> str:
    ref = load(results / "reference" / "cases.tsv")
    inf = load(results / "inferd" / "cases.tsv")
    lines = [
        f"- {version(results, 'reference')}",
        f"- {version(results, 'inferd')}",
        "",
        "| file | cases run | skipped by the file | reference passes | inferd passes |",
        "|---|---:|---:|---:|---:|",
    ]
    totals = [0, 0, 0, 0]
    for _, name in FILES:
        keys = sorted({k for k in [*ref, *inf] if k[0] == name})
        if not keys:
            continue
        run = [k for k in keys if ref.get(k, ("",))[0] != "skipped"]
        row = [
            len(run),
            len(keys) - len(run),
            sum(ref.get(k, ("",))[0] == "passed" for k in run),
            sum(inf.get(k, ("",))[0] == "passed" for k in run),
        ]
        lines.append(f"| {name} | " + " | ".join(map(str, row)) + " |")
        totals = [a + b for a, b in zip(totals, row, strict=True)]
    lines.append("| **total** | **{}** | {} | **{}** | **{}** |".format(*totals))
    lines += ["", "Passed by the reference, not by inferd:", ""]
    gaps = 0
    for (name, case), (outcome, _) in sorted(ref.items()):
        if outcome != "passed":
            continue
        i_out, i_msg = inf.get((name, case), ("missing", ""))
        if i_out == "passed":
            continue
        gaps += 1
        why = DELIBERATE.get((name.split(" ")[0], case.split("::")[-1].rsplit(".", 1)[-1]))
        lines.append(f"- `{name.split(' ')[0]}::{case}`: {i_out}: {i_msg[:240]}")
        if why:
            lines.append(f"  - deliberate: {why}")
    if not gaps:
        lines.append("- none")
    lines += ["", "Passed by inferd, not by the reference:", ""]
    rev = [
        f"- `{name.split(' ')[0]}::{case}` (reference: {ref.get((name, case), ('missing',))[0]})"
        for (name, case), (outcome, _) in sorted(inf.items())
        if outcome == "passed" and ref.get((name, case), ("",))[0] != "passed"
    ]
    lines += rev or ["- none"]
    return "\n".join(lines) + "\n"


def main() -> None:
    default = Path(
        os.environ.get("TRITON_QA_DIR", Path(os.environ.get("TMPDIR", "/tmp")) / "inferd-triton-qa")
    )
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else default / "results"
    text = report(results)
    (results / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
