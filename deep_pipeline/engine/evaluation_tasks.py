"""Evaluating a task set's compile with verifiers (SPEC §11 "After the compile"): every task,
training and held-out, per task and pooled per split.

Each task is evaluated as a compile of one task is (engine/evaluation.py), with its own
prompt and task_dir from its stored bundle and its own verifier: its bundle's `verifier`,
else `--verifier`. Its spec names the task, so each task has its own `<n>/` folder with
its rollouts, verdicts and `results/nNN.json`, shared and resumed exactly as a one-task
evaluation's. A task with no verifier (neither its bundle nor the flag) is listed as such;
only when no task has one is the evaluation refused. The pooled figures of the set go to
`tasks/nNN-<numbers>.json` of the evaluation folder (`<numbers>`: each task's `<n>` in the
set's order, `x` for a task without a verifier). This is only read after the compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deep_pipeline.core.stats import Interval, newcombe_difference, wilson
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.core.config import DURATION_MAX_S
from deep_pipeline.engine.evaluation import (DEFAULT_ROLLOUTS, SIDES, EvaluationResult, EvaluationSpec, Progress,
                                             _evaluation_lock, _side, check_finished, evaluate, evaluation_folder,
                                             evaluation_runner, summarize, task_set_dir)
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.errors import InputError
from deep_pipeline.llm.accounting import cost_text
from deep_pipeline.rollouts.verifier import DEFAULT_VERIFIER_TIMEOUT_S, check_verifier
from deep_pipeline.store import atomic_write_json

Split = Literal["training", "held_out"]
SPLITS: tuple[Split, ...] = ("training", "held_out")


@dataclass(frozen=True)
class SetTask:
    """One task of a compile's set, as an evaluation sees it (after the compile: held-out ones too)."""

    name: str
    split: Split
    label: str  # t<i> among the training tasks, h<i> among the held-out ones
    stored: str  # its bundle's copy, relative to the compile folder
    prompt: str
    task_dir: str | None
    verifier: str | None  # its bundle's own


def set_tasks(cdir: CompileDir, record: CompileRecord) -> list[SetTask]:
    """Every task of the compile, in the set's order, read from its stored bundle."""
    tasks, seen = [], {"training": 0, "held_out": 0}
    for entry in record.task_entries:
        bundle = cdir.bundle(entry.stored)
        label = f"{'t' if entry.split == 'training' else 'h'}{seen[entry.split]}"
        seen[entry.split] += 1
        task_dir = entry.task_dir if record.tasks is not None else record.task_dir
        tasks.append(SetTask(entry.task, entry.split, label, entry.stored, bundle.prompt, task_dir, bundle.verifier))
    return tasks


class TaskResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    split: Split
    verifier: str | None  # None: no verifier, neither its bundle's nor --verifier
    result: EvaluationResult | None = None


class PooledResult(BaseModel):
    """One split's rollouts together: every verified task's, N a side each."""

    model_config = ConfigDict(extra="forbid")

    split: Split
    tasks: list[str]
    rollouts: int  # per side, over the tasks
    fast_passed: int
    final_passed: int
    fast_rate: float
    final_rate: float
    fast_interval: Interval
    final_interval: Interval
    difference: float  # final rate - fast rate
    difference_interval: Interval


class TaskSetResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compile_key: str
    rollouts: int  # N, per side and task
    runner: str
    agent_model: str
    verifier_timeout_s: float
    tasks: list[TaskResult]
    pooled: list[PooledResult]  # per split with a verified task, training first
    no_verifier: list[str]
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    verifier_signal_used: Literal[False] = False
    folder: str  # the pooled figures' file

    def format(self) -> str:
        return format_tasks(self)


def pool(split: Split, results: list[EvaluationResult]) -> PooledResult:
    n = sum(r.rollouts for r in results)
    fast, final = sum(r.fast.passed for r in results), sum(r.final.passed for r in results)
    return PooledResult(split=split, tasks=[r.task or "" for r in results], rollouts=n, fast_passed=fast,
                        final_passed=final, fast_rate=fast / n, final_rate=final / n, fast_interval=wilson(fast, n),
                        final_interval=wilson(final, n), difference=(final - fast) / n,
                        difference_interval=newcombe_difference(final, n, fast, n))


def evaluate_compile(cdir: CompileDir, *, verifier: str | None = None, rollouts: int = DEFAULT_ROLLOUTS,
                     verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S, api_keys: dict[str, str] | None = None,
                     progress: Progress | None = None) -> EvaluationResult | TaskSetResult:
    """`deep-pipeline evaluate`: a compile of one task as engine/evaluation.evaluate does it (its
    records and figures unchanged); a task set's on every task, training and held-out."""
    if cdir.record().tasks is None:
        return evaluate(cdir, verifier=verifier, rollouts=rollouts, verifier_timeout_s=verifier_timeout_s,
                        api_keys=api_keys, progress=progress)
    if not 0 < verifier_timeout_s <= DURATION_MAX_S:
        raise InputError(f"--verifier-timeout: {verifier_timeout_s:g}; expected a number of seconds above 0 "
                         f"and at most {DURATION_MAX_S:g} (a week)")
    return evaluate_tasks(cdir, verifier=verifier, rollouts=rollouts, verifier_timeout_s=verifier_timeout_s,
                          api_keys=api_keys, progress=progress)


