"""`inspect`, `validate`, `import-traces`, `schema`: the commands that look at inputs.

None of them calls a model or starts Dagster, so they answer in well under a second.

How `import-traces` fills the bundle: `--task-name` / `--prompt` when given; else the
task name the rollouts' result.json files agree on, and the prompt of the first
imported trace that has one (its recorded prompt, else its first user step, else for a
Harbor trial the `-p` argument of `agent/command-<n>/command.txt` or the task's
`instruction.md`; the output says which). A bundle needs both; without them the command
stops and says which option to give. `--into` adds the traces to an existing bundle and
keeps its task, prompt and task_dir; a trace of another task or agent is refused unless
`--force`. In a job folder a trial that cannot be imported is listed (stderr, one line
each) and the rest are imported; it is an error only when nothing was imported, or with
`--strict` when any trial was refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from deep_pipeline.core.models import Trace, Unit
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.bundle import TaskBundle, load_bundle, resolve_task_dir, schema_text, validate_bundle
from deep_pipeline.inputs.jsonfile import decode_utf8, read_bytes
from deep_pipeline.inputs.skill import load_skill
from deep_pipeline.store import atomic_write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    inspect = subparsers.add_parser("inspect", help="show the units of a skill: SKILL.md's and its other markdown files'")
    inspect.add_argument("skill_dir", type=Path, metavar="SKILL_DIR")
    inspect.add_argument("--level", choices=("section", "paragraph"), default="section")
    inspect.add_argument("--section", metavar="ID", help="with --level paragraph: only this section's paragraphs")
    inspect.add_argument("--json", action="store_true", help="print a JSON array of units, each naming its file")
    inspect.set_defaults(handler=inspect_command)

    validate = subparsers.add_parser("validate", help="check a skill package (and a task bundle)")
    validate.add_argument("skill_dir", type=Path, metavar="SKILL_DIR")
    validate.add_argument("--bundle", type=Path, metavar="BUNDLE")
    from deep_pipeline.cli.compile_commands import add_task_flags

    add_task_flags(validate)  # the task set `compile` would take, checked by the same rules
    validate.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    validate.set_defaults(handler=validate_command)

    imp = subparsers.add_parser("import-traces", help="import agent traces into a task bundle")
    imp.add_argument("paths", type=Path, nargs="+", metavar="PATH", help="trace files or rollout folders")
    imp.add_argument("-o", "--output", type=Path, required=True, metavar="BUNDLE", help="the bundle to write")
    imp.add_argument("--into", type=Path, metavar="EXISTING_BUNDLE", help="add the traces to this bundle")
    imp.add_argument("--json", action="store_true", help="print what was imported as one JSON object")
    imp.add_argument("--task-name", metavar="NAME")
    prompt = imp.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT")
    prompt.add_argument("--prompt-file", type=Path, metavar="FILE")
    imp.add_argument("--task-dir", type=Path, metavar="DIR", help="the task's files (stored relative to the bundle)")
    imp.add_argument("--agent", help="the agent that produced the traces")
    imp.add_argument("--agent-model", help="the model that agent ran with")
    imp.add_argument("--force", action="store_true",
                     help="replace an existing output bundle; with --into, add traces of another task or agent")
    imp.add_argument("--strict", action="store_true",
                     help="fail (write nothing) when any trial of a job folder is refused")
    imp.set_defaults(handler=import_command)

    schema = subparsers.add_parser("schema", help="print the task bundle JSON Schema")
    schema.set_defaults(handler=schema_command)


# ---------------------------------------------------------------- inspect


def units_of(files: dict[str, str], level: str, section_id: str | None = None) -> list[Unit]:
    """The units of a level, file by file (SKILL.md first) in document order; paragraphs of every
    section unless one is named (core/package.py)."""
    from deep_pipeline.core.package import cut_package

    try:
        sections = cut_package(files, "section")
        if level == "section":
            return sections
        chosen = [s for s in sections if section_id in (None, s.unit_id)]
        if section_id is not None and not chosen:
            known = ", ".join(s.unit_id for s in sections)
            raise InputError(f"no section {section_id!r}; sections are: {known}")
        return [p for section in chosen for p in cut_package(files, "paragraph", section.unit_id)]
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _row(unit: Unit) -> str:
    depth = "" if unit.heading_depth is None else str(unit.heading_depth)
    heading = unit.heading if unit.heading is not None else _first_line(unit.text)
    return f"{unit.unit_id:<32} {depth:>5} {len(unit.text):>6}  {heading}"


def _first_line(text: str, width: int = 60) -> str:
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def inspect_command(args: argparse.Namespace) -> int:
    if args.section and args.level != "paragraph":
        raise InputError("--section needs --level paragraph")
    skill = load_skill(args.skill_dir)
    units = units_of({"SKILL.md": skill.skill_text, **skill.files}, args.level, args.section)
    if args.json:  # every unit names its file, SKILL.md's too
        print(json.dumps([u.model_dump(mode="json") | {"file": u.file} for u in units], indent=2, ensure_ascii=False))
        return 0
    files = list(dict.fromkeys(u.file for u in units))
    in_files = f" in {len(files)} files" if skill.files else ""
    print(f"{skill.name}: {len(units)} {args.level} unit{'s' if len(units) != 1 else ''}{in_files}")
    print(f"{'id':<32} {'depth':>5} {'chars':>6}  heading (or first line)")
    for path in files:
        if skill.files:  # one file alone needs no name: its rows read as before
            print(f"-- {path}")
        for unit in (u for u in units if u.file == path):
            print(_row(unit))
    return 0


# ---------------------------------------------------------------- validate


def validate_command(args: argparse.Namespace) -> int:
    skill = load_skill(args.skill_dir)
    loaded = load_bundle(args.bundle) if args.bundle is not None else None  # check all before printing
    loaded_set = _task_set(args)
    if args.json:
        found = _validation(skill, loaded)
        if loaded_set is not None:
            found["task_set"] = _task_set_findings(loaded_set)
        print(json.dumps(found, ensure_ascii=False))
        return 0
    print(f"skill: {skill.name}")
    print(f"package sha256: {skill.package_hash}")
    print(f"SKILL.md sha256: {skill.skill_sha256}")
    for warning in skill.warnings:
        print(f"warning: {warning}")
    if loaded is not None:
        traces = loaded.bundle.traces
        matching = sum(1 for t in traces if t.skill_sha256 == skill.skill_sha256)
        print(f"bundle: {loaded.bundle.task_name} ({len(traces)} trace{'s' if len(traces) != 1 else ''}, "
              f"{matching} made on this SKILL.md)")
        print(f"bundle sha256: {loaded.bundle_hash}")
        if loaded.task_dir is not None:
            print(f"task_dir: {loaded.task_dir}")
    if loaded_set is not None:
        for task in _task_set_findings(loaded_set)["tasks"]:
            print(f"task: {task['task_name']} ({task['split']}, {task['traces']} trace{'s' if task['traces'] != 1 else ''}) "
                  f"{task['bundle']}")
        training, held_out = len(loaded_set.training), len(loaded_set.held_out)
        print(f"task set: {training} training, {held_out} held out: valid")
    print("ok")
    return 0


def _task_set(args: argparse.Namespace):
    """The task set the task flags name, checked as `compile` checks it; None without them."""
    from deep_pipeline.inputs.tasks import load_task_set, task_inputs

    if not (args.task or args.holdout or args.tasks is not None):
        return None
    return load_task_set(task_inputs(args.task, args.holdout, args.tasks))


def _task_set_findings(loaded_set) -> dict[str, Any]:
    return {"valid": True,
            "training": len(loaded_set.training), "held_out": len(loaded_set.held_out),
            "tasks": [{"task_name": b.bundle.task_name, "split": i.split, "bundle": str(b.path),
                       "bundle_sha256": b.bundle_hash, "traces": len(b.bundle.traces)}
                      for i, b in zip(loaded_set.inputs, loaded_set.bundles)]}


def _validation(skill, loaded) -> dict[str, Any]:
    """validate's findings as `--json` prints them: the lines of a plain run, as fields."""
    found: dict[str, Any] = {"skill": skill.name, "package_sha256": skill.package_hash,
                             "skill_sha256": skill.skill_sha256, "warnings": list(skill.warnings), "bundle": None}
    if loaded is not None:
        traces = loaded.bundle.traces
        found["bundle"] = {"task_name": loaded.bundle.task_name, "bundle_sha256": loaded.bundle_hash,
                           "traces": len(traces), "traces_on_this_skill": sum(t.skill_sha256 == skill.skill_sha256 for t in traces),
                           "task_dir": str(loaded.task_dir) if loaded.task_dir is not None else None}
    return found


