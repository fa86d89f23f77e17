"""Where a compile stands, for people and scripts: levels, stop reasons, decisions, records.

Read from the compile's folder alone (no Dagster instance), so `deep-pipeline status`
works while a driver or the daemon carries the compile on, and writes nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from deep_pipeline.core.models import LevelSummary
from deep_pipeline.core.actions import Done, action_label
from deep_pipeline.core.keys import iteration_label
from deep_pipeline.engine.context import StepContext
from deep_pipeline.llm.accounting import Usage


class DecisionRow(BaseModel):
    number: int  # 1-based, in the order of the history, across levels
    iteration: str  # the display form, e.g. "section/i00"
    coordinate: str
    accepted: bool
    reason: str
    incumbent_score: float | None = None
    candidate_score: float | None = None
    delta: float | None = None


class CompileStatus(BaseModel):
    compile_key: str
    task_name: str
    skill_name: str
    state: str  # "finalized", "running" or "budget_exhausted"
    next_step: str | None = None  # what the policy asks for next, while not finalized
    levels: list[LevelSummary]
    decisions: list[DecisionRow] = Field(default_factory=list)
    usage: Usage
    records: dict[str, str]  # what -> path


def compile_status(ctx: StepContext) -> CompileStatus:
    outlook = ctx.look()
    state, action = outlook.state, outlook.action
    cdir = ctx.cdir
    rows = [
        DecisionRow(
            number=n, iteration=iteration_label(d.level, d.index), coordinate=str(d.coordinate), accepted=d.accepted,
            reason=d.reason, incumbent_score=d.incumbent_score, candidate_score=d.candidate_score, delta=d.delta,
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
    return CompileStatus(
        compile_key=cdir.key, task_name=ctx.record.task_name, skill_name=ctx.record.skill_name,
        state="finalized" if finalized else "budget_exhausted" if state.budget_exhausted else "running",
        next_step=None if finalized else action_label(action),
        levels=state.level_summaries(), decisions=rows, usage=cdir.usage(), records=records,
    )


def format_status(status: CompileStatus) -> str:
    """The detailed, human form of one compile's status."""
    lines = [f"{status.compile_key}  ({status.skill_name} on task {status.task_name})",
             f"state: {status.state}" + (f"; next step: {status.next_step}" if status.next_step else "")]
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
    usage = status.usage
    cost = f"${usage.cost_usd:.4f}" if usage.cost_usd is not None else "cost unknown"
    lines += ["", f"model calls: {usage.calls}, {usage.prompt_tokens + usage.completion_tokens} tokens, {cost}"]
    lines += [f"{what + ':':<12} {path}" for what, path in status.records.items()]
    return "\n".join(lines)
