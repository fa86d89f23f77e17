"""The runner interface: a batch of N rollouts of one package on one task (SPEC §3, §6.4).

Every runner returns one Trace per rollout, ids `<batch>-r<index>`, and never raises
for an agent's failure: a failed rollout is a trace with `error_category` and
`error_reason`. The only InputError is a task directory that does not exist, raised
before any rollout starts.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Protocol

from pydantic import BaseModel, ConfigDict, field_validator

from deep_pipeline.core.models import Trace
from deep_pipeline.errors import InputError
from deep_pipeline.store import atomic_write_bytes

Progress = Callable[[int, Trace], None]
Verify = Callable[[int, Path], None]  # rollouts/verifier.py: (rollout index, its work directory)


class RolloutTask(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str
    task_dir: Path | None = None
    skill_name: str

    @field_validator("skill_name")
    @classmethod
    def _one_path_component(cls, name: str) -> str:
        # It becomes a folder name under .claude/skills/ etc.
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"skill name {name!r} must be a single folder name")
        return name


class Runner(Protocol):
    name: str

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
    ) -> list[Trace]: ...
    # `verify` (evaluation only, SPEC §10; a compile never passes one) is called with each
    # rollout's index and work directory after its agent finished, before the workdir goes.


def trace_id(batch: str, index: int) -> str:
    return f"{batch}-r{index}"


def check_task_dir(task: RolloutTask) -> None:
    """The one bad input a runner refuses: a task directory that is not there."""
    if task.task_dir is not None and not Path(task.task_dir).is_dir():
        raise InputError(f"{task.task_dir}: task directory does not exist (task_dir of the task bundle)")


def archive_file(archive_dir: Path, index: int, name: str, data: bytes | str) -> None:
    """One raw artefact of rollout `index`, written atomically under archive_dir/<index>/."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    atomic_write_bytes(Path(archive_dir) / str(index) / name, data)


def run_parallel(
    n: int, parallel: int, rollout: Callable[[int], Trace], progress: Progress | None,
    done: dict[int, Trace] | None = None,
) -> list[Trace]:
    """Run rollouts 0..n-1 on a thread pool; progress is called from this thread as each ends.

    `done` holds rollouts a crashed run already finished: they are returned, not run again.
    """
    from deep_pipeline.rollouts.process import CANCEL

    traces: list[Trace | None] = [(done or {}).get(index) for index in range(n)]
    todo = [index for index in range(n) if traces[index] is None]
    CANCEL.clear()
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(todo) or 1)), thread_name_prefix="rollout") as pool:
        futures = {pool.submit(rollout, index): index for index in todo}
        try:
            for future in as_completed(futures):
                index = futures[future]
                traces[index] = future.result()
                if progress is not None:
                    progress(index, traces[index])
        except BaseException:
            CANCEL.set()  # stop the agents still running; their traces are not stored
            for future in futures:
                future.cancel()
            raise
    return [trace for trace in traces if trace is not None]


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

