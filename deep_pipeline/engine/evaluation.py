"""Evaluating a finalized compile with a verifier (SPEC §10): after the compile, never inside it.

S_fast (the compile's input skill) and S_final are each rolled out N times with the
compile's runner and agent model; the verifier runs in each rollout's workdir; each
side's pass rate gets a 95 % Wilson interval and the difference (final - fast) a 95 %
Newcombe interval.

Records, all under `<compile>/evaluations/<n>/` and written atomically:
- `spec.json`: the verifier and its timeout. `<n>` numbers the distinct verifiers
  (1, 2, ... in the order first used): a verdict depends on the verifier, so rollouts
  are shared only by evaluations with the same one, whatever their N. A larger N reuses
  rollouts 0..N-1 already made and adds the rest; a rerun makes no new rollout.
- `rollouts/<side>/<trace_id>.json`: one rollout's trace and its verdict, written together
  the moment the verifier is done (a crash loses at most the rollouts still running).
- `raw/<batch>/<index>/`: what the agent printed; `llm/` the chat agent's own cache and
  call log; `agents/` running agents (as a compile's).
- `results/n<N>.json`: the figures for N rollouts a side.

A task set's compile (SPEC §11) is evaluated per task by engine/evaluation_tasks.py: each
task's spec names it (so each task has its own `<n>`, laid out as above), and the set's
pooled figures go to `<compile>/evaluations/tasks/`; the held-out judged comparison
(engine/evaluation_judged.py) writes `<compile>/evaluations/judged/`. Both roll out with
`roll_out` below.

Nothing here is read by a compile step: the compile's history reads matrices/,
iterations/, traces/ and its own llm/ only, so `verifier_signal_used` stays false.
The evaluation's model calls go to its own log, never to the compile's budget.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from deep_pipeline.core.config import DURATION_MAX_S
from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, Trace
from deep_pipeline.core.pairs import omit_when_none
from deep_pipeline.core.stats import Interval, newcombe_difference, wilson
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import CompileRecord, Report
from deep_pipeline.locks import file_lock
from deep_pipeline.errors import InputError, StepError, one_line
from deep_pipeline.rollouts.verifier import (
    DEFAULT_VERIFIER_TIMEOUT_S,
    Verdict,
    check_verifier,
    run_verifier,
)
from deep_pipeline.store import atomic_write_json, read_model
from deep_pipeline.llm.accounting import cost_text

DEFAULT_ROLLOUTS = 5
Side = Literal["fast", "final"]
SIDES: tuple[Side, ...] = ("fast", "final")
Progress = Callable[[str], None]


class EvaluationSpec(BaseModel):
    """What makes two evaluations share rollouts: the same verifier, run the same way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verifier: str
    verifier_timeout_s: float = Field(gt=0, le=DURATION_MAX_S)
    # A task set's (SPEC §11): the task its rollouts are of, so each task has its own `<n>`;
    # None (and not written) for a compile of one task, whose spec.json is as it always was.
    task: str | None = None

    @model_serializer(mode="wrap")
    def _one_task_writes_no_task(self, handler):
        return omit_when_none(handler(self), self, ("task",))


class EvaluatedRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    side: Side
    trace: Trace
    verdict: Verdict


class SideResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    side: Side
    skill_sha256: str
    rollouts: int
    passed: int
    rate: float
    interval: Interval
    trace_ids: list[str]
    failures: dict[str, str] = Field(default_factory=dict)  # trace id -> the verifier's reason


class EvaluationResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compile_key: str
    number: int
    verifier: str
    verifier_timeout_s: float
    rollouts: int  # N, per side
    runner: str
    agent_model: str
    fast: SideResult
    final: SideResult
    difference: float  # final rate - fast rate
    difference_interval: Interval
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None when some rollout's cost is unknown
    verifier_signal_used: Literal[False] = False  # no compile step reads any of this (SPEC §10)
    folder: str
    task: str | None = None  # a task set's task (SPEC §11); None (not written) for a compile of one task

    @model_serializer(mode="wrap")
    def _one_task_writes_no_task(self, handler):
        return omit_when_none(handler(self), self, ("task",))


