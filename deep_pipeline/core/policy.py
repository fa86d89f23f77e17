"""The policy: a compile's state -> the one next action (SPEC §7, DESIGN "The policy").

`next_action` is the whole of SPEC §7 as a function: the Dagster sensor, the CLI
driver and `walk` (the plain in-memory loop the tests use as the reference decision
sequence) all call it. Blocking a dimension is not an action; it follows from the
history (`core.history` derives it), as do the level loop's verdicts.

Order of checks: finalized -> Done; budget -> Finalize(budget_exhausted); no input
traces -> PrepareInputs; no section matrix -> ScoreLevel(section, start); a section
coordinate just exhausted and allowed to descend -> ScoreLevel(paragraph, start);
then the current level's verdict: select -> RunIteration, refresh -> ScoreLevel
(refresh), stop -> (paragraph) ScoreLevel(section, refresh) or (section) Finalize.

How the ambiguous points of SPEC §7 are read:
- After an iteration the exhausted-coordinate check comes first, then the level's
  iteration budget, then selection. Out of iterations there is no refresh: the stop
  reason is read off the current matrix as it is.
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
- Budget: Finalize(budget_exhausted) carries section_stop=budget_exhausted, and
  paragraph_stop=budget_exhausted when the paragraph level was running, else the
  paragraph level's own stop (None if it never ran). A cap is checked before every
  action, so reaching it ends the compile even when the work happened to be done.
- Indices: RunIteration.index = the level's decisions so far (0-based, whole run);
  ScoreLevel.index = the level's matrices so far (0 = its start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.history import (
    CompileState,
    History,
    ParagraphCount,
    Refresh,
    Select,
    Stop,
    derive_state,
)
from deep_pipeline.core.models import Coordinate, Decision, Level, ScoreMatrix, StopReason


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrepareInputs(_Action):
    """Import or roll out the incumbent's traces (SPEC §2)."""

    kind: Literal["prepare_inputs"] = "prepare_inputs"


class ScoreLevel(_Action):
    """Score a level's matrix: its start (a descent when level="paragraph") or a refresh."""

    kind: Literal["score_level"] = "score_level"
    level: Level
    section_id: str | None = None
    index: int
    reason: Literal["start", "refresh"]
    active_dimension: str | None = None  # the exhausted dimension, when a paragraph level starts


class RunIteration(_Action):
    kind: Literal["run_iteration"] = "run_iteration"
    level: Level
    section_id: str | None = None
    index: int
    coordinate: Coordinate


class Finalize(_Action):
    kind: Literal["finalize"] = "finalize"
    status: Literal["completed", "budget_exhausted"]
    section_stop: StopReason | None = None
    paragraph_stop: StopReason | None = None


class Done(_Action):
    """Already finalized: nothing left to do."""

    kind: Literal["done"] = "done"


Action = Annotated[PrepareInputs | ScoreLevel | RunIteration | Finalize | Done, Field(discriminator="kind")]
Execute = Callable[[Action, CompileState], "ScoreMatrix | Decision | str | None"]


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


def action_label(action: Action) -> str:
    """A short readable name, e.g. `score paragraph(s01) m00 start active=clarity`, `iter section i02 s01/clarity`."""
    if isinstance(action, ScoreLevel):
        where = f"{action.level}({action.section_id})" if action.section_id else action.level
        active = f" active={action.active_dimension}" if action.active_dimension else ""
        return f"score {where} m{action.index:02d} {action.reason}{active}"
    if isinstance(action, RunIteration):
        return f"iter {action.level} i{action.index:02d} {action.coordinate}"
    if isinstance(action, Finalize):
        return f"finalize {action.status} section={action.section_stop} paragraph={action.paragraph_stop}"
    return "inputs" if isinstance(action, PrepareInputs) else "done"


def _check_event(action: Action, event: object) -> None:
    """The event an executor returns must be the one the action asked for."""
    if isinstance(action, ScoreLevel):
        ok = isinstance(event, ScoreMatrix) and (event.level, event.index) == (action.level, action.index)
    else:
        ok = (
            isinstance(event, Decision)
            and isinstance(action, RunIteration)
            and (event.level, event.index, event.coordinate) == (action.level, action.index, action.coordinate)
        )
    if not ok:
        raise ValueError(f"execute returned {type(event).__name__} for `{action_label(action)}`")


def walk(
    history: History,
    config: CompileConfig,
    execute: Execute,
    *,
    paragraph_count: ParagraphCount | None = None,
    usage: Callable[[], tuple[int, float]] | None = None,
    max_steps: int = 1000,
) -> History:
    """The plain in-memory loop: state -> action -> execute -> append, until Finalize or Done.

    `execute` returns the input batch name for PrepareInputs, the matrix or decision
    for ScoreLevel / RunIteration, anything for Finalize (it is called so the caller
    can write its outputs; then `finalized` is set). `usage`, when given, returns the
    total (model calls, USD) so far after each step, which the history records.
    """
    for _ in range(max_steps):
        state = derive_state(history, config, paragraph_count=paragraph_count)
        action = next_action(state, config)
        if isinstance(action, Done):
            return history
        result = execute(action, state)
        update: dict[str, object] = {}
        if isinstance(action, Finalize):
            update["finalized"] = True
        elif isinstance(action, PrepareInputs):
            if not isinstance(result, str) or not result:
                raise ValueError(f"execute returned {result!r} for `inputs`: expected the input batch name")
            update["input_batch"] = result
        else:
            _check_event(action, result)
            update["events"] = [*history.events, result]
        if usage is not None:
            update["calls"], update["usd"] = usage()
        history = history.model_copy(update=update)
        if history.finalized:
            return history
    raise RuntimeError(f"walk: no Finalize after {max_steps} steps (a policy loop)")
