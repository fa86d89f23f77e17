"""Readable keys of a compile's steps (SPEC §2, DESIGN "Dagster mapping").

- compile key: `<skill name>-<first 6 hex of the identity hash>`, e.g. `pdf-3fa2b1`;
- matrix key: `<compile>/<level>/m<NN>` (the level's start is m00, refreshes follow);
- iteration key: `<compile>/<level>/i<NN>` (NN = the iteration's 0-based index in the level);
- trace batch of an iteration's candidate rollouts: `<level>-i<NN>`;
- a task set's step of one training task (SPEC §11): `<compile>/t<i>` (its rollouts of the
  input batch), `<matrix>/t<i>` (its columns), `<iteration>/t<i>` (its rollouts of the
  candidate); t<i> is the task's place in the set.

They double as Dagster dynamic partition keys, which must not contain "..." or control
characters, so the skill name is reduced to a slug of `[a-z0-9-]`. NN has at least two
digits and grows past 99 rather than wrapping.
"""

from __future__ import annotations

import re
from typing import Literal

from deep_pipeline.core.models import Level

KeyKind = Literal["matrix", "iteration"]

_LEVELS = ("section", "paragraph")
_KIND_LETTER = {"matrix": "m", "iteration": "i"}
# Lenient on the name part (any text without '/' or whitespace), so keys built before
# names were slugged still parse; strict on the rest.
_KEY = re.compile(r"^(?P<compile>[^/\s]+-[0-9a-f]{6})/(?P<level>section|paragraph)/(?P<kind>[mi])(?P<index>\d{2,})$")


def skill_slug(skill_name: str) -> str:
    """The skill name as it may appear in a key: lower case, runs of other characters as one '-'."""
    slug = re.sub(r"[^a-z0-9]+", "-", skill_name.lower()).strip("-")
    return slug or "skill"


def compile_key(skill_name: str, identity_hash: str) -> str:
    prefix = identity_hash[:6].lower()
    if not re.fullmatch(r"[0-9a-f]{6}", prefix):
        raise ValueError(f"identity hash must start with 6 hex digits, got {identity_hash[:12]!r}")
    return f"{skill_slug(skill_name)}-{prefix}"


def compile_of(key: str) -> str:
    """The compile key that every step's key starts with (a compile, matrix, iteration or task key)."""
    return key.split("/", 1)[0]


def _check(level: str, index: int) -> None:
    if level not in _LEVELS:
        raise ValueError(f"level must be 'section' or 'paragraph', got {level!r}")
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")


def _step_key(compile_key_: str, level: str, kind: KeyKind, index: int) -> str:
    _check(level, index)
    return f"{compile_key_}/{level}/{_KIND_LETTER[kind]}{index:02d}"


def iteration_label(level: Level, index: int) -> str:
    """The one form a person reads an iteration in (`section/i00`): the iteration key
    without its compile, used by the CLI, the report and the UI alike."""
    _check(level, index)
    return f"{level}/i{index:02d}"


def matrix_key(compile_key_: str, level: Level, index: int) -> str:
    return _step_key(compile_key_, level, "matrix", index)


def iteration_key(compile_key_: str, level: Level, index: int) -> str:
    return _step_key(compile_key_, level, "iteration", index)


def parse_key(key: str) -> tuple[str, Level, KeyKind, int]:
    """(compile key, level, "matrix"|"iteration", index) of a matrix or iteration key."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise ValueError(f"not a matrix or iteration key (<compile>/<level>/m<NN> or i<NN>): {key!r}")
    kind: KeyKind = "matrix" if match["kind"] == "m" else "iteration"
    return match["compile"], match["level"], kind, int(match["index"])  # type: ignore[return-value]


def task_key(owner_key: str, label: str) -> str:
    """The key of one training task's part of the step `owner_key` (a compile: its input batch's
    rollouts; a matrix: its columns; an iteration: its candidate's rollouts), `label` its `t<i>`."""
    if not re.fullmatch(r"t\d+", label):
        raise ValueError(f"a task label is t<i>, got {label!r}")
    return f"{owner_key}/{label}"


def parse_task_key(key: str) -> tuple[str, str]:
    """(owner key, task label) of a task key: the owner a compile, matrix or iteration key."""
    owner, _, label = key.rpartition("/")
    if not re.fullmatch(r"t\d+", label) or not owner or ("/" in owner and _KEY.fullmatch(owner) is None):
        raise ValueError(f"not a task key (<compile, matrix or iteration>/t<i>): {key!r}")
    return owner, label


INPUT_BATCH = "input"  # the trace batch of the incumbent's traces


def batch_name(level: Level, index: int) -> str:
    """The trace batch holding iteration `index`'s candidate rollouts."""
    _check(level, index)
    return f"{level}-i{index:02d}"


# The model cache's step keys (SPEC §9): one per call a step makes, so a resumed step
# finds each of its answers again and a new attempt is a new call.
def column_call_key(matrix_key_: str, dimension: str) -> str:
    return f"{matrix_key_}/column/{dimension}"


def edit_call_key(iteration_key_: str, attempt: int) -> str:
    return f"{iteration_key_}/edit/{attempt}"


def compare_call_key(iteration_key_: str, candidate_label: str | None = None, sample: int = 0, pair: int = 0,
                     model: str | None = None) -> str:
    """A comparison's call: the single call of the original design keeps its key; each call of
    several names its order (the candidate's side) and sample, and a sequential comparison's
    later pairs (core/sequential.py) their pair, `p<k>`, so the first pair's keys stay as they were.
    A judge panel's call (core/panel.py) also names the model that answers it, `@<model>`, so a
    changed panel never reads another model's answer; without a panel (`model` None) no key changes."""
    if candidate_label is None:
        key = f"{iteration_key_}/compare"
    else:
        where = f"p{pair}/" if pair else ""
        key = f"{iteration_key_}/compare/{where}candidate-{candidate_label}/s{sample}"
    return key if model is None else f"{key}@{model}"


def rollout_call_key(batch: str, index: int) -> str:
    """One chat rollout's call: the batch and the rollout's place in it. In a task set (SPEC §11)
    `batch` is the batch with the task's label, `<batch>-t<i>`."""
    return f"rollout/{batch}/r{index}"


_TASK_LABEL = re.compile(r"-t\d+$")


def rollout_batch(call_key: str) -> str | None:
    """The batch a rollout's call was made for (without a task set's `-t<i>`), None for another call."""
    parts = call_key.split("/")
    return _TASK_LABEL.sub("", parts[1]) if parts[0] == "rollout" and len(parts) >= 2 else None



