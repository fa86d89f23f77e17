"""SPEC §9: a run or a pool slot held by a dead process is released before the next step.

`kill -9` of `deep-pipeline compile` inside a model call leaves its Dagster run STARTED
and its `llm` slot claimed; two such kills used to take both slots of the pool for good,
so every later model-calling step waited forever. The model is a scripted
OpenAI-compatible server (the CLI is another process); it holds one chosen request
open, which is where the test kills the driver.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import dagster as dg
import pytest

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, install_world, make_inputs
from tests.instances import OUR_YAML
from tests import forked_cli
from tests.served_world import KillPoint, one_edit_world, reference, served_compile

REPO = Path(__file__).resolve().parents[1]
IN_FLIGHT = (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING)


def kill_inside(gate: KillPoint, role: str, args: list[str], env: dict) -> str:
    gate.arm(role)
    proc = forked_cli.ForkedCLI(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        assert gate.arrived.wait(120), f"no {role} request arrived"
        proc.send_signal(signal.SIGKILL)  # the driver only, as `kill -9 PID` does
        out, _ = proc.communicate(timeout=30)
    finally:
        gate.release.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever helper it left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL
    return out


@pytest.mark.slow
def test_two_kills_in_model_calls_leave_no_run_started_and_no_slot_claimed(tmp_path, scripted_llm, dagster_storage):
    expected, expected_skill, _ = reference(tmp_path, scripted_llm)
    dagster_storage.for_new_homes()
    home = tmp_path / "home"  # a new home: the CLI gives it our dagster.yaml (the llm pool of 2)
    gate = KillPoint(one_edit_world())
    with served_compile(tmp_path, home, gate) as served:
        env = served.env
        kill_inside(gate, "judge", served.compile_args, env)  # in the first matrix's columns
        (key,) = [p.name for p in (home / "compiles").iterdir()]
        resumed = kill_inside(gate, "editor", ["resume", key], env)  # in the first iteration's edit
        # Before the fix both llm slots stayed claimed here and this resume waited forever.
        done = forked_cli.run(["resume", key], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each resume first released the run the kill before it left (one line each).
    assert resumed.count("released run") == 1 and "(score_matrix" in resumed, resumed
    assert done.stdout.count("released run") == 1 and "(run_iteration" in done.stdout, done.stdout
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    decisions = [(d["level"], f"{d['coordinate']['unit_id']}/{d['coordinate']['dimension']}", d["accepted"], d["reason"])
                 for d in report["decisions"]]
    assert decisions == expected
    assert (Path(report["final_skill_dir"]) / "SKILL.md").read_text() == expected_skill

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_records(dg.RunsFilter(statuses=list(IN_FLIGHT))) == []
        failed = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert {r.dagster_run.job_name for r in failed} == {"score_matrix", "run_iteration"}
        info = instance.event_log_storage.get_concurrency_info("llm")
        assert info.claimed_slots == [] and info.pending_steps == []


@pytest.mark.slow
def test_ctrl_c_in_a_model_call_prints_one_line(tmp_path, dagster_storage):
    """A terminal's Ctrl-C reaches the whole process group: no helper of Dagster's may print a traceback."""
    dagster_storage.for_new_homes()
    gate = KillPoint(one_edit_world())
    with served_compile(tmp_path, tmp_path / "home", gate) as served:
        gate.arm("judge")
        proc = forked_cli.ForkedCLI(served.compile_args, cwd=REPO, env=served.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert gate.arrived.wait(120), "no judge request arrived"
            os.killpg(proc.pid, signal.SIGINT)
            threading.Timer(0.5, gate.release.set).start()  # the call in flight ends; the driver stops
            _, err = proc.communicate(timeout=60)
        finally:
            gate.release.set()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert err.splitlines() == ["deep-pipeline: interrupted; run the same command again to resume"]

WARNING = "this Dagster instance has no limit on the 'llm' pool"


def drive_first_step(tmp_path: Path, instance: dg.DagsterInstance, monkeypatch) -> None:
    from deep_pipeline.runtime.driver import drive_compile
    from deep_pipeline.errors import StepError

    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))  # where the assets' store resource looks
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    with pytest.raises(StepError, match="no end after 1 steps"):
        drive_compile(instance, tmp_path / "store", record.key, max_runs=1)


def test_the_first_step_on_an_instance_without_our_limits_warns_once_naming_the_file(tmp_path, scripted_llm, capsys, monkeypatch,
                                                                                     dagster_storage):
    install_world(scripted_llm, one_edit_world())
    drive_first_step(tmp_path, dagster_storage.instance(), monkeypatch)  # Dagster's defaults: no dagster.yaml
    lines = [line for line in capsys.readouterr().err.splitlines() if WARNING in line]
    assert len(lines) == 1
    assert "deep/queue" in lines[0] and str(OUR_YAML) in lines[0]


def test_an_instance_with_our_dagster_yaml_gets_no_warning(tmp_path, scripted_llm, capsys, monkeypatch, dagster_storage):
    install_world(scripted_llm, one_edit_world())
    home = dagster_storage.home(tmp_path / "home")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        drive_first_step(tmp_path, instance, monkeypatch)
    assert "warning" not in capsys.readouterr().err
