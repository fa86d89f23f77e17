"""History -> state (SPEC §7, last paragraph): everything about a compile, from its events.

A compile's history is S_fast's SKILL.md, the input trace batch, its matrices and
decisions in order, and the model usage so far. `derive_state` replays the events and
returns a `CompileState`: the current package, traces, matrix and units, per-level
iteration counts, exclusions, the active and blocked dimensions, and — by evaluating
SPEC §7's level loop on all that — what the current level does next (`verdict`) and
whether an exhausted section coordinate descends (`descend`). `policy.next_action`
turns that into one action; nothing else is ever stored.

How the events are read:
- the paragraph level is open from its first matrix until the next section matrix
  (the refresh that follows its return); a second paragraph level, or a decision of a
  level that has no matrix or is not the current one, is an inconsistent history
  (ValueError);
- the active dimension of a level is replayed: a matrix sets it to its own
  `active_dimension` (set when a paragraph level starts, else none); a selection made
  while none is active sets it (the first selection after a start or refresh); a
  section coordinate exhausted without descending (a refused descent) clears it, so
  the next selection is made on the current matrix as it is, with no refresh;
- a rejection is any decision not accepted, short-circuited ones included, except a
  decision whose reason is `budget_exhausted` (that is the budget stopping the run,
  not a verdict on the edit);
- a section dimension is blocked once one of its coordinates has been exhausted
  (`rejection_limit` rejections): that coordinate either descends, and the paragraph
  level's return blocks the dimension, or the descent is refused, which blocks it at
  once. While the paragraph level runs the section level is not consulted, so both
  cases read as "blocked from the exhausting decision on";
- the budget (config caps vs. `calls`/`usd`, a matrix flagged `budget_exhausted`, or
  a decision with reason `budget_exhausted`) is checked before anything else, so a
  cap reached by the very step that finished the work still ends as budget_exhausted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.matrix import coordinate_of, current_matrix, open_cells, select_coordinate
from deep_pipeline.core.models import (
    BUDGET_EXHAUSTED,
    Coordinate,
    Decision,
    Level,
    LevelSummary,
    Rejection,
    ScoreMatrix,
    StopReason,
    Unit,
)

ParagraphCount = Callable[[str, str], int]  # (skill text, section id) -> its paragraph count
Event = ScoreMatrix | Decision


class History(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skill_text: str  # S_fast's SKILL.md
    input_batch: str | None = None  # None until the input traces exist
    events: list[ScoreMatrix | Decision] = Field(default_factory=list)
    calls: int = 0  # model calls so far (cache hits excluded)
    usd: float = 0.0
    budget_stop: bool = False  # a step outside any matrix or iteration stopped at the budget
    finalized: bool = False


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Select(_Verdict):
    kind: Literal["select"] = "select"
    coordinate: Coordinate


class Refresh(_Verdict):
    kind: Literal["refresh"] = "refresh"


class Stop(_Verdict):
    kind: Literal["stop"] = "stop"
    reason: StopReason
    coordinate: Coordinate | None = None  # the exhausted coordinate, for coordinate_exhausted


Verdict = Annotated[Select | Refresh | Stop, Field(discriminator="kind")]


def is_rejection(decision: Decision) -> bool:
    return not decision.accepted and decision.reason != BUDGET_EXHAUSTED


def units_paragraph_count(skill_text: str, section_id: str) -> int:
    """Default paragraph counter: cut the current text with core.units."""
    from deep_pipeline.core import units  # imported late: only a descent needs it

    for section in units.cut_sections(skill_text):
        if section.unit_id == section_id:
            return len(units.cut_paragraphs(skill_text, section))
    return 0


class _LevelRun:
    """One level's events in order (the section level spans the whole run)."""

    def __init__(self, level: Level, limit: int, section_id: str | None = None) -> None:
        self.level: Level = level
        self.limit = limit  # rejections that exhaust a coordinate
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
                units = _replace_unit(units, decision.coordinate.unit_id, decision.new_text)
        return units

    def active_dimension(self) -> str | None:
        """Replays SPEC §7: a matrix sets it (a paragraph start) or clears it (start, refresh);
        a selection made while none is active sets it; a refused descent clears it."""
        active: str | None = None
        counts: Counter[Coordinate] = Counter()
        for position, event in enumerate(self.events):
            if isinstance(event, ScoreMatrix):
                active = event.active_dimension
                continue
            active = active or event.coordinate.dimension
            if is_rejection(event):
                counts[event.coordinate] += 1
            refused = self.level == "section" and position != self.descended_at
            if refused and counts[event.coordinate] >= self.limit:
                active = None  # the exhausted coordinate did not descend: select afresh, no refresh
        return active

    def rejection_counts(self) -> Counter[Coordinate]:
        return Counter(d.coordinate for d in self.decisions if is_rejection(d))

    def exhausted(self) -> Coordinate | None:
        """The coordinate the level's last event (a decision) has just exhausted, if any."""
        last = self.events[-1] if self.events else None
        if isinstance(last, Decision) and self.rejection_counts()[last.coordinate] >= self.limit:
            return last.coordinate
        return None

    def excluded(self, blocked: frozenset[str]) -> frozenset[Coordinate]:
        rejected = {c for c, n in self.rejection_counts().items() if n >= self.limit}
        matrix = self.current_matrix()
        in_blocked = {coordinate_of(c) for c in matrix.cells if c.dimension in blocked} if matrix else set()
        return frozenset(rejected | in_blocked)


