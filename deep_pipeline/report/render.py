"""The page: header, heatmaps, decision timeline, SKILL.md diff, evidence, usage, evaluation.

Every text from the records goes through `esc` (html.escape, quotes too, since titles
are attributes): a trace quote holding `<script>` is shown as text, never run.
Markdown is shown as it is written, not rendered.
"""

from __future__ import annotations

import difflib
from html import escape

from deep_pipeline.core.growth import growth_text, signed, size_text, skill_size
from deep_pipeline.core.keys import iteration_label
from deep_pipeline.core.models import Cell, ScoreMatrix
from deep_pipeline.core.package import file_of
from deep_pipeline.core.panel import panel_verdicts
from deep_pipeline.engine.records import MatrixRecord
from deep_pipeline.report.decisions import edit_diffs, score_chart
from deep_pipeline.report.gather import EvidenceRow, IterationView, MatrixGroup, ReportPage
from deep_pipeline.report.style import CSS
from deep_pipeline.llm.accounting import cost_text

SECTIONS = (("matrices", "Score matrices"), ("timeline", "Decisions"), ("chart", "Scores over iterations"),
            ("edits", "Each decision's edit"), ("diff", "Diff of the edited files"),
            ("evidence", "Evidence"), ("usage", "Tokens and cost"), ("evaluation", "Evaluation"))


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def render(page: ReportPage) -> str:
    body = [header(page), matrices(page.groups), timeline(page.iterations),
            _section("chart", score_chart(page.iterations)), _section("edits", edit_diffs(page.iterations)), skill_diff(page),
            evidence(page.iterations), usage(page), evaluation(page)]
    nav = " ".join(f'<a href="#{anchor}">{esc(title)}</a>' for anchor, title in SECTIONS)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(page.report.compile_key)}: compile report</title><style>{CSS}</style></head>"
            f"<body><h1>Compile report: {esc(page.report.compile_key)}</h1><nav>{nav}</nav>"
            + "\n".join(body) + "</body></html>\n")


def _section(anchor: str, inner: str) -> str:
    title = dict(SECTIONS).get(anchor, anchor)
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{inner}</section>'


def header(page: ReportPage) -> str:
    r = page.report
    levels = [(f"{lv.level} level" + (f" in {lv.section_id}" if lv.section_id else ""),
               (f"{lv.stop_reason or 'running'}: {lv.iterations} iterations, {lv.accepted} accepted, "
                f"{lv.matrices} matrices")) for lv in r.levels]
    facts = [("skill", page.record.skill_name), *task_facts(page.record), ("status", r.status), *levels,
             ("agent", f"{r.agent} ({r.agent_model})"), *([("replayed traces", r.replay)] if r.replay else []),
             ("judge model", r.judge_model),
             ("editor model", r.editor_model), ("S_fast package", r.input_package_hash),
             ("S_final package", r.final_package_hash), ("S_final", r.final_skill_dir),
             ("SKILL.md size", size_fact(page)),
             *((f"{path} size", size_text(skill_size(fast, final))) for path, fast, final in page.file_diffs),
             ("verifier signal used", str(r.verifier_signal_used).lower()), ("finished", r.finished_at),
             ("records", str(page.folder))]
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    return f'<dl class="facts" id="summary">{rows}</dl>'


def size_fact(page: ReportPage) -> str:
    """S_final's SKILL.md against S_fast's: the report's figures, else (an older report) the two texts'."""
    return size_text(page.report.skill_size or skill_size(page.fast_skill, page.final_skill))


def task_facts(record) -> list[tuple[str, str]]:
    """The task, or a task set's splits (SPEC §11): the held-out tasks are named, never used."""
    entries = record.task_entries
    if record.tasks is None:
        return [("task", record.task_name)]
    names = lambda split: ", ".join(e.task for e in entries if e.split == split) or "none"  # noqa: E731
    return [("training tasks", names("training")), ("held-out tasks", names("held_out") + " (sealed: never seen by "
                                                                                          "the compile)")]


