"""SPEC §9: a rollout the machinery failed is not a result; compile.json stays small."""

from __future__ import annotations

import json

import pytest

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.io_steps import input_step
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.errors import StepError
from deep_pipeline.store import read_model
from tests.compile_world import make_inputs
from tests.scripted_llm import litellm

CHAT = {"runner": "chat", "agent_model": "scripted/agent", "judge_model": "scripted/judge",
        "editor_model": "scripted/editor", "rollouts": 3}


def unreachable() -> Exception:
    # Not transient: one request, then the rollout is the model's failure, not the agent's.
    return litellm.BadRequestError(message="scripted: upstream refused", model="scripted/agent", llm_provider="scripted")


def test_an_api_error_rollout_fails_the_step_and_the_rerun_makes_only_that_rollout(tmp_path, scripted_llm):
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CHAT))
    scripted_llm.script("agent", "answer one", unreachable(), "answer three")
    ctx = CompileHandle.open(tmp_path / "store", record.key)

    with pytest.raises(StepError) as failure:
        input_step(ctx)
    message = str(failure.value)
    assert "\n" not in message
    assert "1 of 3" in message and "api_error" in message and "again" in message
    stored = sorted(p.name for p in ctx.cdir.batch_dir("input").glob("*.json"))
    assert len(stored) == 2 and not ctx.cdir.has_batch("input")  # the batch is incomplete, not committed

    scripted_llm.always("agent", "answer again")
    before = len(scripted_llm.requests_for("agent"))
    batch = input_step(CompileHandle.open(tmp_path / "store", record.key))
    assert len(scripted_llm.requests_for("agent")) == before + 1  # only the failed rollout ran again
    traces = ctx.cdir.traces("input")
    assert [t.error_category for t in traces] == [None, None, None] and len(batch.trace_ids) == 3
    assert sorted(t.final_output for t in traces) == ["answer again", "answer one", "answer three"]


def test_compile_json_does_not_carry_the_task_prompt(tmp_path):
    skill, bundle = make_inputs(tmp_path)
    data = json.loads(bundle.read_text())
    data["prompt"] = "Write this week's status update. " + "Context line. " * 20_000  # a long task text
    bundle.write_text(json.dumps(data))
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CHAT))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    assert ctx.cdir.record_path.stat().st_size < 8_000  # the config and hashes; the prompt is 280 kB
    assert ctx.task_prompt == data["prompt"]


def test_a_compile_json_that_still_holds_the_prompt_loads(tmp_path):
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CHAT))
    path = CompileHandle.open(tmp_path / "store", record.key).cdir.record_path
    old = json.loads(path.read_text())
    path.write_text(json.dumps({**old, "task_prompt": "as written by an earlier version"}))
    assert read_model(path, CompileRecord).key == record.key


def test_a_replay_bundle_of_only_failed_rollouts_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    from deep_pipeline.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    skill, bundle = make_inputs(tmp_path)
    data = json.loads(bundle.read_text())
    for trace in data["traces"]:
        trace["error_category"] = "api_error"
    bundle.write_text(json.dumps(data))
    argv = ["compile", str(skill), "--task", str(bundle), "--runner", "replay",
            "--judge-model", "scripted/judge", "--editor-model", "scripted/editor"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bundle) in err and "agent finished" in err
    assert not home.exists()
