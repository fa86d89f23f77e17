"""A failed compile does not look like a running one: `status`, its JSON and
the live timeline name the last step's failed run, its error line and when, until a step ends."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.status import compile_status, format_status
from deep_pipeline.errors import StepError
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.scripted_llm import auth_error
from tests.test_timeline import observations, table_rows


def test_a_failed_step_run_shows_as_failed_until_a_step_ends(env, scripted_llm, capsys):
    from deep_pipeline.cli import main

    # The judge refuses the key: the first matrix step fails on its first column.
    scripted_llm.always("judge", auth_error())
    instance = dg.DagsterInstance.ephemeral()
    skill, bundle = make_inputs(env / "dg")
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, dict(CONFIG))
    with pytest.raises(StepError):
        drive_compile(instance, env / "store", record.key)
    [failed_run] = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))

    status = compile_status(CompileHandle.open(env / "store", record.key))
    assert status.state == "failed" and status.next_step  # not "running"
    failure = status.failure
    assert failure.run_id == failed_run.run_id and failure.partition == f"{record.key}/section/m00"
    assert "x-api-key" in failure.error and "\n" not in failure.error and failure.at > 0
    assert not failure.error.startswith("deep_pipeline.")  # the step's own line, not Dagster's wrapping of it
    assert failure.step == "score_matrix"
    text = format_status(status)
    assert "state: failed" in text and f"run {failed_run.run_id}" in text and "x-api-key" in text

    # the CLI's --json carries it; the one-line list says it too
    assert main(["status", record.key, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "failed" and shown["failure"]["run_id"] == failed_run.run_id
    assert main(["status"]) == 0
    assert "failed" in capsys.readouterr().out.split(record.key, 1)[1].splitlines()[0]

    # the timeline: state failed, the failed run as the last row, every logged call counted
    latest = observations(instance, record.key)[-1]
    calls = CompileHandle.open(env / "store", record.key).cdir.calls()
    assert latest.metadata["state"].value == "failed"
    assert failed_run.run_id in latest.metadata["last_failure"].value
    assert latest.metadata["compile_model_calls"].value == len(calls) >= 1
    assert latest.metadata["compile_failed_calls"].value == sum(c.error is not None for c in calls) >= 1
    last_row = [cell.strip() for cell in table_rows(latest)[-1].strip("|").split("|")]
    assert last_row[1].startswith("[failed section/m00]") and f"/runs/{failed_run.run_id}" in last_row[1]
    assert last_row[4] == "failed" and last_row[9].startswith(f"{len(calls)} (")

    # the HTML report of the unfinished compile is refused, naming the failure
    assert main(["report", record.key]) == 2
    refused = capsys.readouterr().err
    assert "not finalized" in refused and failed_run.run_id in refused and "\n" not in refused.strip()

    # mended and resumed: the next step that ends clears it
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    drive_compile(instance, env / "store", record.key)
    status = compile_status(CompileHandle.open(env / "store", record.key))
    assert status.state == "finalized" and status.failure is None
    assert observations(instance, record.key)[-1].metadata["last_failure"].value == "-"


def test_a_failure_line_never_keeps_a_key(tmp_path, monkeypatch):
    from deep_pipeline.engine.compile_dir import CompileDir
    from deep_pipeline.engine.failures import last_failure, record_failure

    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-abcdef123456")
    cdir = CompileDir(tmp_path, "demo-abc123")
    cdir.path.mkdir()
    record_failure(cdir, "run-1", "demo-abc123/section/m00", "score_matrix",
                   "refused: Incorrect API key provided: sk-live-abcdef123456\n  Traceback (most recent call last): ...")
    failure = last_failure(cdir)
    assert "sk-live" not in (cdir.path / "last_failure.json").read_text() and "<redacted>" in failure.error
    assert "\n" not in failure.error and "Traceback" not in failure.error
