"""Loading a skill package (`S_fast`, SPEC §2): a folder holding SKILL.md.

What is an error and what is a warning
--------------------------------------
A compile refuses a package (InputError, one line naming the file) when:

- the folder is missing or not a folder; it has no SKILL.md, or SKILL.md is a folder;
- SKILL.md is empty, not UTF-8 (the byte offset is given), starts with a byte order
  mark, or holds a NUL byte;
- any file or folder of the package is a symlink that resolves outside the package,
  dangles, or loops, or is neither a file nor a folder (a FIFO, socket or device);
- the front matter is missing (a skill needs `name` and `description`), unclosed,
  not valid YAML (the line is given), not a mapping, or has a key that is not a
  string (`1: x`);
- `name` or `description` is absent or not a string; `description` is blank;
- `name` breaks the Agent Skills rule: 1-64 characters of `a-z`, `0-9` and `-`, no
  leading, trailing or doubled hyphen.

It warns (and goes on) when:

- `description` is longer than 1024 characters (the Agent Skills limit; real
  published skills exceed it, and agents still load them);
- `name` differs from the folder's name.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import decode_utf8
from deep_pipeline.store import package_hash, sha256_bytes

SKILL_FILE = "SKILL.md"
NAME_MAX = 64
DESCRIPTION_MAX = 1024
_NAME_CHARS = re.compile(r"[a-z0-9-]+")
# The line model of markdown-it (and so of the unit cutter): \r\n, \r or \n.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FENCE = re.compile(r"---[ \t]*")


class SkillPackage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path
    skill_text: str
    front_matter: dict[str, Any]
    name: str
    description: str
    warnings: list[str]
    package_hash: str
    skill_sha256: str


def _check_regular(path: Path) -> None:
    """Refuse a FIFO, socket or device: it cannot be hashed or copied with the package."""
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{path}: {_special_kind(mode)} in the package; expected only files and folders")


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def _check_links(root: Path) -> None:
    """Refuse symlinks that leave the package, dangle or loop, and entries that are
    neither files nor folders (SPEC §2)."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        for entry in sorted(dirs + files):
            path = Path(folder) / entry
            if not path.is_symlink():
                _check_regular(path)
                continue
            target = os.readlink(path)
            try:
                resolved = path.resolve(strict=True)
            except (RuntimeError, OSError) as exc:
                # Python 3.11 raises RuntimeError on a loop, 3.13 OSError(ELOOP).
                looped = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
                why = "loops" if looped else "points nowhere"
                raise InputError(f"{path}: symlink {why} (-> {target})") from None
            if not resolved.is_relative_to(root):
                raise InputError(f"{path}: symlink leaves the package (-> {target}); copy the file in instead")


def _skill_bytes(root: Path) -> tuple[Path, bytes]:
    skill = root / SKILL_FILE
    if not skill.exists() and not skill.is_symlink():
        others = [p.name for p in root.iterdir() if p.name.lower() == SKILL_FILE.lower()]
        hint = f" (found {others[0]}; the name is case-sensitive)" if others else ""
        raise InputError(f"{root}: no {SKILL_FILE}{hint}; a skill package is a folder holding {SKILL_FILE}")
    if skill.is_dir():
        raise InputError(f"{skill}: is a folder, expected a markdown file")
    if not skill.is_file():
        raise InputError(f"{skill}: not a regular file")
    data = skill.read_bytes()
    if not data.strip():
        raise InputError(f"{skill}: empty; expected YAML front matter with name and description, then markdown")
    return skill, data


def _decode(skill: Path, data: bytes) -> str:
    text = decode_utf8(data, str(skill))
    if text.startswith("\ufeff"):
        raise InputError(f"{skill}: starts with a byte order mark (U+FEFF); save it as UTF-8 without BOM")
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{skill}: NUL byte at byte offset {nul}; expected a text file")
    return text


def split_front_matter(text: str, label: str) -> tuple[str, int]:
    """The YAML between a first line `---` and the next line `---`, and its first line number."""
    lines = _LINE_BREAK.split(text)
    if not lines or not _FENCE.fullmatch(lines[0]):
        raise InputError(
            f"{label}: no YAML front matter; expected a first line '---', then name and description, then '---'"
        )
    for index in range(1, len(lines)):
        if _FENCE.fullmatch(lines[index]):
            return "\n".join(lines[1:index]), 2
    raise InputError(f"{label}: front matter opened on line 1 is never closed; expected a line '---'")


def _parse_front_matter(text: str, label: str) -> dict[str, Any]:
    yaml_text, first_line = split_front_matter(text, label)
    try:
        data = yaml.safe_load(yaml_text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + first_line}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{label}: {where}front matter is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{label}: front matter is {_kind(data)}; expected a mapping with name and description")
    for key in data:
        if not isinstance(key, str):
            raise InputError(f"{label}: front matter key {str(key)[:60]!r} is {_kind(key)}; keys must be strings "
                             "(quote it)")
    return data


def _kind(value: Any) -> str:
    """What YAML made of a value, in words."""
    if value is None:
        return "empty"
    names = {bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "a mapping"}
    return names.get(type(value), f"a {type(value).__name__}")


def _field(front: dict[str, Any], key: str, label: str) -> str:
    if key not in front:
        raise InputError(f"{label}: front matter has no '{key}'; a skill needs name and description")
    value = front[key]
    if not isinstance(value, str):
        raise InputError(f"{label}: front matter '{key}' is {_kind(value)}; expected a string")
    return value


def _check_name(name: str, label: str) -> None:
    problem = None
    if not name:
        problem = "is empty"
    elif len(name) > NAME_MAX:
        problem = f"is {len(name)} characters long (at most {NAME_MAX})"
    elif not _NAME_CHARS.fullmatch(name):
        problem = "may hold only lowercase letters a-z, digits and '-'"
    elif name.startswith("-") or name.endswith("-"):
        problem = "may not start or end with '-'"
    elif "--" in name:
        problem = "may not hold '--'"
    if problem:
        raise InputError(f"{label}: front matter name {name!r} {problem} (Agent Skills naming rule)")


def _warnings(name: str, description: str, root: Path) -> list[str]:
    warnings = []
    if len(description) > DESCRIPTION_MAX:
        warnings.append(
            f"description is {len(description)} characters long; the Agent Skills limit is {DESCRIPTION_MAX}"
        )
    if name != root.name:
        warnings.append(f"name {name!r} differs from the folder name {root.name!r}")
    return warnings


def load_skill(path: Path | str) -> SkillPackage:
    """Load and check a skill package; raise InputError (one line) when it is unusable."""
    given = Path(path)
    if not given.exists():
        raise InputError(f"{given}: no such skill folder")
    if not given.is_dir():
        raise InputError(f"{given}: not a folder; expected a skill folder holding {SKILL_FILE}")
    root = given.resolve()
    _check_links(root)
    skill, data = _skill_bytes(root)
    label = str(given / SKILL_FILE)
    text = _decode(Path(label), data)
    front = _parse_front_matter(text, label)
    name = _field(front, "name", label)
    description = _field(front, "description", label)
    _check_name(name, label)
    if not description.strip():
        raise InputError(f"{label}: front matter description is blank; say what the skill is for and when to use it")
    return SkillPackage(
        root=root,
        skill_text=text,
        front_matter=front,
        name=name,
        description=description,
        warnings=_warnings(name, description, root),
        package_hash=package_hash(root),
        skill_sha256=sha256_bytes(data),
    )
