"""Everything the HTML report shows, read from a finalized compile's folder.

Only records are read (report.json, matrices/, iterations/, traces/, evaluations/):
the page is a view of the audit trail, so it can never say more than the records do.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from pathlib import Path

from deep_pipeline.core.evidence import fold_whitespace, step_full_text
from deep_pipeline.core.models import Decision, Trace
from deep_pipeline.core.skill_use import IterationSkillUse
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.evaluation import EvaluationResult, evaluations_dir
from deep_pipeline.engine.failures import last_failure
from deep_pipeline.engine.status import failure_line
from deep_pipeline.engine.records import ComparisonRecord, CompileRecord, EditRecord, MatrixRecord, Report
from deep_pipeline.errors import InputError
from deep_pipeline.store import read_model

CONTEXT_CHARS = 120  # of the step's text shown on each side of a quote


@dataclass(frozen=True)
class StepExcerpt:
    """The step's text around a quote: before, the quote as it stands in the step, after."""

    before: str
    quote: str
    after: str


@dataclass(frozen=True)
class EvidenceRow:
    side: str  # "candidate", "incumbent" or "regression"
    trace_id: str
    step: int
    quote: str
    excerpt: StepExcerpt | None  # None: the trace or step is not in the records, or the quote not in it
    note: str = ""  # a regression's kind, and whether its quote verified it


@dataclass(frozen=True)
class IterationView:
    number: int  # 1-based, across levels, in the history's order
    decision: Decision
    comparison: ComparisonRecord | None
    skill_use: IterationSkillUse | None
    evidence: list[EvidenceRow] = field(default_factory=list)
    edit: EditRecord | None = None  # the editor's edit of the unit, kept or not


@dataclass(frozen=True)
class MatrixGroup:
    title: str  # "section level", "paragraph level in s02-steps"
    matrices: list[MatrixRecord]  # the first and the last scored (one when the level scored once)


@dataclass(frozen=True)
class ReportPage:
    folder: Path
    record: CompileRecord
    report: Report
    groups: list[MatrixGroup]
    iterations: list[IterationView]
    fast_skill: str
    final_skill: str
    evaluation: EvaluationResult | None
    evaluation_path: Path | None
    task_set_results: list[str] = field(default_factory=list)  # a task set's, as `evaluate` prints them (SPEC §11)
    # (path, S_fast's text, S_final's text) of each other markdown file the decisions edited (core/package.py).
    file_diffs: list[tuple[str, str, str]] = field(default_factory=list)


def gather(cdir: CompileDir) -> ReportPage:
    record = cdir.record()  # an unknown compile fails here, before anything is read
    if not cdir.report_path.is_file():
        failure = last_failure(cdir)
        failed = f"; its last step run failed: {failure_line(failure)}" if failure else ""
        raise InputError(f"{cdir.key}: not finalized (no report.json){failed}; the HTML report is made from a finished "
                         f"compile (`deep-pipeline resume {cdir.key}` carries it on)")
    report = read_model(cdir.report_path, Report)
    final_md = cdir.final_skill / "SKILL.md"
    evaluation_path = latest_evaluation(cdir)
    return ReportPage(
        folder=cdir.path, record=record, report=report, groups=matrix_groups(cdir.matrix_records()),
        iterations=iteration_views(cdir, report), fast_skill=cdir.skill_text(),
        final_skill=final_md.read_bytes().decode("utf-8") if final_md.is_file() else cdir.skill_text(),
        evaluation=read_model(evaluation_path, EvaluationResult) if evaluation_path else None,
        evaluation_path=evaluation_path, task_set_results=task_set_evaluations(cdir),
        file_diffs=[(path, (cdir.input_skill / path).read_bytes().decode("utf-8"),
                     (cdir.final_skill / path).read_bytes().decode("utf-8")) for path in sorted(report.changed_files or {})],
    )


def task_set_evaluations(cdir: CompileDir) -> list[str]:
    """A task set's latest evaluation per task and split, and its latest held-out judged
    comparison, as `evaluate` printed them: training and held-out side by side (SPEC §11)."""
    from deep_pipeline.engine.evaluation import judged_dir, task_set_dir
    from deep_pipeline.engine.evaluation_judged import JudgedResult
    from deep_pipeline.engine.evaluation_tasks import TaskSetResult, format_tasks

    texts = []
    for folder, model, show in ((task_set_dir(cdir), TaskSetResult, format_tasks),
                                (judged_dir(cdir), JudgedResult, JudgedResult.format)):
        files = list(folder.glob("n*.json")) if folder.is_dir() else []
        if files:
            latest = max(files, key=lambda p: (p.stat().st_mtime_ns, str(p)))
            texts.append(show(read_model(latest, model)))
    return texts


