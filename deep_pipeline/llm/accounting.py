"""The calls log (`llm/calls.jsonl`): one JSON line per real model call, and its totals.

The one owner of the call record (`CallRecord`), the usage totals the step records store
(`Usage`) and what counts against the budget (`spent`).

A line is written once the call's answer is kept (or the call failed): an answer lost
with a killed process is never counted. Each line carries the call's id, so a cached
answer whose line a crash prevented is logged once, when it is next served.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError


class CallRecord(BaseModel):
    """Accounting of one call; never holds a key or the prompt."""

    step_key: str
    role: str
    model: str
    attempt: int
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None
    latency_s: float
    cache_hit: bool
    error: str | None = None
    # Names the call in the calls log, so a cached answer is logged exactly once.
    call_id: str | None = None


_append_lock = threading.Lock()
# calls log -> (its size when read, the call ids in it): read once per process, kept current by our appends.
_logged: dict[Path, tuple[int, set[str]]] = {}


def append_call(calls_log: Path, record: CallRecord) -> None:
    """Append one line and fsync it: a crash right after a call still leaves its record."""
    calls_log = Path(calls_log)
    calls_log.parent.mkdir(parents=True, exist_ok=True)
    line = record.model_dump_json() + "\n"
    with _append_lock, open(calls_log, "a", encoding="utf-8") as handle:
        start = handle.tell()
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
        known = _logged.get(calls_log)
        if known is not None and known[0] == start and record.call_id:
            known[1].add(record.call_id)
            _logged[calls_log] = (handle.tell(), known[1])


def log_missing(calls_log: Path, records: list[CallRecord]) -> None:
    """Log the records of a cached answer that are not in the log (a crash came between)."""
    calls_log = Path(calls_log)
    with _append_lock:
        ids = _logged_ids(calls_log)
        missing = [r for r in records if r.call_id and r.call_id not in ids]
    for record in missing:  # records written before call ids existed were logged before being cached
        append_call(calls_log, record)


def _logged_ids(calls_log: Path) -> set[str]:
    size = calls_log.stat().st_size if calls_log.exists() else 0
    known = _logged.get(calls_log)
    if known is None or known[0] != size:  # another process (or a new compile store) wrote it
        known = (size, {r.call_id for r in read_calls(calls_log) if r.call_id})
        _logged[calls_log] = known
    return known[1]


def read_calls(calls_log: Path) -> list[CallRecord]:
    """Every complete record; a line cut short by a crash is skipped."""
    calls_log = Path(calls_log)
    if not calls_log.exists():
        return []
    records = []
    for line in calls_log.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(CallRecord.model_validate_json(line))
        except ValidationError:
            continue
    return records


def cost_text(usd: float | None, unknown: str = "cost unknown") -> str:
    """A cost as every line and page shows it: `$0.0123`, or `unknown` when a call's cost was unknown."""
    return f"${usd:.4f}" if usd is not None else unknown


class Usage(BaseModel):
    """Model-call totals, as the step records store them (`usage` in column, edit, comparison,
    decision and report records): field names and defaults are part of the records on disk."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    cache_hits: int = 0  # of `calls`, answers a resumed step took from the cache (no new spend)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = 0.0  # None once any call's cost was unknown

    def add(self, other: "Usage") -> "Usage":
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            calls=self.calls + other.calls,
            cache_hits=self.cache_hits + other.cache_hits,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost_usd=cost,
        )


def usage_by_role(records: list[CallRecord]) -> dict[str, Usage]:
    """Totals per role. The calls log holds real calls only; a step's records also hold its
    answers served from the cache, counted at what they cost when sent (so a resumed step
    reports what an uninterrupted one would) and counted apart in `cache_hits`."""
    totals: dict[str, Usage] = {}
    for record in records:
        # An unknown price, or a failed call that may have been billed, makes the total
        # unknown (Usage.add): it is never guessed as zero.
        one = Usage(calls=1, cache_hits=int(record.cache_hit), prompt_tokens=record.prompt_tokens or 0,
                    completion_tokens=record.completion_tokens or 0, cached_tokens=record.cached_tokens or 0,
                    cost_usd=record.cost_usd)
        totals[record.role] = totals.get(record.role, Usage()).add(one)
    return totals


def usage_of_calls(records: list[CallRecord]) -> Usage:
    """The totals of all roles together (a step's calls, or the whole calls log)."""
    total = Usage()
    for usage in usage_by_role(list(records)).values():  # summed by role, as the report's totals always were
        total = total.add(usage)
    return total


def spent(records: list[CallRecord]) -> tuple[int, float]:
    """(calls, USD) counted against a compile's caps (SPEC §8), for the budget a run starts
    from and for the history's budget stop alike: calls made, so an answer served from the
    cache counts for neither; only known costs add (an unpriced call adds nothing)."""
    made = [record for record in records if not record.cache_hit]
    return len(made), sum(record.cost_usd or 0.0 for record in made)
