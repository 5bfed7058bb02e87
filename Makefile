# The two set-up commands of the README. Both create .venv on first use.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO_OUT ?= runs/demo
PROFILE ?= smoke

RUN_OUT ?= runs/main
# Test processes (pytest-xdist): the suite takes 13 min in one process on a 2-core machine, 8 in two.
TEST_WORKERS ?= 2

.PHONY: run demo test test-slow test-slow-ci test-manual test-gpu install lint bench clean

$(BIN)/foxhunt: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first, pinned, so nothing pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $(BIN)/foxhunt

install: $(BIN)/foxhunt

## The main job: foxhunt run (synthetic market -> ... -> training -> report.html).
run: install
	rm -rf $(RUN_OUT)
	$(BIN)/foxhunt run --profile $(PROFILE) --out $(RUN_OUT)

## The stages one command at a time: synthetic market -> DBN files -> ingest -> bars -> features (cache) -> leak check
## -> alpha check (report) -> backtest of a scripted policy.
demo: install
	rm -rf $(DEMO_OUT)
	$(BIN)/foxhunt data synth --profile $(PROFILE) --out $(DEMO_OUT)/market --quiet
	$(BIN)/foxhunt data inspect $(DEMO_OUT)/market --profile $(PROFILE) --quiet
	$(BIN)/foxhunt data bars --data $(DEMO_OUT)/market --profile $(PROFILE) --out $(DEMO_OUT)/bars --quiet
	$(BIN)/foxhunt features build --data $(DEMO_OUT)/market --profile $(PROFILE) --out $(DEMO_OUT)/features --quiet
	$(BIN)/foxhunt features build --data $(DEMO_OUT)/market --profile $(PROFILE) --row-unit snapshot --out $(DEMO_OUT)/features --quiet
	$(BIN)/foxhunt check leaks --data $(DEMO_OUT)/market --profile $(PROFILE) --quiet
	$(BIN)/foxhunt alpha --data $(DEMO_OUT)/market --profile $(PROFILE) --row-unit snapshot --horizons 5,20,50,200 --out $(DEMO_OUT)/alpha --quiet
	$(BIN)/foxhunt backtest --data $(DEMO_OUT)/market --profile $(PROFILE) --policy random --out $(DEMO_OUT)/backtest --quiet
	@echo "report: $(DEMO_OUT)/alpha/alpha.md, backtest: $(DEMO_OUT)/backtest/metrics.json"

## The lint, the import rules and the tests (fast set; slow and GPU tests are opt-in: pytest -m slow / -m gpu), TEST_WORKERS processes.
test: install
	$(BIN)/ruff check src tests bench
	# The import rules of pyproject.toml's [tool.importlinter] (docs/design.md: the layers).
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(TEST_WORKERS)

## The slow tests (pytest -m slow: real files, whole commands, seeds studies; docs/testing.md says
## which run where). One process: several of them fork or spawn workers of their own.
test-slow: install
	$(BIN)/pytest -p no:xdist -m slow

## The slow tests CI runs after `make test` (.ci/run): all but those marked manual (tests/conftest.py).
test-slow-ci: install
	$(BIN)/pytest -p no:xdist -m "slow and not manual"

## The slow tests CI leaves out (marked manual: too long for the CI box, tests/conftest.py says why each).
## Run at every session's close on the GPU machine, beside make test-gpu (docs/testing.md).
test-manual: install
	$(BIN)/pytest -p no:xdist -m "slow and manual"

## The GPU tests (pytest -m gpu): run them on a machine with a CUDA device; without one each skips.
## Each failure's traceback goes to failures.txt as it happens (a device call killed at its limit
## loses pytest's summary, not the failures: tests/live_failures_plugin.py).
test-gpu: install
	$(BIN)/pytest -p no:xdist -p tests.live_failures_plugin -m gpu

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .import_linter_cache