def _replace_unit(units: list[Unit], unit_id: str, new_text: str) -> list[Unit]:
    """An accepted edit: the unit takes its new text, later units shift, ids stay (SPEC §4)."""
    out: list[Unit] = []
    shift = 0
    for unit in units:
        if unit.unit_id == unit_id:
            shift = len(new_text) - len(unit.text)
            out.append(unit.model_copy(update={"end": unit.start + len(new_text), "text": new_text}))
        else:
            out.append(unit.model_copy(update={"start": unit.start + shift, "end": unit.end + shift}))
    return out


def level_verdict(
    run: _LevelRun, config: CompileConfig, blocked: frozenset[str], *, after_iteration: bool = True
) -> Verdict:
    """One turn of SPEC §7's level loop on a level that has a matrix.

    Order: the coordinate just exhausted (only right after an iteration), then the
    iteration budget, then selection in the active dimension, refresh, stop.
    """
    threshold = config.gap_threshold
    exhausted = run.exhausted() if after_iteration else None
    if exhausted is not None:
        return Stop(reason="coordinate_exhausted", coordinate=exhausted)
    matrix = run.current_matrix()
    assert matrix is not None, "a level verdict needs a matrix"
    anything_open = bool(open_cells(matrix, threshold))
    decisions = run.decisions
    if len(decisions) >= config.iteration_budget(run.level):
        if not anything_open:
            return Stop(reason="normalized_gap_converged")
        accepted_last = bool(decisions) and decisions[-1].accepted
        return Stop(reason="max_iterations_after_accept" if accepted_last else "max_iterations")
    active = run.active_dimension()
    coordinate = select_coordinate(
        matrix,
        dimensions=config.dimension_names,
        threshold=threshold,
        excluded=run.excluded(blocked),
        blocked=blocked,
        active_dimension=active,
    )
    if coordinate is not None:
        return Select(coordinate=coordinate)
    if active is not None:
        return Refresh()
    return Stop(reason="available_coordinates_exhausted" if anything_open else "normalized_gap_converged")


