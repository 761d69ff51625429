# The README's commands. Only Python 3.11+ and make are needed first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev
SERVE  := $(VENV)/.installed-serve

# The AWS deployment's tools, each out of the project's venv: aws-sam-cli in
# its own venv (its pins clash with the project's), asl-validator from npm.
SAM_VENV      := .venv-sam
SAM           := $(SAM_VENV)/bin/sam
SAM_STAMP     := $(SAM_VENV)/.installed
TOOLS         := .tools
ASL_VALIDATOR := $(TOOLS)/node_modules/.bin/asl-validator
ASL           := statemachine/run.asl.json
# checkov, the template's security linter, in its own venv too (its pins clash
# with the project's); it runs offline (--skip-download, BC_SKIP_MAPPING).
CHECKOV_VENV  := .venv-checkov
CHECKOV       := $(CHECKOV_VENV)/bin/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
export SAM_CLI_TELEMETRY := 0

.PHONY: install dev run serve test lint bench clean template-check build openapi

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
	@touch $(STAMP) $(SERVE) $@

# A real agent run, end to end, on the default SQLite store
# (.agent-runtime/runs.sqlite): a loop over tickets, a prompt with Python
# tools per ticket, and a summary, driven by the scripted model so it needs
# no API key and no network.
run: install
	$(BIN)/agent-runtime run examples/triage.agent.yaml \
		--model scripted/examples/triage.script.yaml \
		--tools examples/tools.py --stream

# The HTTP API on http://127.0.0.1:8000 over the default SQLite store, with
# the serve extra (uvicorn, Powertools), and the web console at its root.
# Requests need the bearer token the server writes to
# .agent-runtime/serve.token; stop with Ctrl-C. More flags:
# make serve SERVE_ARGS='--port 8080 --workers 8 --config my.config.yaml'
serve: $(SERVE)
	$(BIN)/agent-runtime serve $(SERVE_ARGS)

$(SERVE): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[serve]'
	@touch $(STAMP) $@

# The suite runs on a worker process per CPU, at most 8 (pytest-xdist): on
# two CPUs it takes about half the time of one process. TEST_WORKERS=0 runs
# it in this process (one test at a time, as a debugger wants).
TEST_WORKERS ?= auto
test: dev lint template-check
	$(BIN)/pytest -n $(TEST_WORKERS) --maxprocesses 8

# Speed and storage, printed as ratios measured in one run (ours vs a raw
# SQLite floor and vs LangGraph's SqliteSaver; group commit vs a commit per
# save; the CLI's start-up vs importing pydantic); 1,000 concurrent runs
# through one `serve` vs LangGraph and DBOS on the same fake model (a serve
# flag it lacks is left out, with a note), then through one `serve` pinned to
# a CPU, and through `serve --processes` with a process per core
# (SERVE_PROCESSES, `auto`), each pinned to its CPU; and each Lambda handler's
# cold import from a twin of the runtime layer vs `import boto3`.
# The engine bench measures the engine of ENGINE_BASELINE in the same run too
# (main before issue 34's leaner engine); `ENGINE_BASELINE=` skips it. The
# group commit bench measures the store of GROUP_COMMIT_BASELINE (the same
# revision: before group commit) likewise.
ENGINE_BASELINE ?= e17daf8
GROUP_COMMIT_BASELINE ?= $(ENGINE_BASELINE)
SERVE_PROCESSES ?= auto
bench: $(VENV)/.installed-bench
	$(BIN)/python bench/step_overhead.py
	$(BIN)/python bench/storage_growth.py
	$(BIN)/python bench/timeline_read.py
	$(BIN)/python bench/engine_overhead.py $(if $(ENGINE_BASELINE),--baseline $(ENGINE_BASELINE))
	$(BIN)/python bench/many_runs.py
	$(BIN)/python bench/group_commit.py $(if $(GROUP_COMMIT_BASELINE),--baseline $(GROUP_COMMIT_BASELINE))
	$(BIN)/python bench/cli_startup.py
	$(BIN)/python bench/policy_limits.py
	$(BIN)/python bench/aws_cost.py
	$(BIN)/python bench/serve_concurrency.py --serve-arg=--max-concurrent-runs=2000
	$(BIN)/python bench/serve_concurrency.py --no-peers --serve-arg=--max-concurrent-runs=2000 \
		--serve-arg=--pin-cpus
	$(BIN)/python bench/serve_concurrency.py --no-peers --serve-arg=--max-concurrent-runs=2000 \
		--serve-arg=--processes=$(SERVE_PROCESSES) --serve-arg=--pin-cpus
	$(BIN)/python bench/layer_cold_import.py

$(VENV)/.installed-bench: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP) $(DEV) $@

lint: dev
	$(BIN)/ruff check .
	$(BIN)/mypy

# docs/openapi.json: the HTTP API's OpenAPI document, generated from the routes
# (tests/api/test_openapi.py fails when the committed copy differs).
openapi: $(SERVE)
	$(BIN)/python -m agent_runtime.api.openapi --write

# template.yaml and the state machine: SAM's validator with its linter,
# cfn-lint, statelint (the PyPI port; no Ruby), asl-validator (which also
# catches bad paths and dangling Next targets) and checkov, which must find no
# failed check; its skips, each justified in the template's Metadata beside the
# resource, are printed.
template-check: dev $(SAM_STAMP) $(ASL_VALIDATOR) $(CHECKOV_STAMP)
	AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-us-east-1} $(SAM) validate --lint
	$(BIN)/cfn-lint template.yaml
	$(BIN)/statelint $(ASL)
	$(ASL_VALIDATOR) --json-path $(ASL)
	BC_SKIP_MAPPING=TRUE $(CHECKOV) --skip-download --framework cloudformation \
		-f template.yaml -o json > $(CHECKOV_VENV)/report.json || true
	$(CHECKOV_VENV)/bin/python .ci/checkov_report.py < $(CHECKOV_VENV)/report.json

# The functions and the runtime layer, for python3.13 on arm64, into
# .aws-sam/build: makefile builds (functions/Makefile, layers/runtime/Makefile)
# that need no Docker; a local python3.13 (pyenv's) compiles the layer's
# bytecode. Then: sam deploy --guided.
build: $(SAM_STAMP)
	PYTHON=$(abspath $(SAM_VENV))/bin/python $(SAM) build

$(SAM_STAMP):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet 'aws-sam-cli>=1.120,<2'
	@touch $@

$(CHECKOV_STAMP):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet 'checkov>=3.2,<4'
	@touch $@

$(ASL_VALIDATOR):
	npm install --silent --no-audit --no-fund --prefix $(TOOLS) asl-validator@4

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) $(TOOLS) .aws-sam build .agent-runtime .pytest_cache \
		.mypy_cache .ruff_cache .hypothesis
