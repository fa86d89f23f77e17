"""load_bundle and the bundle JSON Schema (SPEC §2)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from deep_pipeline.errors import InputError
from deep_pipeline.inputs.bundle import bundle_json_schema, committed_schema_text, load_bundle
from deep_pipeline.store import sha256_bytes

NATIVE_TRACE = Path(__file__).parent / "fixtures" / "traces" / "native" / "trace.json"


def example_bundle() -> dict:
    trace, other = (json.loads(NATIVE_TRACE.read_text()) for _ in range(2))
    return {
        "task_name": "csv-report",
        "prompt": "Make a PDF report from data.csv",
        "task_dir": "task",
        "agent": "claude-code",
        "agent_model": "claude-sonnet-4-5",
        "traces": [trace, {**other, "trace_id": "native-2"}],
    }


def write(tmp_path: Path, data, name: str = "bundle.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def refusal(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_bundle(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_valid_bundle_loads_with_resolved_task_dir_and_file_hash(tmp_path):
    (tmp_path / "task").mkdir()
    path = write(tmp_path, example_bundle())
    loaded = load_bundle(path)
    assert loaded.bundle.task_name == "csv-report"
    assert [t.trace_id for t in loaded.bundle.traces] == ["native-1", "native-2"]
    assert loaded.task_dir == (tmp_path / "task").resolve()
    assert loaded.bundle_hash == sha256_bytes(path.read_bytes())


def test_task_dir_is_relative_to_the_bundle_not_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "bundles" / "task").mkdir(parents=True)
    write(tmp_path / "bundles", example_bundle())
    monkeypatch.chdir(tmp_path)
    assert load_bundle(Path("bundles/bundle.json")).task_dir == (tmp_path / "bundles" / "task").resolve()


def test_prompt_only_bundle_without_traces(tmp_path):
    loaded = load_bundle(write(tmp_path, {"task_name": "t", "prompt": "Say hi."}))
    assert loaded.task_dir is None and loaded.bundle.traces == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda b: b.pop("prompt"), "prompt: required field is missing"),
        (lambda b: b.update(prompt="  "), "prompt: must not be blank"),
        (lambda b: b.update(prompt=""), "prompt: "),
        (lambda b: b.update(task_name=7), "task_name: expected a string, got an integer"),
        (lambda b: b.update(colour="red"), "colour: unknown field"),
        (lambda b: b["traces"][1]["steps"][0].update(source="bot"),
         "traces[1].steps[0].source: expected one of user|agent|tool|system"),
        (lambda b: b["traces"][0].update(prompt_tokens="12"), "traces[0].prompt_tokens: expected an integer, got a string"),
        (lambda b: b["traces"][0]["steps"][2].update(step=9), "traces[0]: steps must be numbered 1..n"),
        (lambda b: b["traces"][0].update(error_category="crash"),
         "traces[0].error_category: expected one of timeout|idle_timeout|api_error|agent_error|sandbox_setup"),
        (lambda b: b.update(traces={}), "traces: expected a list, got an object"),
    ],
)
def test_malformed_bundle_names_the_json_path(tmp_path, change, expected):
    (tmp_path / "task").mkdir()
    bundle = example_bundle()
    change(bundle)
    assert expected in refusal(write(tmp_path, bundle))


def test_invalid_json_gives_line_and_column(tmp_path):
    path = write(tmp_path, '{\n  "task_name": "t",\n  "prompt": "p"\n  "traces": []\n}\n')
    assert "line 4, column 3: invalid JSON" in refusal(path)


def test_not_utf8_and_empty_and_not_an_object(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"task_name": "t\xff"}')
    assert "not UTF-8" in refusal(bad) and "byte offset 16" in refusal(bad)
    assert "empty file" in refusal(write(tmp_path, "", "empty.json"))
    assert "top level is not an object" in refusal(write(tmp_path, "[]", "list.json"))


def test_duplicate_trace_ids_name_both_positions(tmp_path):
    (tmp_path / "task").mkdir()
    bundle = example_bundle()
    bundle["traces"].append(json.loads(json.dumps(bundle["traces"][0])))
    message = refusal(write(tmp_path, bundle))
    assert "traces[2].trace_id: duplicate trace id 'native-1' (also traces[0])" in message


def test_task_dir_that_does_not_exist_or_is_a_file(tmp_path):
    assert "task_dir: 'task' does not exist" in refusal(write(tmp_path, example_bundle()))
    (tmp_path / "task").write_text("a file")
    assert "task_dir: 'task' is not a folder" in refusal(write(tmp_path, example_bundle()))


def test_missing_bundle_file_and_folder_given(tmp_path):
    assert "no such file" in refusal(tmp_path / "nope.json")
    assert "is a folder" in refusal(tmp_path)


def test_committed_schema_file_equals_the_model_schema():
    assert json.loads(committed_schema_text()) == bundle_json_schema()


def test_schema_accepts_a_valid_bundle_and_rejects_what_the_loader_rejects():
    validator = jsonschema.Draft202012Validator(json.loads(committed_schema_text()))
    bundle = example_bundle()
    assert list(validator.iter_errors(bundle)) == []
    bundle["traces"][0]["steps"][0]["source"] = "bot"
    assert [e.json_path for e in validator.iter_errors(bundle)] == ["$.traces[0].steps[0].source"]
    assert not validator.is_valid({"task_name": "t"})  # no prompt