def matrix_groups(records: list[MatrixRecord]) -> list[MatrixGroup]:
    """Each level's matrices (a paragraph level per section) in the order the levels began."""
    grouped: dict[tuple[str, str | None], list[MatrixRecord]] = {}
    for m in sorted(records, key=lambda r: r.seq):
        grouped.setdefault((m.matrix.level, m.matrix.section_id), []).append(m)
    groups = []
    for (level, section), matrices in grouped.items():
        title = f"{level} level" + (f" in {section}" if section else "")
        groups.append(MatrixGroup(title, matrices[:1] + matrices[-1:] if len(matrices) > 1 else matrices))
    return groups


def iteration_views(cdir: CompileDir, report: Report) -> list[IterationView]:
    uses = {(u.level, u.index): u for u in report.skill_use}
    traces = _TraceShelf(cdir)
    views = []
    for number, decision in enumerate(report.decisions, start=1):
        path = cdir.iteration_dir(decision.level, decision.index) / "comparison.json"
        comparison = read_model(path, ComparisonRecord) if path.is_file() else None
        if comparison is not None and comparison.comparison is None:
            comparison = None  # short-circuited: nothing was compared
        edit_path = path.with_name("edit.json")
        views.append(IterationView(number, decision, comparison, uses.get((decision.level, decision.index)),
                                   evidence_rows(comparison, traces) if comparison else [],
                                   read_model(edit_path, EditRecord) if edit_path.is_file() else None))
    return views


def evidence_rows(record: ComparisonRecord, traces: _TraceShelf) -> list[EvidenceRow]:
    """The candidate's evidence and regressions, then the incumbent's evidence (from every judge call)."""
    comparison = record.comparison
    candidate = traces.batch(record.candidate_batch)
    incumbent = traces.batch(record.incumbent_batch)
    rows = [_row("candidate", ref.trace_id, ref.step, ref.quote, candidate) for ref in comparison.candidate_evidence]
    rows += [_row("regression", c.trace_id, c.step, c.quote, candidate,
                  note=f"{c.kind}, {'verified' if c.verified else 'unverified: face value'}") for c in comparison.regressions]
    seen: set[tuple[str, int, str]] = set()
    for ref in (ref for call in comparison.calls for ref in call.incumbent_evidence):
        if (ref.trace_id, ref.step, ref.quote) not in seen:
            seen.add((ref.trace_id, ref.step, ref.quote))
            rows.append(_row("incumbent", ref.trace_id, ref.step, ref.quote, incumbent))
    return rows


def _row(side: str, trace_id: str, step: int, quote: str, traces: dict[str, Trace], note: str = "") -> EvidenceRow:
    trace = traces.get(trace_id)
    found = trace is not None and 1 <= step <= len(trace.steps)
    excerpt = step_excerpt(step_full_text(trace.steps[step - 1]), quote) if found else None
    return EvidenceRow(side, trace_id, step, quote, excerpt, note)


def step_excerpt(step_text: str, quote: str, width: int = CONTEXT_CHARS) -> StepExcerpt | None:
    """The quote in its step, whitespace folded as evidence is checked (SPEC §3)."""
    text, folded = fold_whitespace(step_text), fold_whitespace(quote)
    at = text.find(folded) if folded else -1
    if at < 0:
        return None
    end = at + len(folded)
    before = ("…" if at > width else "") + text[max(0, at - width):at]
    after = text[end:end + width] + ("…" if len(text) - end > width else "")
    return StepExcerpt(before, text[at:end], after)


class _TraceShelf:
    """The traces of each batch evidence points into, each batch read once."""

    def __init__(self, cdir: CompileDir):
        self.cdir = cdir
        self.batches: dict[str, dict[str, Trace]] = {}

    def batch(self, batch: str | None) -> dict[str, Trace]:
        if not batch or not self.cdir.has_batch(batch):
            return {}
        if batch not in self.batches:
            self.batches[batch] = {t.trace_id: t for t in self.cdir.traces(batch)}
        return self.batches[batch]


def latest_evaluation(cdir: CompileDir) -> Path | None:
    """The results file written last, of any evaluation of this compile (SPEC §10); None when never evaluated.
    A task set's per-task results (SPEC §11, their spec names the task) are not the compile's: not shown yet."""
    results = [p for p in evaluations_dir(cdir).glob("*/results/n*.json")
               if "task" not in json.loads(p.read_text(encoding="utf-8"))]
    return max(results, key=lambda p: (p.stat().st_mtime_ns, str(p))) if results else None

