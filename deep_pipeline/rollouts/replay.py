"""The `replay` runner: serves traces from a bundle instead of running an agent.

For offline demos and the in-memory test driver. Rollout i of a batch is the bundle's
trace i mod len(traces), re-labelled with the new batch, id and SKILL.md hash, its
steps, output and accounting kept as they were. Bundle traces the machinery failed
(`api_error`, `sandbox_setup`) are never served: they are not the skill at work (SPEC §9).
"""

from __future__ import annotations

import json
from pathlib import Path

from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, ReplayOrigin, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.base import Progress, RolloutTask, Verify, archive_file, check_task_dir, trace_id

# Served traces were made elsewhere, their work directories long gone: nothing to verify.
REFUSES_VERIFY = ("runner 'replay' cannot be evaluated: it serves recorded traces and has no work directory "
                  "to run a verifier in; evaluate a compile made with the chat, command or mini-swe-agent runner")


class ReplayRunner:
    """`traces`: one bundle's; or, for a task set (SPEC §11), each training task's by its
    prompt, so a task's rollouts replay its own bundle (the first task's for another prompt)."""

    name = "replay"

    def __init__(self, traces: list[Trace] | dict[str, list[Trace]]) -> None:
        if isinstance(traces, dict):
            self.by_prompt = {prompt: ReplayRunner(listed).traces for prompt, listed in traces.items()}
            traces = next(iter(traces.values()), [])
        else:
            self.by_prompt = {}
        if not traces:
            raise InputError("runner 'replay' needs at least one trace in the task bundle's traces")
        self.traces = [t for t in traces if t.error_category not in MACHINE_FAULT_CATEGORIES]
        if not self.traces:
            raise InputError(
                "runner 'replay': every trace in the task bundle failed outside the agent "
                f"({', '.join(MACHINE_FAULT_CATEGORIES)}); it needs at least one the agent finished"
            )

    def run_batch(
        self,
        *,
        package_dir: Path,
        skill_sha256: str,
        task: RolloutTask,
        batch: str,
        n: int,
        archive_dir: Path,
        progress: Progress | None = None,
        done: dict[int, Trace] | None = None,
        verify: Verify | None = None,
    ) -> list[Trace]:
        if verify is not None:
            raise InputError(REFUSES_VERIFY)
        check_task_dir(task)
        pool = self.by_prompt.get(task.prompt, self.traces)
        served = []
        for index in range(n):
            source = pool[index % len(pool)]
            # Stamped with the package it stands in for (the steps key batches by it), and
            # marked as a replay of the recorded run, which may have had another SKILL.md.
            origin = source.replay_of or ReplayOrigin(trace_id=source.trace_id, skill_sha256=source.skill_sha256)
            trace = source.model_copy(
                update={"trace_id": trace_id(batch, index), "batch": batch, "skill_sha256": skill_sha256,
                        "replay_of": origin}, deep=True
            )
            # Which bundle trace this one is, so an audit can follow it back.
            archive_file(Path(archive_dir), index, "replayed_from.json",
                         json.dumps({"trace_id": source.trace_id, "batch": source.batch}) + "\n")
            served.append(trace)
            if progress is not None:
                progress(index, trace)
        return served


def trace_makers(traces: list[Trace], agent: str | None = None, model: str | None = None) -> list[str]:
    """Who made the traces, `agent (model)` once each in order; a trace's own labels first,
    then the bundle's (`agent`, `model`), as the traces were recorded."""
    makers: list[str] = []
    for trace in traces:
        maker = f"{trace.agent or agent or 'unknown agent'} ({trace.model or model or 'unknown model'})"
        if maker not in makers:
            makers.append(maker)
    return makers


def recorded_agent(traces: list[Trace], agent: str | None, model: str | None) -> tuple[str, str]:
    """(agent, model) the recorded traces name, each distinct value once, joined by ", "."""
    agents = list(dict.fromkeys(t.agent or agent or "unknown agent" for t in traces))
    models = list(dict.fromkeys(t.model or model or "unknown model" for t in traces))
    return ", ".join(agents), ", ".join(models)


def replay_note(traces: list[Trace], skill_sha256: str) -> str | None:
    """One line saying the traces are replays, and of runs made on which SKILL.md; None when none is."""
    replayed = [t for t in traces if t.replay_of is not None]
    if not replayed:
        return None
    made_on = sorted({t.replay_of.skill_sha256 or "unrecorded" for t in replayed})
    other = [sha for sha in made_on if sha != skill_sha256]
    where = (f"made on another SKILL.md ({', '.join(sha[:12] for sha in other)}), not this one ({skill_sha256[:12]})"
             if other else "made on this SKILL.md")
    return f"{len(replayed)} of {len(traces)} traces are replays of recorded runs {where}"
