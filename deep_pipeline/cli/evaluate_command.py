"""`deep-pipeline evaluate COMPILE`: S_fast against S_final with the tasks' verifiers (SPEC §10, §11), or
`--judge`: the held-out judged comparison (SPEC §11)."""

from __future__ import annotations

import argparse
import json

from deep_pipeline import home as homes
from deep_pipeline.cli.compile_commands import _home, _say
from deep_pipeline.engine.evaluation import DEFAULT_ROLLOUTS
from deep_pipeline.rollouts.verifier import ANSWER_FILE, DEFAULT_VERIFIER_TIMEOUT_S


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="measure S_final against S_fast with the tasks' verifiers, or by the judge on held-out tasks",
        description="Roll out S_fast (the compile's input skill) and S_final N times each with the compile's runner "
        "and agent model, run the verifier in each rollout's work directory after the agent finished (exit 0 = "
        "pass), and print each side's pass rate with its 95% Wilson interval and the difference (final - fast) with "
        "its 95% Newcombe interval, with the rollouts' tokens and cost. A compile of a task set (--task, --holdout) "
        "is evaluated on every task, training and held-out: a row per task (its prompt and task_dir from its "
        "bundle; its verifier its bundle's own, else --verifier; a task with neither is listed as 'no verifier') "
        "and a pooled row per split, with a plain sentence when S_final gained on the training tasks and lost on "
        "the held-out ones. With --judge (no verifier needed) S_fast and S_final are rolled out on each held-out "
        "task and the compile's judge compares the two packages' traces blind, in both orders: S_final's win rate "
        "(win 1, tie 0.5, loss 0) with its 95% Wilson interval, per task and pooled. The compile must be finalized "
        "and not made with the replay runner. Records go to <compile>/evaluations/<n>/ (one <n> per distinct "
        "verifier and timeout, and task of a set; a set's pooled figures in evaluations/tasks/) and "
        "<compile>/evaluations/judged/ (the judge's calls in its own cache and log, never the compile's budget); "
        "running it again reuses the finished rollouts and judge answers, and a larger N adds only the missing "
        "rollouts. Nothing it writes is read by the compile. Exit 2: bad input (unknown or unfinished compile, no "
        "verifier at all, a verifier without {workdir}, N < 1, --judge on a compile without a held-out task); "
        "exit 1: a verifier that cannot be found or run, a judge call that failed, or a rollout the machinery "
        "failed (run it again).",
    )
    p.add_argument("compile_key", metavar="COMPILE")
    p.add_argument("--verifier", metavar="CMD",
                   help="shell command template with {workdir} (replaced by the rollout's work directory, "
                   "shell-quoted; also its cwd); default: the task bundle's `verifier` field (in a task set, a task's "
                   "own bundle verifier wins and this is used for the tasks without one). The chat runner "
                   f"has no workdir: its final answer is written to {ANSWER_FILE} in a fresh temporary one")
    p.add_argument("--rollouts", type=int, default=DEFAULT_ROLLOUTS, metavar="N",
                   help=f"rollouts per side, and per task of a set (default {DEFAULT_ROLLOUTS}, at least 1)")
    p.add_argument("--verifier-timeout", type=float, default=DEFAULT_VERIFIER_TIMEOUT_S, metavar="SECONDS",
                   help=f"a verifier still running then is killed with its process group and counts as a fail "
                   f"(default {DEFAULT_VERIFIER_TIMEOUT_S:g}, at most 604800: a week)")
    p.add_argument("--judge", action="store_true",
                   help="the held-out judged comparison instead: S_final's win rate against S_fast by the compile's "
                   "judge on each held-out task, both orders (needs a compile with --holdout; no verifier: "
                   "--verifier and --verifier-timeout are not used)")
    p.add_argument("--json", action="store_true", help="print the result record as JSON")
    p.add_argument("--quiet", action="store_true", help="no line per rollout")
    p.set_defaults(handler=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from deep_pipeline.engine.compiles import find_compile
    from deep_pipeline.engine.evaluation import format_result
    from deep_pipeline.engine.evaluation_tasks import evaluate_compile

    _home(create=False)  # no Dagster instance: the evaluation's records live in the compile's folder
    cdir = find_compile(homes.store_root(), args.compile_key)
    progress = None if args.quiet or args.json else (lambda line: _say(args, line))
    if args.judge:
        from deep_pipeline.engine.evaluation_judged import judge_held_out

        result = judge_held_out(cdir, rollouts=args.rollouts, progress=progress)
    else:
        result = evaluate_compile(cdir, verifier=args.verifier, rollouts=args.rollouts,
                                  verifier_timeout_s=args.verifier_timeout, progress=progress)
    print(json.dumps(result.model_dump(mode="json"), indent=2) if args.json else format_result(result))
    return 0
