"""The live compile timeline: one row per finished step, shown in the UI
while the compile runs.

Each step's last asset reports a materialization of `compile_timeline` (an external asset,
defs/assets/timeline.py) for the compile's partition: it needs no run of its own, so the
partition reads "Materialized" with the current table after every step, not only at
finalize (an observation left the partition "Missing" in the partition list). Built from the records on
disk (engine.status.timeline_rows): nothing here writes a record.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from deep_pipeline.core.actions import Done, action_label
from deep_pipeline.defs.pages import asset_url, run_url, table_text
from deep_pipeline.engine.context import CompileHandle, Outlook
from deep_pipeline.engine.failures import last_failure
from deep_pipeline.engine.status import TimelineRow, compile_state, failure_line, timeline_rows
from deep_pipeline.llm.accounting import cost_text

TIMELINE_ASSET = "compile_timeline"
# The asset that ends each kind of step: the timeline is logged once per step, after it
# (the matrix step's columns are one multi_asset before level_matrix: no row of their own).
STEP_ENDS = {"inputs": "input_traces", "matrix": "level_matrix", "iteration": "decision", "finalize": "compile_report",
             "rollouts": "task_rollouts", "columns": "task_columns"}

HEADER = ["| # | step | level | coordinate | outcome | incumbent → candidate | delta | reason | ended (UTC) | calls | cost |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]


def _num(value: float | None, fmt: str = "g") -> str:
    return "-" if value is None else format(value, fmt)


def _step_link(row: TimelineRow) -> str:
    label = row.partition.split("/", 1)[1] if "/" in row.partition else row.partition
    if row.kind == "failed":  # no asset was materialized: link the failed run
        return f"[failed {table_text(label)}]({run_url(row.run_id or '')})"
    return f"[{row.kind} {table_text(label)}]({asset_url([STEP_ENDS[row.kind]], row.partition)})"


def timeline_table(rows: list[TimelineRow]) -> str:
    """The markdown table: each step's outcome, scores, time and spend, linked to its partition."""
    if not rows:
        return "(no step has finished yet)"
    lines = list(HEADER)
    for r in rows:
        outcome = "failed" if r.kind == "failed" else "-" if r.accepted is None else "accepted" if r.accepted else "rejected"
        scores = (f"{_num(r.incumbent_score)} → {_num(r.candidate_score)}"
                  if r.incumbent_score is not None or r.candidate_score is not None else "-")
        ended = datetime.fromtimestamp(r.ended_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if r.ended_at else "-"
        cost = cost_text(r.cost_usd, "unknown")
        calls = f"{r.calls} ({r.failed_calls} failed)" if r.failed_calls else str(r.calls)
        lines.append(f"| {r.number} | {_step_link(r)} | {r.level or '-'} | {table_text(r.coordinate or '-')} | {outcome} "
                     f"| {scores} | {_num(r.delta, '+g')} | {table_text(r.reason) or '-'} | {ended} | {calls} | {cost} |")
    return "\n".join(lines)


def timeline_event(ctx: CompileHandle, outlook: Outlook | None = None) -> dg.AssetMaterialization:
    """The compile's timeline as it stands now (`outlook`: derived by the caller just now), with where it goes next."""
    outlook = outlook or ctx.look()
    rows = timeline_rows(ctx, outlook.history)
    finalized = isinstance(outlook.action, Done)
    failure = None if finalized else last_failure(ctx.cdir)
    state = compile_state(finalized, failure, outlook.state.budget_exhausted)
    # Every call the log holds, a failed step's and those no step's row takes alike.
    calls = ctx.cdir.calls()
    costs = [c.cost_usd for c in calls]
    decided = [r for r in rows if r.accepted is not None]
    last = rows[-1] if rows else None
    return dg.AssetMaterialization(
        asset_key=TIMELINE_ASSET,
        partition=ctx.cdir.key,
        metadata={
            "timeline": dg.MetadataValue.md(timeline_table(rows)),
            "state": dg.MetadataValue.text(state),
            "next_step": dg.MetadataValue.text("-" if finalized else action_label(outlook.action)),
            "last_step": dg.MetadataValue.text(f"{last.kind} {last.partition}" if last else "-"),
            "steps": dg.MetadataValue.int(len(rows)),
            "iterations": dg.MetadataValue.int(len(decided)),
            "accepted": dg.MetadataValue.int(sum(bool(r.accepted) for r in decided)),
            # The compile's totals so far, named apart: summing `model_calls` over a compile's
            # assets gives its calls once (docs/operations.md, "Usage adds up").
            "compile_model_calls": dg.MetadataValue.int(len(calls)),
            "compile_failed_calls": dg.MetadataValue.int(sum(c.error is not None for c in calls)),
            "compile_cost_usd": dg.MetadataValue.float(sum(costs, 0.0)) if None not in costs else dg.MetadataValue.text("unknown"),
            "last_failure": dg.MetadataValue.text(failure_line(failure) if failure else "-"),
        },
    )


def ends_step(context: dg.AssetExecutionContext) -> bool:
    """Whether this op materializes the asset a step ends with (so logs the step's row)."""
    names = {key.to_user_string() for key in context.assets_def.keys}
    return bool(names & set(STEP_ENDS.values()))


def log_timeline(context: dg.AssetExecutionContext, ctx: CompileHandle, outlook: Outlook | None = None) -> None:
    context.log_event(timeline_event(ctx, outlook))
