"""Import traces from paths, detecting each path's format (SPEC §2, §3).

Folders: a BenchFlow rollout, a Harbor trial, or a folder whose subfolders are those
(a BenchFlow job or Harbor job folder). Files: our Trace / Trace list / task bundle
JSON, Trace JSONL, ATIF JSON, mini-swe-agent trajectory JSON, Claude Code stream-json,
or an ACP event stream. Anything else is an error naming the path and the formats
looked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from deep_pipeline.core.models import Trace
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import decode_utf8, parse_json, read_bytes
from deep_pipeline.traces import atif, benchflow, harbor, native
from deep_pipeline.traces.claude_stream import parse_claude_stream
from deep_pipeline.traces.common import first_text, json_lines, read_object
from deep_pipeline.traces.miniswe import exit_category, steps_from_miniswe

FORMATS = (
    "our Trace / Trace list / task bundle JSON",
    "Trace JSONL",
    "BenchFlow rollout folder (result.json + trajectory/acp_trajectory.jsonl)",
    "Harbor trial folder (result.json + agent/claude-code.txt or agent/trajectory.json)",
    "ATIF trajectory JSON (schema_version, steps)",
    "mini-swe-agent trajectory JSON (info, messages)",
    "Claude Code stream-json",
    "ACP session-update JSONL",
)
_CLAUDE_TYPES = ("system", "assistant", "user", "result")


class ImportedTrace(BaseModel):
    """A trace with where it came from, and the task it says it belongs to."""

    model_config = ConfigDict(extra="forbid")

    trace: Trace
    source: Path
    format: str
    task_name: str | None = None
    prompt: str | None = None  # a bundle's prompt, when imported from a bundle


# What a reader raises when a field holds JSON of the wrong shape (a string where an
# object belongs, a number too large for a float, ...).
_SHAPE_ERRORS = (AttributeError, TypeError, ValueError, OverflowError, ValidationError, KeyError, IndexError)
_REASON_MAX = 200


def _short_reason(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        text = f"{where}: {first['msg']}" if where else first["msg"]
    else:
        text = str(exc) or type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 1] + "…"


@contextmanager
def _reading(path: Path, format_name: str) -> Iterator[None]:
    """Turn a reader's crash on wrongly shaped JSON into one line naming the path and format."""
    try:
        yield
    except InputError:
        raise
    except RecursionError:
        raise InputError(f"{path}: not a valid {format_name}: nested too deeply") from None
    except _SHAPE_ERRORS as exc:
        raise InputError(f"{path}: not a valid {format_name}: {_short_reason(exc)}") from None


def _unknown(path: Path, why: str = "") -> InputError:
    return InputError(f"{path}: unknown trace format{why}; looked for: {'; '.join(FORMATS)}")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".traj.json", ".json", ".jsonl", ".ndjson", ".txt"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _result_task(folder: Path) -> str | None:
    task = read_object(folder / "result.json").get("task_name")
    return task.split("/")[-1] if isinstance(task, str) and task else None


def _rollout_folder(folder: Path) -> ImportedTrace | None:
    if (folder / "result.json").is_file() and (folder / benchflow.TRAJECTORY).is_file():
        with _reading(folder, "BenchFlow rollout"):
            return ImportedTrace(trace=benchflow.import_benchflow(folder), source=folder, format="benchflow",
                                 task_name=_result_task(folder))
    if harbor.is_harbor_trial(folder):
        with _reading(folder, "Harbor trial"):
            return ImportedTrace(trace=harbor.import_harbor(folder), source=folder, format="harbor",
                                 task_name=_result_task(folder))
    return None


def _import_folder(folder: Path) -> list[ImportedTrace]:
    one = _rollout_folder(folder)
    if one is not None:
        return [one]
    found = [t for child in sorted(p for p in folder.iterdir() if p.is_dir()) if (t := _rollout_folder(child))]
    if not found:
        raise _unknown(folder, " (a folder that is not a rollout and holds no rollout folders)")
    return found


def _miniswe(path: Path, data: dict[str, Any]) -> ImportedTrace:
    parsed = steps_from_miniswe(data, origin=str(path))
    category = exit_category(parsed.exit_status)
    trace = Trace(
        trace_id=_stem(path), agent="mini-swe-agent", model=parsed.model, prompt=parsed.prompt, steps=parsed.steps,
        final_output=parsed.final_output, error_category=category,
        error_reason=parsed.exit_status if category else None, prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens, cost_usd=parsed.cost_usd,
    )
    return ImportedTrace(trace=trace, source=path, format="mini-swe-agent", task_name=parsed.task_name)


