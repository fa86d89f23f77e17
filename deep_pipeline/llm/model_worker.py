"""The model worker: one long-lived process per home and environment that imported litellm
once and makes the sends of short-lived run processes (llm/transport.py says why).

`python -m deep_pipeline.llm.model_worker --state PATH` listens on 127.0.0.1 with an
authentication key (multiprocessing.connection: an HMAC handshake on every connection),
writes its port, pid and key to PATH (mode 0600), and answers one JSON request per
connection, each on a thread of its own (sends wait on the network). It exits after
`--idle-s` seconds without a request, or once PATH no longer names it.

The worker's environment is the starter's, and litellm reads provider keys and endpoints
from it: so a worker is keyed by a fingerprint of the variables that can change what a
send does (keys, endpoints, provider settings) and of this code. A process with other
keys gets, and starts, another worker; nothing is read from a worker's stale environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from pydantic import BaseModel

from deep_pipeline.locks import file_lock
from deep_pipeline.errors import StepError
from deep_pipeline.llm import transport
from deep_pipeline.llm.transport import SendRequest, SendResult

IDLE_S = 600.0  # a batch's steps come seconds apart; an idle worker gives its memory back
START_TIMEOUT_S = 120.0  # the litellm import, on a busy 2-core machine
# What can change a send besides the request: keys, endpoints, provider and proxy settings.
_RELEVANT = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|_API_BASE|_BASE_URL|^AWS_|^AZURE_|^VERTEX|^GOOGLE_"
                       r"|^LITELLM_|^OPENAI_|^ANTHROPIC_|_PROXY$|^SSL_|^REQUESTS_CA", re.IGNORECASE)


class WorkerState(BaseModel):
    pid: int
    port: int
    authkey: str  # hex; the file is readable by its owner only


def fingerprint(env: dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    digest = hashlib.sha256(sys.executable.encode())
    for name in sorted(n for n in env if _RELEVANT.search(n) and n != transport.WORKER_VARIABLE):
        digest.update(f"\0{name}={env[name]}".encode())
    for module in (transport, sys.modules[__name__]):
        digest.update(Path(module.__file__).read_bytes())  # a changed worker is another worker
    return digest.hexdigest()[:16]


def default_transport() -> transport.Transport:
    """In this process, unless DEEP_PIPELINE_MODEL_WORKER=1 asks for the home's model worker.

    A Dagster run a run launcher started is handed the worker by its store resource
    (defs/resources.py); DEEP_PIPELINE_MODEL_WORKER=0 refuses it there too.
    """
    if os.environ.get(transport.WORKER_VARIABLE, "") != "1":
        return transport.InProcess()
    from deep_pipeline.home import dagster_home

    return WorkerTransport(dagster_home())


# -- the client side -------------------------------------------------------------------

_known: dict[Path, WorkerState] = {}
_known_lock = threading.Lock()


class WorkerTransport:
    """Sends through the worker of `home` for this process's environment, started when missing."""

    def __init__(self, home: Path) -> None:
        self.folder = Path(home) / "model_worker"
        self.state_path = self.folder / f"{fingerprint()}.json"

    def send(self, request: SendRequest) -> SendResult:
        started = time.monotonic()
        try:
            answer = self._call({"op": "send", "request": request.model_dump()}, request.timeout_s + 30)
        except (OSError, EOFError, StepError) as exc:  # a worker that died mid-send: resent, restarting it
            self._forget()
            return SendResult(error=f"ModelWorkerGone: {exc}", failure="transient",
                              latency_s=time.monotonic() - started, cost_usd=0.0 if request.free else None)
        return SendResult.model_validate(answer)

    def warm(self) -> None:
        """Start the worker now (its litellm import), before a caller's clock starts."""
        try:
            self._connect().close()
        except (OSError, StepError):
            pass  # the send itself fails and is resent

    def estimate_usd(self, model: str, messages: list[dict], max_tokens: int) -> float | None:
        return self._call({"op": "estimate", "model": model, "messages": messages, "max_tokens": max_tokens}, 60)

    def check_model(self, model: str, field: str, api_base: str | None) -> str | None:
        return self._call({"op": "check", "model": model, "field": field, "api_base": api_base}, 60)

    def _call(self, message: dict, timeout_s: float):
        connection = self._connect()
        with connection:
            connection.send_bytes(json.dumps(message).encode())
            if not connection.poll(timeout_s):
                raise StepError(f"the model worker ({self.state_path}) gave no answer in {timeout_s:.0f} s")
            reply = json.loads(connection.recv_bytes())
        if "error" in reply:
            raise StepError(f"the model worker failed: {reply['error']}")
        return reply["result"]

    def _connect(self) -> Connection:
        with _known_lock:
            state = _known.get(self.state_path)
        if state is not None:
            try:
                return _open(state)
            except OSError:
                self._forget()
        with file_lock(self.state_path.with_suffix(".lock")):
            state = _read(self.state_path)
            if state is not None and _alive(state.pid):
                try:
                    connection = _open(state)
                except OSError:
                    connection = None
                if connection is not None:
                    with _known_lock:
                        _known[self.state_path] = state
                    return connection
            state = self._start()
        with _known_lock:
            _known[self.state_path] = state
        return _open(state)

    def _start(self) -> WorkerState:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.state_path.unlink(missing_ok=True)
        log_path = self.state_path.with_suffix(".log")
        with open(log_path, "ab") as log:
            # Its own session: it outlives the short run that started it, and that run's Ctrl-C.
            process = subprocess.Popen([sys.executable, "-m", "deep_pipeline.llm.model_worker", "--state",
                                        str(self.state_path)], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            state = _read(self.state_path)
            if state is not None and state.pid == process.pid:
                return state
            if process.poll() is not None:
                break
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
        tail = " ".join(log_path.read_text(errors="replace")[-300:].split()) if log_path.is_file() else ""
        raise StepError(f"the model worker did not start (see {log_path}): {tail or 'no output'}")

    def _forget(self) -> None:
        with _known_lock:
            _known.pop(self.state_path, None)


def _open(state: WorkerState) -> Connection:
    try:
        return Client(("127.0.0.1", state.port), authkey=bytes.fromhex(state.authkey))
    except (EOFError, ConnectionError) as exc:  # a port another process took, or a worker going away
        raise OSError(str(exc)) from exc


def _read(path: Path) -> WorkerState | None:
    try:
        return WorkerState.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True



# -- the worker side -------------------------------------------------------------------


class _Activity:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.last = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.in_flight else time.monotonic() - self.last


def _answer(message: dict):
    op = message.get("op")
    if op == "send":
        return transport.send(SendRequest.model_validate(message["request"])).model_dump()
    if op == "estimate":
        return transport.estimate_usd(message["model"], message["messages"], message["max_tokens"])
    if op == "check":
        return transport.check_model(message["model"], message["field"], message["api_base"])
    raise ValueError(f"unknown op {op!r}")


def _serve_one(connection: Connection, activity: _Activity) -> None:
    with activity.lock:
        activity.in_flight += 1
    try:
        with connection:
            message = json.loads(connection.recv_bytes())
            try:
                reply = {"result": _answer(message)}
            except Exception as exc:  # noqa: BLE001 - the caller gets it as one line
                reply = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            connection.send_bytes(json.dumps(reply).encode())
    except (OSError, EOFError, ValueError):
        pass  # the caller went away (its run was killed): nothing to answer
    finally:
        with activity.lock:
            activity.in_flight -= 1
            activity.last = time.monotonic()


def _watch(state_path: Path, me: WorkerState, activity: _Activity, idle_s: float) -> None:
    """Exit once idle, or once the state file names another worker (or none)."""
    while True:
        time.sleep(min(5.0, idle_s / 4))
        current = _read(state_path)
        if current is None or current.pid != me.pid:
            os._exit(0)
        if activity.idle_for() >= idle_s:
            with file_lock(state_path.with_suffix(".lock")):
                if (_read(state_path) or me).pid == me.pid:
                    state_path.unlink(missing_ok=True)
            os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve model sends for short-lived run processes")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--idle-s", type=float, default=float(os.environ.get("DEEP_PIPELINE_MODEL_WORKER_IDLE_S", IDLE_S)))
    args = parser.parse_args(argv)
    os.umask(0o077)  # the state file holds the authentication key
    authkey = os.urandom(32)
    listener = Listener(("127.0.0.1", 0), authkey=authkey)
    me = WorkerState(pid=os.getpid(), port=listener.address[1], authkey=authkey.hex())
    from deep_pipeline.store import atomic_write_json

    atomic_write_json(args.state, me)
    transport.load_litellm()  # once, before the first request (already connecting) waits on it
    activity = _Activity()  # the idle clock starts once it can answer
    threading.Thread(target=_watch, args=(args.state, me, activity, args.idle_s), daemon=True).start()
    while True:
        try:
            connection = listener.accept()
        except Exception as exc:  # noqa: BLE001 - a client that failed the handshake (AuthenticationError)
            print(f"refused a connection: {type(exc).__name__}", file=sys.stderr, flush=True)
            continue
        threading.Thread(target=_serve_one, args=(connection, activity), daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main())
