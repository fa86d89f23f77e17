"""The sequential comparison (core/sequential.py, SPEC §6.5–6.6 as revised): a split verdict asks
another pair and is decided on the sign test's bound, extra pairs are re-presented so a
deterministic judge can answer otherwise, a resume repeats no call, clear verdicts stop after
one pair, and one-pair configs write their records and keys as before. The real comparator,
client, cache and decision code run; only the judge's answers are scripted."""

from __future__ import annotations

import json
import re

import pytest

from deep_pipeline.core.config import DEFAULT_DIMENSIONS, CompileConfig
from deep_pipeline.core.decision import decide
from deep_pipeline.core.models import ACCEPTED, NO_IMPROVEMENT, Trace, TraceStep, Unit
from deep_pipeline.core.sequential import next_pair, presentation
from deep_pipeline.engine.records import DecisionRecord
from deep_pipeline.llm.accounting import read_calls
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.comparator import compare_cell
from deep_pipeline.store import read_model
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.scripted_llm import server_error

TASK = "Write this week's status update."
OLD = "## Steps\nWrite the update.\n"
NEW = f"## Steps\n{MARK}: write one line per project.\n"
UNIT = Unit(unit_id="s02-steps", level="section", heading="Steps", heading_depth=2, start=0, end=len(OLD), text=OLD)
KEY = "demo-abc123/section/i00"
SEED = 4  # even: the candidate is shown as A first


def _trace(trace_id: str, text: str) -> Trace:
    return Trace(trace_id=trace_id, prompt=TASK, final_output=text,
                 steps=[TraceStep(step=1, source="user", text=TASK), TraceStep(step=2, source="agent", text=text)])


INCUMBENT = [_trace("input-r0", "old answer zero"), _trace("input-r1", "old answer one")]
CANDIDATE = [_trace("section-i00-r0", "new answer zero"), _trace("section-i00-r1", "new answer one")]
OLD_FIELDS = {"incumbent_score", "candidate_score", "task_relevant", "runtime_regressions", "regressions",
              "dropped_regressions", "candidate_evidence", "dropped_evidence", "reason", "candidate_label",
              "order_seed", "calls", "order_disagreement"}


def block(text: str, name: str) -> str:
    return text.split(f"<<{name}>>", 1)[1].split(f"<</{name}>>", 1)[0]


def shown(request) -> dict:
    """What one compare request shows: the candidate's side, the pair (from the fresh labels), the trace order."""
    text = request.last_user
    cand = "A" if MARK in block(text, "version A") else "B"
    first = int(re.search(rf"=== trace {cand}(\d+):", text).group(1))
    return {"cand": cand, "pair": (first - 1) // 2, "texts": (block(text, "version A"), block(text, "version B")),
            "traces": re.findall(r"=== trace ([AB]\d+):", text),
            "order": re.findall(r"(new|old) answer (zero|one)", text)}


def answer(delta_as_a: int, delta_as_b: int, **extra):
    """A judge whose candidate-minus-incumbent delta depends only on the candidate's side."""
    def judge(request) -> dict:
        delta = delta_as_a if shown(request)["cand"] == "A" else delta_as_b
        return scores(shown(request)["cand"], delta, **extra)
    return judge


def scores(cand: str, delta: int, **extra) -> dict:
    inc = 3
    by_side = {cand: inc + delta, "B" if cand == "A" else "A": inc}
    return {"evidence_a": [], "evidence_b": [], "regressions_a": [], "regressions_b": [], "reason": "scripted",
            "task_relevant": True, "score_a": by_side["A"], "score_b": by_side["B"], **extra}


def by_pair(*pairs: tuple[int, int]):
    """A judge answering pair k with deltas `pairs[k]` (candidate as A, as B)."""
    def judge(request) -> dict:
        seen = shown(request)
        as_a, as_b = pairs[seen["pair"]]
        return scores(seen["cand"], as_a if seen["cand"] == "A" else as_b)
    return judge


