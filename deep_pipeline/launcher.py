"""Registering compiles with Dagster and driving one to its end in-process.

The driver asks the same planner the loop sensor uses for the next run, then executes
that named job in-process against the instance: a one-shot compile shows up in the UI
exactly like one the daemon carried, and running it again resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.records import CompileRecord, Report
from deep_pipeline.engine.settings import effective_config, load_deployment, read_config_file
from deep_pipeline.errors import InputError, StepError
from deep_pipeline.planning import plan_next_run
from deep_pipeline.store import read_model


# The event log keeps every event; the terminal gets our progress lines and one error line.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def register(instance: dg.DagsterInstance, root: Path, skill_dir: Path, bundle: Path, overrides: dict[str, Any],
             origin: str = "config", announce: bool = True) -> tuple[CompileRecord, bool]:
    """Register a compile. Returns (record, newly created).

    `announce` adds its `compiles` partition, which hands it to the loop sensor; a driver
    that carries the compile itself leaves that to `drive`, which does it under its lock.
    """
    config = effective_config(load_deployment(), overrides, origin)
    existed = {p.name for p in Path(root).iterdir()} if Path(root).is_dir() else set()
    record = register_compile(root, skill_dir, bundle, config)
    if announce:
        _announce(instance, record.key)
    return record, record.key not in existed


def _announce(instance: dg.DagsterInstance, key: str) -> None:
    if not instance.has_dynamic_partition("compiles", key):
        instance.add_dynamic_partitions("compiles", [key])


@contextlib.contextmanager
def driver_lock(ctx: StepContext) -> Iterator[None]:
    """One driver per compile at a time (a second would race the first on every step)."""
    ctx.cdir.path.mkdir(parents=True, exist_ok=True)
    with open(ctx.cdir.lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{ctx.cdir.path}: another driver is running this compile") from None
        yield


def drive(instance: dg.DagsterInstance, root: Path, key: str, defs: dg.Definitions,
          progress: Callable[[str], None] | None = None, max_runs: int = 10_000) -> Report:
    """Run the compile's next job until it is finalized."""
    ctx = StepContext.open(root, key)
    with driver_lock(ctx):
        _announce(instance, key)  # under the lock: the sensor sees it held and leaves it alone
        for _ in range(max_runs):
            planned = plan_next_run(ctx)
            if planned is None:
                return read_model(ctx.cdir.report_path, Report)
            if not instance.has_dynamic_partition(planned.partitions_def, planned.partition_key):
                instance.add_dynamic_partitions(planned.partitions_def, [planned.partition_key])
            result = defs.resolve_job_def(planned.job_name).execute_in_process(
                partition_key=planned.partition_key, instance=instance, tags=planned.tags(key), raise_on_error=False,
                run_config=QUIET_CONSOLE,
            )
            if not result.success:
                if _interrupted(result):
                    raise KeyboardInterrupt
                raise StepError(f"{planned.job_name} run {result.run_id} for {planned.partition_key} failed: {_failure(result)}")
            if progress:
                progress(describe_step(ctx, planned))
    raise StepError(f"{key}: no end after {max_runs} runs")


def describe_step(ctx: StepContext, planned) -> str:
    from deep_pipeline.core.keys import parse_key
    from deep_pipeline.engine.iteration_steps import Iteration
    from deep_pipeline.engine.records import DecisionRecord

    usage = ctx.cdir.usage()
    cost = f"${usage.cost_usd:.4f}" if usage.cost_usd is not None else "cost unknown"
    tail = f"[{usage.calls} calls, {usage.prompt_tokens + usage.completion_tokens} tokens, {cost}]"
    if planned.action == "iteration":
        _, level, _, index = parse_key(planned.partition_key)
        d = Iteration(ctx, level, index).load("decision.json", DecisionRecord).decision
        verdict = "accepted" if d.accepted else "rejected"
        return f"{level} iteration {index}: {d.coordinate} {verdict} ({d.reason}) {tail}"
    return f"{planned.action} {planned.partition_key} done {tail}"


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
            error = event.step_failure_data.error
            while error is not None and error.cause is not None:
                error = error.cause
            return " ".join(error.message.split()) if error else "step failed"
    return "run failed"


class BatchEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skill: str
    bundle: str
    overrides: dict[str, Any] = Field(default_factory=dict)


class BatchManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[BatchEntry]


def load_manifest(path: Path) -> BatchManifest:
    data = read_config_file(path)
    try:
        return BatchManifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{path}: {loc}: {err['msg']}") from None


def start_batch(instance: dg.DagsterInstance, root: Path, manifest_path: Path) -> list[tuple[str, bool]]:
    """Register every entry; those with a compile already are left as they are."""
    manifest = load_manifest(manifest_path)
    base = Path(manifest_path).resolve().parent
    started = []
    for i, entry in enumerate(manifest.entries):
        record, new = register(instance, root, base / entry.skill, base / entry.bundle, entry.overrides,
                               origin=f"{manifest_path}: entries[{i}].overrides")
        started.append((record.key, new))
    return started

