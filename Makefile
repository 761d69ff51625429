# The README's commands. Only Python 3.11+ and make are needed first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev

.PHONY: install dev run test lint bench clean

install: $(STAMP)

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
		{ echo "agent-runtime needs Python 3.11 or newer (found: $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e .
	@touch $@

dev: $(DEV)

$(DEV): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP) $@

# A real agent run, end to end, on the default SQLite store
# (.agent-runtime/runs.sqlite): a loop over tickets, a prompt with Python
# tools per ticket, and a summary, driven by the scripted model so it needs
# no API key and no network.
run: install
	$(BIN)/agent-runtime run examples/triage.agent.yaml \
		--model scripted/examples/triage.script.yaml \
		--tools examples/tools.py --stream

test: dev lint
	$(BIN)/pytest

# Speed and storage, printed as ratios measured in one run (ours vs a raw
# SQLite floor and vs LangGraph's SqliteSaver).
bench: $(VENV)/.installed-bench
	$(BIN)/python bench/step_overhead.py
	$(BIN)/python bench/storage_growth.py

$(VENV)/.installed-bench: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP) $(DEV) $@

lint: dev
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .agent-runtime .pytest_cache .mypy_cache .ruff_cache .hypothesis
