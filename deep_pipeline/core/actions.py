"""The actions the policy names (SPEC §7): the one next step of a compile."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.keys import iteration_key, iteration_label, matrix_key
from deep_pipeline.core.models import Coordinate, Level, StopReason


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


def action_label(action: Action) -> str:
    """A short readable name, e.g. `score paragraph(s01) m00 start active=clarity`, `iter section/i02 s01/clarity`."""
    if isinstance(action, ScoreLevel):
        where = f"{action.level}({action.section_id})" if action.section_id else action.level
        active = f" active={action.active_dimension}" if action.active_dimension else ""
        return f"score {where} m{action.index:02d} {action.reason}{active}"
    if isinstance(action, RunIteration):
        return f"iter {iteration_label(action.level, action.index)} {action.coordinate}"
    if isinstance(action, Finalize):
        return f"finalize {action.status} section={action.section_stop} paragraph={action.paragraph_stop}"
    return "inputs" if isinstance(action, PrepareInputs) else "done"


# A task set's steps of one training task (SPEC §11), asked for before the step that needs them
# (engine/steps.py next_steps); no action names them: "rollouts", its rollouts of a batch, and
# "columns", its part of a matrix's columns.
StepKind = Literal["inputs", "matrix", "iteration", "finalize", "rollouts", "columns"]
TASK_STEPS = ("rollouts", "columns")  # run side by side: the step lock shared, no run-queue lane


def step_of(compile_key: str, action: Action) -> tuple[StepKind, str] | None:
    """The step an action names, as (kind, partition key); None when the compile is done.

    The one place an action becomes a step: engine/steps.next_step builds on it, and a
    step checks with it that it is the one the policy asks for.
    """
    if isinstance(action, PrepareInputs):
        return "inputs", compile_key
    if isinstance(action, ScoreLevel):
        return "matrix", matrix_key(compile_key, action.level, action.index)
    if isinstance(action, RunIteration):
        return "iteration", iteration_key(compile_key, action.level, action.index)
    if isinstance(action, Finalize):
        return "finalize", compile_key
    return None
