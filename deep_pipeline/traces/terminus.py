"""terminus-2 episode lists -> traces.

SkillsBench's Harbor trials of terminus-2 (and terminus-2-skills) keep the agent's run in
`agent/trajectory.json` as a JSON list of `{"episode", "prompt", "response"}`: each
episode, the harness showed the model a prompt and the model answered.

- The first episode's prompt holds the task (terminus-2 writes it after `Task Description:`
  and before `Current terminal state:`): a `user` step, and the trace's prompt is that task
  text. Each later prompt is the terminal's state after the agent's keystrokes: a `tool`
  step answering them.
- A response is an `agent` step. When it is the harness's JSON (`analysis`, `plan`,
  `commands: [{keystrokes, duration}]`, `task_complete`), its text is the analysis and the
  plan and each command is a tool call (`keystrokes`, as typed). Any other response (the XML
  variant, text around no JSON) is kept as it is.
"""

from __future__ import annotations

import json
from typing import Any

from deep_pipeline.core.models import ToolCall, Trace
from deep_pipeline.traces.common import StepList, arguments_text, block_text, last_text

KEYSTROKES = "keystrokes"
_TASK_START = "Task Description:"
_TASK_END = "Current terminal state:"


def is_episode_list(data: Any) -> bool:
    return (isinstance(data, list) and bool(data) and all(isinstance(e, dict) for e in data)
            and all("prompt" in e and ("response" in e or "episode" in e) for e in data))


def task_text(prompt: str) -> str:
    """The task in terminus-2's first prompt, else the whole prompt."""
    start = prompt.find(_TASK_START)
    if start < 0:
        return prompt.strip()
    rest = prompt[start + len(_TASK_START):]
    end = rest.find(_TASK_END)
    return (rest if end < 0 else rest[:end]).strip() or prompt.strip()


def _harness_json(response: str) -> dict[str, Any] | None:
    """The response's JSON object (terminus-2 also reads one with text around it), else None."""
    start, end = response.find("{"), response.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(response[start:end + 1])
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and ({"commands", "analysis", "plan"} & value.keys()) else None


def _command_call(command: Any) -> ToolCall:
    if isinstance(command, dict) and isinstance(command.get(KEYSTROKES), str):
        return ToolCall(name=KEYSTROKES, arguments=command[KEYSTROKES])
    return ToolCall(name="command", arguments=arguments_text(command))


def _agent_step(response: str) -> tuple[str, list[ToolCall]]:
    answer = _harness_json(response)
    if answer is None:
        return response, []
    parts = [f"{key}: {block_text(answer[key])}" for key in ("analysis", "plan") if block_text(answer.get(key))]
    commands = answer.get("commands")
    calls = [_command_call(c) for c in commands] if isinstance(commands, list) else []
    return "\n\n".join(parts), calls


def _ordered(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    numbers = [e.get("episode") for e in episodes]
    if all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return sorted(episodes, key=lambda e: e["episode"])
    return episodes


def trace_from_episodes(episodes: list[dict[str, Any]], *, trace_id: str) -> Trace:
    """The episodes as steps; the caller fills in agent, model and accounting from result.json."""
    steps = StepList()
    prompt = ""
    for index, episode in enumerate(_ordered(episodes)):
        shown = block_text(episode.get("prompt"))
        if index == 0:
            prompt = task_text(shown)
            steps.add("user", shown)
        else:
            steps.add("tool", shown, tool_name=KEYSTROKES)
        response = episode.get("response")
        if response is not None:
            text, calls = _agent_step(block_text(response))
            steps.add("agent", text, calls)
    done = steps.steps()
    return Trace(trace_id=trace_id, agent="terminus-2", prompt=prompt, steps=done,
                 final_output=last_text(done, "agent"))
