"""Registering compiles with Dagster; the locks, run tags and dead-run sweep every driver and step shares.

defs/driver.py carries a compile to its end in-process: a one-shot compile shows up in the UI
exactly like one the daemon carried, and running it again resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from deep_pipeline.defs.step_runs import COMPILE_TAG
from deep_pipeline.defs.timeline import ends_step, log_timeline
from deep_pipeline.engine.batch import load_manifest
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine import steps
from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.live import heartbeats_to
from deep_pipeline.engine.failures import clear_failure, record_failure
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.errors import InputError, one_line
from deep_pipeline.rollouts.guard import start_time

LLM_POOL = "llm"


def register_with_overrides(instance: dg.DagsterInstance, root: Path, skill_dir: Path, bundle: Path, overrides: dict[str, Any],
             origin: str = "config", announce: bool = True, transport=None) -> tuple[CompileRecord, bool]:
    """Register a compile from the deployment's settings and these overrides. Returns (record, newly created).

    `announce` adds its `compiles` partition, which hands it to the loop sensor; a driver
    that carries the compile itself leaves that to `drive`, which does it under its lock.
    """
    config = effective_config(load_deployment(), overrides, origin)
    existed = {p.name for p in Path(root).iterdir()} if Path(root).is_dir() else set()
    record = register_compile(root, skill_dir, bundle, config, transport)
    if announce:
        announce_compile(instance, record.key)
    return record, record.key not in existed


def announce_compile(instance: dg.DagsterInstance, key: str) -> None:
    if not instance.has_dynamic_partition(steps.COMPILES, key):
        instance.add_dynamic_partitions(steps.COMPILES, [key])


# The loop sensor's probe holds a compile's lock for an instant: a driver starting in
# that instant retries for this long before it says another driver has the compile.
PROBE_WAIT_S = 3.0


@contextlib.contextmanager
def driver_lock(ctx: StepContext, wait_s: float = PROBE_WAIT_S) -> Iterator[None]:
    """One driver per compile at a time (a second would race the first on every step)."""
    ctx.cdir.path.mkdir(parents=True, exist_ok=True)
    with open(ctx.cdir.lock_path, "a") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(f"{ctx.cdir.path}: another driver is running this compile") from None
                time.sleep(0.05)
        yield


def driven_elsewhere(ctx: StepContext) -> bool:
    """Whether a driver holds the compile's lock: a shared look that never waits, let go at once.

    Shared, so two probes never collide; a driver they catch retries (driver_lock).
    """
    if not ctx.cdir.lock_path.is_file():
        return False
    # "a+": on NFSv4 a shared lock needs the file open for reading (else EBADF).
    with open(ctx.cdir.lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False  # closing the file lets the probe's lock go


# Who runs a run, as one tag `deep/worker` = `<pid>@<host>/<start>/<run id>`: the pid, its start
# time (clock ticks after boot, so a reused pid is another process), the host, and the run the
# claim was made for. A run whose process is gone holds its pool slots for good (Dagster does not
# notice a kill -9 of an in-process run, and the default run launcher cannot check a worker's
# health), so the next step or sensor tick frees them. The run id is in the claim because
# Dagster's run retry copies the parent's tags: without it the retry would carry the dead
# worker's claim until its own worker re-tags it, and be failed too. One tag, not four: the
# runs list shows every tag, and this one is read by the sweep, not filtered by a person.
WORKER_TAG = "deep/worker"
IN_FLIGHT = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]


@dataclass(frozen=True)
class WorkerClaim:
    pid: int
    host: str
    started: int | None  # None where there is no /proc
    run_id: str

    def tag(self) -> str:
        return f"{self.pid}@{self.host}/{'' if self.started is None else self.started}/{self.run_id}"

    @classmethod
    def of(cls, run: dg.DagsterRun) -> "WorkerClaim | None":
        """The run's own claim; None when it has none or carries its parent's (copied by a retry)."""
        who, _, rest = run.tags.get(WORKER_TAG, "").partition("/")
        started, _, run_id = rest.partition("/")
        pid, _, host = who.partition("@")
        if run_id != run.run_id or not pid.isdigit() or not (started.isdigit() or started == ""):
            return None
        return cls(int(pid), host, int(started) if started else None, run_id)

    def gone(self) -> bool:
        """True only when the claiming process is known to be gone: same host, and no such process now."""
        if self.host != socket.gethostname():
            return False
        if Path("/proc/self/stat").is_file():
            now = start_time(self.pid)
            return now is None or (self.started is not None and now != self.started)
        try:
            os.kill(self.pid, 0)  # no /proc: the pid alone
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def process_tags(run_id: str) -> dict[str, str]:
    """The tag that says this process runs the run `run_id`."""
    return {WORKER_TAG: WorkerClaim(os.getpid(), socket.gethostname(), start_time(os.getpid()), run_id).tag()}


def release_dead_runs(instance: dg.DagsterInstance, note: Callable[[str], None]) -> int:
    """Mark failed every in-flight run whose process is gone and free its pool slots (SPEC §9).

    Any compile's, not only the caller's: two dead runs hold both `llm` slots of the home,
    and every model-calling step of every compile would wait for them forever.
    """
    released = 0
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_FLIGHT)):
        run = record.dagster_run
        claim = WorkerClaim.of(run)
        if claim is None or not claim.gone():
            continue
        pid = claim.pid
        instance.report_run_failed(run, f"the process that ran it (pid {pid}) is gone; its pool slots were freed")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        where = run.tags.get("dagster/partition", "")
        note(f"released run {run.run_id} ({run.job_name} {where}): the process that ran it (pid {pid}) is gone; "
             "marked failed, its pool slots freed")
        released += 1
    # A run that ended but still holds a slot (marked failed by anyone else) gives it back too.
    storage = instance.event_log_storage
    for pool in storage.get_concurrency_keys():
        for run_id in {slot.run_id for slot in storage.get_concurrency_info(pool).claimed_slots}:
            run = instance.get_run_by_id(run_id)
            if run is None or run.is_finished:
                storage.free_concurrency_slots_for_run(run_id)
    return released


def open_compile(instance: dg.DagsterInstance, ctx: StepContext, note: Callable[[str], None]) -> None:
    """What every command that opens a compile does first, whatever step comes next (SPEC §9).

    A kill -9 may land after a compile's last record (report.json) and before its run is
    marked done: the compile is finalized, no step runs again, and a sweep tied to steps
    or batches would never come. So the dead runs are released, a dead driver's agents of
    this compile stopped and the sandboxes whose maker is gone removed, here and now.
    """
    from deep_pipeline.rollouts.process import stop_leftover_agents
    from deep_pipeline.rollouts.sandbox import remove_orphaned_sandboxes

    release_dead_runs(instance, note)
    stop_leftover_agents(ctx.cdir.agents_dir)  # before their sandboxes go: nothing may run in them
    removed = remove_orphaned_sandboxes()
    if removed:
        note(f"removed {removed} rollout sandboxes a killed run left in the temp directory")


def instance_warning(instance: dg.DagsterInstance) -> str | None:
    """One line when the instance lacks the limits our dagster.yaml sets, else None.

    Only the CLI gives a new home our dagster.yaml: `dagster job execute` or `dagster dev`
    on a fresh home run with Dagster's defaults, without the `llm` pool limit and one run
    per compile, and nothing else would say so.
    """
    missing = []
    if not instance.event_log_storage.get_concurrency_info(LLM_POOL).limit:
        missing.append(f"no limit on the '{LLM_POOL}' pool (concurrency.pools.default_limit)")
    queue = instance.get_concurrency_config().run_queue_config
    if queue is None or not any(limit.get("key") == COMPILE_TAG for limit in queue.tag_concurrency_limits or []):
        missing.append(f"no one-run-per-compile limit (concurrency.runs.tag_concurrency_limits on '{COMPILE_TAG}')")
    if not missing:
        return None
    from deep_pipeline.home import HOME_VARIABLE, our_dagster_yaml_name

    home = os.environ.get(HOME_VARIABLE) or HOME_VARIABLE
    return (f"{home}: this Dagster instance has {' and '.join(missing)}: copy "
            f"{our_dagster_yaml_name()} to {home}/dagster.yaml, or add those settings to yours")


@contextlib.contextmanager
def asset_step(context: dg.AssetExecutionContext, ctx: StepContext, first: bool = False) -> Iterator[None]:
    """What every asset step body runs under: its run tagged with this process, the step lock.

    A run the CLI driver started has its tags already; one the daemon launched gets its
    worker's here, so a kill -9 of that worker is noticed by the next sweep too.
    `first` (the compile's first step) also says when the instance lacks our limits.
    The asset a step ends with then logs the compile's timeline (defs/timeline.py), so
    the UI shows a running compile after every step.
    """
    if WorkerClaim.of(context.run) is None:
        context.instance.add_run_tags(context.run.run_id, process_tags(context.run.run_id))
    if first and (warning := instance_warning(context.instance)):
        print(f"deep-pipeline: warning: {warning}", file=sys.stderr, flush=True)
        context.log.warning(warning)
    with ctx.step_lock(context.log.warning), heartbeats_to(context.log.info):  # a long wait shows in the event log
        try:
            yield
        except Exception as exc:  # recorded so `status` and the timeline say "failed", not "running"
            _step_failed(context, ctx, exc)
            raise
        if ends_step(context):  # under the lock: read as this step left the records
            clear_failure(ctx.cdir)
            log_timeline(context, ctx)


def _step_failed(context: dg.AssetExecutionContext, ctx: StepContext, exc: Exception) -> None:
    """Record the failure and show it on the timeline; never in the way of the error itself."""
    error = getattr(exc, "description", None) or str(exc) or type(exc).__name__
    record_failure(ctx.cdir, context.run.run_id, context.partition_key, context.job_name, error)
    try:
        log_timeline(context, ctx)
    except Exception as also:  # e.g. the folder went away: the step's own error is what matters
        context.log.warning(f"timeline not updated after the failure: {one_line(str(also))}")


def register_batch(instance: dg.DagsterInstance, root: Path, manifest_path: Path, transport=None) -> list[tuple[str, bool]]:
    """Register every entry; those with a compile already are left as they are."""
    manifest = load_manifest(manifest_path)
    base = Path(manifest_path).resolve().parent
    started = []
    for i, entry in enumerate(manifest.entries):
        record, new = register_with_overrides(instance, root, base / entry.skill, base / entry.bundle, entry.overrides,
                               origin=f"{manifest_path}: entries[{i}].overrides", transport=transport)
        started.append((record.key, new))
    return started

