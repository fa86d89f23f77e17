"""Scoring a level's matrix: one judge call per column, stored the moment it is done (SPEC §5)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from pydantic import BaseModel, model_serializer

from deep_pipeline.core.keys import column_call_key, matrix_key, parse_key, parse_task_key
from deep_pipeline.core.matrix import mean_cells
from deep_pipeline.core.models import SKILL_FILE, ScoreMatrix, Unit
from deep_pipeline.core.pairs import omit_when_none
from deep_pipeline.core.actions import ScoreLevel
from deep_pipeline.core.package import cut_package, package_sha256
from deep_pipeline.core.skill_use import not_applicable_reason, unread_files
from deep_pipeline.llm.accounting import usage_of_calls
from deep_pipeline.engine.context import CompileHandle, Outlook, TrainingTask
from deep_pipeline.engine.live import LIVE, heartbeat, model_of
from deep_pipeline.engine.records import ColumnRecord, MatrixRecord, TaskColumnsRecord
from deep_pipeline.engine.task_rollouts import owner_outlook, task_of
from deep_pipeline.llm.accounting import Usage
from deep_pipeline.locks import file_lock
from deep_pipeline.store import atomic_write_json, package_files, read_model


class MatrixStart(BaseModel):
    """plan.json: what the matrix step set out to score, written before its first column.

    Once it exists the step finishes from it, whatever the policy says meanwhile: the
    columns' own calls may have reached the budget, and the matrix must still be recorded.
    """

    seq: int
    action: ScoreLevel
    skill_text: str
    trace_batch: str
    units: list[Unit]
    # The package's other markdown files that are units, path -> text, and those no rollout of
    # `trace_batch` opened (core/package.py, core/skill_use.py); not written for SKILL.md alone.
    files: dict[str, str] | None = None
    unread_files: list[str] | None = None

    @model_serializer(mode="wrap")
    def _single_file_writes_as_before(self, handler):
        return omit_when_none(handler(self), self, ("files", "unread_files"))


class MatrixStep:
    """One matrix's folder and stored records; `begin()` fixes what it scores (plan.json)."""

    def __init__(self, ctx: CompileHandle, level: str, index: int):
        self.ctx = ctx
        self.folder = ctx.cdir.matrix_dir(level, index)
        self.key = matrix_key(ctx.cdir.key, level, index)
        done = self.folder / "matrix.json"
        self.record: MatrixRecord | None = read_model(done, MatrixRecord) if done.is_file() else None
        start_path = self.folder / "plan.json"
        self.start: MatrixStart | None = read_model(start_path, MatrixStart) if start_path.is_file() else None

    def begin(self, outlook: Outlook | None = None) -> MatrixStart:
        """The stored start, else the units cut now on the current traces, written before any column.

        `outlook`: the policy's, already checked to name this matrix next (else it is checked here).
        """
        if self.start is None:
            outlook = outlook or self.ctx.expect("matrix", self.key)
            history, state, action = outlook.history, outlook.state, outlook.action
            units = cut_package(state.current_files, action.level, action.section_id)
            others = {path: text for path, text in state.current_files.items() if path != SKILL_FILE}
            start = MatrixStart(seq=len(history.events), action=action, skill_text=state.current_skill_text,
                                trace_batch=state.current_trace_batch, units=units, files=others or None,
                                unread_files=self._unread(state.current_trace_batch, sorted(others)))
            atomic_write_json(self.folder / "plan.json", start)
            self.start = start
        return self.start

    def _unread(self, batch: str, unit_files: list[str]) -> list[str] | None:
        """The unit files no rollout of the batch opened (SPEC §5's read rule); None: all may have been read."""
        if not unit_files:
            return None
        cfg = self.ctx.config
        traces = [trace for _, traces in self.ctx.task_traces(batch) for trace in traces]
        return unread_files(traces, skill_name=self.ctx.record.skill_name, unit_files=unit_files,
                            package_files=[p.as_posix() for p in package_files(self.ctx.cdir.input_skill)],
                            applicable=not_applicable_reason(cfg.runner, cfg.agent_output_format) is None)

    def column_path(self, dimension: str, task=None):
        """A column's record; with a task of a set (SPEC §11), that task's part of the column."""
        label = "" if task is None or task.label is None else f".{task.label}"
        return self.folder / f"column-{dimension}{label}.json"

    def stored_columns(self) -> list[ColumnRecord]:
        """The columns already scored, in the config's dimension order."""
        paths = [self.column_path(d.name) for d in self.ctx.config.dimensions]
        return [read_model(path, ColumnRecord) for path in paths if path.is_file()]


