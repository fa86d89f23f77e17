"""tests/forked_cli.py stands where a `deep-pipeline` subprocess stood in the crash, dead-run
and fault tests: each forked command gets its own environment, directory, streams, session
and exit status, as a process the console script started would."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from tests import forked_cli


def test_each_command_gets_its_own_environment_directory_streams_and_status(tmp_path):
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\n# S\n\n## Steps\n\nDo it.\n")
    for name in ("one", "two"):  # one server, two environments: nothing of the first is kept
        listed = forked_cli.run(["status"], env={**os.environ, "DAGSTER_HOME": str(tmp_path / name)},
                                capture_output=True, text=True, timeout=120)
        assert (listed.returncode, listed.stdout, listed.stderr) == (0, f"no compiles in {tmp_path / name}/compiles\n", "")
    inspected = forked_cli.run(["inspect", "skill", "--json"], cwd=tmp_path, capture_output=True, timeout=60)
    assert inspected.returncode == 0 and b'"steps"' in inspected.stdout.lower(), inspected
    (tmp_path / "elsewhere").mkdir()
    refused = forked_cli.run(["inspect", "skill"], cwd=tmp_path / "elsewhere", capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stdout == "", refused
    assert refused.stderr.startswith("deep-pipeline: error: skill") and refused.stderr.count("\n") == 1, refused.stderr


def test_a_command_in_its_own_session_is_killed_with_its_group(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = forked_cli.ForkedCLI(["serve-reports", "--port", str(port)], env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert os.getsid(proc.pid) == proc.pid  # set up before ForkedCLI returned, as Popen's child is
        assert proc.poll() is None
        deadline = time.monotonic() + 120
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:  # serving: the command really runs
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
