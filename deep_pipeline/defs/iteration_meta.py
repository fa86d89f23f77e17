"""The metadata of an iteration's five assets, built from its stored records alone.

Pure functions of an iteration folder's records (edit.json, candidate.json, rollouts.json,
comparison.json, decision.json) and the compile they belong to: the `iteration` step
(defs/assets/iteration.py) yields them, and a test builds them from a stored folder with
no Dagster run at all.
"""

from __future__ import annotations

import dagster as dg

from deep_pipeline.core.decision import claim_item
from deep_pipeline.core.matrix import matrix_markdown
from deep_pipeline.defs.metadata import agent_usage_meta, calls_table, file_ref, skill_use_meta, unit_diff, usage_meta
from deep_pipeline.defs.pages import (TraceLookup, cell_page, decision_links, evidence_table, growth_meta, matrix_before,
                                     panel_meta, scores_table, task_table)
from deep_pipeline.engine.iteration_steps import Iteration
from deep_pipeline.engine.records import CandidateRecord, ComparisonRecord, DecisionRecord, EditRecord, RolloutsRecord


def _skipped(reason: str | None) -> dict:
    return {"skipped": dg.MetadataValue.text(reason.replace("_", " ") if reason else "no")}


def _skill_use(it: Iteration, record: RolloutsRecord | None) -> dict:
    if record is None or record.skipped:
        return {}
    cfg = it.ctx.config
    return skill_use_meta(record.skill_use, cfg.runner, cfg.agent_output_format)


def _pairs(record) -> dict:
    """A sequential comparison's pairs, bound and stop reason (core/sequential.py); nothing for one pair."""
    if record.pairs is None:
        return {}
    return {"pairs": dg.MetadataValue.int(record.pairs),
            "gain_bound": dg.MetadataValue.float(float(record.gain_bound)) if record.gain_bound is not None
            else dg.MetadataValue.text("-"),
            "stop_reason": dg.MetadataValue.text(record.stop_reason or "-"),
            "pair_reasons": dg.MetadataValue.json(record.pair_reasons or [])}


def _disagreement(value: bool | None) -> dg.MetadataValue:
    return dg.MetadataValue.text("-" if value is None else ("yes: the orders disagree on which side is better" if value else "no"))


def edit_meta(it: Iteration, edit: EditRecord) -> dict:
    """`candidate_edit`: the selected cell, the edit, its checks and the editor's calls."""
    return {
        "coordinate": dg.MetadataValue.text(str(edit.coordinate)),
        "cell_score": dg.MetadataValue.float(float(edit.cell.score)),
        "cell_reason": dg.MetadataValue.text(edit.cell.reason),
        "status": dg.MetadataValue.text(edit.status),
        "attempts": dg.MetadataValue.int(len(edit.attempts)),
        "failed_checks": dg.MetadataValue.json([a.reason for a in edit.attempts if not a.ok]),
        "edit_summary": dg.MetadataValue.text(edit.edit.edit_summary if edit.edit else "-"),
        "edit_diff": dg.MetadataValue.md(unit_diff(edit.unit_text_before, edit.unit_text_after or edit.unit_text_before,
                                                   edit.coordinate.unit_id)),
        "edit_sha256": dg.MetadataValue.text(edit.edit_sha256 or "-"),
        "selected_from_matrix": dg.MetadataValue.text(edit.matrix_key or "-"),
        "incumbent_traces": dg.MetadataValue.text(edit.incumbent_batch),
        **usage_meta(edit.usage, {"editor": it.ctx.config.editor_model}),
        **file_ref(it.path("edit.json")),
    }


def package_meta(it: Iteration, record: CandidateRecord) -> dict:
    """`candidate_package`: where the candidate package is and its hashes."""
    meta = _skipped(record.skipped)
    if not record.skipped:
        meta |= {
            "package_dir": dg.MetadataValue.path(record.package_dir),
            "package_hash": dg.MetadataValue.text(record.package_hash),
            "skill_sha256": dg.MetadataValue.text(record.skill_sha256),
        }
    return meta | file_ref(it.path("candidate.json"))


def rollouts_meta(it: Iteration, record: RolloutsRecord) -> dict:
    """`candidate_rollouts`: the batch, its traces, timeouts, errors, the skill-use signal and the agent's usage."""
    meta = _skipped(record.skipped)
    if not record.skipped:
        meta |= {
            "batch": dg.MetadataValue.text(record.batch),
            "trace_ids": dg.MetadataValue.json(record.trace_ids),
            "timed_out": dg.MetadataValue.int(record.timed_out),
            "errors": dg.MetadataValue.int(record.errors),
            "runner": dg.MetadataValue.text(it.ctx.config.runner),
            **_skill_use(it, record),
            **file_ref(it.ctx.cdir.batch_dir(record.batch) / "batch.json"),
        }
    # Always: rollouts a budget stop cut short were paid for too.
    meta |= agent_usage_meta(it.ctx.cdir, it.batch, it.ctx.config.runner, it.ctx.config.agent_model)
    return meta | file_ref(it.path("rollouts.json"))


