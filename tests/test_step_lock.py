"""A compile's locks: a sensor's probe never makes a user's command fail, and each engine
step of a compile runs alone, whoever runs it (a CLI driver, a daemon run, the plain driver).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, make_inputs
from tests.served_world import KillPoint, one_edit_world, reference, served_compile

REPO = Path(__file__).resolve().parents[1]


def registered(tmp_path: Path, overrides: dict = CONFIG) -> CompileHandle:
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), overrides))
    return CompileHandle.open(tmp_path / "store", record.key)


def hold(path: Path, mode: int, seconds: float) -> threading.Event:
    """Take a flock on `path` (another open file, as another process would) for `seconds`."""
    taken = threading.Event()

    def run():
        with open(path, "a") as handle:
            fcntl.flock(handle, mode)
            taken.set()
            time.sleep(seconds)

    threading.Thread(target=run, daemon=True).start()
    assert taken.wait(5)
    return taken


def test_a_driver_starting_while_the_sensor_probes_its_lock_waits_instead_of_refusing(tmp_path, scripted_llm):
    from deep_pipeline.runtime.driver import driver_lock
    from deep_pipeline.defs.sensors import _driven_elsewhere

    ctx = registered(tmp_path)
    hold(ctx.cdir.lock_path, fcntl.LOCK_SH, 0.5)  # a probe, caught in its instant
    with driver_lock(ctx):  # before: "another driver is running this compile", exit 2
        started = time.monotonic()
        assert _driven_elsewhere(ctx) is True  # the probe sees the driver ...
        assert time.monotonic() - started < 0.5  # ... without waiting for it
    assert _driven_elsewhere(ctx) is False


def test_a_step_waits_for_the_running_step_with_one_line_then_clears_orphaned_temps(tmp_path, capsys, scripted_llm):
    ctx = registered(tmp_path)
    folder = ctx.cdir.iteration_dir("section", 0)
    folder.mkdir(parents=True)
    fd, orphan = tempfile.mkstemp(prefix=".edit.json.", suffix=".tmp", dir=folder)  # a killed writer's
    os.close(fd)
    (ctx.cdir.input_skill / ".notes.tmp").write_text("the skill's own file")
    hold(ctx.cdir.path / "step.lock", fcntl.LOCK_EX, 0.5)  # a step of another run, in flight
    notes: list[str] = []
    started = time.monotonic()
    with ctx.step_lock(notes.append):
        assert time.monotonic() - started >= 0.4  # it waited for the other step
        assert not Path(orphan).exists()
        assert (ctx.cdir.input_skill / ".notes.tmp").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 1 and "another step of this compile is running" in notes[0]
    assert err == [f"deep-pipeline: {notes[0]}"]


DAEMON_RUN = """
import sys
import dagster as dg
from deep_pipeline.core.keys import matrix_key
from deep_pipeline.definitions import defs
key = sys.argv[1]
partition = matrix_key(key, "section", 0)
with dg.DagsterInstance.get() as instance:
    instance.add_dynamic_partitions("matrices", [partition])
    result = defs.resolve_job_def("score_matrix").execute_in_process(
        partition_key=partition, instance=instance, tags={"deep/compile": key}, raise_on_error=False)
sys.exit(0 if result.success else 1)
"""


@pytest.mark.slow
def test_a_cli_compile_started_while_a_daemon_run_of_it_is_in_flight_ends_as_one_driver_alone(
        tmp_path, monkeypatch, scripted_llm, capsys, dagster_storage):
    from deep_pipeline.cli import main
    from deep_pipeline.engine.steps import next_step, run_step

    expected, expected_skill, expected_calls = reference(tmp_path, scripted_llm)
    home = dagster_storage.home(tmp_path / "home")  # our dagster.yaml
    gate = KillPoint(one_edit_world(), answer_held=True)
    with served_compile(tmp_path, home, gate) as served:
        for name in ("DAGSTER_HOME", "OPENAI_API_KEY"):
            monkeypatch.setenv(name, served.env[name])
        monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
        record = register_compile(home / "compiles", served.skill, served.bundle,
                                  effective_config(load_deployment(), served.config))
        ctx = CompileHandle.open(home / "compiles", record.key)
        run_step(ctx, next_step(ctx))  # the inputs (replayed: no model call)
        gate.arm("judge")
        daemon_run = subprocess.Popen([sys.executable, "-c", DAEMON_RUN, record.key], cwd=REPO, env=dict(os.environ),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert gate.arrived.wait(120), "the daemon run never reached its matrix"
            # It stays inside its step until the CLI is seen waiting for the step lock (however
            # long the CLI takes to get there on a loaded machine); then it may go on.
            import deep_pipeline.engine.context as context_module

            locked = context_module.file_lock

            def watched(path, **kwargs):
                on_wait = kwargs.pop("on_wait", None)

                def waiting():
                    if on_wait is not None:
                        on_wait()
                    gate.release.set()

                return locked(path, on_wait=waiting, **kwargs)

            monkeypatch.setattr(context_module, "file_lock", watched)
            fallback = threading.Timer(300.0, gate.release.set)  # a CLI that never waits fails the asserts, not hangs
            fallback.start()
            code = main(served.compile_args)
            fallback.cancel()
        finally:
            gate.release.set()
            _, daemon_err = daemon_run.communicate(timeout=120)
        calls = len(served.server.requests)
    err = capsys.readouterr().err
    assert code == 0, err
    assert daemon_run.returncode == 0, daemon_err[-3000:]
    assert "another step of this compile is running" in err
    report = json.loads((ctx.cdir.report_path).read_text())
    decisions = [(d["level"], f"{d['coordinate']['unit_id']}/{d['coordinate']['dimension']}", d["accepted"], d["reason"])
                 for d in report["decisions"]]
    assert decisions == expected
    assert (Path(report["final_skill_dir"]) / "SKILL.md").read_text() == expected_skill
    assert calls == expected_calls  # no column scored twice
    assert len(list((ctx.cdir.path / "matrices").glob("*/matrix.json"))) == len(ctx.cdir.matrix_records())
