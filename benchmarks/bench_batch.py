"""A batch of compiles under the daemon at pool P: throughput, against the ideal and the CLI.

    .venv/bin/python benchmarks/bench_batch.py [--n 16] [--pool 4] [--storage sqlite|postgres]
        [--latency 2] [--agent-seconds 5] [--rollouts 2] [--no-sequential] [--tree PATH]

N compiles of distinct skills (the demo skill with a numbered title: distinct identities, the
same units and decisions) are registered at once by one `start_batch` run (a manifest of N
entries) and carried by `dagster-daemon run -w workspace.yaml` (the `compile_loop` sensor)
on a fresh DAGSTER_HOME whose dagster.yaml has `concurrency.pools.default_limit: P` (the
`llm` pool every model-calling step is in). The model and the agent are those of
bench_overhead.py (_served.py): a scripted server at --latency s per call, a --agent-seconds
fake agent. The daemon is started and waited for first; wall runs from start_batch's launch
until every compile's report.json exists and all of its runs ended.

The pool-bound ideal: every step but finalize holds an `llm` slot for its whole model and
rollout time, so each compile needs `critical` slot-seconds (its critical path, computed from
its records as bench_overhead.py does) and P slots give at best N x critical / P; no compile
ends before its own critical path either: ideal wall = max(N x critical / P, critical).
Then (unless --no-sequential) the same N compiles one after another with `deep-pipeline
compile` on one fresh SQLite home: compiles/min and the batch's ratio to it. CPU-s per
compile: user+sys of every process started (getrusage of reaped children; this process is a
child subreaper so the daemon's run workers count), the daemon's CPU until ready left out.

Checks: every batch compile's decisions equal its sequential twin's (or, with
--no-sequential, one reference CLI compile's), the same number of iterations, no run key twice
among a compile's runs, no run left in flight, no run failed; "database is locked" lines in
the daemon's log (run workers write there too).

--storage postgres: the runs, events and schedules go to Postgres (dagster-postgres) named by
DAGSTER_PG_USERNAME, _PASSWORD, _HOSTNAME, _PORT, _DB, with the tree's
deep_pipeline/instance/dagster-postgres.yaml if it has one (else our dagster.yaml plus a
`storage: postgres:` block); the database must hold no runs yet. The sequential half stays on
SQLite (what a user without a daemon runs). Figures are noisy on a small shared machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _served, next to this script

from _served import (
    ROOT,
    Tree,
    become_subreaper,
    bench_overrides,
    children_cpu,
    cli_compile,
    compile_ended,
    compile_runs,
    critical_path,
    dagster_job,
    decisions,
    instance_for,
    machine,
    skill_variant,
    slow_world,
    start_daemon,
    stop_daemon,
    tree_cpu,
    wait_daemon_ready,
)

from tests.compile_world import SKILL, make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer

PG_VARS = ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOSTNAME", "DAGSTER_PG_PORT", "DAGSTER_PG_DB")
STEP_JOBS_LEFT_OUT = {"start_batch", "start_compile", "compile"}


@dataclass
class Integrity:
    decision_mismatch: int = 0
    iteration_mismatch: int = 0
    duplicated_run_keys: int = 0
    in_flight: int = 0
    failed: int = 0
    missing: int = 0


def check_postgres(tree: Tree) -> str | None:
    """Why --storage postgres cannot run here, or None."""
    missing = [v for v in PG_VARS if not os.environ.get(v)]
    if missing:
        return f"--storage postgres: set {', '.join(missing)} (the Postgres connection)"
    try:
        import dagster_postgres  # noqa: F401
    except ImportError:
        return "--storage postgres: dagster-postgres is not installed in this venv"
    return None


def run_batch(tree: Tree, work: Path, inputs: list[tuple[Path, Path]], overrides: dict, args) -> tuple[float, float, Path, list[str], Path]:
    """(wall, CPU, home, compile keys, daemon log) of the batch carried by the daemon."""
    home = tree.fresh_home(work / "batch-home", args.storage, args.pool)
    env = tree.env(home, args.storage)
    with instance_for(home, env) as instance:
        if instance.get_runs_count() > 0:
            raise ValueError(f"{args.storage} storage: the instance already holds runs; give the bench an empty database")
    manifest = work / "batch.yaml"
    manifest.write_text(yaml.safe_dump({"entries": [{"skill": str(s), "bundle": str(b), "overrides": overrides} for s, b in inputs]}))
    log = work / "daemon.log"
    before = children_cpu()
    daemon = start_daemon(tree, env, log)
    try:
        wait_daemon_ready(home, env, daemon)
        warm = tree_cpu(daemon.pid)
        start = time.monotonic()
        dagster_job(tree, env, "start_batch", {"ops": {"start_batch_op": {"config": {"manifest": str(manifest)}}}}, work)
        keys = sorted(p.name for p in (home / "compiles").iterdir())
        deadline = start + 3600
        pending = set(keys)
        while pending:
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError(f"batch: {len(pending)} compile(s) did not end (see {log})")
            pending = {k for k in pending if not compile_ended(home, env, k)}
            time.sleep(1)
        wall = time.monotonic() - start
    finally:
        stop_daemon(daemon, home)
    return wall, children_cpu() - before - warm, home, keys, log


def run_sequential(tree: Tree, work: Path, inputs: list[tuple[Path, Path]], overrides: dict) -> tuple[float, float, Path]:
    """(wall, CPU, home) of the same compiles one after another with the CLI on one SQLite home."""
    home = tree.fresh_home(work / "seq-home")
    env = tree.env(home)
    config = work / "compile.yaml"
    config.write_text(yaml.safe_dump(overrides))
    before, wall = children_cpu(), 0.0
    for n, (skill, bundle) in enumerate(inputs):
        wall += cli_compile(tree, env, skill, bundle, config)
        print(f"  sequential {n + 1}/{len(inputs)}: {wall:.0f} s so far", flush=True)
    return wall, children_cpu() - before, home


def check(batch_home: Path, env: dict, keys: list[str], n: int, reference) -> Integrity:
    """`reference(key)` -> (decisions, iterations) the compile must reach."""
    found = Integrity(missing=max(0, n - len(keys)))
    for key in keys:
        cdir = batch_home / "compiles" / key
        want_decisions, want_iterations = reference(key)
        found.decision_mismatch += decisions(cdir) != want_decisions
        found.iteration_mismatch += len(list((cdir / "iterations").glob("*/"))) != want_iterations
        runs = [r for r in compile_runs(batch_home, env, key) if r.job_name not in STEP_JOBS_LEFT_OUT]
        run_keys = Counter(r.tags.get("dagster/run_key") for r in runs)
        found.duplicated_run_keys += sum(c - 1 for c in run_keys.values())
        found.in_flight += sum(not r.is_finished for r in runs)
        found.failed += sum(r.is_failure for r in runs)
    return found


def outcome(cdir: Path) -> tuple[list, int]:
    return decisions(cdir), len(list((cdir / "iterations").glob("*/")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=16, help="compiles in the batch")
    parser.add_argument("--pool", type=int, default=4, help="the llm pool's limit (concurrency.pools.default_limit)")
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--agent-seconds", type=float, default=5.0, help="seconds per rollout")
    parser.add_argument("--rollouts", type=int, default=2, help="rollouts per batch of traces")
    parser.add_argument("--sequential-too", dest="sequential", action="store_true", default=True,
                        help="also run the N compiles one after another with the CLI (default)")
    parser.add_argument("--no-sequential", dest="sequential", action="store_false")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree under test (default: this checkout)")
    args = parser.parse_args()
    if args.n < 1 or args.pool < 1:
        print(f"--n and --pool: expected >= 1, got {args.n}, {args.pool}", file=sys.stderr)
        return 2
    tree = Tree(args.tree.resolve())
    if args.storage == "postgres" and (why := check_postgres(tree)):
        print(why, file=sys.stderr)
        return 2
    become_subreaper()
    print(f"# bench_batch: {args.n} compiles, pool {args.pool}, {args.storage}; latency {args.latency} s/call, "
          f"agent {args.agent_seconds} s/rollout, {args.rollouts} rollouts; tree {tree.root}; {machine()}")
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp, \
            ScriptedOpenAIServer([slow_world(args.latency)] * 50) as server:
        work = Path(tmp)
        inputs = [make_inputs(work / "inputs" / f"c{i:02d}", skill_variant(SKILL, i)) for i in range(args.n)]
        overrides = bench_overrides(server, args.agent_seconds, args.rollouts)
        try:
            wall, cpu, home, keys, log = run_batch(tree, work, inputs, overrides, args)
            first = critical_path(home / "compiles" / keys[0], args.latency, args.agent_seconds).seconds
            # Printed now: the sequential half takes as long again and may fail on its own.
            print(f"  batch: wall {wall:.0f} s, {len(keys)} compiles, {len(keys) / wall * 60:.2f} compiles/min, "
                  f"ideal {args.n / max(args.n * first / args.pool, first) * 60:.2f}/min, CPU {cpu / args.n:.1f} s/compile, "
                  f"{log.read_text(errors='replace').count('database is locked')} 'database is locked'", flush=True)
            if args.sequential:
                seq_wall, seq_cpu, seq_home = run_sequential(tree, work, inputs, overrides)
                reference = lambda key: outcome(seq_home / "compiles" / key)
            else:
                seq_wall = seq_cpu = None
                _, _, ref_home = run_sequential(tree, work / "reference", inputs[:1], overrides)
                (ref,) = list((ref_home / "compiles").iterdir())
                reference = lambda key: outcome(ref)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        found = check(home, tree.env(home, args.storage), keys, args.n, reference)
        critical = critical_path(home / "compiles" / keys[0], args.latency, args.agent_seconds)
        locked = log.read_text(errors="replace").count("database is locked")
    print(report(args, wall, cpu, critical.seconds, seq_wall, seq_cpu, found, locked))
    return 0


def report(args, wall, cpu, critical, seq_wall, seq_cpu, found: Integrity, locked: int) -> str:
    n = args.n
    ideal = max(n * critical / args.pool, critical)
    rate, ideal_rate = n / wall * 60, n / ideal * 60
    rows = [
        ("batch wall", f"{wall:.0f} s"),
        ("batch throughput", f"{rate:.2f} compiles/min"),
        ("critical path of one compile", f"{critical:.1f} s"),
        (f"pool-bound ideal: max({n} x critical / {args.pool}, critical)", f"{ideal:.0f} s = {ideal_rate:.2f} compiles/min"),
        ("throughput / ideal", f"{rate / ideal_rate:.2f}"),
        ("CPU-s per compile, batch", f"{cpu / n:.1f}"),
    ]
    if seq_wall is not None:
        seq_rate = n / seq_wall * 60
        rows += [("sequential CLI wall", f"{seq_wall:.0f} s"), ("sequential CLI throughput", f"{seq_rate:.2f} compiles/min"),
                 ("batch / sequential CLI", f"{rate / seq_rate:.2f}"), ("CPU-s per compile, sequential CLI", f"{seq_cpu / n:.1f}")]
    rows += [
        ("compiles missing", str(found.missing)),
        ("decisions differing from the reference", str(found.decision_mismatch)),
        ("iteration count differing", str(found.iteration_mismatch)),
        ("duplicated run keys", str(found.duplicated_run_keys)),
        ("runs left in flight", str(found.in_flight)),
        ("runs failed", str(found.failed)),
        ('"database is locked" in the daemon log', str(locked)),
    ]
    return "\n".join(["| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows])


if __name__ == "__main__":
    sys.exit(main())
