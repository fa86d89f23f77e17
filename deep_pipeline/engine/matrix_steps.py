"""Scoring a level's matrix: one judge call per column, stored the moment it is done (SPEC §5)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from pydantic import BaseModel

from deep_pipeline.core.keys import column_call_key, matrix_key
from deep_pipeline.core.models import ScoreMatrix, Unit
from deep_pipeline.core.actions import ScoreLevel
from deep_pipeline.core.units import cut_units
from deep_pipeline.llm.accounting import usage_of_calls
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.live import LIVE, heartbeat, model_of
from deep_pipeline.engine.records import ColumnRecord, MatrixRecord
from deep_pipeline.llm.accounting import Usage
from deep_pipeline.store import atomic_write_json, read_model, sha256_text


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

    def begin(self) -> MatrixStart:
        """The stored start, else the units cut now on the current traces, written before any column."""
        if self.start is None:
            outlook = self.ctx.expect("matrix", self.key)
            history, state, action = outlook.history, outlook.state, outlook.action
            units = cut_units(state.current_skill_text, action.level, action.section_id)
            start = MatrixStart(seq=len(history.events), action=action, skill_text=state.current_skill_text,
                                trace_batch=state.current_trace_batch, units=units)
            atomic_write_json(self.folder / "plan.json", start)
            self.start = start
        return self.start

    def column_path(self, dimension: str):
        return self.folder / f"column-{dimension}.json"

    def stored_columns(self) -> list[ColumnRecord]:
        """The columns already scored, in the config's dimension order."""
        paths = [self.column_path(d.name) for d in self.ctx.config.dimensions]
        return [read_model(path, ColumnRecord) for path in paths if path.is_file()]


def score_columns(step: MatrixStep) -> Iterator[ColumnRecord]:
    """Yield every column as it is done (stored ones first); a budget stop ends the stream."""
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
    traces = ctx.cdir.traces(start.trace_batch)
    # One client (one budget, one cap) for every column thread, whose sends stop with the step.
    judge = ctx.services.judge.stoppable()
    task_prompt = ctx.task_prompt  # read once, not by each column thread

    def score(dim):
        try:
            result = score_column(
                judge,
                step_key=column_call_key(step.key, dim.name),
                task_prompt=task_prompt,
                skill_text=start.skill_text,
                units=start.units,
                dimension=dim,
                traces=traces,
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
        atomic_write_json(step.column_path(dim.name), column)
        return column

    ended = [0]

    def waiting_on() -> str:
        return f"column {ended[0] + 1}/{len(todo)} of {step.key} waiting on {model_of(judge)}"

    # The client's limiter keeps the compile's calls in flight under its cap.
    pool = ThreadPoolExecutor(max_workers=ctx.config.parallel)
    futures = [pool.submit(score, dim) for dim in todo]
    stopped = None  # a column not sent because another failed: raised only if no other failure is seen
    try:
        with heartbeat(waiting_on):
            for future in as_completed(futures):
                ended[0] += 1
                try:
                    column = future.result()
                except BudgetExhausted:
                    continue  # the matrix is recorded as stopped at the budget
                except StoppedByFailure as error:
                    # It can finish before the column whose failure stopped it: wait for that one,
                    # whose error is the step's reason.
                    stopped = stopped or error
                    continue
                LIVE.info("%s: column %s scored (%d of %d)", step.key, column.dimension, ended[0], len(todo))
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
        skill_sha256=sha256_text(start.skill_text),
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