class CompileState(BaseModel):
    """Where a compile stands, derived from its history alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    finalized: bool
    input_batch: str | None
    level: Level  # the level that runs now
    section_id: str | None  # the paragraph level's section, at paragraph level
    paragraph_section_id: str | None  # the section the paragraph level ran in, if it ran
    current_skill_text: str
    current_trace_batch: str | None
    current_matrix: ScoreMatrix | None  # the current level's, SPEC §5
    current_units: list[Unit]  # its units, shifted by accepted edits
    section_matrix: ScoreMatrix | None  # the current section matrix (also while descended)
    iterations_used: dict[Level, int]
    matrices_scored: dict[Level, int]
    active_dimension: str | None
    blocked_dimensions: frozenset[str]  # at section level
    excluded: frozenset[Coordinate]  # in the current level
    paragraph_level_ran: bool
    level_stops: dict[Level, StopReason]  # a level's latest stop, while it is stopped or over
    exhausted: Coordinate | None  # the coordinate the current level's last decision exhausted
    budget_exhausted: bool
    verdict: Verdict | None  # the current level's next move; None before its first matrix or at the budget
    descend: Coordinate | None  # set when an exhausted section coordinate descends now
    decisions: list[Decision]

    def rejections(self, coordinate: Coordinate) -> list[Rejection]:
        """Every earlier rejection of the coordinate in the run: the editor's feedback (SPEC §6.1)."""
        return [_rejection(d) for d in self.decisions if d.coordinate == coordinate and is_rejection(d)]

    def rejected_hashes(self, coordinate: Coordinate) -> set[str]:
        """Hashes of the coordinate's rejected texts, for the exact-duplicate check (SPEC §6.2)."""
        return {r.text_sha256 for r in self.rejections(coordinate) if r.text_sha256}

    def level_summaries(self) -> list[LevelSummary]:
        levels: list[tuple[Level, str | None]] = [("section", None)]
        if self.paragraph_level_ran:
            levels.append(("paragraph", self.paragraph_section_id))
        return [
            LevelSummary(
                level=level,
                section_id=section_id,
                stop_reason=self.level_stops.get(level),
                iterations=self.iterations_used[level],
                accepted=sum(1 for d in self.decisions if d.level == level and d.accepted),
                matrices=self.matrices_scored[level],
            )
            for level, section_id in levels
        ]


def _rejection(decision: Decision) -> Rejection:
    compared = decision.incumbent_score is not None and decision.candidate_score is not None
    return Rejection(
        unit_id=decision.coordinate.unit_id,
        dimension=decision.coordinate.dimension,
        edit_summary=decision.edit_summary,
        score_change=f"{decision.incumbent_score} -> {decision.candidate_score}" if compared else "not compared",
        reason=decision.reason,
        text_sha256=decision.edit_sha256,
    )


def budget_reached(history: History, config: CompileConfig) -> bool:
    if config.max_calls is not None and history.calls >= config.max_calls:
        return True
    if config.max_usd is not None and history.usd >= config.max_usd:
        return True
    # A matrix or an iteration cut short by the budget records it; nothing may follow.
    if history.budget_stop:
        return True
    return any(isinstance(e, ScoreMatrix) and e.budget_exhausted for e in history.events) or any(
        isinstance(e, Decision) and e.reason == BUDGET_EXHAUSTED for e in history.events
    )


def _replay(history: History, config: CompileConfig) -> tuple[_LevelRun, _LevelRun | None, StopReason | None]:
    """Split the events into the section level and the paragraph level; the latter's stop if it returned."""
    limit = config.rejection_limit
    section, paragraph = _LevelRun("section", limit), None
    paragraph_stop: StopReason | None = None
    for position, event in enumerate(history.events):
        where = f"history event {position}"
        if isinstance(event, ScoreMatrix) and event.level == "section":
            if paragraph is not None and not paragraph.returned:
                paragraph.returned = True
                verdict = level_verdict(paragraph, config, frozenset())
                paragraph_stop = verdict.reason if isinstance(verdict, Stop) else None
            section.events.append(event)
        elif isinstance(event, ScoreMatrix):
            if paragraph is None:
                paragraph = _LevelRun("paragraph", limit, event.section_id)
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
    return section, paragraph, paragraph_stop


