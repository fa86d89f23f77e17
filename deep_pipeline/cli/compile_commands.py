"""`deep-pipeline compile | resume | status`: one-shot compiles against $DAGSTER_HOME."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from deep_pipeline import home as homes

MODEL_FLAGS = ("judge_model", "editor_model", "agent_model")
JSON_HELP = "print the outcome as one JSON object on stdout (the progress lines go to stderr)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compile",
        help="compile a skill against a task (resumes when run again)",
        description="Register the compile of SKILL_DIR against the task bundle and run its steps as Dagster runs "
        "in this process until S_final and report.json are written. Running it again with the same inputs resumes.",
    )
    p.add_argument("skill_dir", metavar="SKILL_DIR", type=Path)
    add_task_flags(p)
    for flag in MODEL_FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar="M", help=f"{flag.split('_')[0]} model: 'local' or a litellm model string")
    p.add_argument("--runner", help="chat | mini-swe-agent | command | replay (default chat)")
    p.add_argument("--agent-command", metavar="TEMPLATE", help="agent CLI template for --runner command, with {prompt} {workdir} {skill_dir}")
    p.add_argument("--compare-orders", type=int, metavar="N", help="judge calls per comparison order: 2 (default) asks with the "
                   "candidate as A and as B, cancelling position bias; 1 asks once in the seeded order (the original design)")
    p.add_argument("--compare-samples", type=int, metavar="N", help="times each order is asked, 1-5 (default 1)")
    p.add_argument("--compare-max-pairs", type=int, metavar="N", help="with both orders, pairs of calls asked at most "
                   "while the verdict is unsure, 1-5 (default 3); with more than one, an edit is accepted only when "
                   "every pair's gain is above 0 (the sign test); 1 asks one pair")
    p.add_argument("--compare-model", dest="compare_models", action="append", metavar="M",
                   help="a judge panel model (repeatable, each once): pair k of a comparison is asked of the k-th "
                   "model mod the panel's size, sent where the judge's calls go; default: the judge model alone")
    p.add_argument("--max-edit-growth", type=float, metavar="FACTOR", help="reject an edit whose unit's new text is "
                   "longer than FACTOR x its old text, before any rollout (edit_too_large); default: no limit")
    p.add_argument("--face-value-regressions", dest="regressions_need_evidence", action="store_const", const=False,
                   help="count the judge's runtime regressions without a quote from a trace (the original design; "
                   "default: a regression needs valid evidence)")
    p.add_argument("--config", type=Path, metavar="FILE", help="compile settings in YAML, or TOML if FILE ends in .toml "
                   "(models, runner, rollouts, iterations, budget, compare_orders, compare_samples, compare_max_pairs, compare_models, "
                   "max_edit_growth, "
                   "regressions_need_evidence, *_api_key_env ...; see the README's table)")
    p.add_argument("--quiet", action="store_true", help="print only where S_final and the report are")
    p.add_argument("--json", action="store_true", help=JSON_HELP + "; with --estimate, the estimate's record")
    p.add_argument("--estimate", action="store_true",
                   help="check the inputs as a compile does, then print the most model calls (per role and kind) and "
                   "rollouts the compile can make under its budgets, and their cost from litellm's price map, "
                   "and stop: nothing is written, no model is called")
    p.set_defaults(handler=_compile)

    r = sub.add_parser("resume", help="carry a registered compile on from where it stopped",
                       description="Run the next steps of a registered compile in this process until it is finalized. "
                       "First, as `compile` does, it releases what a killed run left (its Dagster runs and pool slots, "
                       "agents, rollout sandboxes); a finalized compile missing report.html gets it written.")
    r.add_argument("compile_key", metavar="COMPILE")
    r.add_argument("--config", type=Path, metavar="FILE", help="YAML of the settings that are not the compile's identity, "
                   "to change before carrying on: judge_timeout_s, editor_timeout_s, agent_timeout_s, "
                   "judge_api_key_env, editor_api_key_env, agent_api_key_env, step_launch_attempts, step_retry_backoff_s")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--json", action="store_true", help=JSON_HELP)
    r.set_defaults(handler=_resume)

    s = sub.add_parser("status", help="list compiles and their state",
                       description="List the compiles in the store, one line each; with COMPILE, show its levels, "
                       "stop reasons, decisions and where its records are. A compile whose last step run failed is "
                       "'failed', with that run's id, error line and time. Reads only.")
    s.add_argument("compile_key", nargs="?", metavar="COMPILE")
    s.add_argument("--json", action="store_true", help="print the status as JSON (for scripts)")
    s.set_defaults(handler=_status)


def add_task_flags(p: argparse.ArgumentParser) -> None:
    """`--task` (repeatable), `--holdout`, `--tasks`: a compile's task set (SPEC §11)."""
    p.add_argument("--task", action="append", type=Path, metavar="BUNDLE",
                   help="task bundle JSON; repeat it for a task set of several training tasks")
    p.add_argument("--holdout", action="append", type=Path, metavar="BUNDLE",
                   help="a held-out task bundle (repeatable): checked and recorded, never used by the compile")
    p.add_argument("--tasks", type=Path, metavar="FILE", help="a task-set file instead of --task/--holdout: a YAML "
                   "list of {bundle: PATH, split: train|holdout}, paths relative to the file")