def evaluations_dir(cdir: CompileDir) -> Path:
    return cdir.evaluations_dir


def task_set_dir(cdir: CompileDir) -> Path:
    """A task set's pooled figures (SPEC §11); each task's own rollouts are in its `<n>/`."""
    return evaluations_dir(cdir) / "tasks"


def judged_dir(cdir: CompileDir) -> Path:
    """The held-out judged comparison's records (SPEC §11)."""
    return evaluations_dir(cdir) / "judged"


def check_finished(cdir: CompileDir, rollouts: int) -> tuple[CompileRecord, Report]:
    """A finalized compile not made with the replay runner, and N >= 1: (record, report)."""
    if rollouts < 1:
        raise InputError(f"--rollouts: {rollouts}; expected at least 1 rollout per side")
    record = cdir.record()
    if not cdir.report_path.is_file():
        raise InputError(f"{cdir.key}: not finalized (no report.json); only a finished compile can be evaluated "
                         f"(`deep-pipeline resume {cdir.key}` carries it on)")
    if record.config.runner == "replay":
        from deep_pipeline.rollouts.replay import REFUSES_VERIFY

        raise InputError(REFUSES_VERIFY)
    return record, read_model(cdir.report_path, Report)


def check_request(cdir: CompileDir, verifier: str | None, rollouts: int) -> tuple[CompileRecord, Report, str]:
    """Everything bad input can be, refused before anything is written: (record, report, verifier)."""
    record, report = check_finished(cdir, rollouts)
    template = verifier if verifier is not None else cdir.bundle().verifier
    if template is None:
        raise InputError(f"{cdir.input_bundle}: verifier: the task bundle has none and none was given; "
                         "expected --verifier CMD (a command with {workdir}, exit 0 = pass)")
    check_verifier(template, "--verifier" if verifier is not None else f"{cdir.input_bundle}: verifier")
    return record, report, template


def evaluate(
    cdir: CompileDir,
    *,
    verifier: str | None = None,
    rollouts: int = DEFAULT_ROLLOUTS,
    verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S,
    api_keys: dict[str, str] | None = None,
    progress: Progress | None = None,
) -> EvaluationResult:
    """Roll out S_fast and S_final `rollouts` times each, verify each, store and return the figures.
    A compile of one task; a task set's: engine/evaluation_tasks.evaluate_compile."""
    if not 0 < verifier_timeout_s <= DURATION_MAX_S:
        raise InputError(f"--verifier-timeout: {verifier_timeout_s:g}; expected a number of seconds above 0 "
                         f"and at most {DURATION_MAX_S:g} (a week)")
    if cdir.record().tasks is not None:
        raise InputError(f"{cdir.key}: a task set's compile is evaluated on every task: "
                         "engine/evaluation_tasks.evaluate_compile")
    record, report, template = check_request(cdir, verifier, rollouts)
    spec = EvaluationSpec(verifier=template, verifier_timeout_s=verifier_timeout_s)
    with _evaluation_lock(cdir):
        number, folder = evaluation_folder(cdir, spec)
        runner = evaluation_runner(cdir, record, folder, api_keys)
        sides = {
            "fast": (cdir.input_skill, record.skill_sha256),
            "final": (cdir.final_skill, report.final_skill_sha256),
        }
        done = {side: _side(cdir, runner, folder, number, spec, side, *sides[side], rollouts, progress) for side in SIDES}
        result = summarize(cdir.key, number, folder, spec, record, done, rollouts)
        atomic_write_json(folder / "results" / f"n{rollouts:02d}.json", result)
    return result


@contextlib.contextmanager
def _evaluation_lock(cdir: CompileDir) -> Iterator[None]:
    """One evaluation of a compile at a time: two would race for `<n>` and for the same rollouts."""
    with file_lock(evaluations_dir(cdir) / "lock"):
        yield


