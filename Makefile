# propel-curriculum — the two commands a fresh machine needs are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
ADAPTERS_STAMP := $(VENV)/.installed-adapters
PIP    := $(BIN)/pip install --progress-bar off --disable-pip-version-check
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
RUN_ARGS ?=

.PHONY: help install install-run install-adapters prereqs run test test-long test-fast lint bench clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(BIN)/python:
	@PYTHON=$(PYTHON) sh scripts/prereqs run
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-installs only when pyproject.toml changes. torch is pinned and installed first: the CPU
# wheel of torch==2.13.0 is local here, while an unpinned torch would pull GBs of CUDA packages.
# Two stamps: `make run` needs the runtime dependencies only (.installed-run); `make test` and the
# other developer targets need the dev extras too (.installed, which implies .installed-run).
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev]'
	touch $(RUN_STAMP) $(STAMP)

install: $(STAMP)  ## create .venv and install the project with dev extras

install-run: $(RUN_STAMP)  ## create .venv and install the runtime dependencies only (what `make run` needs)

# The trainer adapters (docs/adapters/): atroposlib, and verl's data, config and reward-loop code,
# not its GPU stack. --no-deps keeps torch==2.13.0 and transformers as installed (verl 0.9.1 asks for
# transformers < 5.11 and would pull CUDA torch); the rest is the `verl` extra of pyproject.toml.
VERL_NO_DEPS := verl==0.9.1 tensordict==0.10.0 'pyvers>=0.1,<0.2' torchdata==0.11.0 TransferQueue==0.1.11
$(ADAPTERS_STAMP): pyproject.toml Makefile | $(STAMP)
	$(PIP) --quiet -e '.[dev,verl,atropos]'
	$(PIP) --quiet --no-deps $(VERL_NO_DEPS)
	touch $(ADAPTERS_STAMP)

install-adapters: $(ADAPTERS_STAMP)  ## add the trainer adapters' frameworks: verl 0.9.1 (CPU: data and reward paths) and atroposlib 0.4.0

run: $(RUN_STAMP)  ## run the daemon on the embedded default (SQLite under ./.propel; Ctrl-C stops, rerun resumes)
	$(BIN)/propel run $(RUN_ARGS)

prereqs:  ## check (as root on Debian: install) the system packages; one line per problem
	@PYTHON=$(PYTHON) sh scripts/prereqs test

# Two pytest-xdist workers (TEST_WORKERS=0: one process): each has its own PostgreSQL database, the fault tests
# their private servers, every server a free port; the e2e tests share a generator trained from the start.
test: $(STAMP) $(ADAPTERS_STAMP)  ## the whole suite: unit, integration (real Postgres/Redis/RabbitMQ/Celery/HTTP), e2e
	@PYTHON=$(PYTHON) sh scripts/prereqs test
	$(BIN)/python -m pytest -m "not long" -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

test-long: $(STAMP) $(ADAPTERS_STAMP)  ## the benchmark-grade checks `make test` leaves out (e.g. the full bootstrap recipe on seeds 0 and 1: 3-22 min each)
	$(BIN)/python -m pytest -m long $(PYTEST_ARGS)

test-fast: $(STAMP) $(ADAPTERS_STAMP)  ## unit tests only
	$(BIN)/python -m pytest tests/unit -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP) $(ADAPTERS_STAMP)  ## ruff + mypy
	$(BIN)/ruff check .
	$(BIN)/mypy probes curriculum workers daemon propel_sdk migrations benchmarks testkit

bench: $(STAMP)  ## run the benchmarks (results in benchmarks/results/)
	@for b in benchmarks/[a-z]*.py; do m=$$(basename $$b .py); echo "== benchmarks.$$m"; \
		$(BIN)/python -m benchmarks.$$m || exit 1; done

clean:  ## remove the virtualenv and caches (keeps ./.propel data)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
