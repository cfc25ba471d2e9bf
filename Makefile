# inferd: two commands on a fresh machine: `make run` and `make test` (and `make docs`: the documentation site).
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

.PHONY: install install-run native hotpath run test test-stress smoke docs docs-build azurite browser lint typecheck proto-stubs unit e2e bench bench-quick bench-ab fuzz soak models gpu-wheels clean

# make test's phases: a line when each starts and one when it ends, with its time (scripts/phase.sh);
# pytest unbuffered (python -u: what a tail shows is where it is) and -rs (every skip with its reason)
PHASE := scripts/phase.sh
PYTEST := $(BIN)/python -u -m pytest -q -rs -n 2
# unit (tests/unit, tests/deploy, tests/docs), then e2e whatever unit says: the status is the worse one
PYTEST_PHASES = $(PHASE) unit $(PYTEST) --ignore=tests/e2e tests; unit=$$?; \
	$(PHASE) e2e $(PYTEST) tests/e2e; e2e=$$?; [ $$unit = 0 ] && [ $$e2e = 0 ]
# Material prints a banner on every build about MkDocs 2.0; the site's warnings are MkDocs' own
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
DOCS_STAMP := $(VENV)/.installed-docs

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

# the compiled hot path (src/inferd/hotpath.py): mypyc's extensions of the request path's modules, in
# place beside their sources (the install is editable); skipped with a note without a C compiler, and
# INFERD_PURE_PYTHON=1 runs the pure path over a build (`$(BIN)/python -m inferd.hotpath_build --clean` removes it)
hotpath: $(STAMP)
	@if command -v cc >/dev/null; then $(BIN)/python -m inferd.hotpath_build; \
	else echo "no C compiler here: the request path runs as pure Python (apt-get install build-essential python3-dev, then make hotpath)"; fi

install: $(STAMP) native hotpath

# the documentation site's tools and inferd itself, whose code writes the reference (make install has them:
# the dev extra includes docs); not the examples' heavy packages
$(DOCS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar on -e '.[docs]'
	touch $(DOCS_STAMP)

# the site at http://127.0.0.1:8080, rebuilt as the pages change (DOCS_ADDRESS=host:port for another)
DOCS_ADDRESS ?= 127.0.0.1:8080
docs: $(DOCS_STAMP)
	$(MKDOCS) serve -a $(DOCS_ADDRESS)

# the site into site/, strict: a warning (a broken link or anchor, a page outside the nav) fails it
docs-build: $(DOCS_STAMP)
	$(MKDOCS) build --strict

# incremental: a model is written again only when what it is made from (its source, the packages'
# versions) or its files changed (examples/build_models.py); each one built is printed with its time
models: $(RUN_STAMP)
	$(BIN)/python examples/build_models.py $(MODELS)

run: install-run models
	$(BIN)/inferd serve --model-repository $(MODELS) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

lint: install
	$(BIN)/ruff check src tests benchmarks examples reliability docs/hooks.py
	$(BIN)/ruff format --check src tests benchmarks examples reliability docs/hooks.py

typecheck: install
	$(BIN)/mypy

# typings/: the type stubs of tritonclient's protobuf modules (ModelConfig, the gRPC messages), written
# by protoc from the installed tritonclient's descriptors; after a tritonclient upgrade, run and commit
proto-stubs: install
	$(BIN)/python scripts/proto_stubs.py

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

test:
	@$(PHASE) install $(MAKE) --no-print-directory install azurite browser
	@$(PHASE) lint $(MAKE) --no-print-directory lint
	@$(PHASE) types $(MAKE) --no-print-directory typecheck
	@$(PYTEST_PHASES)

# a first check that an install works, in under 2 minutes on 2 cores once installed: no ruff or mypy;
# the docs site's strict build and search index, one end-to-end server round trip, the quickstart's
# code against a server of its own
SMOKE := tests/docs/test_docs_site.py::test_the_search_index_answers_how_to_serve_a_repository \
	tests/e2e/test_e2e_http_client.py::test_live_ready_and_metadata \
	"tests/e2e/test_e2e_readme_snippets.py::test_page[docs/quickstart.md]"
smoke: install
	@$(PHASE) smoke $(BIN)/python -u -m pytest -q -rs -n 1 $(SMOKE)

# make test on a busy machine: the same suite with BURNERS processes (default 2) spinning on the CPU
# beside it, the load a shared 2-core machine has; run it before a stop. The burners are killed at
# the end whatever happens (a failure, Ctrl-C); the exit status is pytest's.
BURNERS ?= 2
test-stress:
	@$(PHASE) install $(MAKE) --no-print-directory install azurite browser
	@$(PHASE) lint $(MAKE) --no-print-directory lint
	@$(PHASE) types $(MAKE) --no-print-directory typecheck
	@burners=""; \
	trap 'kill $$burners 2>/dev/null' EXIT; \
	trap 'exit 130' INT TERM; \
	for i in $$(seq $(BURNERS)); do $(BIN)/python -c 'while True: pass' & burners="$$burners $$!"; done; \
	echo "test-stress: $(BURNERS) CPU burners (pids$$burners) beside pytest"; \
	$(PYTEST_PHASES)

unit: install
	@$(PHASE) unit $(PYTEST) --ignore=tests/e2e tests

e2e: install azurite browser
	@$(PHASE) e2e $(PYTEST) tests/e2e

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
	rm -rf $(VENV) $(MODELS) .mypy_cache .ruff_cache .pytest_cache site
