# Two entry points for a newcomer on a fresh machine (see README):
#   make run   — install and start the service (serve run serve_config.yaml)
#   make test  — install, lint (ruff, mypy on memory_core), run the test suites (unit +
#                integration, then e2e against `serve run`)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# torch==2.13.0 is the CPU build (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0 -e '.[serve,test]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/serve run serve_config.yaml

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -p no:cacheprovider
	bash e2e/run_against_serve.sh

.PHONY: install run lint test
