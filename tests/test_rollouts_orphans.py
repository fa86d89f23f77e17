"""SPEC §9: an agent process never outlives the process that started it.

A real driver process runs a batch of hanging agents (tests/agents/hang.py, each with a
child) and is SIGKILLed; nothing of the rollouts may survive it. When even the guard
was killed, the records the runner keeps let the next batch stop the leftovers (without a
PID namespace); with one, the rollout's namespace dies with its guard, and a child that
left its session and cleared its environment goes with it (SPEC §9).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deep_pipeline.rollouts import RolloutTask
from deep_pipeline.rollouts.command import CommandRunner
from tests.pids import host_pids

REPO = Path(__file__).resolve().parents[1]
AGENTS = Path(__file__).parent / "agents"
BIN = Path(sys.executable).parent

# The driver: one CommandRunner batch of three hanging agents, as a compile step runs it.
DRIVER = """
import sys
from pathlib import Path
from deep_pipeline.rollouts import RolloutTask, SandboxLimits, process
from deep_pipeline.rollouts.command import CommandRunner

tmp, template = Path(sys.argv[1]), sys.argv[2]
process.CONTAIN = sys.argv[4] == "contain"
extra = {"agents_dir": tmp / "agents"} if sys.argv[3] == "records" else {}
runner = CommandRunner(template, "text", model="anthropic/x", sandbox_parent=tmp / "sandboxes",
                       limits=SandboxLimits(timeout_s=600, idle_timeout_s=600), **extra)
runner.run_batch(package_dir=tmp / "skill", skill_sha256="x", task=RolloutTask(prompt="p", skill_name="demo"),
                 batch="input", n=3, archive_dir=tmp / "raw")
"""


def hang_template(piddir: Path, *extra: str) -> str:
    argv = [sys.executable, str(AGENTS / "hang.py"), "--piddir", str(piddir), *extra]
    return " ".join(shlex.quote(a) for a in argv)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie runs nothing; whoever reaps it is not ours to wait for


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_for_agents(piddir: Path, n: int, driver: subprocess.Popen, deadline_s: float = 60) -> list[int]:
    """Every pid of the n running agents and their children, once all are up."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        files = [p for p in piddir.iterdir() if p.suffix != ".tmp"]
        if len(files) >= n:
            return [pid for f in files for pid in host_pids(f)]
        if driver.poll() is not None:
            pytest.fail(f"the driver ended early ({driver.returncode}): {driver.stderr.read()[-2000:]}")
        time.sleep(0.1)
    pytest.fail(f"{n} agents did not start within {deadline_s} s")


def survivors(pids: list[int], within_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def world(tmp_path: Path) -> Path:
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("---\nname: demo\ndescription: d\n---\n# Demo\n")
    (tmp_path / "sandboxes").mkdir()
    (tmp_path / "pids").mkdir()
    return tmp_path


def start_driver(world: Path, template: str, mode: str, containment: str = "contain") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(world), template, mode, containment],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("extra", [[], ["--ignore-term", "--setsid-child"]], ids=["plain", "stubborn-setsid-child"])
def test_no_agent_or_child_survives_a_sigkilled_driver(world, extra):
    driver = start_driver(world, hang_template(world / "pids", *extra), "plain")
    pids = wait_for_agents(world / "pids", 3, driver)
    try:
        assert len(pids) == 6 and all(alive(p) for p in pids)
        driver.kill()  # SIGKILL: the driver gets no chance to stop anything
        driver.wait()
        assert survivors(pids) == []
    finally:
        kill_all(pids)


def test_leftovers_of_a_killed_run_are_stopped_by_the_next_batch(world, caplog):
    """Even with its guards killed too, a dead driver's agents are stopped at the next batch."""
    driver = start_driver(world, hang_template(world / "pids"), "records", "group")  # no namespace to end them
    pids = wait_for_agents(world / "pids", 3, driver)
    try:
        agents = [host_pids(f)[1] for f in (world / "pids").iterdir()]
        guards = [parent_of(p) for p in agents]
        os.kill(driver.pid, signal.SIGSTOP)  # frozen: it cannot notice its guards go
        kill_all(guards)
        driver.kill()
        driver.wait()
        time.sleep(0.5)
        assert all(alive(p) for p in pids)  # orphans now: only the records know them
        assert len(list((world / "agents").iterdir())) == 3

        runner = CommandRunner(shlex.join([sys.executable, "-c", "print('done')"]), "text", model="anthropic/x",
                               sandbox_parent=world / "sandboxes", agents_dir=world / "agents")
        with caplog.at_level(logging.WARNING):
            [trace] = runner.run_batch(package_dir=world / "skill", skill_sha256="x",
                                       task=RolloutTask(prompt="p", skill_name="demo"), batch="next", n=1,
                                       archive_dir=world / "raw2")
        assert trace.error_category is None and trace.final_output.strip() == "done"
        assert survivors(pids, within_s=3) == []
        assert "stopped 6 leftover agent processes of a killed run" in caplog.text
        assert list((world / "agents").iterdir()) == []
    finally:
        kill_all(pids)


