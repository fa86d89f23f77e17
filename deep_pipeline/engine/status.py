"""Where a compile stands, for people and scripts: levels, stop reasons, decisions, records.

Read from the compile's folder alone (no Dagster instance), so `deep-pipeline status`
works while a driver or the daemon carries the compile on, and writes nothing.
"""

from __future__ import annotations

import contextlib

from datetime import datetime, timezone

from pydantic import BaseModel, Field

from deep_pipeline.core.growth import SkillSize, growth_text, size_text, skill_size
from deep_pipeline.core.models import SKILL_FILE, Decision, LevelSummary
from deep_pipeline.core.package import changed_files, file_of
from deep_pipeline.core.actions import Done, action_label
from deep_pipeline.core.keys import batch_name, iteration_key, iteration_label, matrix_key, parse_key, rollout_batch
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.failures import StepFailure, last_failure
from deep_pipeline.core.history import History
from deep_pipeline.llm.accounting import Usage
from deep_pipeline.llm.accounting import cost_text


class DecisionRow(BaseModel):
    number: int  # 1-based, in the order of the history, across levels
    iteration: str  # the display form, e.g. "section/i00"
    coordinate: str
    accepted: bool
    reason: str
    incumbent_score: float | None = None
    candidate_score: float | None = None
    delta: float | None = None
    task_deltas: dict[str, float] | None = None  # a task set's (SPEC §11)
    growth_chars: int | None = None  # the edit's growth of the file it edits (core/growth.py)
    growth_lines: int | None = None
    growth_file: str = SKILL_FILE  # the file the edit grew


class CompileStatus(BaseModel):
    compile_key: str
    task_name: str
    skill_name: str
    training_tasks: list[str] = Field(default_factory=list)  # a task set's (SPEC §11); [task_name] for one task
    held_out_tasks: list[str] = Field(default_factory=list)
    state: str  # "finalized", "failed", "waiting_retry", "running" or "budget_exhausted"
    next_step: str | None = None  # what the policy asks for next, while not finalized
    failure: StepFailure | None = None  # the last step run's failure, while no step has ended since
    levels: list[LevelSummary]
    decisions: list[DecisionRow] = Field(default_factory=list)
    usage: Usage
    skill_size: SkillSize  # SKILL.md now (S_final once finalized) against S_fast's
    # Each other markdown file the decisions edited (core/package.py), its size now against S_fast's.
    file_sizes: dict[str, SkillSize] = Field(default_factory=dict)
    records: dict[str, str]  # what -> path


def compile_status(ctx: CompileHandle) -> CompileStatus:
    outlook = ctx.look()
    state, action = outlook.state, outlook.action
    cdir = ctx.cdir
    rows = [
        DecisionRow(
            number=n, iteration=iteration_label(d.level, d.index), coordinate=str(d.coordinate), accepted=d.accepted,
            reason=d.reason, incumbent_score=d.incumbent_score, candidate_score=d.candidate_score, delta=d.delta,
            task_deltas=d.task_deltas, growth_chars=d.growth_chars, growth_lines=d.growth_lines, growth_file=file_of(d.coordinate.unit_id),
        )
        for n, d in enumerate(state.decisions, start=1)
    ]
    finalized = isinstance(action, Done)
    records = {"folder": str(cdir.path), "identity": str(cdir.record_path), "matrices": str(cdir.path / "matrices"),
               "iterations": str(cdir.path / "iterations"), "model calls": str(cdir.calls_log)}
    if finalized:
        records.update({"report": str(cdir.report_path), "S_final": str(cdir.final_skill)})
    # Written after the compile, read by no step: listed so people find them.
    for what, path in (("report.html", cdir.html_report_path), ("evaluations", cdir.evaluations_dir)):
        if path.exists():
            records[what] = str(path)
    failure = None if finalized else last_failure(cdir)
    return CompileStatus(
        compile_key=cdir.key, task_name=ctx.record.task_name, skill_name=ctx.record.skill_name,
        training_tasks=[e.task for e in ctx.record.task_entries if e.split == "training"],
        held_out_tasks=[e.task for e in ctx.record.task_entries if e.split == "held_out"],
        state=compile_state(finalized, failure, state.budget_exhausted), failure=failure,
        next_step=None if finalized else action_label(action),
        levels=state.level_summaries(), decisions=rows, usage=cdir.usage(),
        skill_size=skill_size(cdir.skill_text(), state.current_skill_text), records=records,
        file_sizes={path: skill_size(state.input_files[path], text)
                    for path, text in sorted(changed_files(state.input_files, state.current_files).items())},
    )


