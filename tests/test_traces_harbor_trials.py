"""Harbor trials as they really come (SPEC §2).

The fixtures are synthetic, in the shapes of SkillsBench's Harbor trials: Claude Code run
as `claude -p '<instruction>'` (no user turn in the stream; the command kept in
`agent/command-1/command.txt`, its stdout starting with the shell's noise), a stream cut
off before its result line, and job folders holding trials that cannot be imported.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from deep_pipeline.cli import main
from deep_pipeline.traces import import_sources
from deep_pipeline.traces.harbor_prompt import prompt_of_command

TRACES = Path(__file__).parent / "fixtures" / "traces"
TRIAL = TRACES / "harbor-cli-prompt" / "sql-audit__Pr0mpt1"
CUT_OFF = TRACES / "claude-cutoff" / "run-7.jsonl"
INSTRUCTION = "Audit app.py for SQL injection.\n\nWrite findings.md with one line per finding; it's due today."


def copy_trial(tmp_path: Path, name: str = TRIAL.name) -> Path:
    trial = tmp_path / name
    shutil.copytree(TRIAL, trial)
    return trial


def set_result(trial: Path, **fields) -> None:
    result = json.loads((trial / "result.json").read_text())
    (trial / "result.json").write_text(json.dumps({**result, **fields}))


# -- item 1: the prompt of a trial whose stream has no user turn --------------------------------

def test_the_prompt_comes_from_the_claude_command_and_the_output_says_so(tmp_path, capsys):
    out = tmp_path / "bundle.json"
    assert main(["import-traces", str(TRIAL), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["prompt"] == INSTRUCTION and data["traces"][0]["prompt"] == INSTRUCTION
    assert "user" not in [s["source"] for s in data["traces"][0]["steps"]]  # the stream's steps, nothing added
    assert f"sql-audit__Pr0mpt1: prompt from {Path('agent/command-1/command.txt')}" in capsys.readouterr().out


def test_prompt_still_overrides_the_command(tmp_path, capsys):
    out = tmp_path / "bundle.json"
    assert main(["import-traces", str(TRIAL), "-o", str(out), "--prompt", "Audit it."]) == 0
    assert json.loads(out.read_text())["prompt"] == "Audit it."


def test_without_a_command_the_tasks_instruction_md_is_the_prompt(tmp_path, monkeypatch, capsys):
    trial = copy_trial(tmp_path)
    shutil.rmtree(trial / "agent" / "command-1")
    task = tmp_path / "datasets" / "skillsbench" / "tasks" / "sql-audit"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text(INSTRUCTION + "\n")
    monkeypatch.chdir(tmp_path)  # result.json's task path is relative to where Harbor ran
    (item,) = import_sources([trial])
    assert item.trace.prompt == INSTRUCTION
    assert item.notes == [f"prompt from {Path('datasets/skillsbench/tasks/sql-audit/instruction.md')}"]


def test_the_claude_argument_is_read_as_the_shell_reads_it():
    assert prompt_of_command("claude --verbose -p 'it'\"'\"'s done' --allowedTools Bash | tee x") == "it's done"
    assert prompt_of_command("mkdir -p /logs/agent") is None  # -p of another program
    assert prompt_of_command("claude -p 'unclosed") is None


def test_a_stream_that_begins_with_shell_noise_imports_as_a_file(tmp_path):
    stdout = TRIAL / "agent" / "command-1" / "stdout.txt"
    (item,) = import_sources([stdout])
    assert (item.format, item.trace.trace_id, item.trace.prompt) == ("claude-stream-json", "sql-audit__Pr0mpt1",
                                                                     INSTRUCTION)
    assert "skipped 2 lines that are not JSON" in item.notes
    assert item.trace.final_output == "findings.md lists the one injection at app.py:12."
    alone = tmp_path / "stdout.txt"  # outside its trial: no prompt to find, still a trace
    shutil.copy(stdout, alone)
    (item,) = import_sources([alone])
    assert (item.trace.trace_id, item.trace.prompt, len(item.trace.steps)) == ("stdout", "", 7)


# -- item 4: a stream cut off before its result line ---------------------------------------------

def test_a_cut_off_stream_is_an_agent_error_and_names_its_model():
    (item,) = import_sources([CUT_OFF])
    trace = item.trace
    assert (trace.error_category, trace.error_reason) == ("agent_error", "stream ended without a result")
    assert not trace.timed_out
    assert (trace.agent, trace.model) == ("claude-code", "claude-opus-4-5-20251101")


def test_a_cut_off_stream_of_a_timed_out_trial_is_a_timeout(tmp_path):
    trial = copy_trial(tmp_path)
    shutil.copy(CUT_OFF, trial / "agent" / "claude-code.txt")
    set_result(trial, exception_info={"exception_type": "AgentTimeoutError",
                                      "exception_message": "Agent execution timed out after 900.0 seconds",
                                      "occurred_at": "2025-12-02T11:15:10.000000"})
    trace = import_sources([trial])[0].trace
    assert trace.error_category == "timeout" and trace.timed_out
    finished = import_sources([TRIAL])[0].trace
    assert finished.error_category is None and finished.model == "anthropic/claude-opus-4-5-20251101"


# -- item 8: Harbor's exceptions by phase and text -----------------------------------------------

DOCKER = {"exception_type": "RuntimeError",
          "exception_message": "Docker compose command failed for environment sql-audit. Command: docker compose "
                               "-p sql-audit__pr0mpt1 up -d. Return code: 1. Stderr: network not found",
          "occurred_at": "2025-12-02T11:01:00.000000"}


def test_a_docker_failure_is_sandbox_setup_not_agent_error(tmp_path):
    trial = copy_trial(tmp_path)
    set_result(trial, exception_info=DOCKER)  # during the agent's run
    assert import_sources([trial])[0].trace.error_category == "sandbox_setup"


def test_any_exception_before_the_agent_ran_is_sandbox_setup(tmp_path):
    trial = copy_trial(tmp_path)
    before = {"exception_type": "RuntimeError", "exception_message": "exit status 1",
              "occurred_at": "2025-12-02T11:00:05.000000"}
    set_result(trial, exception_info=before)
    assert import_sources([trial])[0].trace.error_category == "sandbox_setup"
    set_result(trial, exception_info={**before, "occurred_at": "2025-12-02T11:01:00.000000"})
    assert import_sources([trial])[0].trace.error_category == "agent_error"  # the same text while the agent ran


# -- item 3: a job folder with one good, one unimportable and one log-less trial ----------------

def job_folder(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    copy_trial(job)
    broken = copy_trial(job, "sql-audit__Br0ken2")
    (broken / "result.json").write_text('{"trial_name": "sql-audit__Br0ken2",')
    logless = job / "sql-audit__N0log3"
    logless.mkdir()
    (logless / "result.json").write_text(json.dumps({"trial_name": "sql-audit__N0log3", "exception_info": DOCKER,
                                                     "agent_execution": None}))
    (job / "config.json").write_text("{}")  # the job's own files are not trials
    return job


def test_a_job_folder_imports_what_it_can_and_lists_the_rest(tmp_path, capsys):
    job, out = job_folder(tmp_path), tmp_path / "bundle.json"
    assert main(["import-traces", str(job), "-o", str(out)]) == 0
    assert [t["trace_id"] for t in json.loads(out.read_text())["traces"]] == ["sql-audit__Pr0mpt1"]
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 2
    assert err[0].startswith(f"refused: {job / 'sql-audit__Br0ken2' / 'result.json'}")
    assert err[1].startswith(f"skipped: {job / 'sql-audit__N0log3'}: no agent log")
    assert "sandbox_setup: RuntimeError: Docker compose command failed" in err[1]
    assert "1 trace imported (1 in the bundle), 1 refused, 1 skipped" in captured.out


def test_strict_fails_on_a_refused_trial_and_writes_nothing(tmp_path, capsys):
    job, out = job_folder(tmp_path), tmp_path / "bundle.json"
    assert main(["import-traces", str(job), "-o", str(out), "--strict"]) == 2
    assert "--strict and 1 trial refused" in capsys.readouterr().err.splitlines()[-1]
    assert not out.exists()


def test_a_job_folder_with_nothing_importable_fails(tmp_path, capsys):
    job, out = job_folder(tmp_path), tmp_path / "bundle.json"
    shutil.rmtree(job / TRIAL.name)
    assert main(["import-traces", str(job), "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert err[-1] == f"deep-pipeline: error: {out}: nothing imported (1 refused, 1 skipped); nothing written"
    assert not out.exists()


# -- item 9: --into a bundle of another task or agent --------------------------------------------

def test_into_refuses_a_trace_of_another_task_or_agent_unless_forced(tmp_path, capsys):
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"task_name": "3d-scan-calc", "prompt": "Compute the scan volume.",
                                  "agent": "claude-code", "traces": []}))
    out = tmp_path / "more.json"
    assert main(["import-traces", str(TRIAL), "--into", str(bundle), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"deep-pipeline: error: {TRIAL}: its task is 'sql-audit', not {bundle}'s '3d-scan-calc'; "
                   "use --force to add it anyway")
    assert not out.exists()
    swe = tmp_path / "django__django-11099.traj.json"
    swe.write_text(json.dumps({"info": {"exit_status": "Submitted"}, "messages": [
        {"role": "user", "content": "Fix the UsernameValidator."}, {"role": "assistant", "content": "Done."}]}))
    assert main(["import-traces", str(swe), "--into", str(bundle), "-o", str(out)]) == 2
    assert "its agent is 'mini-swe-agent', not" in capsys.readouterr().err
    assert main(["import-traces", str(TRIAL), "--into", str(bundle), "-o", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["task_name"] == "3d-scan-calc"


def test_a_trial_named_on_its_own_without_its_log_says_so(tmp_path, capsys):
    trial = copy_trial(tmp_path)
    (trial / "agent" / "claude-code.txt").unlink()
    shutil.rmtree(trial / "agent" / "command-1")
    assert main(["import-traces", str(trial), "-o", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"deep-pipeline: error: {trial}: no agent log (looked for") and "\n" not in err


def test_an_agent_timeout_without_the_phase_fields_is_still_a_timeout(tmp_path):
    trial = copy_trial(tmp_path)
    result = json.loads((trial / "result.json").read_text())
    del result["agent_execution"]  # older result.json files lack the phases
    result["exception_info"] = {"exception_type": "AgentTimeoutError", "exception_message": "timed out after 900 s"}
    (trial / "result.json").write_text(json.dumps(result))
    assert import_sources([trial])[0].trace.error_category == "timeout"
    result["exception_info"] = {"exception_type": "RuntimeError", "exception_message": "boom"}
    (trial / "result.json").write_text(json.dumps(result))
    assert import_sources([trial])[0].trace.error_category == "agent_error"
