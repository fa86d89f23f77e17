"""A replay compile says whose traces it replayed: the report and the UI name
the recorded traces' agent and model, not the config's default, and mark them as replays of runs
made on another SKILL.md."""

from __future__ import annotations

import json

import dagster as dg

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.report import gather, render
from tests.compile_world import World, install_world, make_inputs

OTHER_SKILL = "a" * 64  # the recorded runs were made with no skill / another SKILL.md


def recorded_elsewhere(bundle) -> None:
    """Bundle traces as a real no-skill run of another agent left them (synthetic shape)."""
    data = json.loads(bundle.read_text(encoding="utf-8"))
    for trace in data["traces"]:
        trace.update(skill_sha256=OTHER_SKILL, agent="gemini-cli", model="gemini-2.5-pro")
    bundle.write_text(json.dumps(data), encoding="utf-8")


def test_replayed_traces_name_their_agent_and_model_and_are_marked(env, scripted_llm):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    instance = dg.DagsterInstance.ephemeral()
    skill, bundle = make_inputs(env / "dg")
    recorded_elsewhere(bundle)
    config = {"judge_model": "scripted/judge", "editor_model": "scripted/editor", "runner": "replay", "rollouts": 2}
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, config)  # agent_model: the default
    report = drive_compile(instance, env / "store", record.key)

    assert (report.agent, report.agent_model) == ("gemini-cli", "gemini-2.5-pro")  # not "... (local)"
    assert "replays of recorded runs made on another SKILL.md" in report.replay and OTHER_SKILL[:12] in report.replay
    cdir = CompileHandle.open(env / "store", record.key).cdir
    served = cdir.traces("input")
    assert all(t.replay_of is not None and t.replay_of.skill_sha256 == OTHER_SKILL for t in served)
    assert [t.replay_of.trace_id for t in served] == ["t0", "t1"]

    html = render(gather(cdir))
    assert "gemini-cli (gemini-2.5-pro)" in html and "<dt>replayed traces</dt>" in html

    [materialization] = [r.asset_materialization for r in instance.fetch_materializations(
        dg.AssetKey("input_traces"), limit=10).records]
    meta = materialization.metadata
    assert meta["made_by"].value == "gemini-cli (gemini-2.5-pro)"
    assert "another SKILL.md" in meta["replay"].value
