"""SPEC §9: rollouts a crashed run finished are kept, not run again."""

from __future__ import annotations

import sys
from pathlib import Path

from deep_pipeline.core.models import Trace
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.io_steps import input_step
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.store import atomic_write_json
from tests.compile_world import make_inputs

AGENT = Path(__file__).parent / "agents" / "counting_agent.py"


def test_input_rollouts_resume_after_a_crash_without_rerunning_finished_ones(tmp_path):
    skill, bundle = make_inputs(tmp_path)
    counter = tmp_path / "runs.txt"
    config = effective_config(load_deployment(), {
        "runner": "command", "agent_command": f"{sys.executable} {AGENT} {counter}", "agent_output_format": "text",
        "rollouts": 3, "judge_model": "local", "editor_model": "local",
    })
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    # A run that crashed after two of its three rollouts left their traces behind.
    for index in (0, 2):
        atomic_write_json(ctx.cdir.batch_dir("input") / f"input-r{index}.json",
                          Trace(trace_id=f"input-r{index}", batch="input", skill_sha256=record.skill_sha256, final_output="earlier"))
    batch = input_step(ctx)
    assert counter.read_text().count("run") == 1  # only rollout 1 ran now
    traces = ctx.cdir.traces("input")
    assert [t.trace_id for t in traces] == ["input-r0", "input-r1", "input-r2"] == batch.trace_ids
    assert [t.final_output.strip() for t in traces] == ["earlier", "did the task", "earlier"]
