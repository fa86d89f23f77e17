"""The Dagster daemon as the tests run it: `dagster dev`'s shape, without the UI.

One code server (`dagster api grpc`, Dagster's "run your own gRPC server") serves our
definitions for as long as the daemon runs, and the daemon loads it by a `grpc_server` entry of a
workspace file of the test's own.
`dagster-daemon run -w workspace.yaml` (a `python_module` entry) would start a code server of
its own and replace it every 60 s (Dagster's RELOAD_WORKSPACE_INTERVAL, dagster/_daemon/controller.py):
a daemon test of 150-250 s on a loaded CI machine started three or four, about 6 CPU-s each
(26 code servers for 9 daemons in one CI run). `dagster dev`, what users run (`make ui`), keeps
one long-lived code server per location the same way (its ProxyServerManager).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from deep_pipeline.runtime.tags import LOCATION_NAME

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _serving(socket: Path) -> bool:
    """The server answers gRPC's health check (it binds only once our definitions loaded)."""
    if not socket.exists():
        return False
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="DagsterApi"), timeout=5)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@contextmanager
def running_daemon(folder: Path, env: dict[str, str], log: Path, cwd: Path = REPO,
                   timeout_s: float = 300) -> Iterator[subprocess.Popen]:
    """Start the code server, wait until it serves, then `dagster-daemon run` on it; yields the
    daemon. Both share one process group (the code server's: a group may only be joined within
    its session, so not a session of its own), stopped whole with SIGTERM on exit, run workers
    included. Their output goes to `log`."""
    socket, workspace = folder / "code-server.sock", folder / "workspace.yaml"
    workspace.write_text(yaml.safe_dump(
        {"load_from": [{"grpc_server": {"socket": str(socket), "location_name": LOCATION_NAME}}]}))
    with open(log, "w") as out:  # each child keeps its own copy of the descriptor
        server = subprocess.Popen(
            [str(BIN / "dagster"), "api", "grpc", "-m", "deep_pipeline.definitions", "-d", str(cwd),
             "--location-name", LOCATION_NAME, "--socket", str(socket)],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, process_group=0)
        daemon = None
        try:
            deadline = time.monotonic() + timeout_s  # a code server's start took minutes on a loaded machine
            while not _serving(socket):
                assert server.poll() is None, f"the code server exited with {server.returncode}: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"the code server did not serve within {timeout_s:.0f} s"
                time.sleep(0.2)
            daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], cwd=cwd, env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                                      process_group=server.pid)
            yield daemon
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            for process in (daemon, server):
                if process is not None:
                    process.wait(timeout=60)
