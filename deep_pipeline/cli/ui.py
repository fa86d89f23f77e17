"""`make ui`: `dagster dev` that stops on Ctrl-C and SIGTERM however it was started.

`python -m deep_pipeline.cli.ui ARGS` runs `dagster dev ARGS` (the dagster beside this
interpreter) with SIGINT at its default first. A shell that starts a command in the
background (`make ui &`, a script, nohup) starts it with SIGINT ignored, exec keeps that,
and `dagster dev` gives SIGTERM the same handling as SIGINT: so it ignored both, and its
webserver, daemon and code servers ran on until killed. With SIGINT at
its default, Python raises KeyboardInterrupt on either and `dagster dev` shuts its services
down in seconds.

Beside it runs `deep-pipeline serve-reports`, so the `report_url` link on a compile's
`compile_report` opens in the browser (a `file://` link from the UI's page does not); it
gets SIGTERM when this process (then `dagster dev`) ends, whatever ended it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def exec_with_default_interrupts(argv: list[str]) -> None:
    """Replace this process with `argv`, SIGINT and SIGTERM at their defaults (never returns)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)  # a handler or SIG_IGN would outlive exec as ignored
    os.execvp(argv[0], argv)


def start_report_server() -> subprocess.Popen:
    """`deep-pipeline serve-reports` as a child that dies with this process (PR_SET_PDEATHSIG)."""
    from deep_pipeline.rollouts.guard import die_with_parent

    return subprocess.Popen([sys.executable, "-m", "deep_pipeline", "serve-reports"], stdin=subprocess.DEVNULL,
                            preexec_fn=die_with_parent)


def main(argv: list[str] | None = None) -> None:
    # Dagster's gRPC calls to the code server give up after 60 s; a loaded 2-core machine
    # answered slower than that (README, "Timeouts under load"). A value set outside wins.
    os.environ.setdefault("DAGSTER_GRPC_TIMEOUT_SECONDS", "300")
    dagster = Path(sys.executable).parent / "dagster"
    start_report_server()  # a port in use is said on stderr by the child; the UI starts all the same
    exec_with_default_interrupts([str(dagster) if dagster.is_file() else "dagster", "dev",
                                  *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
