#!/usr/bin/env bash
# The one check a session with a lent GPU machine runs (issue 27), in under 8 minutes:
#
#   1. installs the carried wheels (make gpu-wheels: .whl/) into /tmp/site, as the device README says,
#      and perf_analyzer from .whl/perf_analyzer/ when it travelled;
#   2. records the machine: nvidia-smi, Python, torch and CUDA, NVML, the GPUs inferd finds;
#   3. runs the GPU tests: pytest -m gpu on the GPU test files (KIND_GPU models, GPU metrics, CUDA shared
#      memory over HTTP and gRPC with the CUDA runtime calls under it, the Python backend's GPU tensors);
#   4. runs benchmarks/gpu_bench.py (the issue's goal rows);
#   5. writes under $OUT (at most 8 files): summary.md (GPU.md-ready: date, commit, GPU, each test's
#      result, each benchmark row), check.log (all of this output), env.txt, pytest.log, junit.xml,
#      gpu_bench.md, gpu_bench.json, servers.log (the bench's server logs and perf_analyzer's output).
#
# On the lent machine, through the device tool from the repository root, after `make gpu-wheels` here:
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=540)
# then copy summary.md into GPU.md. .git does not travel: the commit comes from .whl/COMMIT, which
# make gpu-wheels writes (run it again right before the call).
#
# Dry run on a machine without a GPU (the same steps: the carried wheels are installed into a scratch
# folder for Python 3.12 as a check only, this machine's Python serves, the GPU tests skip, the bench
# runs its CPU variant for a few seconds; $OUT defaults to benchmarks/results/gpu-check-<UTC>):
#   GPU_CHECK_DRY=1 PYTHON=.venv/bin/python scripts/gpu_check.sh
# Env: PYTHON (python3: the image's, with torch), OUT, GPU_CHECK_DRY, PYTEST_TIMEOUT_S (180),
# BENCH_TIMEOUT_S (220).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
DRY=${GPU_CHECK_DRY:-0}
if [ "$DRY" = 1 ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}
  OUT=${OUT:-$ROOT/benchmarks/results/gpu-check-$(date -u +%Y%m%d-%H%M%S)}
else
  PY=${PYTHON:-python3}
  OUT=${OUT:?is the results folder the device tool sets (GPU_CHECK_DRY=1 for a dry run here)}
fi
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
  --platform manylinux1_x86_64)

say() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

commit_of() {
  local c
  if [ -e "$ROOT/.git" ] && c=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null); then
    [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && c="$c (with uncommitted changes)"
    echo "$c"
  elif [ -s "$ROOT/.whl/COMMIT" ]; then
    echo "$(cat "$ROOT/.whl/COMMIT") (.whl/COMMIT: make gpu-wheels)"
  else
    echo "unknown (no .git, no .whl/COMMIT)"
  fi
}

