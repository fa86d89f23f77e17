"""How long a model call may take: the per-call timeouts' defaults and a chat rollout's deadline.

Both count the model's own time only, from when a request is sent (SPEC §9): the queue
for a call slot and the compiler's start-up are the machinery's.
"""

from __future__ import annotations

import time

# Per-call timeouts when the role's setting is unset: a hosted model answers in seconds;
# the embedded model on a slow, loaded CPU may take minutes for one judge column.
HOSTED_TIMEOUT_S = 120.0
LOCAL_TIMEOUT_S = 900.0
# A late answer (a trickling stream) is still within its deadline up to this.
DEADLINE_GRACE_S = 1.0


def default_timeout_s(model: str) -> float:
    return LOCAL_TIMEOUT_S if model == "local" else HOSTED_TIMEOUT_S


class Deadline:
    """A chat rollout's time limit, started by the client when the request is first sent.

    Not when the rollout starts: the first call of a process pays litellm's import (seconds),
    the local model's start and the queue for a call slot, all the machinery's (SPEC §9).
    """

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.started: float | None = None

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    @property
    def at(self) -> float:
        return (self.started if self.started is not None else time.monotonic()) + self.limit_s

    def left(self) -> float:
        return self.at - time.monotonic()

    def overrun(self) -> bool:
        """The answer came in past the limit (and its grace): late all the same."""
        return self.started is not None and time.monotonic() - self.started > self.limit_s + DEADLINE_GRACE_S