# -- heatmaps ----------------------------------------------------------------------------
def matrices(groups: list[MatrixGroup]) -> str:
    if not groups:
        return _section("matrices", "<p>No matrix was scored.</p>")
    parts = []
    for group in groups:
        maps = "".join(heatmap(m) for m in group.matrices)
        parts.append(f'<div class="level" data-level="{esc(group.matrices[0].matrix.level)}">'
                     f'<h3>{esc(group.title)}</h3><div class="heatmaps">{maps}</div></div>')
    note = ("<p class=\"note\">The first and the last matrix each level scored (as scored: later accepted edits "
            "are not applied). Hover a cell for the judge's reason and evidence.</p>")
    return _section("matrices", note + "".join(parts))


def matrix_name(m: ScoreMatrix) -> str:
    return f"{m.level}-m{m.index:02d}"


def heatmap(record: MatrixRecord) -> str:
    m = record.matrix
    cells = {(c.unit_id, c.dimension): c for c in m.cells}
    head = "".join(f"<th>{esc(d)}</th>" for d in m.dimensions)
    rows = []
    for unit in m.units:
        tds = "".join(_cell(cells.get((unit.unit_id, d))) for d in m.dimensions)
        rows.append(f'<tr><th scope="row" title="{esc(unit.text)}">{esc(unit.unit_id)}</th>{tds}</tr>')
    caption = (f"{matrix_name(m)} ({record.reason}), scored on traces {m.trace_batch}"
               + (f"; active dimension {m.active_dimension}" if m.active_dimension else "")
               + ("; stopped at the budget" if m.budget_exhausted else ""))
    return (f'<figure data-matrix="{esc(matrix_name(m))}"><figcaption>{esc(caption)}</figcaption>'
            f'<table class="heatmap"><thead><tr><th>unit</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></figure>')


def _cell(cell: Cell | None) -> str:
    if cell is None:
        return '<td class="cell missing" title="not scored">–</td>'
    hover = cell.reason or "no reason given"
    hover += "".join(f"\n“{ref.quote}” ({ref.trace_id} step {ref.step})" for ref in cell.evidence)
    return f'<td class="cell s{int(cell.score)}" title="{esc(hover)}">{esc(cell.score)}</td>'


# -- timeline ----------------------------------------------------------------------------
TIMELINE_HEAD = ("#", "iteration", "coordinate", "outcome", "reason", "incumbent → candidate", "delta",
                 "per call (order: incumbent → candidate)", "orders disagree", "skill use", "growth (chars, lines)",
                 "edit")


def timeline(views: list[IterationView]) -> str:
    if not views:
        return _section("timeline", "<p>No iteration ran.</p>")
    head = "".join(f"<th>{esc(h)}</th>" for h in TIMELINE_HEAD)
    rows = "".join(_decision_row(v) for v in views)
    note = ("<p class=\"note\">Numbered across levels in the order they happened. The order is the side (A or B) "
            "the judge saw the candidate as.</p>")
    return _section("timeline", f'{note}<table class="timeline"><thead><tr>{head}</tr></thead>'
                    f"<tbody>{rows}</tbody></table>")


def _decision_row(view: IterationView) -> str:
    d = view.decision
    outcome = "accepted" if d.accepted else "rejected"
    scores = (f"{d.incumbent_score:g} → {d.candidate_score:g}"
              if d.incumbent_score is not None and d.candidate_score is not None else "–")
    delta = f"{d.delta:+.2f}" if d.delta is not None else "–"
    if d.task_deltas:  # a task set: the mean, then every task's own (SPEC §11)
        delta += " (" + ", ".join(f"{task} {value:+g}" for task, value in d.task_deltas.items()) + ")"
    calls = "; ".join(f"{'p' + str(c.pair) + ' ' if c.pair else ''}{c.model + ' ' if c.model else ''}{c.candidate_label}"
                      f"{'#' + str(c.sample) if c.sample else ''}: "
                      f"{c.incumbent_score} → {c.candidate_score}" for c in d.call_scores) or "–"
    if d.pairs is not None:  # a sequential comparison (core/sequential.py): its pairs, bound and stop
        calls += f" ({d.pairs} pairs, gain bound {d.gain_bound:+g}, stopped: {d.stop_reason})"
    if verdicts := panel_verdicts(d.call_scores):  # a judge panel (core/panel.py): each model's verdict
        calls += " (panel: " + "; ".join(f"{v.model} {v.mean_gain:+g} over {v.calls} calls" for v in verdicts) + ")"
    disagree = "–" if d.order_disagreement is None else ("yes" if d.order_disagreement else "no")
    number = (f'<a href="#evidence-{view.number}">{view.number}</a>' if view.comparison else str(view.number))
    reason = d.reason + (f" (unverified, face value: {'; '.join(d.unverified_regressions)})"
                         if d.unverified_regressions else "")
    texts = [iteration_label(d.level, d.index), str(d.coordinate), outcome, reason, scores, delta, calls,
             disagree, skill_use(view), growth_cell(d), d.edit_summary or "–"]
    tds = "".join(f'<td class="{cls}">{cell}</td>' for cls, cell in zip(_TIMELINE_CLASSES, [number, *map(esc, texts)]))
    return f'<tr id="decision-{view.number}" class="{outcome}">{tds}</tr>'


