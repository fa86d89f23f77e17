"""Rollouts per training task (SPEC §6.4, §11), and a task set's task rollouts as steps of their own.

A compile of one task rolls its batch out inside the step that needs it, as it always did. In a
task set each training task's rollouts of a batch (the input batch, an iteration's candidate) are
a step of their own, keyed `<compile or iteration>/t<i>` (core/keys.py): the runs of different
tasks may run at once, on different machines, and a failed task's rollouts rerun alone. Each
writes `traces/<batch>/task-t<i>.json` (TaskRolloutsRecord) beside its traces; the step that
needs the batch (inputs, or the iteration after its candidate) finds them there and commits the
batch. engine/steps.py `next_steps` asks for them: every task without its record, at once.
"""

from __future__ import annotations

from pathlib import Path

from deep_pipeline.core.actions import Finalize
from deep_pipeline.core.keys import INPUT_BATCH, batch_name, parse_key, parse_task_key
from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, Trace
from deep_pipeline.engine.context import CompileHandle, Outlook, TrainingTask
from deep_pipeline.engine.live import LIVE, heartbeat
from deep_pipeline.engine.records import CandidateRecord, TaskRolloutsRecord
from deep_pipeline.errors import StepError, one_line
from deep_pipeline.locks import file_lock
from deep_pipeline.store import atomic_write_json, read_model


def task_record_path(ctx: CompileHandle, batch: str, task: TrainingTask) -> Path:
    return ctx.cdir.batch_dir(batch) / f"task-{task.label}.json"


def tasks_left(ctx: CompileHandle, batch: str, tasks: list[TrainingTask] | None = None) -> list[TrainingTask]:
    """The training tasks (of `tasks`, default all) whose rollouts of `batch` are still a step of
    their own to run: none for a compile of one task, or once the batch is committed."""
    every = ctx.training_tasks
    if len(every) == 1 or ctx.cdir.has_batch(batch):
        return []
    return [task for task in (every if tasks is None else tasks) if not task_record_path(ctx, batch, task).is_file()]


def task_of(ctx: CompileHandle, label: str) -> TrainingTask:
    for task in ctx.training_tasks:
        if task.label == label:
            return task
    raise StepError(f"{ctx.cdir.key}: no training task {label}")


def batch_of(ctx: CompileHandle, owner_key: str) -> tuple[str, str, Path, str]:
    """(step kind, batch, package, its SKILL.md's hash) of the batch a task rollouts step adds to."""
    if owner_key == ctx.cdir.key:
        return "inputs", INPUT_BATCH, ctx.cdir.input_skill, ctx.record.skill_sha256
    _, level, _, index = parse_key(owner_key)
    folder = ctx.cdir.iteration_dir(level, index)
    candidate_path = folder / "candidate.json"
    if not candidate_path.is_file():
        raise StepError(f"{owner_key}: no candidate yet; its rollouts come after it")
    candidate = read_model(candidate_path, CandidateRecord)
    return "iteration", batch_name(level, index), folder / "candidate", candidate.skill_sha256


def task_rollouts_step(ctx: CompileHandle, key: str) -> TaskRolloutsRecord:
    """One training task's `rollouts` runs of the batch its owner step needs; stored, it is returned."""
    owner, label = parse_task_key(key)
    task = task_of(ctx, label)
    kind, batch, package, sha = batch_of(ctx, owner)
    path = task_record_path(ctx, batch, task)
    # One run per task at a time (a CLI driver's and a daemon's may meet); the second finds the record.
    with file_lock(path.with_name(f".task-{label}.lock")):
        if path.is_file():
            return read_model(path, TaskRolloutsRecord)
        if owner_outlook(ctx, kind, owner) is None:  # its budget spent by the other tasks' runs beside this one
            record = TaskRolloutsRecord(task=task.name, label=task.label, batch=batch, skipped="budget_exhausted",
                                        note="the compile's budget ran out before this task's rollouts began")
            atomic_write_json(path, record)
            return record
        return _roll_out_and_record(ctx, task, package, sha, batch, path)


def owner_outlook(ctx: CompileHandle, kind: str, owner: str) -> Outlook | None:
    """The outlook when the owner step is the policy's next (its task steps are asked for); None when
    the policy stopped on the budget instead: a task step of a set then records itself stopped, as
    one that met the budget itself does. Anything else is "not the compile's next step"."""
    try:
        return ctx.expect(kind, owner)
    except StepError:
        action = ctx.look().action
        if isinstance(action, Finalize) and action.status == "budget_exhausted":
            return None
        raise


