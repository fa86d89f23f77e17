"""A chat rollout has a deadline (SPEC §6.4): past it the rollout is a
`timeout` trace, its call is not retried, and the timeout-regression rule (§6.5) fires."""

from __future__ import annotations

import time
from pathlib import Path

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.keys import batch_name
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.records import ComparisonRecord
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.store import read_model
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.rollouts import RolloutTask, make_runner
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.scripted_llm import slow

SKILL = "---\nname: haiku\ndescription: Writes haiku.\n---\n# Haiku\n\nCount 5-7-5 syllables.\n"


def run(tmp_path: Path, client_timeout_s: float = 120.0, rollout_timeout_s: float = 1.0, n: int = 2):
    package = tmp_path / "skill"
    package.mkdir(exist_ok=True)
    (package / "SKILL.md").write_text(SKILL)
    config = CompileConfig(runner="chat", agent_model="scripted/agent", rollout_timeout_s=rollout_timeout_s)
    runner = make_runner(config, model_client=lambda: ModelClient(
        ModelSettings(model="scripted/agent", timeout_s=client_timeout_s), "agent",
        cache_dir=tmp_path / "cache", calls_log=tmp_path / "calls.jsonl", backoff_s=0.0))
    task = RolloutTask(prompt="Write a haiku.", skill_name="haiku")
    started = time.monotonic()
    traces = runner.run_batch(package_dir=package, skill_sha256="sha", task=task, batch="section-i00",
                              n=n, archive_dir=tmp_path / "raw")
    return traces, time.monotonic() - started


def test_a_slow_chat_rollout_is_a_timeout_trace_at_its_deadline(tmp_path, scripted_llm):
    scripted_llm.always("agent", slow(5.0))
    traces, wall = run(tmp_path)
    assert wall < 2.5  # about rollout_timeout_s: not the client's 120 s, not retries x timeout
    for trace in traces:
        assert (trace.timed_out, trace.error_category) == (True, "timeout")
        assert "1 s" in trace.error_reason and 0.9 <= trace.duration_s < 2.5
    requests = scripted_llm.requests_for("agent")
    assert len(requests) == 2 and all(r.timeout <= 1.0 for r in requests)  # one call each, never resent


def test_a_hung_request_is_resent_within_the_deadline_and_is_an_api_error_without_answer(tmp_path, scripted_llm):
    # Issue 21 item 28: the per-call timeout (agent_timeout_s, 0.4 s) is shorter than the
    # rollout's (1 s): a request with no answer by then hung, and is resent with only the time
    # left as its timeout; a third would start past the deadline. No send ever answered: the
    # machinery's failure (api_error, run again), not the agent's timeout.
    scripted_llm.always("agent", slow(5.0))
    [trace], wall = run(tmp_path, client_timeout_s=0.4, n=1)
    assert (trace.error_category, trace.timed_out) == ("api_error", False) and wall < 2.0
    assert "no time left" in trace.error_reason and "agent" in trace.error_reason
    first, *resends = scripted_llm.requests_for("agent")
    assert first.timeout == 0.4 and resends and resends[-1].timeout <= 0.61
    assert all(r.at - first.at < 1.0 for r in resends)


def test_a_fast_answer_within_the_deadline_is_a_normal_trace(tmp_path, scripted_llm):
    scripted_llm.always("agent", slow(0.1, "rain on the roof"))
    traces, _ = run(tmp_path)
    assert [(t.final_output, t.error_category, t.timed_out) for t in traces] == [("rain on the roof", None, False)] * 2


def test_slow_candidates_of_a_prompt_only_compile_are_rejected_for_timeout(tmp_path, scripted_llm):
    world = World(low={("s01-when-to-use", "clarity"): 2})  # the judge prefers every candidate
    install_world(scripted_llm, world)
    # The agent answers at once on the input SKILL.md, and past the timeout on an edited one.
    scripted_llm.always("agent", lambda request: slow(5.0) if MARK in request.messages[0]["content"]
                        else "- shipped the parser")
    skill, bundle = make_inputs(tmp_path)
    config = effective_config(load_deployment(), {**CONFIG, "runner": "chat", "rollout_timeout_s": 1})
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)

    assert [(str(d.coordinate), d.reason) for d in report.decisions] == [
        ("s01-when-to-use/clarity", "runtime_regressed:timeout")] * 2
    assert [(lv.level, lv.stop_reason) for lv in report.levels] == [("section", "available_coordinates_exhausted")]
    assert all(not t.timed_out for t in ctx.cdir.traces("input"))
    for decision in report.decisions:
        candidates = ctx.cdir.traces(batch_name(decision.level, decision.index))
        assert candidates and all((t.timed_out, t.error_category) == (True, "timeout") for t in candidates)
        # comparison.json keeps the judge's regressions (none here) and the rule's apart.
        stored = read_model(ctx.cdir.iteration_dir(decision.level, decision.index) / "comparison.json", ComparisonRecord)
        assert (stored.comparison.runtime_regressions, stored.rule_regressions) == ([], ["timeout"])


def test_one_hung_agent_request_is_resent_and_changes_nothing(tmp_path, scripted_llm, monkeypatch):
    # Issue 21 item 28: a request that hangs is held only for agent_timeout_s, then resent
    # inside the rollout's deadline; its rollout is a trace like the others, not a `timeout`.
    from deep_pipeline.llm import client

    monkeypatch.setattr(client, "BACKOFF_S", 0.0)
    install_world(scripted_llm, World(low={("s01-when-to-use", "clarity"): 2}))
    hung = []

    def agent(request):
        if not hung:  # the first request of the compile never answers
            hung.append(request)
            return slow(30.0)
        return "- shipped the parser"

    scripted_llm.always("agent", agent)
    skill, bundle = make_inputs(tmp_path)
    overrides = {**CONFIG, "runner": "chat", "rollout_timeout_s": 20, "agent_timeout_s": 0.5, "section_iterations": 1}
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), overrides))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    run_steps(ctx, run_step)
    traces = ctx.cdir.traces("input")
    assert [(t.error_category, t.final_output) for t in traces] == [(None, "- shipped the parser")] * 2
    requests = scripted_llm.requests_for("agent")
    assert requests[0].timeout == 0.5  # the per-call timeout, not the rollout's 20 s