# ---------------------------------------------------------------- import-traces


def _agreed(values: list[str | None]) -> str | None:
    """The one value every source that gives one agrees on, else None."""
    given = {v for v in values if v}
    return given.pop() if len(given) == 1 else None


def _prompt(args: argparse.Namespace, traces: list[Trace], bundle_prompt: str | None) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file is not None:
        return decode_utf8(read_bytes(args.prompt_file), str(args.prompt_file))
    found = bundle_prompt or next((t.prompt for t in traces if t.prompt.strip()), "")
    if not found.strip():
        raise InputError(f"{args.output}: a bundle needs a prompt and the imported traces record none "
                         "(no user step); give --prompt or --prompt-file")
    return found


def _task_dir_field(task_dir: Path | None, output: Path) -> str | None:
    if task_dir is None:
        return None
    if not task_dir.is_dir():
        raise InputError(f"{task_dir}: --task-dir is not a folder")
    return os.path.relpath(task_dir.resolve(), output.resolve().parent)


def _new_bundle(args: argparse.Namespace, imported: list[Any]) -> dict[str, Any]:
    traces = [item.trace for item in imported]
    task_name = args.task_name or _agreed([item.task_name for item in imported])
    if not task_name:
        raise InputError(f"{args.output}: a bundle needs a task name and the imported rollouts do not name "
                         "one task; give --task-name")
    return {
        "task_name": task_name,
        "prompt": _prompt(args, traces, _agreed([item.prompt for item in imported])),
        "task_dir": _task_dir_field(args.task_dir, args.output),
        "agent": args.agent or _agreed([t.agent for t in traces]),
        "agent_model": args.agent_model or _agreed([t.model for t in traces]),
        "traces": [],
    }


