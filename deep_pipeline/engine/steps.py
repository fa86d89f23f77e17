"""The step table and the one loop: which step comes next, how to run it, what to print.

`next_step` is the only place the policy's action becomes a `Step`; `run_step` runs one
in this process; `summary` is the one progress line; `run_steps` is the only loop. The plain
driver passes `run_step` to `run_steps`, the CLI and the `compile` job pass "start the job
for this step" (runtime/driver.py), and the loop sensor turns `next_step` into run requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deep_pipeline.core.actions import Action, StepKind, step_of
from deep_pipeline.core.keys import iteration_label
from deep_pipeline.llm.accounting import cost_text, usage_of_calls
from deep_pipeline.engine.context import CompileHandle, Outlook
from deep_pipeline.engine.io_steps import INPUT_BATCH, finalize_step, input_step
from deep_pipeline.engine.iteration_steps import Iteration, run_iteration
from deep_pipeline.engine.matrix_steps import run_matrix
from deep_pipeline.engine.records import DecisionRecord, Report
from deep_pipeline.errors import StepError
from deep_pipeline.store import read_model

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """A step kind with the policy's action it performs (for a matrix or an iteration, its level and index)."""

    kind: StepKind
    partition_key: str
    action: Action

    @property
    def run_key(self) -> str:
        # Dagster deduplicates a run key forever: one run per (kind, partition key).
        return f"{self.kind}:{self.partition_key}"


def next_step(ctx: CompileHandle, outlook: Outlook | None = None) -> Step | None:
    """The step the policy asks for now (from `outlook` when the caller has just derived it);
    None once the compile is finalized."""
    outlook = outlook or ctx.look()
    named = step_of(ctx.cdir.key, outlook.action)
    if named is None:
        return None
    kind, key = named
    return Step(kind, key, outlook.action)


def run_step(ctx: CompileHandle, step: Step) -> None:
    """Run one step in this process, alone among the compile's steps (as each Dagster step is).

    Each step checks on its own that it is the policy's next (CompileHandle.expect), and
    only when it has no stored record to resume from.
    """
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
        d = Iteration(ctx, level, index).load("decision.json", DecisionRecord).decision
        verdict = "accepted" if d.accepted else "rejected"
        return f"{iteration_label(level, index)}: {d.coordinate} {verdict} ({d.reason}) {tail}"
    if step.kind == "inputs" and ctx.cdir.has_batch(INPUT_BATCH):
        traces = ctx.cdir.traces(INPUT_BATCH)
        failed = [t.error_category for t in traces if t.error_category]
        if failed:
            kinds = ", ".join(sorted(set(failed)))
            every = "all " if len(failed) == len(traces) else ""
            return f"inputs {step.partition_key}: {every}{len(failed)} of {len(traces)} rollouts failed ({kinds}) {tail}"
    return f"{step.kind} {step.partition_key} done {tail}"