def contained() -> bool:
    """Whether this machine gives a rollout a PID namespace (root, or user namespaces allowed)."""
    from deep_pipeline.rollouts import SandboxLimits
    from deep_pipeline.rollouts.process import run_process

    result = run_process(["true"], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, limits=SandboxLimits())
    return result.start_error is None and result.uncontained is None


def guard_of(pid: int, driver: int) -> int:
    while (parent := parent_of(pid)) != driver:
        pid = parent
    return pid


ESCAPE = ["--escape", "--ignore-term"]  # a child that left its session, cleared its environment, ignores SIGTERM


@pytest.mark.parametrize("how", ["driver", "driver-and-guards"])
def test_a_child_that_escaped_session_and_environment_dies_with_its_rollout(world, how, caplog):
    """Issue 21 item 29: nothing a rollout starts survives a kill -9 of the driver, nor of its
    guards too; the next batch (a resume) then starts with nothing of the old run alive."""
    if not contained():
        pytest.skip("no PID namespace on this machine: the group and marker are all there is")
    driver = start_driver(world, hang_template(world / "pids", *ESCAPE), "records")
    pids = wait_for_agents(world / "pids", 3, driver)
    try:
        assert len(pids) == 6 and all(alive(p) for p in pids)
        if how == "driver-and-guards":
            agents = [host_pids(f)[1] for f in (world / "pids").iterdir()]
            os.kill(driver.pid, signal.SIGSTOP)  # frozen: it cannot notice its guards go
            kill_all([guard_of(p, driver.pid) for p in agents])
        driver.kill()
        driver.wait()
        assert survivors(pids) == []

        runner = CommandRunner(shlex.join([sys.executable, "-c", "print('done')"]), "text", model="anthropic/x",
                               sandbox_parent=world / "sandboxes", agents_dir=world / "agents")
        [trace] = runner.run_batch(package_dir=world / "skill", skill_sha256="x",
                                   task=RolloutTask(prompt="p", skill_name="demo"), batch="next", n=1,
                                   archive_dir=world / "raw2")
        assert trace.error_category is None and survivors(pids, within_s=0) == []
        assert list((world / "agents").iterdir()) == []
    finally:
        kill_all(pids)


def test_a_record_is_trusted_only_for_its_own_process(world, caplog):
    """A live driver's agents are left alone; a reused pid (other start time) is never killed."""
    from deep_pipeline.rollouts.process import stop_leftover_agents, write_agent_record

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        records = world / "agents"
        # Written by this (live) process: not a leftover.
        live = write_agent_record(records, pid=bystander.pid, marker="feedfacefeedface")
        # Claims the bystander's pid with another start time: a reused pid, not ours.
        (records / "stale.json").write_text(json.dumps({
            "pgid": bystander.pid, "pid": bystander.pid, "start_time": 1, "marker": "0123456789abcdef",
            "driver_pid": 999999999, "driver_start_time": 1}))
        with caplog.at_level(logging.WARNING):
            assert stop_leftover_agents(records) == 0
        assert alive(bystander.pid)
        assert live.is_file()  # the live driver's record stays
        assert not (records / "stale.json").exists()
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("extra", [[], ESCAPE], ids=["plain", "escaped-child"])
def test_no_agent_survives_a_sigkilled_cli_compile(world, extra):
    from tests.compile_world import CONFIG, make_inputs

    if extra and not contained():
        pytest.skip("no PID namespace on this machine: the group and marker are all there is")

    skill, bundle = make_inputs(world / "inputs")
    config = world / "compile.yaml"
    config.write_text(yaml.safe_dump({
        **CONFIG, "runner": "command", "agent_command": hang_template(world / "pids", *extra), "rollouts": 3,
        "judge_model": "local", "editor_model": "local", "rollout_timeout_s": 600}))
    home = world / "dagster_home"
    home.mkdir()
    (world / "tmp").mkdir()  # the killed driver's sandboxes stay behind: keep them in the test's folder
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO), "TMPDIR": str(world / "tmp")}
    env.pop("DEEP_PIPELINE_STORE", None)
    cli = subprocess.Popen([str(BIN / "deep-pipeline"), "compile", str(skill), "--task", str(bundle),
                            "--config", str(config)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    pids = wait_for_agents(world / "pids", 3, cli, deadline_s=120)
    try:
        cli.kill()
        cli.wait()
        assert survivors(pids) == []
    finally:
        kill_all(pids)
