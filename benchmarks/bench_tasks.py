"""The task-set benchmark: does judging an edit on several training tasks keep the edits
that help tasks the compile never saw, and reject those that hurt them?

    .venv/bin/python benchmarks/bench_tasks.py [--edits 200] [--seed 0] [--training 3] [--held-out 3]
                                               [--sigma 0.75] [--shared 0.8] [--specific 0.8] [--markdown]

A simulated world of `training` + `held-out` tasks. Every edit has a hidden true effect
on each task: a shared part (N(0, shared)) plus a part of that task alone (N(0, specific)),
so effects are correlated across tasks and some edits help one task and hurt another.
The incumbent's true score is 3 on every task, the candidate's 3 + that task's effect.
A scripted judge answers through the project's real path (ModelClient, litellm with the
scripted provider, llm/comparator.py, core/comparison.py, core/decision.py
`decide_tasks`; response cache in a temporary folder): per call it scores each side as
its true score on the call's task + Gaussian noise (sigma), rounded and clipped to 1..5.
Both orders, one sample, one pair (compare_max_pairs 1: the sequential comparison's later
pairs are bench_compile.py's subject); the same noise for the same (edit, task, order).

Two compiles judge the same edits, each edit on its own (the skill is not carried from
one edit to the next):
- single: a compile of the first training task alone (`decide`, SPEC §6.6);
- task set: a compile of every training task (`decide_tasks`, SPEC §11, max_task_loss 0.5).
It prints, per compile: edits accepted; the true gain summed over accepted edits, as the
mean effect over the training tasks and over the held-out tasks; accepted edits that hurt
a held-out task (its true effect below -0.5); judge calls as the provider counted them.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):  # run as a script: `tests` and bench_gate's world importable
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_gate import OLD_TEXT, UNIT, _trace, half_up  # noqa: E402 - the gate benchmark's unit and traces

from deep_pipeline.core.config import DEFAULT_DIMENSIONS, CompileConfig  # noqa: E402
from deep_pipeline.core.decision import decide_tasks, order_seed  # noqa: E402
from deep_pipeline.core.models import TaskComparison  # noqa: E402
from deep_pipeline.llm.client import ModelClient, ModelSettings  # noqa: E402
from deep_pipeline.llm.comparator import compare_cell  # noqa: E402
from tests.scripted_llm import ScriptedLLM, install, uninstall  # noqa: E402

CONFIG = CompileConfig()
INCUMBENT_TRUE = 3
HURT = -CONFIG.max_task_loss  # a held-out task "hurt": its true effect below this
JUDGE = "bench-tasks-judge"
MARKER = re.compile(r"\[bench edit=(\d+)\]")
TASK_MARK = re.compile(r"\[task=([\w-]+)\]")


def task_prompt(task: str) -> str:
    return f"Write this week's status update for the {task} team. [task={task}]"


def new_text(edit: int) -> str:
    return f"## Steps\nWrite the update, one line per heading. [bench edit={edit}]\n"


def world_effects(edits: int, tasks: list[str], seed: int, shared: float, specific: float) -> list[dict[str, float]]:
    """Each edit's true effect per task: a shared part plus a part of each task alone."""
    rng = random.Random(f"tasks/{seed}")
    effects = []
    for _ in range(edits):
        common = rng.gauss(0, shared)
        effects.append({task: round(common + rng.gauss(0, specific), 3) for task in tasks})
    return effects


class TaskJudge:
    """True score on the call's task + noise; the noise is seeded by (seed, edit, task, order, sample)."""

    def __init__(self, seed: int, sigma: float, effects: list[dict[str, float]]) -> None:
        self.seed, self.sigma, self.effects = seed, sigma, effects
        self._asked: dict[tuple[int, str, str], int] = {}

    def __call__(self, request) -> dict:
        text = request.last_user
        side_a = text.split("<<version A>>", 1)[1].split("<</version A>>", 1)[0]
        side_b = text.split("<<version B>>", 1)[1].split("<</version B>>", 1)[0]
        cand = "A" if MARKER.search(side_a) else "B"
        edit = int((MARKER.search(side_a) or MARKER.search(side_b)).group(1))
        task = TASK_MARK.search(text).group(1)
        sample = self._asked.get((edit, task, cand), 0)
        self._asked[(edit, task, cand)] = sample + 1
        rng = random.Random(f"{self.seed}/{edit}/{task}/{cand}/{sample}")
        true = {cand: INCUMBENT_TRUE + self.effects[edit][task], "B" if cand == "A" else "A": INCUMBENT_TRUE}
        score = {side: min(5, max(1, half_up(value + self.sigma * rng.gauss(0, 1)))) for side, value in true.items()}
        return {"evidence_a": [], "evidence_b": [], "regressions_a": [], "regressions_b": [],
                "reason": "scripted task-set comparison", "task_relevant": True,
                "score_a": score["A"], "score_b": score["B"]}


