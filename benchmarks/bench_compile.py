"""The whole-compile benchmark: what each comparison gate keeps and gains over whole compiles.

    .venv/bin/python benchmarks/bench_compile.py [--seeds 60] [--jobs 1] [--setting SIGMA,B ...]
        [--gate NAME ...] [--invent-rate 0.2] [--markdown]

A simulated world (benchmarks/_compile_world.py): S_fast's cells (unit x dimension) have a
hidden true quality 1..5; each edit the editor writes has a hidden true effect on its
cell, +1 / 0 / -1 with probabilities 0.4 / 0.3 / 0.3 (clipped to 1..5); the column judge
scores each cell true + N(0, sigma), rounded and clipped; the comparator scores each side
true + N(0, sigma) + b for the side shown first (A), invents a regression claim without
valid evidence on a share r = 0.2 of its calls, and cites the real error lines a harmful
correctness edit puts into every rollout. Rollouts are simulated traces, no agent runs.

What is real: the policy (tests/reference_walk.py's loop over core/policy.py: selection of
the weakest cell, exhaustion, descent, refresh, stopping), the units and edit checks
(core/units.py, core/edits.py), the editor (llm/editor.py via the engine's own edit step,
engine/iteration_steps._write_edit), the column judge (llm/judge.score_column), the
comparator (llm/comparator.compare_cell via the engine's _compare_task, so the gate's
settings travel the engine's path) and the decision (the engine's _decide over
core/decision.py), all through ModelClient and litellm with the scripted provider,
in-process, with a response cache in a temporary folder.

Gates, each a CompileConfig (S_fast and the world are the same for every gate of a seed):
- original: compare_orders 1, compare_samples 1, regressions_need_evidence false;
- two-orders: both orders once, compare_max_pairs 1 (the default before the sequential rule);
- default: today's CompileConfig defaults (the sequential comparison, compare_max_pairs 3);
- panel3: a judge panel of 3 scripted models (`compare_models`, core/panel.py) under the
  sequential comparison: pair k is asked of model k mod 3, each model with its own noise and
  position bonus (0.8 / 1.0 / 1.2 x sigma, 0.5 / 1.0 / 1.5 x b: _compile_world.PANEL_SCALES);
- samples3: three independent samples of one judge per order, one pair (compare_samples 3,
  6 calls), each sample its own draw: what panel3 was emulated as before the panel existed;
- oracle: knows each edit's true effect and accepts exactly the good ones (the ceiling).

Per gate and (sigma, b): the mean true gain of S_final over S_fast (sum of the true quality
changes over all cells) with its standard error over seeds, the share of compared edits kept
by true effect (good / neutral / harmful), and comparator calls per comparison as the
scripted provider counted them.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script, `tests` and `benchmarks` are not importable otherwise
    sys.path.insert(0, str(ROOT))

from benchmarks._compile_world import (  # noqa: E402
    COLUMN_JUDGE,
    COMPARE_JUDGE,
    EDITOR,
    PANEL_SCALES,
    TASK,
    World,
    new_edit,
    skill_text,
)
from benchmarks.bench_gate import INVENT_RATE, setting  # noqa: E402
from deep_pipeline.core.actions import PrepareInputs, RunIteration, ScoreLevel  # noqa: E402
from deep_pipeline.core.config import CompileConfig  # noqa: E402
from deep_pipeline.core.decision import rule_regressions  # noqa: E402
from deep_pipeline.core.history import History, current_text_and_batch  # noqa: E402
from deep_pipeline.core.keys import batch_name, column_call_key, compile_key, iteration_key, matrix_key  # noqa: E402
from deep_pipeline.core.models import Comparison, Decision, ScoreMatrix  # noqa: E402
from deep_pipeline.core.units import cut_units  # noqa: E402
from deep_pipeline.engine.context import TrainingTask  # noqa: E402
from deep_pipeline.engine.iteration_steps import _compare_task, _decide, _write_edit  # noqa: E402
from deep_pipeline.engine.records import ComparisonRecord  # noqa: E402
from deep_pipeline.llm.client import ModelClient, ModelSettings  # noqa: E402
from deep_pipeline.llm.judge import score_column  # noqa: E402
from deep_pipeline.store import sha256_text  # noqa: E402
from tests.reference_walk import walk  # noqa: E402
from tests.scripted_llm import ScriptedLLM, install, uninstall  # noqa: E402

SETTINGS = ((0.5, 0.0), (0.5, 1.0), (1.0, 0.5))
SEEDS = 60
PANEL = tuple(f"{COMPARE_JUDGE}-{index}" for index in range(len(PANEL_SCALES)))  # the panel's scripted models
PANEL_NOTE = ("panel3: compare_models of 3 scripted models, pair k asked of model k mod 3, their noise and position "
              "bonus " + " / ".join(f"{s:g}x sigma, {b:g}x b" for s, b in PANEL_SCALES) + "; samples3: "
              "compare_samples 3 of one judge, one pair (6 calls), each sample its own draw")


def gate_configs() -> dict[str, dict | None]:
    """Gate name -> CompileConfig overrides (None: the oracle, which decides by the truth)."""
    gates: dict[str, dict | None] = {
        "original": {"compare_orders": 1, "compare_samples": 1, "regressions_need_evidence": False},
        "two-orders": {"compare_orders": 2, "compare_max_pairs": 1},
        "default": {},
        "panel3": {"compare_models": tuple(f"scripted/{model}" for model in PANEL)},
        "samples3": {"compare_samples": 3, "compare_max_pairs": 1},
        "oracle": None,
    }
    return gates


GATES = ("original", "two-orders", "default", "panel3", "samples3", "oracle")


@dataclass
class CompileResult:
    """One compile's figures: its true gain, its compared edits by true effect, its calls."""

    gain: int
    seen: dict[int, int] = field(default_factory=lambda: {1: 0, 0: 0, -1: 0})
    kept: dict[int, int] = field(default_factory=lambda: {1: 0, 0: 0, -1: 0})
    comparisons: int = 0
    compare_calls: int = 0
    column_calls: int = 0
    editor_calls: int = 0
    decisions: list[tuple[int, str, bool, str]] = field(default_factory=list)  # (effect, dimension, accepted, reason)
    at_the_bar: int = 0  # neutral or harmful edits kept at a mean delta of exactly min_gain