def judge_client(tmp_path) -> ModelClient:
    return ModelClient(ModelSettings(model="scripted/judge"), "judge", cache_dir=tmp_path / "cache",
                       calls_log=tmp_path / "calls.jsonl", retries=0, backoff_s=0)


def compare(client, **config):
    cfg = CompileConfig(**config)
    return compare_cell(client, iteration_key=KEY, order_seed=SEED, orders=cfg.compare_orders,
                        samples=cfg.compare_samples, need_evidence=cfg.regressions_need_evidence,
                        max_pairs=cfg.compare_max_pairs, min_gain=cfg.min_gain, task_prompt=TASK, unit=UNIT,
                        old_text=OLD, new_text=NEW, dimension=DEFAULT_DIMENSIONS[0],
                        incumbent_traces=INCUMBENT, candidate_traces=CANDIDATE)


def decided(comparison):
    return decide(comparison, INCUMBENT, CANDIDATE, CompileConfig().min_gain)


def step_keys(tmp_path) -> list[str]:
    return [c.step_key for c in read_calls(tmp_path / "calls.jsonl") if not c.cache_hit and c.error is None]


# (a) ---------------------------------------------------------------------------------

def test_a_split_verdict_asks_more_pairs_and_is_accepted_on_a_positive_bound(tmp_path, scripted_llm):
    # Pair 0 splits (+1 as A, 0 as B: mean 0.5, which the one-pair rule accepts); later pairs see a gain.
    scripted_llm.always("judge", by_pair((1, 0), (1, 1), (1, 1)))
    comparison, _ = compare(judge_client(tmp_path))
    assert len(scripted_llm.requests_for("judge")) == 6
    assert (comparison.pairs, comparison.gain_bound, comparison.stop_reason) == (3, 0.5, "max_pairs")
    # After pair 1 the orders agree (means 1 and 0.5) but the mean 0.75 is too near min_gain 0.5.
    assert comparison.pair_reasons == ["orders_split", "near_min_gain"]
    assert [c.pair for c in comparison.calls] == [0, 0, 1, 1, 2, 2]
    assert decided(comparison)[:2] == (True, ACCEPTED)


def test_a_split_verdict_with_a_later_pair_of_no_gain_is_rejected_on_the_bound(tmp_path, scripted_llm):
    # Mean gain (2 + 0 + 2 - 2) / 4 = 0.5 meets min_gain, but pair 1's gain is 0: no gain shown.
    scripted_llm.always("judge", by_pair((2, 0), (2, -2)))
    comparison, _ = compare(judge_client(tmp_path))
    assert len(scripted_llm.requests_for("judge")) == 4
    assert (comparison.pairs, comparison.gain_bound, comparison.stop_reason) == (2, 0.0, "gain_not_positive")
    assert comparison.candidate_score - comparison.incumbent_score == 0.5
    assert decided(comparison) == (False, NO_IMPROVEMENT, 0.5)


# (b) ---------------------------------------------------------------------------------

def test_a_deterministic_judge_answers_the_re_presented_pair_differently(tmp_path, scripted_llm):
    # Temperature 0, and the answer depends only on the prompt: on the first trace it sees with the
    # candidate. Pair 0 shows each version's traces in their own order; pair 1 re-presents them.
    def judge(request) -> dict:
        seen = shown(request)
        first_new = next(which for side, which in seen["order"] if side == "new")
        return scores(seen["cand"], 2 if seen["cand"] == "A" or first_new == "one" else 0)

    scripted_llm.always("judge", judge)
    comparison, _ = compare(judge_client(tmp_path))
    requests = [shown(r) for r in scripted_llm.requests_for("judge")]
    assert [r["pair"] for r in requests] == [0, 0, 1, 1]
    first, second = requests[0], requests[2]
    assert first["cand"] == second["cand"] == "A"
    assert first["texts"] == second["texts"]  # the units' A/B texts unchanged
    assert first["traces"] == ["A1", "A2", "B1", "B2"] and second["traces"] == ["A3", "A4", "B3", "B4"]
    assert first["order"] != second["order"] and sorted(first["order"]) == sorted(second["order"])
    # The same judge split pair 0 (+2 / 0) and agreed in pair 1 (+2 / +2).
    assert [c.delta for c in comparison.calls] == [2, 0, 2, 2]
    assert comparison.pairs == 2 and comparison.stop_reason == "orders_agree"


