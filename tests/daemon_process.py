"""The Dagster daemon as the daemon tests run it, and its loop sensor as Dagster stores it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import dagster as dg

from deep_pipeline.runtime.tags import LOOP_SENSOR

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@contextmanager
def running_daemon(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run -w workspace.yaml` in a session of its own (its code servers with it),
    its stderr into `log`; SIGTERMed as a group when the block ends."""
    with open(log, "w") as stderr:  # the child keeps its own copy of the descriptor
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        yield daemon
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)


def loop_sensor_state(instance: dg.DagsterInstance):
    """The loop sensor's instigator state (its origin, its ticks' ids)."""
    from dagster._core.scheduler.instigation import InstigatorType

    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == LOOP_SENSOR]
    return state


def loop_sensor(instance: dg.DagsterInstance) -> SimpleNamespace:
    """The loop sensor as the sensor daemon's `fetch_existing_runs` reads it: its name and origin."""
    state = loop_sensor_state(instance)
    return SimpleNamespace(name=LOOP_SENSOR, get_remote_origin=lambda: state.origin)


def sensor_skip_reasons(instance: dg.DagsterInstance) -> list[str]:
    """Why each of the loop sensor's ticks asked for nothing (its log line), oldest last."""
    state = loop_sensor_state(instance)
    return [t.skip_reason or "" for t in instance.get_ticks(state.instigator_origin_id, state.selector_id)]