class _Ctx:
    """What the engine's iteration steps read of a CompileHandle, over in-memory batches."""

    def __init__(self, key: str, config: CompileConfig, judge: ModelClient, editor: ModelClient,
                 panel: list[ModelClient] | None) -> None:
        self.cdir = SimpleNamespace(key=key)
        self.config = config
        self.services = SimpleNamespace(judge=judge, editor=editor, panel=panel)  # engine/services.Services
        self.editor_prompt = TASK
        self.task = TrainingTask(name="status-update", prompt=TASK, task_dir=None, bundle=None, label=None)
        self.batches: dict[str, list] = {}

    def dimension(self, name: str):
        return next(d for d in self.config.dimensions if d.name == name)

    def task_traces(self, batch: str) -> list:
        return [(self.task, self.batches[batch])]


class Compile:
    """One compile of S_fast in one world under one gate, driven by the reference loop."""

    def __init__(self, world: World, config: CompileConfig, oracle: bool, cache: Path, key: str) -> None:
        self.world, self.config, self.oracle = world, config, oracle
        self.key = key

        def client(name: str, role: str, max_tokens: int) -> ModelClient:
            return ModelClient(ModelSettings(model=f"scripted/{name}", max_tokens=max_tokens), role,
                               cache_dir=cache, retries=0, backoff_s=0)

        self.judge = client(COLUMN_JUDGE, "judge", config.judge_max_tokens)
        panel = ([client(model.split("/", 1)[1], "judge", config.judge_max_tokens) for model in config.compare_models]
                 if config.compare_models else None)
        self.ctx = _Ctx(key, config, client(COMPARE_JUDGE, "judge", config.judge_max_tokens),
                        client(EDITOR, "editor", config.editor_max_tokens), panel)
        self.result = CompileResult(gain=0)

    def run(self) -> CompileResult:
        fast = skill_text()
        history = walk(History(skill_text=fast), self.config, self.execute)
        self.result.gain = self.world.gain(fast, current_text_and_batch(history)[0])
        return self.result

    def execute(self, action, state):
        if isinstance(action, PrepareInputs):
            self.ctx.batches["input"] = self.world.roll_out(state.current_skill_text, "input", self.config.rollouts)
            return "input"
        if isinstance(action, ScoreLevel):
            return self.score(action, state)
        if isinstance(action, RunIteration):
            return self.iterate(action, state)
        return None  # Finalize: nothing to write

    def score(self, action: ScoreLevel, state) -> ScoreMatrix:
        text, batch = state.current_skill_text, state.current_trace_batch
        units = cut_units(text, action.level, action.section_id)
        key = matrix_key(self.key, action.level, action.index)
        cells = []
        for dimension in self.config.dimensions:
            column = score_column(self.judge, step_key=column_call_key(key, dimension.name), task_prompt=TASK,
                                  skill_text=text, units=units, dimension=dimension, traces=self.ctx.batches[batch])
            cells += column.cells
        return ScoreMatrix(level=action.level, index=action.index, section_id=action.section_id,
                           dimensions=self.config.dimension_names, units=units, cells=cells, trace_batch=batch,
                           skill_sha256=sha256_text(text), active_dimension=action.active_dimension)

    def iterate(self, action: RunIteration, state) -> Decision:
        it = SimpleNamespace(ctx=self.ctx, level=action.level, index=action.index,
                             key=iteration_key(self.key, action.level, action.index),
                             batch=batch_name(action.level, action.index))
        edit = _write_edit(it, state, action, len(state.decisions), 0)
        if edit.status != "ok":
            return _decide(it, edit, ComparisonRecord(skipped=edit.status)).decision
        candidate = self.world.roll_out(edit.candidate_skill_text, it.batch, self.config.rollouts)
        self.ctx.batches[it.batch] = candidate
        incumbent = self.ctx.batches[edit.incumbent_batch]
        truth = new_edit(edit.unit_text_before, edit.unit_text_after)
        if self.oracle:
            unit, dimension = edit.coordinate.unit_id, edit.coordinate.dimension
            comparison = Comparison(incumbent_score=self.world.truth(unit, dimension, edit.unit_text_before),
                                    candidate_score=self.world.truth(unit, dimension, edit.unit_text_after),
                                    task_relevant=True, reason="oracle: the true effect")
        else:
            comparison, _ = _compare_task(it, edit, self.ctx.task, incumbent, candidate)
        record = ComparisonRecord(comparison=comparison, rule_regressions=rule_regressions(incumbent, candidate),
                                  incumbent_batch=edit.incumbent_batch, candidate_batch=it.batch)
        decision = _decide(it, edit, record).decision
        self.result.comparisons += 1
        self.result.seen[truth.effect] += 1
        self.result.kept[truth.effect] += decision.accepted
        self.result.decisions.append((truth.effect, truth.dimension, decision.accepted, decision.reason))
        self.result.at_the_bar += decision.accepted and truth.effect <= 0 and decision.delta == self.config.min_gain
        return decision


