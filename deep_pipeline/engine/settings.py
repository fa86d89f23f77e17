"""Deployment settings and a compile's effective config.

The deployment file (`deep_pipeline.yaml`, or the file named by `$DEEP_PIPELINE_CONFIG`)
is read when the definitions load: the dimensions and their rubrics, default models,
the `llm` pool size. A compile's own config (`--config`, `compile.yaml` run config,
batch overrides) may set models, runner and SPEC's numeric defaults, never dimensions.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.core.config import DEFAULT_DIMENSIONS, CompileConfig, Dimension
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import decode_utf8, read_bytes

DEPLOYMENT_FILE = "deep_pipeline.yaml"


class Deployment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dimensions: tuple[Dimension, ...] = DEFAULT_DIMENSIONS
    defaults: dict[str, Any] = Field(default_factory=dict)  # CompileConfig fields
    # No pool limit here: the `llm` pool is the Dagster instance's (dagster.yaml), so one
    # setting governs every code location and compile on the home.


def deployment_path() -> Path | None:
    env = os.environ.get("DEEP_PIPELINE_CONFIG")
    if env:
        return Path(env)
    from deep_pipeline.home import checkout_root

    checkout = checkout_root()
    for candidate in (Path.cwd() / DEPLOYMENT_FILE, *([checkout / DEPLOYMENT_FILE] if checkout else [])):
        if candidate.is_file():
            return candidate
    return None


def load_deployment(path: Path | None = None) -> Deployment:
    path = path or deployment_path()
    if path is None:
        return Deployment()
    data = _read_settings(Path(path))
    if "llm_pool_limit" in data:  # read by nothing, so refused rather than silently ignored
        raise InputError(f"{path}: llm_pool_limit: not a setting of this file; the llm pool's limit is "
                         "concurrency.pools.default_limit in $DAGSTER_HOME/dagster.yaml")
    if data.get("dimensions") == "default":
        data.pop("dimensions")
    check_known(data, Deployment.model_fields, str(path))
    if isinstance(data.get("defaults"), dict):
        check_known(data["defaults"], CompileConfig.model_fields, f"{path}: defaults")
    try:
        deployment = Deployment.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: {_first_error(exc)}") from None
    if "dimensions" in deployment.defaults:
        raise InputError(f"{path}: defaults.dimensions: set dimensions at the top level, not in defaults")
    return deployment


def effective_config(deployment: Deployment, overrides: dict[str, Any], origin: str = "config") -> CompileConfig:
    """Deployment defaults, then the compile's overrides; the dimensions stay the deployment's."""
    if "dimensions" in overrides:
        raise InputError(f"{origin}: dimensions: a compile cannot change the dimensions (set them in {DEPLOYMENT_FILE})")
    check_known(overrides, CompileConfig.model_fields, origin)
    merged = {**deployment.defaults, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return CompileConfig.model_validate({**merged, "dimensions": deployment.dimensions})
    except ValidationError as exc:
        raise InputError(f"{origin}: {_first_error(exc)}") from None


def check_known(settings: dict[str, Any], known: Iterable[str], origin: str) -> None:
    """Refuse every unknown key in one line, each with its likely intended name (`judge_modle`)."""
    known = list(known)
    unknown = [str(key) for key in settings if key not in known]
    if not unknown:
        return
    named = []
    for key in unknown:
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        named.append(f"{key} (did you mean {near[0]}?)" if near else key)
    noun = "setting" if len(unknown) == 1 else "settings"
    raise InputError(f"{origin}: unknown {noun}: {', '.join(named)}; see the README's table of settings")


def read_config_file(path: Path) -> dict[str, Any]:
    """A compile's settings from YAML, or TOML when the file ends in `.toml`."""
    return _read_settings(Path(path))


def _read_settings(path: Path) -> dict[str, Any]:
    return _read_toml(path) if path.suffix.lower() == ".toml" else _read_yaml(path)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        # read_bytes: an unreadable or special file is bad input (exit 2), not a failed step
        data = yaml.safe_load(decode_utf8(read_bytes(path, "YAML config file"), str(path)))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" line {line + 1}" if line is not None else ""
        raise InputError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such file (expected a TOML config)")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))  # a TOML document is always a table
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: invalid TOML ({exc})") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"]) or "(top)"
    return f"{loc}: {err['msg']}"
