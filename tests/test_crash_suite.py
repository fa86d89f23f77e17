"""SPEC §9 under fire: SIGKILL a compile anywhere, resume it, and it ends as if never killed.

The kill points in the input rollouts and the first matrix (up to the edit's answer); those of the
iteration, the second matrix and finalize are in tests/test_crash_suite_iteration.py. The points
and their check: tests/crash_points.py; the harness: tests/crash_harness.py.
"""

from __future__ import annotations

import socket

import pytest

from tests.crash_harness import leftovers
from tests.crash_points import INPUTS_AND_FIRST_MATRIX, kill_and_resume

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("trigger", INPUTS_AND_FIRST_MATRIX, ids=[t.name for t in INPUTS_AND_FIRST_MATRIX])
def test_a_sigkilled_cli_compile_resumes_to_the_uninterrupted_end(tmp_path, crash_reference, trigger):
    kill_and_resume(tmp_path, crash_reference, trigger)


def test_the_leak_check_forgives_only_a_dead_code_servers_socket(tmp_path):
    """A sandbox, a stray file or a socket still bound is a leak; a socket file nothing holds is not."""
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(tmp_path / "live.sock"))
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(tmp_path / "dead.sock"))
    dead.close()  # the file stays, as a SIGKILLed code server's does
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "stray").write_text("x")
    with live:
        assert leftovers(tmp_path) == ["live.sock", "sandbox", "stray"]