_TIMELINE_CLASSES = ("num", "iteration", "coordinate", "outcome", "reason", "scores", "delta", "calls",
                     "disagree", "skill-use", "growth", "edit")


def growth_cell(d) -> str:
    """The edit's growth of the file it edits; – when no valid edit was written (or the record predates it)."""
    if d.growth_chars is None or d.growth_lines is None:
        return "–"
    return growth_text(d.growth_chars, d.growth_lines, file_of(d.coordinate.unit_id))


def skill_use(view: IterationView) -> str:
    use = view.skill_use
    if use is None:
        return "–"  # no candidate rollouts (short-circuited)
    if use.read_skill is None:
        return f"n/a: {use.traces} traces without tool calls"
    quoted = f", quoted the unit {use.quoted_unit}/{use.traces}" if use.quoted_unit is not None else ""
    opened = "".join(f"; opened {path} {n}/{use.traces}" for path, n in (use.opened_files or {}).items())
    return f"read the skill {use.read_skill}/{use.traces}{quoted}{opened}"


# -- diff, evidence, usage, evaluation ---------------------------------------------------
def skill_diff(page: ReportPage) -> str:
    """SKILL.md's diff, then each other markdown file the decisions edited (core/package.py)."""
    files = [("SKILL.md", page.fast_skill, page.final_skill), *page.file_diffs]
    parts = []
    for path, fast, final in files:
        lines = list(difflib.unified_diff(fast.splitlines(), final.splitlines(), f"S_fast/{path}", f"S_final/{path}",
                                          lineterm=""))
        if lines:
            spans = "".join(f'<span class="{_diff_class(line)}">{esc(line) or " "}</span>' for line in lines)
            parts.append(f'<h3>{esc(path)}</h3><pre class="diff">{spans}</pre>' if page.file_diffs else
                         f'<pre class="diff">{spans}</pre>')
    if not parts:
        return _section("diff", "<p>S_final's SKILL.md is S_fast's: no edit was accepted.</p>")
    return _section("diff", "".join(parts))


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def evidence(views: list[IterationView]) -> str:
    compared = [v for v in views if v.comparison is not None]
    if not compared:
        return _section("evidence", "<p>No comparison was made: no evidence to show.</p>")
    return _section("evidence", "".join(_evidence_block(v) for v in compared))


EVIDENCE_HEAD = ("side", "trace", "step", "quote", "the step around the quote")


def _evidence_block(view: IterationView) -> str:
    d, record = view.decision, view.comparison
    title = (f"#{view.number} {iteration_label(d.level, d.index)} {d.coordinate}: "
             f"{'accepted' if d.accepted else 'rejected'} ({d.reason})")
    parts = [f"<h3>{esc(title)}</h3>", f"<p>Judge: {esc(record.comparison.reason or 'no reason given')}</p>"]
    if view.evidence:
        head = "".join(f"<th>{esc(h)}</th>" for h in EVIDENCE_HEAD)
        parts.append(f'<table class="evidence"><thead><tr>{head}</tr></thead>'
                     f'<tbody>{"".join(_evidence_row(r) for r in view.evidence)}</tbody></table>')
    else:
        parts.append("<p class=\"note\">The judge quoted no evidence.</p>")
    if record.rule_regressions:
        items = "".join(f"<li>{esc(r)}</li>" for r in record.rule_regressions)
        parts.append(f"<p>The compiler's own regressions:</p><ul>{items}</ul>")
    return f'<article class="iteration" id="evidence-{view.number}">{"".join(parts)}</article>'