def test_the_re_presentation_is_seeded_and_never_the_first_pairs_order():
    for seed in range(20):
        for count in (2, 3, 5):
            assert presentation(count, seed, 0, "candidate") == list(range(count))
            later = presentation(count, seed, 1, "candidate")
            assert sorted(later) == list(range(count)) and later != list(range(count))
            assert later == presentation(count, seed, 1, "candidate")


# (c) ---------------------------------------------------------------------------------

def test_a_resume_in_the_middle_of_a_sequential_comparison_sends_no_call_twice(tmp_path, scripted_llm):
    judge = by_pair((1, 0), (1, 0), (1, 1))
    asked = []

    def crash_in_pair_2(request):
        asked.append(shown(request)["pair"])
        if shown(request)["pair"] == 2 and asked.count(2) == 1:
            return server_error("the machine went down")
        return judge(request)

    scripted_llm.always("judge", crash_in_pair_2)
    with pytest.raises(Exception):
        compare(judge_client(tmp_path))
    assert asked == [0, 0, 1, 1, 2]  # two pairs answered and cached, then the crash
    comparison, _ = compare(judge_client(tmp_path))  # the resume: a new client on the same cache
    assert asked == [0, 0, 1, 1, 2, 2, 2]  # only pair 2 is sent, its lost call once more
    answered = step_keys(tmp_path)
    assert len(answered) == len(set(answered)) == 6
    assert answered[4:] == [f"{KEY}/compare/p2/candidate-A/s0", f"{KEY}/compare/p2/candidate-B/s0"]
    assert (comparison.pairs, comparison.stop_reason, comparison.gain_bound) == (3, "max_pairs", 0.5)


# (d) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("deltas, accepted", [((1, 1), True), ((2, 1), True), ((0, 0), False), ((1, -1), False),
                                              ((-1, -2), False)])
def test_a_clear_verdict_stops_after_one_pair(tmp_path, scripted_llm, deltas, accepted):
    scripted_llm.always("judge", answer(*deltas))
    comparison, _ = compare(judge_client(tmp_path))
    assert len(scripted_llm.requests_for("judge")) == 2
    assert comparison.pairs is None and "pairs" not in comparison.model_dump()
    assert decided(comparison)[0] is accepted


def test_a_kept_regression_or_no_relevance_stops_after_one_pair(tmp_path, scripted_llm):
    claim = {"kind": "error", "trace_id": "A1", "step": 2, "quote": "new answer"}
    scripted_llm.always("judge", lambda r: {**answer(1, 0)(r), f"regressions_{shown(r)['cand'].lower()}":
                                            [{**claim, "trace_id": f"{shown(r)['cand']}1"}]})
    comparison, _ = compare(judge_client(tmp_path))
    assert len(scripted_llm.requests_for("judge")) == 2 and comparison.regressions
    scripted_llm.reset()
    scripted_llm.always("judge", answer(1, 0, task_relevant=False))
    comparison, _ = compare(judge_client(tmp_path / "other"))
    assert len(scripted_llm.requests_for("judge")) == 2 and not comparison.task_relevant


