"""The Dagster command lines a user runs: validation, and registering a compile with a job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.instances import on_postgres

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(args, home, **kw):
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop("DEEP_PIPELINE_STORE", None)
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, **kw)


@pytest.mark.skipif(on_postgres(), reason="loads the definitions, opens no storage: the SQLite run covers it")
def test_definitions_validate_and_dg_check(tmp_path):
    validate = run([str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"], tmp_path)
    assert validate.returncode == 0, validate.stderr[-2000:]
    assert "passed validation" in validate.stderr + validate.stdout
    check = run([str(BIN / "dg"), "check", "defs"], tmp_path)
    assert check.returncode == 0, check.stderr[-2000:]
    assert "loaded successfully" in check.stdout + check.stderr


def test_start_compile_job_registers_a_compile_for_the_daemon(tmp_path, dagster_storage):
    dagster_storage.home(tmp_path, ours=False)  # Dagster's defaults on this storage
    example = REPO / "deep_pipeline" / "examples"
    config = {
        "ops": {
            "start_compile_op": {
                "config": {
                    "skill_dir": str(example / "haiku-writer"),
                    "bundle": str(example / "haiku-task.json"),
                    "overrides": {"rollouts": 2},
                }
            }
        }
    }
    (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
    args = [str(BIN / "dagster"), "job", "execute", "-m", "deep_pipeline.definitions", "-j", "start_compile", "-c", str(tmp_path / "compile.yaml")]
    first = run(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    compiles = [p for p in (tmp_path / "compiles").iterdir()]
    assert len(compiles) == 1 and compiles[0].name.startswith("haiku-writer-")
    assert (compiles[0] / "compile.json").is_file()
    # Starting the same compile again returns the existing one.
    second = run(args, tmp_path)
    assert second.returncode == 0
    assert "found existing compile" in second.stderr + second.stdout
    assert len(list((tmp_path / "compiles").iterdir())) == 1

    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(tmp_path)
    try:
        with dg.DagsterInstance.get() as instance:
            assert instance.get_dynamic_partitions("compiles") == [compiles[0].name]
    finally:
        del os.environ["DAGSTER_HOME"]
