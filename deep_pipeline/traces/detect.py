"""Import traces from paths, detecting each path's format (SPEC §2, §3).

Folders: a BenchFlow rollout, a Harbor trial, or a folder whose subfolders are those
(a BenchFlow job or Harbor job folder). Files: our Trace / Trace list / task bundle
JSON, Trace JSONL, ATIF JSON, mini-swe-agent trajectory JSON, a terminus-2 episode list,
Claude Code stream-json (lines that are not JSON, like the shell's noise before it in
Harbor's `command-<n>/stdout.txt`, are skipped and counted), or an ACP event stream.
Anything else is an error naming the path and the formats looked for.

In a job folder one bad trial does not stop the rest: each subfolder that is refused (it
is a rollout that cannot be imported) or skipped (it holds no agent log, or no result.json)
is listed with its reason in `ImportResult.skipped`; the caller decides what that means.
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
from deep_pipeline.traces import atif, benchflow, harbor, native, terminus
from deep_pipeline.traces.common import first_text, json_lines, read_object
from deep_pipeline.traces.miniswe import exit_category, steps_from_miniswe

FORMATS = (
    "our Trace / Trace list / task bundle JSON",
    "Trace JSONL",
    "BenchFlow rollout folder (result.json + trajectory/acp_trajectory.jsonl)",
    "Harbor trial folder (result.json + agent/claude-code.txt or agent/trajectory.json)",
    "terminus-2 episode list JSON ([{episode, prompt, response}])",
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
    notes: list[str] = []  # what the import had to work out: where the prompt came from, lines skipped


class Skipped(BaseModel):
    """A job folder's subfolder that gave no trace, and why (one line)."""

    model_config = ConfigDict(extra="forbid")

    path: Path
    reason: str
    refused: bool  # a rollout that could not be imported; else not a rollout at all


class ImportResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    imported: list[ImportedTrace] = []
    skipped: list[Skipped] = []

    @property
    def refused(self) -> list[Skipped]:
        return [s for s in self.skipped if s.refused]


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
            trace, notes = harbor.import_harbor(folder)
            return ImportedTrace(trace=trace, source=folder, format="harbor", task_name=_result_task(folder),
                                 notes=notes)
    return None


def _not_a_rollout(folder: Path) -> str:
    if not (folder / "result.json").is_file():
        return f"{folder}: no result.json (not a finished trial or rollout)"
    why = f"{folder}: no agent log (looked for {harbor.CLAUDE_LOG}, {harbor.ATIF_LOG}, {benchflow.TRAJECTORY})"
    try:  # a trial that failed before its agent ran says why in result.json
        category, reason = harbor.trial_error(read_object(folder / "result.json"))
    except (InputError, *_SHAPE_ERRORS):
        return why
    return f"{why}; {category}: {_short_reason(RuntimeError(reason))}" if reason else why


def _job_child(child: Path, skipped: list[Skipped]) -> ImportedTrace | None:
    try:
        item = _rollout_folder(child)
    except InputError as exc:
        skipped.append(Skipped(path=child, reason=str(exc), refused=True))
        return None
    if item is None:
        skipped.append(Skipped(path=child, reason=_not_a_rollout(child), refused=False))
    return item


def _import_folder(folder: Path, skipped: list[Skipped]) -> list[ImportedTrace]:
    one = _rollout_folder(folder)
    if one is not None:
        return [one]
    children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    own: list[Skipped] = []
    found = [t for child in children if (t := _job_child(child, own))]
    if not found and not any(s.refused or (s.path / "result.json").is_file() for s in own):
        if (folder / "result.json").is_file() and ((folder / "agent").is_dir() or not children):
            raise InputError(_not_a_rollout(folder))  # a trial named on its own, without its log
        raise _unknown(folder, " (a folder that is not a rollout and holds no rollout folders)")
    skipped.extend(own)
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
    if terminus.is_episode_list(data):
        with _reading(path, "terminus-2 episode list"):
            in_trial = path.absolute().parent.name == harbor.ATIF_LOG.parent.name
            trace_id = harbor.trial_trace_id(path.absolute().parent.parent) if in_trial else _stem(path)
            trace = terminus.trace_from_episodes(data, trace_id=trace_id)
        return [ImportedTrace(trace=trace, source=path, format="terminus-2")]
    if atif.is_atif(data):
        with _reading(path, "ATIF trace"):
            return [ImportedTrace(trace=atif.import_atif(path, data), source=path, format="atif")]
    if isinstance(data, dict) and isinstance(data.get("messages"), list) and (
        "trajectory_format" in data or "info" in data
    ):
        with _reading(path, "mini-swe-agent trace"):
            return [_miniswe(path, data)]
    raise _unknown(path)