_PROVIDER: ScriptedLLM | None = None


def _provider() -> ScriptedLLM:
    """This process's scripted provider, (re)registered as litellm's `scripted` provider: a test's
    own provider installed since then would otherwise answer these calls."""
    global _PROVIDER
    _PROVIDER = install(_PROVIDER or ScriptedLLM())
    return _PROVIDER


def _release() -> None:
    """Unregister this process's scripted provider (the next compile installs a new one)."""
    global _PROVIDER
    if _PROVIDER is not None:
        uninstall(_PROVIDER)
        _PROVIDER = None


def run_compile(seed: int, sigma: float, bonus: float, gate: str, invent_rate: float = INVENT_RATE) -> CompileResult:
    """One seeded compile under one gate; the scripted provider counts its calls."""
    overrides = gate_configs()[gate]
    config = CompileConfig(**(overrides or {}))
    world = World(seed, sigma, bonus, invent_rate)
    provider = _provider()
    provider.reset()
    provider.always(EDITOR, world.editor).always(COLUMN_JUDGE, world.column).always(COMPARE_JUDGE, world.compare)
    for index, model in enumerate(PANEL):
        provider.always(model, world.panel_member(index))
    # One key for every gate: the seeded A/B orders (order_seed of the iteration key) are the same.
    key = compile_key("bench", sha256_text(f"{seed}/{sigma}/{bonus}/{invent_rate}"))
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as cache:
        result = Compile(world, config, overrides is None, Path(cache), key).run()
    result.compare_calls = sum(len(provider.requests_for(model)) for model in (COMPARE_JUDGE, *PANEL))
    result.column_calls = len(provider.requests_for(COLUMN_JUDGE))
    result.editor_calls = len(provider.requests_for(EDITOR))
    if provider.unscripted:
        raise RuntimeError(f"unscripted calls: {provider.unscripted[0]}")
    provider.reset()
    return result


