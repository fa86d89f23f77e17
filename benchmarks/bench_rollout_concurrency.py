"""Do rollouts really run concurrently? 3 rollouts of a 2-second fake agent, parallel=3.

    .venv/bin/python benchmarks/bench_rollout_concurrency.py [--seconds 2] [--n 3]

Prints the batch's wall time, one rollout's wall time (the agent's sleep plus process
start, sandbox copy, archive and cleanup) and the ratios to the ideal: with true
concurrency the batch takes about as long as one rollout (ratio near 1.0), serially
it would take n times as long.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

from deep_pipeline.rollouts import RolloutTask, SandboxLimits
from deep_pipeline.rollouts.command import CommandRunner

SLEEPER = Path(__file__).resolve().parent.parent / "tests" / "agents" / "sleeper.py"


def batch_seconds(runner: CommandRunner, package: Path, archive: Path, n: int) -> float:
    started = time.monotonic()
    traces = runner.run_batch(package_dir=package, skill_sha256="bench", task=RolloutTask(prompt="p", skill_name="b"),
                              batch=f"bench-{n}", n=n, archive_dir=archive / str(n))
    elapsed = time.monotonic() - started
    failed = [t.error_reason for t in traces if t.error_category]
    if failed:
        sys.exit(f"rollouts failed: {failed}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--n", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "skill"
        package.mkdir()
        (package / "SKILL.md").write_text("---\nname: b\ndescription: bench\n---\n# B\n")
        template = " ".join(shlex.quote(a) for a in (sys.executable, str(SLEEPER), "--seconds", str(args.seconds)))
        runner = CommandRunner(template, "text", model="none", parallel=args.n, limits=SandboxLimits(timeout_s=60))
        single = batch_seconds(runner, package, Path(tmp) / "raw", 1)
        batch = batch_seconds(runner, package, Path(tmp) / "raw", args.n)
    print(f"{args.n} concurrent rollouts of a {args.seconds:g} s agent: {batch:.2f} s "
          f"(one rollout: {single:.2f} s; serial would be ~{args.n * single:.2f} s)")
    print(f"ratio to the ideal {args.seconds:g} s: {batch / args.seconds:.2f}; ratio to one rollout: {batch / single:.2f}")


if __name__ == "__main__":
    main()
