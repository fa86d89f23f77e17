"""Format detection and the importer's refusals: one line naming the path and the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deep_pipeline.errors import InputError
from deep_pipeline.traces import FORMATS, import_traces

TRACES = Path(__file__).parent / "fixtures" / "traces"
STEP = {"step": 1, "source": "user", "text": "Do it."}


def refusal(*paths: Path) -> str:
    with pytest.raises(InputError) as info:
        import_traces(list(paths))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_json_file_lists_the_formats_looked_for(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text('{"hello": "world"}')
    message = refusal(path)
    assert message.startswith(f"{path}: unknown trace format")
    assert all(name in message for name in FORMATS)


def test_unknown_text_file_and_folder(tmp_path):
    text = tmp_path / "log.txt"
    text.write_text("just some log\nlines\n")
    assert "unknown trace format (neither JSON nor JSON lines)" in refusal(text)
    (tmp_path / "empty-folder").mkdir()
    assert "holds no rollout folders" in refusal(tmp_path / "empty-folder")
    lines = tmp_path / "other.jsonl"
    lines.write_text('{"kind": "metric", "value": 1}\n')
    assert "JSON lines of an unknown kind" in refusal(lines)


def test_truncated_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "traces.jsonl"
    good = json.dumps({"trace_id": "a", "steps": [STEP]})
    path.write_text(good + "\n" + good.replace('"a"', '"b"') + "\n" + good[:25])
    assert f"{path}:3: invalid JSON" in refusal(path)


def test_truncated_jsonl_named_json_is_still_read_as_lines(tmp_path):
    path = tmp_path / "traces.json"
    good = json.dumps({"trace_id": "a", "steps": [STEP]})
    path.write_text(good + "\n" + good[:30])
    assert f"{path}:2: invalid JSON" in refusal(path)


def test_wrong_field_types_in_jsonl_name_line_and_path(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps({"trace_id": "a", "steps": [{**STEP, "tool_calls": "ls"}]}) + "\n")
    assert f"{path}:1: steps[0].tool_calls: expected a list, got a string" in refusal(path)


def test_trace_list_names_the_bad_item(tmp_path):
    path = tmp_path / "traces.json"
    path.write_text(json.dumps([{"trace_id": "a"}, {"steps": []}]))
    assert f"{path}: [1].trace_id: required field is missing" in refusal(path)


def test_invalid_pretty_json_gives_line_and_column(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text('{\n  "trace_id": "a",\n  "steps": [\n}\n')
    assert f"{path}: line 4, column 1: invalid JSON" in refusal(path)


def test_truncated_acp_trajectory_names_file_and_line(tmp_path):
    rollout = tmp_path / "r1"
    shutil.copytree(TRACES / "benchflow" / "csv-report__a1b2c3d4", rollout)
    trajectory = rollout / "trajectory" / "acp_trajectory.jsonl"
    trajectory.write_text(trajectory.read_text()[:-40])
    assert f"{trajectory}:13: invalid JSON (truncated file?)" in refusal(rollout)


def test_duplicate_trace_ids_across_paths_name_both_sources(tmp_path):
    path = TRACES / "native" / "trace.json"
    copy = tmp_path / "again.json"
    shutil.copy(path, copy)
    message = refusal(path, copy)
    assert message == f"{copy}: duplicate trace id 'native-1' (also from {path})"


def test_missing_path_and_empty_file(tmp_path):
    assert refusal(tmp_path / "nope.json") == f"{tmp_path / 'nope.json'}: no such file or folder"
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert refusal(empty) == f"{empty}: empty file"


def test_broken_result_json_in_a_rollout(tmp_path):
    rollout = tmp_path / "r1"
    shutil.copytree(TRACES / "harbor" / "csv-report__Hk3xQ2p", rollout)
    (rollout / "result.json").write_text("[1, 2]")
    assert f"{rollout / 'result.json'}: expected a JSON object" in refusal(rollout)