def score_columns(step: MatrixStep, only: TrainingTask | None = None) -> Iterator[ColumnRecord]:
    """Yield every column as it is done (stored ones first); a budget stop ends the stream.

    A task set's column is one judge call per training task, each seeing that task's
    traces only, stored apart; the column (their mean cells) once every part is in (SPEC §11).
    `only`: that task's parts alone (its task step, `task_columns_step`).
    """
    from deep_pipeline.llm.budget import BudgetExhausted
    from deep_pipeline.llm.client import StoppedByFailure
    from deep_pipeline.llm.judge import score_column

    ctx = step.ctx
    start = step.begin()
    stored = step.stored_columns()
    yield from stored
    todo = [dim for dim in ctx.config.dimensions if dim.name not in {c.dimension for c in stored}]
    if not todo:
        return
    per_task = ctx.task_traces(start.trace_batch)
    several = len(per_task) > 1
    parts = [(dim, task, traces) for dim in todo for task, traces in per_task
             if not (several and step.column_path(dim.name, task).is_file()) and (only is None or task.label == only.label)]
    for dim in todo if several else ():  # every part stored before a crash: only the column is left
        if not any(part[0] is dim for part in parts) and (column := _column_if_complete(step, dim, per_task)):
            yield column
    if not parts:
        return
    # One client (one budget, one cap) for every column thread, whose sends stop with the step.
    judge = ctx.services.judge.stoppable()

    def score(dim, task, traces) -> ColumnRecord:
        try:
            result = score_column(
                judge,
                step_key=task.call_key(column_call_key(step.key, dim.name)),
                task_prompt=task.prompt,
                skill_text=start.skill_text,
                units=start.units,
                dimension=dim,
                traces=traces,
                files=start.files,
                unread=start.unread_files,
                max_unit_chars=ctx.config.max_unit_chars,
            )
        except BudgetExhausted:
            raise  # every column meets the budget on its own: the matrix is recorded as stopped there
        except BaseException:
            judge.stop()  # at once, from this thread: no column is sent after a failed one
            raise
        column = ColumnRecord(
            dimension=dim.name,
            cells=result.cells,
            dropped_evidence=result.dropped_evidence,
            usage=usage_of_calls(result.calls),
            prompt_chars=result.prompt_chars,
            shared_prefix_chars=result.shared_prefix_chars,
        )
        atomic_write_json(step.column_path(dim.name, task if several else None), column)
        return column

    ended = [0]

    def waiting_on() -> str:
        return f"column {ended[0] + 1}/{len(parts)} of {step.key} waiting on {model_of(judge)}"

    # The client's limiter keeps the compile's calls in flight under its cap.
    pool = ThreadPoolExecutor(max_workers=ctx.config.parallel)
    futures = {pool.submit(score, *part): part[0] for part in parts}
    stopped = None  # a column not sent because another failed: raised only if no other failure is seen
    finished: set[str] = set()
    try:
        with heartbeat(waiting_on):
            for future in as_completed(futures):
                ended[0] += 1
                try:
                    future.result()
                except BudgetExhausted:
                    continue  # the matrix is recorded as stopped at the budget
                except StoppedByFailure as error:
                    # It can finish before the column whose failure stopped it: wait for that one,
                    # whose error is the step's reason.
                    stopped = stopped or error
                    continue
                column = future.result()
                if several:
                    # A part another thread stored before its future is seen completes the column early: once only.
                    dim = futures[future]
                    column = None if dim.name in finished else _column_if_complete(step, dim, per_task)
                if column is not None:
                    finished.add(column.dimension)
                    LIVE.info("%s: column %s scored (%d of %d)", step.key, column.dimension, ended[0], len(parts))
                    yield column
    except BaseException:
        # The first failed column fails the step now: the others are not sent, and those in
        # flight end at their current send (the columns already stored are kept).
        judge.stop()  # again, for a failure here (an interrupt) rather than in a column
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if stopped is not None:
        raise stopped