# (e) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("config, keys", [
    ({"compare_max_pairs": 1}, [f"{KEY}/compare/candidate-A/s0", f"{KEY}/compare/candidate-B/s0"]),
    ({"compare_orders": 1}, [f"{KEY}/compare"]),
    ({"compare_orders": 1, "compare_samples": 1, "regressions_need_evidence": False}, [f"{KEY}/compare"]),
])
def test_one_pair_configs_write_their_records_and_keys_as_before(tmp_path, scripted_llm, config, keys):
    scripted_llm.always("judge", answer(1, 0))  # a split verdict: the sequential rule would go on
    comparison, _ = compare(judge_client(tmp_path), **config)
    assert step_keys(tmp_path) == keys
    dumped = json.loads(comparison.model_dump_json())
    assert set(dumped) == OLD_FIELDS
    assert all("pair" not in call for call in dumped["calls"])
    # The one-pair rule, no bound: the split mean 0.5 (or the one call's +1, the candidate shown as A) accepts.
    assert decided(comparison)[:2] == (True, ACCEPTED)


def test_compare_max_pairs_is_in_the_identity_only_when_set():
    assert CompileConfig().compare_max_pairs == 3
    assert "compare_max_pairs" not in CompileConfig().identity_settings()
    assert "compare_max_pairs" not in CompileConfig().model_dump(mode="json")  # compile.json as before
    assert CompileConfig(compare_max_pairs=1).identity_settings()["compare_max_pairs"] == 1
    for bad in (0, 6):
        with pytest.raises(ValueError, match="compare_max_pairs"):
            CompileConfig(compare_max_pairs=bad)


def test_the_stop_rule_in_order():
    from deep_pipeline.core.models import CompareCall, RegressionClaim

    def calls(*pairs, relevant=True, claim=False):
        made = []
        for pair, (as_a, as_b) in enumerate(pairs):
            for label, delta in (("A", as_a), ("B", as_b)):
                made.append(CompareCall(candidate_label=label, pair=pair, incumbent_score=3,
                                        candidate_score=3 + delta, task_relevant=relevant,
                                        candidate_regressions=[RegressionClaim(kind="error")] if claim else []))
        return made

    rule = dict(min_gain=0.5, max_pairs=3)
    assert next_pair(calls((1, 0), claim=True), **rule).stop == "regression"
    assert next_pair(calls((1, 0), relevant=False), **rule).stop == "not_relevant"
    assert next_pair(calls((1, 0), (1, -1)), **rule).stop == "gain_not_positive"
    assert next_pair(calls((1, 1)), **rule).stop == "orders_agree"
    assert next_pair(calls((1, 0), (1, 0), (1, 0)), **rule).stop == "max_pairs"
    assert next_pair(calls((1, 0)), **rule).more == "orders_split"
    assert next_pair(calls((1, 0), (1, 1)), **rule).more == "near_min_gain"


# whole compile: the decision records the pairs ------------------------------------------

def test_a_compiles_decision_records_the_pairs_the_bound_and_the_stop_reason(tmp_path, scripted_llm):
    from deep_pipeline.engine.compiles import register_compile
    from deep_pipeline.engine.context import CompileHandle
    from deep_pipeline.engine.settings import effective_config, load_deployment
    from deep_pipeline.engine.steps import run_step, run_steps

    world = World(low={("s02-steps", "clarity"): 2})
    install_world(scripted_llm, world)

    def judge(request):
        if "score_a" not in (request.schema or {}).get("properties", {}):
            return world.judge(request)
        return by_pair((1, 0), (1, 1), (1, 1))(request)

    scripted_llm.always("judge", judge)
    skill, bundle = make_inputs(tmp_path)
    config = effective_config(load_deployment(), {**CONFIG, "section_iterations": 1, "paragraph_iterations": 0})
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    [decision] = run_steps(ctx, run_step).decisions
    stored = read_model(ctx.cdir.iteration_dir("section", 0) / "decision.json", DecisionRecord).decision
    assert stored == decision and decision.accepted
    assert (decision.pairs, decision.gain_bound, decision.stop_reason) == (3, 0.5, "max_pairs")
    assert [c.pair for c in decision.call_scores] == [0, 0, 1, 1, 2, 2]
    # The HTML report's decision entry says so too.
    from deep_pipeline.report import gather, render

    html = render(gather(ctx.cdir))
    assert "3 pairs, gain bound +0.5, stopped: max_pairs" in html and "p2 A: 3 → 4" in html
