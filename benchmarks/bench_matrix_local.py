"""Score one section matrix (all default dimensions) of a small skill with the local model.

    .venv/bin/python benchmarks/bench_matrix_local.py [--skill path/to/SKILL.md] [--sequential]

Prints the calls, tokens (prompt / completion / served from llama.cpp's prefix cache),
the shared-prefix fraction of the column prompts and the wall time. Run it alone: the
135M model on 2 cores slows down several-fold when other work shares the CPU.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deep_pipeline.core.config import DEFAULT_DIMENSIONS
from deep_pipeline.core.models import Trace, TraceStep
from deep_pipeline.core.units import cut_sections
from deep_pipeline.llm import local_model
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.judge import score_column

CORPUS_SKILL = Path("/work/shared/corpus/skills/internal-comms/SKILL.md")
TASK = "Write a short 3P update (Progress, Plans, Problems) for the data team's week."
TRACES = [
    Trace(
        trace_id="r0",
        steps=[
            TraceStep(step=1, source="user", text=TASK),
            TraceStep(step=2, source="agent", text="This is a 3P update, so I will load examples/3p-updates.md."),
            TraceStep(step=3, source="tool", text="Progress: what shipped. Plans: next week. Problems: blockers."),
            TraceStep(step=4, source="agent", text="Progress: shipped the ingest job. Plans: backfill. Problems: none."),
        ],
        final_output="Progress: shipped the ingest job. Plans: backfill. Problems: none.",
    )
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skill", type=Path, default=CORPUS_SKILL)
    parser.add_argument("--home", type=Path, default=None, help="where the shared server's state lives")
    parser.add_argument("--max-tokens", type=int, default=600)
    parser.add_argument("--sequential", action="store_true", help="one column at a time instead of 3 in flight")
    args = parser.parse_args()

    skill_text = args.skill.read_text(encoding="utf-8")
    units = cut_sections(skill_text)
    home = args.home or Path(tempfile.mkdtemp(prefix="bench-local-"))
    started = time.monotonic()
    local_model.ensure_local_server(home)
    server_s = time.monotonic() - started

    limiter = threading.BoundedSemaphore(1 if args.sequential else 3)
    client = ModelClient(
        ModelSettings(model="local", max_tokens=args.max_tokens), "judge", local_home=home, limiter=limiter
    )

    def column(dimension):
        return score_column(
            client, step_key=f"bench/m00/{dimension.name}", task_prompt=TASK, skill_text=skill_text,
            units=units, dimension=dimension, traces=TRACES,
        )

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(column, DEFAULT_DIMENSIONS))
    wall_s = time.monotonic() - started

    calls = [c for r in results for c in r.calls]
    total = lambda field: sum(getattr(c, field) or 0 for c in calls)  # noqa: E731
    fraction = sum(r.shared_prefix_fraction for r in results) / len(results)
    print(f"skill: {args.skill} ({len(units)} units, {len(skill_text)} chars)")
    print(f"server start: {server_s:.1f} s (0 when reused)")
    print(f"columns: {len(results)}  calls: {len(calls)}  (attempts beyond the first: {len(calls) - len(results)})")
    print(f"tokens: prompt {total('prompt_tokens')}, completion {total('completion_tokens')}, cached {total('cached_tokens')}")
    print(f"shared-prefix fraction of column prompts: {fraction:.2f} (of {results[0].prompt_chars} chars)")
    print(f"dropped evidence: {sum(r.dropped_evidence for r in results)}")
    print(f"wall time: {wall_s:.1f} s  ({wall_s / len(results):.1f} s per column)")
    for result in results:
        print(f"  {result.cells[0].dimension:<14} " + " ".join(f"{c.unit_id}={c.score}" for c in result.cells))
    local_model.stop_local_server(home)


if __name__ == "__main__":
    main()
