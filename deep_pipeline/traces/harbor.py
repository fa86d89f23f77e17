"""Harbor trial folders -> traces.

A trial folder holds `result.json` (trial_name, task_name, agent_info {name,
model_info {name, provider}}, agent_result {n_input_tokens, n_output_tokens,
cost_usd}, exception_info {exception_type, exception_message}, agent_execution
{started_at, finished_at}) and the agent's log under `agent/`: for Claude Code,
`agent/claude-code.txt`, its stream-json output. When that is absent,
`agent/trajectory.json` is read instead: ATIF, or terminus-2's episode list.

A trial's trace is named after the trial (`trial_name`, else the folder's name), also
when its `agent/claude-code.txt` is imported on its own: every trial's log has that name.
Harbor's token counts, like the stream's `usage`, cover the main model only while its
cost covers sub-models too; when the stream's result has per-model usage, the tokens and
cost are taken from it, so they cover the same calls (see claude_stream).

Harbor runs `claude -p '<instruction>'`, so the stream holds no user turn: the prompt is
then read from the trial (see harbor_prompt). A stream without its `result` line was cut
off (the agent was killed): `agent_error`, unless result.json says why (a timeout). An
exception is classed by its phase and text (`_category`): Harbor raises a plain
RuntimeError when `docker compose` fails, which is `sandbox_setup`, not the agent's.
A terminus-2 `agent/trajectory.json` is an episode list (see terminus), not ATIF.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deep_pipeline.core.models import ErrorCategory, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.traces import terminus
from deep_pipeline.traces.atif import is_atif, trace_from_atif
from deep_pipeline.traces.claude_stream import ParsedStream, parse_claude_stream
from deep_pipeline.traces.common import (
    category_from_text,
    first_text,
    integer,
    number,
    read_json,
    read_object,
    read_text,
    seconds_between,
)
from deep_pipeline.traces.harbor_prompt import trial_prompt

CLAUDE_LOG = Path("agent") / "claude-code.txt"
ATIF_LOG = Path("agent") / "trajectory.json"
CUT_OFF = "stream ended without a result"
# What an import says about a trace beyond the trace itself: where its prompt came from, ...
Notes = list[str]


def is_harbor_trial(folder: Path) -> bool:
    return (folder / "result.json").is_file() and ((folder / CLAUDE_LOG).is_file() or (folder / ATIF_LOG).is_file())


def trial_trace_id(folder: Path, result: dict[str, Any] | None = None) -> str:
    """The trace id of a trial: its recorded `trial_name`, else the folder's name."""
    if result is None:
        try:
            result = read_object(folder / "result.json") if (folder / "result.json").is_file() else {}
        except InputError:
            result = {}  # only naming it here; importing the folder itself reports the broken file
    name = result.get("trial_name")
    return name if isinstance(name, str) and name else folder.name


def trial_of_log(path: Path) -> Path | None:
    """The trial folder of a Claude Code log (`<trial>/agent/claude-code.txt`, or the stdout
    Harbor keeps of the command, `<trial>/agent/command-<n>/stdout.txt`), else None."""
    path = path.absolute()  # `agent/claude-code.txt` given from inside the trial still names it
    if path.name == CLAUDE_LOG.name and path.parent.name == CLAUDE_LOG.parent.name:
        return path.parent.parent
    command = path.parent.name
    if (path.name == "stdout.txt" and command.startswith("command-") and command[len("command-"):].isdigit()
            and path.parent.parent.name == CLAUDE_LOG.parent.name):
        return path.parent.parent.parent
    return None


# Words of an exception's text that name the machinery around the agent, not the agent.
_SANDBOX_WORDS = ("docker", "compose", "container", "environment", "sandbox")


def _before_agent_ran(result: dict[str, Any], info: dict[str, Any]) -> bool:
    """Whether the exception came before the agent's execution began (environment or agent setup).

    Harbor writes `agent_execution: null` for an agent that never started; a result.json
    without the field says nothing about the phase, and the text decides alone.
    """
    if "agent_execution" not in result:
        return False
    execution = result["agent_execution"]
    started = execution.get("started_at") if isinstance(execution, dict) else None
    if not started:
        return True
    gap = seconds_between(info.get("occurred_at"), started)
    return gap is not None and gap > 0


def _category(result: dict[str, Any], info: dict[str, Any], kind: str, message: str) -> ErrorCategory | None:
    # Decided by phase and text: Harbor raises a plain RuntimeError when `docker compose` fails.
    if kind.startswith(("Verifier", "Reward")):
        return None  # the verifier failed, not the agent's run
    if kind == "AgentTimeoutError":
        return "timeout"
    if _before_agent_ran(result, info):
        return "sandbox_setup"
    if any(word in f"{kind} {message}".lower() for word in _SANDBOX_WORDS):
        return "sandbox_setup"
    return category_from_text(f"{kind} {message}")


