"""Loading a skill package (`S_fast`, SPEC §2): a folder holding SKILL.md.

What is an error and what is a warning
--------------------------------------
A compile refuses a package (InputError, one line naming the file) when:

- the folder is missing or not a folder; it has no SKILL.md, or SKILL.md is a folder;
- SKILL.md is empty, not UTF-8 (the byte offset is given), starts with a byte order
  mark, or holds a NUL byte; its body (after the front matter) is empty or blank;
- any file or folder of the package is a symlink that resolves outside the package,
  dangles, or loops, or leads back to a folder it sits in (the copy would never end),
  or is neither a file nor a folder (a FIFO, socket or device), or cannot be read;
- the package's files hold more than 100 MB together (`DEEP_PIPELINE_PACKAGE_MAX_MB`);
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

from deep_pipeline.core.package import linked_paths, unit_files
from deep_pipeline.core.lines import front_matter_end
from deep_pipeline.core.units import cut_sections
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import decode_utf8, read_bytes, special_kind
from deep_pipeline.store import package_files, package_hash, sha256_bytes

SKILL_FILE = "SKILL.md"
NAME_MAX = 64
DESCRIPTION_MAX = 1024
_NAME_CHARS = re.compile(r"[a-z0-9-]+")
# The line model of markdown-it (and so of the unit cutter): \r\n, \r or \n.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FENCE = re.compile(r"---[ \t]*")
# The most a package may hold, all its files together (SPEC §2 leaves it open): a huge
# extra file is refused in one line rather than hashed and copied into every iteration.
PACKAGE_MAX_MB = 100
PACKAGE_MAX_VARIABLE = "DEEP_PIPELINE_PACKAGE_MAX_MB"


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
    # The package's other markdown files that are units (core/package.py), path -> text.
    files: dict[str, str] = {}


def package_max_bytes() -> int:
    """The most a package may hold (its files' sizes, links followed as the copy follows them)."""
    raw = os.environ.get(PACKAGE_MAX_VARIABLE, "").strip()
    if not raw:
        return PACKAGE_MAX_MB * 2**20
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 2**40:
        raise InputError(f"{PACKAGE_MAX_VARIABLE}={raw!r}: expected a positive number of megabytes")
    return int(value * 2**20)


def _resolve_link(path: Path, root: Path) -> Path:
    """Where a symlink of the package leads; refused when it dangles, loops or leaves the package."""
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
    return resolved


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(Path(folder).iterdir())
    except OSError as exc:
        raise InputError(f"{folder}: cannot read: {exc.strerror or exc}") from None


def _check_links(root: Path) -> int:
    """Walk the package as its copy will (folder links followed) and return its size in bytes.

    Refuses symlinks that leave the package, dangle or loop, a folder link back to a
    folder it sits in (the copy would never end), and entries that are neither files nor
    folders (a FIFO, socket or device: they cannot be hashed or copied) (SPEC §2).
    """
    size = 0
    pending = [(root, (root,))]  # a folder and the real folders it sits in, itself included
    while pending:
        folder, chain = pending.pop()
        for path in _entries(folder):
            link = path.is_symlink()
            real = _resolve_link(path, root) if link else Path(os.path.realpath(path))
            try:
                info = real.stat()
            except OSError as exc:
                raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
            if stat.S_ISDIR(info.st_mode):
                if real in chain:  # only a link can lead back up; named where it really is
                    where = Path(os.path.realpath(path.parent)) / path.name
                    target = os.readlink(path) if link else real
                    raise InputError(f"{where}: symlink loops back to a folder it sits in (-> {target}); "
                                     "copying the package would never end")
                pending.append((path, (*chain, real)))
            elif stat.S_ISREG(info.st_mode):
                size += info.st_size
            else:
                raise InputError(f"{path}: {special_kind(info.st_mode)} in the package; expected only files and folders")
    return size


def _check_size(root: Path, size: int) -> None:
    limit = package_max_bytes()
    if size > limit:
        raise InputError(f"{root}: the package holds {size / 2**20:.0f} MB, more than the {limit / 2**20:.0f} MB "
                         f"a package may hold; move large files out (or raise {PACKAGE_MAX_VARIABLE})")


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
    data = read_bytes(skill, "markdown file", limit=package_max_bytes())
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


def read_unit_files(root: Path, skill_text: str, shown: Path | None = None) -> dict[str, str]:
    """The texts of the package's markdown files other than SKILL.md that are units (core/package.py).

    Each must be UTF-8 with closed front matter, as SKILL.md must: else InputError naming the file.
    """
    paths = [p.as_posix() for p in package_files(root)]
    files = {}
    for rel in unit_files(skill_text, paths):
        label = Path(shown or root) / rel
        text = _decode(label, (root / rel).read_bytes())
        try:
            front_matter_end(text)
        except ValueError as exc:
            raise InputError(f"{label}: {exc}") from None
        files[rel] = text
    return files


def _missing_links(root: Path, skill_text: str) -> list[str]:
    """A warning per relative link of SKILL.md to a file the package does not hold."""
    return [f"SKILL.md links to {path}, which is not in the package" for path in linked_paths(skill_text)
            if not (root / path).exists()]


def _package_hash(root: Path) -> str:
    try:
        return package_hash(root)
    except OSError as exc:  # unreadable input is bad input, like an unreadable bundle
        raise InputError(f"{exc.filename or root}: cannot read: {exc.strerror or exc}") from None


def load_skill(path: Path | str) -> SkillPackage:
    """Load and check a skill package; raise InputError (one line) when it is unusable."""
    given = Path(path)
    if not given.exists():
        raise InputError(f"{given}: no such skill folder")
    if not given.is_dir():
        raise InputError(f"{given}: not a folder; expected a skill folder holding {SKILL_FILE}")
    root = given.resolve()
    _check_size(given, _check_links(root))
    skill, data = _skill_bytes(root)
    label = str(given / SKILL_FILE)
    text = _decode(Path(label), data)
    front = _parse_front_matter(text, label)
    name = _field(front, "name", label)
    description = _field(front, "description", label)
    _check_name(name, label)
    if not description.strip():
        raise InputError(f"{label}: front matter description is blank; say what the skill is for and when to use it")
    if not cut_sections(text):  # no unit: the first matrix would have no row
        raise InputError(f"{label}: SKILL.md has no body to compile; expected markdown after the front matter")
    files = read_unit_files(root, text, given)
    return SkillPackage(
        root=root,
        skill_text=text,
        files=files,
        front_matter=front,
        name=name,
        description=description,
        warnings=_warnings(name, description, root) + _missing_links(root, text),
        package_hash=_package_hash(root),
        skill_sha256=sha256_bytes(data),
    )