def one_task_flag(args: argparse.Namespace) -> bool:
    """Exactly one `--task` and nothing else: today's compile of one task, checked as always."""
    return len(args.task or []) == 1 and not args.holdout and args.tasks is None


def _home(create: bool = True) -> Path:
    """DAGSTER_HOME by the one rule (deep_pipeline.home), set in os.environ made absolute
    for Dagster and the processes we start.

    With `create` a new home is made and gets our dagster.yaml; a home that cannot be
    used (a file, not writable) is bad input, refused before anything is written.
    """
    from deep_pipeline.store import atomic_write_bytes, require_writable_folder

    home = homes.export_dagster_home()
    if not create:
        return home
    require_writable_folder(home, "DAGSTER_HOME")
    config = home / "dagster.yaml"
    if not config.exists():
        # A new home gets ours (telemetry off, the llm pool, one run per compile).
        atomic_write_bytes(config, homes.our_dagster_yaml())
    return home


def _no_connection_retries(record: logging.LogRecord) -> bool:
    """dagster-postgres logs each of its connection retries (a traceback-long warning) on the
    root logger; the CLI says in one line what failed once it gives up (cli.machine_fault)."""
    return not record.getMessage().startswith("Retrying failed database connection")


def _instance():
    """The instance of DAGSTER_HOME; its first-time storage setup is done once, under a lock.

    Several compiles started at once on a new home would otherwise all create and stamp
    the SQLite schemas (seen: `UNIQUE constraint failed: alembic_version.version_num`).
    """
    import dagster as dg

    from deep_pipeline.locks import file_lock

    home = _home()
    logging.getLogger().addFilter(_no_connection_retries)  # added once however often we get here
    with file_lock(home / ".setup.lock"):
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # storages are created lazily: make them now, under the lock
    return instance


def _store_root() -> Path:
    from deep_pipeline.store import require_writable_folder

    root = homes.store_root()
    require_writable_folder(root, "compile store")
    return root


def _writable_store() -> Path:
    """The compile store, after DAGSTER_HOME and the store were both found writable; neither
    is initialised yet (no dagster.yaml, no storage), so a refusal leaves nothing behind."""
    from deep_pipeline.store import require_writable_folder

    require_writable_folder(homes.export_dagster_home(), "DAGSTER_HOME")
    return _store_root()


