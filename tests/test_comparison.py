"""The comparison (SPEC §6.5-6.6): both orders, samples, evidence-backed
regressions, and trace text fenced as data, through whole compiles with a scripted judge."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from deep_pipeline.core.comparison import check_claims, mean_score, order_disagreement, unblind
from deep_pipeline.core.decision import candidate_label, order_seed
from deep_pipeline.core.keys import batch_name, iteration_key
from deep_pipeline.core.models import BUDGET_EXHAUSTED, NO_IMPROVEMENT, REGRESSED_PREFIX, CompareCall, Trace, TraceStep
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.records import ComparisonRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.errors import InputError
from deep_pipeline.llm.accounting import read_calls
from deep_pipeline.store import read_model
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs

LOW = {("s02-steps", "clarity"): 2}


def compile_with(tmp_path, scripted_llm, compare, **config):
    """A whole compile whose comparisons the `compare(request, candidate_is_a)` function answers."""
    world = World(low=LOW)
    install_world(scripted_llm, world)

    def judge(request):
        if "score_a" not in (request.schema or {}).get("properties", {}):
            return world.judge(request)
        a_text = request.text.split("<<version A>>", 1)[1].split("<</version A>>", 1)[0]
        return compare(request, MARK in a_text)

    scripted_llm.always("judge", judge)
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), {**CONFIG, **config}))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    return ctx, run_steps(ctx, run_step)


def verdict(score_a, score_b, **extra) -> dict:
    return {"evidence_a": [], "evidence_b": [], "regressions_a": [], "regressions_b": [], "reason": "scripted",
            "task_relevant": True, "score_a": score_a, "score_b": score_b, **extra}


def comparisons(ctx, report) -> list[ComparisonRecord]:
    return [read_model(ctx.cdir.iteration_dir(d.level, d.index) / "comparison.json", ComparisonRecord)
            for d in report.decisions]


def prefers_position_a(request, candidate_is_a):
    return verdict(4, 3)  # whatever the texts: the side shown first wins


def test_both_orders_cancel_a_judge_that_always_prefers_position_a(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, prefers_position_a)
    assert report.decisions and not any(d.accepted for d in report.decisions)
    for decision, record in zip(report.decisions, comparisons(ctx, report)):
        assert (decision.incumbent_score, decision.candidate_score, decision.delta) == (3.5, 3.5, 0.0)
        assert decision.reason == NO_IMPROVEMENT and decision.order_disagreement is True
        assert sorted((c.candidate_label, c.incumbent_score, c.candidate_score) for c in decision.call_scores) == [
            ("A", 3, 4), ("B", 4, 3)]
        assert [c.candidate_label for c in record.comparison.calls] == [decision.candidate_label, "AB".replace(decision.candidate_label, "")]


def test_with_one_order_the_same_judge_follows_the_seeded_order(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, prefers_position_a, compare_orders=1)
    labels = set()
    for decision in report.decisions:
        key = iteration_key(ctx.cdir.key, decision.level, decision.index)
        assert decision.candidate_label == candidate_label(order_seed(key))
        assert decision.accepted == (decision.candidate_label == "A")  # position, not content, decided
        assert len(decision.call_scores) == 1 and decision.order_disagreement is None
        labels.add(decision.candidate_label)
    # The original design's single call: one request per comparison, under its original key.
    keys = [c.step_key for c in read_calls(ctx.cdir.calls_log) if c.role == "judge" and "/compare" in c.step_key]
    assert keys == [f"{iteration_key(ctx.cdir.key, d.level, d.index)}/compare" for d in report.decisions]


def test_each_call_has_its_own_key_and_a_resume_repeats_none_of_them(tmp_path, scripted_llm):
    # No gain: the last record before finalize is a rejection, as when a crash hits after the judge answered.
    ctx, report = compile_with(tmp_path, scripted_llm, lambda r, a: verdict(3, 3), compare_samples=2)
    last = report.decisions[-1]
    it_key = iteration_key(ctx.cdir.key, last.level, last.index)
    keys = sorted(c.step_key for c in read_calls(ctx.cdir.calls_log) if c.step_key.startswith(it_key + "/compare"))
    assert keys == [f"{it_key}/compare/candidate-{label}/s{sample}" for label in "AB" for sample in (0, 1)]
    sent = len(scripted_llm.requests_for("judge"))
    # A crash lost the last comparison and decision: the rerun asks the judge nothing again.
    folder = ctx.cdir.iteration_dir(last.level, last.index)
    for name in ("comparison.json", "decision.json"):
        (folder / name).unlink()
    ctx.cdir.report_path.unlink()
    shutil.rmtree(ctx.cdir.final_skill.parent)
    again = run_steps(CompileHandle.open(tmp_path / "store", ctx.cdir.key), run_step)
    assert len(scripted_llm.requests_for("judge")) == sent
    assert [d.model_dump() for d in again.decisions] == [d.model_dump() for d in report.decisions]


def claim(label: str, step: int, quote: str, kind: str = "error") -> dict:
    return {"kind": kind, "trace_id": label, "step": step, "quote": quote}


def gain_with_claim(step: int, quote: str):
    """The candidate gains 2 points, and the judge claims a regression in its first trace."""
    def answer(request, candidate_is_a):
        side = "a" if candidate_is_a else "b"
        found = [claim(f"{side.upper()}1", step, quote, kind="failed_command")]
        scores = verdict(4, 2) if candidate_is_a else verdict(2, 4)
        return {**scores, f"regressions_{side}": found}
    return answer


def test_a_regression_claim_naming_a_step_that_does_not_exist_is_dropped_and_the_gain_accepted(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=6, quote="shipped the parser"))
    first = report.decisions[0]
    assert first.accepted and first.delta == 2.0
    record = comparisons(ctx, report)[0]
    assert record.comparison.runtime_regressions == [] and record.comparison.dropped_regressions == 2  # one per call


def test_face_value_claims_restore_the_original_rule(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=6, quote="shipped the parser"),
                               regressions_need_evidence=False)
    first = report.decisions[0]
    assert not first.accepted
    # A claim with no real step of that side still rejects, and still names a real trace id.
    batch = batch_name(first.level, first.index)
    assert first.reason == f"{REGRESSED_PREFIX}failed_command ({batch}-r0 step 6)"


def test_a_regression_with_a_valid_quote_rejects_naming_the_real_trace(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=2, quote="shipped the parser"))
    first = report.decisions[0]
    batch = batch_name(first.level, first.index)
    assert not first.accepted
    assert first.reason == f"{REGRESSED_PREFIX}failed_command ({batch}-r0 step 2)"
    assert not re.search(r"\b[AB]\d\b", first.reason)  # never a blind label
    record = comparisons(ctx, report)[0]
    assert [c.trace_id for c in record.comparison.regressions] == [f"{batch}-r0"]


def test_the_timeout_rule_still_fires_with_the_command_runner(tmp_path, scripted_llm):
    agent = Path(__file__).parent / "agents" / "slow_on_edited_skill.py"
    ctx, report = compile_with(
        tmp_path, scripted_llm, lambda r, a: verdict(5, 2) if a else verdict(2, 5),
        runner="command", agent_command=f"{sys.executable} {agent} {{skill_dir}} {MARK}", rollout_timeout_s=3,
        rollouts=1, section_iterations=1,
    )
    [decision] = report.decisions
    assert decision.reason == f"{REGRESSED_PREFIX}timeout"
    record = comparisons(ctx, report)[0]
    assert (record.comparison.runtime_regressions, record.rule_regressions) == ([], ["timeout"])


# -- the rules, one by one -------------------------------------------------------------

TRACES = [Trace(trace_id="section-i00-r0", steps=[TraceStep(step=1, source="tool", text="Error: no such file data.csv")])]


def test_claims_are_checked_like_evidence_unless_face_value_is_asked():
    rename = {"B1": "section-i00-r0"}
    items = [claim("B1", 1, "no such file"), claim("B1", 3, "no such file"), claim("B2", 1, "x"),
             {"kind": "slower", "trace_id": "B1", "step": 1, "quote": "no such file"}, "it crashed"]
    kept, dropped = check_claims(items, TRACES, rename)
    assert [(c.trace_id, c.step) for c in kept] == [("section-i00-r0", 1)] and dropped == 4
    kept, dropped = check_claims(items, TRACES, rename, need_evidence=False)
    # At face value every claim of a known kind counts; a trace id is kept only when it is real.
    assert [(c.kind, c.trace_id) for c in kept] == [
        ("error", "section-i00-r0"), ("error", "section-i00-r0"), ("error", ""), ("other", "")]
    assert dropped == 1  # "slower" is not a kind


def test_reasons_lose_their_blind_labels():
    labels = {"A1": "input-r0", "B2": "section-i00-r1"}
    assert unblind("B2 step 4 shows a crash; version A is clearer, A is shorter.", labels, "B") == (
        "section-i00-r1 step 4 shows a crash; the incumbent is clearer, the incumbent is shorter.")
    assert unblind("A clearer text wins for B.", labels, "B") == "A clearer text wins for the candidate."


def test_means_and_order_disagreement():
    assert mean_score([4]) == 4 and isinstance(mean_score([4]), int) and mean_score([4, 5]) == 4.5
    call = lambda label, inc, cand: CompareCall(candidate_label=label, incumbent_score=inc, candidate_score=cand,
                                                task_relevant=True)  # noqa: E731
    assert order_disagreement([call("A", 3, 4)]) is None
    assert order_disagreement([call("A", 3, 4), call("B", 3, 4)]) is False
    assert order_disagreement([call("A", 3, 4), call("B", 4, 3)]) is True
    assert order_disagreement([call("A", 3, 4), call("B", 3, 3)]) is True  # better against equal


@pytest.mark.parametrize("setting, value, expected", [
    ("compare_orders", 3, "compare_orders: Input should be 1 or 2"),
    ("compare_samples", 0, "compare_samples: Input should be greater than or equal to 1"),
    ("compare_samples", 6, "compare_samples: Input should be less than or equal to 5"),
])
def test_bad_comparison_settings_get_one_line(setting, value, expected):
    with pytest.raises(InputError) as caught:
        effective_config(load_deployment(), {setting: value}, origin="compile.yaml")
    assert str(caught.value) == f"compile.yaml: {expected}"


def test_the_agent_samples_and_the_judge_samples_only_when_asked(tmp_path, scripted_llm):
    # Rollouts are samples (pass rates, §10); compare_samples needs a judge that samples to differ.
    scripted_llm.always("agent", "- shipped the parser")
    compile_with(tmp_path, scripted_llm, lambda r, a: verdict(3, 3), runner="chat", section_iterations=1,
                 compare_samples=2, judge_temperature=0.8)
    agent = {r.params["temperature"] for r in scripted_llm.requests_for("agent")}
    judge = {r.params["temperature"] for r in scripted_llm.requests_for("judge")}
    editor = {r.params["temperature"] for r in scripted_llm.requests_for("editor")}
    assert (agent, judge, editor) == ({0.7}, {0.8}, {0.0})


class Overlap:
    """A comparison judge that holds each order call until its pair arrives (or a generous
    wait ends): it records how many compare calls were in flight together at most."""

    def __init__(self, answer) -> None:
        import threading

        self.answer, self.in_flight, self.peak = answer, 0, 0
        self.lock = threading.Condition()

    def __call__(self, request, candidate_is_a):
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.lock.notify_all()
            # Sequential calls never meet: the first waits the whole minute, then the test fails.
            self.lock.wait_for(lambda: self.in_flight >= 2 or self.peak >= 2, timeout=60)
        try:
            return self.answer(request, candidate_is_a)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_a_comparisons_two_order_calls_are_in_flight_together_and_decide_as_before(tmp_path, scripted_llm):
    judge = Overlap(prefers_position_a)
    ctx, report = compile_with(tmp_path, scripted_llm, judge, parallel=2)
    assert judge.peak == 2
    # The verdict keeps the seeded order first, whichever answer came back first.
    for decision, record in zip(report.decisions, comparisons(ctx, report)):
        assert [c.candidate_label for c in record.comparison.calls] == [decision.candidate_label, "AB".replace(decision.candidate_label, "")]
        assert decision.reason == NO_IMPROVEMENT and decision.order_disagreement is True


def test_with_parallel_1_the_order_calls_go_one_after_the_other(tmp_path, scripted_llm):
    calls = []

    def judge(request, candidate_is_a):
        calls.append(candidate_is_a)
        return verdict(3, 3)

    _, report = compile_with(tmp_path, scripted_llm, judge, parallel=1)
    assert report.decisions and len(calls) == 2 * len(report.decisions)


def test_a_budget_with_room_for_one_call_of_the_pair_sends_exactly_one(tmp_path, scripted_llm):
    # A first compile counts the calls made before the first comparison.
    (tmp_path / "free").mkdir()
    (tmp_path / "tight").mkdir()
    free, _ = compile_with(tmp_path / "free", scripted_llm, lambda r, a: verdict(3, 3))
    log = read_calls(free.cdir.calls_log)
    before = next(i for i, c in enumerate(log) if "/compare" in c.step_key)
    ctx, report = compile_with(tmp_path / "tight", scripted_llm, lambda r, a: verdict(3, 3),
                               max_calls=before + 1, parallel=3)
    first = report.decisions[0]
    assert first.reason == BUDGET_EXHAUSTED
    record = read_model(ctx.cdir.iteration_dir(first.level, first.index) / "comparison.json", ComparisonRecord)
    assert record.skipped == "budget_exhausted"
    sent = read_calls(ctx.cdir.calls_log)
    assert len(sent) == before + 1  # never more than max_calls, with the pair in flight together
    assert len([c for c in sent if "/compare" in c.step_key]) == 1


def test_a_usd_budget_counts_the_worst_case_of_calls_in_flight():
    from deep_pipeline.llm.accounting import CallRecord
    from deep_pipeline.llm.budget import Budget, BudgetExhausted

    budget = Budget(max_usd=1.0)
    held = budget.reserve(0.6)
    with pytest.raises(BudgetExhausted, match="in flight"):
        budget.reserve(0.6)  # together the two could cost 1.2
    budget.add(CallRecord(step_key="k", role="judge", model="m", attempt=1, prompt_tokens=1, completion_tokens=1,
                          cached_tokens=None, cost_usd=0.1, latency_s=0.0, cache_hit=False), held)
    budget.reserve(0.6)  # 0.1 spent + 0.6 in flight: within the cap
