"""Trace importers: BenchFlow, Harbor, ATIF, mini-swe-agent, Claude Code stream-json, our own JSON.

`import_traces(paths)` detects each path's format; `parse_claude_stream` and
`steps_from_miniswe` are also used by the rollout runners on their agents' output.
"""

from deep_pipeline.traces.claude_stream import ParsedStream, parse_claude_stream
from deep_pipeline.traces.detect import FORMATS, ImportedTrace, import_sources, import_traces
from deep_pipeline.traces.miniswe import MiniSweTrajectory, exit_category, steps_from_miniswe

__all__ = [
    "FORMATS",
    "ImportedTrace",
    "MiniSweTrajectory",
    "ParsedStream",
    "exit_category",
    "import_sources",
    "import_traces",
    "parse_claude_stream",
    "steps_from_miniswe",
]
