"""Rollout runners: run an agent on the task with a skill installed, record each run as a Trace.

`make_runner(config, ...)` picks the runner the compile's config names: `chat`,
`mini-swe-agent`, `command` or `replay`. Importing this package stays light (no
litellm, no mini-swe-agent): runners import them when they run.
"""

from deep_pipeline.rollouts.base import RolloutTask, Runner, trace_id
from deep_pipeline.rollouts.factory import make_runner
from deep_pipeline.rollouts.sandbox import SandboxLimits

__all__ = ["RolloutTask", "Runner", "SandboxLimits", "make_runner", "trace_id"]
