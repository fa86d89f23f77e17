"""The held-out judged comparison (SPEC §11 "After the compile"): no verifier needed.

For each held-out task, S_fast and S_final are rolled out N times each with the compile's
runner and agent model (engine/evaluation.py's rollout machinery), then the compile's
judge compares the two whole packages' traces blind, in both orders: S_final shown as A
in one call and as B in the other, the seeded order (from the compile key and the task)
first. Each call's answer is S_final's win, tie or loss; per task and pooled over the
held-out tasks the score is S_final's win rate (core/winrate.py) with a Wilson interval.

Records, in the evaluation folder's `judged/`, all written atomically:
- `rollouts/<side>/judged-<h i>-<side>-r<n>.json`: each rollout's trace, written when it is
  done; a rerun or a larger N reuses them.
- `llm/`: the judge's and the chat agent's own cache and calls log (never the compile's, so
  its budget and history are untouched); each call has its own key
  (`judged/<h i>/final-as-<A|B>` and the messages), so a rerun repeats none.
- `raw/`, `agents/`: as an evaluation's.
- `nNN.json`: the figures for N rollouts a side.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.comparison import call_orders
from deep_pipeline.core.decision import order_seed
from deep_pipeline.core.winrate import WinRate, win_rate
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.evaluation import (SIDES, Progress, _evaluation_lock, check_finished, evaluation_runner,
                                             judged_dir, roll_out)
from deep_pipeline.engine.evaluation_tasks import SetTask, overfit_sentence, pct, set_tasks
from deep_pipeline.errors import InputError
from deep_pipeline.llm.accounting import Usage, cost_text, usage_of_calls
from deep_pipeline.llm.package_judge import PackageVerdict, judge_packages
from deep_pipeline.store import atomic_write_json


class JudgedTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    label: str  # h<i>: its place among the held-out tasks
    fast_trace_ids: list[str]
    final_trace_ids: list[str]
    calls: list[PackageVerdict]  # in the order asked: the seeded order first
    win: WinRate


class JudgedResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compile_key: str
    rollouts: int  # N, per side and task
    runner: str
    agent_model: str
    judge_model: str
    tasks: list[JudgedTask]
    pooled: WinRate  # every held-out task's calls together
    accepted_edits: int  # the compile's accepted edits: what it gained on its training tasks
    judge_usage: Usage = Field(default_factory=Usage)
    prompt_tokens: int  # the rollouts'
    completion_tokens: int
    cost_usd: float | None  # the rollouts'; None when some rollout's cost is unknown
    verifier_signal_used: Literal[False] = False
    folder: str

    def format(self) -> str:
        return format_judged(self)


def no_holdout_line(key: str) -> str:
    return f"{key}: no held-out task to compare on; compile with --holdout"


def judge_client(cdir: CompileDir, record, folder: Path, api_keys: dict[str, str] | None):
    """The compile's judge model, with its own cache and calls log under `folder` and no budget."""
    from deep_pipeline.engine.services import role_model_settings
    from deep_pipeline.home import dagster_home
    from deep_pipeline.llm.client import ModelClient

    return ModelClient(role_model_settings(record.config, "judge", api_keys), "judge",
                       cache_dir=folder / "llm" / "cache", calls_log=folder / "llm" / "calls.jsonl",
                       limiter=threading.BoundedSemaphore(record.config.parallel), local_home=dagster_home())


