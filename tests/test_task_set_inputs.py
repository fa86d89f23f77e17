"""Task sets on the command line (SPEC §11): `compile --task A --task B --holdout C`,
`--tasks set.yaml`, and `validate` with the same flags. Every refusal is one line naming
the file and the field, exit 2, nothing written. One `--task` is today's compile, key and
all; a valid larger set compiles (tests/test_task_set_compile.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.tasks import single_task
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.compiles import compile_identity, register_compile, write_task_bundles
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.inputs.tasks import load_task_set, task_inputs
from tests.compile_world import CONFIG, make_inputs

# Computed on main before task sets reached compile_identity (commit 2af586c).
KNOWN_IDENTITY = "8707f51996c3b462a9af90fe4213837523834136e83ff01a81f722ec834fc97c"
KNOWN_KEY = "demo-skill-021c49"


@pytest.fixture
def places(tmp_path, monkeypatch):
    """DAGSTER_HOME and the compile store at paths that do not exist yet."""
    home, store = tmp_path / "home", tmp_path / "store"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(store))
    return home, store


@pytest.fixture
def inputs(tmp_path):
    """The skill, its bundle (task status-update), a second task and a third, and a config."""
    skill, bundle = make_inputs(tmp_path)
    config = tmp_path / "compile.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    data = json.loads(bundle.read_text())
    other = write_bundle(tmp_path / "tasks" / "release.json", data, "release-notes", "Write the release notes.")
    third = write_bundle(tmp_path / "tasks" / "retro.json", data, "retro", "Write the retro.")
    return skill, bundle, other, third, config


def write_bundle(path: Path, base: dict, name: str, prompt: str, keep_traces: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    traces = base["traces"] if keep_traces else [
        {**t, "prompt": prompt, "final_output": f"{t['final_output']} ({name})"} for t in base["traces"]]
    path.write_text(json.dumps({**base, "task_name": name, "prompt": prompt, "traces": traces}), encoding="utf-8")
    return path


def refused(capsys, argv: list[str], places) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert not places[0].exists() and not places[1].exists()  # no DAGSTER_HOME, no store folder
    return captured.err


def compile_argv(skill, config, *flags) -> list[str]:
    return ["compile", str(skill), "--config", str(config), *map(str, flags)]


# ------------------------------------------------------------------ refusals


def test_duplicate_task_names_are_refused_naming_both_files(tmp_path, inputs, places, scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    twin = write_bundle(tmp_path / "twin.json", json.loads(bundle.read_text()), "status-update", "Another prompt.")
    err = refused(capsys, compile_argv(skill, config, "--task", bundle, "--task", twin), places)
    assert f"{twin} (training task 'status-update'): task_name: duplicate task name (also {bundle})" in err


def test_a_bundle_in_both_splits_is_refused(inputs, places, scripted_llm, capsys):
    skill, bundle, other, _, config = inputs
    err = refused(capsys, compile_argv(skill, config, "--task", bundle, "--task", other, "--holdout", other), places)
    assert f"{other} (held_out task 'release-notes'): bundle_hash:" in err and "is in both splits" in err


def test_a_held_out_bundle_whose_traces_are_in_training_is_refused(tmp_path, inputs, places, scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    leak = write_bundle(tmp_path / "leak.json", json.loads(bundle.read_text()), "leaky", "Leaky.", keep_traces=True)
    err = refused(capsys, compile_argv(skill, config, "--task", bundle, "--holdout", leak), places)
    assert f"{leak} (held_out task 'leaky'): traces[0]: trace " in err
    assert f"also in {bundle} (training task 'status-update'): held-out traces would leak into training" in err


def test_an_empty_training_split_is_refused(inputs, places, scripted_llm, capsys):
    skill, _, other, _, config = inputs
    err = refused(capsys, compile_argv(skill, config, "--holdout", other), places)
    assert err.startswith("error: --holdout: no training task") or "--holdout: no training task" in err


def test_no_task_at_all_is_refused(inputs, places, scripted_llm, capsys):
    skill, _, _, _, config = inputs
    assert "--task: no task given" in refused(capsys, compile_argv(skill, config), places)


def test_a_bad_bundle_in_a_set_is_named_as_load_bundle_names_it(tmp_path, inputs, places, scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task_name": "x", "prompt": 3}))
    assert f"{bad}: prompt:" in refused(capsys, compile_argv(skill, config, "--task", bundle, "--task", bad), places)


def test_a_bad_setting_in_a_valid_set_is_refused_as_itself(inputs, places, scripted_llm, capsys):
    skill, bundle, other, _, _ = inputs
    err = refused(capsys, ["compile", str(skill), "--task", str(bundle), "--task", str(other),
                           "--judge-model", "nosuchprovider/x"], places)
    assert "judge_model" in err and scripted_llm.requests == []


# ------------------------------------------------------------------ --tasks set.yaml


def write_set(tmp_path: Path, items, name: str = "set.yaml") -> Path:
    path = tmp_path / name
    path.write_text(items if isinstance(items, str) else yaml.safe_dump(items))
    return path


def test_a_task_set_file_is_read_relative_to_itself(tmp_path, inputs):
    _, bundle, other, third, _ = inputs
    path = write_set(tmp_path / "tasks", [{"bundle": "../bundle.json", "split": "train"},
                                          {"bundle": "release.json", "split": "train"},
                                          {"bundle": "retro.json", "split": "holdout"}])
    loaded = load_task_set(task_inputs(None, None, path))
    assert [(b.path, i.split) for i, b in zip(loaded.inputs, loaded.bundles)] == [
        (bundle.resolve(), "training"), (other.resolve(), "training"), (third.resolve(), "held_out")]
    assert loaded.task_set.training_names == ["status-update", "release-notes"]
    assert [e.task for e in loaded.task_set.held_out] == ["retro"] and not loaded.is_one_task


@pytest.mark.parametrize("items, expected", [
    ([{"bundle": "bundle.json", "split": "test"}], "set.yaml: [0].split: expected one of train|holdout"),
    ([{"bundle": "bundle.json", "split": "train", "weight": 2}], "set.yaml: [0].weight:"),
    ([{"split": "train"}], "set.yaml: [0].bundle:"),
    ([{"bundle": 3, "split": "train"}], "set.yaml: [0].bundle:"),
    ({"bundle": "bundle.json"}, "set.yaml: (top level): expected a list of {bundle: <path>, split: train|holdout}"),
    ([], "set.yaml: (top level): no tasks"),
    ("- {bundle: [\n", "set.yaml: line"),
    ([{"bundle": "missing.json", "split": "train"}], "missing.json"),
    ([{"bundle": "bundle.json", "split": "holdout"}], "set.yaml: no training task"),
])
def test_task_set_file_errors_name_the_file_and_field(items, expected, tmp_path, inputs, places, scripted_llm, capsys):
    skill, _, _, _, config = inputs
    path = write_set(tmp_path, items)
    err = refused(capsys, compile_argv(skill, config, "--tasks", path), places)
    assert expected.replace("set.yaml", str(path)) in err or expected in err, err


def test_tasks_and_task_flags_are_not_mixed(tmp_path, inputs, places, scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    path = write_set(tmp_path, [{"bundle": "bundle.json", "split": "train"}])
    assert "not both" in refused(capsys, compile_argv(skill, config, "--tasks", path, "--task", bundle), places)


def test_a_task_set_file_of_held_out_leaks_names_the_file(tmp_path, inputs, places, scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    write_bundle(tmp_path / "leak.json", json.loads(bundle.read_text()), "leaky", "Leaky.", keep_traces=True)
    path = write_set(tmp_path, [{"bundle": "bundle.json", "split": "train"}, {"bundle": "leak.json", "split": "holdout"}])
    err = refused(capsys, compile_argv(skill, config, "--tasks", path), places)
    assert f"{path}: [1].bundle leak.json (held_out task 'leaky'): traces[0]:" in err


# ------------------------------------------------------------------ identity and records


def test_one_task_keeps_the_key_it_had_on_main(tmp_path, inputs, scripted_llm):
    skill, bundle, _, _, _ = inputs
    assert compile_identity("a" * 64, single_task("t", "b" * 64), CompileConfig.model_validate(CONFIG)) == KNOWN_IDENTITY
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    assert record.key == KNOWN_KEY
    assert "tasks" not in json.loads(CompileDir(tmp_path / "store", record.key).record_path.read_text())


def test_a_task_set_file_of_one_training_task_is_today_s_compile(tmp_path, inputs, places, scripted_llm, capsys):
    """`--tasks` naming one training task registers exactly what `--task` does."""
    skill, bundle, _, _, config = inputs
    path = write_set(tmp_path, [{"bundle": "bundle.json", "split": "train"}])
    loaded = load_task_set(task_inputs(None, None, path))
    assert loaded.is_one_task
    settings = CompileConfig.model_validate(CONFIG)
    assert compile_identity("p" * 64, loaded.task_set, settings) == compile_identity(
        "p" * 64, single_task("status-update", loaded.bundles[0].identity_hash), settings)


def test_a_larger_set_has_its_own_key(inputs):
    _, bundle, other, third, _ = inputs
    settings = CompileConfig.model_validate(CONFIG)
    one = load_task_set(task_inputs([bundle], None, None)).task_set
    two = load_task_set(task_inputs([bundle, other], None, None)).task_set
    held = load_task_set(task_inputs([bundle], [third], None)).task_set
    keys = {compile_identity("p" * 64, s, settings) for s in (one, two, held)}
    assert len(keys) == 3
    # each split is a sorted list: the order the bundles are named in is not the identity
    swapped = load_task_set(task_inputs([other, bundle], None, None)).task_set
    assert compile_identity("p" * 64, swapped, settings) == compile_identity("p" * 64, two, settings)


def test_compile_json_without_a_task_set_is_one_training_task(tmp_path, inputs, scripted_llm):
    skill, bundle, _, _, _ = inputs
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    old = CompileRecord.model_validate(json.loads(CompileDir(tmp_path / "store", record.key).record_path.read_text()))
    [task] = old.task_entries
    assert (task.task, task.split, task.bundle_hash, task.stored) == (
        "status-update", "training", record.bundle_hash, "input/bundle.json")


def test_a_task_set_is_recorded_and_its_bundles_copied_held_out_too(tmp_path, inputs, scripted_llm):
    skill, bundle, other, third, _ = inputs
    loaded = load_task_set(task_inputs([bundle, other], [third], None))
    cdir = CompileDir(tmp_path / "store", "demo-skill-abcdef")
    recorded = write_task_bundles(cdir, loaded)
    assert [(t.task, t.split) for t in recorded] == [
        ("status-update", "training"), ("release-notes", "training"), ("retro", "held_out")]
    for entry, path in zip(recorded, (bundle, other, third)):
        assert (cdir.path / entry.stored).read_bytes() == path.read_bytes()
        assert entry.bundle_path == str(path.resolve())
    base = register_compile(tmp_path / "other-store", skill, bundle, effective_config(load_deployment(), CONFIG))
    record = base.model_copy(update={"tasks": recorded})
    again = CompileRecord.model_validate_json(record.model_dump_json())
    assert again.task_entries == recorded and json.loads(record.model_dump_json())["tasks"][2]["split"] == "held_out"


# ------------------------------------------------------------------ --estimate and validate


def test_estimate_of_two_training_tasks_bounds_more_than_one(inputs, places, scripted_llm, capsys):
    skill, bundle, other, third, config = inputs
    found = {}
    for name, flags in (("one", ("--task", bundle)), ("two", ("--task", bundle, "--task", other, "--holdout", third))):
        assert main(compile_argv(skill, config, *flags, "--estimate", "--json")) == 0
        found[name] = json.loads(capsys.readouterr().out)
    assert (found["one"]["training_tasks"], found["two"]["training_tasks"]) == (1, 2)
    one, two = found["one"]["bound"], found["two"]["bound"]
    assert sum(two["rollouts"].values()) > sum(one["rollouts"].values())
    assert sum(two["calls_by_kind"].values()) > sum(one["calls_by_kind"].values())
    assert main(compile_argv(skill, config, "--task", bundle, "--task", other, "--estimate")) == 0
    assert "on 2 training tasks" in capsys.readouterr().out
    assert not places[0].exists() and not places[1].exists() and scripted_llm.requests == []


def test_validate_reports_the_task_set(inputs, capsys):
    skill, bundle, other, third, _ = inputs
    assert main(["validate", str(skill), "--task", str(bundle), "--task", str(other), "--holdout", str(third)]) == 0
    out = capsys.readouterr().out
    assert "task: retro (held_out, 2 traces)" in out
    assert "task set: 2 training, 1 held out: valid" in out and out.endswith("ok\n")
    assert main(["validate", str(skill), "--task", str(bundle), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["task_set"]
    assert (found["valid"], found["training"], found["held_out"]) == (True, 1, 0)


def test_validate_refuses_a_set_as_compile_does(tmp_path, inputs, capsys):
    skill, bundle, _, _, _ = inputs
    leak = write_bundle(tmp_path / "leak.json", json.loads(bundle.read_text()), "leaky", "Leaky.", keep_traces=True)
    assert main(["validate", str(skill), "--task", str(bundle), "--holdout", str(leak)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "held-out traces would leak into training" in captured.err


def test_estimate_prices_each_call_kind_at_its_largest_prompt_over_the_training_tasks(tmp_path, inputs, places,
                                                                                      scripted_llm, capsys):
    skill, bundle, _, _, config = inputs
    long = write_bundle(tmp_path / "tasks" / "long.json", json.loads(bundle.read_text()), "long-report",
                        "Write the long report. " + "Cover every project in detail. " * 200)
    tokens = {}
    for name, flags in (("short", ("--task", bundle)), ("long", ("--task", long)),
                        ("both", ("--task", bundle, "--task", long))):
        assert main(compile_argv(skill, config, *flags, "--estimate", "--json")) == 0
        tokens[name] = json.loads(capsys.readouterr().out)["prompt_tokens"]
    assert tokens["both"] == {kind: max(tokens["short"][kind], tokens["long"][kind]) for kind in tokens["both"]}
    assert any(tokens["both"][kind] > tokens["short"][kind] for kind in tokens["both"])
