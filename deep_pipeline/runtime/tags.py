"""The tags and origin of the Dagster run that performs an engine step.

Every run of a step says in its tags which compile and which kind of step it is (the job's
`deep/step` tag, defs/jobs.py), and who started it.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping

from deep_pipeline.core.actions import TASK_STEPS
from deep_pipeline.runtime import dagster_private

COMPILE_TAG = "deep/compile"
# The run queue's lane: one run at a time per value (deep_pipeline/instance/dagster.yaml). A step
# run's is its compile's key; a task set's task steps have none, so they run side by side.
QUEUE_TAG = "deep/queue"
STEP_TAG = "deep/step"
# Who started a step's run when no sensor did: `cli:<user>@<host>:<pid>` or `run:<compile run id>`;
# the `compile` run a nested run belongs to (the UI filters the runs list by a clicked tag).
DRIVER_TAG, PARENT_RUN_TAG = "deep/driver", "deep/parent_run"
USER_TAG = "user"  # Dagster's own "launched by" tag (the runs list's Launched by column)
NO_RETRY_TAG = "dagster/max_retries"  # Dagster's per-run cap on its run retries (here: "0")
# Dagster's own tags on a sensor's run, as plain strings: Dagster exports no public constant for them.
RUN_KEY_TAG, SENSOR_NAME_TAG = "dagster/run_key", "dagster/sensor_name"
LOOP_SENSOR = "compile_loop"  # the loop sensor's name (defs/sensors.py), its runs' `dagster/sensor_name`
# The step run that submitted this one as it ended (runtime/next_run.py); absent on the sensor's own.
SUBMITTED_BY_TAG = "deep/submitted_by"

# The code location the runs belong to: its name as `dagster-webserver -m deep_pipeline.definitions`,
# `dagster dev` and our workspace.yaml load it, and the name Dagster gives a Definitions' repository.
LOCATION_NAME, REPOSITORY_NAME = "deep_pipeline.definitions", "__repository__"


def run_tags(compile_key: str, kind: str | None = None) -> dict[str, str]:
    """The compile's tag on every run of it; the queue's lane on all but a task set's task steps."""
    return {COMPILE_TAG: compile_key} if kind in TASK_STEPS else {COMPILE_TAG: compile_key, QUEUE_TAG: compile_key}


def job_origin(name: str):
    """The origin a run of the job `name` would have if the code location's server had made it.

    The UI reads it (and the `.dagster/repository` tag Dagster derives from it) to list a
    run under its job's Runs tab and on the Overview timeline; without a code server we
    name the same location ourselves. Only the label (repository@location) is read back.
    """
    return dagster_private.job_origin(LOCATION_NAME, REPOSITORY_NAME, name)


def driver_tags(parent_run_id: str | None = None, parent_tags: Mapping[str, str] | None = None) -> dict[str, str]:
    """Who started a run a driver executes: the `compile` run it is nested in, or this CLI process.

    Never retried by Dagster's run retry: the driver stops at a failed step and its user (or the
    `compile` run's own retry) resumes; a daemon retry of it, launched when the daemon next
    starts (e.g. with `make ui`), would spend model calls while the user only browses.
    """
    if parent_run_id is not None:
        tags = {DRIVER_TAG: f"run:{parent_run_id}", PARENT_RUN_TAG: parent_run_id, NO_RETRY_TAG: "0"}
        if (user := (parent_tags or {}).get(USER_TAG)):
            tags[USER_TAG] = user  # launched by whoever launched the `compile` run
        return tags
    user = getpass.getuser()
    return {DRIVER_TAG: f"cli:{user}@{socket.gethostname()}:{os.getpid()}", USER_TAG: user, NO_RETRY_TAG: "0"}
