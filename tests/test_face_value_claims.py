"""Face-value claims say so (SPEC §6.6 as revised, docs/spec-revisions.md): with `regressions_need_evidence: false`, a
regression claim the traces do not bear out is kept, as the original design kept it, and
its reason reads exactly as before — but the claim is marked `verified: false`, the decision
lists it in `unverified_regressions`, and the decision page and the HTML report mark each
kept claim verified or not."""

from __future__ import annotations

import json

from deep_pipeline.core.comparison import check_claims, combine
from deep_pipeline.core.decision import decide_tasks
from deep_pipeline.core.keys import batch_name
from deep_pipeline.core.models import (REGRESSED_PREFIX, CompareCall, Comparison, RegressionClaim, TaskComparison, Trace,
                                       TraceStep)
from deep_pipeline.defs.pages import TraceLookup, evidence_table, growth_meta
from deep_pipeline.engine.records import ComparisonRecord
from deep_pipeline.report import gather, render
from deep_pipeline.store import read_model
from tests.test_comparison import claim, compile_with, gain_with_claim

TRACES = [Trace(trace_id="section-i00-r0", steps=[TraceStep(step=1, source="tool", text="Error: no such file data.csv")])]


def test_face_value_keeps_every_claim_and_marks_the_ones_the_traces_do_not_bear_out():
    rename = {"B1": "section-i00-r0"}
    items = [claim("B1", 1, "no such file"), claim("B1", 3, "no such file"), "it crashed"]
    kept, dropped = check_claims(items, TRACES, rename, need_evidence=False)
    assert [(c.trace_id, c.step, c.verified) for c in kept] == [
        ("section-i00-r0", 1, True), ("section-i00-r0", 3, False), ("", 0, False)]
    assert dropped == 0
    # Records where every claim is verified are written as before: no `verified` key.
    assert "verified" not in kept[0].model_dump() and kept[1].model_dump()["verified"] is False
    kept, _ = check_claims(items, TRACES, rename)  # evidence required: only verified claims are kept
    assert [c.verified for c in kept] == [True]


def test_a_claim_one_call_verifies_is_verified_in_the_comparison():
    face = RegressionClaim(kind="error", trace_id="section-i00-r0", step=1, quote="crash", verified=False)
    quoted = face.model_copy(update={"quote": "no such file", "verified": True})
    call = lambda claims: CompareCall(candidate_label="A", incumbent_score=3, candidate_score=4, task_relevant=True,  # noqa: E731
                                      candidate_regressions=claims)
    assert [c.verified for c in combine([call([face]), call([quoted])], 0).regressions] == [True]
    assert [c.verified for c in combine([call([face]), call([face])], 0).regressions] == [False]


def comparison_with(*claims: RegressionClaim) -> Comparison:
    return combine([CompareCall(candidate_label="A", incumbent_score=2, candidate_score=4, task_relevant=True,
                                candidate_regressions=list(claims))], 0)


def test_the_decision_reads_as_before_and_lists_the_unverified_items_apart():
    verified = RegressionClaim(kind="error", trace_id="t-r0", step=3, quote="boom")
    face = RegressionClaim(kind="wrong_output", trace_id="t-r1", step=2, quote="nope", verified=False)
    bare = RegressionClaim(kind="other", quote="it felt slower", verified=False)
    one = TaskComparison(task="", comparison=comparison_with(verified, face, bare))
    verdict = decide_tasks([one], 0.5, 0.5)
    assert verdict.reason == f"{REGRESSED_PREFIX}error (t-r0 step 3),wrong_output (t-r1 step 2),other"
    assert verdict.unverified_regressions == ["wrong_output (t-r1 step 2)", "other"]
    # A task set names each item's task.
    alpha = TaskComparison(task="alpha", comparison=comparison_with(verified))
    beta = TaskComparison(task="beta", comparison=comparison_with(face))
    assert decide_tasks([alpha, beta], 0.5, 0.5).unverified_regressions == ["beta:wrong_output (t-r1 step 2)"]
    assert decide_tasks([alpha], 0.5, 0.5).unverified_regressions == []


def test_an_unverified_claim_is_marked_on_the_decision_comparison_page_and_report(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=6, quote="shipped the parser"),
                               regressions_need_evidence=False)
    first = report.decisions[0]
    item = f"failed_command ({batch_name(first.level, first.index)}-r0 step 6)"
    assert not first.accepted and first.reason == REGRESSED_PREFIX + item  # the reason as the original design's
    assert first.unverified_regressions == [item]
    folder = ctx.cdir.iteration_dir(first.level, first.index)
    assert json.loads((folder / "decision.json").read_text())["decision"]["unverified_regressions"] == [item]
    record = read_model(folder / "comparison.json", ComparisonRecord)
    assert [c.verified for c in record.comparison.regressions] == [False]
    assert '"verified": false' in (folder / "comparison.json").read_text()
    # The decision page.
    assert growth_meta(first)["unverified_regressions"].value == [item]
    table = evidence_table(record.comparison, TraceLookup(ctx.cdir))
    assert "| candidate | regression: failed_command (unverified: face value) |" in table
    assert "(verified)" not in table
    # The HTML report: the timeline's reason and the evidence row.
    page = render(gather(ctx.cdir))
    assert f"{first.reason} (unverified, face value: {item})" in page
    assert "regression (failed_command, unverified: face value)" in page


def test_a_face_value_claim_the_traces_bear_out_is_verified_and_nothing_new_is_written(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=2, quote="shipped the parser"),
                               regressions_need_evidence=False)
    first = report.decisions[0]
    assert first.reason == f"{REGRESSED_PREFIX}failed_command ({batch_name(first.level, first.index)}-r0 step 2)"
    assert first.unverified_regressions is None
    folder = ctx.cdir.iteration_dir(first.level, first.index)
    assert "unverified_regressions" not in json.loads((folder / "decision.json").read_text())["decision"]
    assert '"verified"' not in (folder / "comparison.json").read_text()
    record = read_model(folder / "comparison.json", ComparisonRecord)
    assert "regression: failed_command (verified)" in evidence_table(record.comparison, TraceLookup(ctx.cdir))
    page = render(gather(ctx.cdir))
    assert "regression (failed_command, verified)" in page and "unverified" not in page


def test_the_original_rule_keeps_its_reasons(tmp_path, scripted_llm):
    """compare_orders 1, compare_samples 1, face value: the reason is the original design's."""
    ctx, report = compile_with(tmp_path, scripted_llm, gain_with_claim(step=6, quote="not in any trace"),
                               regressions_need_evidence=False, compare_orders=1, compare_samples=1)
    first = report.decisions[0]
    item = f"failed_command ({batch_name(first.level, first.index)}-r0 step 6)"
    assert (first.accepted, first.reason, first.unverified_regressions) == (False, REGRESSED_PREFIX + item, [item])
