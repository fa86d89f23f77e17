"""A step run the loop sensor launched submits the compile's next step as it ends.

The sensor ticks every 5 s at best: a step ended, and its successor waited for the next tick
(then for the run queue). So the step's own run, once its records are written, creates the
next step's run itself and submits it to the run queue. The queue (QueuedRunCoordinator, with
the `deep/queue` tag limit of 1 in deep_pipeline/instance/dagster.yaml) holds it until this
run ends, then launches it within its dequeue interval (1 s). The sensor stays the backstop:
after a crash, a restart, an error here, and for every retry of a step whose run failed
(those stay the sensor's alone, with their backoff and log lines).

Who submits: only a run tagged `dagster/sensor_name=compile_loop`, that is one the sensor
launched or one submitted here (it gets the same tag, so the chain goes on). The runs of the
CLI driver and of the `compile` job carry no sensor tag: their driver carries on. A compile
whose lock a driver holds (runtime/driver_lock.py `driven_elsewhere`) is left to it.

The run is the one the sensor would have asked for: same job, partition, `dagster/run_key`
and tags (`loop_request_tags`), plus `deep/submitted_by=<this run's id>`.

How Dagster drops the sensor's request for it (read in dagster 1.13.27,
dagster/_daemon/sensor.py): `_submit_run_requests` calls `fetch_existing_runs`, which lists the
runs whose `dagster/run_key` tag is the request's run key (`RunsFilter(tags={RUN_KEY_TAG: key})`,
one query per key) and keeps those whose `dagster/sensor_name` tag is the sensor's name and,
for a run with a `remote_job_origin`, whose origin's repository selector (location name and
repository name) is the sensor's. `_get_or_create_sensor_run` then creates no run for a key
found there: a run past NOT_STARTED is skipped ("already completed with run keys ..." on the
tick), a NOT_STARTED one is submitted as is (the QueuedRunCoordinator logs and ignores a
submit of a run already QUEUED). So the run made here carries `dagster/run_key`,
`dagster/sensor_name` and the origin of the run that makes it with the next job's name: the
same location and repository as the sensor's (checked in tests/test_daemon.py).

Before Dagster's check, ours: the sensor asks for a step only while no run of it (tag
`deep/step_key`) is unfinished (runtime/run_history.py `plan_step`), and a run made here is QUEUED
from its creation on. The race, whichever comes second is dropped:
- the sensor's run first: `plan_step` here sees it unfinished, or the run key check finds it;
  nothing is made;
- ours first: the sensor's `plan_step` sees it unfinished and asks nothing; a request already
  made is dropped by `fetch_existing_runs` above;
- both checks before both creations: ours is created NOT_STARTED and looked for again by run
  key before it is submitted; if the sensor's run is there, ours is deleted unsubmitted. Left:
  the sensor's run created after that second look, its `fetch_existing_runs` having run before
  ours was created. The sensor does not plan a compile while any run of it is queued or running
  (runtime/run_history.py `run_in_flight`), and this run is running, so the sensor asks nothing in that
  window. (Before that check it could: a tick that read the previous step's ending
  materialization late fell while this run was running, and asked for this run's next step
  itself; seen under load in tests/test_daemon.py.)
"""

from __future__ import annotations

import time

import dagster as dg

from deep_pipeline.defs.partitions import COMPILES, PARTITION_SET, STEP_JOB
from deep_pipeline.runtime.run_history import plan_step, step_key_tags
from deep_pipeline.engine.context import CompileHandle, Outlook
from deep_pipeline.engine.steps import Step, next_steps
from deep_pipeline.errors import one_line
from deep_pipeline.runtime.driver_lock import driven_elsewhere
from deep_pipeline.runtime.tags import (
    QUEUE_TAG,
    LOOP_SENSOR,
    NO_RETRY_TAG,
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
    SUBMITTED_BY_TAG,
    run_tags,
)


def loop_request_tags(compile_key: str, step: Step) -> dict[str, str]:
    """The tags of a run the loop sensor asks for (beside Dagster's run key, sensor and partition)."""
    # Dagster's own run retry is off for these runs: the sensor is their one retrier, and it
    # leaves a step that failed on its own to a person (docs/operations.md).
    return {**run_tags(compile_key, step.kind), **step_key_tags(step), NO_RETRY_TAG: "0"}


