# inferd: two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
MODELS := examples/models
# two installs: what serving the example repository and running README.md's snippets need (make run:
# the examples extra has the snippets' clients), and on top of it the test and
# benchmark tools and the heavy optional backends the tests load (OpenVINO, TensorFlow: about 1.5 GB)
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: install install-run native run test test-stress azurite browser lint typecheck unit e2e bench bench-quick bench-ab fuzz soak models gpu-wheels clean

# (re)install only when the project's metadata changed; pip shows its progress (the first install
# downloads torch and the ONNX tools: a few minutes)
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e '.[examples,torch,fil]'
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --progress-bar on -e '.[dev,examples,torch,fil,openvino,tensorflow,s3,azure,gcs,otel,deploy,ray,gpu]'
	touch $(STAMP)

# the Triton backend host (C: src/inferd/backends/tritonc/native), which C/C++ backends
# (libtriton_<name>.so) load through; built with this machine's compiler, skipped with a note without one
NATIVE := src/inferd/backends/tritonc/native
native: $(RUN_STAMP)
	@if command -v cc >/dev/null && command -v c++ >/dev/null; then \
	  $(MAKE) -s -C $(NATIVE) install PYTHON=$(abspath $(BIN)/python); \
	else echo "no C compiler here: C/C++ backends will not load (apt-get install build-essential python3-dev, then make native)"; fi

install-run: $(RUN_STAMP) native

install: $(STAMP) native

# incremental: a model is written again only when what it is made from (its source, the packages'
# versions) or its files changed (examples/build_models.py); each one built is printed with its time
models: $(RUN_STAMP)
	$(BIN)/python examples/build_models.py $(MODELS)

run: install-run models
	$(BIN)/inferd serve --model-repository $(MODELS) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

lint: install
	$(BIN)/ruff check src tests benchmarks examples reliability
	$(BIN)/ruff format --check src tests benchmarks examples reliability

typecheck: install
	$(BIN)/mypy

# the Azure Blob emulator for the object-storage repository tests (npm; they skip without it)
azurite:
	-scripts/get_azurite.sh

# the status page's browser test uses Debian's headless Chromium: installed where this user can
# (root with apt); elsewhere that one test skips and says why
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null; } || \
	  echo "no Chromium here: the status page's browser test will skip"

test: lint typecheck azurite browser
	$(BIN)/pytest -q -n 2

# make test on a busy machine: the same suite with BURNERS processes (default 2) spinning on the CPU
# beside it, the load a shared 2-core machine has; run it before a stop. The burners are killed at
# the end whatever happens (a failure, Ctrl-C); the exit status is pytest's.
BURNERS ?= 2
test-stress: lint typecheck azurite browser
	@burners=""; \
	trap 'kill $$burners 2>/dev/null' EXIT; \
	trap 'exit 130' INT TERM; \
	for i in $$(seq $(BURNERS)); do $(BIN)/python -c 'while True: pass' & burners="$$burners $$!"; done; \
	echo "test-stress: $(BURNERS) CPU burners (pids$$burners) beside pytest"; \
	$(BIN)/pytest -q -n 2

unit: install
	$(BIN)/pytest -q -n 2 tests/unit

e2e: install azurite browser
	$(BIN)/pytest -q -n 2 tests/e2e

# three rounds of every row (about 30 minutes on 2 cores); ARGS passes options (benchmarks/run.py --help)
bench: install models
	$(BIN)/python benchmarks/run.py $(ARGS)

# one short round: checks that the benchmark runs, leaves BENCHMARKS.md alone
bench-quick: install
	$(BIN)/python benchmarks/run.py --quick --repeat 1 --no-cores $(ARGS)

# the working tree against BASE (a commit) in alternating rounds: throughput and the server's CPU per
# request of the request path's scenarios (benchmarks/ab.py --help); before landing a request-path change
BASE ?= HEAD
bench-ab: install
	$(BIN)/python benchmarks/ab.py --base $(BASE) $(ARGS)

# what a lent GPU machine (the workplace's device tool: Python 3.12, no package index) lacks to run
# scripts/gpu_check.sh: Python 3.12 manylinux wheels computed from pyproject.toml's dependencies and
# tritonclient's clients less the device image's packages, with perf_analyzer if it fits, in .whl/
# (ignored by git; carried with the call); fails past 55 MiB. Run it right before a device call: it
# writes .whl/COMMIT, the commit the check reports (.git does not travel)
gpu-wheels: install
	$(BIN)/python scripts/gpu_wheels.py

# reliability suites (issue 10): they rewrite their sections of RELIABILITY.md; ARGS passes options
# (python -m reliability.fuzz --help); make test runs a short version of each
fuzz: install
	$(BIN)/python -m reliability.fuzz $(ARGS)

# soak, then the reloads and load/unload cycles of model control (RELOAD_ARGS: python -m reliability.reload --help)
soak: install
	$(BIN)/python -m reliability.soak $(ARGS)
	$(BIN)/python -m reliability.reload $(RELOAD_ARGS)

clean:
	rm -rf $(VENV) $(MODELS) .mypy_cache .ruff_cache .pytest_cache
