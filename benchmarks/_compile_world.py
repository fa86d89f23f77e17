"""The simulated world of benchmarks/bench_compile.py: a skill with a hidden true quality per
cell, an editor whose edits carry a hidden true effect, simulated rollouts, and the scripted
column judge and comparator that read the truth off the prompts they are sent.

The truth travels in the text. S_fast's cells (unit x dimension) have a base quality
drawn from (seed, unit id, dimension); every edit appends a marker `{rev TAG UNIT/DIM +E}`
to the unit's last line, and a cell's true quality is its base plus the effects of the
markers in its unit's text that name it. So a judge needs no side channel: it reads the
unit texts in its prompt (the marked SKILL.md of a column call, the A/B texts of a
comparison), exactly what the real code put there. A harmful correctness edit makes every
rollout of a skill that holds it fail with an error line naming its tag; the comparator
cites that line against the side whose traces have it and the other side's do not.

Every random draw is seeded by the world's seed and what the call is about, never by the
order of the calls: a column cell by its unit's text; an edit by its cell, its unit's text
and the rejections of that cell so far; a comparison call by both texts, the order and its
place among the calls on that same comparison. The same seed gives the same figures, run
alone or in a pool, and every gate standing at the same place draws the same (common random
numbers), so the gates differ only by their decisions.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from benchmarks.bench_gate import NoisyJudge, half_up
from deep_pipeline.core.config import DEFAULT_DIMENSIONS
from deep_pipeline.core.models import Trace, TraceStep

EDITOR, COLUMN_JUDGE, COMPARE_JUDGE = "bench-editor", "bench-column", "bench-compare"
TASK = "Write this week's status update in three lines: progress, plans, problems."
EFFECTS, EFFECT_WEIGHTS = (1, 0, -1), (0.4, 0.3, 0.3)
# The judge panel's three models: (noise, position bonus) as multiples of the world's sigma and b.
PANEL_SCALES = ((0.8, 0.5), (1.0, 1.0), (1.2, 1.5))
CORRECTNESS = DEFAULT_DIMENSIONS[0].name
SECTIONS = ("Setup", "Gather", "Write", "Check")
MARKER = re.compile(r"\{rev (?P<tag>[0-9a-f]+) (?P<unit>[A-Za-z0-9-]+)/(?P<dim>[a-z_]+) (?P<effect>[+-]\d)\}")
UNIT_BLOCK = re.compile(r"<<unit (?P<id>[^>\s]+)>>\n(?P<text>.*?)<</unit>>", re.S)
ERROR_LINE = re.compile(
    r"^\[(?P<label>[^\]\s]+) step (?P<step>\d+)\] tool \(error\): (?P<quote>.*rev (?P<tag>[0-9a-f]+).*)$", re.M)


def skill_text() -> str:
    """S_fast: four sections of two paragraphs each (so a section can descend, SPEC §7)."""
    parts = ["---\nname: status-update\ndescription: Write a weekly status update.\n---\n"]
    for name in SECTIONS:
        low = name.lower()
        parts.append(f"\n## {name}\n\nFirst, {low} what the week's notes say about the work.\n\n"
                     f"Then {low} the rest in the usual order.\n")
    return "".join(parts)


def digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def clip(score: float) -> int:
    return min(5, max(1, half_up(score)))


@dataclass(frozen=True)
class Edit:
    tag: str
    unit_id: str
    dimension: str
    effect: int  # realized: the drawn effect, clipped to the rubric's 1..5


def markers(text: str) -> list[Edit]:
    return [Edit(m["tag"], m["unit"], m["dim"], int(m["effect"])) for m in MARKER.finditer(text)]


def new_edit(before: str, after: str) -> Edit | None:
    """The edit a unit's new text adds to its old one (None: no new marker)."""
    old = {e.tag for e in markers(before)}
    added = [e for e in markers(after) if e.tag not in old]
    return added[-1] if added else None


