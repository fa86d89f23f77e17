"""The input commands end to end: inspect, validate, import-traces, schema.

Every malformed input must end the same way: exit 2, exactly one line on stderr that
names the file, no traceback, and nothing written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deep_pipeline.cli import main
from deep_pipeline.inputs.bundle import bundle_json_schema
from tests.cli_cases import (
    SKILL,
    TRACE,
    TRACES,
    Case,
    _bundle_case,
    _duplicate_ids_file,
    _import_case,
    _promptless_trace,
    _skill_case,
    _skill_md_folder,
    _symlink_out,
    _truncated_jsonl,
    _unknown_format,
    _wrong_types_jsonl,
    assert_refused,
    bundle,
    files,
)

MALFORMED: dict[str, Case] = {
    "missing SKILL.md": _skill_case(None),
    "SKILL.md a folder": _skill_md_folder,
    "empty SKILL.md": _skill_case(""),
    "not UTF-8": _skill_case(b"---\nname: demo-skill\ndescription: caf\xe9\n---\n"),
    "NUL bytes": _skill_case(b"---\nname: demo-skill\ndescription: x\x00\n---\n", "inspect"),
    "no front matter": _skill_case("# Demo\n", "inspect"),
    "unclosed front matter": _skill_case("---\nname: demo-skill\ndescription: x\n# Demo\n"),
    "invalid YAML": _skill_case("---\nname: demo-skill\ndescription: [oops\n---\n"),
    "front matter not a mapping": _skill_case("---\njust a string\n---\n"),
    "no name": _skill_case("---\ndescription: x\n---\n"),
    "no description": _skill_case("---\nname: demo-skill\n---\n"),
    "name not a string": _skill_case("---\nname: [a, b]\ndescription: x\n---\n"),
    "name with capitals": _skill_case("---\nname: Demo-Skill\ndescription: x\n---\n"),
    "name with double hyphen": _skill_case("---\nname: demo--skill\ndescription: x\n---\n"),
    "name with trailing hyphen": _skill_case("---\nname: demo-\ndescription: x\n---\n", "inspect"),
    "name too long": _skill_case(f"---\nname: {'d' * 65}\ndescription: x\n---\n"),
    "symlink leaving the package": _symlink_out,
    "bundle without prompt": _bundle_case({"task_name": "t", "traces": []}),
    "bundle invalid JSON": _bundle_case('{"task_name": "t",\n "prompt": "p",,\n}'),
    "bundle duplicate trace ids": _bundle_case({"task_name": "t", "prompt": "p", "traces": [TRACE, TRACE]}),
    "bundle wrong field types": _bundle_case({"task_name": "t", "prompt": ["p"]}),
    "bundle task_dir missing": _bundle_case({"task_name": "t", "prompt": "p", "task_dir": "no-such-dir"}),
    "truncated JSONL": _import_case(_truncated_jsonl, "--task-name", "t"),
    "unknown trace format": _import_case(_unknown_format, "--task-name", "t"),
    "traces file with duplicate ids": _import_case(_duplicate_ids_file, "--task-name", "t", "--prompt", "p"),
    "trace wrong field types": _import_case(_wrong_types_jsonl, "--task-name", "t", "--prompt", "p"),
    "import without a prompt": _import_case(_promptless_trace, "--task-name", "t", names_output=True),
    "import without a task name": _import_case(_promptless_trace, "--prompt", "p", names_output=True),
}


@pytest.mark.parametrize("case", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_input_exits_2_with_one_line_naming_the_file(tmp_path, capsys, case):
    assert_refused(tmp_path, capsys, case)


def test_import_without_a_task_name_says_which_option_to_give(tmp_path, capsys):
    argv, _ = MALFORMED["import without a task name"](tmp_path)
    assert main(argv) == 2
    assert "give --task-name" in capsys.readouterr().err


def _cli() -> str:
    return str(Path(sys.executable).parent / "deep-pipeline")


@pytest.mark.parametrize("name", ["not UTF-8", "truncated JSONL"])
def test_malformed_input_through_a_real_process(tmp_path, name):
    argv, named = MALFORMED[name](tmp_path)
    before = files(tmp_path)
    run = subprocess.run([_cli(), *argv], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and str(named) in run.stderr and "Traceback" not in run.stderr
    assert files(tmp_path) == before


# ---------------------------------------------------------------- inspect


def inspect_json(capsys, *argv: str) -> list[dict]:
    assert main(["inspect", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_json_sections_tile_the_body_in_order(capsys):
    from deep_pipeline.core.lines import front_matter_end

    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    units = inspect_json(capsys, str(SKILL))
    assert {"unit_id", "level", "heading", "heading_depth", "start", "end", "text"} <= set(units[0])
    assert [u["level"] for u in units] == ["section"] * len(units)
    assert [u["heading"] for u in units] == ["PDF report", "When to use", "Steps", "Pitfalls"]
    assert all(text[u["start"]:u["end"]] == u["text"] for u in units)
    assert "".join(u["text"] for u in units) == text[front_matter_end(text):]
    assert [u["start"] for u in units] == sorted(u["start"] for u in units)


def test_inspect_json_paragraphs_of_every_section_in_order(capsys):
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    sections = inspect_json(capsys, str(SKILL))
    paragraphs = inspect_json(capsys, str(SKILL), "--level", "paragraph")
    assert {p["level"] for p in paragraphs} == {"paragraph"}
    assert [p["start"] for p in paragraphs] == sorted(p["start"] for p in paragraphs)
    assert all(text[p["start"]:p["end"]] == p["text"] for p in paragraphs)
    by_section = {s["unit_id"]: [p for p in paragraphs if p["section_id"] == s["unit_id"]] for s in sections}
    assert all(by_section.values())  # every section of this skill has paragraphs
    for section in sections:
        inside = by_section[section["unit_id"]]
        assert section["start"] <= inside[0]["start"] and inside[-1]["end"] == section["end"]
    steps = next(s for s in sections if s["heading"] == "Steps")["unit_id"]
    only = inspect_json(capsys, str(SKILL), "--level", "paragraph", "--section", steps)
    assert only == by_section[steps]


def test_inspect_table_shows_id_depth_chars_and_heading(capsys):
    assert main(["inspect", str(SKILL)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "pdf-report: 4 section units"
    assert out[1].split() == ["id", "depth", "chars", "heading", "(or", "first", "line)"]
    rows = [line.split() for line in out[2:]]
    assert [r[-1] for r in rows] == ["report", "use", "Steps", "Pitfalls"]
    assert all(r[1] in ("1", "2") and r[2].isdigit() for r in rows)


def test_inspect_unknown_section_lists_the_known_ones(capsys):
    assert main(["inspect", str(SKILL), "--level", "paragraph", "--section", "s99"]) == 2
    assert "no section 's99'; sections are: s00" in capsys.readouterr().err


# ---------------------------------------------------------------- validate and schema


def test_validate_prints_name_hash_warnings_and_ok(tmp_path, capsys):
    folder = tmp_path / "other-name"
    shutil.copytree(SKILL, folder)
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "skill: pdf-report"
    assert out[1].startswith("package sha256: ") and len(out[1].split()[-1]) == 64
    assert "warning: name 'pdf-report' differs from the folder name 'other-name'" in out
    assert out[-1] == "ok"


def test_validate_with_a_bundle(tmp_path, capsys):
    (tmp_path / "task").mkdir()
    path = bundle(tmp_path, {"task_name": "csv-report", "prompt": "p", "task_dir": "task", "traces": [TRACE]})
    assert main(["validate", str(SKILL), "--bundle", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bundle: csv-report (1 trace, 0 made on this SKILL.md)" in out and out.endswith("ok\n")


def test_schema_prints_the_bundle_schema(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == bundle_json_schema()


# ---------------------------------------------------------------- import-traces


def test_import_rollouts_takes_task_name_from_results_and_prompt_from_the_trace(tmp_path, capsys):
    out = tmp_path / "bundle.json"
    sources = [TRACES / "benchflow" / "csv-report__a1b2c3d4", TRACES / "harbor" / "csv-report__Hk3xQ2p"]
    assert main(["import-traces", *map(str, sources), "-o", str(out)]) == 0
    assert "2 traces imported" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["task_name"] == "csv-report"
    assert data["prompt"] == "Make a PDF report from data.csv"
    assert data["agent"] is None  # the two rollouts ran different agents
    assert [t["prompt"] for t in data["traces"]] == [data["prompt"]] * 2  # Harbor's stream had none of its own
    assert main(["validate", str(SKILL), "--bundle", str(out)]) == 0


def test_import_with_options_and_task_dir_relative_to_the_bundle(tmp_path, capsys):
    (tmp_path / "task").mkdir()
    out = tmp_path / "bundles" / "b.json"
    argv = ["import-traces", str(TRACES / "atif" / "csv-report.trajectory.json"), "-o", str(out),
            "--task-name", "report", "--prompt", "Write it.", "--task-dir", str(tmp_path / "task")]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert (data["task_name"], data["task_dir"], data["agent"], data["agent_model"]) == (
        "report", "../task", "openhands", "gpt-5")
    assert data["traces"][0]["prompt"] == "Make a PDF report from data.csv"  # the trace's own is kept


def test_import_into_an_existing_bundle_and_refuse_clobbering(tmp_path, capsys):
    out = tmp_path / "b.json"
    base = ["-o", str(out), "--task-name", "t", "--prompt", "p"]
    assert main(["import-traces", str(TRACES / "native" / "trace.json"), *base]) == 0
    assert main(["import-traces", str(TRACES / "native" / "traces.jsonl"), *base]) == 2
    assert "already exists; use --into" in capsys.readouterr().err
    assert main(["import-traces", str(TRACES / "native" / "traces.jsonl"), "-o", str(out), "--into", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [t["trace_id"] for t in data["traces"]] == ["native-1", "jsonl-1", "jsonl-2"]
    assert main(["import-traces", str(TRACES / "native" / "trace.json"), "-o", str(out), "--into", str(out)]) == 2
    assert "trace id 'native-1' is already in" in capsys.readouterr().err
    assert [t["trace_id"] for t in json.loads(out.read_text())["traces"]] == ["native-1", "jsonl-1", "jsonl-2"]


def test_force_replaces_an_existing_bundle(tmp_path, capsys):
    out = tmp_path / "b.json"
    out.write_text("{}")
    argv = ["import-traces", str(TRACES / "native" / "trace.json"), "-o", str(out), "--task-name", "t"]
    assert main(argv) == 2 and out.read_text() == "{}"
    assert main([*argv, "--force"]) == 0
    assert json.loads(out.read_text())["prompt"] == "Make a PDF report from data.csv"
