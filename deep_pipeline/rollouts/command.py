"""The `command` runner: any agent CLI from a template (DESIGN "Rollout runners").

The template is split like a shell would (shlex) and then each argument gets its
placeholders filled, so a prompt with spaces or quotes stays one argument and no shell
ever sees it. Placeholders: {prompt}, {workdir}, {skill_dir}, {model}.
stdout is read by a named format: `claude-stream-json`, `jsonl`, `text`.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.core.models import StepSource, ToolCall, TraceStep
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.agent_process import Launch, ProcessRunner, Reading
from deep_pipeline.rollouts.base import RolloutTask
from deep_pipeline.rollouts.process import ProcessResult
from deep_pipeline.rollouts.sandbox import Sandbox, agent_env

OUTPUT_FORMATS = ("claude-stream-json", "jsonl", "text")
PLACEHOLDERS = ("{prompt}", "{workdir}", "{skill_dir}", "{model}")


def split_template(template: str) -> list[str]:
    """The template's arguments, placeholders still in; InputError when it can't be split."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise InputError(f"agent_command: cannot split {template!r} into arguments: {exc}") from None
    if not argv:
        raise InputError("agent_command: empty; expected a command such as 'claude -p {prompt}'")
    return argv


_INTERPRETER = re.compile(r"(python|node|bash|sh|uv|npx)[0-9.]*")


def agent_name(argv: list[str]) -> str:
    """The agent as traces name it: `claude` for `claude -p ...`, the script for `python agent.py`."""
    first = Path(argv[0]).name
    is_interpreter = _INTERPRETER.fullmatch(first) is not None and len(argv) > 1
    return Path(argv[1]).name if is_interpreter and not argv[1].startswith("-") else first


def fill_template(argv: list[str], values: dict[str, str]) -> list[str]:
    """Substitute per argument with plain replacement (braces in JSON arguments are left alone)."""
    filled = []
    for arg in argv:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        filled.append(arg)
    return filled


class CommandRunner(ProcessRunner):
    name = "command"

    def __init__(self, template: str, output_format: str = "text", **kwargs) -> None:
        super().__init__(**kwargs)
        if output_format not in OUTPUT_FORMATS:
            raise InputError(f"agent_output_format: {output_format!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
        self.template = split_template(template)
        self.output_format = output_format
        self.name = agent_name(self.template)

    def launch(self, sandbox: Sandbox, task: RolloutTask, package_dir: Path) -> Launch:
        skill_dir = sandbox.work / ".claude" / "skills" / task.skill_name
        argv = fill_template(self.template, {
            "{prompt}": task.prompt, "{workdir}": str(sandbox.work),
            "{skill_dir}": str(skill_dir), "{model}": self.target_model,
        })
        env = agent_env(home=sandbox.home, tmpdir=sandbox.tmp, model=self.key_model,
                        argv0=None if self.extra_env else argv[0], api_base=self.target_api_base,
                        extra=self.extra_env)
        return Launch(argv=argv, env=env)

    def read(self, result: ProcessResult, sandbox: Sandbox, archive: Path) -> Reading:
        if self.output_format == "claude-stream-json":
            return read_claude_stream(result.stdout.text(), origin=str(archive / "stdout.txt"))
        if self.output_format == "jsonl":
            return read_jsonl(result.stdout.text())
        return read_text(result.stdout.archived().decode("utf-8", errors="replace"))


def read_text(stdout: str) -> Reading:
    """The whole stdout is the agent's one step and its final output."""
    return Reading(steps=[TraceStep(step=1, source="agent", text=stdout)], final_output=stdout)


def read_claude_stream(stdout: str, *, origin: str) -> Reading:
    from deep_pipeline.traces.claude_stream import parse_claude_stream

    parsed = parse_claude_stream(stdout, origin=origin)
    reading = Reading(
        steps=parsed.steps, final_output=parsed.final_output or "", prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens, cost_usd=parsed.cost_usd,
    )
    total = sum(1 for line in stdout.splitlines() if line.strip())
    if parsed.bad_lines:
        reading.error = ("agent_error", f"{parsed.bad_lines} of {total} stdout lines are not claude stream-json")
    elif not total:
        reading.error = ("agent_error", "the agent printed nothing on stdout (expected claude stream-json)")
    elif parsed.is_error:
        reading.error = ("agent_error", f"the agent's result event is an error: {reading.final_output[:200]}")
    elif not parsed.saw_result:
        reading.error = ("agent_error", "the stream ended without its result event (the agent stopped early)")
    return reading


class JsonlStep(BaseModel):
    """One line of the `jsonl` format: a TraceStep without its number (renumbered here)."""

    model_config = ConfigDict(extra="ignore")

    source: StepSource
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


def read_jsonl(stdout: str) -> Reading:
    steps: list[TraceStep] = []
    bad = total = 0
    for line in stdout.splitlines():
        if not line.strip():
            continue
        total += 1
        try:
            step = JsonlStep.model_validate(json.loads(line))
        except (ValueError, ValidationError):  # JSONDecodeError is a ValueError
            bad += 1
            continue
        steps.append(TraceStep(step=len(steps) + 1, **step.model_dump()))
    agent_texts = [s.text for s in steps if s.source == "agent" and s.text]
    reading = Reading(steps=steps, final_output=agent_texts[-1] if agent_texts else "")
    if bad:
        reading.error = ("agent_error", f"{bad} of {total} stdout lines are not JSON trace steps "
                                        "(expected {\"source\", \"text\", \"tool_calls\"} per line)")
    elif not total:
        reading.error = ("agent_error", "the agent printed nothing on stdout (expected jsonl trace steps)")
    return reading
