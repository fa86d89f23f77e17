"""Resources: where compiles live, and the defaults a new compile starts from."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from deep_pipeline.runtime.tags import DRIVER_TAG
from deep_pipeline.engine.context import CompileNotInStore, CompileHandle
from deep_pipeline.home import dagster_home, store_root
from deep_pipeline.llm.transport import WORKER_VARIABLE
from deep_pipeline.secrets import PROVIDER_VARIABLES

# The providers this resource has a field for -> their key variable (from the one map).
KEY_VARIABLES = {p: PROVIDER_VARIABLES[p][0] for p in ("anthropic", "openai", "gemini")}


class ProviderKeysResource(dg.ConfigurableResource):
    """Provider API keys as Dagster `EnvVar`s: the UI shows the variable, never the value.

    They are handed to the model calls directly; none is ever written to a record,
    metadata, a log or an agent's environment. Unset ones fall back to litellm's own
    reading of the environment.
    """

    anthropic_api_key: str | None = None
    openai_api_key: str | None = None
    gemini_api_key: str | None = None

    @classmethod
    def from_environment(cls) -> "ProviderKeysResource":
        """EnvVars for the keys set when the definitions load (an unset EnvVar fails every run)."""
        return cls(**{f"{p}_api_key": dg.EnvVar(v) for p, v in KEY_VARIABLES.items() if os.environ.get(v)})

    def by_provider(self) -> dict[str, str]:
        return {p: getattr(self, f"{p}_api_key") for p in KEY_VARIABLES if getattr(self, f"{p}_api_key")}


class StoreNotShared(CompileNotInStore, dg.Failure):
    """CompileNotInStore raised in a Dagster step: a `Failure`, so the step fails with our one
    line as its message (not "Error occurred while executing op" over a traceback), and still
    a StepError, so the loop sensor skips the compile with that line as its reason."""

    def __init__(self, line: str):
        dg.Failure.__init__(self, description=line, allow_retries=False)


class CompileStoreResource(dg.ConfigurableResource):
    """The compile store. Empty `root` means `deep_pipeline.home.store_root()`."""

    root: str = ""
    replay: bool = False  # answer model calls only from the cache (deterministic re-runs)
    provider_keys: ProviderKeysResource | None = None
    _worker_home: Path | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # A run with no driver of ours was started by a run launcher in a fresh process that
        # makes a few model calls and exits: it sends through the long-lived model worker
        # rather than import litellm (4-5 CPU-s) itself (llm/transport.py).
        run = context.run
        if run is not None and DRIVER_TAG not in run.tags and os.environ.get(WORKER_VARIABLE) != "0":
            self._worker_home = dagster_home()

    def transport(self):
        """Where this run's model calls run: the home's model worker, or None (in this process)."""
        if self._worker_home is None:
            return None
        from deep_pipeline.llm.model_worker import WorkerTransport

        return WorkerTransport(self._worker_home)

    def root_path(self) -> Path:
        return Path(self.root).resolve() if self.root else store_root()

    def context(self, compile_key: str) -> CompileHandle:
        try:
            return CompileHandle.open(self.root_path(), compile_key, replay=self.replay, api_keys=self.provider_keys.by_provider() if self.provider_keys else None,
                                     transport=self.transport())
        except CompileNotInStore as exc:
            raise StoreNotShared(str(exc)) from None


class CompileDefaultsResource(dg.ConfigurableResource):
    """Models and runner for compiles the `start_compile` and `compile` jobs register (run config
    overrides win). A batch entry takes only the deployment's defaults and its own overrides.

    No keys here: they come from ProviderKeysResource (EnvVars), never from config.
    """

    judge_model: str | None = None  # None: the deployment's default (deep_pipeline.yaml), else "local"
    editor_model: str | None = None
    agent_model: str | None = None
    runner: str | None = None
    agent_command: str | None = None

    def overrides(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}
