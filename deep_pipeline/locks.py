"""The one file lock (flock) every lock of the project is made of: the driver and step locks,
an evaluation's, the local model's and the model worker's, the instance's first set-up.

An flock is let go when its file is closed, so a killed holder never leaves a lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

RETRY_S = 0.05


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False, wait: bool | float = True,
              on_wait: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold an flock on `path` (created, with its folder, if missing); yields whether it is held.

    `wait`: True blocks until it is free (`on_wait` called first if it is not free now);
    False tries once; a number of seconds retries until then. The file is opened "a+": on
    NFSv4 a shared lock needs it open for reading (else EBADF).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with open(path, "a+") as handle:
        yield _acquire(handle, kind, wait, on_wait)


def _acquire(handle, kind: int, wait: bool | float, on_wait: Callable[[], None] | None) -> bool:
    deadline = time.monotonic() + (wait if not isinstance(wait, bool) else 0.0)
    while True:
        try:
            fcntl.flock(handle, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if wait is True:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(handle, kind)
                return True
            if wait is False or time.monotonic() >= deadline:
                return False
            time.sleep(RETRY_S)