def _column_if_complete(step: MatrixStep, dim, per_task) -> ColumnRecord | None:
    """A task set's column once every training task's part is stored: the mean cells, each
    task's own kept (SPEC §11); written as the one-task column is, so readers see one column."""
    paths = {task.name: step.column_path(dim.name, task) for task, _ in per_task}
    if not all(path.is_file() for path in paths.values()):
        return None
    task_parts = {name: read_model(path, ColumnRecord) for name, path in paths.items()}
    usage = Usage()
    for part in task_parts.values():
        usage = usage.add(part.usage)
    means = mean_cells({name: part.cells for name, part in task_parts.items()})
    column = ColumnRecord(
        dimension=dim.name,
        cells=[mean.cell for mean in means],
        dropped_evidence=sum(part.dropped_evidence for part in task_parts.values()),
        usage=usage,
        prompt_chars=sum(part.prompt_chars for part in task_parts.values()),
        shared_prefix_chars=min(part.shared_prefix_chars for part in task_parts.values()),
        task_cells={name: part.cells for name, part in task_parts.items()},
    )
    atomic_write_json(step.column_path(dim.name), column)
    return column


def assemble_matrix(step: MatrixStep) -> MatrixRecord:
    """Write matrix.json from the stored columns: the matrix step's commit."""
    if step.record is not None:
        return step.record
    ctx = step.ctx
    start = step.begin()
    columns = step.stored_columns()
    usage = Usage()
    for column in columns:
        usage = usage.add(column.usage)
    matrix = ScoreMatrix(
        level=start.action.level,
        index=start.action.index,
        section_id=start.action.section_id,
        dimensions=ctx.config.dimension_names,
        units=start.units,
        cells=[cell for column in columns for cell in column.cells],
        trace_batch=start.trace_batch,
        skill_sha256=package_sha256({SKILL_FILE: start.skill_text, **(start.files or {})}),
        unread_files=start.unread_files,
        active_dimension=start.action.active_dimension,
        budget_exhausted=len(columns) < len(ctx.config.dimensions),
    )
    record = MatrixRecord(seq=start.seq, matrix=matrix, reason=start.action.reason, usage=usage)
    ctx.cdir.require()
    atomic_write_json(step.folder / "matrix.json", record)
    step.record = record
    return record


def run_matrix(ctx: CompileHandle, level: str, index: int) -> MatrixRecord:
    step = MatrixStep(ctx, level, index)
    for _ in score_columns(step) if step.record is None else ():
        pass
    return assemble_matrix(step)


def task_columns_left(ctx: CompileHandle, level: str, index: int) -> list[TrainingTask]:
    """A task set's training tasks whose part of the matrix's columns is still a step of its own to
    run (SPEC §11): none for a compile of one task, or once the matrix is recorded."""
    tasks = ctx.training_tasks
    folder = ctx.cdir.matrix_dir(level, index)
    if len(tasks) == 1 or (folder / "matrix.json").is_file():
        return []
    return [task for task in tasks if not (folder / f"task-{task.label}.json").is_file()]


def task_columns_step(ctx: CompileHandle, key: str) -> TaskColumnsRecord:
    """One training task's part of every column of a task set's matrix, each stored as it is
    scored; the runs of different tasks run side by side. Stored, its record is returned."""
    owner, label = parse_task_key(key)
    _, level, _, index = parse_key(owner)
    step, task = MatrixStep(ctx, level, index), task_of(ctx, label)
    path = step.folder / f"task-{label}.json"
    with file_lock(step.folder / f".task-{label}.lock"):  # one run per task at a time; the second finds the record
        if path.is_file():
            return read_model(path, TaskColumnsRecord)
        record = TaskColumnsRecord(task=task.name, label=label, matrix=owner)
        outlook = None if step.start is not None else owner_outlook(ctx, "matrix", owner)
        if step.start is None and outlook is None:
            record = record.model_copy(update={"skipped": "budget_exhausted",
                                               "note": "the compile's budget ran out before this task's columns began"})
        else:
            step.begin(outlook)  # the matrix's start, on the outlook checked just now
            for _ in score_columns(step, only=task):  # begin() writes plan.json, alike in every task's run
                pass
            missing = [d.name for d in ctx.config.dimensions
                       if not step.column_path(d.name, task).is_file() and not step.column_path(d.name).is_file()]
            if missing:  # a budget stop: those parts were never sent
                record = record.model_copy(update={"skipped": "budget_exhausted",
                                                   "note": f"the budget ran out before columns {', '.join(missing)}"})
        ctx.cdir.require()
        atomic_write_json(path, record)
        return record