def _first_object(text: str, *, past_noise: bool = False) -> dict[str, Any] | None:
    """The first line's JSON object; with `past_noise`, the first line that is one."""
    for line in json_lines(text):
        if line.strip():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                if past_noise:
                    continue
                return None
            if isinstance(value, dict) or not past_noise:
                return value if isinstance(value, dict) else None
    return None


def _noisy_claude_stream(text: str) -> bool:
    """Shell noise, then a Claude Code stream (Harbor's `command-<n>/stdout.txt` starts so)."""
    return (_first_object(text, past_noise=True) or {}).get("type") in _CLAUDE_TYPES


def _claude_stream(path: Path, text: str) -> list[ImportedTrace]:
    with _reading(path, "Claude Code stream-json trace"):
        trial = harbor.trial_of_log(path)
        # Every Harbor trial's log is agent/claude-code.txt: name it after its trial.
        trace_id = harbor.trial_trace_id(trial) if trial is not None else _stem(path)
        trace, notes = harbor.stream_trace(text, origin=str(path), trial=trial, trace_id=trace_id)
        task = _result_task(trial) if trial is not None and (trial / "result.json").is_file() else None
    return [ImportedTrace(trace=trace, source=path, format="claude-stream-json", task_name=task, notes=notes)]


def _from_lines(path: Path, text: str) -> list[ImportedTrace]:
    first = _first_object(text)
    if first is None and _noisy_claude_stream(text):
        return _claude_stream(path, text)
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
        return _claude_stream(path, text)
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
        if (_first_object(text) is not None or _noisy_claude_stream(text)) and len(json_lines(text.strip())) > 1:
            return _from_lines(path, text)
        if path.suffix == ".json":
            parse_json(text, str(path))  # raises with line and column
        raise _unknown(path, " (neither JSON nor JSON lines)") from None
    return _from_json(path, parsed)


def _import_path(path: Path, skipped: list[Skipped]) -> list[ImportedTrace]:
    # The readers below name their format; this is the catch-all for what slips past them.
    with _reading(path, "trace file or rollout folder"):
        if path.is_dir():
            return _import_folder(path, skipped)
        if path.exists():
            return _import_file(path)
    raise InputError(f"{path}: no such file or folder")


def import_all(paths: list[Path]) -> ImportResult:
    """Every trace found at `paths`, in order, and the job folders' subfolders that gave none.

    A path named here that cannot be imported is an error; so are duplicate trace ids.
    """
    result = ImportResult()
    for path in map(Path, paths):
        result.imported.extend(_import_path(path, result.skipped))
    seen: dict[str, Path] = {}
    for item in result.imported:
        trace_id = item.trace.trace_id
        if trace_id in seen:
            raise InputError(f"{item.source}: duplicate trace id {trace_id!r} (also from {seen[trace_id]})")
        seen[trace_id] = item.source
    return result


def import_sources(paths: list[Path]) -> list[ImportedTrace]:
    """Every trace found at `paths`, in order; an error when they hold none."""
    result = import_all(paths)
    if not result.imported and result.skipped:
        raise InputError(f"nothing imported: {result.skipped[0].reason}")
    return result.imported


def import_traces(paths: list[Path]) -> list[Trace]:
    """The traces at `paths` (files or rollout folders), each format detected."""
    return [item.trace for item in import_sources(paths)]
