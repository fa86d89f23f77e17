"""`deep-pipeline compile / status / resume` against a temporary SQLite DAGSTER_HOME."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.core.keys import iteration_key
from tests.compile_world import CONFIG, World, install_world, make_inputs


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    return home


def write_config(tmp_path, **extra):
    path = tmp_path / "compile.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, **extra}))
    return path


def test_compile_records_every_decision_as_a_materialization(tmp_path, home, scripted_llm, capsys):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2, ("s03-output", "concision"): 3},
                                      compare={("s03-output", "concision"): (3, 3)}))
    skill, bundle = make_inputs(tmp_path)
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "S_final:" in out and "report:" in out
    # The UI hint is a command that runs as printed: this venv's dagster, not one on PATH.
    ui = next(line for line in out.splitlines() if line.startswith("UI:")).split()
    assert ui[1] == f"DAGSTER_HOME={home}" and Path(ui[2]).is_file() and ui[3:] == ["dev", "-m", "deep_pipeline.definitions"]
    compiles = list((home / "compiles").iterdir())
    assert len(compiles) == 1
    report = json.loads((compiles[0] / "report.json").read_text())

    instance = dg.DagsterInstance.get()  # the same SQLite storage the CLI wrote
    records = instance.fetch_materializations(dg.AssetKey("decision"), limit=100, ascending=True).records
    mats = [r.asset_materialization for r in records]
    assert [m.partition for m in mats] == [iteration_key(report["compile_key"], d["level"], d["index"]) for d in report["decisions"]]
    for mat, decision in zip(mats, report["decisions"]):
        assert mat.metadata["reason"].value == decision["reason"]
        assert mat.metadata["coordinate"].value == f"{decision['coordinate']['unit_id']}/{decision['coordinate']['dimension']}"
        assert "decision_json_path" in mat.metadata and "decision_json_sha256" in mat.metadata
        assert "matrix_before" in mat.metadata and "matrix_after" in mat.metadata
    # s02 clarity is accepted, then s03 concision (3 -> 3) is rejected until exhausted.
    sequence = [(f"{d['coordinate']['unit_id']}/{d['coordinate']['dimension']}", d["reason"]) for d in report["decisions"]]
    assert sequence == [
        ("s02-steps/clarity", "target_improved_without_runtime_regression"),
        ("s03-output/concision", "target_cell_did_not_improve"),
        ("s03-output/concision", "target_cell_did_not_improve"),
    ]
    assert report["verifier_signal_used"] is False

    # status lists it as finalized; a re-run resumes and makes no new model call.
    assert main(["status"]) == 0
    assert "finalized" in capsys.readouterr().out
    calls = len(scripted_llm.requests)
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path)), "--quiet"]) == 0
    assert len(scripted_llm.requests) == calls


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"runner": "nonsense"}, "runner"),
        ({"judge_model": "nosuchprovider/x"}, "judge_model"),
        ({"dimensions": []}, "dimensions"),
        ({"rollouts": "many"}, "rollouts"),
        ({"compare_orders": 3}, "compare_orders: Input should be 1 or 2"),
        ({"compare_samples": 0}, "compare_samples"),
        ({"compare_samples": 6}, "compare_samples"),
    ],
)
def test_bad_settings_fail_before_anything_is_registered(tmp_path, home, scripted_llm, capsys, extra, needle):
    skill, bundle = make_inputs(tmp_path)
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path, **extra))])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err
    assert not (home / "compiles").exists() or not any((home / "compiles").iterdir())


@pytest.mark.parametrize("flags, needle", [(["--compare-orders", "3"], "compare_orders"),
                                           (["--compare-samples", "9"], "compare_samples"),
                                           (["--compare-max-pairs", "0"], "compare_max_pairs"),
                                           (["--max-edit-growth", "1"], "max_edit_growth")])
def test_bad_comparison_flags_fail_before_anything_is_registered(tmp_path, home, capsys, flags, needle):
    skill, bundle = make_inputs(tmp_path)
    assert main(["compile", str(skill), "--task", str(bundle), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
    assert not (home / "compiles").exists() or not any((home / "compiles").iterdir())


def test_the_comparison_flags_reach_the_compiles_config(tmp_path, home, scripted_llm, capsys):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(tmp_path)
    argv = ["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path, section_iterations=1)),
            "--compare-orders", "1", "--compare-samples", "2", "--compare-max-pairs", "2", "--max-edit-growth", "4",
            "--face-value-regressions", "--quiet"]
    assert main(argv) == 0
    [folder] = (home / "compiles").iterdir()
    config = json.loads((folder / "compile.json").read_text())["config"]
    assert (config["compare_orders"], config["compare_samples"], config["regressions_need_evidence"]) == (1, 2, False)
    assert config["compare_max_pairs"] == 2  # set away from its default: written, and in the identity
    assert config["max_edit_growth"] == 4


def test_resume_unknown_compile_is_a_clear_error(home, capsys):
    assert main(["resume", "nope-123456"]) == 2
    assert "no such compile" in capsys.readouterr().err


def test_a_hosted_model_without_its_key_fails_before_registering(tmp_path, home, monkeypatch, capsys):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    skill, bundle = make_inputs(tmp_path)
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path)),
                 "--judge-model", "anthropic/claude-sonnet-4-5"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "ANTHROPIC_API_KEY" in err and len(err.splitlines()) == 1
    assert not (home / "compiles").exists() or not any((home / "compiles").iterdir())


@pytest.mark.parametrize(
    "extra",
    [{"runner": "command", "agent_command": 'claude "unclosed'}, {"runner": "replay", "_empty_bundle": True}],
)
def test_bad_runner_settings_touch_nothing(tmp_path, home, capsys, extra):
    skill, bundle = make_inputs(tmp_path)
    if extra.pop("_empty_bundle", False):
        data = json.loads(bundle.read_text())
        bundle.write_text(json.dumps({**data, "traces": []}))
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path, **extra))])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert list(home.iterdir()) == []  # not even Dagster's own folders


def test_a_failing_step_ends_in_one_line_naming_the_cause(tmp_path, home, scripted_llm, fast_backoff, capsys):
    install_world(scripted_llm, World())
    scripted_llm.always("judge", lambda req: (_ for _ in ()).throw(ValueError("judge exploded")))
    skill, bundle = make_inputs(tmp_path)
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path)), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1 and "judge" in err, err
    assert "failed 5 times" in err  # each column resent RETRIES times, only the backoff is short
    assert "judge exploded" in err and "Traceback" not in err and len(err) < 600, err  # the cause, not a traceback


def test_status_of_one_compile_shows_levels_decisions_and_records(tmp_path, home, scripted_llm, capsys):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2, ("s03-output", "concision"): 3},
                                      compare={("s03-output", "concision"): (3, 3)}))
    skill, bundle = make_inputs(tmp_path)
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(write_config(tmp_path)), "--quiet"]) == 0
    (folder,) = (home / "compiles").iterdir()
    report = json.loads((folder / "report.json").read_text())
    capsys.readouterr()
    assert main(["status", folder.name]) == 0
    out = capsys.readouterr().out
    assert "state: finalized" in out and f"section level: {report['levels'][0]['stop_reason']}" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and "/i0" in line]
    assert len(rows) == len(report["decisions"])
    assert "section/i00" in rows[0] and "accepted" in rows[0] and "2 -> 4" in rows[0]
    assert str(folder / "report.json") in out
    assert main(["status", folder.name, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [d["reason"] for d in status["decisions"]] == [d["reason"] for d in report["decisions"]]
    assert [d["number"] for d in status["decisions"]] == list(range(1, len(report["decisions"]) + 1))


@pytest.mark.parametrize("command, needle", [
    ("no-such-agent-cli-7f3a -p {prompt}", "program 'no-such-agent-cli-7f3a' not found on PATH"),
    ("./bin/agent.sh {prompt}", "program './bin/agent.sh' does not exist"),
    ("{skill_dir}/scripts/missing.sh", "program '{skill_dir}/scripts/missing.sh' does not exist"),
])
def test_an_agent_program_that_does_not_exist_is_refused_before_anything_is_written(tmp_path, home, capsys,
                                                                                    command, needle):
    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path, runner="command", agent_command=command, judge_model="local",
                          editor_model="local")
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "agent_command" in err and needle in err, err
    assert list(home.iterdir()) == []  # no compile folder, not even Dagster's own files


def test_the_ui_hint_keeps_a_store_of_its_own(tmp_path, home, monkeypatch):
    # With DEEP_PIPELINE_STORE set, the hint's UI found none of the compiles
    from deep_pipeline.cli.compile_commands import ui_command

    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "elsewhere"))
    words = ui_command().split()
    assert words[:2] == [f"DAGSTER_HOME={home}", f"DEEP_PIPELINE_STORE={tmp_path / 'elsewhere'}"]
    assert words[3:] == ["dev", "-m", "deep_pipeline.definitions"]
    monkeypatch.delenv("DEEP_PIPELINE_STORE")
    assert "DEEP_PIPELINE_STORE" not in ui_command()
