"""`deep-pipeline import-traces` on a Harbor trial whose Claude Code stream injects the skill (SPEC §2).

Claude Code hands a skill's text to the model as a synthetic user message; it is the
Skill tool's output, so it must never become the bundle's task prompt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from deep_pipeline.cli import main

TRIAL = Path(__file__).parent / "fixtures" / "traces" / "harbor-skill" / "web-digest__Sk1ll42"
REAL_PROMPT = "Write digest.md summarising https://example.org/a and https://example.org/b."


def without_real_prompt(tmp_path: Path) -> Path:
    """The trial as Harbor usually writes it: the stream does not echo the task prompt."""
    trial = tmp_path / TRIAL.name
    shutil.copytree(TRIAL, trial)
    log = trial / "agent" / "claude-code.txt"
    kept = [line for line in log.read_text().splitlines()
            if not (json.loads(line).get("type") == "user" and isinstance(json.loads(line)["message"]["content"], str))]
    log.write_text("\n".join(kept) + "\n")
    return trial


def test_the_bundle_prompt_is_the_real_prompt_not_the_injected_skill(tmp_path, capsys):
    out = tmp_path / "bundle.json"
    assert main(["import-traces", str(TRIAL), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["prompt"] == REAL_PROMPT and data["traces"][0]["prompt"] == REAL_PROMPT
    steps = data["traces"][0]["steps"]
    assert [s["text"] for s in steps if s["source"] == "user"] == [REAL_PROMPT]
    failed = [(s["tool_name"], s["tool_call_id"]) for s in steps if s["is_error"]]
    assert failed == [("WebFetch", "toolu_02")]


def test_without_a_real_prompt_the_import_fails_in_one_line(tmp_path, capsys):
    trial = without_real_prompt(tmp_path)
    out = tmp_path / "bundle.json"
    assert main(["import-traces", str(trial), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give --prompt" in err and "Base directory" not in err
    assert not out.exists()
    assert main(["import-traces", str(trial), "-o", str(out), "--prompt", "Do the digest."]) == 0
    data = json.loads(out.read_text())
    assert data["prompt"] == "Do the digest." and data["traces"][0]["prompt"] == "Do the digest."


def test_two_trials_claude_code_logs_import_with_distinct_ids(tmp_path, capsys):
    first = without_real_prompt(tmp_path / "one")
    second = tmp_path / "two" / "web-digest__Other01"
    shutil.copytree(first, second)
    result = json.loads((second / "result.json").read_text())
    (second / "result.json").write_text(json.dumps({**result, "trial_name": "web-digest__Other01"}))
    out = tmp_path / "bundle.json"
    logs = [str(t / "agent" / "claude-code.txt") for t in (first, second)]
    assert main(["import-traces", *logs, "-o", str(out), "--task-name", "web-digest", "--prompt", "P."]) == 0
    assert [t["trace_id"] for t in json.loads(out.read_text())["traces"]] == ["web-digest__Sk1ll42",
                                                                             "web-digest__Other01"]


def test_a_wrongly_shaped_model_usage_is_one_line_naming_the_file(tmp_path, capsys):
    trial = tmp_path / TRIAL.name
    shutil.copytree(TRIAL, trial)
    log = trial / "agent" / "claude-code.txt"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    events[-1]["modelUsage"] = [1, 2]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert main(["import-traces", str(trial), "-o", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(trial) in err and "Traceback" not in err
