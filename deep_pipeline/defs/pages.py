"""The decision page and the column tables: markdown built from the
records on disk, so a person reads why an edit was accepted, and on what evidence, on the
`decision` asset alone. Dagster metadata only: nothing here writes a record."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import dagster as dg

from deep_pipeline.core.evidence import quote_context, step_full_text
from deep_pipeline.core.models import SKILL_FILE, Cell, Comparison, Decision, RegressionClaim, ScoreMatrix, Trace
from deep_pipeline.core.package import file_of
from deep_pipeline.core.panel import panel_verdicts
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.iteration_steps import level_matrix_at
from deep_pipeline.engine.records import ComparisonRecord, EditRecord
from deep_pipeline.store import read_model

QUOTE_WIDTH = 80  # characters of the step shown each side of a quote


def asset_url(key: list[str], partition: str) -> str:
    """The UI's page of one partition of an asset. The scheme is the UI's own
    (dagster ui-core assets/assetDetailsPathForKey.tsx: `/assets/<path>?<qs.stringify(query)>`,
    with `{view: 'partitions', partition}` as groupByPartition.tsx and AssetEventDetail.tsx link)."""
    path = "/".join(quote(part, safe="") for part in key)
    return f"/assets/{path}?{urlencode({'view': 'partitions', 'partition': partition})}"


def run_url(run_id: str) -> str:
    return f"/runs/{run_id}"


def table_text(text: str) -> str:
    """One table cell: a pipe or a newline would break the markdown row."""
    return " ".join(str(text).split()).replace("|", "\\|")


class TraceLookup:
    """Traces by id, read on first use: trace ids are unique in a compile (SPEC §3), and a cell's
    evidence may cite a batch other than the two the comparison saw (a cell accepted earlier)."""

    def __init__(self, cdir: CompileDir):
        self.cdir, self.traces = cdir, {}

    def get(self, trace_id: str) -> Trace | None:
        if trace_id not in self.traces:
            found = sorted((self.cdir.path / "traces").glob(f"*/{trace_id}.json")) if trace_id else []
            self.traces[trace_id] = read_model(found[0], Trace) if found else None
        return self.traces[trace_id]

    def context(self, trace_id: str, step: int, text: str) -> str:
        """The step's text around the quote, the quote in bold."""
        trace = self.get(trace_id)
        if trace is None or not 1 <= step <= len(trace.steps):
            return f"(step not found) {table_text(text)}"
        window = quote_context(step_full_text(trace.steps[step - 1]), text, QUOTE_WIDTH) if text else None
        if window is None:
            return "(no quote)" if not text else f"(quote not in the step) {table_text(text)}"
        # already folded (no newlines): only a pipe would break the row; the spaces around the quote stay
        before, match, after = (part.replace("|", "\\|") for part in window)
        return f"{before}**{match}**{after}"


EVIDENCE_HEADER = ["| side | kind | trace | step | the step around the quote |", "|---|---|---|---|---|"]


def _evidence_rows(comparison: Comparison) -> list[tuple[str, str, str, int, str]]:
    """(side, kind, trace, step, quote) of every call's evidence and kept regressions, once each."""
    rows: list[tuple[str, str, str, int, str]] = []
    calls = comparison.calls
    for c in calls:
        rows += [("candidate", "evidence", e.trace_id, e.step, e.quote) for e in c.candidate_evidence]
        rows += [("incumbent", "evidence", e.trace_id, e.step, e.quote) for e in c.incumbent_evidence]
        rows += [("candidate", claim_kind(r), r.trace_id, r.step, r.quote) for r in c.candidate_regressions]
        rows += [("incumbent", claim_kind(r), r.trace_id, r.step, r.quote) for r in c.incumbent_regressions]
    if not calls:  # a record from before every call was kept
        rows += [("candidate", "evidence", e.trace_id, e.step, e.quote) for e in comparison.candidate_evidence]
    rows += [("candidate", claim_kind(r), r.trace_id, r.step, r.quote) for r in comparison.regressions]
    return list(dict.fromkeys(rows))


def claim_kind(claim: RegressionClaim) -> str:
    """A kept regression claim as the evidence table names it: verified by its quote, or taken at face value."""
    return f"regression: {claim.kind} ({'verified' if claim.verified else 'unverified: face value'})"


def growth_meta(decision: Decision) -> dict:
    """The edit's growth of the file it edits (chars, lines) and the regressions kept at face value, when there are any."""
    meta = {}
    if decision.growth_chars is not None and file_of(decision.coordinate.unit_id) != SKILL_FILE:
        meta["growth_file"] = dg.MetadataValue.text(file_of(decision.coordinate.unit_id))
    if decision.growth_chars is not None:
        meta["growth_chars"] = dg.MetadataValue.int(decision.growth_chars)
    if decision.growth_lines is not None:
        meta["growth_lines"] = dg.MetadataValue.int(decision.growth_lines)
    if decision.unverified_regressions:
        meta["unverified_regressions"] = dg.MetadataValue.json(decision.unverified_regressions)
    return meta


