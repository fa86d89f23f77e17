"""`deep-pipeline`: the command line. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import errno
import sys

from deep_pipeline.errors import InputError, StepError

# Modules that add subcommands: each has register(subparsers).
_COMMAND_MODULES = ("deep_pipeline.cli.input_commands", "deep_pipeline.cli.compile_commands",
                    "deep_pipeline.cli.evaluate_command", "deep_pipeline.cli.report_command")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="deep-pipeline",
        description="Compile an agent skill against a task: score, edit, roll out, keep what helps.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)  # a missing module is a broken install: let it show
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    except Exception as exc:  # noqa: BLE001 - the machine's own faults get one line too
        fault = machine_fault(exc)
        if fault is None:
            raise
        print(f"deep-pipeline: step failed: {fault}; run the same command again to resume once mended", file=sys.stderr)
        return 1


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
        exc = exc.__cause__ or exc.__context__
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
