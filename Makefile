# Every target sets itself up: a virtual environment in .venv with planexec and its dev tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready

.PHONY: demo test bench bench-store lint

demo: $(READY)
	$(BIN)/planexec demo

test: $(READY)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
# pytest runs with a throwaway PostgreSQL server when one can be started (see scripts/test)
	BIN=$(BIN) bash scripts/test -q

bench: $(READY)
	$(BIN)/python -m benchmarks.core

bench-store: $(READY)
	$(BIN)/python -m benchmarks.store

$(READY): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "planexec needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(READY)
