"""Run one agent process under its limits, capture its output capped, leave nothing running.

The agent starts in its own session (so its own process group) with a marker variable
in its environment. On a limit, and after a normal exit too, every process of the
rollout is stopped: the group, plus anything carrying the marker (children that
called setsid, e.g. mini-swe-agent runs each command in a new session). SIGTERM
first, SIGKILL after a grace.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from deep_pipeline.rollouts.sandbox import ROLLOUT_MARKER, SandboxLimits

TRUNCATION_MARKER = "\n[deep_pipeline: output truncated at {cap} bytes; {dropped} more bytes discarded]\n"
EXIT_DRAIN_S = 1.0  # after the agent exits, how long its leftovers may hold the pipes open


@dataclass
class CappedStream:
    """Keeps the first `cap` bytes of a stream and counts the rest (flood protection)."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def feed(self, chunk: bytes) -> None:
        room = max(0, self.cap - len(self.data))
        self.data += chunk[:room]
        self.dropped += len(chunk) - min(room, len(chunk))

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def archived(self) -> bytes:
        """The bytes to archive: the kept part plus a visible marker when cut."""
        if not self.dropped:
            return bytes(self.data)
        return bytes(self.data) + TRUNCATION_MARKER.format(cap=self.cap, dropped=self.dropped).encode("utf-8")


@dataclass
class ProcessResult:
    returncode: int | None
    stdout: CappedStream
    stderr: CappedStream
    duration_s: float
    limit: Literal["timeout", "idle_timeout", "cancelled"] | None = None
    start_error: str | None = None
    leftover_pids: list[int] = field(default_factory=list)  # survived even SIGKILL


def _stat_fields(pid_dir: Path) -> list[str] | None:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # Fields after the ")" that closes the command name: state, ppid, pgrp, ...
    return stat[stat.rfind(")") + 2 :].split()


def rollout_processes(pgid: int, marker: str | None = None) -> list[int]:
    """Live (non-zombie) processes in the group, or carrying `DEEP_PIPELINE_ROLLOUT=<marker>`."""
    needle = f"{ROLLOUT_MARKER}={marker}\0".encode() if marker else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        fields = _stat_fields(entry)
        if not fields or len(fields) < 3 or fields[0] == "Z":
            continue
        if int(fields[2]) == pgid:
            found.append(int(entry.name))
        elif needle is not None:
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def group_members(pgid: int) -> list[int]:
    return rollout_processes(pgid)


def stop_rollout(pgid: int, marker: str | None, grace_s: float) -> list[int]:
    """SIGTERM every process of the rollout, SIGKILL what is left after the grace."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        pids = rollout_processes(pgid, marker)
        if not pids:
            return []
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and rollout_processes(pgid, marker):
            time.sleep(0.05)
    return rollout_processes(pgid, marker)


def run_process(argv: list[str], *, cwd: Path, env: dict[str, str], limits: SandboxLimits) -> ProcessResult:
    """Run an agent in its own process group; never raises for the agent's behaviour."""
    out, err = CappedStream(limits.stream_cap_bytes), CappedStream(limits.stream_cap_bytes)
    marker = secrets.token_hex(8)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env={**env, ROLLOUT_MARKER: marker}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        reason = f"agent command {argv[0]!r} could not start: {exc.strerror or exc}"
        return ProcessResult(None, out, err, time.monotonic() - started, start_error=reason)
    try:
        limit = _pump(proc, {proc.stdout: out, proc.stderr: err}, limits, started)
    finally:
        # Whatever is left (the agent's children, or all of it on a limit) goes.
        leftovers = stop_rollout(proc.pid, marker, limits.kill_grace_s if proc.poll() is None else 0.5)
        returncode = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return ProcessResult(returncode, out, err, time.monotonic() - started, limit=limit, leftover_pids=leftovers)


# Set when the batch is interrupted (Ctrl-C): every running agent is stopped at once
# instead of being waited for until its own timeout.
CANCEL = threading.Event()


def _pump(proc: subprocess.Popen, streams: dict, limits: SandboxLimits, started: float) -> str | None:
    """Read both pipes until EOF or a limit; returns the limit hit, if any.

    Reading goes on past the cap (those bytes are dropped) so a flooding agent never
    blocks on a full pipe.
    """
    selector = selectors.DefaultSelector()
    for pipe, sink in streams.items():
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe, selectors.EVENT_READ, sink)
    last_output = started
    exited_at: float | None = None
    try:
        # Until the agent has exited, not just its pipes: one may close stdout and go on working.
        while selector.get_map() or proc.poll() is None:
            now = time.monotonic()
            if CANCEL.is_set():
                return "cancelled"
            if now - started > limits.timeout_s:
                return "timeout"
            if exited_at is None and now - last_output > limits.idle_timeout_s:
                return "idle_timeout"
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_DRAIN_S:
                return None
            if not selector.get_map():
                time.sleep(0.1)
                continue
            for key, _ in selector.select(timeout=0.1):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if chunk:
                    key.data.feed(chunk)
                    last_output = time.monotonic()
                else:
                    selector.unregister(key.fileobj)
        return None
    finally:
        selector.close()
