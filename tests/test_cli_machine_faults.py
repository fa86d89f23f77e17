"""The machine's own faults end in one line, not a traceback (issue: a read-only or file
DAGSTER_HOME, a read-only store, a full disk); commands that only read write nothing.

Read-only and full filesystems are real tmpfs mounts (root only: CI runs as root); where
mounting is not allowed the tests say so and skip.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager

import pytest
import yaml

from deep_pipeline.cli import main
from tests.compile_world import CONFIG, World, install_world, make_inputs


@contextmanager
def tmpfs(path, options):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def compile_args(tmp_path, **extra):
    skill, bundle = make_inputs(tmp_path / "inputs")
    config = tmp_path / "compile.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, **extra}))
    return ["compile", str(skill), "--task", str(bundle), "--config", str(config), "--quiet"]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_dagster_home_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys, scripted_llm):
    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    assert main(compile_args(tmp_path)) == 2
    err = one_line(capsys)
    assert str(home) in err and "not a folder" in err


def test_a_read_only_dagster_home_is_refused(tmp_path, monkeypatch, capsys, scripted_llm):
    with tmpfs(tmp_path / "home", "ro,size=1m") as home:
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
        assert main(compile_args(tmp_path)) == 2
        err = one_line(capsys)
        assert str(home) in err and "cannot be written" in err


def test_a_read_only_store_is_refused_with_nothing_registered(tmp_path, monkeypatch, capsys, scripted_llm):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with tmpfs(tmp_path / "store", "ro,size=1m") as store:
        monkeypatch.setenv("DEEP_PIPELINE_STORE", str(store))
        assert main(compile_args(tmp_path)) == 2
        err = one_line(capsys)
        assert str(store) in err and "compile store" in err


def test_a_full_disk_mid_compile_fails_in_one_line_and_resumes_once_space_is_freed(
        tmp_path, monkeypatch, capsys, scripted_llm):
    world = {"low": {("s02-steps", "clarity"): 2, ("s03-output", "concision"): 3},
             "compare": {("s03-output", "concision"): (3, 3)}}
    args = compile_args(tmp_path)
    # The reference: the same world on a roomy disk.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "reference"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    install_world(scripted_llm, World(**world))
    assert main(args) == 0
    (reference,) = (tmp_path / "reference" / "compiles").glob("*/report.json")
    expected = [d["reason"] for d in json.loads(reference.read_text())["decisions"]]
    capsys.readouterr()
    used = sum(p.stat().st_blocks * 512 for p in (tmp_path / "reference" / "compiles").rglob("*") if p.is_file())

    # A compile store with room for about two thirds of the compile: it fills up mid-way.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with tmpfs(tmp_path / "store", f"size={used * 2 // 3 // 1024}k") as store:
        monkeypatch.setenv("DEEP_PIPELINE_STORE", str(store))
        scripted_llm.reset()
        install_world(scripted_llm, World(**world))
        assert main(args) == 1
        err = one_line(capsys)
        assert "No space left on device" in err or "no space left" in err.lower(), err
        assert "Traceback" not in err
        assert any(store.rglob("decision.json")) and not any(store.rglob("report.json"))  # mid-way
        for record in store.rglob("*.json"):  # nothing half-written
            json.loads(record.read_text())
        assert not list(store.rglob("*.tmp"))
        subprocess.run(["mount", "-o", "remount,size=200m", str(store)], check=True)
        assert main(args) == 0, capsys.readouterr().err
        (report,) = store.glob("*/report.json")
        assert [d["reason"] for d in json.loads(report.read_text())["decisions"]] == expected


def test_resume_and_status_of_an_unknown_compile_write_nothing(tmp_path, monkeypatch, capsys):
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    assert main(["resume", "nope-123456"]) == 2
    assert "no such compile" in one_line(capsys)
    assert main(["status", "nope-123456"]) == 2
    assert "no such compile" in one_line(capsys)
    assert main(["status"]) == 0
    assert list(home.iterdir()) == []


def test_a_full_dagster_home_fails_in_one_line(tmp_path, monkeypatch, capsys, scripted_llm):
    # Dagster's SQLite storages alone need more than this: the error surfaces from SQLAlchemy.
    with tmpfs(tmp_path / "home", "size=512k") as home:
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
        install_world(scripted_llm, World())
        assert main(compile_args(tmp_path)) == 1
        err = one_line(capsys)
        assert "no space left on device" in err and "run the same command again" in err, err