def _one_seed(job: tuple) -> tuple[tuple, dict[str, CompileResult]]:
    seed, sigma, bonus, gates, invent_rate = job
    return (sigma, bonus), {gate: run_compile(seed, sigma, bonus, gate, invent_rate) for gate in gates}


@dataclass(frozen=True)
class Row:
    gate: str
    sigma: float
    bonus: float
    seeds: int
    gain: float
    gain_se: float
    kept_good: float
    kept_neutral: float
    kept_harmful: float
    edits: dict[int, int]  # compared edits by true effect, over all seeds
    kept: dict[int, int]  # of which accepted
    calls_per_comparison: float | None  # None for the oracle (it asks no judge)
    at_the_bar: int = 0  # kept neutral or harmful edits whose mean delta was exactly min_gain
    of_oracle: float | None = None  # mean gain / the oracle's mean gain


def summarize(gate: str, sigma: float, bonus: float, results: list[CompileResult]) -> Row:
    gains = [r.gain for r in results]
    mean = sum(gains) / len(gains)
    se = (math.sqrt(sum((g - mean) ** 2 for g in gains) / (len(gains) - 1) / len(gains)) if len(gains) > 1 else 0.0)
    seen = {e: sum(r.seen[e] for r in results) for e in (1, 0, -1)}
    kept = {e: sum(r.kept[e] for r in results) for e in (1, 0, -1)}
    share = {e: kept[e] / seen[e] if seen[e] else 0.0 for e in seen}
    comparisons = sum(r.comparisons for r in results)
    calls = sum(r.compare_calls for r in results)
    per = None if gate == "oracle" else (calls / comparisons if comparisons else 0.0)
    return Row(gate, sigma, bonus, len(results), mean, se, share[1], share[0], share[-1], seen, kept, per,
               sum(r.at_the_bar for r in results))


def with_oracle(rows: list[Row]) -> list[Row]:
    oracle = {(r.sigma, r.bonus): r.gain for r in rows if r.gate == "oracle"}
    out = []
    for r in rows:
        ceiling = oracle.get((r.sigma, r.bonus))
        ratio = r.gain / ceiling if ceiling else None
        out.append(Row(**{**r.__dict__, "of_oracle": ratio}))
    return out


def worker_pool(jobs: int):
    """Forked workers that die of SIGTERM, as Pool.terminate() expects, whatever handler this
    process has: one that returns (a test process had one) left a worker waiting on the task
    queue's lock and terminate() joining it forever."""
    return multiprocessing.get_context("fork").Pool(jobs, initializer=signal.signal,
                                                    initargs=(signal.SIGTERM, signal.SIG_DFL))


