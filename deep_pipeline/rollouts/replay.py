"""The `replay` runner: serves traces from a bundle instead of running an agent.

For offline demos and the in-memory test driver. Rollout i of a batch is the bundle's
trace i mod len(traces), re-labelled with the new batch, id and SKILL.md hash, its
steps, output and accounting kept as they were. Bundle traces the machinery failed
(`api_error`, `sandbox_setup`) are never served: they are not the skill at work (SPEC §9).
"""

from __future__ import annotations

import json
from pathlib import Path

from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.base import Progress, RolloutTask, Verify, archive_file, check_task_dir, trace_id

# Served traces were made elsewhere, their work directories long gone: nothing to verify.
REFUSES_VERIFY = ("runner 'replay' cannot be evaluated: it serves recorded traces and has no work directory "
                  "to run a verifier in; evaluate a compile made with the chat, command or mini-swe-agent runner")


class ReplayRunner:
    name = "replay"

    def __init__(self, traces: list[Trace]) -> None:
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
        served = []
        for index in range(n):
            source = self.traces[index % len(self.traces)]
            trace = source.model_copy(
                update={"trace_id": trace_id(batch, index), "batch": batch, "skill_sha256": skill_sha256}, deep=True
            )
            # Which bundle trace this one is, so an audit can follow it back.
            archive_file(Path(archive_dir), index, "replayed_from.json",
                         json.dumps({"trace_id": source.trace_id, "batch": source.batch}) + "\n")
            served.append(trace)
            if progress is not None:
                progress(index, trace)
        return served
