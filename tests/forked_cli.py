"""`deep-pipeline` processes forked from a preloaded server, for the tests that run many.

A `deep-pipeline compile` process spends about 7 CPU-seconds importing litellm, Dagster and
our definitions before its first step; the crash suites, the dead-run and fault tests start
dozens of them, and CI's two cores are saturated, so those imports were a sixth of its time.
`ForkedCLI(args, ...)` stands where `subprocess.Popen([CLI, *args], ...)` stood: a server
process (one per test process, started on first use) has imported them once and forks a
child per command, which becomes the command as the console script would run it
(`deep_pipeline.cli.entry`) in its own process: its own pid, session (when asked), working
directory, environment, stdin/stdout/stderr (passed over a Unix socket) and exit status.
What the fork skips is only the import of modules that read nothing at import that a
command's environment could change (tempfile's cached directory is reset in the child).

Tests of the console script itself (its start-up, what `--help` imports) run the real file.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI = Path(sys.executable).parent / "deep-pipeline"  # what a child's argv[0] names
_BUFFER = 1 << 20  # one request: argv, cwd and an environment


# -- the client: a subprocess.Popen look-alike --------------------------------------------------

_server: tuple[subprocess.Popen, str] | None = None
_server_lock = threading.Lock()


def _server_socket() -> str:
    """The running server's socket path, starting the server on first use."""
    global _server
    with _server_lock:
        if _server is None or _server[0].poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="forked-cli-"), "socket")  # removed by the server
            # Its stdin is our pipe: when this test process ends, the server reads EOF and exits.
            proc = subprocess.Popen([sys.executable, __file__, path], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + 300  # the imports, on a loaded 2-core machine
            while not os.path.exists(path + ".ready"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the forked-CLI server did not start (exit {proc.poll()})")
                time.sleep(0.05)
            _server = (proc, path)
        return _server[1]


class ForkedCLI:
    """`deep-pipeline ARGS` in a process forked from the server; what tests use of Popen."""

    def __init__(self, args: list[str], *, cwd=None, env=None, stdout=None, stderr=None,
                 text: bool = False, start_new_session: bool = False) -> None:
        self.args = [str(CLI), *map(str, args)]
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        close_after = [os.open(os.devnull, os.O_RDWR)]  # its stdin: no test writes to the CLI
        ends = [close_after[0]]
        for name, stream, default_fd in (("stdout", stdout, 1), ("stderr", stderr, 2)):
            fd, ours = self._child_end(stream, default_fd, close_after)
            ends.append(fd)
            if ours is not None:
                setattr(self, name, os.fdopen(ours, "r" if text else "rb"))
        request = {"argv": self.args, "cwd": str(cwd or os.getcwd()), "env": dict(os.environ if env is None else env),
                   "new_session": start_new_session}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(_server_socket())
            socket.send_fds(self._conn, [json.dumps(request).encode()], ends)
            reply = json.loads(self._conn.recv(_BUFFER) or b"{}")
        finally:
            for fd in close_after:
                os.close(fd)
        if "pid" not in reply:
            raise RuntimeError(f"the forked-CLI server did not start {self.args}: {reply}")
        self.pid = reply["pid"]

    @staticmethod
    def _child_end(stream, default_fd: int, close_after: list[int]) -> tuple[int, int | None]:
        """(the fd the child gets, our end of a pipe or None), as Popen reads stdout=/stderr=."""
        if stream == subprocess.PIPE:
            ours, theirs = os.pipe()
            close_after.append(theirs)
            return theirs, ours
        if stream is None:
            return default_fd, None
        if stream == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            close_after.append(fd)
            return fd, None
        return (stream if isinstance(stream, int) else stream.fileno()), None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _read_status(self, timeout: float | None) -> bool:
        self._conn.settimeout(timeout)
        try:
            message = self._conn.recv(_BUFFER)
        except (BlockingIOError, TimeoutError, socket.timeout):
            return False
        if not message:
            raise RuntimeError(f"the forked-CLI server went away before {self.args} ended")
        self.returncode = os.waitstatus_to_exitcode(json.loads(message)["status"])
        self._conn.close()
        return True

    def communicate(self, timeout: float | None = None):
        """Read stdout and stderr (those that are pipes) to their end, then wait; like Popen's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = {stream: [] for stream in (self.stdout, self.stderr) if stream is not None}
        with selectors.DefaultSelector() as selector:
            for stream in chunks:
                if not stream.closed:
                    selector.register(stream.fileno(), selectors.EVENT_READ, stream)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        selector.unregister(key.fd)
        outputs = []
        for stream in (self.stdout, self.stderr):
            if stream is None:
                outputs.append(None)
                continue
            data = b"".join(chunks[stream])
            outputs.append(data.decode() if "b" not in stream.mode else data)
            stream.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return tuple(outputs)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        self.wait()


def run(args: list[str], *, cwd=None, env=None, capture_output: bool = False, text: bool = False,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run([CLI, *args], ...)` through the server."""
    pipe = subprocess.PIPE if capture_output else None
    proc = ForkedCLI(args, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=text)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- the server ---------------------------------------------------------------------------------


def _preload() -> None:
    """What a compile imports before its first step: the commands, Dagster, the engine, litellm.

    Not the definitions (deep_pipeline/defs): they bind the provider-key variables set when
    they load (ProviderKeysResource.from_environment), so each child loads them itself, in
    its own environment (0.1 CPU-s once the rest is imported).
    """
    import dagster  # noqa: F401
    import deep_pipeline.engine.services  # noqa: F401
    import deep_pipeline.engine.steps  # noqa: F401
    from deep_pipeline.cli import build_parser
    from deep_pipeline.llm.transport import load_litellm

    build_parser()
    load_litellm()
    assert not any(name.startswith("deep_pipeline.defs") for name in sys.modules), "the definitions loaded early"


def _serve(path: str) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    signal.set_wakeup_fd(wake_write)
    children: dict[int, socket.socket] = {}
    Path(path + ".ready").touch()
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fd == sys.stdin.fileno() and not os.read(key.fd, 4096):
                    return  # the test process is gone
                if key.fd == wake_read:
                    os.read(wake_read, 4096)
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    pid = _fork_one(conn, [listener.fileno(), wake_read, wake_write, selector.fileno(),
                                           *(c.fileno() for c in children.values())])
                    children[pid] = conn
            _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.send(json.dumps({"status": status}).encode())
            except OSError:
                pass  # the test stopped listening
            conn.close()


def _fork_one(conn: socket.socket, inherited: list[int]) -> int:
    message, fds, _, _ = socket.recv_fds(conn, _BUFFER, 3)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    set_up, child_set_up = os.pipe()
    pid = os.fork()
    if pid == 0:
        _become(request, fds, [conn.fileno(), set_up, *inherited], child_set_up)  # never returns
    for fd in (*fds, child_set_up):
        os.close(fd)
    # As Popen returns only once its child is in its session and directory: a test may
    # signal the group at once.
    with os.fdopen(set_up, "rb") as done:
        done.read()
    conn.send(json.dumps({"pid": pid}).encode())
    return pid


def _become(request: dict, fds: list[int], close: list[int], set_up: int) -> None:
    """In the forked child: become `deep-pipeline ARGV` with the request's stdio, cwd and env."""
    import atexit
    import tempfile
    import traceback

    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in close:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # read TMPDIR again, from the command's environment
        sys.argv = list(request["argv"])
        sys.path[0] = str(Path(sys.executable).parent)  # the console script's own folder
        os.close(set_up)  # tells the server this child is set up
    except BaseException:  # noqa: BLE001 - a child that cannot become the command says why
        traceback.print_exc()
        os._exit(127)
    from deep_pipeline.cli import entry

    try:
        entry()  # ends in os._exit with the command's status
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the repo: deep_pipeline, as installed
    try:
        _serve(sys.argv[1])
    finally:
        for leftover in (sys.argv[1], sys.argv[1] + ".ready"):
            Path(leftover).unlink(missing_ok=True)
        Path(sys.argv[1]).parent.rmdir()
