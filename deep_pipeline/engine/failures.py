"""The last failed step run of a compile, kept in its folder so `status` can say so:
a failed compile must not look like a running one.

A compile whose step run failed is not running: nothing carries it on until someone resumes
it (or the daemon's loop retries it). Dagster's run records know this, but `status` reads
the compile's folder alone (no instance, so it stays cheap and works on any home); so the
place that sees a step fail writes one small record here, `last_failure.json`, and the next
step that ends removes it. It is no step's output: the history never reads it.

Written by the step itself (asset_step: daemon and CLI runs alike) and by the CLI driver
(which also sees runs that failed before a step body ran). A worker killed outright writes
nothing; the sweep marks its run failed in Dagster (runtime/sweep.release_dead_runs).
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ValidationError

from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.errors import one_line
from deep_pipeline.secrets import redact
from deep_pipeline.store import atomic_write_json, read_model

FAILURE_FILE = "last_failure.json"


class StepFailure(BaseModel):
    """One failed run of one step: what a person needs to find it in the UI and act on it."""

    run_id: str
    partition: str  # the step's partition key (compile, matrix or iteration key)
    step: str  # the job or step that failed, e.g. "iteration_job"
    error: str  # one line
    at: float  # epoch seconds
    # Set by the loop sensor while it will retry the step (core/retry.py), e.g. "waiting to
    # retry iteration ... (attempt 2 of 3) after run ... failed: ..."; None: nothing will.
    waiting: str | None = None


def failure_path(cdir: CompileDir):
    return cdir.path / FAILURE_FILE


def record_failure(cdir: CompileDir, run_id: str, partition: str, step: str, error: str,
                   waiting: str | None = None, at: float | None = None) -> None:
    """Say the step failed. Never masks the failure it records: a folder gone or unwritable is skipped."""
    if not cdir.path.is_dir():
        return
    # A provider's error may echo what it was sent: our keys are blanked out before it is kept.
    failure = StepFailure(run_id=run_id, partition=partition, step=step, error=one_line(redact(error), 600),
                          at=time.time() if at is None else at,
                          waiting=None if waiting is None else one_line(redact(waiting), 800))
    try:
        atomic_write_json(failure_path(cdir), failure)
    except OSError:
        pass


def clear_failure(cdir: CompileDir, partition: str | None = None) -> None:
    """A step ended: the compile is moving again. With `partition` (a task set's task rollouts,
    which run beside each other) only that step's own failure goes: another task's stays."""
    if partition is not None and (failure := last_failure(cdir)) is not None and failure.partition != partition:
        return
    failure_path(cdir).unlink(missing_ok=True)


def last_failure(cdir: CompileDir) -> StepFailure | None:
    path = failure_path(cdir)
    if not path.is_file():
        return None
    try:
        return read_model(path, StepFailure)
    except (OSError, ValueError, ValidationError):
        return None  # a record from another version: status still answers
