"""A scripted world for whole-compile tests: a small skill, a replay bundle, and a judge
and editor that answer from a table, through litellm and the real prompt building.

The judge scores a unit by (unit, dimension) unless the unit's text in the prompt holds
the marker an accepted edit wrote; the comparator gives scores per coordinate, mapped
onto whichever of A/B shows the candidate text (so the blind order really matters).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from deep_pipeline.core.models import Trace, TraceStep
from deep_pipeline.store import sha256_text

SKILL = """---
name: demo-skill
description: Write a short status update for a team.
---

# Demo skill

## When to use
Use this skill for weekly status updates.

## Steps
Collect the week's changes from the tracker.

Group them by project and write one line each.

## Output
Reply with the update as a bulleted list.
"""

DIM_RE = re.compile(r"# Dimension to score: (\w+)")
MARK = "IMPROVED"


@dataclass
class World:
    low: dict[tuple[str, str], int] = field(default_factory=dict)  # (unit prefix, dim) -> score; others 5
    compare: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # -> (incumbent, candidate)
    calls: dict[str, int] = field(default_factory=dict)

    def score(self, unit_id: str, dimension: str, text: str) -> int:
        if f"{MARK}-{unit_id}" in text:
            return 5
        for (prefix, dim), value in self.low.items():
            if dim == dimension and unit_id == prefix:
                return value
        return 5

    def judge(self, request) -> dict:
        schema = request.schema or {}
        if "score_a" in schema.get("properties", {}):
            return self._compare(request)
        dimension = DIM_RE.search(request.text).group(1)
        self.calls["column"] = self.calls.get("column", 0) + 1
        return {
            uid: {"evidence": [], "reason": f"scripted {dimension}", "score": self.score(uid, dimension, request.text)}
            for uid in request.unit_ids
        }

    def _compare(self, request) -> dict:
        self.calls["compare"] = self.calls.get("compare", 0) + 1
        text = request.text
        unit = re.search(r"# Unit (\S+)", text).group(1)
        dimension = re.search(r"# Dimension: (\w+)", text).group(1)
        inc, cand = self.compare.get((unit, dimension), (2, 4))
        a_text = text.split("<<version A>>", 1)[1].split("<</version A>>", 1)[0]
        candidate_is_a = MARK in a_text
        return {
            "evidence_a": [], "evidence_b": [], "regressions_a": [], "regressions_b": [],
            "reason": "scripted comparison", "task_relevant": True,
            "score_a": cand if candidate_is_a else inc, "score_b": inc if candidate_is_a else cand,
        }

    def editor(self, request) -> dict:
        self.calls["edit"] = self.calls.get("edit", 0) + 1
        unit = re.search(r"# Unit to rewrite: (\S+)", request.text).group(1)
        dimension = re.search(r"# Dimension: (\w+)", request.text).group(1)
        n = self.calls["edit"]
        return {"unit_id": unit, "dimension": dimension, "edit_summary": f"scripted edit {n}",
                "new_text": f"{MARK}-{unit} attempt {n}: do the steps one by one.\n"}


def install_world(scripted_llm, world: World) -> None:
    scripted_llm.always("judge", world.judge)
    scripted_llm.always("editor", world.editor)


def make_inputs(tmp: Path, skill_text: str = SKILL) -> tuple[Path, Path]:
    skill = tmp / "skills" / "demo-skill"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(skill_text, encoding="utf-8")
    (skill / "notes.txt").write_text("a file the compiler must not touch\n", encoding="utf-8")
    traces = [
        Trace(
            trace_id=f"t{i}", skill_sha256=sha256_text(skill_text), agent="replay", model="replay",
            prompt="Write this week's status update.",
            steps=[
                TraceStep(step=1, source="user", text="Write this week's status update."),
                TraceStep(step=2, source="agent", text=f"Here is the update, try {i}: shipped the parser."),
            ],
            final_output="- shipped the parser",
        ).model_dump(mode="json")
        for i in range(2)
    ]
    bundle = tmp / "bundle.json"
    bundle.write_text(json.dumps({
        "task_name": "status-update", "prompt": "Write this week's status update.",
        "agent": "replay", "agent_model": "replay", "traces": traces,
    }), encoding="utf-8")
    return skill, bundle


CONFIG = {
    "judge_model": "scripted/judge",
    "editor_model": "scripted/editor",
    "agent_model": "scripted/agent",
    "runner": "replay",
    "rollouts": 2,
}