def evaluation_folder(cdir: CompileDir, spec: EvaluationSpec) -> tuple[int, Path]:
    """The folder of this verifier's evaluations: found by its spec.json, else the next number."""
    root = evaluations_dir(cdir)
    numbers = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and (p / "spec.json").is_file())
    for number in numbers:
        if read_model(root / str(number) / "spec.json", EvaluationSpec) == spec:
            return number, root / str(number)
    number = (numbers[-1] + 1) if numbers else 1
    atomic_write_json(root / str(number) / "spec.json", spec)
    return number, root / str(number)


def evaluation_runner(cdir: CompileDir, record: CompileRecord, folder: Path, api_keys: dict[str, str] | None):
    """The compile's runner and agent model, with the agent's calls in the evaluation's own cache and log.

    Not engine/services.build_services: that one logs into the compile's calls.jsonl,
    which the compile's history and budget read; an evaluation must stay out of both.
    """
    from deep_pipeline.engine.services import agent_model_settings
    from deep_pipeline.home import dagster_home
    from deep_pipeline.llm.client import ModelClient
    from deep_pipeline.rollouts import make_runner

    config = record.config
    limiter = threading.BoundedSemaphore(config.parallel)
    home = dagster_home()
    settings = agent_model_settings(config, api_keys, timeout_s=config.rollout_timeout_s)

    def agent_client() -> ModelClient:
        return ModelClient(settings, "agent", cache_dir=folder / "llm" / "cache",
                           calls_log=folder / "llm" / "calls.jsonl", limiter=limiter, local_home=home)

    # As build_services gives it to subprocess agents (their own timeout is the rollout's).
    return make_runner(config, model_client=agent_client, agent_settings=agent_model_settings(config, api_keys),
                       local_home=home, agents_dir=folder / "agents")


def _side(cdir: CompileDir, runner, folder: Path, number: int, spec: EvaluationSpec, side: Side, package: Path,
          skill_sha256: str, n: int, progress: Progress | None, task=None) -> list[EvaluatedRollout]:
    """N verified rollouts of one package; the stored ones are reused, the missing ones made.
    `task`: the RolloutTask (a task set's task); default the compile's one task."""
    from deep_pipeline.rollouts.base import RolloutTask

    if task is None:
        record = cdir.record()
        task = RolloutTask(prompt=cdir.bundle().prompt, task_dir=record.task_dir, skill_name=record.skill_name)
    made = roll_out(runner, task, package, skill_sha256, batch=f"eval{number}-{side}", n=n,
                    records=folder / "rollouts" / side, archive=folder / "raw", spec=spec, side=side, progress=progress)
    return [EvaluatedRollout(side=side, trace=trace, verdict=verdict) for trace, verdict in made]


def roll_out(runner, task, package: Path, skill_sha256: str, *, batch: str, n: int, records: Path, archive: Path,
             spec: EvaluationSpec | None, side: str, progress: Progress | None) -> list[tuple[Trace, Verdict | None]]:
    """N rollouts of one package on one task, each stored the moment it is done (with its verdict
    when `spec` names a verifier, as an EvaluatedRollout; else the bare Trace); stored ones are reused."""
    from deep_pipeline.rollouts.base import trace_id

    model = EvaluatedRollout if spec is not None else Trace
    done: dict[int, tuple[Trace, Verdict | None]] = {}
    for index in range(n):
        if (path := records / f"{trace_id(batch, index)}.json").is_file():
            stored = read_model(path, model)
            done[index] = (stored.trace, stored.verdict) if spec is not None else (stored, None)
    verdicts: dict[int, Verdict] = {}
    lock = threading.Lock()

    def verify(index: int, workdir: Path) -> None:
        verdict = run_verifier(spec.verifier, workdir, timeout_s=spec.verifier_timeout_s)
        with lock:
            verdicts[index] = verdict

    def store(index: int, trace: Trace) -> None:
        with lock:
            verdict = verdicts.get(index)
        if trace.error_category in MACHINE_FAULT_CATEGORIES or (spec is not None and verdict is None):
            return  # not the skill at work (SPEC §9): made again by the next run
        done[index] = (trace, verdict)
        written = EvaluatedRollout(side=side, trace=trace, verdict=verdict) if spec is not None else trace
        atomic_write_json(records / f"{trace.trace_id}.json", written)
        if progress:
            outcome = ("done" if verdict is None else "pass" if verdict.passed
                       else f"fail ({one_line(verdict.reason, 120)})")
            progress(f"{side} {trace.trace_id}: {outcome}")

    traces = runner.run_batch(package_dir=package, skill_sha256=skill_sha256, task=task, batch=batch, n=n,
                              archive_dir=archive / batch, progress=store,
                              done={i: trace for i, (trace, _) in done.items()},
                              verify=verify if spec is not None else None)
    faults = [t for t in traces if t.error_category in MACHINE_FAULT_CATEGORIES]
    if faults:
        first = faults[0]
        raise StepError(f"evaluation {batch}: {len(faults)} of {n} rollouts failed outside the agent "
                        f"({first.trace_id}: {first.error_category}: {one_line(first.error_reason, 200)}); "
                        "run the evaluation again to redo only those")
    return [done[index] for index in range(n)]


