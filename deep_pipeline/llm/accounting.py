"""The calls log (`llm/calls.jsonl`): one JSON line per real model call, and its totals."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pydantic import BaseModel, ValidationError

from deep_pipeline.llm.client import CallRecord

_append_lock = threading.Lock()


def append_call(calls_log: Path, record: CallRecord) -> None:
    """Append one line and fsync it: a crash right after a call still leaves its record."""
    calls_log = Path(calls_log)
    calls_log.parent.mkdir(parents=True, exist_ok=True)
    line = record.model_dump_json() + "\n"
    with _append_lock, open(calls_log, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


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


class RoleUsage(BaseModel):
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = 0.0  # None once any call's cost is unknown
    latency_s: float = 0.0


def usage_by_role(records: list[CallRecord]) -> dict[str, RoleUsage]:
    """Totals per role over real calls (cache hits are not calls and are skipped)."""
    totals: dict[str, RoleUsage] = {}
    for record in records:
        if record.cache_hit:
            continue
        usage = totals.setdefault(record.role, RoleUsage())
        usage.calls += 1
        usage.failed_calls += record.error is not None
        usage.prompt_tokens += record.prompt_tokens or 0
        usage.completion_tokens += record.completion_tokens or 0
        usage.cached_tokens += record.cached_tokens or 0
        usage.latency_s += record.latency_s
        if usage.cost_usd is not None:
            # An unknown price makes the total unknown; it is never guessed as zero.
            known = record.cost_usd is not None or record.error is not None
            usage.cost_usd = usage.cost_usd + (record.cost_usd or 0.0) if known else None
    return totals
