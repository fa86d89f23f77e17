"""`deep-pipeline`: the command line. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import atexit
import errno
import os
import sys
import threading

from deep_pipeline.errors import InputError, StepError, one_line

# Modules that add subcommands: each has register(subparsers).
_COMMAND_MODULES = ("deep_pipeline.cli.input_commands", "deep_pipeline.cli.compile_commands",
                    "deep_pipeline.cli.evaluate_command", "deep_pipeline.cli.report_command")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from deep_pipeline import __version__

    parser = argparse.ArgumentParser(
        prog="deep-pipeline",
        description="Compile an agent skill against a task: score, edit, roll out, keep what helps.",
    )
    parser.add_argument("--version", action="version", version=f"deep-pipeline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)  # a missing module is a broken install: let it show
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stderr = sys.stderr
    sys.stderr = quiet = _WithoutDagsterLogFailures(stderr)
    try:
        code = _run(args)
    finally:
        sys.stderr = stderr
    if code == 0 and quiet.dropped:  # the command went on: say once what Dagster could not store
        print(f"deep-pipeline: warning: {len(quiet.dropped)} log line(s) were not stored in the Dagster event log "
              f"({one_line(quiet.dropped[0].splitlines()[0], 200)})", file=sys.stderr)
    return code


class _WithoutDagsterLogFailures:
    """sys.stderr without Dagster's report of a log line it could not store.

    Dagster writes that report (the SQL and its parameters, 4-6 lines on a full disk)
    straight to sys.stderr, before the step fails; the command's own one line says
    what failed. Each report is one write() starting with DAGSTER_LOG_FAILURE.
    """

    def __init__(self, stream) -> None:
        self._stream = stream
        self.dropped: list[str] = []

    def write(self, text: str) -> int:
        if text.startswith(DAGSTER_LOG_FAILURE):
            self.dropped.append(text)
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


DAGSTER_LOG_FAILURE = "Exception while writing logger call to event log"


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.handler(args) or 0)
    except InputError as exc:
        print(f"deep-pipeline: error: {exc}", file=sys.stderr)
        return 2
    except StepError as exc:
        # Not bad input: a step could not go on (a model, an agent, a vanished folder).
        print(f"deep-pipeline: step failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("deep-pipeline: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): what it did not read is not a failed step.
        # stdout is pointed at /dev/null so the exit's flush does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a reader that stopped early
    except Exception as exc:  # noqa: BLE001 - the machine's own faults get one line too
        fault = machine_fault(exc)
        if fault is None:
            raise
        print(f"deep-pipeline: step failed: {fault}; run the same command again to resume once mended", file=sys.stderr)
        return 1


def entry() -> None:
    """The console script: `main()`, then a quick exit.

    Tearing down litellm's and Dagster's module graphs at interpreter exit took 2 s on this
    machine (4-6 s when busy) and does nothing for us: after what exit runs anyway (the
    threads' joins, the atexit handlers, among them the local model server's stop) we leave.
    """
    code = main()
    threading._shutdown()  # private, but exactly what the interpreter runs first at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to tell
            pass
    os._exit(code)


_FULL = (errno.ENOSPC, errno.EDQUOT)


def machine_fault(exc: BaseException) -> str | None:
    """One line for a fault of the machine (a full disk, a file system gone read-only), else None.

    Such errors surface wrapped (Dagster, SQLAlchemy), so the whole cause chain is read.
    Every record is written atomically, so the compile resumes once the fault is mended.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            where = f"{exc.filename}: " if exc.filename else ""
            what = "no space left on device" if exc.errno in _FULL else (exc.strerror or str(exc)).lower()
            return f"{where}{what}"
        text = str(exc)
        if "database or disk is full" in text or "disk I/O error" in text:
            return "the Dagster storage in DAGSTER_HOME: no space left on device (or a disk I/O error)"
        if type(exc).__name__ == "DagsterPostgresException":  # dagster-postgres gave up connecting
            return f"the Dagster instance's Postgres server (DAGSTER_PG_*): {_root_line(exc)}"
        exc = exc.__cause__ or exc.__context__
    return None


def _root_line(exc: BaseException) -> str:
    """The first line of the innermost cause: the driver's own words ("connection refused")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


if __name__ == "__main__":  # pragma: no cover
    entry()