def submit_next_step(context: dg.AssetExecutionContext, ctx: CompileHandle, outlook: Outlook | None = None) -> list[str]:
    """Queue the compile's next steps after this step of a loop sensor run (one, or a task set's
    task rollouts); the run ids submitted.

    Never fails the step that called it: an error is logged and the sensor's next tick asks.
    """
    run = context.run
    if run.tags.get(SENSOR_NAME_TAG) != LOOP_SENSOR or run.remote_job_origin is None or run.job_code_origin is None:
        return []
    submitted: list[str] = []
    try:
        if not _queued_one_per_compile(context.instance) or driven_elsewhere(ctx):
            return []
        config = ctx.config
        for step in next_steps(ctx, outlook):  # none once finalized
            plan = plan_step(context.instance, step, config.step_launch_attempts, config.step_retry_backoff_s, time.time())
            if plan is None or plan.last is not None:
                continue  # a run of it queued or running (another task's run asks), or a retry: the sensor's
            if (run_id := _submit(context, ctx, step, plan.run_key(step.run_key))) is not None:
                submitted.append(run_id)
    except Exception as exc:  # the step itself succeeded: leave the next one to the sensor
        context.log.warning(f"next step not submitted ({one_line(str(exc))}); the loop sensor's next tick asks for it")
    return submitted


def _queued_one_per_compile(instance: dg.DagsterInstance) -> bool:
    """Whether a run submitted now waits for this one: a run queue with one run per compile.

    Without it (Dagster's default coordinator launches at once) the next step would start
    beside this one; the sensor asks for it after this run stored its step, as before.
    """
    if not isinstance(instance.run_coordinator, dg.QueuedRunCoordinator):
        return False
    queue = instance.get_concurrency_config().run_queue_config
    return queue is not None and any(limit.get("key") == QUEUE_TAG and limit.get("limit") == 1
                                     for limit in queue.tag_concurrency_limits or [])


def _runs_with_key(instance: dg.DagsterInstance, run_key: str) -> list[str]:
    """The ids of the loop sensor's runs under `run_key`, as fetch_existing_runs finds them."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: LOOP_SENSOR}))
    return [r.run_id for r in runs]


def _submit(context: dg.AssetExecutionContext, ctx: CompileHandle, step: Step, run_key: str) -> str | None:
    instance, run = context.instance, context.run
    if _runs_with_key(instance, run_key):
        return None  # the sensor's run came first
    job = context.repository_def.get_job(STEP_JOB[step.kind])
    partition_set = PARTITION_SET[step.kind]
    if partition_set != COMPILES and not instance.has_dynamic_partition(partition_set, step.partition_key):
        instance.add_dynamic_partitions(partition_set, [step.partition_key])
    # What the sensor daemon gives its run (_create_sensor_run, RunRequest.with_resolved_tags_and_config).
    tags = {**job.run_tags, **job.get_tags_for_partition_key(step.partition_key, selected_asset_keys=None),
            **loop_request_tags(ctx.cdir.key, step),
            RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: LOOP_SENSOR, SUBMITTED_BY_TAG: run.run_id}
    new = instance.create_run_for_job(
        job_def=job, run_config=job.get_run_config_for_partition_key(step.partition_key), tags=tags,
        status=dg.DagsterRunStatus.NOT_STARTED,
        # this run's code location and repository (the sensor's), the next step's job
        remote_job_origin=run.remote_job_origin.repository_origin.get_job_origin(job.name),
        job_code_origin=run.job_code_origin.repository_origin.get_job_origin(job.name),
    )
    if _runs_with_key(instance, run_key) != [new.run_id]:
        instance.delete_run(new.run_id)  # the sensor made its run meanwhile: it is the one
        return None
    instance.submit_run(new.run_id, workspace=None)  # the QueuedRunCoordinator reads no workspace
    context.log.info(f"next step {run_key} submitted: run {new.run_id}, launched when this run ends")
    return new.run_id
