"""When the loop asks for a failed step again: the attempt number and the backoff, from history.

Pure: the loop sensor gathers a step's failed runs (runtime/run_history.py) and this rule says what
to do with them. Nothing else is kept: the attempt is the number of the step's runs that
failed, the wait is measured from the last one's end, so a restarted daemon (or one started
with the UI) picks the same answer and never spends more than `attempts` runs on a step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    ended_at: float  # epoch seconds
    reason: str  # one line


@dataclass(frozen=True)
class RetryPlan:
    attempt: int  # 1-based number of the run to request now or next
    attempts: int  # the limit
    last: FailedRun | None  # the failed run this one retries
    wait_until: float | None = None  # not before (epoch seconds); None: now
    give_up: bool = False

    def run_key(self, base: str) -> str:
        """The first run keeps the plain key; each retry a key of its own (Dagster spends a key once)."""
        return base if self.attempt == 1 else f"{base}:{self.attempt - 1}"


def backoff(retry: int, backoff_s: float) -> float:
    """Seconds after a failed run's end before retry number `retry` (1-based): backoff_s, 2x, 4x..."""
    return backoff_s * 2 ** (retry - 1)


def plan_retry(failed: list[FailedRun], attempts: int, backoff_s: float, now: float) -> RetryPlan:
    """What the loop does with a step whose earlier runs in `failed` failed (in any order)."""
    if not failed:
        return RetryPlan(attempt=1, attempts=attempts, last=None)
    last = max(failed, key=lambda r: r.ended_at)
    attempt = len(failed) + 1
    if attempt > attempts:
        return RetryPlan(attempt=attempt, attempts=attempts, last=last, give_up=True)
    due = last.ended_at + backoff(len(failed), backoff_s)
    return RetryPlan(attempt=attempt, attempts=attempts, last=last, wait_until=due if due > now else None)


def waiting_line(step: str, plan: RetryPlan) -> str:
    """What the tick and `status` say about a compile whose step waits for its retry."""
    assert plan.last is not None
    return f"waiting to retry {step} (attempt {plan.attempt} of {plan.attempts}) after run {plan.last.run_id} failed: {plan.last.reason}"


def gave_up_line(step: str, plan: RetryPlan, compile_key: str) -> str:
    assert plan.last is not None
    return (f"{step} failed in {plan.attempts} runs, the last {plan.last.run_id}: {plan.last.reason}; "
            f"`deep-pipeline resume {compile_key}` carries it on once mended")