def _from_json(path: Path, data: Any) -> list[ImportedTrace]:
    if native.is_bundle(data) or native.is_trace(data) or native.is_trace_list(data):
        with _reading(path, "Trace / task bundle JSON"):
            traces, bundle = native.traces_from_json(path, data)
        return [ImportedTrace(trace=t, source=path, format="task-bundle" if bundle else "native-json",
                              task_name=bundle.task_name if bundle else None,
                              prompt=bundle.prompt if bundle else None) for t in traces]
    if atif.is_atif(data):
        with _reading(path, "ATIF trace"):
            return [ImportedTrace(trace=atif.import_atif(path, data), source=path, format="atif")]
    if isinstance(data, dict) and isinstance(data.get("messages"), list) and (
        "trajectory_format" in data or "info" in data
    ):
        with _reading(path, "mini-swe-agent trace"):
            return [_miniswe(path, data)]
    raise _unknown(path)


def _first_object(text: str) -> dict[str, Any] | None:
    for line in json_lines(text):
        if line.strip():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _from_lines(path: Path, text: str) -> list[ImportedTrace]:
    first = _first_object(text)
    if first is None or native.is_trace(first):
        with _reading(path, "Trace JSONL"):
            traces = native.traces_from_jsonl(path, text)
        return [ImportedTrace(trace=t, source=path, format="native-jsonl") for t in traces]
    _, kind = benchflow.event_kind(first)
    if kind in benchflow.ACP_KINDS:
        with _reading(path, "ACP event stream"):
            events = benchflow.read_acp_events(path)
            trace = benchflow.trace_from_acp_events(events, trace_id=_stem(path))
        return [ImportedTrace(trace=trace, source=path, format="acp-jsonl")]
    if first.get("type") in _CLAUDE_TYPES:
        with _reading(path, "Claude Code stream-json trace"):
            parsed = parse_claude_stream(text, origin=str(path))
            trial = harbor.trial_of_log(path)
            # Every Harbor trial's log is agent/claude-code.txt: name it after its trial.
            trace_id = harbor.trial_trace_id(trial) if trial is not None else _stem(path)
            trace = Trace(trace_id=trace_id, agent="claude-code", prompt=first_text(parsed.steps, "user"),
                          steps=parsed.steps, final_output=parsed.final_output,
                          error_category="agent_error" if parsed.is_error else None,
                          prompt_tokens=parsed.prompt_tokens, completion_tokens=parsed.completion_tokens,
                          cost_usd=parsed.cost_usd, model_usage=parsed.model_usage)
        return [ImportedTrace(trace=trace, source=path, format="claude-stream-json")]
    raise _unknown(path, " (JSON lines of an unknown kind)")


def _import_file(path: Path) -> list[ImportedTrace]:
    data = read_bytes(path, "trace file")
    text = decode_utf8(data, str(path))
    if not text.strip():
        raise InputError(f"{path}: empty file")
    if path.suffix in (".jsonl", ".ndjson"):
        return _from_lines(path, text)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        if _first_object(text) is not None and len(json_lines(text.strip())) > 1:
            return _from_lines(path, text)
        if path.suffix == ".json":
            parse_json(text, str(path))  # raises with line and column
        raise _unknown(path, " (neither JSON nor JSON lines)") from None
    return _from_json(path, parsed)


def _import_path(path: Path) -> list[ImportedTrace]:
    # The readers below name their format; this is the catch-all for what slips past them.
    with _reading(path, "trace file or rollout folder"):
        if path.is_dir():
            return _import_folder(path)
        if path.exists():
            return _import_file(path)
    raise InputError(f"{path}: no such file or folder")


def import_sources(paths: list[Path]) -> list[ImportedTrace]:
    """Every trace found at `paths`, in order; duplicate trace ids are an error."""
    imported: list[ImportedTrace] = []
    for path in map(Path, paths):
        imported.extend(_import_path(path))
    seen: dict[str, Path] = {}
    for item in imported:
        trace_id = item.trace.trace_id
        if trace_id in seen:
            raise InputError(f"{item.source}: duplicate trace id {trace_id!r} (also from {seen[trace_id]})")
        seen[trace_id] = item.source
    return imported


def import_traces(paths: list[Path]) -> list[Trace]:
    """The traces at `paths` (files or rollout folders), each format detected."""
    return [item.trace for item in import_sources(paths)]
