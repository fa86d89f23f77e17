"""The policy: SPEC §7 in one file — a compile's history -> its state -> the one next action.

`derive_state` evaluates SPEC §7's level loop on the facts `core.history` replays
(exhaustion, blocking, the active dimension, descent, the budget stop) and returns a
`CompileState`; `next_action` turns that into one action (`core.actions`). The plain
driver, the CLI/Dagster driver and the sensor all call it; nothing else is stored.
The in-memory reference loop the tests compare with is `tests/reference_walk.py`.

Order of checks: finalized -> Done; budget -> Finalize(budget_exhausted); no input
traces -> PrepareInputs; no section matrix -> ScoreLevel(section, start); a section
coordinate just exhausted and allowed to descend -> ScoreLevel(paragraph, start);
then the current level's verdict: select -> RunIteration, refresh -> ScoreLevel
(refresh), stop -> (paragraph) ScoreLevel(section, refresh) or (section) Finalize.

How the ambiguous points of SPEC §7 are read:
- After an iteration the exhausted-coordinate check comes first, then the level's
  iteration budget, then selection. Out of iterations there is no refresh: the stop
  reason is read off the current matrix as it is.
- The active dimension of a level is replayed: a matrix sets it to its own
  `active_dimension` (set when a paragraph level starts, else none); a selection made
  while none is active sets it (the first selection after a start or refresh).
- A section dimension is blocked once one of its coordinates has been exhausted
  (`rejection_limit` rejections, `history.is_rejection`): that coordinate either
  descends, and the paragraph level's return blocks the dimension, or the descent is
  refused, which blocks it at once. While the paragraph level runs the section level
  is not consulted, so both read as "blocked from the exhausting decision on".
- A refused descent blocks the exhausted coordinate's dimension, clears the active
  dimension and loops again (SPEC §7): the next selection is made on the current
  section matrix as it is, over the dimensions that are not blocked, with no refresh
  (a refresh is only for "nothing open in the active dimension" and for the paragraph
  level's return); that selection sets the active dimension again. With nothing left
  to select the section level stops (available_coordinates_exhausted or converged).
- Exhaustion wins over the iteration budget even for the descent: a section
  coordinate exhausted by the level's last allowed iteration still descends (the
  paragraph level has its own budget). On the paragraph level's return the section
  matrix is always refreshed, even when the section has no iterations left; that
  matrix then decides between normalized_gap_converged and max_iterations*.
- "Rejected 2 times in this level" and "2 rejections in the run" count the same
  decisions: section and paragraph unit ids never coincide.
- Budget: the caps (config vs. `calls`/`usd`), a matrix flagged `budget_exhausted`, or
  a decision with reason `budget_exhausted` are checked before anything else, so a cap
  reached by the very step that finished the work still ends as budget_exhausted.
  Finalize(budget_exhausted) carries section_stop=budget_exhausted, and
  paragraph_stop=budget_exhausted when the paragraph level was running, else the
  paragraph level's own stop (None if it never ran).
- Indices: RunIteration.index = the level's decisions so far (0-based, whole run);
  ScoreLevel.index = the level's matrices so far (0 = its start).
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.actions import (
    Action,
    Done,
    Finalize,
    PrepareInputs,
    RunIteration,
    ScoreLevel,
)
from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.history import (
    History,
    LevelRun,
    ParagraphCount,
    current_files,
    current_text_and_batch,
    is_rejection,
    replay_levels,
    units_paragraph_count,
)
from deep_pipeline.core.package import file_of, local_id
from deep_pipeline.core.matrix import coordinate_of, open_cells, select_coordinate
from deep_pipeline.core.models import (
    BUDGET_EXHAUSTED,
    SKILL_FILE,
    Cell,
    Coordinate,
    Decision,
    Level,
    LevelSummary,
    Rejection,
    ScoreMatrix,
    StopReason,
    Unit,
)

# ---------------------------------------------------------------- the level loop's verdicts


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


def active_dimension(run: LevelRun, limit: int) -> str | None:
    """A matrix sets it (a paragraph start) or clears it (start, refresh); a selection made
    while none is active sets it; a refused descent clears it."""
    active: str | None = None
    counts: Counter[Coordinate] = Counter()
    for position, event in enumerate(run.events):
        if isinstance(event, ScoreMatrix):
            active = event.active_dimension
            continue
        active = active or event.coordinate.dimension
        if is_rejection(event):
            counts[event.coordinate] += 1
        refused = run.level == "section" and position != run.descended_at
        if refused and counts[event.coordinate] >= limit:
            active = None  # the exhausted coordinate did not descend: select afresh, no refresh
    return active


def just_exhausted(run: LevelRun, limit: int) -> Coordinate | None:
    """The coordinate the level's last event (a decision) has just exhausted, if any."""
    last = run.events[-1] if run.events else None
    if isinstance(last, Decision) and run.rejection_counts()[last.coordinate] >= limit:
        return last.coordinate
    return None