def evaluate_tasks(cdir: CompileDir, *, verifier: str | None, rollouts: int, verifier_timeout_s: float,
                   api_keys: dict[str, str] | None = None, progress: Progress | None = None) -> TaskSetResult:
    """Every task's evaluation (those with a verifier), then the pooled figures per split."""
    from deep_pipeline.rollouts.base import RolloutTask

    record, report = check_finished(cdir, rollouts)
    tasks = set_tasks(cdir, record)
    if verifier is not None:
        check_verifier(verifier, "--verifier")
    templates: dict[str, str | None] = {}
    for task in tasks:  # a task's own verifier first: a set's tasks may each bring their own test suite
        if task.verifier is not None:
            check_verifier(task.verifier, f"{cdir.path / task.stored}: verifier")
        templates[task.name] = task.verifier if task.verifier is not None else verifier
    if all(t is None for t in templates.values()):
        raise InputError(f"{cdir.key}: verifier: no task bundle has one and none was given; "
                         "expected --verifier CMD (a command with {workdir}, exit 0 = pass)")
    results: list[TaskResult] = []
    numbers: list[str] = []
    with _evaluation_lock(cdir):
        for task in tasks:
            template = templates[task.name]
            if template is None:
                results.append(TaskResult(task=task.name, split=task.split, verifier=None))
                numbers.append("x")
                continue
            spec = EvaluationSpec(verifier=template, verifier_timeout_s=verifier_timeout_s, task=task.name)
            number, folder = evaluation_folder(cdir, spec)
            runner = evaluation_runner(cdir, record, folder, api_keys)
            rollout_task = RolloutTask(prompt=task.prompt, task_dir=task.task_dir, skill_name=record.skill_name)
            packages = {"fast": (cdir.input_skill, record.skill_sha256),
                        "final": (cdir.final_skill, report.final_skill_sha256)}
            told = (lambda line, name=task.name: progress(f"{name}: {line}")) if progress else None
            done = {side: _side(cdir, runner, folder, number, spec, side, *packages[side], rollouts, told,
                                task=rollout_task) for side in SIDES}
            result = summarize(cdir.key, number, folder, spec, record, done, rollouts)
            atomic_write_json(folder / "results" / f"n{rollouts:02d}.json", result)
            results.append(TaskResult(task=task.name, split=task.split, verifier=template, result=result))
            numbers.append(str(number))
        verified = [r.result for r in results if r.result is not None]
        pooled = [pool(split, [r.result for r in results if r.result is not None and r.split == split])
                  for split in SPLITS if any(r.result is not None and r.split == split for r in results)]
        costs = [r.cost_usd for r in verified]
        path = task_set_dir(cdir) / f"n{rollouts:02d}-{'-'.join(numbers)}.json"
        summary = TaskSetResult(
            compile_key=cdir.key, rollouts=rollouts, runner=record.config.runner, agent_model=record.config.agent_model,
            verifier_timeout_s=verifier_timeout_s, tasks=results, pooled=pooled,
            no_verifier=[r.task for r in results if r.result is None],
            prompt_tokens=sum(r.prompt_tokens for r in verified),
            completion_tokens=sum(r.completion_tokens for r in verified),
            cost_usd=None if any(c is None for c in costs) else sum(costs), folder=str(path))
        atomic_write_json(path, summary)
    return summary


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def rate_cell(passed: int, n: int, interval: Interval) -> str:
    return f"{f'{passed}/{n}':>7} {pct(passed / n):>5} {f'[{pct(interval.low)}, {pct(interval.high)}]':<11}"


def diff_cell(d: float, di: Interval) -> str:
    return f"{100 * d:+5.0f} pts [{100 * di.low:+.0f}, {100 * di.high:+.0f}]"


def overfit_sentence(training: float | None, held_out: float | None, what: str) -> str | None:
    """The plain sentence of SPEC §11: S_final gained on the training tasks and lost on the held-out ones."""
    if training is None or held_out is None or not (training > 0 and held_out < 0):
        return None
    return f"S_final gained on the training tasks and lost on the held-out ones ({what})."


def format_tasks(result: TaskSetResult) -> str:
    """Per task and pooled per split, training and held-out side by side."""
    lines = [f"evaluation of {result.compile_key}: {result.rollouts} rollouts a side per task "
             f"({result.runner}, {result.agent_model})",
             f"{'task':<22} {'split':<9} {'S_fast':>7} {'rate':>5} {'95%':<11}  {'S_final':>7} {'rate':>5} "
             f"{'95%':<11}  final - fast, 95% (Newcombe)"]
    for split in SPLITS:
        for entry in (t for t in result.tasks if t.split == split):
            r = entry.result
            if r is None:
                lines.append(f"{entry.task:<22} {split:<9} no verifier")
                continue
            lines.append(f"{entry.task:<22} {split:<9} {rate_cell(r.fast.passed, r.rollouts, r.fast.interval)}  "
                         f"{rate_cell(r.final.passed, r.rollouts, r.final.interval)}  "
                         f"{diff_cell(r.difference, r.difference_interval)}  (evaluation {r.number})")
        for p in (p for p in result.pooled if p.split == split):
            lines.append(f"{'pooled':<22} {split:<9} {rate_cell(p.fast_passed, p.rollouts, p.fast_interval)}  "
                         f"{rate_cell(p.final_passed, p.rollouts, p.final_interval)}  "
                         f"{diff_cell(p.difference, p.difference_interval)}")
    by_split = {p.split: p.difference for p in result.pooled}
    sentence = overfit_sentence(by_split.get("training"), by_split.get("held_out"),
                                f"pass rate {100 * by_split.get('training', 0):+.0f} pts on training, "
                                f"{100 * by_split.get('held_out', 0):+.0f} pts held out")
    if sentence:
        lines.append(sentence)
    if result.no_verifier:
        lines.append(f"no verifier (neither the bundle nor --verifier): {', '.join(result.no_verifier)}")
    lines.append(f"rollouts: {result.prompt_tokens + result.completion_tokens} tokens, {cost_text(result.cost_usd)}; "
                 f"records: {result.folder}")
    return "\n".join(lines)
