"""The gate benchmark: how often does the comparison accept an edit that does not help, or reject one that does?

    .venv/bin/python benchmarks/bench_gate.py [--iterations 200] [--seed 0] [--setting SIGMA,B ...] [--markdown]

A simulated world. Every iteration's edit has a hidden true effect,
worse (-1), same (0) or better (+1), drawn with a seeded RNG; the incumbent's true score
is 3 and the candidate's 3 + effect. A scripted judge answers through the project's real
path (ModelClient, litellm with the scripted provider, llm/comparator.py, core/comparison.py,
core/decision.py; response cache in a temporary folder). Per call it scores each side
as its true score + Gaussian noise (sigma) + a bonus b for the side shown first (A),
rounded and clipped to 1..5, and with probability r it invents a regression claim against
the candidate that has no valid evidence (a step that does not exist, or a quote that is
not in the step). The judge finds the candidate only by the hidden marker in its text.

Each gate runs over the same iterations (same effects, same seeded order, and the same
noise for the same iteration, position and sample):
- original: compare_orders 1, compare_samples 1, regressions at face value;
- two-orders: compare_orders 2, compare_samples 1, compare_max_pairs 1, regressions need evidence
  (the default before the sequential rule);
- samples3: compare_orders 2, compare_samples 3, compare_max_pairs 1, regressions need evidence;
- sequential (default): compare_orders 2, compare_samples 1, compare_max_pairs 3, regressions
  need evidence (core/sequential.py: more pairs while unsure, accepted on the sign-test bound).
Each extra pair's calls draw fresh noise (the judge counts the calls it saw for an iteration
and position), as a re-presented prompt or a sampling judge gives.
It prints, per gate and (sigma, b): the false-accept rate (accepted when the true effect
is not better), the false-reject rate (rejected when it is better) and judge calls per
iteration as the scripted provider counted them.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script, `tests` (the scripted provider) is not importable otherwise
    sys.path.insert(0, str(ROOT))

from deep_pipeline.core.config import DEFAULT_DIMENSIONS, CompileConfig
from deep_pipeline.core.decision import decide, order_seed
from deep_pipeline.core.models import Trace, TraceStep, Unit
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.comparator import compare_cell
from tests.scripted_llm import ScriptedLLM, install, uninstall

INCUMBENT_TRUE = 3
INVENT_RATE = 0.2
SETTINGS = ((0.5, 0.0), (0.5, 1.0), (1.0, 0.5), (1.0, 1.0))
MIN_GAIN = CompileConfig().min_gain
JUDGE = "bench-judge"
TASK = "Write this week's status update in three lines: progress, plans, problems."
OLD_TEXT = "## Steps\nWrite the update.\n"
MARKER = re.compile(r"\[bench iteration=(\d+) effect=([+-]?\d)\]")
FIRST_LABEL = re.compile(r"\b([AB])1\b")


@dataclass(frozen=True)
class Gate:
    name: str
    orders: int
    samples: int
    need_evidence: bool
    max_pairs: int = 1

    @property
    def slug(self) -> str:  # the gate in its calls' keys
        return self.name.split()[0]


GATES = (
    Gate("original", 1, 1, False),
    Gate("two-orders", 2, 1, True),
    Gate("samples3", 2, 3, True),
    Gate("sequential (default)", 2, 1, True, max_pairs=3),
)


@dataclass(frozen=True)
class Row:
    gate: str
    sigma: float
    bonus: float
    false_accept: float
    false_reject: float
    calls_per_iteration: float


def _trace(trace_id: str, answer: str) -> Trace:
    return Trace(
        trace_id=trace_id,
        prompt=TASK,
        steps=[
            TraceStep(step=1, source="user", text=TASK),
            TraceStep(step=2, source="agent", text="I read the skill's steps first."),
            TraceStep(step=3, source="agent", text=answer),
        ],
        final_output=answer,
    )


INCUMBENT_TRACES = [_trace("inc-r0", "Shipped the parser. Plans: tests. Problems: none."),
                    _trace("inc-r1", "Progress: parser. Plans: docs. Problems: none.")]
CANDIDATE_TRACES = [_trace("cand-r0", "Progress: shipped the parser.\nPlans: tests.\nProblems: none."),
                    _trace("cand-r1", "Progress: parser.\nPlans: docs.\nProblems: flaky CI.")]
UNIT = Unit(unit_id="s02-steps", level="section", heading="Steps", heading_depth=2, start=0, end=len(OLD_TEXT),
            text=OLD_TEXT)


def new_text(iteration: int, effect: int) -> str:
    """The candidate's text with the hidden marker only the scripted judge reads."""
    return f"## Steps\nWrite the update, one line per heading. [bench iteration={iteration} effect={effect:+d}]\n"


