# make run   - set up .venv (first time) and run the engine on its built-in default
#              (CORE=N DURATION=S NAME=N HTTP=HOST:PORT|none PUB=ENDPOINT|none: engine run's flags)
# make test  - set up .venv (first time) and run the test suite
# make bench - set up .venv (first time), install the benchmarks' peers (the `peers` extra) and run
#              every benchmark in bench/
# make docs  - set up .venv (first time), install the `docs` extra and build the documentation site
#              into site/ (mkdocs build --strict: any warning fails)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PEERS_STAMP := $(VENV)/.installed-peers
CORE ?= $(shell $(PYTHON) -c "import os; print(max(os.sched_getaffinity(0)))")
DURATION ?= 10
# `make run NAME=x HTTP=127.0.0.1:9465 PUB=none`: a second engine beside the first. Taken from make's
# command line only (not the environment, where NAME is often the host's name); unset or empty = the
# engine's default
cli_flag = $(if $(filter command line,$(origin $(1))),$(if $($(1)), $(2) $($(1))))
BENCH_ARGS ?=

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"
	touch $(STAMP)

setup: $(STAMP)

# only `make bench` needs the peers; `make test` and `make run` do not install them
$(PEERS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test,bench,peers]"
	touch $(PEERS_STAMP)

# after a run that ended well: three lines on what to try next (a real capture in tests/data)
run: CAPTURE = tests/data/binance/usdm_btcusdt_20240808_45s.gz
run: setup
	$(BIN)/engine run --core $(CORE)$(if $(DURATION), --duration $(DURATION))$(call cli_flag,NAME,--name)$(call cli_flag,HTTP,--http)$(call cli_flag,PUB,--pub)
	@printf '%s\n' \
	  "Next: backtest a real capture: $(BIN)/engine convert binance:$(CAPTURE) --out usdm.ticks && $(BIN)/engine backtest usdm.ticks --out bt" \
	  "  run live against the venue simulator: $(BIN)/engine venue binance $(CAPTURE), then in another shell $(BIN)/engine run --feed URI --paper (URI: the line it prints)" \
	  "  make test runs the tests; docs/index.md is the documentation (make docs builds the site); $(BIN)/engine run --help-all lists every option"

# two pytest-xdist workers (the engines' core tests in one of them: tests/conftest.py CORE_GROUP)
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

bench: $(PEERS_STAMP)
	@for b in bench/ring.py bench/model_call.py bench/model_backends.py bench/strategy_host.py bench/tick_to_signal.py bench/isolate.py bench/feed_parsers.py bench/cold_compile.py bench/first_run.py bench/backtest_speed.py bench/soak.py bench/reload_leak.py bench/fpga_kernel.py bench/lead_lag.py; do \
		echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done

# the site: docs/ (mkdocs.yml); strict, so a broken link or a page missing from the nav fails
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

.PHONY: docs
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info bench/results site
