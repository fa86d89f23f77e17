"""A multi-file skill for the scripted world (tests/compile_world.py): SKILL.md sends the agent
to `references/guide.md`, and the package holds a script and a note no edit may touch."""

from __future__ import annotations

from pathlib import Path

from tests.compile_world import make_inputs

SKILL = """---
name: demo-skill
description: Write a short status update for a team.
---

# Demo skill

## When to use
Use this skill for weekly status updates.

## Steps
Read [the guide](references/guide.md) before writing, then run `scripts/collect.py`.

## Output
Reply with the update as a bulleted list.
"""

GUIDE = """---
title: Status guide
---

# Status guide

## Tone
Keep it short.

## Format
One line per project.
"""


def make_multi_inputs(tmp: Path) -> tuple[Path, Path]:
    skill, bundle = make_inputs(tmp, SKILL)
    (skill / "references").mkdir()
    (skill / "references" / "guide.md").write_text(GUIDE, encoding="utf-8")
    (skill / "scripts").mkdir()
    (skill / "scripts" / "collect.py").write_text("print('changes')\n", encoding="utf-8")
    return skill, bundle
