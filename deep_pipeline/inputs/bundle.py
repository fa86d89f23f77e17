"""The task bundle (SPEC §2): the task's prompt, where its files are, and input traces.

A bundle is one JSON file, described by `deep_pipeline/schemas/task_bundle.schema.json`
(`deep-pipeline schema` prints it). A relative `task_dir` is relative to the bundle
file, not to the current folder, so a bundle and its task travel together.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from deep_pipeline.core.models import Trace
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import describe_validation_error, load_json_file
from deep_pipeline.store import sha256_bytes

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_RESOURCE = "schemas/task_bundle.schema.json"


class TaskBundle(BaseModel):
    """One task: what the agent is asked, where its files are, traces it already produced."""

    model_config = ConfigDict(extra="forbid", title="TaskBundle")

    task_name: str = Field(min_length=1, description="A short name for the task, used in compile keys and reports.")
    prompt: str = Field(min_length=1, description="The task prompt the agent is given.")
    task_dir: str | None = Field(
        default=None,
        description="The task's files (copied into each rollout's workdir); relative to the bundle file. "
        "Absent for prompt-only tasks.",
    )
    agent: str | None = Field(default=None, description="The agent that produced the traces, e.g. claude-code.")
    agent_model: str | None = Field(default=None, description="The model that agent ran with.")
    traces: list[Trace] = Field(default_factory=list, description="Rollouts already recorded; may be empty.")
    verifier: str | None = Field(
        default=None,
        description="A shell command template run by `deep-pipeline evaluate` in each rollout's work directory "
        "after the agent finished; exit 0 = pass. `{workdir}` is replaced by that directory (shell-quoted). "
        "A compile never runs it, no prompt shows it, and it is not part of the compile's identity.",
    )

    @field_validator("task_name", "prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("verifier")
    @classmethod
    def _names_its_workdir(cls, value: str | None) -> str | None:
        if value is not None and WORKDIR not in value:
            raise ValueError(f"must contain {WORKDIR} (the rollout's work directory the verifier checks)")
        return value


class LoadedBundle(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle: TaskBundle
    path: Path
    task_dir: Path | None
    bundle_hash: str  # sha256 of the file's bytes, as `inspect` shows it
    identity_hash: str  # what the compile's identity hashes: the bundle without its verifier


# Fields of a bundle that are not part of a compile's identity (SPEC §2, §10): the
# verifier is for `evaluate` only, so adding one must not make a new compile.
NOT_IDENTITY = ("verifier",)
WORKDIR = "{workdir}"


def duplicate_trace_ids(traces: list[Trace]) -> tuple[int, int, str] | None:
    """The first repeated trace id as (first index, repeat index, id), or None."""
    seen: dict[str, int] = {}
    for index, trace in enumerate(traces):
        if trace.trace_id in seen:
            return seen[trace.trace_id], index, trace.trace_id
        seen[trace.trace_id] = index
    return None


def validate_bundle(data: Any, label: str) -> TaskBundle:
    """Check parsed JSON against the bundle model; one line naming the JSON path on failure."""
    if not isinstance(data, dict):
        raise InputError(f"{label}: top level is not an object; expected a task bundle (see `deep-pipeline schema`)")
    try:
        # strict: "3" is not an integer and 1 is not a string in a file a user wrote.
        bundle = TaskBundle.model_validate(data, strict=True)
    except ValidationError as exc:
        raise InputError(describe_validation_error(exc, label)) from None
    dup = duplicate_trace_ids(bundle.traces)
    if dup:
        first, again, trace_id = dup
        raise InputError(f"{label}: traces[{again}].trace_id: duplicate trace id {trace_id!r} (also traces[{first}])")
    return bundle


def resolve_task_dir(task_dir: str | None, bundle_path: Path, label: str) -> Path | None:
    if task_dir is None:
        return None
    shown = repr(task_dir) if len(task_dir) <= 200 else repr(task_dir[:200]) + "…"
    try:
        resolved = (Path(bundle_path).parent / task_dir).resolve()
        exists, is_dir = resolved.exists(), resolved.is_dir()
    except ValueError:  # a NUL byte in the path
        raise InputError(f"{label}: task_dir: {shown} is not a usable path (it holds a NUL byte)") from None
    except RuntimeError:  # Python < 3.13 on a symlink loop
        raise InputError(f"{label}: task_dir: {shown} is a symlink loop") from None
    except OSError as exc:  # too long, a loop (3.13), no permission, ...
        raise InputError(f"{label}: task_dir: {shown} cannot be used: {exc.strerror or exc}") from None
    if not exists:
        raise InputError(f"{label}: task_dir: {shown} does not exist (resolved to {resolved})")
    if not is_dir:
        raise InputError(f"{label}: task_dir: {shown} is not a folder (resolved to {resolved})")
    return resolved


def load_bundle(path: Path | str) -> LoadedBundle:
    """Load and check a bundle file; raise InputError (one line) when it is unusable."""
    path = Path(path)
    data, parsed = load_json_file(path)
    bundle = validate_bundle(parsed, str(path))
    return LoadedBundle(
        bundle=bundle,
        path=path.resolve(),
        task_dir=resolve_task_dir(bundle.task_dir, path, str(path)),
        bundle_hash=sha256_bytes(data),
        identity_hash=identity_hash(parsed),
    )


def identity_hash(parsed: dict[str, Any]) -> str:
    """sha256 of the bundle's canonical JSON without the fields outside its identity.

    Canonical (sorted keys, no spaces), so the hash does not depend on where in the file
    a verifier was added or how the file is indented.
    """
    kept = {key: value for key, value in parsed.items() if key not in NOT_IDENTITY}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_bytes(text.encode("utf-8"))


def bundle_json_schema() -> dict[str, Any]:
    """The JSON Schema of a task bundle (the committed schema file must equal it)."""
    schema = TaskBundle.model_json_schema()
    return {
        "$schema": SCHEMA_DIALECT,
        **schema,
        "description": "A deep_pipeline task bundle: the task prompt, its files, and traces of agent runs.",
    }


def committed_schema_text() -> str:
    return resources.files("deep_pipeline").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")


def schema_text() -> str:
    return json.dumps(bundle_json_schema(), indent=2, ensure_ascii=False) + "\n"
