"""The skill package's markdown files as units (SPEC §4, "the package's markdown files").

SKILL.md is the first file; the others are the package's markdown files an agent is sent
to: those SKILL.md links to (relative markdown links) or names in backticks, plus every
`references/**/*.md`. Each file is cut by the very rules of core/units.py (its own front
matter is never a unit). A unit of another file carries `file` and an id naming it,
`references/guide.md#s01-usage`; SKILL.md's units keep their ids, so a single-file
compile's units, keys and decisions are exactly as before.

A package's markdown state is `Files`: path -> text, SKILL.md included. The current text
of each file is the input file with the accepted edits to it (core/history.py).

Pure: paths and texts in, units and texts out; reading the folder is the caller's.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
from collections.abc import Iterable, Mapping

from markdown_it import MarkdownIt

from deep_pipeline.core.models import SKILL_FILE, Level, Unit
from deep_pipeline.core.lines import front_matter_end
from deep_pipeline.core.units import cut_units

Files = Mapping[str, str]
MARKDOWN_SUFFIXES = (".md", ".markdown")
REFERENCES_DIR = "references/"
_MD = MarkdownIt("commonmark")


def is_markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES)


def _local_target(target: str) -> str | None:
    """A link's or code span's path inside the package, normalized; None for a URL, an anchor or an absolute path."""
    target = target.strip().split("#", 1)[0].split("?", 1)[0].strip()
    if not target or target.startswith("/") or "://" in target or target.startswith("mailto:"):
        return None
    normal = posixpath.normpath(target)
    return None if normal.startswith("..") or normal == "." else normal


def named_paths(skill_text: str) -> list[str]:
    """Every package path SKILL.md's body names: relative link targets and backtick code spans, in order."""
    body = skill_text[front_matter_end(skill_text):]
    found: list[str] = []
    for token in _MD.parse(body):
        for child in token.children or ():
            raw = child.attrGet("href") if child.type == "link_open" else (
                child.content if child.type == "code_inline" else None)
            path = _local_target(str(raw)) if raw else None
            if path is not None:
                found.append(path)
    return list(dict.fromkeys(found))


def linked_paths(skill_text: str) -> list[str]:
    """The relative markdown link targets of SKILL.md (what `validate` checks exist)."""
    body = skill_text[front_matter_end(skill_text):]
    found = [_local_target(str(child.attrGet("href"))) for token in _MD.parse(body)
             for child in token.children or () if child.type == "link_open" and child.attrGet("href")]
    return list(dict.fromkeys(p for p in found if p is not None))


def unit_files(skill_text: str, package_paths: Iterable[str]) -> list[str]:
    """The package's markdown files other than SKILL.md that are units, sorted by path."""
    present = {p for p in package_paths if is_markdown(p) and p != SKILL_FILE}
    named = {p for p in named_paths(skill_text) if p in present}
    references = {p for p in present if p.startswith(REFERENCES_DIR)}
    return sorted(named | references)


# ---------------------------------------------------------------- ids


def file_of(unit_id: str) -> str:
    """The file a unit id names: `references/guide.md#s01` -> `references/guide.md`; SKILL.md's ids name none."""
    return unit_id.split("#", 1)[0] if "#" in unit_id else SKILL_FILE


def local_id(unit_id: str) -> str:
    """The id within its file (as core/units.py cuts it)."""
    return unit_id.split("#", 1)[1] if "#" in unit_id else unit_id


def _qualified(path: str, unit: Unit) -> Unit:
    if path == SKILL_FILE:
        return unit
    section = f"{path}#{unit.section_id}" if unit.section_id else None
    return unit.model_copy(update={"unit_id": f"{path}#{unit.unit_id}", "section_id": section, "file": path})


def cut_package(files: Files, level: Level, section_id: str | None = None) -> list[Unit]:
    """Every file's sections (SKILL.md first, the others by path), or the paragraphs of one section."""
    if level == "paragraph":
        path = file_of(section_id or "")
        return [_qualified(path, u) for u in cut_units(files[path], level, local_id(section_id or ""))]
    return [_qualified(path, u) for path in ordered(files) for u in cut_units(files[path], "section")]


def ordered(files: Iterable[str]) -> list[str]:
    """SKILL.md first, then the other files by path: the order of the matrix rows and the judge's prompt."""
    paths = set(files)
    return ([SKILL_FILE] if SKILL_FILE in paths else []) + sorted(paths - {SKILL_FILE})


def units_of(units: Iterable[Unit], path: str) -> list[Unit]:
    return [u for u in units if u.file == path]


def package_sha256(files: Files) -> str:
    """The markdown state's hash: SKILL.md's own sha256 when it is the only file (as before)."""
    if set(files) == {SKILL_FILE}:
        return hashlib.sha256(files[SKILL_FILE].encode("utf-8")).hexdigest()
    digest = hashlib.sha256()
    for path in ordered(files):
        digest.update(path.encode("utf-8") + b"\0" + hashlib.sha256(files[path].encode("utf-8")).digest())
    return digest.hexdigest()


def changed_files(input_files: Files, current: Files) -> dict[str, str]:
    """The files other than SKILL.md whose current text differs from the input's."""
    return {p: t for p, t in current.items() if p != SKILL_FILE and input_files.get(p) != t}


def file_diffs(input_files: Files, changed: Files) -> dict[str, str]:
    """Each changed file's unified diff from its input text, as report.json keeps it."""
    return {path: "\n".join(difflib.unified_diff(input_files[path].splitlines(), text.splitlines(),
                                                 f"S_fast/{path}", f"S_final/{path}", lineterm=""))
            for path, text in sorted(changed.items())}
