"""The step table and the one loop: which step comes next, how to run it, what to print.

`next_steps` is the only place the policy's action becomes `Step`s: one, or a task set's task
steps (SPEC §11: each training task's rollouts or matrix columns), which may all run at once; `run_step` runs one in this process; `summary`
is the one progress line; `run_steps` is the only loop (one step after another). The plain
driver passes `run_step` to `run_steps`, the CLI and the `compile` job pass "start the job
for this step" (runtime/driver.py), and the loop sensor turns `next_steps` into run requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deep_pipeline.core.actions import TASK_STEPS, Action, PrepareInputs, RunIteration, ScoreLevel, StepKind, step_of
from deep_pipeline.core.keys import iteration_label, task_key
from deep_pipeline.llm.accounting import cost_text, usage_of_calls
from deep_pipeline.engine.context import CompileHandle, Outlook
from deep_pipeline.engine.io_steps import INPUT_BATCH, finalize_step, input_step, task_bundle_usable
from deep_pipeline.engine.iteration_steps import Iteration, run_iteration
from deep_pipeline.engine.task_rollouts import task_rollouts_step, tasks_left
from deep_pipeline.engine.matrix_steps import run_matrix, task_columns_left, task_columns_step
from deep_pipeline.engine.records import CandidateRecord, DecisionRecord, Report
from deep_pipeline.errors import StepError
from deep_pipeline.store import read_model

Progress = Callable[[str], None]
# A task step's work, which returns its stored record when it is done.
TASK_STEP = {"rollouts": task_rollouts_step, "columns": task_columns_step}


@dataclass(frozen=True)
class Step:
    """A step kind with the policy's action it serves (for a matrix or an iteration, its level and index).

    `resumed`: an iteration's step after its task rollouts, a run of its own (its first run made
    the candidate and ended): a run key of its own, as Dagster spends a run key once.
    """

    kind: StepKind
    partition_key: str
    action: Action
    resumed: bool = False

    @property
    def run_key(self) -> str:
        # Dagster deduplicates a run key forever: one run per (kind, partition key[, resumed]).
        return f"{self.kind}:{self.partition_key}" + (":after-rollouts" if self.resumed else "")


def next_steps(ctx: CompileHandle, outlook: Outlook | None = None) -> list[Step]:
    """The steps the policy asks for now (from `outlook` when the caller has just derived it):
    one, or the training tasks' rollouts its step needs first (SPEC §11; each may run beside the
    others); none once the compile is finalized."""
    outlook = outlook or ctx.look()
    named = step_of(ctx.cdir.key, outlook.action)
    if named is None:
        return []
    kind, key = named
    action = outlook.action
    if isinstance(action, ScoreLevel) and (left := task_columns_left(ctx, action.level, action.index)):
        return [Step("columns", task_key(key, task.label), action) for task in left]
    candidate_made = isinstance(action, RunIteration) and _candidate_made(ctx, action)
    if left := _tasks_to_roll_out(ctx, action, candidate_made):
        return [Step("rollouts", task_key(key, task.label), action) for task in left]
    # A task set's iteration past its candidate: its first run made it and ended.
    return [Step(kind, key, action, resumed=candidate_made and len(ctx.training_tasks) > 1)]


def next_step(ctx: CompileHandle, outlook: Outlook | None = None) -> Step | None:
    """The first of `next_steps`: what a driver running one step after another runs next."""
    steps = next_steps(ctx, outlook)
    return steps[0] if steps else None


def _tasks_to_roll_out(ctx: CompileHandle, action: Action, candidate_made: bool) -> list:
    """A task set's training tasks whose rollouts the action's step still lacks: the input batch's, or
    (once the iteration's candidate is made) the candidate's."""
    if isinstance(action, PrepareInputs):
        return [task for task in tasks_left(ctx, INPUT_BATCH) if not task_bundle_usable(ctx.record, task)]
    if candidate_made:
        it = Iteration(ctx, action.level, action.index)
        return [] if it.path("rollouts.json").is_file() else tasks_left(ctx, it.batch)
    return []


def _candidate_made(ctx: CompileHandle, action: RunIteration) -> bool:
    candidate = Iteration(ctx, action.level, action.index).load("candidate.json", CandidateRecord)
    return candidate is not None and not candidate.skipped


def run_step(ctx: CompileHandle, step: Step) -> None:
    """Run one step in this process, alone among the compile's steps (as each Dagster step is).

    Each step checks on its own that it is the policy's next (CompileHandle.expect), and
    only when it has no stored record to resume from.
    """
    if step.kind in TASK_STEPS:  # beside the compile's other task steps, never beside its steps
        with ctx.step_lock(shared=True):
            TASK_STEP[step.kind](ctx, step.partition_key)
        return
    with ctx.step_lock():
        if step.kind == "inputs":
            input_step(ctx)
        elif step.kind == "finalize":
            finalize_step(ctx)
        else:
            (run_matrix if step.kind == "matrix" else run_iteration)(ctx, step.action.level, step.action.index)


def run_steps(ctx: CompileHandle, execute: Callable[[CompileHandle, Step], None], progress: Progress | None = None,
          max_steps: int = 10_000) -> Report:
    """Run the compile's next step with `execute` until it is finalized; one progress line per step."""
    for _ in range(max_steps):
        step = next_step(ctx)
        if step is None:
            return read_model(ctx.cdir.report_path, Report)
        calls_before = len(ctx.cdir.calls())  # the line reports this step's calls only
        execute(ctx, step)
        if progress:
            progress(summary(ctx, step, calls_before))
    raise StepError(f"{ctx.cdir.key}: no end after {max_steps} steps")  # a policy bug, not bad input


def summary(ctx: CompileHandle, step: Step, calls_before: int = 0) -> str:
    """One progress line: what the step did and what it spent (its own calls, not the compile's)."""
    every = ctx.cdir.calls()
    calls = every[calls_before:]
    usage, total = usage_of_calls(calls), usage_of_calls(every)
    cached = sum(c.cache_hit for c in calls)
    from_cache = f", {cached} from the cache" if cached else ""
    # This step's own figures first, then the compile's so far: never a running total read as the step's.
    tail = (f"[{usage.calls} calls{from_cache}, {usage.prompt_tokens + usage.completion_tokens} tokens, "
            f"{cost_text(usage.cost_usd)}; compile so far: {total.calls} calls, {cost_text(total.cost_usd)}]")
    if step.kind == "iteration":
        level, index = step.action.level, step.action.index
        record = Iteration(ctx, level, index).load("decision.json", DecisionRecord)
        if record is None:  # a task set's iteration stopped at its candidate
            return f"{iteration_label(level, index)}: candidate made; its rollouts per task next {tail}"
        d = record.decision
        verdict = "accepted" if d.accepted else "rejected"
        return f"{iteration_label(level, index)}: {d.coordinate} {verdict} ({d.reason}) {tail}"
    if step.kind in TASK_STEPS:
        made = TASK_STEP[step.kind](ctx, step.partition_key)  # done: the stored record, no new work
        what = (f"stopped ({made.skipped})" if made.skipped else
                f"{len(made.trace_ids)} rollouts" if step.kind == "rollouts" else "scored")
        return f"{step.kind} {step.partition_key} ({made.task}): {what} {tail}"
    if step.kind == "inputs" and ctx.cdir.has_batch(INPUT_BATCH):
        traces = ctx.cdir.traces(INPUT_BATCH)
        failed = [t.error_category for t in traces if t.error_category]
        if failed:
            kinds = ", ".join(sorted(set(failed)))
            every = "all " if len(failed) == len(traces) else ""
            return f"inputs {step.partition_key}: {every}{len(failed)} of {len(traces)} rollouts failed ({kinds}) {tail}"
    return f"{step.kind} {step.partition_key} done {tail}"
