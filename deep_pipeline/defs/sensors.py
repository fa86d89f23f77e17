"""The loop sensor: reads new materializations, asks the policy, requests the next run.

A plain `@sensor` (an `@asset_sensor` only sees the latest event per tick and would drop
some, dagster#32853). Its JSON cursor holds the last storage id read per watched asset
and the compile keys already seen, so each tick only looks at compiles that changed.
The run key `<step kind>:<partition key>` makes a repeated or concurrent tick harmless:
Dagster never launches a run key twice. A step run it launched submits the next step itself
as it ends (runtime/next_run.py, same run key and tags): the sensor then finds that run queued
and asks nothing; it is the backstop after a crash, a restart or an error there. While a run of
a compile is queued or running the sensor leaves the compile to it (runtime/run_history.py
`run_in_flight`) and looks at it again every tick until none is: a tick reads a step's ending
materialization late, when the next step's run may already be running, and must not ask for
the step after that. A task set's task steps (SPEC §11) are asked for together, one request each. A step whose run failed outside its own work (a
launch failure, a killed worker) is asked for again under `<run key>:<n>`, n its failed runs
so far, up to `step_launch_attempts` runs with backoff (core/retry.py, runtime/run_history.py).
"""


import json
import time

import dagster as dg

from deep_pipeline.defs.jobs import ASSET_JOBS
from deep_pipeline.core.keys import compile_of
from deep_pipeline.core.retry import RetryPlan, gave_up_line, waiting_line
from deep_pipeline.runtime.run_history import compiles_failed_since, plan_step, run_in_flight
from deep_pipeline.runtime.driver_lock import driven_elsewhere
from deep_pipeline.runtime.next_run import loop_request_tags
from deep_pipeline.runtime.sweep import release_dead_runs
from deep_pipeline.runtime.tags import LOOP_SENSOR
from deep_pipeline.defs.partitions import COMPILES, PARTITION_SET, STEP_JOB
from deep_pipeline.engine.steps import next_steps
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.failures import last_failure, record_failure
from deep_pipeline.engine.status import failure_line
from deep_pipeline.errors import InputError, StepError

# The assets a step ends with; candidate_package ends a task set's iteration's first run (SPEC §11).
WATCHED = ("input_traces", "task_rollouts", "task_columns", "level_matrix", "candidate_package", "decision",
           "compile_report")
PAGE = 200


def read_cursor(raw: str | None) -> dict:
    data = json.loads(raw) if raw else {}
    # failed_after: the update time of the last failed run looked at (runtime/run_history.py).
    return {"ids": data.get("ids", {}), "seen": data.get("seen", []), "pending": data.get("pending", []),
            "failed_after": data.get("failed_after")}


def touched_compiles(instance: dg.DagsterInstance, cursor: dict) -> set[str]:
    """Compiles with a new watched materialization or a new `compiles` key; moves the cursor."""
    touched: set[str] = set()
    for name in WATCHED:
        after = cursor["ids"].get(name)
        while True:
            result = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), after_storage_id=after), limit=PAGE, ascending=True
            )
            for record in result.records:
                after = record.storage_id
                partition = record.asset_materialization.partition if record.asset_materialization else None
                if partition:
                    touched.add(compile_of(partition))
            if not result.has_more:
                break
        if after is not None:
            cursor["ids"][name] = after
    seen = set(cursor["seen"])
    new = set(instance.get_dynamic_partitions(COMPILES)) - seen
    cursor["seen"] = sorted(seen | new)
    # Compiles skipped while another driver held them are looked at again every tick.
    return touched | new | set(cursor["pending"])


def requests_for(ctx: CompileHandle, step, plan: RetryPlan | None = None
                 ) -> tuple[dg.RunRequest, dg.AddDynamicPartitionsRequest | None]:
    run_key = plan.run_key(step.run_key) if plan else step.run_key
    tags = loop_request_tags(ctx.cdir.key, step)  # as a step run's own submission of it (runtime/next_run.py)
    run = dg.RunRequest(run_key=run_key, job_name=STEP_JOB[step.kind], partition_key=step.partition_key, tags=tags)
    add = None
    if PARTITION_SET[step.kind] != COMPILES:
        add = dg.AddDynamicPartitionsRequest(partitions_def_name=PARTITION_SET[step.kind], partition_keys=[step.partition_key])
    return run, add


def _driven_elsewhere(ctx: CompileHandle) -> bool:
    """A CLI driver or a `compile` job holds the compile's lock: leave it alone.

    Only a look (a shared lock, let go at once): a probe must never make a driver fail.
    """
    return driven_elsewhere(ctx)