def excluded(run: LevelRun, limit: int, blocked: frozenset[str]) -> frozenset[Coordinate]:
    """Exhausted coordinates and every cell of a blocked dimension."""
    rejected = {c for c, n in run.rejection_counts().items() if n >= limit}
    matrix = run.current_matrix()
    in_blocked = {coordinate_of(c) for c in matrix.cells if c.dimension in blocked} if matrix else set()
    return frozenset(rejected | in_blocked)


def blocked_dimensions(section: LevelRun, limit: int) -> frozenset[str]:
    """Dimensions of every section coordinate exhausted so far (see the module docstring)."""
    counts: Counter[Coordinate] = Counter()
    blocked: set[str] = set()
    for decision in section.decisions:
        if is_rejection(decision):
            counts[decision.coordinate] += 1
            if counts[decision.coordinate] >= limit:
                blocked.add(decision.coordinate.dimension)
    return frozenset(blocked)


def level_verdict(
    run: LevelRun, config: CompileConfig, blocked: frozenset[str], *, after_iteration: bool = True
) -> Verdict:
    """One turn of SPEC §7's level loop on a level that has a matrix.

    Order: the coordinate just exhausted (only right after an iteration), then the
    iteration budget, then selection in the active dimension, refresh, stop.
    """
    threshold, limit = config.gap_threshold, config.rejection_limit
    exhausted = just_exhausted(run, limit) if after_iteration else None
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
    active = active_dimension(run, limit)
    coordinate = select_coordinate(
        matrix,
        dimensions=config.dimension_names,
        threshold=threshold,
        excluded=excluded(run, limit, blocked),
        blocked=blocked,
        active_dimension=active,
    )
    if coordinate is not None:
        return Select(coordinate=coordinate)
    if active is not None:
        return Refresh()
    return Stop(reason="available_coordinates_exhausted" if anything_open else "normalized_gap_converged")


def descent_allowed(coordinate: Coordinate, section: LevelRun, skill_text: str, paragraph_ran: bool,
                    config: CompileConfig, paragraph_count: ParagraphCount, cell: Cell | None = None) -> bool:
    """SPEC §7: score at most the ceiling, enough paragraphs, no paragraph level yet. `skill_text`: the
    coordinate's file's text, its unit id the id in that file; `cell`: its cell, by the package-wide id."""
    if paragraph_ran:
        return False
    cell = cell or ((matrix := section.current_matrix()) and matrix.cell(coordinate))
    if cell is None or cell.score > config.descent_ceiling:
        return False
    return paragraph_count(skill_text, coordinate.unit_id) >= config.min_paragraphs


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


# ---------------------------------------------------------------- the state, and the next action