def _overrides(args: argparse.Namespace) -> dict:
    from deep_pipeline.engine.settings import read_config_file

    overrides = read_config_file(args.config) if args.config else {}
    for flag in (*MODEL_FLAGS, "runner", "agent_command", "compare_orders", "compare_samples", "compare_max_pairs",
                 "compare_models", "max_edit_growth", "regressions_need_evidence"):
        if getattr(args, flag) is not None:
            overrides[flag] = getattr(args, flag)
    return overrides


def _compile(args: argparse.Namespace) -> int:
    from deep_pipeline.runtime.register import register_with_overrides
    from deep_pipeline.engine.compiles import check_inputs, check_task_set_inputs
    from deep_pipeline.engine.settings import effective_config, load_deployment
    from deep_pipeline.inputs.tasks import load_task_set, task_inputs

    overrides = _overrides(args)
    origin = str(args.config or "options")
    config = effective_config(load_deployment(), overrides, origin)
    # Bad input is refused before DAGSTER_HOME is touched.
    if one_task_flag(args):
        loaded_set, bundle = None, args.task[0]
        skill, loaded = check_inputs(args.skill_dir, bundle, config)
        training_tasks = 1
    else:  # a task set (SPEC §11): every bundle loaded, the set's rules checked
        loaded_set = load_task_set(task_inputs(args.task, args.holdout, args.tasks))
        skill, loaded = check_task_set_inputs(args.skill_dir, loaded_set, config)
        bundle, training_tasks = loaded_set.training[0][0].path, len(loaded_set.training)
    if args.estimate:
        every = loaded if loaded_set is None else [bundle for _, bundle in loaded_set.training]
        return _estimate(args, skill, every, config, training_tasks=training_tasks)
    root = _writable_store()  # a store we cannot write is refused before the home is initialised
    instance = _instance()
    record, new = register_with_overrides(instance, root, args.skill_dir, bundle, overrides, origin, announce=False,
                                          task_set=loaded_set)
    _say(args, f"{'registered' if new else 'resuming'} compile {record.key} in {root / record.key}")
    return _drive_here(args, instance, root, record.key)


def _estimate(args: argparse.Namespace, skill, loaded, config, training_tasks: int) -> int:
    """`compile --estimate`: the bound and its cost, from inputs already checked; nothing written."""
    from deep_pipeline.engine.estimate import estimate_compile

    found = estimate_compile(skill, loaded, config, training_tasks)
    print(found.model_dump_json(indent=2) if args.json else "\n".join(estimate_lines(found)))
    return 0


