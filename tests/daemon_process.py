"""The Dagster daemon as the daemon tests run it, and its loop sensor as Dagster stores it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import dagster as dg
import yaml

from deep_pipeline.runtime.tags import LOOP_SENSOR

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


LOCATION = "deep_pipeline.definitions"  # the name workspace.yaml's python_module entry gives it


@contextmanager
def running_daemon(env: dict[str, str], log: Path, *, code_server: bool = False) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run` in a session of its own, its stderr into `log`; SIGTERMed as a group
    when the block ends.

    On workspace.yaml (as a user runs it) the daemon starts a code server of its own and Dagster
    replaces it every 60 s (RELOAD_WORKSPACE_INTERVAL), about 6 CPU-s each. `code_server=True`
    serves the same definitions, under the same location name, from one `dagster api grpc`
    started here for the daemon's whole life (a workspace `grpc_server` entry, as a deployment
    runs it): the tests whose daemon runs for minutes (the crash points, the batch) use it.
    """
    with ExitStack() as stack:
        stderr = stack.enter_context(open(log, "w"))  # each child keeps its own copy of the descriptor
        workspace = "workspace.yaml"
        if code_server:
            workspace = str(stack.enter_context(serving_definitions(env, log.parent, stderr)))
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", workspace], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        stack.callback(stop_group, daemon)
        yield daemon


@contextmanager
def serving_definitions(env: dict[str, str], where: Path, stderr) -> Iterator[Path]:
    """A `dagster api grpc` server of our definitions, answering when this yields; the workspace
    file (written under `where`) that points at it."""
    from dagster._grpc.client import DagsterGrpcClient

    sockets = Path(tempfile.mkdtemp(prefix="dp-"))  # short: a socket's path has 107 bytes at most
    socket = str(sockets / "code.sock")
    server = subprocess.Popen([str(BIN / "dagster"), "api", "grpc", "--socket", socket, "-m", LOCATION,
                               "-d", str(REPO), "--location-name", LOCATION], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # our code_servers.local_startup_timeout: a loaded machine's imports
        while not answers(DagsterGrpcClient(socket=socket)):
            assert server.poll() is None, f"the code server exited ({server.returncode}): see {stderr.name}"
            assert time.monotonic() < deadline, "the code server did not answer in 600 s"
            time.sleep(0.2)
        workspace = where / "workspace.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {"socket": socket, "location_name": LOCATION}}]}))
        yield workspace
    finally:
        stop_group(server)
        shutil.rmtree(sockets, ignore_errors=True)


def answers(client) -> bool:
    try:
        client.ping("")
        return True
    except Exception:  # DagsterUserCodeUnreachableError while it starts
        return False


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to its group; SIGKILL if it has not ended in 60 s (a Dagster CLI started with
    SIGINT ignored, as in .ci/run's background pass, may ignore SIGTERM too)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


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
