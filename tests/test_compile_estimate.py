"""`deep-pipeline compile ... --estimate` (SPEC §11 "Cost before the run"): the bound and its
cost before anything is written, checked against real scripted compiles."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.llm.accounting import read_calls
from tests.compile_world import CONFIG, World, install_world, make_inputs

WORLDS = {
    "accepts": World(low={("s01-when-to-use", "clarity"): 2}),
    # Two rejections exhaust s02/clarity (2 paragraphs, score 2): the paragraph level runs and returns.
    "descends": World(low={("s02-steps", "clarity"): 2}, compare={("s02-steps", "clarity"): (2, 2)}),
}


@pytest.fixture
def places(tmp_path, monkeypatch):
    """DAGSTER_HOME and the compile store at paths that do not exist yet."""
    home, store = tmp_path / "home", tmp_path / "store"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(store))
    return home, store


def write_config(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "compile.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, **extra}))
    return path


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def run_estimate(capsys, skill, bundle, config, *flags) -> tuple[int, str, str]:
    code = main(["compile", str(skill), "--task", str(bundle), "--config", str(config), "--estimate", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_estimate_writes_nothing_and_calls_no_model(tmp_path, places, scripted_llm, capsys, monkeypatch):
    install_world(scripted_llm, WORLDS["accepts"])
    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path)
    before = files_under(tmp_path)

    def no_local_model(*args, **kwargs):
        raise AssertionError("the estimate started the local model")

    monkeypatch.setattr("deep_pipeline.llm.local_model.ensure_local_server", no_local_model)
    code, out, err = run_estimate(capsys, skill, bundle, config)
    assert code == 0, err
    assert files_under(tmp_path) == before  # no compile folder, no DAGSTER_HOME, no store
    assert not places[0].exists() and not places[1].exists()
    assert scripted_llm.requests == []
    assert "model calls" in out and "rollouts" in out and "max_usd" in out
    assert "(litellm.token_counter)" in out or "(chars/4)" in out  # it says how tokens were counted


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_real_compile_stays_within_the_printed_bound(name, tmp_path, places, scripted_llm, capsys):
    install_world(scripted_llm, WORLDS[name])
    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path)
    code, out, err = run_estimate(capsys, skill, bundle, config, "--json")
    assert code == 0, err
    found = json.loads(out)
    assert scripted_llm.requests == [] and not places[1].exists()

    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(config), "--quiet"]) == 0
    capsys.readouterr()
    [folder] = places[1].iterdir()
    calls = read_calls(folder / "llm" / "calls.jsonl")
    by_role = Counter(call.role for call in calls)
    bound = found["bound"]["calls_by_kind"]
    assert 0 < len(calls) <= found["bound"]["calls"]
    assert by_role["judge"] <= bound["column"] + bound["compare"]
    assert by_role["editor"] <= bound["edit"]
    assert by_role["agent"] <= bound["agent"] == 0  # the replay runner calls no model
    rollouts = [p for p in (folder / "traces").rglob("*.json") if p.name != "batch.json"]
    assert 0 < len(rollouts) <= sum(found["bound"]["rollouts"].values())
    matrices = Counter(p.parent.name.split("-m")[0] for p in (folder / "matrices").glob("*/matrix.json"))
    assert all(n <= found["bound"]["matrices"][level] for level, n in matrices.items())
    if name == "descends":
        assert matrices["paragraph"] >= 1  # the world really descended to the paragraph level


def test_a_priced_model_costs_dollars_and_an_unpriced_one_is_unknown(tmp_path, places, scripted_llm, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")  # compile's own check wants a key; nothing is sent
    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path, judge_model="openai/gpt-4o-mini")
    code, out, err = run_estimate(capsys, skill, bundle, config)
    assert code == 0, err
    judge = next(line for line in out.splitlines() if line.strip().startswith("judge"))
    editor = next(line for line in out.splitlines() if line.strip().startswith("editor"))
    assert "openai/gpt-4o-mini: $" in judge and float(judge.split(", $")[1].split()[0]) > 0
    assert "cost unknown" in editor and "scripted/editor: not in litellm's price map" in editor
    assert "at most unknown" in out  # the total is unknown as soon as one role's price is

    code, out, err = run_estimate(capsys, skill, bundle, config, "--json")
    found = json.loads(out)
    assert found["cost"]["usd_by_kind"]["column"] > 0 and found["cost"]["usd_by_kind"]["edit"] is None
    assert found["cost"]["usd"] is None and found["prices"]["editor"] is None
    assert scripted_llm.requests == [] and not places[0].exists() and not places[1].exists()


def test_the_local_model_is_free(tmp_path, places, capsys, monkeypatch):
    from deep_pipeline.errors import StepError
    from deep_pipeline.llm.local_model import gguf_path

    try:
        gguf_path()
    except StepError:
        pytest.skip("the local model's weights are not installed (make setup installs them)")

    def no_local_model(*args, **kwargs):
        raise AssertionError("the estimate started the local model")

    monkeypatch.setattr("deep_pipeline.llm.local_model.ensure_local_server", no_local_model)
    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path, judge_model="local", editor_model="local", agent_model="local", runner="chat")
    code, out, err = run_estimate(capsys, skill, bundle, config)
    assert code == 0, err
    assert "at most $0 (free" in out
    for role in ("judge", "editor", "agent"):
        line = next(line for line in out.splitlines() if line.strip().startswith(role))
        assert ", free  [local: the embedded model, free]" in line, line
    code, out, _ = run_estimate(capsys, skill, bundle, config, "--json")
    found = json.loads(out)
    assert found["cost"]["usd"] == 0.0 and all(price == {"input_per_token": 0.0, "output_per_token": 0.0}
                                               for price in found["prices"].values())
    assert found["bound"]["calls_by_kind"]["agent"] == sum(found["bound"]["rollouts"].values())  # one per chat rollout
    assert not places[0].exists() and not places[1].exists()


def test_a_missing_task_file_is_one_line_and_writes_nothing(tmp_path, places, scripted_llm, capsys):
    skill, _ = make_inputs(tmp_path)
    missing = tmp_path / "no-such-task.json"
    config = write_config(tmp_path)
    before = files_under(tmp_path)
    code, out, err = run_estimate(capsys, skill, missing, config)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0], err
    assert files_under(tmp_path) == before
    assert not places[0].exists() and not places[1].exists()


def test_a_reader_that_stops_early_is_not_a_failed_step(tmp_path, places):
    # `deep-pipeline compile ... --estimate | head -3`: the reader is gone before the rest is
    # printed. That is no step failure and nothing to resume: no message, exit 141 as a shell's.
    import os
    import subprocess
    import sys

    skill, bundle = make_inputs(tmp_path)
    config = write_config(tmp_path, judge_model="local", editor_model="local", agent_model="local")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first line
    try:
        done = subprocess.run([sys.executable, "-m", "deep_pipeline", "compile", str(skill), "--task", str(bundle),
                               "--config", str(config), "--estimate"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=600)
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == 141
    home, store = places
    assert not home.exists() and not store.exists()
