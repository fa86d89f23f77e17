"""A step's and a compile's runs on the instance, as the loop sensor reads them: its retry rule's
history (core/retry.py), the run that carries a compile on, the compiles whose run failed.

Every run the sensor asks for carries `deep/step_key` = `<step kind>:<partition key>` (the
step's first run key), so the runs of one step are found by one tag whatever attempt they were.
Only runs that failed outside the step's own work reach the rule: a step that failed on its
own writes `last_failure.json` itself (runtime/asset_step.py) and the sensor leaves it alone.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from deep_pipeline.core.retry import FailedRun, RetryPlan, plan_retry
from deep_pipeline.runtime.sweep import IN_FLIGHT
from deep_pipeline.runtime.tags import COMPILE_TAG
from deep_pipeline.engine.steps import Step
from deep_pipeline.errors import one_line

STEP_KEY_TAG = "deep/step_key"


def step_key_tags(step: Step) -> dict[str, str]:
    return {STEP_KEY_TAG: step.run_key}


def failure_reason(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why the run failed, in one line: the error Dagster kept with the failure (e.g. the
    launcher's, on the engine event before "marked as failed"), else the failure's message."""
    message = None
    for of_type in (dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT):
        for record in instance.get_records_for_run(run_id, of_type=of_type, ascending=False, limit=5).records:
            event = record.event_log_entry.dagster_event
            error = getattr(event.event_specific_data, "error", None) if event is not None else None
            if error is not None and error.message:
                return one_line(error.message, 300)
            if of_type == dg.DagsterEventType.RUN_FAILURE and message is None:
                message = (event.message if event is not None else None) or record.event_log_entry.user_message
    return one_line(message or "the run failed with no failure event", 300)


def plan_step(instance: dg.DagsterInstance, step: Step, attempts: int, backoff_s: float, now: float) -> RetryPlan | None:
    """The retry plan for the step's next run; None while a run of it is queued or running."""
    records = instance.get_run_records(dg.RunsFilter(tags=step_key_tags(step)))
    if any(not r.dagster_run.is_finished for r in records):
        return None
    failed = [FailedRun(r.dagster_run.run_id, (r.end_time or r.update_timestamp.timestamp()),
                        failure_reason(instance, r.dagster_run.run_id))
              for r in records if r.dagster_run.status == dg.DagsterRunStatus.FAILURE]
    return plan_retry(failed, attempts, backoff_s, now)


def run_in_flight(instance: dg.DagsterInstance, compile_key: str) -> dg.DagsterRun | None:
    """A run of the compile that is queued or running, if any: it carries the compile on.

    The sensor reads a step's ending materialization a tick late, so that tick can fall while
    the next step's run (submitted by the step's own run, runtime/next_run.py) is running; it
    would then ask for the step after that itself. While a run is in flight the sensor leaves
    the compile to it and looks again every tick until none is.
    """
    runs = instance.get_runs(filters=dg.RunsFilter(tags={COMPILE_TAG: compile_key},
                                                   statuses=[dg.DagsterRunStatus.QUEUED, *IN_FLIGHT]), limit=1)
    return runs[0] if runs else None


def compiles_failed_since(instance: dg.DagsterInstance, since: float | None, now: float) -> tuple[set[str], float]:
    """Compiles with a run that failed after `since` (epoch s), and the next `since`.

    A run that failed to launch writes no materialization: without this look the sensor
    would never see its compile again. The first tick looks at every compile anyway.
    """
    if since is None:
        return set(), now
    after = datetime.fromtimestamp(since, timezone.utc)
    records = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], updated_after=after))
    keys = {k for r in records if (k := r.dagster_run.tags.get(COMPILE_TAG))}
    latest = max((r.update_timestamp.timestamp() for r in records), default=since)
    return keys, latest
