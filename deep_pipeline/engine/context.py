"""What every step starts from: the compile's folder, its record, and its outlook (history, state, next action)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from deep_pipeline.core.config import CompileConfig, Dimension
from deep_pipeline.core.history import History
from deep_pipeline.core.actions import Action, StepKind, action_label, step_of
from deep_pipeline.core.policy import CompileState, derive_state, next_action
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.engine.services import Services, build_services
from deep_pipeline.errors import StepError
from deep_pipeline.locks import file_lock
from deep_pipeline.store import remove_orphaned_temps

# The step locks this thread holds: a step inside a step (a helper that also locks)
# must not wait for itself, as flock on a second open file would.
_held = threading.local()


class CompileNotInStore(StepError):
    """The store this process sees has no folder for a compile the instance knows about.

    On one machine that is a removed compile; across machines it is a store that is not
    shared: the compile was registered where a run cannot see it. The message says both
    and names the host, since the same path means different disks on different hosts.
    """


def missing_compile_line(root: Path, key: str) -> str:
    return (f"the store at {root} on host {socket.gethostname()} has no compile {key} (no {key}/compile.json): "
            "DEEP_PIPELINE_STORE must be a filesystem every run's machine mounts at the same path "
            "(or the compile was removed)")


@dataclass
class CompileHandle:
    """A handle on one compile: its folder, record, services, step lock and outlook (what every step starts from)."""

    cdir: CompileDir
    replay: bool = False
    api_keys: dict[str, str] = field(default_factory=dict, repr=False)
    transport: Any = field(default=None, repr=False)  # where litellm runs (llm/transport.py); None: here
    _services: Services | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, root: Path, key: str, *, services: Services | None = None, replay: bool = False,
             api_keys: dict[str, str] | None = None, transport=None) -> "CompileHandle":
        cdir = CompileDir(root, key)
        if not cdir.exists():  # the first touch of the folder: the one place a non-shared store shows
            raise CompileNotInStore(missing_compile_line(cdir.root, key))
        return cls(cdir=cdir, replay=replay, api_keys=dict(api_keys or {}), transport=transport, _services=services)

    @cached_property
    def record(self) -> CompileRecord:
        return self.cdir.record()

    @cached_property
    def task_prompt(self) -> str:
        """The (first training) task's prompt, read from the stored bundle (compile.json stays small)."""
        return self.cdir.bundle().prompt

    @cached_property
    def training_tasks(self) -> list["TrainingTask"]:
        """The tasks a compile step may read (SPEC §11): the training split only, so a held-out
        bundle is never opened by a step. A compile of one task has one, labelled None."""
        record = self.record
        if record.tasks is None:
            return [TrainingTask(record.task_name, self.task_prompt, record.task_dir, self.cdir.bundle(), None)]
        training = [entry for entry in record.tasks if entry.split == "training"]
        return [TrainingTask(entry.task, (bundle := self.cdir.bundle(entry.stored)).prompt, entry.task_dir, bundle, f"t{i}")
                for i, entry in enumerate(training)]

    @property
    def editor_prompt(self) -> str:
        """The task text the editor is shown: the one task's prompt, or every training task's, named."""
        tasks = self.training_tasks
        if len(tasks) == 1:
            return tasks[0].prompt
        return "\n\n".join(f"Task {task.name!r}:\n{task.prompt}" for task in tasks)

    def task_traces(self, batch: str) -> list[tuple["TrainingTask", list]]:
        """Each training task with its traces in `batch` (a compile of one task: the whole batch)."""
        record, traces = self.cdir.batch(batch), self.cdir.traces(batch)
        tasks = self.training_tasks
        if record.task_traces is None:
            return [(tasks[0], traces)]
        by_id = {trace.trace_id: trace for trace in traces}
        return [(task, [by_id[tid] for tid in record.task_traces.get(task.name, [])]) for task in tasks]

    @property
    def config(self) -> CompileConfig:
        return self.record.config

    @property
    def services(self) -> Services:
        # Built once, under a lock: the matrix step's column threads all reach for it, and
        # two Services would mean two budgets and two caps.
        with self._lock:
            if self._services is None:
                self._services = build_services(self.cdir, self.record, replay=self.replay, api_keys=self.api_keys,
                                                transport=self.transport)
            return self._services

    @contextlib.contextmanager
    def step_lock(self, note: Callable[[str], None] | None = None, shared: bool = False) -> Iterator[None]:
        """One engine step of this compile at a time, whoever runs it (SPEC §9).

        The driver lock keeps drivers apart, but a run the daemon launched goes through
        neither it nor the run queue's limit when a CLI driver runs the same compile; so
        each step body holds `<compile>/step.lock`. A second one waits (one line, on
        stderr and to `note`) and then finds the first one's records: the steps resume
        from what is stored, so the end state is that of one driver alone. Under the
        lock nothing else writes the folder, so a killed writer's temp files go now.
        `shared`: a task set's task rollouts (SPEC §11), which run beside each other (each
        writes its own task's files) and never beside a step; they leave the temp files be.
        """
        self.cdir.require()
        path = self.cdir.path / "step.lock"
        if not hasattr(_held, "paths"):
            _held.paths = set()
        held = _held.paths
        if path in held:
            yield
            return
        def waiting() -> None:
            line = f"{self.cdir.path}: another step of this compile is running (a daemon run or another driver); waiting for it"
            print(f"deep-pipeline: {line}", file=sys.stderr, flush=True)
            if note:
                note(line)

        with file_lock(path, shared=shared, on_wait=waiting):
            held.add(path)
            try:
                if not shared:
                    packages = (self.cdir.input_skill, self.cdir.final_skill, *self.cdir.path.glob("iterations/*/candidate"))
                    remove_orphaned_temps(self.cdir.path, packages)
                yield
            finally:
                held.discard(path)

    def dimension(self, name: str) -> Dimension:
        for dim in self.config.dimensions:
            if dim.name == name:
                return dim
        raise StepError(f"{self.cdir.key}: unknown dimension {name!r}")

    def history(self) -> History:
        self.cdir.require()
        return self.cdir.history()

    def look(self) -> "Outlook":
        """The compile as the policy sees it right now: its history, state and next action."""
        history = self.history()
        state = derive_state(history, self.config)
        return Outlook(history, state, next_action(state, self.config))

    def expect(self, kind: StepKind, partition_key: str) -> "Outlook":
        """The outlook, checked to name this step next: the one "is this the compile's next step?" check.

        A step calls it only when it has no stored record to return: a finished step re-run
        (a resume, a re-materialization in the UI) returns its record whatever comes next.
        """
        outlook = self.look()
        if step_of(self.cdir.key, outlook.action) != (kind, partition_key):
            raise StepError(f"{kind} {partition_key}: not the compile's next step "
                            f"(the policy asks for {action_label(outlook.action)})")
        return outlook


@dataclass(frozen=True)
class TrainingTask:
    """One training task of a compile (SPEC §11) and how its work is named apart.

    `label` is None for a compile of one task, whose batches, trace ids and call keys are
    exactly as they always were; in a task set it is `t<i>` (its place among the training
    tasks), which names its traces (`<batch>-t<i>-r<n>`) and its calls (`<key>/t<i>`).
    """

    name: str
    prompt: str
    task_dir: str | None
    bundle: Any
    label: str | None

    def trace_label(self, batch: str) -> str:
        return batch if self.label is None else f"{batch}-{self.label}"

    def call_key(self, key: str) -> str:
        return key if self.label is None else f"{key}/{self.label}"


@dataclass(frozen=True)
class Outlook:
    history: History
    state: CompileState
    action: Action
