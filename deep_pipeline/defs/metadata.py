"""Audit metadata for every materialization (SPEC §8): numbers as floats, tables and
diffs as markdown, and the path + sha256 of the file behind each record, so that any
decision in the UI leads to the evidence it was made on."""

from __future__ import annotations

import difflib
from pathlib import Path

import dagster as dg

from deep_pipeline.core.matrix import matrix_markdown
from deep_pipeline.core.skill_use import not_applicable_reason, share, share_texts
from deep_pipeline.llm.accounting import Usage
from deep_pipeline.store import sha256_bytes


def file_ref(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        return {}
    stem = path.stem.replace("-", "_")
    return {
        f"{stem}_path": dg.MetadataValue.path(str(path)),
        f"{stem}_sha256": dg.MetadataValue.text(sha256_bytes(path.read_bytes())),
    }


def usage_meta(usage: Usage, models: dict[str, str] | None = None) -> dict:
    meta = {
        "model_calls": dg.MetadataValue.int(usage.calls),
        "prompt_tokens": dg.MetadataValue.int(usage.prompt_tokens),
        "completion_tokens": dg.MetadataValue.int(usage.completion_tokens),
        "cached_tokens": dg.MetadataValue.int(usage.cached_tokens),
        "cost_usd": dg.MetadataValue.float(usage.cost_usd) if usage.cost_usd is not None else dg.MetadataValue.text("unknown"),
    }
    for role, model in (models or {}).items():
        meta[f"{role}_model"] = dg.MetadataValue.text(model)
    return meta


def matrix_meta(matrix) -> dict:
    cells = matrix.cells
    mean = sum(c.score for c in cells) / len(cells) if cells else 0.0
    return {
        "matrix": dg.MetadataValue.md(matrix_markdown(matrix)),
        "mean_score": dg.MetadataValue.float(float(mean)),
        "units": dg.MetadataValue.int(len(matrix.units)),
        "cells": dg.MetadataValue.int(len(cells)),
        "trace_batch": dg.MetadataValue.text(matrix.trace_batch),
        "skill_sha256": dg.MetadataValue.text(matrix.skill_sha256),
        "budget_exhausted": dg.MetadataValue.bool(matrix.budget_exhausted),
    }


def unit_diff(before: str, after: str, unit_id: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=f"{unit_id} (incumbent)", tofile=f"{unit_id} (candidate)"
    )
    body = "".join(lines) or "(no change)\n"
    return f"```diff\n{body}```"


def skill_use_meta(uses: list, runner: str, output_format: str) -> dict:
    """`read_skill` and `quoted_edited_unit` as shares of the candidate's traces, plus a warning
    when none read the skill (issue 10 point 3: shown to people, read by no rule)."""
    reason = not_applicable_reason(runner, output_format) or (None if uses else "not recorded for these rollouts")
    return {name: dg.MetadataValue.text(text) for name, text in share_texts(share(uses), reason).items()}


def calls_table(calls: list) -> str:
    """Every judge call of a comparison (SPEC §6.5): its order, scores, regressions and reason."""
    rows = ["| order | sample | incumbent | candidate | regressions (kept / dropped) | reason |", "|---|---|---|---|---|---|"]
    for c in calls:
        kept = ", ".join(f"{r.kind} {r.trace_id} step {r.step}".strip() for r in c.candidate_regressions) or "-"
        reason = c.reason.replace("|", "/").replace("\n", " ")
        rows.append(f"| candidate as {c.candidate_label} | {c.sample} | {c.incumbent_score} | {c.candidate_score} | "
                    f"{kept} / {c.dropped_regressions} | {reason} |")
    return "\n".join(rows)
