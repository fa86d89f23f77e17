"""A compile's caps on model calls and USD (SPEC §8), shared by every client of a compile."""

from __future__ import annotations

import threading
from pathlib import Path

from deep_pipeline.llm.accounting import CallRecord, read_calls, spent


class BudgetExhausted(Exception):
    """A call would exceed the compile's budget; it was not sent."""


class Budget:
    """Thread-safe budget. `reserve()` before sending a call, `add(record)` once it is done.

    A reserved call counts against `max_calls` at once, and its worst-case cost against
    `max_usd` until its real cost is added, so calls in flight together (a matrix's columns,
    a comparison's orders) cannot together overshoot either cap. Cost is only known
    afterwards; `reserve` takes the caller's worst-case estimate (None when the model's price
    is unknown) and returns it, to be handed back to `add` with the call's record.
    """

    def __init__(
        self,
        max_calls: int | None = None,
        max_usd: float | None = None,
        calls_used: int = 0,
        usd_used: float = 0.0,
    ) -> None:
        self.max_calls = max_calls
        self.max_usd = max_usd
        self.calls_used = calls_used
        self.usd_used = usd_used
        self._in_flight = 0
        self._in_flight_usd = 0.0  # the worst-case cost of the calls reserved and not yet added
        self._lock = threading.Lock()

    @classmethod
    def from_calls_log(cls, calls_log: Path, max_calls: int | None, max_usd: float | None) -> "Budget":
        """A budget that already counts the calls of an earlier (crashed) run of the compile,
        as the compile's history counts them (accounting.spent)."""
        calls, usd = spent(read_calls(calls_log))
        return cls(max_calls=max_calls, max_usd=max_usd, calls_used=calls, usd_used=usd)

    def reserve(self, estimated_usd: float | None = None) -> float:
        with self._lock:
            if self.max_calls is not None and self.calls_used + self._in_flight + 1 > self.max_calls:
                raise BudgetExhausted(f"call budget spent: {self.calls_used} of {self.max_calls} calls made")
            estimate = estimated_usd or 0.0
            if self.max_usd is not None:
                next_total = self.usd_used + self._in_flight_usd + estimate
                if self.usd_used >= self.max_usd or next_total > self.max_usd:
                    raise BudgetExhausted(
                        f"USD budget spent: ${self.usd_used:.4f} of ${self.max_usd:.4f} used"
                        + (f", ${self._in_flight_usd:.4f} in flight" if self._in_flight_usd else "")
                        + (f", next call may cost up to ${estimated_usd:.4f}" if estimated_usd else "")
                    )
            self._in_flight += 1
            self._in_flight_usd += estimate
            return estimate

    def add(self, record: CallRecord, reserved_usd: float = 0.0) -> None:
        """A reserved call was sent: its real cost replaces the `reserved_usd` `reserve` returned."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._in_flight_usd = max(0.0, self._in_flight_usd - reserved_usd)
            self.calls_used += 1
            self.usd_used += record.cost_usd or 0.0
