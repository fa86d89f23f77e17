"""Carrying one compile to its end in this process: the CLI's `compile`/`resume` and the `compile` job.

engine.steps.run_steps (the one loop) runs each step as "execute the step kind's job
(defs/jobs.py STEP_JOBS) in-process against the instance": a one-shot compile shows up in the UI
exactly like one the daemon carried, and running it again resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from deep_pipeline.defs.jobs import STEP_JOBS, step_defs
from deep_pipeline.engine import steps
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.failures import last_failure, record_failure
from deep_pipeline.engine.records import Report
from deep_pipeline.engine.steps import Step
from deep_pipeline.errors import StepError, one_line
from deep_pipeline.runtime.driver_lock import driver_lock
from deep_pipeline.runtime.dagster_private import execute_created_run, make_new_run_id, partition_run_tags
from deep_pipeline.runtime.register import announce_compile
from deep_pipeline.runtime.sweep import open_compile, process_tags, release_dead_runs
from deep_pipeline.runtime.tags import driver_tags, job_origin, run_tags

# The event log keeps every event; the terminal gets our progress lines and one error line.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def drive_compile(instance: dg.DagsterInstance, root: Path, key: str, progress: Callable[[str], None] | None = None,
          max_runs: int = 10_000, parent: dg.DagsterRun | None = None) -> Report:
    """Run the compile's next job, in this process, until it is finalized (engine.steps.run_steps).

    `parent`: the `compile` run driving it; each step's run is tagged with it (else with this CLI process).
    """
    ctx = CompileHandle.open(root, key)
    launched = driver_tags(parent.run_id, parent.tags) if parent else driver_tags()
    note = progress or (lambda line: None)
    repository = step_defs.get_repository_def()

    def start_job(ctx: CompileHandle, step: Step) -> None:
        release_dead_runs(instance, note)  # before the step claims a slot
        name = STEP_JOBS[step.kind].name
        job = repository.get_job(name)
        partition_set = job.partitions_def.name  # the job's own dynamic set: the step's key joins it first
        if not instance.has_dynamic_partition(partition_set, step.partition_key):
            instance.add_dynamic_partitions(partition_set, [step.partition_key])
        result = execute_with_origin(job, step.partition_key, instance, tags={**run_tags(key, step.kind), **launched})
        if not result.success:
            if _interrupted(result):
                raise KeyboardInterrupt
            error = _failure(result)
            recorded = last_failure(ctx.cdir)
            if recorded is None or recorded.run_id != result.run_id:  # the step's own line is kept when it wrote one
                record_failure(ctx.cdir, result.run_id, step.partition_key, name, error)  # status says "failed"
            raise StepError(f"{name} run {result.run_id} for {step.partition_key} failed: {error}")

    with driver_lock(ctx):
        announce_compile(instance, key)  # under the lock: the sensor sees it held and leaves it alone
        open_compile(instance, ctx, note)
        report = steps.run_steps(ctx, start_job, progress, max_steps=max_runs)
        _restore_outputs(ctx, note)
        return report


def _restore_outputs(ctx: CompileHandle, note: Callable[[str], None]) -> None:
    """Write what a finalized compile should have beside its records and lacks: report.html,
    which the last step writes after report.json (a kill between them left it missing).

    Under the step lock, whose entry removes the temp files a killed write left: a kill in the
    middle of report.html's atomic write leaves its `.report.html.*.tmp`, and a resume of a
    finalized compile runs no step that would take the lock otherwise.
    """
    from deep_pipeline.report import write_html_report

    with ctx.step_lock(note):
        if not ctx.cdir.html_report_path.exists():
            write_html_report(ctx.cdir)
            note(f"wrote {ctx.cdir.html_report_path.name}, missing after the compile was finalized")


def execute_with_origin(job: dg.JobDefinition, partition_key: str, instance: dg.DagsterInstance, tags: dict[str, str]):
    """`job.execute_in_process(partition_key=...)`, but the run carries the code location's origin.

    execute_in_process creates its run with no origin (no Runs tab, no Overview timeline);
    here the run is created as a code server would (instance.create_run_for_job with the
    origin) and executed in this process, as a run worker executes the run it is handed.
    """
    run_config = QUIET_CONSOLE
    run_id = make_new_run_id()
    tags = {**tags, **process_tags(run_id)}  # a kill -9 of this process is noticed by the next driver
    run_tags = partition_run_tags(job, partition_key, instance, tags, run_config)
    run = instance.create_run_for_job(job_def=job, run_id=run_id, run_config=run_config, tags=run_tags,
                                      remote_job_origin=job_origin(job.name))
    return execute_created_run(job, run, instance)


def _interrupted(result) -> bool:
    names = {"KeyboardInterrupt", "DagsterExecutionInterruptedError"}
    for event in result.all_events:
        error = event.step_failure_data.error if event.is_step_failure else None
        while error is not None:
            if error.cls_name in names:
                return True
            error = error.cause
    return False


def _failure(result) -> str:
    """The innermost cause of the failed step: ours (StepError, InputError), not Dagster's wrapper."""
    for event in result.all_events:
        if event.is_step_failure:
            described = event.step_failure_data.user_failure_data
            if described is not None and described.description:  # a dg.Failure of ours: its line as written
                return one_line(described.description, 600)
            error = event.step_failure_data.error
            while error is not None and error.cause is not None:
                error = error.cause
            return one_line(error.message, 600) if error else "step failed"
    for event in result.all_events:  # no step failed: the run itself did (e.g. a resource)
        error = getattr(event.event_specific_data, "error", None) if event.is_run_failure else None
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            return one_line(error.message, 600)
    return "run failed"
