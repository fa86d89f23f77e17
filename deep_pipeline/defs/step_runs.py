"""From an engine step to the Dagster run that performs it.

Each asset job carries the kind of step it runs as its `deep/step` tag (defs/jobs.py),
so the loop sensor and the drivers find the job from the job objects themselves, and
every run of a step says in its tags which compile and which kind of step it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from deep_pipeline.engine.steps import Step

COMPILE_TAG = "deep/compile"
STEP_TAG = "deep/step"


def job_name(jobs: Iterable, step: Step) -> str:
    """The name of the job (among `jobs`) whose `deep/step` tag is the step's kind."""
    for job in jobs:
        if (job.tags or {}).get(STEP_TAG) == step.kind:
            return job.name
    raise LookupError(f"no job tagged {STEP_TAG}={step.kind}")  # a wiring bug, not bad input


def run_tags(compile_key: str) -> dict[str, str]:
    return {COMPILE_TAG: compile_key}
