"""Faults of a hosted model, served by a ScriptedOpenAIServer around a compile world.

`FaultLayer(answer)` is a turn (a callable `(body) -> turn`) that answers like `answer`
except for a share of requests, chosen by a hash of the request body mixed with how many
times that very body was sent before: so a resend of the same request may fare otherwise,
and a whole run is the same from one test run to the next, whatever the order of calls.

The faults: a burst of 429 with a Retry-After header (the first sends of a body; a few
bodies get a burst longer than the client's retries, to fail a step), a 500, content that
is not JSON, a judge column answer naming a unit that does not exist and missing one,
and a stall (the answer comes late).

`variant_inputs(tmp, k)` makes the k-th distinct skill and bundle; `VariantWorlds` answers
each variant from its own World, so a batch holds compiles with different decisions.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.compile_world import SKILL, World, make_inputs

VARIANT_RE = re.compile(r"\(variant (\d+)\)")


def variant_inputs(tmp: Path, k: int) -> tuple[Path, Path]:
    """The demo skill and task with a variant marker every prompt quotes: a distinct compile."""
    text = SKILL.replace("weekly status updates.", f"weekly status updates (variant {k}).")
    skill, bundle = make_inputs(tmp / f"v{k}", text)
    task = "Write this week's status update."
    bundle.write_text(bundle.read_text().replace(task, f"{task[:-1]} (variant {k})."), encoding="utf-8")
    return skill, bundle


def variant_world(k: int) -> World:
    """Four kinds of compile: one accepted edit, one rejected cell, nothing to do, another accepted."""
    kind = k % 4
    if kind == 0:
        return World(low={("s02-steps", "clarity"): 2})
    if kind == 1:
        return World(low={("s02-steps", "clarity"): 2}, compare={("s02-steps", "clarity"): (4, 2)})
    if kind == 2:
        return World()
    return World(low={("s03-output", "correctness"): 3})


class VariantWorlds:
    """A World per variant, picked by the marker in the request's text."""

    def __init__(self, count: int) -> None:
        self.worlds = [variant_world(k) for k in range(count)]

    def pick(self, request) -> World:
        found = VARIANT_RE.search(request.text)
        assert found, "a request without a variant marker"
        return self.worlds[int(found.group(1))]

    def judge(self, request) -> dict:
        return self.pick(request).judge(request)

    def editor(self, request) -> dict:
        return self.pick(request).editor(request)


@dataclass
class Shares:
    """Shares of sends that get each fault (the rest are answered)."""

    burst_429: float = 0.15  # of bodies: their first 1-3 sends get 429
    long_burst: float = 0.03  # of bodies: 429 for longer than the client resends (the step fails)
    server_error: float = 0.07
    invalid_json: float = 0.06
    wrong_units: float = 0.10  # of judge column answers
    stall: float = 0.03
    stall_s: float = 6.0
    retry_after_s: int = 1
    long_burst_sends: int = 12  # above retries + 1 for the failed run and its one run retry


@dataclass
class Sent:
    digest: str
    count: int  # this body's how-many-th send
    fault: str  # "", "429", "500", "invalid_json", "wrong_units", "stall"
    at: float


def _unit(text: str) -> float:
    """A number in [0, 1) drawn from `text`."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / 16**12


def body_digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def is_column(body: dict) -> bool:
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return bool(schema.get("required")) and "score_a" not in schema.get("properties", {}) \
        and "new_text" not in schema.get("properties", {})


@dataclass
class FaultLayer:
    answer: object  # a turn callable: tests/served_world.answer_with(world)
    shares: Shares = field(default_factory=Shares)
    on: bool = True
    sent: list[Sent] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict) -> dict:
        digest = body_digest(body)
        with self._lock:
            count = self._counts[digest] = self._counts.get(digest, 0) + 1
        fault = self.fault_for(digest, count, body) if self.on else ""
        with self._lock:
            self.sent.append(Sent(digest, count, fault, time.monotonic()))
        return self._turn(fault, body)

    def fault_for(self, digest: str, count: int, body: dict) -> str:
        s = self.shares
        per_body = _unit(digest)
        if per_body < s.long_burst and count <= s.long_burst_sends:
            return "429"
        if per_body < s.long_burst + s.burst_429 and count <= 1 + int(_unit("burst" + digest) * 3):
            return "429"
        u = _unit(f"{digest}:{count}")
        for fault, share in (("500", s.server_error), ("invalid_json", s.invalid_json), ("stall", s.stall)):
            if u < share:
                return fault
            u -= share
        if is_column(body) and u < s.wrong_units:
            return "wrong_units"
        return ""

    def _turn(self, fault: str, body: dict) -> dict:
        if fault == "429":
            return {"status": 429, "error": "rate limited (scripted burst)",
                    "headers": {"Retry-After": str(self.shares.retry_after_s)}}
        if fault == "500":
            return {"status": 500, "error": "internal error (scripted)"}
        if fault == "invalid_json":
            return {"content": '{"score": 5, "reason": "cut off'}
        if fault == "stall":
            time.sleep(self.shares.stall_s)
        turn = self.answer(body)
        if fault == "wrong_units":
            answer = json.loads(turn["content"])
            first = sorted(answer)[0]
            answer["s99-nowhere"] = answer.pop(first)  # one unit missing, one that does not exist
            turn = {"content": json.dumps(answer)}
        return turn

    def counts(self) -> dict[str, int]:
        tally: dict[str, int] = {}
        for sent in self.sent:
            tally[sent.fault or "answered"] = tally.get(sent.fault or "answered", 0) + 1
        return tally

    def early_resends(self) -> list[tuple[Sent, float]]:
        """Resends of a body sooner after its 429 than the Retry-After asked: (the 429, seconds waited)."""
        early, last_429 = [], {}
        for sent in sorted(self.sent, key=lambda s: s.at):
            before = last_429.pop(sent.digest, None)
            if before is not None and sent.at - before.at < self.shares.retry_after_s - 0.05:
                early.append((before, round(sent.at - before.at, 3)))
            if sent.fault == "429":
                last_429[sent.digest] = sent
        return early
