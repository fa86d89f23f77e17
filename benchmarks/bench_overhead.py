"""What a compile costs beyond its model calls and rollouts, on each way of running one.

    .venv/bin/python benchmarks/bench_overhead.py [--paths cli,job,daemon] [--repeat 1]
        [--latency 2] [--agent-seconds 5] [--rollouts 2] [--load 0] [--tree PATH]

One compile per path and repeat, each on a fresh DAGSTER_HOME (a temporary folder with the
instance dagster.yaml of the tree under test) and fresh inputs (tests/compile_world.py):
- cli: `deep-pipeline compile SKILL --task BUNDLE --config compile.yaml`;
- job: `dagster job execute -m deep_pipeline.definitions -j compile -c run_config.yaml`;
- daemon: `dagster-daemon run -w workspace.yaml` is started and waited for (its first sensor
  heartbeat: a long-running daemon's start is not a compile's cost), then
  `dagster job execute -j start_compile` registers the compile and the `compile_loop` sensor
  carries it, a run per step, until report.json exists and every run of the compile ended.
The model is a scripted OpenAI-compatible server that sleeps --latency s per call and answers
from one_edit_world() (one accepted edit); the agent is the `command` runner running
tests/agents/sleeper.py, which sleeps --agent-seconds and prints an answer.

Columns: wall = the user's wait (the command's start to its end; for the daemon, from
start_compile's launch to the compile's end). critical = the compile's floor if our code
cost nothing, computed from its own records (_served.critical_path): its non-cached calls
in llm/calls.jsonl at --latency each, a matrix's columns `parallel` at once, edit attempts
and comparison orders one after another, plus its rollouts (traces/<batch>/) at
--agent-seconds, `parallel` at once; steps in sequence. overhead/step = (wall - critical)
/ steps (steps = inputs + matrices + iterations + finalize). CPU-s/step = user+sys seconds
of every process the path started (driver, `dagster` CLI, daemon, code server, run
workers, agents), from getrusage(RUSAGE_CHILDREN) after they ended: this process is a
child subreaper, so run workers a daemon launched are reaped here and counted too; the
daemon's CPU until it was ready (/proc) is left out. The model server is a thread of this
process and not counted. With --repeat N it prints min and median of each. --load N starts N
CPU-bound processes (a busy loop each) beside the measured path for the whole run.
The machine is shared and small: figures are noisy, compare runs made together.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _served, next to this script

from _served import (
    ROOT,
    Critical,
    Tree,
    become_subreaper,
    bench_overrides,
    children_cpu,
    cli_compile,
    compile_ended,
    critical_path,
    dagster_job,
    machine,
    median,
    slow_world,
    start_daemon,
    stop_daemon,
    tree_cpu,
    wait_daemon_ready,
)

from tests.compile_world import make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer

PATHS = ("cli", "job", "daemon")


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float
    critical: Critical

    @property
    def ratio(self) -> float:
        return self.wall / self.critical.seconds

    @property
    def overhead_per_step(self) -> float:
        return (self.wall - self.critical.seconds) / self.critical.steps

    @property
    def cpu_per_step(self) -> float:
        return self.cpu / self.critical.steps


def request(skill: Path, bundle: Path, overrides: dict) -> dict:
    return {"skill_dir": str(skill), "bundle": str(bundle), "overrides": overrides}


def carry_by_daemon(tree: Tree, env: dict, home: Path, work: Path, config: dict) -> tuple[float, float]:
    """(wall, the daemon's CPU until it was ready) of a compile the daemon carries."""
    daemon = start_daemon(tree, env, work / "daemon.log")
    try:
        wait_daemon_ready(home, env, daemon)
        warm = tree_cpu(daemon.pid)
        start = time.monotonic()
        dagster_job(tree, env, "start_compile", {"ops": {"start_compile_op": {"config": config}}}, work)
        (key,) = [p.name for p in (home / "compiles").iterdir()]
        deadline = start + 1800
        while not compile_ended(home, env, key):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError(f"daemon path: compile {key} did not end (see {work / 'daemon.log'})")
            time.sleep(0.5)
        return time.monotonic() - start, warm
    finally:
        stop_daemon(daemon, home)


def run_once(path: str, tree: Tree, work: Path, args: argparse.Namespace) -> Sample:
    skill, bundle = make_inputs(work)
    home = tree.fresh_home(work / "home")
    env = tree.env(home)
    with ScriptedOpenAIServer([slow_world(args.latency)] * 50) as server:
        overrides = bench_overrides(server, args.agent_seconds, args.rollouts)
        before, warm = children_cpu(), 0.0
        if path == "cli":
            (work / "compile.yaml").write_text(yaml.safe_dump(overrides))
            wall = cli_compile(tree, env, skill, bundle, work / "compile.yaml")
        elif path == "job":
            wall = dagster_job(tree, env, "compile", {"ops": {"compile_op": {"config": request(skill, bundle, overrides)}}}, work)
        else:
            wall, warm = carry_by_daemon(tree, env, home, work, request(skill, bundle, overrides))
        cpu = children_cpu() - before - warm
    (cdir,) = list((home / "compiles").iterdir())
    return Sample(wall, cpu, critical_path(cdir, args.latency, args.agent_seconds))


@contextlib.contextmanager
def cpu_load(n: int):
    """`n` busy-looping processes beside the measured path. Their CPU is not counted: they
    live (unreaped) until every sample's CPU has been read."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def fmt(values: list[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{min(values):.{digits}f} / {median(values):.{digits}f}"


def table(results: dict[str, list[Sample]], repeat: int) -> str:
    head = "min / median" if repeat > 1 else "one run"
    lines = [f"| path | wall s | critical s | wall / critical | overhead s/step | CPU-s/step | steps, calls, rollouts |  ({head})",
             "|---|---|---|---|---|---|---|"]
    for path, samples in results.items():
        c = samples[0].critical
        lines.append(f"| {path} | {fmt([s.wall for s in samples], 1)} | {fmt([s.critical.seconds for s in samples], 1)} "
                     f"| {fmt([s.ratio for s in samples])} | {fmt([s.overhead_per_step for s in samples])} "
                     f"| {fmt([s.cpu_per_step for s in samples])} | {c.steps}, {c.calls}, {c.rollouts} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paths", default="cli,job,daemon", help="comma-separated, of: cli, job, daemon")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--agent-seconds", type=float, default=5.0, help="seconds per rollout")
    parser.add_argument("--rollouts", type=int, default=2, help="rollouts per batch")
    parser.add_argument("--load", type=int, default=0, help="CPU-bound processes running beside the measured path")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree under test (default: this checkout)")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad or not paths or args.repeat < 1 or args.load < 0:
        print(f"--paths: expected some of {','.join(PATHS)}, --repeat >= 1 and --load >= 0, "
              f"got {args.paths!r}, {args.repeat}, {args.load}", file=sys.stderr)
        return 2
    tree = Tree(args.tree.resolve())
    become_subreaper()
    print(f"# bench_overhead: latency {args.latency} s/call, agent {args.agent_seconds} s/rollout, "
          f"{args.rollouts} rollouts, load {args.load}; tree {tree.root}; {machine()}")
    results: dict[str, list[Sample]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp, cpu_load(args.load):
        for n in range(args.repeat):
            for path in paths:
                try:
                    sample = run_once(path, tree, Path(tmp) / f"{path}-{n}", args)
                except RuntimeError as exc:
                    print(f"{path}: {exc}", file=sys.stderr)
                    return 1
                print(f"  {path} #{n + 1}: wall {sample.wall:.1f} s, critical {sample.critical.seconds:.1f} s, "
                      f"CPU {sample.cpu:.1f} s", flush=True)
                results.setdefault(path, []).append(sample)
    print(table(results, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