def summarize(key: str, number: int, folder: Path, spec: EvaluationSpec, record: CompileRecord,
              done: dict[Side, list[EvaluatedRollout]], n: int) -> EvaluationResult:
    fast, final = (_side_result(side, done[side], n) for side in SIDES)
    traces = [r.trace for side in SIDES for r in done[side]]
    costs = [t.cost_usd for t in traces]
    return EvaluationResult(
        compile_key=key, number=number, verifier=spec.verifier, verifier_timeout_s=spec.verifier_timeout_s,
        rollouts=n, runner=record.config.runner, agent_model=record.config.agent_model, fast=fast, final=final,
        difference=final.rate - fast.rate, difference_interval=newcombe_difference(final.passed, n, fast.passed, n),
        prompt_tokens=sum(t.prompt_tokens or 0 for t in traces),
        completion_tokens=sum(t.completion_tokens or 0 for t in traces),
        cost_usd=None if any(c is None for c in costs) else sum(costs), folder=str(folder), task=spec.task,
    )


def _side_result(side: Side, rollouts: list[EvaluatedRollout], n: int) -> SideResult:
    passed = sum(r.verdict.passed for r in rollouts)
    return SideResult(
        side=side, skill_sha256=rollouts[0].trace.skill_sha256, rollouts=n, passed=passed, rate=passed / n,
        interval=wilson(passed, n), trace_ids=[r.trace.trace_id for r in rollouts],
        failures={r.trace.trace_id: r.verdict.reason for r in rollouts if not r.verdict.passed},
    )


def format_result(result) -> str:
    """The small table `deep-pipeline evaluate` prints (a task set's and the judged comparison's: theirs)."""
    if not isinstance(result, EvaluationResult):
        return result.format()
    def pct(x: float) -> str:
        return f"{100 * x:.0f}%"

    lines = [f"evaluation {result.number} of {result.compile_key}: {result.rollouts} rollouts a side "
             f"({result.runner}, {result.agent_model}); verifier: {result.verifier}",
             f"{'side':<8} {'passed':>8} {'rate':>6}  95% interval"]
    for side in (result.fast, result.final):
        name = "S_fast" if side.side == "fast" else "S_final"
        lines.append(f"{name:<8} {f'{side.passed}/{side.rollouts}':>8} {pct(side.rate):>6}  "
                     f"[{pct(side.interval.low)}, {pct(side.interval.high)}]")
    d, di = result.difference, result.difference_interval
    lines.append(f"{'final - fast':<17} {100 * d:>+5.0f} pts  [{100 * di.low:+.0f}, {100 * di.high:+.0f}] (Newcombe)")
    cost = cost_text(result.cost_usd)
    lines.append(f"rollouts: {result.prompt_tokens + result.completion_tokens} tokens, {cost}; records: {result.folder}")
    return "\n".join(lines)
