"""Task sets (SPEC §11): which bundles a compile trains on and which it holds out, the
rules a set must keep, and the set's part of the compile's identity.

Pure: a task is named by its bundle's identity hash (`inputs/bundle.py` `identity_hash`:
the bundle's canonical JSON without its verifier, what a compile of one task is keyed
on today) and its traces' content hashes (`trace_content_hash`); whoever reads the
bundles computes them and hands them over.

When a held-out task leaks into training: the same bundle (identity hash) is in both
splits, or a trace with the same content hash is in a training bundle and a held-out
one. A trace's content is the trace without its `trace_id` and `batch`, which are
labels: the same rollout imported into two bundles under two ids is still one rollout,
and a held-out task whose recorded rollouts a training task's judge reads is not sealed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field

from deep_pipeline.core.models import Record, Trace

Split = Literal["training", "held_out"]
# A task's name appears in decision reasons (`task_regressed:<task>`,
# `runtime_regressed:<task>:<items>`), which are read by splitting on ':' and ','.
_NOT_IN_NAMES = (":", ",", "\n", "\r")
_SHOWN_HEX = 12


class TaskEntry(Record):
    """One task of a set: its name (the bundle's `task_name`), its bundle, its split."""

    task: str = Field(min_length=1)
    bundle_hash: str = Field(min_length=1)  # the bundle's identity hash
    split: Split
    trace_hashes: list[str] = Field(default_factory=list)  # its traces' content hashes, in bundle order


class TaskSet(Record):
    """One or more training tasks and zero or more held-out ones. A compile of one task is
    a set of one training task and nothing held out."""

    tasks: list[TaskEntry]

    @property
    def training(self) -> list[TaskEntry]:
        return [entry for entry in self.tasks if entry.split == "training"]

    @property
    def held_out(self) -> list[TaskEntry]:
        return [entry for entry in self.tasks if entry.split == "held_out"]

    @property
    def training_names(self) -> list[str]:
        return [entry.task for entry in self.training]


class TaskSetError(ValueError):
    """A task set that breaks a rule of SPEC §11; the message is one line naming the task and field."""


def trace_content_hash(trace: Trace) -> str:
    """sha256 of the trace's canonical JSON without its labels (`trace_id`, `batch`)."""
    content = trace.model_dump(mode="json", exclude={"trace_id", "batch"})
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def task_set_problems(task_set: TaskSet) -> list[str]:
    """Every rule the set breaks, one line each, in the order the tasks are listed."""
    problems = _name_problems(task_set)
    if not task_set.training:
        problems.append("tasks: no training task; a task set needs at least one")
    problems += _bundle_problems(task_set)
    problems += _leak_problems(task_set)
    return problems


def check_task_set(task_set: TaskSet) -> TaskSet:
    """The set when it keeps every rule; TaskSetError with the first problem otherwise."""
    problems = task_set_problems(task_set)
    if problems:
        raise TaskSetError(problems[0])
    return task_set


def _where(index: int, entry: TaskEntry) -> str:
    return f"tasks[{index}] ({entry.split} task {entry.task!r})"


def _name_problems(task_set: TaskSet) -> list[str]:
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(task_set.tasks):
        if any(char in entry.task for char in _NOT_IN_NAMES) or not entry.task.strip():
            problems.append(f"{_where(index, entry)}.task: a task name must not be blank or hold ':', ',' "
                            "or a line break (it is named in decision reasons)")
        if entry.task in seen:
            problems.append(f"{_where(index, entry)}.task: duplicate task name (also tasks[{seen[entry.task]}])")
        seen.setdefault(entry.task, index)
    return problems


def _bundle_problems(task_set: TaskSet) -> list[str]:
    """The same bundle twice: in both splits (a held-out task trained on) or twice in one (counted twice)."""
    problems: list[str] = []
    seen: dict[str, tuple[int, TaskEntry]] = {}
    for index, entry in enumerate(task_set.tasks):
        if entry.bundle_hash not in seen:
            seen[entry.bundle_hash] = (index, entry)
            continue
        first_index, first = seen[entry.bundle_hash]
        what = ("is in both splits: a held-out task must not be trained on" if first.split != entry.split
                else f"is listed twice in the {entry.split} split")
        problems.append(f"{_where(index, entry)}.bundle_hash: bundle {entry.bundle_hash[:_SHOWN_HEX]} {what} "
                        f"(also {_where(first_index, first)})")
    return problems


def _leak_problems(task_set: TaskSet) -> list[str]:
    """Held-out traces that a training bundle also holds (see the module docstring)."""
    in_training: dict[str, tuple[int, TaskEntry]] = {}
    for index, entry in enumerate(task_set.tasks):
        if entry.split == "training":
            for trace_hash in entry.trace_hashes:
                in_training.setdefault(trace_hash, (index, entry))
    problems: list[str] = []
    for index, entry in enumerate(task_set.tasks):
        if entry.split != "held_out":
            continue
        for position, trace_hash in enumerate(entry.trace_hashes):
            if trace_hash in in_training:
                train_index, train = in_training[trace_hash]
                problems.append(f"{_where(index, entry)}.trace_hashes[{position}]: trace {trace_hash[:_SHOWN_HEX]} is "
                                f"also in {_where(train_index, train)}: held-out traces would leak into training")
                break  # one line per held-out task
    return problems


def identity_fields(task_set: TaskSet) -> dict:
    """The set's part of the compile's identity (SPEC §2, §11): each split as a sorted list
    of bundle hashes. A set of one training task and nothing held out is today's compile of
    one task and keeps its identity exactly: `{"bundle": <its hash>}`."""
    training = sorted(entry.bundle_hash for entry in task_set.training)
    held_out = sorted(entry.bundle_hash for entry in task_set.held_out)
    if len(training) == 1 and not held_out:
        return {"bundle": training[0]}
    return {"training": training, "held_out": held_out}


def identity_payload(package_hash: str, task_set: TaskSet, settings: dict) -> dict:
    """What a compile's identity hash is taken of (sha256 of its JSON with sorted keys):
    the package, the task set and the identity settings (`CompileConfig.identity_settings`)."""
    return {"package": package_hash, **identity_fields(task_set), "config": settings}


def single_task(task: str, bundle_hash: str, trace_hashes: list[str] | None = None) -> TaskSet:
    """The task set of a compile of one task."""
    return TaskSet(tasks=[TaskEntry(task=task, bundle_hash=bundle_hash, split="training",
                                    trace_hashes=list(trace_hashes or []))])
