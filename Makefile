# inferd: two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
MODELS := examples/models
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck unit e2e bench fuzz soak models clean

# (re)install only when the project's metadata changed
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,examples,torch,openvino,tensorflow]'
	touch $(STAMP)

install: $(STAMP)

models: $(STAMP)
	$(BIN)/python examples/build_models.py $(MODELS)

run: install models
	$(BIN)/inferd serve --model-repository $(MODELS) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

lint: install
	$(BIN)/ruff check src tests benchmarks examples reliability
	$(BIN)/ruff format --check src tests benchmarks examples reliability

typecheck: install
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest -q -n 2

bench: install
	$(BIN)/python benchmarks/run.py

# reliability suites (issue 10): they rewrite their sections of RELIABILITY.md; ARGS passes options
# (python -m reliability.fuzz --help); make test runs a short version of each
fuzz: install
	$(BIN)/python -m reliability.fuzz $(ARGS)

soak: install
	$(BIN)/python -m reliability.soak $(ARGS)

clean:
	rm -rf $(VENV) $(MODELS) .mypy_cache .ruff_cache .pytest_cache
