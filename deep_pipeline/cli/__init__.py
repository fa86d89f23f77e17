"""`deep-pipeline`: the command line. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import sys

from deep_pipeline.errors import InputError, StepError

# Modules that add subcommands: each has register(subparsers).
_COMMAND_MODULES = ("deep_pipeline.cli.input_commands", "deep_pipeline.cli.compile_commands")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="deep-pipeline",
        description="Compile an agent skill against a task: score, edit, roll out, keep what helps.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
