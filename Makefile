# make run   - set up .venv (first time) and run the engine on its built-in default
#              (CORE=N DURATION=S NAME=N HTTP=HOST:PORT|none PUB=ENDPOINT|none: engine run's flags)
# make test  - set up .venv (first time) and run the test suite
# make bench - set up .venv (first time), install the benchmarks' peers (the `peers` extra) and run
#              every benchmark in bench/
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

run: setup
	$(BIN)/engine run --core $(CORE)$(if $(DURATION), --duration $(DURATION))$(call cli_flag,NAME,--name)$(call cli_flag,HTTP,--http)$(call cli_flag,PUB,--pub)

# two pytest-xdist workers (the engines' core tests in one of them: tests/conftest.py CORE_GROUP)
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

bench: $(PEERS_STAMP)
	@for b in bench/ring.py bench/model_call.py bench/model_backends.py bench/strategy_host.py bench/tick_to_signal.py bench/isolate.py bench/feed_parsers.py bench/cold_compile.py bench/first_run.py bench/backtest_speed.py bench/soak.py bench/reload_leak.py bench/fpga_kernel.py bench/lead_lag.py; do \
		echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info bench/results
