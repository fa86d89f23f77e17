"""From a compile's next action to the Dagster run that performs it.

Shared by the loop sensor (daemon) and the CLI driver, so both start the very same
jobs on the very same partition keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from deep_pipeline.core.actions import (
    Done,
    Finalize,
    PrepareInputs,
    RunIteration,
    ScoreLevel,
)
from deep_pipeline.core.keys import iteration_key, matrix_key
from deep_pipeline.engine.context import StepContext

COMPILE_TAG = "deep/compile"


@dataclass(frozen=True)
class PlannedRun:
    job_name: str
    partitions_def: str  # the dynamic partitions set the key belongs to
    partition_key: str
    action: str

    @property
    def run_key(self) -> str:
        # A run_key is deduplicated forever: one per (action, partition key).
        return f"{self.action}:{self.partition_key}"

    def tags(self, compile_key: str) -> dict[str, str]:
        return {COMPILE_TAG: compile_key}


def plan_next_run(ctx: StepContext) -> PlannedRun | None:
    _, _, action = ctx.plan()
    key = ctx.cdir.key
    if isinstance(action, PrepareInputs):
        return PlannedRun("prepare_inputs", "compiles", key, "inputs")
    if isinstance(action, ScoreLevel):
        return PlannedRun("score_matrix", "matrices", matrix_key(key, action.level, action.index), "matrix")
    if isinstance(action, RunIteration):
        return PlannedRun("run_iteration", "iterations", iteration_key(key, action.level, action.index), "iteration")
    if isinstance(action, Finalize):
        return PlannedRun("finalize", "compiles", key, "finalize")
    assert isinstance(action, Done)
    return None
