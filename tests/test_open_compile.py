"""Issue 21 item 25: what a kill -9 left is cleaned by every command that opens the compile.

A kill during the finalize step's report write left a finalized compile (report.json
written) with its run STARTED and no report.html; a kill during rollouts left sandboxes in
the temp directory until a *batch* ran. `resume`, or `compile` again, of a finalized
compile runs no step: the sweep and the missing output must come from opening it.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
from deep_pipeline.runtime.dagster_private import make_new_run_id

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.sweep import WORKER_TAG, WorkerClaim
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.rollouts.guard import start_time
from deep_pipeline.rollouts.sandbox import OWNER_FILE, SANDBOX_PREFIX
from tests.compile_world import CONFIG, World, install_world, make_inputs


def dead_process() -> tuple[int, int]:
    """The pid and start time of a process that has ended (a killed driver)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = start_time(proc.pid)
    proc.kill()
    proc.wait()
    return proc.pid, started


def started_run_of(instance: dg.DagsterInstance, pid: int, started: int) -> str:
    """A run left STARTED by the dead process, as a kill -9 of the CLI leaves it."""
    run_id = make_new_run_id()
    instance.add_run(dg.DagsterRun(job_name="compile_report", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                   tags={WORKER_TAG: WorkerClaim(pid, socket.gethostname(), started, run_id).tag()}))
    return run_id


def alive(pid: int) -> bool:
    return start_time(pid) is not None


def test_opening_a_finalized_compile_sweeps_what_a_kill_left_and_writes_the_missing_report(
        tmp_path, scripted_llm, monkeypatch, dagster_storage):
    install_world(scripted_llm, World())
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the sandboxes' parent
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    instance = dagster_storage.instance()
    drive_compile(instance, tmp_path / "store", record.key)
    cdir = tmp_path / "store" / record.key
    assert (cdir / "report.json").is_file()

    # What a kill -9 in the finalize step's report write, after rollouts, left behind.
    (cdir / "report.html").unlink()
    pid, started = dead_process()
    run_id = started_run_of(instance, pid, started)
    sandbox = tmp_path / "tmp" / f"{SANDBOX_PREFIX}killed"
    (sandbox / "work").mkdir(parents=True)
    (sandbox / OWNER_FILE).write_text(f"{pid} {started}\n")
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        while start_time(agent.pid) is None:
            time.sleep(0.01)
        marker = secrets.token_hex(8)
        (cdir / "agents").mkdir(exist_ok=True)
        (cdir / "agents" / f"{marker}.json").write_text(json.dumps({
            "pgid": agent.pid, "pid": agent.pid, "start_time": start_time(agent.pid), "marker": marker,
            "driver_pid": pid, "driver_start_time": started}))

        lines: list[str] = []
        report = drive_compile(instance, tmp_path / "store", record.key, progress=lines.append)  # a resume
        assert report.status
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        assert (cdir / "report.html").is_file()
        assert not sandbox.exists()
        assert list((cdir / "agents").iterdir()) == []
        assert any(f"released run {run_id}" in line for line in lines), lines
        assert any("wrote report.html" in line for line in lines), lines
        agent.wait(timeout=30)  # the dead driver's agent was stopped (SIGKILL) before its sandbox went
    finally:
        agent.kill()
