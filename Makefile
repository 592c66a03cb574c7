# Set-up and everyday commands. Everything the project needs is installed from here.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
DB      ?= data/ailedger.duckdb
BUNDLE  ?= sample_data/fleet-week
PORT    ?= 8501
HOST    ?= 127.0.0.1

.PHONY: setup test-setup run test bench mutate chromium java prometheus clean

$(BIN)/ailedger: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

setup: $(BIN)/ailedger

$(VENV)/.test-extras: $(BIN)/ailedger
	$(BIN)/python -m pip install --quiet -e '.[test,export]'
	touch $@

test-setup: $(VENV)/.test-extras chromium java prometheus

# Debian's Chromium for the browser tests (never a browser download of Playwright's own).
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "installing Debian's chromium"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi

# A Java runtime for the Spark rollup test (tests/test_rollup.py, marked slow).
java:
	@if ! command -v java >/dev/null 2>&1; then \
	  echo "installing Debian's default-jre-headless"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq default-jre-headless >/dev/null; \
	fi

# Debian's Prometheus and promtool for the live-import test (tests/test_prometheus_live.py); the
# package's service is not started here: the test runs its own server on 127.0.0.1.
prometheus:
	@if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then \
	  echo "installing Debian's prometheus"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  if [ -d /run/systemd/system ]; then $$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; \
	fi

run: setup
	mkdir -p $(dir $(DB))
	$(BIN)/ailedger ingest $(BUNDLE) --db $(DB)
	$(BIN)/ailedger serve $(DB) --port $(PORT) --host $(HOST)

test: test-setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=30

# Mutation testing of the engine's formula modules with cosmic-ray (docs/testing.md). Slow, so
# never part of `make test`. Each mutant runs the focused engine tests in a private copy of the
# tree under .mutation/, niced; the scores and the surviving mutants go to docs/testing.md.
# MUTATE_ARGS passes options on, e.g. MUTATE_ARGS="--modules tariffs,idle --every 4 --label after".
mutate: $(VENV)/.test-extras
	$(BIN)/python -m pip install --quiet -e '.[mutation]'
	nice -n 10 $(BIN)/python mutation/run.py run $(MUTATE_ARGS)

# The wheel and the sdist, with the standard build front end, into dist/ (docs/deploy.md).
.PHONY: dist
dist: setup
	$(BIN)/python -m pip install --quiet build
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

bench: setup
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) data .pytest_cache build dist .mutation
