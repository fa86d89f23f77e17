"""A compile's task set from the command line (SPEC §11): `--task` (repeatable), `--holdout`,
or a task-set file `--tasks set.yaml`, each bundle loaded and the set checked by
`core/tasks.py` `check_task_set`. Every refusal is one InputError line naming the file and
the field; nothing is written.

The task-set file is a YAML (or JSON) list of `{bundle: <path>, split: train|holdout}`,
paths relative to the file:

    - {bundle: tasks/status-update.json, split: train}
    - {bundle: tasks/release-notes.json, split: holdout}

Held-out bundles are loaded here only to name and hash them and to check that none of
their traces is in a training bundle; no compile step reads them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from deep_pipeline.core.tasks import (Split, TaskEntry, TaskSet, TaskSetError, check_task_set, task_set_problems,
                                     trace_content_hash)
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.bundle import LoadedBundle, load_bundle
from deep_pipeline.inputs.jsonfile import decode_utf8, describe_validation_error, read_bytes

FILE_SPLITS: dict[str, Split] = {"train": "training", "holdout": "held_out"}


class TaskSetItem(BaseModel):
    """One task of a task-set file."""

    model_config = ConfigDict(extra="forbid")

    bundle: str = Field(min_length=1, description="The task bundle, relative to the task-set file.")
    split: Literal["train", "holdout"]


class TaskSetFile(RootModel[list[TaskSetItem]]):
    """A task-set file: a list of tasks."""


class TaskInput(BaseModel):
    """A bundle named on the command line or in a task-set file, and where it was named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    split: Split
    label: str  # how an error names it: the path as given (with the task-set file before it)


class LoadedTaskSet(BaseModel):
    """The bundles of a checked task set, in the order given, and the set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: list[TaskInput]
    bundles: list[LoadedBundle]
    task_set: TaskSet

    @property
    def training(self) -> list[tuple[TaskInput, LoadedBundle]]:
        return [(i, b) for i, b in zip(self.inputs, self.bundles) if i.split == "training"]

    @property
    def held_out(self) -> list[tuple[TaskInput, LoadedBundle]]:
        return [(i, b) for i, b in zip(self.inputs, self.bundles) if i.split == "held_out"]

    @property
    def is_one_task(self) -> bool:
        """One training task and nothing held out: today's compile of one task."""
        return len(self.training) == 1 and not self.held_out


def inputs_from_flags(tasks: list[Path] | None, holdouts: list[Path] | None) -> list[TaskInput]:
    return ([TaskInput(path=Path(p), split="training", label=str(p)) for p in tasks or []]
            + [TaskInput(path=Path(p), split="held_out", label=str(p)) for p in holdouts or []])


def read_task_set_file(path: Path) -> list[TaskInput]:
    """The tasks a task-set file lists, each path resolved against the file's folder."""
    path = Path(path)
    try:
        data = yaml.safe_load(decode_utf8(read_bytes(path, "task-set file"), str(path)))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" line {line + 1}:" if line is not None else ""
        raise InputError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, list):
        got = "nothing" if data is None else type(data).__name__
        raise InputError(f"{path}: (top level): expected a list of {{bundle: <path>, split: train|holdout}}, got {got}")
    try:
        items = TaskSetFile.model_validate(data, strict=True).root
    except ValidationError as exc:
        raise InputError(describe_validation_error(exc, str(path))) from None
    if not items:
        raise InputError(f"{path}: (top level): no tasks; a task set needs at least one training task")
    return [TaskInput(path=path.parent / item.bundle, split=FILE_SPLITS[item.split],
                      label=f"{path}: [{index}].bundle {item.bundle}")
            for index, item in enumerate(items)]


def task_inputs(tasks: list[Path] | None, holdouts: list[Path] | None, tasks_file: Path | None) -> list[TaskInput]:
    """The tasks the flags name: `--task`/`--holdout`, or `--tasks FILE`, never both."""
    if tasks_file is not None and (tasks or holdouts):
        raise InputError(f"--tasks {tasks_file}: give the task set either in the file or with --task/--holdout, not both")
    if tasks_file is not None:
        return read_task_set_file(tasks_file)
    if not tasks and not holdouts:
        raise InputError("--task: no task given; name a task bundle with --task BUNDLE, or a task set with --tasks FILE")
    return inputs_from_flags(tasks, holdouts)


def load_task_set(inputs: list[TaskInput]) -> LoadedTaskSet:
    """Load every bundle (one-line errors as `load_bundle`'s) and check the set's rules (SPEC §11)."""
    bundles = [load_bundle(item.path) for item in inputs]
    task_set = TaskSet(tasks=[
        TaskEntry(task=loaded.bundle.task_name, bundle_hash=loaded.identity_hash, split=item.split,
                  trace_hashes=[trace_content_hash(t) for t in loaded.bundle.traces])
        for item, loaded in zip(inputs, bundles)])
    try:
        check_task_set(task_set)
    except TaskSetError as exc:
        # The same bundle in both splits also repeats its task name: say the telling problem.
        both = [p for p in task_set_problems(task_set) if "is in both splits" in p]
        raise InputError(_named(both[0] if both else str(exc), inputs)) from None
    return LoadedTaskSet(inputs=inputs, bundles=bundles, task_set=task_set)


def _named(problem: str, inputs: list[TaskInput]) -> str:
    """core/tasks.py names a task by its place in the set (`tasks[1] (training task 'x').task`);
    the user named it by a file: say that file and the bundle's own field."""
    problem = re.sub(r"\)\.task:", "): task_name:", problem)
    problem = re.sub(r"\)\.bundle_hash:", "): bundle_hash:", problem)
    problem = re.sub(r"\)\.trace_hashes\[(\d+)\]:", r"): traces[\1]:", problem)
    problem = re.sub(r"\btasks\[(\d+)\]", lambda m: inputs[int(m.group(1))].label, problem)
    if problem.startswith("tasks: no training task"):
        where = next((i.label.split(": [")[0] for i in inputs if ": [" in i.label), "--holdout")
        problem = f"{where}: no training task; a task set needs at least one (a --task, or split: train)"
    return problem
