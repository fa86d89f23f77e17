"""Loading a script of benchmarks/ as a module, for the tests of its figures.

The scripts are not a package (they run as `python benchmarks/<name>.py`), so each test
module loads its script by path; this is the one place that knows how.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_bench(name: str) -> Iterator[ModuleType]:
    """Yield benchmarks/<name>.py as a module, then release what it holds and forget it.

    Meant for a module-scoped fixture: `yield from load_bench("bench_gate")`.
    """
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        release = getattr(module, "_release", None)  # bench_compile holds a scripted provider
        if release is not None:
            release()
        sys.modules.pop(spec.name, None)


def by_gate(rows) -> dict:
    """A benchmark's table rows by their gate's name."""
    return {row.gate: row for row in rows}
