"""The compile report as one self-contained HTML page (SPEC §8).

`gather` reads a finalized compile's records (report.json, the matrices, each
iteration's records, the traces evidence points into, the latest evaluation) into one
`ReportPage`; `render` turns it into HTML with inline CSS and no script, so the file
opens anywhere, offline, and can be mailed or archived as it is. Every text taken from
the records is escaped: trace text is what an agent wrote, and untrusted.
"""

from __future__ import annotations

from pathlib import Path

from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.report.gather import gather
from deep_pipeline.report.render import render
from deep_pipeline.store import atomic_write_text

HTML_NAME = "report.html"


def default_path(cdir: CompileDir) -> Path:
    return cdir.html_report_path


def write_html_report(cdir: CompileDir, out: Path | None = None) -> Path:
    """Render the compile's page and write it atomically (default `<compile>/report.html`)."""
    path = Path(out) if out is not None else default_path(cdir)
    atomic_write_text(path, render(gather(cdir)))
    return path


__all__ = ["HTML_NAME", "default_path", "gather", "render", "write_html_report"]
