# specq — developer entry points. `make install`, `make test`, `make demo` are the README's three commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU machines: torch 2.13.0 (a CPU build where the machine provides one). GPU machines with lmdeploy need
# torch <= 2.12.1: use `make install-gpu`, which lets lmdeploy choose torch.
TORCH ?= torch==2.13.0
CPU_EXTRAS ?= ml,serve,quant,dev
GPU_EXTRAS ?= ml,serve,quant,lmdeploy,dev
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers, a module per worker in the order
# tests/conftest.py gives (the toy builds first), each on one CPU thread; three on two cores, since many tests
# wait on servers and subprocesses (docs/ci.md); PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
export GPTQMODEL_CPU_WORKERS ?= 2
LINT_PATHS := cli pipeline tests $(wildcard benchmarks/*.py) benchmarks/scenarios

.PHONY: install install-gpu test suite lint typecheck unit demo gpu-check docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# pip byte-compiles what it installs one file at a time (about 50 CPU seconds here); compileall does it on
# every core instead (a package's file that does not compile, such as a template, stays source, as with pip),
# leaving out the packages' own test suites, which nothing here imports (2,809 of 15,100 files). The
# project's own sources are compiled too: where PYTHONDONTWRITEBYTECODE is set (as on the development
# machine) nothing else would, and every specq process the tests start would compile them again.
BYTE_COMPILE = $(BIN)/python -m compileall -q -j 0 -x '/site-packages/.+/tests?/' \
	$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_path('purelib'))") > /dev/null || true; \
	$(BIN)/python -m compileall -q -j 0 cli pipeline configs benchmarks tests

install: $(BIN)/python
	$(BIN)/pip install -q --no-compile "$(TORCH)"
	$(BIN)/pip install -q --no-compile -e ".[$(CPU_EXTRAS)]" "$(TORCH)"
	$(BYTE_COMPILE)

install-gpu: $(BIN)/python
	$(BIN)/pip install -q --no-compile -e ".[$(GPU_EXTRAS)]"
	$(BYTE_COMPILE)

lint:
	$(BIN)/python -m ruff check $(LINT_PATHS)
	$(BIN)/python -m ruff format --check $(LINT_PATHS)

typecheck:
	$(BIN)/python -m mypy cli pipeline

# The README's test command: the linters, the type check and the suite at once (on a busy machine each is
# another process's share of the cores; docs/ci.md), failing if any of them fails.
test:
	@$(MAKE) --no-print-directory -j3 lint typecheck suite

suite:
	$(BIN)/python -m pytest -m "not gpu" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=15 $(PYTEST_ARGS)

unit:
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

demo:
	$(BIN)/specq demo

docs:
	$(BIN)/python -m specq.cli._docs > docs/cli.md

gpu-check:
	$(BIN)/python benchmarks/gpu.py check --out gpu-check $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache specq-out
