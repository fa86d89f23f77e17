"""The `mini-swe-agent` runner (PyPI mini-swe-agent 2.x, tool calls).

Each rollout runs our worker (`miniswe_worker`) in its own process group with a
scrubbed environment, in a fresh copy of the task directory with the skill installed
at `.claude/skills/<name>/` and `skills/<name>/` and its text in the system prompt.
The worker writes mini-swe-agent's trajectory, which `steps_from_miniswe` turns into
trace steps (commands, their output, the exit status).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.agent_process import Launch, ProcessRunner, Reading
from deep_pipeline.rollouts.base import RolloutTask
from deep_pipeline.rollouts.process import ProcessResult
from deep_pipeline.rollouts.sandbox import Sandbox, agent_env, model_env_vars
from deep_pipeline.secrets import redact

MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
# Jinja renders this template: the skill and its name go in as variables so braces in
# a SKILL.md are never read as template syntax.
SYSTEM_TEMPLATE = """You are a helpful assistant that can interact with a computer.

The skill `{{ skill_name }}` is installed in your working directory at `skills/{{ skill_name }}/` \
(also `.claude/skills/{{ skill_name }}/`). Follow it where it applies. Its SKILL.md:

<skill name="{{ skill_name }}">
{{ skill_text }}
</skill>"""


class MiniSweRunner(ProcessRunner):
    name = "mini-swe-agent"
    install_dirs = (".claude/skills", "skills")

    def __init__(self, *, settings=None, step_limit: int = 30, command_timeout_s: int = 60,
                 retry_attempts: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.step_limit = step_limit
        self.command_timeout_s = command_timeout_s
        self.retry_attempts = retry_attempts
        self.model_kwargs = {}
        if settings is not None:  # the agent model's sampling settings, as the llm layer holds them
            self.model_kwargs = {"temperature": settings.temperature, "max_tokens": settings.max_tokens}

    def launch(self, sandbox: Sandbox, task: RolloutTask, package_dir: Path) -> Launch:
        spec_path = sandbox.root / "worker_spec.json"
        spec_path.write_text(json.dumps(self.worker_spec(sandbox, task, package_dir)), encoding="utf-8")
        env = agent_env(home=sandbox.home, tmpdir=sandbox.tmp, model=self.key_model, extra={
            **self.extra_env,
            "MSWEA_CONFIGURED": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(sandbox.root / "mswea"),  # never the user's .env with keys
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(self.retry_attempts),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no price-list fetch over the network
        })
        # -I: the task directory must not be able to shadow our modules.
        argv = [sys.executable, "-I", "-m", "deep_pipeline.rollouts.miniswe_worker", str(spec_path)]
        return Launch(argv=argv, env=env)

    def worker_spec(self, sandbox: Sandbox, task: RolloutTask, package_dir: Path) -> dict:
        """What the worker runs; no key in it (keys travel in the environment only)."""
        timeout = self.limits.timeout_s
        return {
            "model_name": self.target_model,
            "api_base": self.target_api_base,
            "model_kwargs": self.model_kwargs,
            "key_vars": model_env_vars(self.key_model) + list(self.extra_env),
            "task": task.prompt,
            "system_template": SYSTEM_TEMPLATE,
            "template_vars": {
                "skill_name": task.skill_name,
                "skill_text": (package_dir / "SKILL.md").read_text(encoding="utf-8", errors="replace"),
            },
            "cwd": str(sandbox.work),
            "step_limit": self.step_limit,
            # Leave the worker time to save its trajectory before the hard kill.
            "wall_time_limit_s": max(1, int(timeout - max(5.0, 0.1 * timeout))),
            "command_timeout_s": max(1, min(self.command_timeout_s, int(timeout))),
            "trajectory_path": str(sandbox.root / "trajectory.json"),
            "result_path": str(sandbox.root / "result.json"),
        }

    def read(self, result: ProcessResult, sandbox: Sandbox, archive: Path) -> Reading:
        from deep_pipeline.store import atomic_write_bytes

        reading = Reading()
        result_path = sandbox.root / "result.json"
        if result_path.is_file():  # the worker's own reason may quote a provider error: redact it too
            result_path.write_bytes(redact(result_path.read_bytes(), sandbox.secrets))
        outcome = _read_json(result_path) or {}
        trajectory_path = sandbox.root / "trajectory.json"
        if trajectory_path.is_file() and trajectory_path.stat().st_size <= MAX_TRAJECTORY_BYTES:
            raw = redact(trajectory_path.read_bytes(), sandbox.secrets)
            atomic_write_bytes(archive / "trajectory.json", raw)
            reading = _steps(raw, origin=str(archive / "trajectory.json"))
        elif trajectory_path.is_file():
            reading.error = ("agent_error", f"trajectory larger than {MAX_TRAJECTORY_BYTES} bytes; not read")
        if outcome:
            atomic_write_bytes(archive / "result.json", json.dumps(outcome).encode("utf-8"))
            if outcome.get("category"):
                reading.error = (outcome["category"], outcome.get("reason") or outcome["category"])
        elif reading.error is None:
            reading.error = ("agent_error", "the worker ended without writing its result")
        return reading


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _steps(raw: bytes, *, origin: str) -> Reading:
    from deep_pipeline.traces.miniswe import steps_from_miniswe

    try:
        parsed = steps_from_miniswe(json.loads(raw), origin=origin)
    except (ValueError, InputError) as exc:  # our worker wrote it; a bad one is the agent's failure
        return Reading(error=("agent_error", f"unreadable trajectory: {exc}"))
    return Reading(
        steps=parsed.steps, final_output=parsed.final_output or "", prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens, cost_usd=parsed.cost_usd,
    )
