"""The batch manifest: the skills and task bundles (or task sets) a batch compiles, each with its overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from deep_pipeline.engine.settings import read_config_file
from deep_pipeline.errors import InputError


class BatchEntry(BaseModel):
    """A skill and its task: one bundle, or a task-set file (SPEC §11, as `compile --tasks`);
    paths relative to the manifest."""

    model_config = ConfigDict(extra="forbid")
    skill: str
    bundle: str | None = None
    tasks: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_task_source(self) -> "BatchEntry":
        if (self.bundle is None) == (self.tasks is None):
            raise ValueError("give the entry's task as either bundle (a task bundle) or tasks (a task-set file), "
                             "one of the two")
        return self


class BatchManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[BatchEntry]


def load_manifest(path: Path) -> BatchManifest:
    data = read_config_file(path)
    try:
        return BatchManifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{path}: {loc}: {err['msg']}") from None
