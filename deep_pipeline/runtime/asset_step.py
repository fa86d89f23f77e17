"""What every asset step body runs under: its run's worker claim, the step lock, heartbeats,
the failure record and the timeline row."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import dagster as dg

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.failures import clear_failure, record_failure
from deep_pipeline.engine.live import heartbeats_to
from deep_pipeline.errors import one_line
from deep_pipeline.runtime.next_run import submit_next_step
from deep_pipeline.runtime.register import instance_warning
from deep_pipeline.runtime.sweep import WorkerClaim, process_tags
from deep_pipeline.runtime.timeline import ends_step, log_timeline


@contextlib.contextmanager
def asset_step(context: dg.AssetExecutionContext, ctx: CompileHandle, first: bool = False,
               shared: bool = False) -> Iterator[None]:
    """What every asset step body runs under: its run tagged with this process, the step lock.

    A run the CLI driver started has its tags already; one the daemon launched gets its
    worker's here, so a kill -9 of that worker is noticed by the next sweep too.
    `first` (the compile's first step) also says when the instance lacks our limits.
    The asset a step ends with then logs the compile's timeline (runtime/timeline.py), so
    the UI shows a running compile after every step, and, in a run of the loop sensor, submits
    the compile's next step (runtime/next_run.py) instead of leaving it to the next tick.
    `shared`: a task set's task rollouts, which hold the step lock shared (engine/context.py).
    """
    if WorkerClaim.of(context.run) is None:
        context.instance.add_run_tags(context.run.run_id, process_tags(context.run.run_id))
    if first and (warning := instance_warning(context.instance)):
        print(f"deep-pipeline: warning: {warning}", file=sys.stderr, flush=True)
        context.log.warning(warning)
    with ctx.step_lock(context.log.warning, shared=shared), heartbeats_to(context.log.info):  # a long wait shows in the event log
        try:
            yield
        except Exception as exc:  # recorded so `status` and the timeline say "failed", not "running"
            _step_failed(context, ctx, exc)
            raise
        if ends_step(context):  # under the lock: read as this step left the records
            clear_failure(ctx.cdir, context.partition_key if shared else None)
            outlook = ctx.look()  # derived once, after the step: the timeline and the next step read it
            log_timeline(context, ctx, outlook)
            submit_next_step(context, ctx, outlook)  # a loop sensor's run: the next step starts as this run ends


def _step_failed(context: dg.AssetExecutionContext, ctx: CompileHandle, exc: Exception) -> None:
    """Record the failure and show it on the timeline; never in the way of the error itself."""
    error = getattr(exc, "description", None) or str(exc) or type(exc).__name__
    record_failure(ctx.cdir, context.run.run_id, context.partition_key, context.job_name, error)
    try:
        log_timeline(context, ctx)
    except Exception as also:  # e.g. the folder went away: the step's own error is what matters
        context.log.warning(f"timeline not updated after the failure: {one_line(str(also))}")