def _check_new_ids(imported: list[Any], existing: list[dict[str, Any]], into: Path) -> None:
    ids = {t["trace_id"] for t in existing}
    for item in imported:
        if item.trace.trace_id in ids:
            raise InputError(f"{item.source}: trace id {item.trace.trace_id!r} is already in {into}")


def _check_same_task(imported: list[Any], base: dict[str, Any], into: Path) -> None:
    """Refuse a trace the bundle's task or agent did not make (a SWE-bench run into a Harbor task's bundle)."""
    for item in imported:
        for what, theirs, ours in (("task", item.task_name, base.get("task_name")),
                                   ("agent", item.trace.agent, base.get("agent"))):
            if theirs and ours and theirs != ours:
                raise InputError(f"{item.source}: its {what} is {theirs!r}, not {into}'s {ours!r}; "
                                 "use --force to add it anyway")


def _fill_prompts(traces: list[Trace], prompt: str) -> list[Trace]:
    # A trace's prompt is the task's prompt unless its source recorded its own.
    return [t if t.prompt.strip() else t.model_copy(update={"prompt": prompt}) for t in traces]


def _check_output(output: Path) -> None:
    """Refuse an -o that names a folder, or sits under something that is not a folder."""
    try:
        if output.is_dir():
            raise InputError(f"{output}: is a folder; -o names the bundle file to write (e.g. {output / 'bundle.json'})")
        for parent in output.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise InputError(f"{output}: cannot write: {parent} is not a folder")
                break
    except OSError as exc:
        raise InputError(f"{output}: cannot write: {exc.strerror or exc}") from None


