"""The dead-run sweep: each run's worker claim (`deep/worker`), and what every command that
opens a compile does first (release dead runs, stop a dead driver's agents, remove orphaned
sandboxes)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.rollouts.guard import start_time

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


def open_compile(instance: dg.DagsterInstance, ctx: CompileHandle, note: Callable[[str], None]) -> None:
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

