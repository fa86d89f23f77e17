"""A compile's history and the facts replayed from it (SPEC §7, last paragraph).

A compile's history is S_fast's SKILL.md, the input trace batch, its matrices and
decisions in order, and the model usage so far. This module only reads it: which
events belong to which level, each level's matrices, decisions and rejections, the
current matrix and units after accepted edits, the current text and trace batch.
What the compile does next — verdicts, exhaustion, blocking, descent, the budget stop —
is `core.policy` (SPEC §7's rules in one file). Nothing else is ever stored.

How the events are split into levels: the paragraph level is open from its first
matrix until the next section matrix (the refresh that follows its return); a second
paragraph level, or a decision of a level that has no matrix or is not the current
one, is an inconsistent history (ValueError).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.edits import replace_unit
from deep_pipeline.core.matrix import current_matrix
from deep_pipeline.core.models import (
    BUDGET_EXHAUSTED,
    SKILL_FILE,
    Coordinate,
    Decision,
    Level,
    ScoreMatrix,
    Unit,
)

ParagraphCount = Callable[[str, str], int]  # (skill text, section id) -> its paragraph count
Event = ScoreMatrix | Decision


class History(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skill_text: str  # S_fast's SKILL.md
    # S_fast's other markdown files that are units (core/package.py), path -> text; empty: SKILL.md only.
    files: dict[str, str] = Field(default_factory=dict)
    input_batch: str | None = None  # None until the input traces exist
    events: list[ScoreMatrix | Decision] = Field(default_factory=list)
    calls: int = 0  # model calls so far (cache hits excluded)
    usd: float = 0.0
    budget_stop: bool = False  # a step outside any matrix or iteration stopped at the budget
    finalized: bool = False


def is_rejection(decision: Decision) -> bool:
    """Any decision not accepted, short-circuited ones included — except the budget
    stopping the run (`budget_exhausted`), which is no verdict on the edit."""
    return not decision.accepted and decision.reason != BUDGET_EXHAUSTED


def units_paragraph_count(skill_text: str, section_id: str) -> int:
    """Default paragraph counter: cut the current text with core.units."""
    from deep_pipeline.core import units  # imported late: only a descent needs it

    for section in units.cut_sections(skill_text):
        if section.unit_id == section_id:
            return len(units.cut_paragraphs(skill_text, section))
    return 0


class LevelRun:
    """One level's events in order (the section level spans the whole run)."""

    def __init__(self, level: Level, section_id: str | None = None) -> None:
        self.level: Level = level
        self.section_id = section_id
        self.events: list[Event] = []
        self.returned = False  # paragraph level only: the section level took over again
        self.descended_at: int | None = None  # section only: the decision whose coordinate descended

    @property
    def matrices(self) -> list[ScoreMatrix]:
        return [e for e in self.events if isinstance(e, ScoreMatrix)]

    @property
    def decisions(self) -> list[Decision]:
        return [e for e in self.events if isinstance(e, Decision)]

    def since_latest_matrix(self) -> list[Decision]:
        last = max(i for i, e in enumerate(self.events) if isinstance(e, ScoreMatrix))
        return [e for e in self.events[last + 1 :] if isinstance(e, Decision)]

    def current_matrix(self) -> ScoreMatrix | None:
        if not self.matrices:
            return None
        return current_matrix(self.matrices[-1], [d for d in self.since_latest_matrix() if d.accepted])

    def current_units(self) -> list[Unit]:
        if not self.matrices:
            return []
        units = list(self.matrices[-1].units)
        for decision in self.since_latest_matrix():
            if decision.accepted and decision.new_text is not None:
                units = replace_unit(units, decision.coordinate.unit_id, decision.new_text)
        return units

    def rejection_counts(self) -> Counter[Coordinate]:
        return Counter(d.coordinate for d in self.decisions if is_rejection(d))


def replay_levels(history: History) -> tuple[LevelRun, LevelRun | None]:
    """Split the events into the section level and the paragraph level (if it started)."""
    section, paragraph = LevelRun("section"), None
    for position, event in enumerate(history.events):
        where = f"history event {position}"
        if isinstance(event, ScoreMatrix) and event.level == "section":
            if paragraph is not None:
                paragraph.returned = True
            section.events.append(event)
        elif isinstance(event, ScoreMatrix):
            if paragraph is None:
                paragraph = LevelRun("paragraph", event.section_id)
                section.descended_at = len(section.events) - 1  # that decision's coordinate descended
            elif paragraph.returned or event.section_id != paragraph.section_id:
                raise ValueError(f"{where}: a second paragraph level ({event.section_id}); a run has at most one")
            paragraph.events.append(event)
        else:
            run = section if event.level == "section" else paragraph
            descended = paragraph is not None and not paragraph.returned
            if run is None or not run.matrices or (run is section and descended) or (run is paragraph and run.returned):
                raise ValueError(f"{where}: a {event.level} decision where that level is not running")
            run.events.append(event)
    return section, paragraph


def current_text_and_batch(history: History) -> tuple[str, str | None]:
    """The SKILL.md and trace batch of the latest accepted edit (S_fast and its inputs before any)."""
    accepted = [e for e in history.events if isinstance(e, Decision) and e.accepted]
    text = next((d.skill_text for d in reversed(accepted) if d.skill_text is not None), history.skill_text)
    batch = next((d.trace_batch for d in reversed(accepted) if d.trace_batch is not None), history.input_batch)
    return text, batch


def current_files(history: History) -> dict[str, str]:
    """Every markdown file that is units, SKILL.md first: the input's text with the accepted edits.

    An accepted decision records every other file then differing from the input (`files`), so
    the latest one that records any, over the input texts, is the current package.
    """
    text, _ = current_text_and_batch(history)
    accepted = [e for e in history.events if isinstance(e, Decision) and e.accepted and e.skill_text is not None]
    changed = (accepted[-1].files or {}) if accepted else {}
    return {SKILL_FILE: text, **{path: changed.get(path, original) for path, original in history.files.items()}}