def _blocked_dimensions(section: _LevelRun, limit: int) -> frozenset[str]:
    """Dimensions of every section coordinate exhausted so far (see the module docstring)."""
    counts: Counter[Coordinate] = Counter()
    blocked: set[str] = set()
    for decision in section.decisions:
        if is_rejection(decision):
            counts[decision.coordinate] += 1
            if counts[decision.coordinate] >= limit:
                blocked.add(decision.coordinate.dimension)
    return frozenset(blocked)


def _descent_allowed(coordinate: Coordinate, section: _LevelRun, skill_text: str, paragraph_ran: bool,
                     config: CompileConfig, paragraph_count: ParagraphCount) -> bool:
    """SPEC §7: score at most the ceiling, enough paragraphs, no paragraph level yet."""
    if paragraph_ran:
        return False
    matrix = section.current_matrix()
    cell = matrix.cell(coordinate) if matrix else None
    if cell is None or cell.score > config.descent_ceiling:
        return False
    return paragraph_count(skill_text, coordinate.unit_id) >= config.min_paragraphs


def derive_state(
    history: History, config: CompileConfig, *, paragraph_count: ParagraphCount | None = None
) -> CompileState:
    section, paragraph, paragraph_stop = _replay(history, config)
    decisions = [e for e in history.events if isinstance(e, Decision)]
    accepted = [d for d in decisions if d.accepted]
    skill_text = next((d.skill_text for d in reversed(accepted) if d.skill_text is not None), history.skill_text)
    batch = next((d.trace_batch for d in reversed(accepted) if d.trace_batch is not None), history.input_batch)
    current = paragraph if paragraph is not None and not paragraph.returned else section
    section_blocked = _blocked_dimensions(section, config.rejection_limit)
    blocked = section_blocked if current is section else frozenset()
    stops: dict[Level, StopReason] = {"paragraph": paragraph_stop} if paragraph_stop else {}
    if current is paragraph:
        stops["section"] = "coordinate_exhausted"  # it waits on its exhausted coordinate's descent
    verdict: Verdict | None = None
    descend: Coordinate | None = None
    budget = budget_reached(history, config)
    if budget:
        stops["section"] = stops[current.level] = "budget_exhausted"
    elif current.matrices:
        verdict = level_verdict(current, config, blocked)
        if current is section and isinstance(verdict, Stop) and verdict.coordinate is not None:
            count = paragraph_count or units_paragraph_count
            if _descent_allowed(verdict.coordinate, section, skill_text, paragraph is not None, config, count):
                descend = verdict.coordinate
            else:  # refused: the dimension is blocked and the active one cleared; loop again
                verdict = level_verdict(section, config, blocked, after_iteration=False)
        if isinstance(verdict, Stop):
            stops[current.level] = verdict.reason
    return CompileState(
        finalized=history.finalized,
        input_batch=history.input_batch,
        level=current.level,
        section_id=current.section_id,
        paragraph_section_id=paragraph.section_id if paragraph else None,
        current_skill_text=skill_text,
        current_trace_batch=batch,
        current_matrix=current.current_matrix(),
        current_units=current.current_units(),
        section_matrix=section.current_matrix(),
        iterations_used={"section": len(section.decisions), "paragraph": len(paragraph.decisions) if paragraph else 0},
        matrices_scored={"section": len(section.matrices), "paragraph": len(paragraph.matrices) if paragraph else 0},
        active_dimension=current.active_dimension(),
        blocked_dimensions=section_blocked,
        excluded=current.excluded(blocked) if current.matrices else frozenset(),
        paragraph_level_ran=paragraph is not None,
        level_stops=stops,
        exhausted=current.exhausted(),
        budget_exhausted=budget,
        verdict=verdict,
        descend=descend,
        decisions=decisions,
    )