def compile_state(finalized: bool, failure: StepFailure | None, budget_exhausted: bool) -> str:
    """One word for where the compile is: a failed last step run is "failed", not "running"
    (nothing carries the compile on until it is resumed), or "waiting_retry" while the loop
    sensor will run that step again."""
    if finalized:
        return "finalized"
    if failure:
        return "waiting_retry" if failure.waiting else "failed"
    return "budget_exhausted" if budget_exhausted else "running"


def failure_line(failure: StepFailure) -> str:
    when = datetime.fromtimestamp(failure.at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{failure.step} run {failure.run_id} for {failure.partition} failed at {when}: {failure.error}"


def format_status(status: CompileStatus) -> str:
    """The detailed, human form of one compile's status."""
    on = (f"task {status.task_name}" if len(status.training_tasks) <= 1 and not status.held_out_tasks else
          f"training tasks {', '.join(status.training_tasks)}; held out {', '.join(status.held_out_tasks) or 'none'}")
    lines = [f"{status.compile_key}  ({status.skill_name} on {on})",
             f"state: {status.state}" + (f"; next step: {status.next_step}" if status.next_step else "")]
    if status.failure and status.failure.waiting:
        lines.append(status.failure.waiting)
    elif status.failure:
        lines.append(f"last step failed: {failure_line(status.failure)}")
    for level in status.levels:
        where = f" in {level.section_id}" if level.section_id else ""
        stop = level.stop_reason or "running"
        lines.append(f"{level.level} level{where}: {stop}; {level.iterations} iterations, {level.accepted} accepted, "
                     f"{level.matrices} matrices")
    if status.decisions:
        lines.append("")
        lines.append(f"{'#':>3}  {'iteration':<14} {'coordinate':<32} {'outcome':<8} {'scores':<11} reason")
        for row in status.decisions:
            scores = (f"{row.incumbent_score:g} -> {row.candidate_score:g}"
                      if row.incumbent_score is not None and row.candidate_score is not None else "-")
            outcome = "accepted" if row.accepted else "rejected"
            lines.append(f"{row.number:>3}  {row.iteration:<14} {row.coordinate:<32} {outcome:<8} {scores:<11} {row.reason}")
            if row.accepted and row.growth_chars is not None and row.growth_lines is not None:
                lines.append(f"{'':>5}growth: {growth_text(row.growth_chars, row.growth_lines, row.growth_file)}")
            if row.task_deltas:
                lines.append(f"{'':>5}per task: " + ", ".join(f"{t} {v:+g}" for t, v in row.task_deltas.items()))
    lines += ["", f"SKILL.md: {size_text(status.skill_size, 'now', '->')}"]
    lines += [f"{path}: {size_text(size, 'now', '->')}" for path, size in status.file_sizes.items()]
    usage = status.usage
    cost = cost_text(usage.cost_usd)
    lines += [f"model calls: {usage.calls}, {usage.prompt_tokens + usage.completion_tokens} tokens, {cost}"]
    lines += [f"{what + ':':<12} {path}" for what, path in status.records.items()]
    return "\n".join(lines)


class TimelineRow(BaseModel):
    """One step of a compile as the live timeline shows it."""

    number: int  # 1-based, in the order the steps ended
    kind: str  # "inputs", "matrix", "iteration", "finalize", or "failed" (the last step run, failed)
    partition: str  # the step's partition key (a compile, matrix or iteration key)
    level: str | None = None
    coordinate: str | None = None
    accepted: bool | None = None
    incumbent_score: float | None = None
    candidate_score: float | None = None
    delta: float | None = None
    reason: str = ""
    ended_at: float | None = None  # the step's record's mtime (epoch seconds)
    calls: int = 0
    failed_calls: int = 0  # of `calls`, those that ended in an error
    cost_usd: float | None = 0.0  # None: a call's cost is unknown
    run_id: str | None = None  # a failed row's run


def _ended(path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _call_step(step_key: str, compile_key: str, batches: dict[str, str]) -> str | None:
    """The step a call was made for: its key names the matrix or iteration, or its rollout batch."""
    parts = step_key.split("/")
    if parts[0] == compile_key and len(parts) >= 3:
        return "/".join(parts[:3])
    if (batch := rollout_batch(step_key)) is not None:
        return batches.get(batch)
    return None


def timeline_rows(ctx: CompileHandle, history: History | None = None) -> list[TimelineRow]:
    """Every step the compile has finished, from its records: the history the policy reads
    (pass it when the caller has it), one stat per step for its time, and the calls log once
    (never a trace)."""
    cdir = ctx.cdir
    history = history or ctx.look().history
    key = cdir.key
    rows: list[TimelineRow] = []
    batches = {"input": key}  # rollout batch -> the step that rolled it out
    if cdir.has_batch("input"):
        record = cdir.batch("input")
        rows.append(TimelineRow(number=0, kind="inputs", partition=key, reason=f"{len(record.trace_ids)} traces "
                                f"({record.source})", ended_at=_ended(cdir.batch_dir("input") / "batch.json")))
    for event in history.events:
        if isinstance(event, Decision):
            part = iteration_key(key, event.level, event.index)
            batches[batch_name(event.level, event.index)] = part
            rows.append(TimelineRow(
                number=0, kind="iteration", partition=part, level=event.level, coordinate=str(event.coordinate),
                accepted=event.accepted, incumbent_score=event.incumbent_score, candidate_score=event.candidate_score,
                delta=event.delta, reason=event.reason,
                ended_at=_ended(cdir.iteration_dir(event.level, event.index) / "decision.json")))
        else:
            where = f" in {event.section_id}" if event.section_id else ""
            rows.append(TimelineRow(
                number=0, kind="matrix", partition=matrix_key(key, event.level, event.index), level=event.level,
                reason=f"{'start' if event.index == 0 else 'refresh'}{where}: {len(event.units)} units",
                ended_at=_ended(cdir.matrix_dir(event.level, event.index) / "matrix.json")))
    if cdir.report_path.is_file():
        rows.append(TimelineRow(number=0, kind="finalize", partition=key, reason="S_final and the report written",
                                ended_at=_ended(cdir.report_path)))
    elif (failure := last_failure(cdir)) is not None:
        rows.append(_failed_row(failure, batches))
    # A failed row takes its step's calls (its retries and errors); the inputs row, a compile's.
    by_partition: dict[tuple[bool, str], TimelineRow] = {}
    for r in rows:  # the first row of a partition: the inputs row, not a failed finalize
        by_partition.setdefault((r.kind != "finalize", r.partition), r)
    for call in cdir.calls():
        step = _call_step(call.step_key, key, batches)
        row = by_partition.get((True, step)) if step else None
        if row is not None:
            row.calls += 1
            row.failed_calls += call.error is not None
            row.cost_usd = None if row.cost_usd is None or call.cost_usd is None else row.cost_usd + call.cost_usd
    for n, row in enumerate(rows, start=1):
        row.number = n
    return rows


def _failed_row(failure: StepFailure, batches: dict[str, str]) -> TimelineRow:
    """The failed step run, last; an iteration's rollouts are its calls too."""
    level = None
    if "/" in failure.partition:
        with contextlib.suppress(ValueError):
            _, level, kind, index = parse_key(failure.partition)
            if kind == "iteration":
                batches.setdefault(batch_name(level, index), failure.partition)
    return TimelineRow(number=0, kind="failed", partition=failure.partition, level=level, reason=failure.error,
                       ended_at=failure.at, run_id=failure.run_id)
