"""Reading user-supplied JSON files with one-line errors a user can act on.

Every error names the file and where in it the problem is: a byte offset for bad
UTF-8, a line and column for bad JSON, a JSON path (`traces[2].steps[0].source`)
for a record that does not fit its pydantic model.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from deep_pipeline.errors import InputError

# pydantic error types whose meaning fits in a few words; others keep pydantic's text.
_EXPECTED = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "none_required": "expected null",
}

_JSON_TYPE = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}


# The most a JSON or YAML input file may hold: a device or a runaway file is refused
# in one line instead of being read until memory runs out.
INPUT_FILE_MAX_BYTES = 256 * 2**20


def read_bytes(path: Path, what: str = "file", limit: int = INPUT_FILE_MAX_BYTES) -> bytes:
    """Read a regular file the user named, at most `limit` bytes, or refuse with one line saying why not."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such {what}")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, expected a {what}")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(f"{path}: {special_kind(mode)}; expected a regular {what}")
            data = handle.read(limit + 1)  # a file that grows while read still stops here
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit // 2**20} MB; expected a {what} of at most that size")
    return data


def special_kind(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def decode_utf8(data: bytes, label: str) -> str:
    """Decode strictly, naming the byte offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{label}: not UTF-8: byte 0x{data[exc.start]:02x} at byte offset {exc.start} ({exc.reason})"
        ) from None


def parse_json(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{label}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{label}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python will convert
        reason = " ".join(str(exc).split())[:200]
        if "digits" in reason:
            reason = "a number has too many digits (at most 4300)"
        raise InputError(f"{label}: invalid JSON: {reason}") from None


def load_json_file(path: Path) -> tuple[bytes, Any]:
    """The file's bytes (for hashing) and its parsed JSON."""
    data = read_bytes(path)
    if not data.strip():
        raise InputError(f"{path}: empty file, expected JSON")
    return data, parse_json(decode_utf8(data, str(path)), str(path))


def json_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """('traces', 2, 'steps', 0, 'source') -> 'traces[2].steps[0].source'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _describe(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", error.get("ctx", {}).get("expected", ""))
        return f"expected one of {'|'.join(choices)}, got {json.dumps(error['input'])[:60]}"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if kind in _EXPECTED:
        text = _EXPECTED[kind]
        if kind not in ("missing", "extra_forbidden"):
            text += f", got {_JSON_TYPE.get(type(error['input']), 'null' if error['input'] is None else 'a value')}"
        return text
    return error["msg"][0].lower() + error["msg"][1:]


def describe_validation_error(exc: ValidationError, label: str, prefix: tuple[Any, ...] = ()) -> str:
    """One line for a pydantic error: `<file>: <json path>: <what was expected>`."""
    errors = exc.errors()
    first = errors[0]
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{label}: {json_path(prefix + tuple(first['loc']))}: {_describe(first)}{more}"
