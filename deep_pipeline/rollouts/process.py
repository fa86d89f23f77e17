"""Run one agent process under its limits, capture its output capped, leave nothing running.

The agent starts under a guard (`guard.py`) that leads its own session (so its own
process group) with a marker variable in its environment, and where Linux allows it in a
PID namespace of its own, which nothing the agent starts can leave (SPEC §9). On a limit, and after a
normal exit too, every process of the rollout is stopped: the group, plus anything
carrying the marker (children that called setsid, e.g. mini-swe-agent runs each
command in a new session). SIGTERM first, SIGKILL after a grace. If the driver dies
instead, the guard kills the rollout; and each running rollout has a record in the
runner's `agents/` folder, so a run whose guards died too is cleaned up by the next.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deep_pipeline.rollouts import guard
from deep_pipeline.rollouts.guard import ROLLOUT_MARKER, has_marker, kill_all, rollout_processes, start_time
from deep_pipeline.rollouts.sandbox import SandboxLimits
from deep_pipeline.store import atomic_write_json

log = logging.getLogger(__name__)

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
    # Why the rollout ran without its own PID namespace (group and marker only), or None.
    uncontained: str | None = None


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


class AgentRecord(BaseModel):
    """A running rollout, as the next run finds it if this one dies: its group and who ran it.

    Start times (/proc stat field 22) pin each pid to one process, so a pid the system
    reused since is never taken for ours.
    """

    model_config = ConfigDict(extra="forbid")

    pgid: int
    pid: int
    start_time: int
    marker: str
    driver_pid: int
    driver_start_time: int


def write_agent_record(folder: Path, *, pid: int, marker: str) -> Path:
    """Record the guard `pid` (its group's leader) as run by this process."""
    path = Path(folder) / f"{marker}.json"
    atomic_write_json(path, AgentRecord(
        pgid=pid, pid=pid, start_time=start_time(pid) or 0, marker=marker,
        driver_pid=os.getpid(), driver_start_time=start_time(os.getpid()) or 0,
    ))
    return path


def stop_leftover_agents(folder: Path) -> int:
    """SIGKILL the rollouts a dead driver left running; their records go. Returns processes stopped."""
    stopped = 0
    for path in sorted(Path(folder).glob("*.json")):
        try:
            record = AgentRecord.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # written atomically by us: unreadable means not ours
            continue
        if start_time(record.driver_pid) == record.driver_start_time:
            continue  # its driver still runs it (another step, another thread)
        # A group whose leader is gone may be another's by now: then only the marker counts.
        leader_is_ours = start_time(record.pid) == record.start_time
        stopped += kill_all(partial(_recorded_processes, record, leader_is_ours))
        path.unlink(missing_ok=True)
    if stopped:
        log.warning("stopped %d leftover agent processes of a killed run (records in %s)", stopped, folder)
    return stopped


def _recorded_processes(record: AgentRecord, whole_group: bool) -> list[int]:
    return [pid for pid in rollout_processes(record.pgid, record.marker)
            if whole_group or has_marker(pid, record.marker)]


GUARD = Path(guard.__file__)
GUARD_START_S = 30.0  # a bare interpreter start; beyond this the machine is in trouble
# Each rollout in a PID namespace of its own where the machine allows it; tests of the
# group-and-marker fallback turn it off.
CONTAIN = True


def run_process(
    argv: list[str], *, cwd: Path, env: dict[str, str], limits: SandboxLimits, record_dir: Path | None = None,
) -> ProcessResult:
    """Run an agent under its guard; never raises for the agent's behaviour.

    `record_dir` gets a record of the running rollout (removed when it ends) so the next
    batch can stop it if this process dies and takes the guard with it.
    """
    out, err = CappedStream(limits.stream_cap_bytes), CappedStream(limits.stream_cap_bytes)
    marker = secrets.token_hex(8)
    started = time.monotonic()
    status_r, status_w = os.pipe()
    try:
        # -I -S: the guard imports only the standard library; nothing in the workdir can shadow it.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(GUARD), str(status_w), str(os.getpid()),
             "contain" if CONTAIN else "group", "--", *argv],
            cwd=cwd, env={**env, ROLLOUT_MARKER: marker}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=(status_w,),
        )
    except OSError as exc:
        os.close(status_r)
        return ProcessResult(None, out, err, time.monotonic() - started,
                             start_error=f"agent command {argv[0]!r} could not start: {exc.strerror or exc}")
    finally:
        os.close(status_w)
    record, started_error, limit, uncontained = None, None, None, None
    try:
        started_error, uncontained = _guard_status(status_r, argv)
        if started_error is None:
            record = write_agent_record(record_dir, pid=proc.pid, marker=marker) if record_dir else None
            limit = _pump(proc, {proc.stdout: out, proc.stderr: err}, limits, started)
    finally:
        # Whatever is left (the agent's children, or all of it on a limit) goes.
        leftovers = stop_rollout(proc.pid, marker, limits.kill_grace_s if proc.poll() is None else 0.5)
        returncode = proc.wait()
        if started_error is not None:  # what the guard said on its way out, for the reason
            err.feed(proc.stderr.read())
        proc.stdout.close()
        proc.stderr.close()
        if record is not None:
            record.unlink(missing_ok=True)
    if started_error is not None:
        tail = err.text().strip()[-300:]
        return ProcessResult(None, out, err, time.monotonic() - started,
                             start_error=started_error + (f"; {tail}" if tail else ""))
    return ProcessResult(returncode, out, err, time.monotonic() - started, limit=limit, leftover_pids=leftovers,
                         uncontained=uncontained)


def _guard_status(status_r: int, argv: list[str]) -> tuple[str | None, str | None]:
    """Wait for the guard's word that the agent started: (start error, why uncontained)."""
    with os.fdopen(status_r, "rb") as status:
        ready, _, _ = select.select([status], [], [], GUARD_START_S)
        answer = status.read().decode("utf-8", errors="replace").strip() if ready else ""
    if answer.startswith("ok "):
        _, _, why = answer.partition(" uncontained: ")
        if why and CONTAIN:
            _warn_once(f"rollouts run without a PID namespace of their own ({why}): an agent's descendant "
                       "that leaves its session and clears its environment can outlive the rollout")
        _, _, no_proc = answer.partition(" proc: ")
        if no_proc:
            _warn_once(f"rollouts see the host's /proc ({no_proc}): pids listed there are not those the agent's "
                       "kill() reaches")
        return None, why or None
    if answer.startswith("error "):
        return f"agent command {argv[0]!r} could not start: {answer[len('error '):]}", None
    return f"agent command {argv[0]!r} could not start: its guard process ended without starting it", None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Once per process: a machine's lack stays the same from one rollout to the next."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


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