class CompileState(BaseModel):
    """Where a compile stands, derived from its history alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    finalized: bool
    input_batch: str | None
    level: Level  # the level that runs now
    section_id: str | None  # the paragraph level's section, at paragraph level
    paragraph_section_id: str | None  # the section the paragraph level ran in, if it ran
    current_skill_text: str
    current_files: dict[str, str]  # every markdown file that is units, SKILL.md's text included (core/package.py)
    input_files: dict[str, str]  # the same files as S_fast has them
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


def derive_state(
    history: History, config: CompileConfig, *, paragraph_count: ParagraphCount | None = None
) -> CompileState:
    limit = config.rejection_limit
    section, paragraph = replay_levels(history)
    skill_text, batch = current_text_and_batch(history)
    files = current_files(history)
    current = paragraph if paragraph is not None and not paragraph.returned else section
    section_blocked = blocked_dimensions(section, limit)
    blocked = section_blocked if current is section else frozenset()
    stops: dict[Level, StopReason] = {}
    if paragraph is not None and paragraph.returned:
        returned = level_verdict(paragraph, config, frozenset())
        if isinstance(returned, Stop):
            stops["paragraph"] = returned.reason
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
            unit_id = verdict.coordinate.unit_id  # its own file's text and id (core/package.py)
            local = verdict.coordinate.model_copy(update={"unit_id": local_id(unit_id)})
            if descent_allowed(local, section, files[file_of(unit_id)], paragraph is not None, config, count,
                               cell=section.current_matrix().cell(verdict.coordinate)):
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
        current_files=files,
        input_files={SKILL_FILE: history.skill_text, **history.files},
        current_trace_batch=batch,
        current_matrix=current.current_matrix(),
        current_units=current.current_units(),
        section_matrix=section.current_matrix(),
        iterations_used={"section": len(section.decisions), "paragraph": len(paragraph.decisions) if paragraph else 0},
        matrices_scored={"section": len(section.matrices), "paragraph": len(paragraph.matrices) if paragraph else 0},
        active_dimension=active_dimension(current, limit),
        blocked_dimensions=section_blocked,
        excluded=excluded(current, limit, blocked) if current.matrices else frozenset(),
        paragraph_level_ran=paragraph is not None,
        level_stops=stops,
        exhausted=just_exhausted(current, limit),
        budget_exhausted=budget,
        verdict=verdict,
        descend=descend,
        decisions=[e for e in history.events if isinstance(e, Decision)],
    )


def next_action(
    state_or_history: CompileState | History,
    config: CompileConfig,
    *,
    paragraph_count: ParagraphCount | None = None,
) -> Action:
    state = state_or_history
    if isinstance(state, History):
        state = derive_state(state, config, paragraph_count=paragraph_count)
    stops = state.level_stops
    if state.finalized:
        return Done()
    if state.budget_exhausted:
        return Finalize(
            status="budget_exhausted", section_stop="budget_exhausted", paragraph_stop=stops.get("paragraph")
        )
    if state.input_batch is None:
        return PrepareInputs()
    if state.current_matrix is None:
        return ScoreLevel(level="section", index=0, reason="start")
    if state.descend is not None:
        return ScoreLevel(
            level="paragraph",
            section_id=state.descend.unit_id,
            index=0,
            reason="start",
            active_dimension=state.descend.dimension,
        )
    verdict = state.verdict
    level = state.level
    if isinstance(verdict, Select):
        return RunIteration(
            level=level, section_id=state.section_id, index=state.iterations_used[level], coordinate=verdict.coordinate
        )
    if isinstance(verdict, Refresh):
        index = state.matrices_scored[level]
        return ScoreLevel(level=level, section_id=state.section_id, index=index, reason="refresh")
    assert isinstance(verdict, Stop), "a level with a matrix always has a verdict"
    if level == "paragraph":  # the paragraph level returns: refresh the section on the new text
        return ScoreLevel(level="section", index=state.matrices_scored["section"], reason="refresh")
    return Finalize(status="completed", section_stop=verdict.reason, paragraph_stop=stops.get("paragraph"))
