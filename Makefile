# Every target sets itself up: a virtual environment in .venv with planexec and its dev tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready
BENCH_READY := $(VENV)/.bench-ready
TEST_WORKERS ?= 2

.PHONY: demo serve test docs bench bench-quick bench-core bench-store bench-startup lint

demo: $(READY)
	$(BIN)/planexec demo

# The HTTP API and the web page with the demo agent, on http://127.0.0.1:8700 (the URL with the token is printed).
serve: $(READY)
	$(BIN)/planexec serve

test: $(READY)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
# the layers and package faces of pyproject.toml's [tool.importlinter]
	$(BIN)/lint-imports --no-cache
	$(DOCS_BUILD)
# pytest runs with a throwaway PostgreSQL server when one can be started (see scripts/test), in
# TEST_WORKERS processes (each test file, and each group of files sharing a service, in one of them)
	BIN=$(BIN) bash scripts/test -q --durations=40 -n $(TEST_WORKERS) --dist loadgroup

# The documentation site (mkdocs.yml, docs/) into site/; --strict makes any warning an error.
# NO_MKDOCS_2_WARNING silences the theme's notice about its successor, which is not a build warning.
DOCS_BUILD = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs: $(READY)
	$(DOCS_BUILD)

# Side by side with the LangGraph peers (W1-W6, about 6 minutes on 2 cores), then the W4 store detail.
bench: $(BENCH_READY)
	$(BIN)/python -m benchmarks.compare
	$(BIN)/python -m benchmarks.store

bench-quick: $(BENCH_READY)
	$(BIN)/python -m benchmarks.compare --quick

# planexec alone: W1, W2 and W4 in a few seconds.
bench-core: $(READY)
	$(BIN)/python -m benchmarks.core

bench-store: $(READY)
	$(BIN)/python -m benchmarks.store

# How long the planexec command takes to start (median of 10 fresh processes per command).
bench-startup: $(READY)
	$(BIN)/python -m benchmarks.startup

# The bench extra (LangGraph and its SQLite checkpointer), installed into .venv when missing.
$(BENCH_READY): $(READY)
	$(BIN)/python -c 'import langgraph.checkpoint.sqlite, langchain_core' 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $(BENCH_READY)

$(READY): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "planexec needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
# BFCL's tasks and API classes (tests/test_bfcl.py): without their declared dependencies, which pull in torch
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'bfcl-eval==2026.3.23' 'mpmath>=1.3'
# AgentDojo's suites (tests/test_agentdojo.py): its imports come with the agentdojo extra (in dev); without its
# declared dependencies, which also bring langchain and python-dotenv that none of the modules planexec uses imports
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'agentdojo==0.1.35'
	touch $(READY)