def run(seeds: int, settings, gates: list[str], jobs: int, invent_rate: float = INVENT_RATE) -> list[Row]:
    work = [(seed, sigma, bonus, tuple(gates), invent_rate) for sigma, bonus in settings for seed in range(seeds)]
    if jobs <= 1:
        done = [_one_seed(job) for job in work]
    else:
        with worker_pool(jobs) as pool:
            done = pool.map(_one_seed, work, chunksize=1)
            pool.close()  # the workers end on the queue's sentinel; `with` would SIGTERM them
            pool.join()
    by_setting: dict[tuple, dict[str, list[CompileResult]]] = {}
    for where, per_gate in done:
        for gate, result in per_gate.items():
            by_setting.setdefault(where, {}).setdefault(gate, []).append(result)
    rows = [summarize(gate, sigma, bonus, by_setting[(sigma, bonus)][gate]) for sigma, bonus in settings
            for gate in gates]
    return with_oracle(rows)


def _pct(share: float) -> str:
    return f"{100 * share:.1f}"


def table(rows: list[Row], markdown: bool) -> str:
    head = ("gate", "sigma", "b", "true gain ± se", "% of oracle", "good kept %", "neutral kept %", "harmful kept %",
            "judge calls / comparison")
    body = [(r.gate, f"{r.sigma:g}", f"{r.bonus:g}", f"{r.gain:+.2f} ± {r.gain_se:.2f}",
             "–" if r.of_oracle is None else f"{100 * r.of_oracle:.0f}", _pct(r.kept_good), _pct(r.kept_neutral),
             _pct(r.kept_harmful), "–" if r.calls_per_comparison is None else f"{r.calls_per_comparison:.2f}")
            for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])
    widths = [max(len(str(c)) for c in column) for column in zip(head, *body)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in (head, *body))


def gate_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in GATES]
    if unknown:
        raise argparse.ArgumentTypeError(f"--gate: unknown gate {unknown[0]!r}; the gates are {', '.join(GATES)}")
    return names


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"compiles per gate and setting (default {SEEDS})")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes over seeds (default 1)")
    parser.add_argument("--setting", type=setting, action="append", metavar="SIGMA,B",
                        help="a (noise, first-position bonus) pair; repeat for more (default: "
                             + ", ".join(f"{s:g},{b:g}" for s, b in SETTINGS) + ")")
    parser.add_argument("--gate", type=gate_names, action="append", metavar="NAME[,NAME]",
                        help="gates to run, repeatable (default: all; " + ", ".join(GATES) + ")")
    parser.add_argument("--invent-rate", type=float, default=INVENT_RATE, help="share of calls with an invented claim")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (for the docs)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if not 0 <= args.invent_rate <= 1:
        parser.error(f"--invent-rate must be in [0, 1], got {args.invent_rate:g}")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse(argv)
    asked = [name for names in (args.gate or [list(GATES)]) for name in names]
    gates = [name for name in GATES if name in asked]
    notes = []
    if "panel3" in gates or "samples3" in gates:
        notes.append(PANEL_NOTE)
    started = time.monotonic()
    try:
        rows = run(args.seeds, args.setting or SETTINGS, gates, args.jobs, args.invent_rate)
    finally:
        _release()
    elapsed = time.monotonic() - started
    config = CompileConfig()
    print(f"{args.seeds} seeds per gate and setting; edit effects +1/0/-1 at 0.4/0.3/0.3; invented-claim rate "
          f"r = {args.invent_rate:g}; min_gain {config.min_gain:g}, section_iterations {config.section_iterations}, "
          f"paragraph_iterations {config.paragraph_iterations}, rollouts {config.rollouts}")
    print(table(rows, args.markdown))
    for row in rows:
        bad = row.kept[0] + row.kept[-1]
        if row.gate != "oracle" and bad:
            print(f"{row.gate} at sigma {row.sigma:g}, b {row.bonus:g}: {row.at_the_bar} of the {bad} neutral or harmful "
                  f"edits kept ({100 * row.at_the_bar / bad:.0f} %) passed at a mean delta of exactly min_gain")
    for note in notes:
        print(note)
    print(f"{len(rows) * args.seeds} compiles in {elapsed:.1f} s ({args.jobs} job{'s' if args.jobs > 1 else ''})")
    return rows


if __name__ == "__main__":
    main()
