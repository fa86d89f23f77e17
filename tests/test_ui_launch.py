"""`make ui` stops on Ctrl-C and SIGTERM however it was started.

A shell starts a background command (`make ui &`, a script) with SIGINT ignored; exec keeps
that, and `dagster dev` gives SIGTERM SIGINT's handling: it ignored both. The launcher
(deep_pipeline.cli.ui) puts SIGINT back to its default before it runs `dagster dev`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.browser import wait_until
from tests.test_ui_browser import answers, free_port

SHOWS_SIGINT = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def ignoring_sigint() -> None:  # as a non-interactive shell starts a background job
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_the_launcher_hands_its_program_a_working_sigint():
    launch = ("import sys; from deep_pipeline.cli.ui import exec_with_default_interrupts; "
              f"exec_with_default_interrupts([sys.executable, '-c', {SHOWS_SIGINT!r}])")
    direct = subprocess.run([sys.executable, "-c", SHOWS_SIGINT], preexec_fn=ignoring_sigint,
                            capture_output=True, text=True, check=True)
    launched = subprocess.run([sys.executable, "-c", launch], preexec_fn=ignoring_sigint,
                              capture_output=True, text=True, check=True)
    assert direct.stdout.strip() == "False"  # what `dagster dev` started in the background had
    assert launched.stdout.strip() == "True"


@pytest.mark.slow
def test_dagster_dev_started_in_the_background_stops_on_sigterm(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    reports = free_port()  # `make ui` serves the reports beside the UI, on the port of the report URL
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEEP_PIPELINE_STORE": str(tmp_path / "store"),
           "DEEP_PIPELINE_REPORT_URL": f"http://127.0.0.1:{reports}/"}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "deep_pipeline.cli.ui", "-m", "deep_pipeline.definitions",
                             "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=Path(__file__).parent.parent,
                            preexec_fn=ignoring_sigint, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("dagster dev to answer", lambda: answers(f"http://127.0.0.1:{port}") or proc.poll() is not None,
                   timeout=300)
        assert proc.poll() is None
        wait_until("the report server to answer", lambda: serves(f"http://127.0.0.1:{reports}/"), timeout=120)
        proc.terminate()
        proc.wait(timeout=120)  # before the launcher: still running when killed after minutes
        wait_until("dagster dev's services to stop", lambda: not answers(f"http://127.0.0.1:{port}"), timeout=60)
        wait_until("the report server to stop with it", lambda: not serves(f"http://127.0.0.1:{reports}/"), timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