def estimate_lines(found) -> list[str]:
    """The estimate as `compile --estimate` prints it."""
    from deep_pipeline.llm.accounting import cost_text

    bound, calls, usd = found.bound, found.bound.calls_by_kind, found.cost.usd_by_kind
    tasks = f"{found.training_tasks} training task{'s' if found.training_tasks != 1 else ''}"

    def role(name: str, counted: str, kinds: tuple[str, ...]) -> str:
        model, price = found.models[name], found.prices[name]
        if model == "local":
            cost, where = "free", "local: the embedded model, free"
        else:
            known = [usd[kind] for kind in kinds]
            cost = cost_text(None if None in known else sum(known), "cost unknown")
            where = (f"{model}: not in litellm's price map" if price is None else
                     f"{model}: ${price.input_per_token * 1e6:.4g} / ${price.output_per_token * 1e6:.4g} "
                     "per 1M tokens in / out")
        return f"    {name:<7} {counted}, {cost}  [{where}]"

    agent = {"chat": role("agent", f"{calls['agent']} calls (one per chat rollout)", ("agent",)),
             "replay": "    agent   0 calls (the replay runner calls no model)"}.get(
        found.runner, f"    agent   not counted: the {found.runner} runner's agent calls its model outside the compile")
    free = all(found.models[r] == "local" for r in ("judge", "editor", "agent") if r != "agent" or found.runner == "chat")
    free = free and all(model == "local" for model in found.bound.compare_calls_by_model or ())
    total = "$0 (free: every model is the embedded one)" if free else found.cost.text
    return [
        f"estimate for {found.skill} on {tasks} ({found.task}), runner {found.runner}: the most it can make; nothing written",
        f"  rollouts     {bound.total_rollouts} ({bound.rollouts['input']} input, {bound.rollouts['candidate']} candidate; "
        f"at most {bound.iterations['section']} section and {bound.iterations['paragraph']} paragraph iterations)",
        f"  model calls  {bound.calls} when every answer is valid at its first send"
        + (f" (max_calls {found.max_calls} caps them)" if found.bound.capped else "") + ":",
        role("judge", f"{calls['column']} columns + {calls['compare']} comparisons", ("column", "compare")),
        *panel_lines(found),
        role("editor", f"{calls['edit']} edits", ("edit",)),
        agent,
        f"  worst case   {found.worst.calls} calls, {'free' if free else found.worst_cost.text}, with every answer asked {found.answer_attempts} "
        f"times and each sent {found.sends_per_answer} times",
        f"  tokens       per call's prompt ({found.token_count}): "
        + ", ".join(f"{kind} {n}" for kind, n in found.prompt_tokens.items()) + "; each answer at its role's *_max_tokens",
        f"  traces       {found.traces}",
        f"  cost         at most {total}" + (" (a role's price is unknown)" if found.cost.usd is None else ""),
        f"  max_usd      {found.max_usd:g} caps the real run: it stops (budget_exhausted) before a call that could pass it"
        if found.max_usd is not None else "  max_usd      not set: nothing caps the real run's cost but the counts above",
    ]


def panel_lines(found) -> list[str]:
    """A judge panel's share of the comparisons: each model's calls and price (core/panel.py)."""
    from deep_pipeline.llm.accounting import cost_text

    by_model = found.bound.compare_calls_by_model or {}
    lines = []
    for model, calls in by_model.items():
        price = (found.panel_prices or {}).get(model)
        each = ("free" if model == "local" else "not in litellm's price map" if price is None else
                f"${price.input_per_token * 1e6:.4g} / ${price.output_per_token * 1e6:.4g} per 1M tokens in / out")
        lines.append(f"      panel {model}: {calls} of the comparisons [{each}]")
    if lines:
        lines.append(f"      (the comparisons, judge panel: {cost_text(found.cost.usd_by_kind['compare'])})")
    return lines


def _resume(args: argparse.Namespace) -> int:
    from deep_pipeline.engine.compiles import find_compile, resume_settings
    from deep_pipeline.engine.settings import read_config_file

    _home(create=False)
    root = homes.store_root()
    cdir = find_compile(root, args.compile_key)  # an unknown compile is refused before the home is touched
    if args.config:
        resume_settings(cdir, read_config_file(args.config), str(args.config))
    root = _writable_store()
    instance = _instance()
    return _drive_here(args, instance, root, args.compile_key)


def _drive_here(args, instance, root: Path, key: str) -> int:
    from deep_pipeline.llm.accounting import cost_text
    from deep_pipeline.runtime.driver import drive_compile

    with _live_lines(args):
        report = drive_compile(instance, root, key, progress=None if args.quiet else (lambda line: _say(args, line)))
    if getattr(args, "json", False):
        print(json.dumps(_outcome(report, root, key)))
        return 0
    cost = cost_text(report.usage_total.cost_usd, "unknown cost")
    stops = ", ".join(f"{lv.level}: {lv.stop_reason}" for lv in report.levels)
    print(f"{key}: {report.status} ({stops}); {len(report.decisions)} iterations, "
          f"{sum(d.accepted for d in report.decisions)} accepted; {report.usage_total.calls} model calls, {cost}")
    print(f"S_final: {report.final_skill_dir}")
    print(f"report:  {root / key / 'report.json'}")
    print(f"UI:      {ui_command()}")
    return 0