def half_up(value: float) -> int:
    return math.floor(value + 0.5)


class NoisyJudge:
    """The scripted judge of one run: truth + noise + a bonus for position A, sometimes an invented claim.

    The noise of a call is seeded by (seed, iteration, the candidate's position, sample), so
    every gate sees the same noise for the same call, and samples of one order differ.
    """

    def __init__(self, seed: int, sigma: float, bonus: float, invent_rate: float) -> None:
        self.seed, self.sigma, self.bonus, self.invent_rate = seed, sigma, bonus, invent_rate
        self._asked: dict[tuple[int, str], int] = {}  # (iteration, candidate position) -> calls so far

    def __call__(self, request) -> dict:
        text = request.last_user
        side_a = text.split("<<version A>>", 1)[1].split("<</version A>>", 1)[0]
        side_b = text.split("<<version B>>", 1)[1].split("<</version B>>", 1)[0]
        found = MARKER.search(side_a) or MARKER.search(side_b)
        iteration, effect = int(found.group(1)), int(found.group(2))
        cand = "A" if MARKER.search(side_a) else "B"
        inc = "B" if cand == "A" else "A"
        sample = self._asked.get((iteration, cand), 0)
        self._asked[(iteration, cand)] = sample + 1
        rng = random.Random(f"{self.seed}/{iteration}/{cand}/{sample}")
        noise_cand, noise_inc = rng.gauss(0, 1), rng.gauss(0, 1)
        scores = {cand: self._score(INCUMBENT_TRUE + effect, noise_cand, cand),
                  inc: self._score(INCUMBENT_TRUE, noise_inc, inc)}
        invented = [self._invented(rng, cand)] if rng.random() < self.invent_rate else []
        return {
            "evidence_a": [], "evidence_b": [],
            f"regressions_{cand.lower()}": invented, f"regressions_{inc.lower()}": [],
            "reason": "scripted bench comparison", "task_relevant": True,
            "score_a": scores["A"], "score_b": scores["B"],
        }

    def _score(self, true: int, noise: float, side: str) -> int:
        shown_first = self.bonus if side == "A" else 0.0
        return min(5, max(1, half_up(true + self.sigma * noise + shown_first)))

    @staticmethod
    def _invented(rng: random.Random, cand: str) -> dict:
        """A claim against the candidate's first trace that its trace does not support."""
        if rng.random() < 0.5:  # a step the 3-step trace does not have
            return {"kind": "error", "trace_id": f"{cand}1", "step": 7, "quote": "Traceback (most recent call last)"}
        return {"kind": "failed_command", "trace_id": f"{cand}1", "step": 2, "quote": "exit status 1"}


def effects(iterations: int, seed: int) -> list[int]:
    rng = random.Random(f"effects/{seed}")
    return [rng.choice((-1, 0, 1)) for _ in range(iterations)]


def run_gate(client: ModelClient, gate: Gate, truth: list[int], seed: int, run: str) -> list[bool]:
    """Accepted or not, per iteration, through the real comparator and decision rule."""
    accepted = []
    for index, effect in enumerate(truth):
        comparison, _ = compare_cell(
            client, iteration_key=f"bench-gate/{run}/{gate.slug}/{index}", task_prompt=TASK, unit=UNIT,
            old_text=OLD_TEXT, new_text=new_text(index, effect), dimension=DEFAULT_DIMENSIONS[0],
            incumbent_traces=INCUMBENT_TRACES, candidate_traces=CANDIDATE_TRACES,
            # One seed per iteration, whatever the gate: the original gate's one call is the
            # first call of the others, so the gates differ only by what they add.
            order_seed=order_seed(f"bench-gate/{seed}/{index}"),
            orders=gate.orders, samples=gate.samples, need_evidence=gate.need_evidence,
            max_pairs=gate.max_pairs, min_gain=MIN_GAIN,
        )
        accepted.append(decide(comparison, INCUMBENT_TRACES, CANDIDATE_TRACES, MIN_GAIN)[0])
    return accepted