def judged(client: ModelClient, run: str, edit: int, task: str, seed: int) -> TaskComparison:
    """One training task's comparison of one edit, through the real comparator."""
    incumbent = [_trace(f"{task}-inc-r{i}", "Progress: parser. Plans: docs. Problems: none.") for i in range(2)]
    candidate = [_trace(f"{task}-cand-r{i}", "Progress: parser.\nPlans: docs.\nProblems: none.") for i in range(2)]
    comparison, _ = compare_cell(
        client, iteration_key=f"bench-tasks/{run}/{edit}/{task}", task_prompt=task_prompt(task), unit=UNIT,
        old_text=OLD_TEXT, new_text=new_text(edit), dimension=DEFAULT_DIMENSIONS[0],
        incumbent_traces=incumbent, candidate_traces=candidate,
        order_seed=order_seed(f"bench-tasks/{seed}/{edit}/{task}"),
        orders=CONFIG.compare_orders, samples=CONFIG.compare_samples, need_evidence=CONFIG.regressions_need_evidence,
    )
    return TaskComparison(task=task, comparison=comparison, incumbent_traces=incumbent, candidate_traces=candidate)


@dataclass(frozen=True)
class Row:
    compile: str
    training_tasks: int
    accepted: int
    training_gain: float
    held_out_gain: float
    held_out_hurt: int
    judge_calls: int


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def run_compile(provider: ScriptedLLM, cache: Path, name: str, trains_on: list[str], training: list[str],
                held_out: list[str], effects: list[dict[str, float]], seed: int, sigma: float) -> Row:
    provider.always(JUDGE, TaskJudge(seed, sigma, effects))
    before = len(provider.requests_for(JUDGE))
    client = ModelClient(ModelSettings(model=f"scripted/{JUDGE}"), "judge", cache_dir=cache, retries=0, backoff_s=0)
    accepted = []
    for edit in range(len(effects)):
        compared = [judged(client, f"{seed}/{sigma}/{name}", edit, task, seed) for task in trains_on]
        if decide_tasks(compared, CONFIG.min_gain, CONFIG.max_task_loss).accepted:
            accepted.append(effects[edit])
    return Row(
        compile=name, training_tasks=len(trains_on), accepted=len(accepted),
        training_gain=sum(mean(e[t] for t in training) for e in accepted),
        held_out_gain=sum(mean(e[t] for t in held_out) for e in accepted),
        held_out_hurt=sum(1 for e in accepted if any(e[t] < HURT for t in held_out)),
        judge_calls=len(provider.requests_for(JUDGE)) - before,
    )


def table(rows: list[Row], markdown: bool) -> str:
    head = ("compile", "trains on", "accepted", "true gain, training", "true gain, held-out",
            "accepted that hurt a held-out task", "judge calls")
    body = [(r.compile, f"{r.training_tasks} task{'s' if r.training_tasks > 1 else ''}", str(r.accepted),
             f"{r.training_gain:+.2f}", f"{r.held_out_gain:+.2f}", str(r.held_out_hurt), str(r.judge_calls))
            for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])
    widths = [max(len(c) for c in column) for column in zip(head, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in (head, *body))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--training", type=int, default=3, help="training tasks of the task-set compile")
    parser.add_argument("--held-out", type=int, default=3)
    parser.add_argument("--sigma", type=float, default=0.75, help="the judge's noise per call")
    parser.add_argument("--shared", type=float, default=0.8, help="spread of an edit's effect common to every task")
    parser.add_argument("--specific", type=float, default=0.8, help="spread of an edit's effect on one task alone")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.edits < 1 or args.training < 2 or args.held_out < 1:
        parser.error("--edits and --held-out must be >= 1, --training >= 2")
    if min(args.sigma, args.shared, args.specific) < 0:
        parser.error("--sigma, --shared and --specific must be >= 0")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse(argv)
    training = [f"train-{i}" for i in range(args.training)]
    held_out = [f"held-{i}" for i in range(args.held_out)]
    effects = world_effects(args.edits, training + held_out, args.seed, args.shared, args.specific)
    provider = install(ScriptedLLM())
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-tasks-") as tmp:
            rows = [run_compile(provider, Path(tmp), name, trains_on, training, held_out, effects, args.seed, args.sigma)
                    for name, trains_on in (("single", training[:1]), ("task set", training))]
    finally:
        uninstall(provider)
    elapsed = time.monotonic() - started
    split = sum(1 for e in effects if max(e.values()) > -HURT and min(e.values()) < HURT)
    print(f"{args.edits} edits (seed {args.seed}), {args.training} training + {args.held_out} held-out tasks; "
          f"effect = N(0, {args.shared:g}) shared + N(0, {args.specific:g}) per task; {split} edits help one task "
          f"(> {-HURT:g}) and hurt another (< {HURT:g}); judge sigma {args.sigma:g}; min_gain {CONFIG.min_gain:g}, "
          f"max_task_loss {CONFIG.max_task_loss:g}")
    print(table(rows, args.markdown))
    single, task_set = rows
    ratio = task_set.held_out_gain / single.held_out_gain if single.held_out_gain > 0 else float("nan")
    print(f"held-out true gain, task set / single: {ratio:.2f}x; judge calls {task_set.judge_calls / single.judge_calls:.2f}x "
          f"(T = {args.training}); {elapsed:.1f} s")
    return rows


if __name__ == "__main__":
    main()