def _outcome(report, root: Path, key: str) -> dict:
    """What `--json` prints: the lines of a plain run, as fields."""
    return {
        "compile": key, "status": report.status,
        "stop_reasons": {lv.level: lv.stop_reason for lv in report.levels},
        "iterations": len(report.decisions), "accepted": sum(d.accepted for d in report.decisions),
        "model_calls": report.usage_total.calls, "cost_usd": report.usage_total.cost_usd,
        "final_skill_dir": str(report.final_skill_dir), "report": str(root / key / "report.json"),
        "dagster_home": os.environ["DAGSTER_HOME"],
    }


def ui_command() -> str:
    """The command that opens this home's compiles in the UI, as it runs when pasted: the
    store too when it is not the home's own (else the UI would show none of them)."""
    store = os.environ.get("DEEP_PIPELINE_STORE")
    where = f"DAGSTER_HOME={os.environ['DAGSTER_HOME']}" + (f" DEEP_PIPELINE_STORE={Path(store).resolve()}" if store else "")
    return f"{where} {_dagster_command()} dev -m deep_pipeline.definitions"


def _dagster_command() -> str:
    """The `dagster` beside this interpreter: `make demo` runs the CLI from .venv without activating it,
    so a bare `dagster` would not be on the user's PATH."""
    beside = Path(sys.executable).parent / "dagster"
    return str(beside) if beside.is_file() else "dagster"


def _status(args: argparse.Namespace) -> int:
    from deep_pipeline.engine.compiles import find_compile, list_compiles
    from deep_pipeline.engine.context import CompileHandle
    from deep_pipeline.engine.status import compile_status, failure_line, format_status

    _home(create=False)  # status only reads: it creates neither the home nor an instance
    root = homes.store_root()
    if args.compile_key:
        find_compile(root, args.compile_key)
        status = compile_status(CompileHandle.open(root, args.compile_key))
        print(status.model_dump_json(indent=2) if args.json else format_status(status))
        return 0
    statuses = [compile_status(CompileHandle.open(root, r.key)) for r in list_compiles(root)]
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in statuses], indent=2))
        return 0
    if not statuses:
        print(f"no compiles in {root}")
    for s in statuses:
        accepted = sum(d.accepted for d in s.decisions)
        where = s.state if s.state == "finalized" else f"{s.state}, next: {s.next_step}"
        if s.failure:
            where += f" ({s.failure.waiting or failure_line(s.failure)})"
        print(f"{s.compile_key}\t{s.task_name}\t{len(s.decisions)} iterations, {accepted} accepted\t{where}")
    return 0


def _progress(args):
    """Where progress goes: stdout, or stderr when stdout carries `--json`'s one object."""
    return sys.stderr if getattr(args, "json", False) else sys.stdout


def _say(args, line: str) -> None:
    if not getattr(args, "quiet", False):
        stream = _progress(args)
        # On a terminal a live line may stand there unfinished: overwrite it.
        print(("\r\x1b[K" if stream.isatty() else "") + line, file=stream, flush=True)


class _LiveLine(logging.Handler):
    """engine.live on a terminal: one line, overwritten as each rollout ends or column is scored."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stdout.write("\r\x1b[K  " + self.format(record))
        sys.stdout.flush()


@contextlib.contextmanager
def _live_lines(args):
    """Live progress within a step: on a terminal an overwritten line; elsewhere the heartbeats only.

    Under --json stdout holds the one object, so the heartbeats go to stderr with the step lines.
    """
    from deep_pipeline.engine.live import heartbeats_to, listening

    if getattr(args, "quiet", False):
        yield
        return
    if sys.stdout.isatty() and not getattr(args, "json", False):
        with listening(_LiveLine()):
            yield
        return
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout  # a log, `make demo`'s tee: heartbeats only
    with heartbeats_to(lambda line: print("  " + line, file=stream, flush=True)):
        yield