def rates(truth: list[int], accepted: list[bool]) -> tuple[float, float]:
    """(false-accept rate, false-reject rate); 0 for a class with no iterations."""
    not_better = [a for t, a in zip(truth, accepted) if t <= 0]
    better = [a for t, a in zip(truth, accepted) if t > 0]
    false_accept = sum(not_better) / len(not_better) if not_better else 0.0
    false_reject = sum(1 for a in better if not a) / len(better) if better else 0.0
    return false_accept, false_reject


def run_setting(provider: ScriptedLLM, cache: Path, truth: list[int], seed: int, sigma: float, bonus: float,
                invent_rate: float) -> list[Row]:
    rows = []
    for gate in GATES:
        judge = NoisyJudge(seed, sigma, bonus, invent_rate)
        provider.always(JUDGE, judge)
        before = len(provider.requests_for(JUDGE))
        client = ModelClient(ModelSettings(model=f"scripted/{JUDGE}"), "judge", cache_dir=cache, retries=0,
                             backoff_s=0)
        accepted = run_gate(client, gate, truth, seed, f"{seed}/{sigma}/{bonus}")
        calls = len(provider.requests_for(JUDGE)) - before
        false_accept, false_reject = rates(truth, accepted)
        rows.append(Row(gate.name, sigma, bonus, false_accept, false_reject, calls / len(truth)))
    return rows


def table(rows: list[Row], markdown: bool) -> str:
    head = ("gate", "sigma", "b", "false accepts", "false rejects", "judge calls / iteration")
    body = [(r.gate, f"{r.sigma:g}", f"{r.bonus:g}", f"{r.false_accept:.3f}", f"{r.false_reject:.3f}",
             f"{r.calls_per_iteration:g}") for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])
    widths = [max(len(str(c)) for c in column) for column in zip(head, *body)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in (head, *body))


def setting(text: str) -> tuple[float, float]:
    try:
        sigma, bonus = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--setting wants SIGMA,B (two numbers), got {text!r}") from None
    if sigma < 0:
        raise argparse.ArgumentTypeError(f"--setting: sigma must be >= 0, got {sigma:g}")
    return sigma, bonus


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--setting", type=setting, action="append", metavar="SIGMA,B",
                        help="a (noise, first-position bonus) pair; repeat for more (default: four settings)")
    parser.add_argument("--invent-rate", type=float, default=INVENT_RATE, help="share of calls with an invented claim")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (for the README)")
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error(f"--iterations must be >= 1, got {args.iterations}")
    if not 0 <= args.invent_rate <= 1:
        parser.error(f"--invent-rate must be in [0, 1], got {args.invent_rate:g}")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse(argv)
    truth = effects(args.iterations, args.seed)
    provider = install(ScriptedLLM())
    started = time.monotonic()
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
            for sigma, bonus in args.setting or SETTINGS:
                rows += run_setting(provider, Path(tmp), truth, args.seed, sigma, bonus, args.invent_rate)
        calls = len(provider.requests_for(JUDGE))
    finally:
        uninstall(provider)
    elapsed = time.monotonic() - started
    counts = {name: truth.count(value) for name, value in (("worse", -1), ("same", 0), ("better", 1))}
    print(f"{args.iterations} iterations (seed {args.seed}): "
          + ", ".join(f"{n} {name}" for name, n in counts.items())
          + f"; incumbent true score {INCUMBENT_TRUE}; invented-claim rate r = {args.invent_rate:g}; "
          f"min_gain {MIN_GAIN:g}")
    print(table(rows, args.markdown))
    print(f"{calls} judge calls in {elapsed:.1f} s ({1000 * elapsed / max(calls, 1):.1f} ms per call, "
          "through litellm, the scripted provider and the response cache)")
    return rows


if __name__ == "__main__":
    main()
