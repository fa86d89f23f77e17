"""Run one mini-swe-agent rollout; started by MiniSweRunner as a subprocess.

    python -I -m deep_pipeline.rollouts.miniswe_worker SPEC.json

Why a subprocess: mini-swe-agent's LocalEnvironment runs commands with os.environ
merged in and a thread cannot be killed at a wall-time limit; here the environment is
already scrubbed and the runner can kill the whole process group.

The worker writes the trajectory (mini-swe-agent's own JSON) and `result.json`
(exit status, error category, reason) and exits 0 whenever it wrote a result; a
non-zero exit means the worker itself broke (its stderr says how).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

KEY_SUFFIXES = ("_API_KEY", "_TOKEN")
FINISHED = "Submitted"


def _take_api_key(key_vars: list[str]) -> str | None:
    """Move the model's key out of os.environ so the agent's commands never see it."""
    key = None
    for name in key_vars:
        value = os.environ.pop(name, None) if name.endswith(KEY_SUFFIXES) else None
        key = key or value
    return key


def _outcome(exit_status: str, spec: dict) -> tuple[str | None, str | None]:
    if exit_status == FINISHED:
        return None, None
    if exit_status == "TimeExceeded":
        return "timeout", f"the agent's wall-time limit of {spec['wall_time_limit_s']} s ran out"
    if exit_status == "LimitsExceeded":
        return "agent_error", f"step limit of {spec['step_limit']} reached before the agent submitted"
    return "agent_error", f"the agent stopped with exit status {exit_status or 'none'}"


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(spec: dict) -> dict:
    os.environ["MSWEA_SILENT_STARTUP"] = "1"
    api_key = _take_api_key(spec.get("key_vars", []))
    import openai
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    class Model(LitellmModel):
        def serialize(self) -> dict:  # the trajectory is archived: never write the key
            data = super().serialize()
            kwargs = data["info"]["config"]["model"].get("model_kwargs", {})
            if "api_key" in kwargs:
                kwargs["api_key"] = "<redacted>"
            return data

    base = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())  # tool calls, as `mini` uses
    model_kwargs = {"drop_params": True, **spec.get("model_kwargs", {})}
    if spec.get("api_base"):
        model_kwargs["api_base"] = spec["api_base"]
    if api_key or spec.get("api_base"):
        model_kwargs["api_key"] = api_key or "no-key"  # a local server needs none, the client wants one
    model = Model(model_name=spec["model_name"], model_kwargs=model_kwargs, cost_tracking="ignore_errors",
                  observation_template=base["model"]["observation_template"],
                  format_error_template=base["model"]["format_error_template"])
    env = LocalEnvironment(cwd=spec["cwd"], timeout=spec["command_timeout_s"], env=base["environment"]["env"])
    agent = DefaultAgent(
        model, env,
        system_template=spec["system_template"], instance_template=base["agent"]["instance_template"],
        step_limit=spec["step_limit"], cost_limit=0, wall_time_limit_seconds=spec["wall_time_limit_s"],
        output_path=Path(spec["trajectory_path"]),
    )
    # The runner's SIGTERM at its timeout: unwind through agent.run's `finally`, which
    # saves the trajectory so far (the runner then reads it as a timed-out trace).
    signal.signal(signal.SIGTERM, _stop)
    try:
        info = agent.run(spec["task"], **spec.get("template_vars", {}))
    except openai.OpenAIError as exc:  # litellm's errors subclass openai's
        return {"exit_status": type(exc).__name__, "category": "api_error",
                "reason": f"model call failed: {type(exc).__name__}: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - the agent's own crash is this rollout's agent_error
        return {"exit_status": type(exc).__name__, "category": "agent_error",
                "reason": f"the agent crashed: {type(exc).__name__}: {str(exc)[:300]}"}
    exit_status = info.get("exit_status", "")
    category, reason = _outcome(exit_status, spec)
    return {"exit_status": exit_status, "category": category, "reason": reason}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m deep_pipeline.rollouts.miniswe_worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    result = run(spec)
    out = Path(spec["result_path"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