install_wheels() {
  local wheels=("$ROOT"/.whl/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    say "no wheels in .whl/ (make gpu-wheels, and carry .whl)"
    [ "$DRY" = 1 ] || return 1
  elif [ "$DRY" = 1 ]; then
    say "dry run: the ${#wheels[@]} carried wheels installed for Python 3.12 into a scratch folder (a check)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site312" \
      --python-version 3.12 --implementation cp --only-binary=:all: "${PLATFORMS[@]}" "${wheels[@]}" || return 1
  else
    say "installing the ${#wheels[@]} carried wheels into /tmp/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "${wheels[@]}" || return 1
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT/src"
}

setup_perf_analyzer() {
  local from=$ROOT/.whl/perf_analyzer dir=$WORK/pa
  if [ ! -s "$from/perf_analyzer.gz" ]; then
    say "no perf_analyzer carried: the bench measures with its Python client"
    return 0
  fi
  mkdir -p "$dir/lib"
  gzip -dc "$from/perf_analyzer.gz" >"$dir/perf_analyzer.bin" && chmod +x "$dir/perf_analyzer.bin"
  cp "$from"/lib*.so* "$dir/lib/"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$dir/lib" "$dir/perf_analyzer.bin" >"$dir/perf_analyzer"
  chmod +x "$dir/perf_analyzer"
  if "$dir/perf_analyzer" --version; then
    export PERF_ANALYZER=$dir/perf_analyzer
  else
    say "the carried perf_analyzer does not run here:"
    LD_LIBRARY_PATH=$dir/lib ldd "$dir/perf_analyzer.bin" | grep 'not found'
  fi
}

record_machine() {
  if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1; else echo "nvidia-smi: not found (no GPU driver here)"; fi
  "$PY" - <<'PY' 2>&1
import importlib.metadata as md
import platform
import sys

def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"

print(f"python: {sys.version.split()[0]} ({sys.executable}), {platform.platform()}")
try:
    import torch
    cuda = torch.cuda.is_available()
    print(f"torch: {torch.__version__}, CUDA {torch.version.cuda}, cuda available: {cuda}")
    if cuda:
        p = torch.cuda.get_device_properties(0)
        print(f"torch device 0: {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}")
except Exception as e:
    print(f"torch: {e}")
for name in ("nvidia-ml-py", "tritonclient", "numpy", "protobuf", "grpcio", "uvloop", "pytest"):
    print(f"{name}: {version(name)}")
try:
    import pynvml
    pynvml.nvmlInit()
    print(f"NVML driver: {pynvml.nvmlSystemGetDriverVersion()}")
except Exception as e:
    print(f"NVML: {e}")
from inferd.gpu.devices import machine_gpus
gpus = machine_gpus()
print(f"inferd finds {len(gpus)} GPU(s)")
for g in gpus:
    print(f"  {g}")
PY
}

gpu_name() {
  "$PY" -c 'from inferd.gpu.devices import machine_gpus as m; g = m(); print(g[0].name if g else "no GPU")' 2>/dev/null ||
    echo "unknown"
}

run_tests() {
  local files=(tests/e2e/test_e2e_gpu*.py tests/e2e/test_e2e_cuda_shm.py tests/e2e/test_e2e_python_gpu.py)
  say "pytest -m gpu ${files[*]}"
  # -W: the gpu marker is registered in pyproject.toml; an older tree without it still runs
  timeout -k 10 "${PYTEST_TIMEOUT_S:-180}" "$PY" -m pytest -m gpu -p no:cacheprovider -v -rA \
    -W ignore::pytest.PytestUnknownMarkWarning --junitxml "$OUT/junit.xml" "${files[@]}" 2>&1 | tee "$OUT/pytest.log"
}

test_table() {
  "$PY" - "$OUT/junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError) as e:
    print(f"no test results ({e})")
    raise SystemExit(0)
print("| test | result |")
print("| --- | --- |")
for c in cases:
    name = f"{c.get('classname', '').replace('.', '/')}.py::{c.get('name')}".replace("tests/e2e/", "")
    result = "passed"
    for kind in ("failure", "error", "skipped"):
        el = c.find(kind)
        if el is not None:
            text = (el.get("message") or "").replace("|", "/").replace("\n", " ")[:200]
            result = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[kind] + (f": {text}" if text else "")
    print(f"| `{name}` | {result} |")
PY
}

run_bench() {
  local args=(--output "$WORK/bench")
  [ "$DRY" = 1 ] && args+=(--cpu --rounds 1 --seconds 1)
  say "benchmarks/gpu_bench.py ${args[*]}"
  timeout -k 15 "${BENCH_TIMEOUT_S:-220}" "$PY" benchmarks/gpu_bench.py "${args[@]}"
}

main() {
  local started=$SECONDS commit gpu tests_rc bench_rc
  commit=$(commit_of)
  say "inferd at $commit; results in $OUT$([ "$DRY" = 1 ] && echo ' (dry run)')"
  install_wheels || { say "the wheels did not install: stopping"; return 1; }
  setup_perf_analyzer
  record_machine | tee "$OUT/env.txt"
  gpu=$(gpu_name)
  run_tests
  tests_rc=$?
  run_bench
  bench_rc=$?
  for f in gpu_bench.md gpu_bench.json; do
    [ -f "$WORK/bench/$f" ] && cp "$WORK/bench/$f" "$OUT/$f"
  done
  for f in "$WORK"/bench/*.log "$WORK"/bench/pa-*.txt; do
    [ -f "$f" ] && printf '\n===== %s =====\n' "${f#"$WORK"/bench/}" && tail -c 2000000 "$f"
  done >"$OUT/servers.log"
  {
    if [ "$DRY" = 1 ]; then
      echo "## $(date -u '+%Y-%m-%d %H:%M UTC'): dry run on $(hostname) ($gpu)"
    else
      echo "## $(date -u '+%Y-%m-%d %H:%M UTC'): $gpu"
    fi
    echo
    echo "- commit: $commit"
    grep -E '^(python|torch|torch device 0|NVML driver|nvidia-ml-py|tritonclient):' "$OUT/env.txt" | sed 's/^/- /'
    echo "- perf_analyzer: $([ -n "${PERF_ANALYZER:-}" ] && echo "2.41.1, carried" || echo "not carried or not running")"
    echo "- scripts/gpu_check.sh took $((SECONDS - started)) s; pytest exit $tests_rc, bench exit $bench_rc"
    echo
    echo "### GPU tests (\`pytest -m gpu\` on tests/e2e/test_e2e_gpu*.py, test_e2e_cuda_shm.py, test_e2e_python_gpu.py)"
    echo
    test_table
    echo
    echo "### Benchmark rows (\`benchmarks/gpu_bench.py\`)"
    echo
    cat "$OUT/gpu_bench.md" 2>/dev/null || echo "no results (bench exit $bench_rc: see check.log)"
  } >"$OUT/summary.md"
  say "summary ($OUT/summary.md):"
  cat "$OUT/summary.md"
  [ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
}

main 2>&1 | tee "$OUT/check.log"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