@dg.sensor(
    name=LOOP_SENSOR,
    jobs=ASSET_JOBS,
    # The sensor daemon loops every 5 s at best (MIN_INTERVAL_LOOP_TIME); an interval of 5
    # made a tick due a hair early wait a whole extra loop, so ticks alternated 5 and 10 s.
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts each compile's next step: inputs, a matrix, an iteration, the descent, or the report.",
)
def compile_loop_sensor(context: dg.SensorEvaluationContext, store: CompileStoreResource) -> dg.SensorResult:
    cursor = read_cursor(context.cursor)
    # A run worker killed mid-step would hold its llm slot for good (SPEC §9).
    release_dead_runs(context.instance, context.log.warning)
    now = time.time()
    failed, cursor["failed_after"] = compiles_failed_since(context.instance, cursor.get("failed_after"), now)
    runs, adds, pending, why = [], [], [], []
    for key in sorted(touched_compiles(context.instance, cursor) | failed):
        if (run := run_in_flight(context.instance, key)) is not None:
            pending.append(key)  # looked at again every tick until no run of it is in flight
            why.append(f"{key}: run {run.run_id[:8]} ({run.job_name}) is {run.status.value.lower()}; it carries the "
                       "compile on")
            continue
        try:
            ctx = store.context(key)
            if _driven_elsewhere(ctx):
                pending.append(key)
                why.append(f"{key}: driven elsewhere (a CLI driver or a compile job holds its lock)")
                continue
            if (failure := last_failure(ctx.cdir)) is not None and failure.waiting is None:
                # Not relaunched merely because the sensor (re)started, e.g. with the UI: a failed
                # step costs model calls each time; a person resumes it once mended (README).
                why.append(f"{key}: not relaunched: its last step run failed ({failure_line(failure)}); "
                           f"`deep-pipeline resume {key}` or re-executing that run carries it on")
                continue
            for step in next_steps(ctx) or [None]:
                run, add = _next_run(context, ctx, step, now, pending, why)
                runs += [run] if run is not None else []
                adds += [add] if add is not None else []
        except (StepError, InputError, ValueError) as exc:
            context.log.warning(f"{key}: skipped: {exc}")
            why.append(f"{key}: skipped: {exc}")
            continue
    cursor["pending"] = sorted(set(pending))  # a task set's steps may each have added their compile
    # The tick's history in the UI says which compiles were looked at and why none got a run.
    skip = None if runs else ("; ".join(why) or "no compile changed since the last tick")
    if runs and why:
        context.log.info("; ".join(why))  # a waiting compile is named on a tick that requested others
    return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=adds, cursor=json.dumps(cursor), skip_reason=skip)


def _next_run(context: dg.SensorEvaluationContext, ctx: CompileHandle, step, now: float, pending: list[str],
              why: list[str]):
    """The run request for one of the compile's next steps, as its failed runs allow (core/retry.py)."""
    key, config = ctx.cdir.key, ctx.config
    if step is None:
        why.append(f"{key}: finished, nothing left to run")
        return None, None
    plan = plan_step(context.instance, step, config.step_launch_attempts, config.step_retry_backoff_s, now)
    if plan is None:
        why.append(f"{key}: {step.run_key} has a run queued or running")
        return None, None
    if plan.last is None:
        return requests_for(ctx, step, plan)
    if plan.give_up:
        line = gave_up_line(step.run_key, plan, key)
        record_failure(ctx.cdir, plan.last.run_id, step.partition_key, step.kind, line, at=plan.last.ended_at)
        context.log.warning(f"{key}: failed: {line}")
        why.append(f"{key}: failed: {line}")
        return None, None
    waiting = waiting_line(step.run_key, plan)
    previous = last_failure(ctx.cdir)
    if previous is None or previous.waiting != waiting:  # `status` names the compile while it waits
        record_failure(ctx.cdir, plan.last.run_id, step.partition_key, step.kind, plan.last.reason,
                       waiting=waiting, at=plan.last.ended_at)
    if plan.wait_until is not None:
        pending.append(key)  # looked at again every tick until its retry is due
        why.append(f"{key}: {waiting}, not before {time.strftime('%H:%M:%S', time.gmtime(plan.wait_until))} UTC")
        return None, None
    context.log.info(f"{key}: retrying {step.run_key} (attempt {plan.attempt} of {plan.attempts}) after run "
                     f"{plan.last.run_id} failed: {plan.last.reason}")
    why.append(f"{key}: {waiting}: requested")
    return requests_for(ctx, step, plan)