def evidence_table(comparison: Comparison, traces: TraceLookup) -> str:
    rows = _evidence_rows(comparison)
    if not rows:
        return "(the judge cited no valid evidence)"
    lines = list(EVIDENCE_HEADER)
    for side, kind, trace_id, step, text in rows:
        lines.append(f"| {side} | {kind} | {table_text(trace_id) or '-'} | {step or '-'} | {traces.context(trace_id, step, text)} |")
    return "\n".join(lines)


def scores_table(comparison: Comparison) -> str:
    """Incumbent -> candidate: the means the rule used, then each call when there are several."""
    lines = ["| call | incumbent | candidate |", "|---|---|---|",
             f"| mean (the rule's) | {comparison.incumbent_score} | {comparison.candidate_score} |"]
    if len(comparison.calls) > 1:
        lines += [f"| {_by(c)}candidate as {c.candidate_label}, sample {c.sample} | {c.incumbent_score} | {c.candidate_score} |"
                  for c in comparison.calls]
    return "\n".join(lines)


def panel_table(comparison: Comparison) -> str | None:
    """A judge panel's per-model verdicts (core/panel.py): each model's calls and mean gain
    (candidate − incumbent), in the order the models answered; None without a panel."""
    verdicts = panel_verdicts(comparison.calls)
    if not verdicts:
        return None
    lines = ["| panel model | calls | mean gain |", "|---|---|---|"]
    lines += [f"| {table_text(v.model)} | {v.calls} | {v.mean_gain:+g} |" for v in verdicts]
    return "\n".join(lines)


def panel_meta(comparison: Comparison) -> dict:
    """The decision page's and the comparison's panel entries: the table, and each model's verdict as
    JSON (`{model: {calls, mean_gain}}`); nothing without a panel."""
    table = panel_table(comparison)
    if table is None:
        return {}
    verdicts = {v.model: {"calls": v.calls, "mean_gain": v.mean_gain} for v in panel_verdicts(comparison.calls)}
    return {"panel_verdicts": dg.MetadataValue.md(table), "panel_models": dg.MetadataValue.json(verdicts)}


def _by(call) -> str:
    """A panel call's model, as a row names it first (core/panel.py); nothing without a panel."""
    return f"{table_text(call.model)}: " if call.model else ""


def task_table(stored: ComparisonRecord, decision: Decision) -> str:
    """A task set's decision per training task (SPEC §11): each task's scores, delta against
    `max_task_loss`'s rule, regressions and the judge's evidence count."""
    lines = ["| task | incumbent | candidate | delta | regressions | evidence quotes |", "|---|---|---|---|---|---|"]
    deltas, found = decision.task_deltas or {}, decision.task_regressions or {}
    for entry in stored.task_comparisons or []:
        c = entry.comparison
        delta = deltas.get(entry.task)
        lines.append(f"| {table_text(entry.task)} | {c.incumbent_score} | {c.candidate_score} | "
                     f"{'-' if delta is None else f'{delta:+g}'} | {table_text(', '.join(found.get(entry.task, []))) or '-'} | "
                     f"{len(c.candidate_evidence)} |")
    return "\n".join(lines)


def cell_page(cell: Cell, traces: TraceLookup) -> str:
    """A matrix cell: its score, reason and evidence, each quote in its step."""
    lines = [f"**{cell.unit_id} / {cell.dimension}: {cell.score}** — {table_text(cell.reason) or '(no reason)'}", ""]
    if not cell.evidence:
        return "\n".join(lines + ["(no valid evidence)"])
    lines += ["| trace | step | the step around the quote |", "|---|---|---|"]
    lines += [f"| {table_text(e.trace_id)} | {e.step} | {traces.context(e.trace_id, e.step, e.quote)} |" for e in cell.evidence]
    return "\n".join(lines)


def matrix_before(cdir: CompileDir, edit: EditRecord) -> ScoreMatrix | None:
    """The matrix the cell was selected from: the scored one with the level's cells accepted
    before this iteration."""
    return level_matrix_at(cdir, edit.matrix_key, edit.seq, including=False)


def column_table(cells: list[Cell]) -> str:
    """A matrix column: each unit's score, reason and evidence quotes."""
    lines = ["| unit | score | reason | evidence |", "|---|---|---|---|"]
    for c in cells:
        quotes = "<br>".join(f'[{table_text(e.trace_id)} step {e.step}] "{table_text(e.quote)}"' for e in c.evidence) or "-"
        lines.append(f"| {table_text(c.unit_id)} | {c.score} | {table_text(c.reason) or '-'} | {quotes} |")
    return "\n".join(lines)


def decision_links(compile_key: str, partition: str, matrix_key: str | None, run_id: str) -> dict:
    """Relative UI URLs from a decision to the records it was made on."""
    links = {name: asset_url([name], partition) for name in ("candidate_edit", "comparison", "candidate_rollouts")}
    if matrix_key is not None:
        links["level_matrix"] = asset_url(["level_matrix"], matrix_key)
    links["run"] = run_url(run_id)
    links["compile_report"] = asset_url(["compile_report"], compile_key)
    return {f"link_{name}": dg.MetadataValue.url(url) for name, url in links.items()}
