"""Audit metadata for every materialization (SPEC §8): numbers as floats, tables and
diffs as markdown, and the path + sha256 of the file behind each record, so that any
decision in the UI leads to the evidence it was made on."""

from __future__ import annotations

import difflib
from pathlib import Path

import dagster as dg

from deep_pipeline.core.keys import rollout_batch
from deep_pipeline.core.matrix import matrix_markdown
from deep_pipeline.core.skill_use import not_applicable_reason, share, share_texts
from deep_pipeline.llm.accounting import Usage, usage_of_calls
from deep_pipeline.store import sha256_bytes


def file_ref(path: Path) -> dict:
    """`<file name>_path` / `<file name>_sha256`, the suffix kept (`edit_json_sha256`), so a record's
    keys never overwrite the asset's own (edit.json's hash once hid the edit's `edit_sha256`)."""
    path = Path(path)
    if not path.is_file():
        return {}
    name = path.name.replace("-", "_").replace(".", "_")
    return {
        f"{name}_path": dg.MetadataValue.path(str(path)),
        f"{name}_sha256": dg.MetadataValue.text(sha256_bytes(path.read_bytes())),
    }


def usage_meta(usage: Usage, models: dict[str, str] | None = None, prefix: str = "") -> dict:
    """The calls this asset's step made as `model_calls`, `cost_usd`, ...; an asset that only repeats
    other assets' calls (level_matrix, decision) names them with a prefix, so that `model_calls`
    summed over a compile's assets is the report's total."""
    meta = {
        f"{prefix}model_calls": dg.MetadataValue.int(usage.calls),
        f"{prefix}prompt_tokens": dg.MetadataValue.int(usage.prompt_tokens),
        f"{prefix}completion_tokens": dg.MetadataValue.int(usage.completion_tokens),
        f"{prefix}cached_tokens": dg.MetadataValue.int(usage.cached_tokens),
        f"{prefix}cost_usd": dg.MetadataValue.float(usage.cost_usd) if usage.cost_usd is not None else dg.MetadataValue.text("unknown"),
    }
    for role, model in (models or {}).items():
        meta[f"{role}_model"] = dg.MetadataValue.text(model)
    return meta


def agent_usage_meta(cdir, batch: str, runner: str, agent_model: str) -> dict:
    """The agent's spend on a batch of rollouts. A chat agent's calls are in the calls log under
    `rollout/<batch>/r<i>` (`rollout/<batch>-t<i>/r<n>` per task of a set: core.keys.rollout_batch),
    so they count in the report's total; a subprocess agent calls its model itself: its traces' own tokens and cost are shown apart
    (`agent_*`), since no calls log, and so no report total, holds them."""
    meta = usage_meta(usage_of_calls([c for c in cdir.calls() if rollout_batch(c.step_key) == batch]), {"agent": agent_model})
    if runner in ("chat", "replay") or not cdir.has_batch(batch) or cdir.batch(batch).source == "bundle":
        return meta  # nothing spent outside the calls log
    traces = cdir.traces(batch)
    costs = [t.cost_usd for t in traces]
    return meta | {
        "agent_prompt_tokens": dg.MetadataValue.int(sum(t.prompt_tokens or 0 for t in traces)),
        "agent_completion_tokens": dg.MetadataValue.int(sum(t.completion_tokens or 0 for t in traces)),
        # an unknown cost stays unknown, as in Usage.add: never guessed as zero
        "agent_cost_usd": dg.MetadataValue.float(sum(costs)) if None not in costs else dg.MetadataValue.text("unknown"),
    }


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


def text_diff(before: str, after: str, fromfile: str, tofile: str) -> str:
    """A unified diff as a markdown `diff` block."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=fromfile, tofile=tofile)
    # a last line without a newline would run into the closing fence
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines) or "(no change)\n"
    return f"```diff\n{body}```"


def unit_diff(before: str, after: str, unit_id: str) -> str:
    return text_diff(before, after, f"{unit_id} (incumbent)", f"{unit_id} (candidate)")


def skill_use_meta(uses: list, runner: str, output_format: str) -> dict:
    """`read_skill` and `quoted_edited_unit` as shares of the candidate's traces, plus a warning
    when none read the skill (shown to people, read by no rule)."""
    reason = not_applicable_reason(runner, output_format) or (None if uses else "not recorded for these rollouts")
    meta = {name: dg.MetadataValue.text(text) for name, text in share_texts(share(uses), reason).items()}
    return meta | opened_files_meta(uses, reason)


def opened_files_meta(uses: list, not_applicable: str | None) -> dict:
    """`opened_files`: which package files each candidate rollout opened (SPEC §5's read rule)."""
    if not_applicable:
        return {"opened_files": dg.MetadataValue.text(
            f"n/a ({not_applicable}): every package file counts as possibly read")}
    known = [u for u in uses if u.opened_files is not None]
    if not known:
        return {}  # records made before it was kept
    return {"opened_files": dg.MetadataValue.md("\n".join(
        f"- {u.trace_id}: {', '.join(u.opened_files) or 'no package file'}" for u in known))}


def calls_table(calls: list) -> str:
    """Every judge call of a comparison (SPEC §6.5): its order, scores, regressions and reason."""
    rows = ["| order | sample | incumbent | candidate | regressions (kept / dropped) | reason |", "|---|---|---|---|---|---|"]
    for c in calls:
        kept = ", ".join(f"{r.kind} {r.trace_id} step {r.step}".strip() for r in c.candidate_regressions) or "-"
        reason = c.reason.replace("|", "/").replace("\n", " ")
        pair = f"pair {c.pair}, " if c.pair else ""  # a sequential comparison's later pairs (core/sequential.py)
        pair += f"{c.model}, " if c.model else ""  # a judge panel's model (core/panel.py)
        rows.append(f"| {pair}candidate as {c.candidate_label} | {c.sample} | {c.incumbent_score} | {c.candidate_score} | "
                    f"{kept} / {c.dropped_regressions} | {reason} |")
    return "\n".join(rows)
