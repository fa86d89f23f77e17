"""Each decision's edit, kept or not, and a chart of the scores over the iterations (SPEC §8).

The SKILL.md diff shows only what was kept; a rejected candidate's text was in no section of
the page, so a reader could not judge the judge. Both come from the iteration records
(edit.json, the decisions): nothing is recomputed.
"""

from __future__ import annotations

import difflib
from html import escape

from deep_pipeline.core.keys import iteration_label
from deep_pipeline.report.gather import IterationView

# The chart's drawing area in SVG units; scores run 1..5 (SPEC §4).
WIDTH, HEIGHT, PAD, LOW, HIGH = 640, 220, 36, 1.0, 5.0


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def edit_diffs(views: list[IterationView]) -> str:
    """One block per decision: its unit before and after the editor's edit, and the outcome."""
    blocks = [_edit_block(v) for v in views]
    return "".join(blocks) or "<p>No iteration ran.</p>"


def _edit_block(view: IterationView) -> str:
    d, edit = view.decision, view.edit
    outcome = "accepted" if d.accepted else "rejected"
    title = f"#{view.number} {iteration_label(d.level, d.index)} {d.coordinate}: {outcome} ({d.reason})"
    if edit is None or edit.unit_text_after is None:
        why = edit.status if edit is not None else "no edit record"
        body = f'<p class="note">No candidate text ({esc(why)}).</p>'
    else:
        lines = difflib.unified_diff(edit.unit_text_before.splitlines(), edit.unit_text_after.splitlines(),
                                     f"{edit.unit.unit_id} (incumbent)", f"{edit.unit.unit_id} (candidate)", lineterm="")
        spans = "".join(f'<span class="{_line_class(line)}">{esc(line) or " "}</span>' for line in lines)
        body = f'<pre class="diff">{spans}</pre>' if spans else '<p class="note">The candidate text is the incumbent\'s.</p>'
    return (f'<article class="edit {outcome}" id="edit-{view.number}" data-outcome="{outcome}">'
            f"<h3>{esc(title)}</h3>{body}</article>")


def _line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def score_chart(views: list[IterationView]) -> str:
    """Inline SVG: per iteration, the target cell's incumbent (hollow) and candidate (filled:
    green accepted, red rejected) scores; iterations with no comparison are left out."""
    points = [(v.number, v.decision) for v in views
              if v.decision.incumbent_score is not None and v.decision.candidate_score is not None]
    if not points:
        return "<p>No comparison was scored: nothing to chart.</p>"
    last = max(n for n, _ in points)
    x = lambda n: PAD + (WIDTH - 2 * PAD) * ((n - 1) / max(1, last - 1) if last > 1 else 0.5)  # noqa: E731
    y = lambda s: HEIGHT - PAD - (HEIGHT - 2 * PAD) * (min(max(s, LOW), HIGH) - LOW) / (HIGH - LOW)  # noqa: E731
    grid = "".join(f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(s):.1f}" y2="{y(s):.1f}" class="grid"/>'
                   f'<text x="{PAD - 8}" y="{y(s) + 4:.1f}" text-anchor="end">{s:g}</text>' for s in (1, 2, 3, 4, 5))
    marks = []
    for n, d in points:
        outcome = "accepted" if d.accepted else "rejected"
        tip = f"#{n} {iteration_label(d.level, d.index)} {d.coordinate}: {d.incumbent_score:g} → {d.candidate_score:g}, {outcome}"
        marks.append(f'<g class="{outcome}" data-iteration="{n}"><title>{esc(tip)}</title>'
                     f'<line x1="{x(n):.1f}" x2="{x(n):.1f}" y1="{y(d.incumbent_score):.1f}" y2="{y(d.candidate_score):.1f}"/>'
                     f'<circle class="incumbent" cx="{x(n):.1f}" cy="{y(d.incumbent_score):.1f}" r="5"/>'
                     f'<circle class="candidate" cx="{x(n):.1f}" cy="{y(d.candidate_score):.1f}" r="5"/>'
                     f'<text x="{x(n):.1f}" y="{HEIGHT - PAD + 18}" text-anchor="middle">{n}</text></g>')
    legend = ('<p class="note">Per iteration (numbered as in Decisions): the target cell\'s score for the incumbent '
              '(hollow) and the candidate (filled: green accepted, red rejected), from the comparison.</p>')
    return (f'{legend}<svg class="scores" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'role="img" aria-label="scores over iterations">{grid}{"".join(marks)}</svg>')
