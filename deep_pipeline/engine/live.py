"""What happens inside a step, as it happens: a rollout ended, a column was scored.

One stdlib logger. The CLI shows it on a terminal (cli/compile_commands.py); a Dagster
run's log gets its heartbeats (runtime/asset_step.py); nothing reads it back: the
step's record stays the only result.

A long wait also beats a heartbeat every HEARTBEAT_S ("column 2/5 of m00 waiting on the
local model, 95 s"), marked `heartbeat` so the CLI prints it even without a terminal
(`make demo` pipes through tee) and in the run's Dagster event log: a step that says
nothing for minutes looks hung.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator

LIVE = logging.getLogger("deep_pipeline.live")
HEARTBEAT_S = 30.0  # read when a heartbeat starts, so a test can shrink it


def model_of(client) -> str:
    """What a step waits on, for a heartbeat: "the local model", or the hosted model's name."""
    return "the local model" if client.is_local else client.settings.model


@contextlib.contextmanager
def heartbeat(waiting_on: Callable[[], str]) -> Iterator[None]:
    """Log `waiting_on()` and the seconds since the start every HEARTBEAT_S until the block ends."""
    every_s, started, stop = HEARTBEAT_S, time.monotonic(), threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            LIVE.info("%s, %d s", waiting_on(), time.monotonic() - started, extra={"heartbeat": True})

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class _Heartbeats(logging.Handler):
    def __init__(self, log: Callable[[str], None]) -> None:
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "heartbeat", False):
            try:
                self.log(self.format(record))
            except Exception:  # noqa: BLE001 — a run's event log gone (its home removed): an exception here
                pass  # would end the heartbeat thread, and the terminal's handler would never get the line


def heartbeats_to(log: Callable[[str], None]):
    """Also hand each heartbeat to `log` (a Dagster run's context.log.info, a print) while the block runs."""
    return listening(_Heartbeats(log))


@contextlib.contextmanager
def listening(handler: logging.Handler) -> Iterator[None]:
    """`handler` gets the live lines at INFO while the block runs."""
    level = LIVE.level
    LIVE.addHandler(handler)
    LIVE.setLevel(logging.INFO)
    try:
        yield
    finally:
        LIVE.removeHandler(handler)
        LIVE.setLevel(level)
