"""The timeout-regression rule (SPEC §6.5) has one owner, core/decision: comparison.json
records the judge's regressions only, and the decision still rejects a candidate that
timed out more with `runtime_regressed:timeout` (issue 9 point 4)."""

from __future__ import annotations

import json

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import drive, run_step
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.scripted_llm import slow


def test_a_timing_out_candidate_s_comparison_holds_only_the_judge_s_regressions(tmp_path, scripted_llm):
    install_world(scripted_llm, World(low={("s01-when-to-use", "clarity"): 2}))  # the judge names no regression
    # The agent answers at once on the input SKILL.md, and past the timeout on an edited one.
    scripted_llm.always("agent", lambda request: slow(5.0) if MARK in request.messages[0]["content"]
                        else "- shipped the parser")
    skill, bundle = make_inputs(tmp_path)
    config = effective_config(load_deployment(), {**CONFIG, "runner": "chat", "rollout_timeout_s": 1})
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = StepContext.open(tmp_path / "store", record.key)
    report = drive(ctx, run_step)

    assert [d.reason for d in report.decisions] == ["runtime_regressed:timeout"] * 2
    comparisons = sorted((ctx.cdir.path / "iterations").glob("*/comparison.json"))
    assert len(comparisons) == 2
    for path in comparisons:
        stored = json.loads(path.read_text())
        assert stored["comparison"]["runtime_regressions"] == []  # no "timeout" added by the comparator
        assert stored["rule_regressions"] == ["timeout"]  # the rule's, recorded apart