def _roll_out_and_record(ctx: CompileHandle, task: TrainingTask, package: Path, sha: str, batch: str,
                         path: Path) -> TaskRolloutsRecord:
    from deep_pipeline.llm.budget import BudgetExhausted

    record = TaskRolloutsRecord(task=task.name, label=task.label, batch=batch)
    try:
        made = roll_out_task(ctx, task, package, sha, batch)
        record = record.model_copy(update={"trace_ids": [t.trace_id for t in made]})
    except BudgetExhausted as exc:
        record = record.model_copy(update={"skipped": "budget_exhausted", "note": one_line(str(exc), 300)})
    ctx.cdir.require()
    atomic_write_json(path, record)
    return record


def traces_of_task(ctx: CompileHandle, task: TrainingTask, package_dir, skill_sha256: str, batch: str) -> list[Trace]:
    """A task's rollouts of `batch`: those its own step stored, else rolled out here.

    Raises BudgetExhausted when its step stopped on the budget (the batch's step then stops too).
    """
    path = task_record_path(ctx, batch, task)
    if task.label is not None and path.is_file():
        from deep_pipeline.llm.budget import BudgetExhausted

        record = read_model(path, TaskRolloutsRecord)
        if record.skipped:
            raise BudgetExhausted(record.note or record.skipped)
        folder = ctx.cdir.batch_dir(batch)
        return [read_model(folder / f"{tid}.json", Trace) for tid in record.trace_ids]
    return roll_out_task(ctx, task, package_dir, skill_sha256, batch)


def roll_out(ctx: CompileHandle, package_dir, skill_sha256: str, batch: str) -> tuple[list[Trace], dict | None]:
    """`rollouts` runs of a package per training task (SPEC §6.4, §11): every trace, and each
    task's trace ids (None for a compile of one task, whose batch is all its task's)."""
    tasks = ctx.training_tasks
    if len(tasks) == 1:
        return roll_out_task(ctx, tasks[0], package_dir, skill_sha256, batch), None
    traces, by_task = [], {}
    for task in tasks:  # each stored by its own step (next_steps asks for them first)
        made = traces_of_task(ctx, task, package_dir, skill_sha256, batch)
        traces += made
        by_task[task.name] = [t.trace_id for t in made]
    return traces, by_task


def roll_out_task(ctx: CompileHandle, task_of: TrainingTask, package_dir, skill_sha256: str, batch: str) -> list[Trace]:
    """`rollouts` runs of a package on one task, each trace stored the moment it ends.

    A run that crashed part-way left some traces behind: those are kept, not run again
    (SPEC §9); batch.json, written by the caller, still commits the batch. A rollout the
    machinery failed (`api_error`, `sandbox_setup`) is not stored: the step fails in one
    line and the next run makes only that rollout again.
    """
    from deep_pipeline.rollouts.base import RolloutTask, trace_id

    cdir, record = ctx.cdir, ctx.record
    folder = cdir.batch_dir(batch)
    label = task_of.trace_label(batch)  # the batch itself for a compile of one task
    done = {
        index: trace
        for index in range(record.config.rollouts)
        if (path := folder / f"{trace_id(label, index)}.json").is_file()
        and (trace := read_model(path, Trace)).error_category not in MACHINE_FAULT_CATEGORIES
    }

    def store(index: int, trace: Trace) -> None:
        if trace.error_category not in MACHINE_FAULT_CATEGORIES:
            atomic_write_json(folder / f"{trace.trace_id}.json", trace.model_copy(update={"batch": batch}))
        ended.append(index)
        outcome = trace.error_category or "done"
        LIVE.info("%s: rollout %d of %d %s", label, len(ended), record.config.rollouts, outcome)

    ended: list[int] = list(done)

    task = RolloutTask(prompt=task_of.prompt, task_dir=task_of.task_dir, skill_name=record.skill_name)
    archive = cdir.raw_dir(batch) if task_of.label is None else cdir.raw_dir(batch) / task_of.label

    def waiting_on() -> str:
        return f"rollout {len(ended) + 1}/{record.config.rollouts} of {label} waiting on the agent"

    with heartbeat(waiting_on):
        traces = ctx.services.runner.run_batch(
            package_dir=package_dir, skill_sha256=skill_sha256, task=task, batch=label, n=record.config.rollouts,
            archive_dir=archive, done=done, progress=store,
        )
    # A task's traces are the batch's, named by the task's label (a no-op for one task).
    traces = [t.model_copy(update={"batch": batch}) for t in traces]
    faults = [t for t in traces if t.error_category in MACHINE_FAULT_CATEGORIES]
    if faults:
        first = faults[0]
        raise StepError(
            f"{label} rollouts: {len(faults)} of {len(traces)} failed outside the agent "
            f"({first.trace_id}: {first.error_category}: {one_line(first.error_reason, 200)}); "
            "run the compile again to redo only those"
        )
    return traces