def _evidence_row(row: EvidenceRow) -> str:
    side = row.side + (f" ({row.note})" if row.note else "")
    if row.excerpt is None:
        # A regression counted at face value (--face-value-regressions) names no trace step.
        why = "the step is not in the records" if row.trace_id else "no quote from a trace"
        around = f'<span class="note">{why}</span>'
    else:
        around = f"{esc(row.excerpt.before)}<mark>{esc(row.excerpt.quote)}</mark>{esc(row.excerpt.after)}"
    return (f'<tr class="{esc(row.side)}"><td>{esc(side)}</td><td>{esc(row.trace_id or "–")}</td>'
            f'<td class="num">{esc(row.step or "–")}</td><td class="quote">{esc(row.quote)}</td>'
            f'<td class="excerpt">{around}</td></tr>')


def _cost(value: float | None) -> str:
    return cost_text(value, "unknown")


def usage(page: ReportPage) -> str:
    r = page.report
    models = {"judge": r.judge_model, "editor": r.editor_model, "agent": r.agent_model}
    head = "".join(f"<th>{h}</th>" for h in ("role", "model", "calls", "cache hits", "prompt tokens",
                                             "completion tokens", "cached tokens", "cost"))
    rows = [(role, models.get(role, ""), u) for role, u in sorted(r.usage_by_role.items())]
    rows.append(("total", "", r.usage_total))
    body = "".join(
        f'<tr class="{"total" if role == "total" else "role"}"><th scope="row">{esc(role)}</th><td>{esc(model)}</td>'
        + "".join(f'<td class="num">{v}</td>' for v in (u.calls, u.cache_hits, u.prompt_tokens, u.completion_tokens,
                                                         u.cached_tokens))
        + f'<td class="num">{esc(_cost(u.cost_usd))}</td></tr>'
        for role, model, u in rows)
    return _section("usage", f'<table class="usage"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def evaluation(page: ReportPage) -> str:
    result = page.evaluation
    if page.task_set_results:  # a task set's: per task, pooled per split, and the held-out judged comparison
        blocks = "".join(f'<pre class="task-evaluation">{esc(text)}</pre>' for text in page.task_set_results)
        return _section("evaluation", "<p>Training and held-out tasks side by side (SPEC §11); "
                        "the held-out tasks were never seen by the compile.</p>" + blocks)
    if result is None:
        return _section("evaluation", f"<p>Not evaluated. <code>deep-pipeline evaluate "
                        f"{esc(page.report.compile_key)}</code> measures S_final against S_fast with the task's "
                        f"verifier (SPEC §10).</p>")

    def pct(x: float) -> str:
        return f"{100 * x:.0f}%"

    rows = "".join(
        f'<tr class="side"><th scope="row">{name}</th><td class="num">{s.passed}/{s.rollouts}</td>'
        f'<td class="num">{pct(s.rate)}</td><td>[{pct(s.interval.low)}, {pct(s.interval.high)}] (Wilson)</td></tr>'
        for name, s in (("S_fast", result.fast), ("S_final", result.final)))
    di = result.difference_interval
    rows += (f'<tr class="difference"><th scope="row">final − fast</th><td></td>'
             f'<td class="num">{100 * result.difference:+.0f} pts</td>'
             f"<td>[{100 * di.low:+.0f}, {100 * di.high:+.0f}] pts (Newcombe)</td></tr>")
    facts = (f"<p>Evaluation {result.number}: {result.rollouts} rollouts a side ({esc(result.runner)}, "
             f"{esc(result.agent_model)}); verifier <code>{esc(result.verifier)}</code>; rollouts: "
             f"{result.prompt_tokens + result.completion_tokens} tokens, {esc(_cost(result.cost_usd))}; "
             f"record: {esc(page.evaluation_path)}</p>")
    table = ('<table class="evaluation"><thead><tr><th>side</th><th>passed</th><th>rate</th>'
             f"<th>95% interval</th></tr></thead><tbody>{rows}</tbody></table>")
    return _section("evaluation", facts + table)
