"""`make_runner`: the runner a compile's config names (chat, mini-swe-agent, command, replay).

Apart from base.py, which every runner imports: the factory imports every runner, so in
base it made base and the runners one import cycle. Runners are
imported when picked, so this module stays light (no litellm, no mini-swe-agent).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.models import Trace
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.base import Runner
from deep_pipeline.rollouts.sandbox import DEFAULT_IDLE_TIMEOUT_S, SandboxLimits

if TYPE_CHECKING:  # the llm layer imports litellm: keep it off this module's import path
    from deep_pipeline.llm.client import ModelClient, ModelSettings


def make_runner(
    config: CompileConfig,
    *,
    model_client: Callable[[], "ModelClient"] | None = None,
    agent_settings: "ModelSettings | None" = None,
    replay_traces: list[Trace] | None = None,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    local_home: Path | None = None,
    sandbox_parent: Path | None = None,
    agents_dir: Path | None = None,
) -> Runner:
    """The runner the compile's config names.

    `model_client` builds the agent's ModelClient (chat); `agent_settings` is the agent
    model for subprocess agents (defaults to config.agent_model); `local_home` is where
    the embedded local model's server is recorded when the agent model is `local`;
    `agents_dir` is where subprocess runners record their running agents (the compile's
    `agents/`), so the next run stops what a killed one left.
    """
    limits = SandboxLimits(timeout_s=config.rollout_timeout_s, idle_timeout_s=idle_timeout_s)
    if config.runner == "chat":
        from deep_pipeline.rollouts.chat import ChatRunner

        if model_client is None:
            raise InputError("runner 'chat' needs the agent model client (model_client=...)")
        return ChatRunner(model_client, parallel=config.parallel, default_model=config.agent_model,
                          timeout_s=config.rollout_timeout_s)
    if config.runner == "replay":
        from deep_pipeline.rollouts.replay import ReplayRunner

        return ReplayRunner(replay_traces or [])
    model, api_base = _agent_model(config, agent_settings)
    api_key = agent_settings.api_key if agent_settings is not None else None
    common = dict(model=model, api_base=api_base, api_key=api_key, parallel=config.parallel, limits=limits,
                  sandbox_parent=sandbox_parent, local_home=local_home, agents_dir=agents_dir)
    if config.runner == "mini-swe-agent":
        from deep_pipeline.rollouts.miniswe import MiniSweRunner

        return MiniSweRunner(**common, settings=agent_settings)
    from deep_pipeline.rollouts.command import CommandRunner

    if not config.agent_command:
        raise InputError("runner 'command' needs agent_command in the compile config")
    return CommandRunner(config.agent_command, config.agent_output_format, **common)


def _agent_model(config: CompileConfig, settings: "ModelSettings | None") -> tuple[str, str | None]:
    if settings is None:
        return config.agent_model, None
    return settings.model, settings.api_base
