"""The line model and front matter of a markdown file of the package (SPEC §4): where lines
start, with markdown-it's own line model (`\\n`, `\\r\\n`, `\\r`), and where the body starts
after a `---` front matter. core/units.py cuts units on these offsets.
"""

from __future__ import annotations

from markdown_it.rules_core.normalize import NEWLINES_RE

_FENCE = "---"
_BLANK_CHARS = " \t\r\n"


# ---------------------------------------------------------------- line model


def line_starts(text: str) -> list[int]:
    """Offsets of every line start, with markdown-it's line model (`\\n`, `\\r\\n`, `\\r`).

    A line break at the very end of the text does not open another line, as in
    markdown-it; the empty text has no lines.
    """
    if not text:
        return []
    return [0] + [m.end() for m in NEWLINES_RE.finditer(text) if m.end() < len(text)]


def _line_text(text: str, start: int) -> tuple[str, int]:
    """The line starting at `start` without its line ending, and where the next line starts."""
    match = NEWLINES_RE.search(text, start)
    if match is None:
        return text[start:], len(text)
    return text[start : match.start()], match.end()


def _is_fence(line: str) -> bool:
    return line.rstrip(" \t") == _FENCE


def is_blank(text: str) -> bool:
    return all(ch in _BLANK_CHARS for ch in text)


# ---------------------------------------------------------------- front matter


def front_matter_end(text: str) -> int:
    """Offset where the body starts: just after the closing `---` line, or 0 without front matter.

    Raises ValueError when the first line is `---` and no later line closes it.
    """
    first, position = _line_text(text, 0)
    if not _is_fence(first):
        return 0
    while position < len(text):
        line, next_position = _line_text(text, position)
        if _is_fence(line):
            return next_position
        position = next_position
    raise ValueError("front matter is not closed: the first line is '---' and no later line is '---'")