def _write_bundle(output: Path, bundle: TaskBundle) -> None:
    try:
        atomic_write_json(output, bundle.model_dump(mode="json", exclude_none=False))
    except OSError as exc:
        raise InputError(f"{output}: cannot write: {exc.strerror or exc}") from None


def _imported(args: argparse.Namespace) -> tuple[list[Any], int, int]:
    """The traces at the paths, and the counts of a job folder's trials that gave none (listed on stderr)."""
    from deep_pipeline.traces.detect import import_all

    result = import_all(args.paths)
    for skipped in result.skipped:
        print(f"{'refused' if skipped.refused else 'skipped'}: {skipped.reason}", file=sys.stderr)
    refused, others = len(result.refused), len(result.skipped) - len(result.refused)
    if not result.imported and result.skipped:
        raise InputError(f"{args.output}: nothing imported ({refused} refused, {others} skipped); nothing written")
    if args.strict and refused:
        raise InputError(f"{args.output}: --strict and {refused} trial{'s' if refused != 1 else ''} refused; "
                         "nothing written")
    return result.imported, refused, others


def import_command(args: argparse.Namespace) -> int:
    if args.into is not None and (args.task_name or args.prompt is not None or args.prompt_file or args.task_dir):
        raise InputError("--into keeps the existing bundle's task; drop --task-name/--prompt/--task-dir")
    _check_output(args.output)
    same_file = args.into is not None and args.into.resolve() == args.output.resolve()
    if args.output.exists() and not (same_file or args.force):
        raise InputError(f"{args.output}: already exists; use --into {args.output} to add to it, or --force")
    imported, refused, skipped = _imported(args)
    if args.into is not None:
        base = load_bundle(args.into).bundle.model_dump(mode="json")
        _check_new_ids(imported, base["traces"], args.into)
        if not args.force:
            _check_same_task(imported, base, args.into)
        if not same_file and base.get("task_dir") is not None:
            task_dir = resolve_task_dir(base["task_dir"], args.into, str(args.into))
            base["task_dir"] = os.path.relpath(task_dir, args.output.resolve().parent)
    else:
        base = _new_bundle(args, imported)
    traces = _fill_prompts([item.trace for item in imported], base["prompt"])
    base["traces"] = base["traces"] + [t.model_dump(mode="json") for t in traces]
    bundle: TaskBundle = validate_bundle(base, str(args.output))
    _write_bundle(args.output, bundle)
    if args.json:
        print(json.dumps({"output": str(args.output), "task_name": bundle.task_name, "imported": len(traces),
                          "traces": len(bundle.traces), "refused": refused, "skipped": skipped,
                          "notes": {item.trace.trace_id: list(item.notes) for item in imported if item.notes}},
                         ensure_ascii=False))
        return 0
    counts = f", {refused} refused, {skipped} skipped" if refused or skipped else ""
    _report(args.output, bundle, imported, counts)
    return 0


def _report(output: Path, bundle: TaskBundle, imported: list[Any], counts: str) -> None:
    n = len(imported)
    print(f"{output}: {bundle.task_name}, {n} trace{'s' if n != 1 else ''} imported "
          f"({len(bundle.traces)} in the bundle){counts}")
    for item in imported:
        for note in item.notes:
            print(f"  {item.trace.trace_id}: {note}")


def schema_command(args: argparse.Namespace) -> int:
    print(schema_text(), end="")
    return 0