def comparison_meta(it: Iteration, record: ComparisonRecord) -> dict:
    """`comparison`: both sides' scores, the orders, every call, the regressions kept and dropped."""
    meta = _skipped(record.skipped)
    if record.comparison is not None:
        c = record.comparison
        meta |= {
            "incumbent_score": dg.MetadataValue.float(float(c.incumbent_score)),
            "candidate_score": dg.MetadataValue.float(float(c.candidate_score)),
            "task_relevant": dg.MetadataValue.bool(c.task_relevant),
            "judge_regressions": dg.MetadataValue.json(c.runtime_regressions),
            "dropped_regressions": dg.MetadataValue.int(c.dropped_regressions),
            # claims kept at face value (regressions_need_evidence: false) whose quote is not in that step
            "unverified_regressions": dg.MetadataValue.json([claim_item(r) for r in c.regressions if not r.verified]),
            "rule_regressions": dg.MetadataValue.json(record.rule_regressions),
            "ab_order": dg.MetadataValue.text(f"candidate shown as {c.candidate_label} (seed {c.order_seed})"),
            "order_disagreement": _disagreement(c.order_disagreement),
            **_pairs(c),
            "calls": dg.MetadataValue.md(calls_table(c.calls)),
            **panel_meta(c),
            "reason": dg.MetadataValue.text(c.reason),
            "candidate_evidence": dg.MetadataValue.json([e.model_dump() for e in c.candidate_evidence]),
            "dropped_evidence": dg.MetadataValue.int(c.dropped_evidence),
            "incumbent_traces": dg.MetadataValue.text(record.incumbent_batch),
            "candidate_traces": dg.MetadataValue.text(record.candidate_batch),
        }
    meta |= usage_meta(record.usage, {"judge": it.ctx.config.judge_model})
    return meta | file_ref(it.path("comparison.json"))


def _page(it: Iteration, edit: EditRecord, matrix_after) -> dict:
    """What makes the decision page stand alone: the diff, the scores, the
    judge's reason, the evidence of both sides in their steps, the cell that selected the
    unit, and the matrix before and after, all read from the iteration's records."""
    traces = TraceLookup(it.ctx.cdir)
    before = matrix_before(it.ctx.cdir, edit)
    stored = it.load("comparison.json", ComparisonRecord)
    comparison = stored.comparison if stored is not None else None
    after_text = edit.unit_text_after or edit.unit_text_before
    meta = {
        "edit_diff": dg.MetadataValue.md(unit_diff(edit.unit_text_before, after_text, edit.coordinate.unit_id)),
        "selected_cell": dg.MetadataValue.md(cell_page(edit.cell, traces)),
        "matrix_before": dg.MetadataValue.md(matrix_markdown(before) if before else "-"),
        "matrix_after": dg.MetadataValue.md(matrix_markdown(matrix_after) if matrix_after else "-"),
    }
    if edit.unit.file != "SKILL.md":  # a unit of another markdown file of the package (core/package.py)
        meta["edited_file"] = dg.MetadataValue.text(edit.unit.file)
    if comparison is not None:
        meta |= {
            "scores": dg.MetadataValue.md(scores_table(comparison)),
            **panel_meta(comparison),
            "incumbent_score": dg.MetadataValue.float(float(comparison.incumbent_score)),
            "candidate_score": dg.MetadataValue.float(float(comparison.candidate_score)),
            "judge_reason": dg.MetadataValue.text(comparison.reason or "-"),
            "evidence": dg.MetadataValue.md(evidence_table(comparison, traces)),
        }
    return meta


def _tasks_page(it: Iteration, d) -> dict:
    """A task set's per-task table (SPEC §11); nothing for a compile of one task."""
    stored = it.load("comparison.json", ComparisonRecord)
    if stored is None or stored.task_comparisons is None:
        return {}
    return {"tasks": dg.MetadataValue.md(task_table(stored, d)),
            "task_deltas": dg.MetadataValue.json(d.task_deltas or {})}


def decision_meta(it: Iteration, edit: EditRecord, record: DecisionRecord, matrix_after, run_id: str) -> dict:
    """`decision`: the page that stands alone (diff, scores, the judge's reason, evidence in its
    trace steps, the selecting cell, the matrix before and after) and links to the records."""
    d = record.decision
    return {
        "compile": dg.MetadataValue.text(it.ctx.cdir.key),
        "coordinate": dg.MetadataValue.text(str(d.coordinate)),
        "accepted": dg.MetadataValue.float(1.0 if d.accepted else 0.0),  # numeric, so the Plots tab charts it
        "reason": dg.MetadataValue.text(d.reason),
        "delta": dg.MetadataValue.float(float(d.delta)) if d.delta is not None else dg.MetadataValue.text("-"),
        "ab_order": dg.MetadataValue.text(f"candidate shown as {d.candidate_label}" if d.candidate_label else "-"),
        "order_disagreement": _disagreement(d.order_disagreement),
        **_pairs(d),
        "call_scores": dg.MetadataValue.json([c.model_dump() for c in d.call_scores]),
        "edit_summary": dg.MetadataValue.text(d.edit_summary or "-"),
        **growth_meta(d),
        "selected_from_matrix": dg.MetadataValue.text(edit.matrix_key or "-"),
        "evidence_files": dg.MetadataValue.json({n: str(it.path(n)) for n in ("edit.json", "comparison.json", "rollouts.json")}),
        **_page(it, edit, matrix_after),
        **_tasks_page(it, d),
        **decision_links(it.ctx.cdir.key, it.key, edit.matrix_key, run_id),
        **_skill_use(it, it.load("rollouts.json", RolloutsRecord)),
        # the editor's and judge's calls again (candidate_edit, comparison): prefixed, so model_calls sums right
        **usage_meta(record.usage, prefix="iteration_"),
        **file_ref(it.path("decision.json")),
    }