def trial_error(result: dict[str, Any]) -> tuple[ErrorCategory | None, str | None]:
    info = result.get("exception_info")
    if not isinstance(info, dict):
        return None, None
    kind = str(info.get("exception_type") or "")
    message = str(info.get("exception_message") or "")
    reason = f"{kind}: {message}".strip(": ")[:500] or None
    return _category(result, info, kind, message), reason


def _model(result: dict[str, Any]) -> str | None:
    info = (result.get("agent_info") or {}).get("model_info") or {}
    name, provider = info.get("name"), info.get("provider")
    if not name:
        return None
    return f"{provider}/{name}" if provider and not str(name).startswith(f"{provider}/") else str(name)


def _fields(result: dict[str, Any]) -> dict[str, Any]:
    category, reason = trial_error(result)
    usage = result.get("agent_result") if isinstance(result.get("agent_result"), dict) else {}
    execution = result.get("agent_execution") if isinstance(result.get("agent_execution"), dict) else {}
    agent = (result.get("agent_info") or {}).get("name")
    return dict(
        agent=agent if isinstance(agent, str) else None,
        model=_model(result),
        error_category=category,
        error_reason=reason,
        duration_s=seconds_between(execution.get("started_at"), execution.get("finished_at")),
        prompt_tokens=integer(usage.get("n_input_tokens")),
        completion_tokens=integer(usage.get("n_output_tokens")),
        cost_usd=number(usage.get("cost_usd")),
    )


def _trial_result(trial: Path | None) -> dict[str, Any]:
    return read_object(trial / "result.json") if trial is not None and (trial / "result.json").is_file() else {}


def _stream_prompt(parsed: ParsedStream, trial: Path | None, result: dict[str, Any], notes: Notes) -> str:
    """The stream's first user turn, else what the trial says Harbor gave the agent."""
    prompt = first_text(parsed.steps, "user")
    if prompt or trial is None:
        return prompt
    found = trial_prompt(trial, result)
    if found is None:
        return ""
    prompt, where = found
    notes.append(f"prompt from {where}")
    return prompt


def stream_trace(text: str, *, origin: str, trial: Path | None, trace_id: str) -> tuple[Trace, Notes]:
    """A Claude Code stream as a trace, with its trial's result.json (when there is one) filled in."""
    parsed = parse_claude_stream(text, origin=origin)
    result = _trial_result(trial)
    fields = _fields(result)
    notes: Notes = []
    if parsed.bad_lines:
        notes.append(f"skipped {parsed.bad_lines} line{'s' if parsed.bad_lines != 1 else ''} that are not JSON")
    if fields["error_category"] is None and (parsed.is_error or not parsed.saw_result):
        fields["error_category"] = "agent_error"
        fields["error_reason"] = fields["error_reason"] or (None if parsed.saw_result else CUT_OFF)
    for key in ("prompt_tokens", "completion_tokens", "cost_usd"):
        streamed = getattr(parsed, key)
        # Per-model totals cover the calls the cost covers; result.json's tokens do not.
        if streamed is not None and (fields[key] is None or parsed.model_usage):
            fields[key] = streamed
    fields["agent"] = fields["agent"] or "claude-code"
    fields["model"] = fields["model"] or parsed.model
    trace = Trace(trace_id=trace_id, prompt=_stream_prompt(parsed, trial, result, notes), steps=parsed.steps,
                  final_output=parsed.final_output, model_usage=parsed.model_usage, **fields)
    return trace, notes


def import_harbor(folder: Path) -> tuple[Trace, Notes]:
    result = read_object(folder / "result.json")
    trace_id = trial_trace_id(folder, result)
    if (folder / CLAUDE_LOG).is_file():
        return stream_trace(read_text(folder / CLAUDE_LOG), origin=str(folder / CLAUDE_LOG), trial=folder,
                            trace_id=trace_id)
    data = read_json(folder / ATIF_LOG)
    if terminus.is_episode_list(data):
        imported = terminus.trace_from_episodes(data, trace_id=trace_id)
    elif is_atif(data):
        imported = trace_from_atif(data, trace_id=trace_id, label=str(folder / ATIF_LOG))
    else:
        raise InputError(f"{folder / ATIF_LOG}: not an ATIF trajectory (expected schema_version and steps) "
                         "nor a terminus-2 episode list (expected [{episode, prompt, response}, ...])")
    merged = {k: v for k, v in _fields(result).items() if v is not None}
    # Validate again (not model_copy) so timed_out follows the error category.
    return Trace.model_validate({**imported.model_dump(), **merged}), []