def judge_held_out(cdir: CompileDir, *, rollouts: int, api_keys: dict[str, str] | None = None,
                   progress: Progress | None = None) -> JudgedResult:
    """Roll out both packages on each held-out task, ask the judge in both orders, store and return the figures."""
    from deep_pipeline.rollouts.base import RolloutTask

    record = cdir.record()
    held_out = [task for task in set_tasks(cdir, record) if task.split == "held_out"]
    if not held_out:
        raise InputError(no_holdout_line(cdir.key))
    if record.config.runner == "replay":
        raise InputError(f"{cdir.key}: --judge: runner 'replay' cannot roll out a held-out task (it serves recorded "
                         "traces); compare a compile made with the chat, command or mini-swe-agent runner")
    record, report = check_finished(cdir, rollouts)
    folder = judged_dir(cdir)
    packages = {"fast": (cdir.input_skill, record.skill_sha256), "final": (cdir.final_skill, report.final_skill_sha256)}
    with _evaluation_lock(cdir):
        runner = evaluation_runner(cdir, record, folder, api_keys)
        client = judge_client(cdir, record, folder, api_keys)
        judged, traces, calls = [], [], []
        for task in held_out:
            rollout_task = RolloutTask(prompt=task.prompt, task_dir=task.task_dir, skill_name=record.skill_name)
            told = (lambda line, name=task.name: progress(f"{name}: {line}")) if progress else None
            made = {side: [trace for trace, _ in roll_out(
                runner, rollout_task, *packages[side], batch=f"judged-{task.label}-{side}", n=rollouts,
                records=folder / "rollouts" / side, archive=folder / "raw", spec=None, side=side, progress=told)]
                for side in SIDES}
            traces += made["fast"] + made["final"]
            entry, records = _judge_task(client, cdir.key, task, made["fast"], made["final"])
            calls += records
            judged.append(entry)
            if progress:
                progress(f"{task.name}: S_final's win rate {pct(entry.win.rate)} over {entry.win.calls} judge calls")
        costs = [t.cost_usd for t in traces]
        accepted = sum(1 for d in report.decisions if d.accepted)
        result = JudgedResult(
            compile_key=cdir.key, rollouts=rollouts, runner=record.config.runner,
            agent_model=record.config.agent_model, judge_model=record.config.judge_model, tasks=judged,
            pooled=win_rate([c.outcome for t in judged for c in t.calls]), accepted_edits=accepted,
            judge_usage=usage_of_calls(calls), prompt_tokens=sum(t.prompt_tokens or 0 for t in traces),
            completion_tokens=sum(t.completion_tokens or 0 for t in traces),
            cost_usd=None if any(c is None for c in costs) else sum(costs),
            folder=str(folder / f"n{rollouts:02d}.json"))
        atomic_write_json(folder / f"n{rollouts:02d}.json", result)
    return result


def _judge_task(client, key: str, task: SetTask, fast, final) -> tuple[JudgedTask, list]:
    """Both orders, the seeded one first; S_final is the 'candidate' of call_orders."""
    verdicts, records = [], []
    for label, _ in call_orders(2, 1, order_seed(f"{key}/judged/{task.name}")):
        verdict, calls = judge_packages(client, step_key=f"judged/{task.label}/final-as-{label}",
                                        task_prompt=task.prompt, fast_traces=fast, final_traces=final,
                                        final_label=label)
        verdicts.append(verdict)
        records += calls
    return JudgedTask(task=task.name, label=task.label, fast_trace_ids=[t.trace_id for t in fast],
                      final_trace_ids=[t.trace_id for t in final], calls=verdicts,
                      win=win_rate([v.outcome for v in verdicts])), records


def win_cell(win: WinRate) -> str:
    return (f"{win.wins:>4} {win.ties:>4} {win.losses:>6}  {pct(win.rate):>5}  "
            f"[{pct(win.interval.low)}, {pct(win.interval.high)}]")


def format_judged(result: JudgedResult) -> str:
    lines = [f"held-out judged comparison of {result.compile_key}: {result.rollouts} rollouts a side per task "
             f"({result.runner}, {result.agent_model}); judge {result.judge_model}, both orders",
             f"{'held-out task':<22} {'wins':>4} {'ties':>4} {'losses':>6}  {'rate':>5}  95% interval "
             "(S_final's wins over the judge's calls: win 1, tie 0.5, loss 0)"]
    for task in result.tasks:
        lines.append(f"{task.task:<22} {win_cell(task.win)}")
    lines.append(f"{'pooled (held-out)':<22} {win_cell(result.pooled)}")
    if result.pooled.rate < 0.5 and result.accepted_edits:
        lines.append(overfit_sentence(1.0, result.pooled.rate - 0.5, (
            f"{result.accepted_edits} edit(s) accepted on the training tasks, win rate {pct(result.pooled.rate)} "
            "on the held-out ones")) or "")
    usage = result.judge_usage
    lines.append(f"judge: {usage.calls} calls ({usage.cache_hits} from the cache), {cost_text(usage.cost_usd)}; "
                 f"rollouts: {result.prompt_tokens + result.completion_tokens} tokens, {cost_text(result.cost_usd)}; "
                 f"records: {result.folder}")
    return "\n".join(lines)
