"""One driver per compile: the lock a CLI driver or a `compile` run holds, and the probe of it.

The loop sensor and a step run submitting the next step (runtime/next_run.py) only look:
a compile a driver holds is left to that driver. Apart from runtime/driver.py so that the
asset-step wrapper (below the step definitions the driver executes) can look too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.errors import InputError
from deep_pipeline.locks import file_lock

# The loop sensor's probe holds a compile's lock for an instant: a driver starting in
# that instant retries for this long before it says another driver has the compile.
PROBE_WAIT_S = 3.0


@contextlib.contextmanager
def driver_lock(ctx: CompileHandle, wait_s: float = PROBE_WAIT_S) -> Iterator[None]:
    """One driver per compile at a time (a second would race the first on every step)."""
    with file_lock(ctx.cdir.lock_path, wait=float(wait_s)) as held:
        if not held:
            raise InputError(f"{ctx.cdir.path}: another driver is running this compile")
        yield


def driven_elsewhere(ctx: CompileHandle) -> bool:
    """Whether a driver holds the compile's lock: a shared look that never waits, let go at once.

    Shared, so two probes never collide; a driver they catch retries (driver_lock).
    """
    if not ctx.cdir.lock_path.is_file():
        return False
    with file_lock(ctx.cdir.lock_path, shared=True, wait=False) as held:
        return not held  # leaving the block lets the probe's lock go
