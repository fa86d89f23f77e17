"""The batch manifest: the skills and task bundles a batch compiles, each with its overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.engine.settings import read_config_file
from deep_pipeline.errors import InputError


class BatchEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skill: str
    bundle: str
    overrides: dict[str, Any] = Field(default_factory=dict)


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
