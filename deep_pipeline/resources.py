"""Resources: where compiles live, and the defaults a new compile starts from."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.services import dagster_home


def default_store_root() -> Path:
    """`$DEEP_PIPELINE_STORE`, else `$DAGSTER_HOME/compiles`."""
    env = os.environ.get("DEEP_PIPELINE_STORE")
    return Path(env).resolve() if env else dagster_home() / "compiles"


class CompileStoreResource(dg.ConfigurableResource):
    """The compile store. Empty `root` means `default_store_root()`."""

    root: str = ""
    replay: bool = False  # answer model calls only from the cache (deterministic re-runs)

    def root_path(self) -> Path:
        return Path(self.root).resolve() if self.root else default_store_root()

    def context(self, compile_key: str) -> StepContext:
        return StepContext.open(self.root_path(), compile_key, replay=self.replay)


class CompileDefaultsResource(dg.ConfigurableResource):
    """Models and runner for compiles started from the UI, a job or the batch schedule.

    Provider keys are read from the environment by litellm (ANTHROPIC_API_KEY,
    OPENAI_API_KEY, ...); they are never copied into config, metadata or reports.
    """

    judge_model: str | None = None  # None: the deployment's default (deep_pipeline.yaml), else "local"
    editor_model: str | None = None
    agent_model: str | None = None
    runner: str | None = None
    agent_command: str | None = None

    def overrides(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}
