"""The progress lines of `deep-pipeline compile`: each reports its own step's calls; a terminal also gets live lines."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from deep_pipeline.cli import main
from deep_pipeline.llm.accounting import read_calls
from tests.compile_world import CONFIG, World, install_world, make_inputs

AGENTS = Path(__file__).parent / "agents"
TAIL = re.compile(r"\[(\d+) calls(?:, (\d+) from the cache)?, (\d+) tokens, (\$[0-9.]+|cost unknown); "
                  r"compile so far: (\d+) calls, (\$[0-9.]+|cost unknown)\]$")


def compile_lines(tmp_path, monkeypatch, capsys, **extra) -> tuple[list[str], Path]:
    home = compile_lines_to(tmp_path, monkeypatch, **extra)
    lines = [line for line in capsys.readouterr().out.splitlines() if TAIL.search(line)]
    (folder,) = (home / "compiles").iterdir()
    return lines, folder


def test_each_progress_line_counts_only_its_own_steps_calls(tmp_path, monkeypatch, capsys, scripted_llm):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2, ("s03-output", "concision"): 3},
                                      compare={("s03-output", "concision"): (3, 3)}))
    lines, folder = compile_lines(tmp_path, monkeypatch, capsys)
    counts = [int(TAIL.search(line).group(1)) for line in lines]
    assert counts[0] == 0  # the replayed inputs call no model
    assert counts[1] == 5  # the first matrix: one call per dimension
    # An edit and a comparison asked in both orders (SPEC §6.5).
    assert all(n == 3 for n, line in zip(counts, lines) if line.startswith("section/i"))
    assert sum(counts) == len(read_calls(folder / "llm" / "calls.jsonl"))  # not running totals
    # ... and each line then says the compile's total so far.
    totals = [int(TAIL.search(line).group(5)) for line in lines]
    assert totals == [sum(counts[: i + 1]) for i in range(len(counts))]


def test_inputs_whose_rollouts_all_failed_say_so(tmp_path, monkeypatch, capsys, scripted_llm):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    lines, _ = compile_lines(tmp_path, monkeypatch, capsys, runner="command",
                             agent_command=f"{sys.executable} {AGENTS / 'exit_one.py'}", agent_output_format="text",
                             section_iterations=1)
    assert lines[0].startswith("inputs ") and "all 2 of 2 rollouts failed (agent_error)" in lines[0]
    assert " done " not in lines[0]


def test_live_lines_reach_a_terminal_only(tmp_path, monkeypatch, scripted_llm):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    scripted_llm.always("agent", "- shipped the parser")
    outputs = {}
    for name, stream in (("terminal", Terminal()), ("pipe", io.StringIO())):
        monkeypatch.setattr(sys, "stdout", stream)
        compile_lines_to(tmp_path / name, monkeypatch, runner="chat", section_iterations=1)
        outputs[name] = stream.getvalue()
    assert "input: rollout 1 of 2 done" in outputs["terminal"] and "input: rollout 2 of 2 done" in outputs["terminal"]
    assert "/section/m00: column clarity scored" in outputs["terminal"] and "(5 of 5)" in outputs["terminal"]
    assert "section-i00: rollout 2 of 2 done" in outputs["terminal"]
    assert "\r\x1b[K" in outputs["terminal"]  # each live line is overwritten by the next
    assert "rollout 1 of 2" not in outputs["pipe"] and "\x1b" not in outputs["pipe"]


def compile_lines_to(tmp_path, monkeypatch, **extra) -> Path:
    """One compile through the CLI in its own home; the home, for the caller to read."""
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    skill, bundle = make_inputs(tmp_path)
    config = tmp_path / "compile.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, **extra}))
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(config)]) == 0
    return home