@dataclass
class World:
    """One compile's world: seed, judge noise sigma, first-position bonus b, invented-claim rate."""

    seed: int
    sigma: float
    bonus: float
    invent_rate: float = 0.2
    _asked: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------ the truth

    def base(self, unit_id: str, dimension: str) -> int:
        return random.Random(digest("base", self.seed, unit_id, dimension)).randint(1, 5)

    def truth(self, unit_id: str, dimension: str, unit_text: str) -> int:
        """A cell's true quality in a unit text: its base plus the effects of its own markers."""
        return self.base(unit_id, dimension) + sum(
            e.effect for e in markers(unit_text) if (e.unit_id, e.dimension) == (unit_id, dimension))

    def gain(self, fast: str, final: str) -> int:
        """S_final's true quality over S_fast's, summed over every cell: the effects it added."""
        return sum(e.effect for e in markers(final)) - sum(e.effect for e in markers(fast))

    # ------------------------------------------------------------ rollouts (no agent process)

    def roll_out(self, skill: str, batch: str, rollouts: int) -> list[Trace]:
        """`rollouts` simulated traces of the skill: every harmful correctness edit in it fails a step."""
        errors = [e for e in markers(skill) if e.dimension == CORRECTNESS and e.effect < 0]
        traces = []
        for index in range(rollouts):
            steps = [TraceStep(step=1, source="user", text=TASK),
                     TraceStep(step=2, source="agent", text="I read the skill's sections first.")]
            for e in errors:
                steps.append(TraceStep(step=len(steps) + 1, source="tool", is_error=True,
                                       text=f"Error: the notes tool rejected option --since (rev {e.tag})"))
            answer = f"Progress: parser shipped.\nPlans: docs ({index}).\nProblems: none."
            steps.append(TraceStep(step=len(steps) + 1, source="agent", text=answer))
            traces.append(Trace(trace_id=f"{batch}-r{index}", batch=batch, prompt=TASK, steps=steps,
                                final_output=answer))
        return traces

    # ------------------------------------------------------------ the scripted models

    def editor(self, request) -> dict:
        """The editor: the unit's current body with one marker appended, its effect drawn 0.4/0.3/0.3."""
        text = request.last_user
        unit_id = re.search(r"^# Unit to rewrite: (\S+)$", text, re.M).group(1)
        dimension = re.search(r"^# Dimension: (\S+)$", text, re.M).group(1)
        body = text.split("<<current text>>\n", 1)[1].rsplit("\n<</current text>>", 1)[0]
        # Drawn from what the edit is about (the cell, its unit's text, the rejections so far), not
        # from the rest of the prompt (the judge's reason, the rejections' wording): every gate
        # standing at the same place gets the same edit.
        rejected = text.count("- Rejected edit (")
        about = digest("edit", self.seed, unit_id, dimension, body, rejected)
        current = self.truth(unit_id, dimension, body)
        drawn = random.Random(about).choices(EFFECTS, EFFECT_WEIGHTS)[0]
        effect = clip(current + drawn) - current
        tag = about[:10]
        kept = body.rstrip()
        new_text = f"{kept} {{rev {tag} {unit_id}/{dimension} {effect:+d}}}" + body[len(kept):]
        return {"unit_id": unit_id, "dimension": dimension, "edit_summary": f"rev {tag} on {dimension}",
                "new_text": new_text}

    def column(self, request) -> dict:
        """The column judge: each unit's true quality on the column's dimension + N(0, sigma), no bonus."""
        text = request.last_user
        dimension = re.search(r"^# Dimension to score: (\S+)$", text, re.M).group(1)
        units = {m["id"]: m["text"] for m in UNIT_BLOCK.finditer(text)}
        answer = {}
        for unit_id in request.unit_ids:  # the same unit text scores the same, in any matrix of any gate
            noise = random.Random(digest("column", self.seed, unit_id, dimension, units[unit_id])).gauss(0, 1)
            score = clip(self.truth(unit_id, dimension, units[unit_id]) + self.sigma * noise)
            answer[unit_id] = {"evidence": [], "reason": "scripted column judge", "score": score}
        return answer

    def compare(self, request) -> dict:
        """The comparator: each side's true quality + N(0, sigma) + b for side A, an invented
        claim against the candidate with probability `invent_rate` (no valid evidence), and the
        candidate's new error lines cited with their real step and quote."""
        return self._compare(request, self.sigma, self.bonus, "")

    def panel_member(self, index: int):
        """Judge panel model `index` (0, 1, 2): a comparator of its own with its own noise and
        position bonus, PANEL_SCALES[index] times the world's, so the panel's mean is the world's
        and its members disagree as models of different families do."""
        scale_sigma, scale_bonus = PANEL_SCALES[index]
        return lambda request: self._compare(request, self.sigma * scale_sigma, self.bonus * scale_bonus,
                                             f"panel{index}")

    def _compare(self, request, sigma: float, bonus: float, who: str) -> dict:
        text = request.last_user
        unit_id = re.search(r"^# Unit (\S+)$", text, re.M).group(1)
        dimension = re.search(r"^# Dimension: (\S+)$", text, re.M).group(1)
        sides = {s: text.split(f"<<version {s}>>\n", 1)[1].split(f"\n<</version {s}>>", 1)[0] for s in "AB"}
        tags = {s: {e.tag for e in markers(sides[s])} for s in "AB"}
        cand = "A" if tags["A"] - tags["B"] else "B"  # the side with the edit the other lacks
        inc = "B" if cand == "A" else "A"
        # Calls on the same comparison in the same order: each its own draw (a sample, a panel
        # member, another pair), whatever key or wording the comparator gives it.
        # A panel model draws apart from the others; the lone comparator's draws are as they were.
        content = digest(sorted(sides.values()), cand, *([who] if who else []))
        nth = self._asked.get(content, 0)
        self._asked[content] = nth + 1
        rng = random.Random(digest("compare", self.seed, content, nth))
        scores = {}
        for side in (cand, inc):  # candidate's noise first, as bench_gate draws it
            shown_first = bonus if side == "A" else 0.0
            true = self.truth(unit_id, dimension, sides[side])
            scores[side] = clip(true + sigma * rng.gauss(0, 1) + shown_first)
        claims = [NoisyJudge._invented(rng, cand)] if rng.random() < self.invent_rate else []
        claims += self._real_errors(text, cand, tags[cand] - tags[inc])
        return {"evidence_a": [], "evidence_b": [],
                f"regressions_{cand.lower()}": claims, f"regressions_{inc.lower()}": [],
                "reason": "scripted compile-bench comparison", "task_relevant": True,
                "score_a": scores["A"], "score_b": scores["B"]}

    @staticmethod
    def _real_errors(text: str, cand: str, new_tags: set[str]) -> list[dict]:
        """An `error` claim for the first error line of each new harmful edit in the candidate's traces."""
        traces = text.split(f"# Traces with version {cand}\n", 1)[1].split("\n# Traces with version ", 1)[0]
        cited, claims = set(), []
        for m in ERROR_LINE.finditer(traces):  # whatever labels the comparator gave the traces
            if m["tag"] in new_tags and m["tag"] not in cited:
                cited.add(m["tag"])
                claims.append({"kind": "error", "trace_id": m["label"], "step": int(m["step"]), "quote": m["quote"]})
        return claims
