"""Registering a compile: identity (SPEC §2, §11), inputs copied, compile.json written last.

A task set (SPEC §11) of one training task and nothing held out is today's compile of one
task: same identity, same records. A larger set is checked (`check_task_set_inputs`); its
compile.json lists every task (`tasks`), and each bundle is copied under input/tasks/
(`write_task_bundles`), the first training bundle also as input/bundle.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from deep_pipeline.core.config import OPERATIONAL_SETTINGS, CompileConfig
from deep_pipeline.core.keys import compile_key
from deep_pipeline.core.tasks import TaskSet, identity_payload, single_task
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import CompileRecord, RecordedTask
from deep_pipeline.errors import InputError
from deep_pipeline.store import atomic_copy_tree, atomic_write_json, atomic_write_bytes, sha256_bytes, sha256_text


def compile_identity(package_hash: str, task_set: TaskSet | str, config: CompileConfig) -> str:
    """sha256 of `core/tasks.py` `identity_payload`: a set of one training task hashes
    `{"package", "bundle", "config"}` as compiles always did, so its key is unchanged.
    `task_set` may be one bundle's identity hash: the set of that one training task."""
    if isinstance(task_set, str):
        task_set = single_task("task", task_set)  # the name is not in the identity
    payload = json.dumps(identity_payload(package_hash, task_set, config.identity_settings()), sort_keys=True)
    return sha256_text(payload)


def check_models(config: CompileConfig, transport=None) -> None:
    """An unknown runner or model name fails before anything is registered (`transport`: where litellm runs)."""
    from deep_pipeline.engine.services import check_local_model, validate_model_name

    roles = {"judge": config.judge_model, "editor": config.editor_model}
    if config.runner in ("chat", "mini-swe-agent"):
        roles["agent"] = config.agent_model
    for role, model in roles.items():
        validate_model_name(model, f"{role}_model", getattr(config, f"{role}_api_base"), transport)
    for model in config.compare_models or ():  # the judge panel's calls go where the judge's go
        validate_model_name(model, "compare_models", config.judge_api_base, transport)
    if config.runner == "command" and config.agent_model == "local":  # the command agent is pointed at it too
        check_local_model("agent_model")
    check_key_variables(config)
    if config.runner == "command" and not config.agent_command:
        raise InputError("config: agent_command: the command runner needs an agent command template")
    if config.runner == "command":
        from deep_pipeline.rollouts.command import split_template

        split_template(config.agent_command)  # a template that cannot be split fails now, not mid-compile


def check_inputs(skill_dir: Path, bundle_path: Path, config: CompileConfig, transport=None):
    """Everything a compile needs, checked before anything is written: (skill, loaded bundle)."""
    from deep_pipeline.inputs.bundle import load_bundle
    from deep_pipeline.inputs.skill import load_skill

    skill = load_skill(Path(skill_dir))
    loaded = load_bundle(Path(bundle_path))
    check_models(config, transport)
    _check_bundle_for_runner(skill, loaded, bundle_path, config)
    return skill, loaded


def register_compile(root: Path, skill_dir: Path, bundle_path: Path | None, config: CompileConfig,
                     transport=None, task_set=None) -> CompileRecord:
    """Register (or find) the compile of this skill, bundle and config. Idempotent.

    `task_set` (inputs/tasks.py `LoadedTaskSet`, SPEC §11) instead of `bundle_path`: a set of
    one training task and nothing held out registers exactly as that bundle alone would."""
    if task_set is not None and task_set.is_one_task:
        task_set, bundle_path = None, task_set.training[0][0].path
    if task_set is None:
        skill, loaded = check_inputs(skill_dir, bundle_path, config, transport)
        # the verifier is not in the bundle's identity hash
        tasks = single_task(loaded.bundle.task_name, loaded.identity_hash)
    else:
        skill, loaded = check_task_set_inputs(skill_dir, task_set, config, transport)
        bundle_path, tasks = task_set.training[0][0].path, task_set.task_set
    identity = compile_identity(skill.package_hash, tasks, config)
    key = compile_key(skill.name, identity)
    cdir = CompileDir(root, key)
    if cdir.exists():
        return apply_operational_settings(cdir, config)
    record = CompileRecord(
        key=key,
        identity=identity,
        skill_name=skill.name,
        package_hash=skill.package_hash,
        skill_sha256=skill.skill_sha256,
        bundle_hash=loaded.bundle_hash,
        bundle_path=str(Path(bundle_path).resolve()),
        task_name=loaded.bundle.task_name,
        task_dir=str(loaded.task_dir) if loaded.task_dir else None,
        bundle_agent=loaded.bundle.agent,
        bundle_agent_model=loaded.bundle.agent_model,
        config=config,
    )
    _write_inputs(cdir, skill.root, Path(bundle_path))
    if task_set is not None:  # every bundle's copy, held-out ones for after the compile only
        record = record.model_copy(update={"tasks": write_task_bundles(cdir, task_set)})
    atomic_write_json(cdir.record_path, record)  # last: from here on the compile exists
    return record


def check_task_set_inputs(skill_dir: Path, loaded_set, config: CompileConfig, transport=None):
    """`check_inputs` for a checked task set (inputs/tasks.py `LoadedTaskSet`): the skill and
    models once, each training bundle as a compile's bundle is checked; held-out bundles are
    not a compile's to use, so nothing more is asked of them. Returns (skill, first training bundle)."""
    training = loaded_set.training
    skill, first = check_inputs(skill_dir, training[0][0].path, config, transport)
    for item, loaded in training[1:]:
        _check_bundle_for_runner(skill, loaded, item.path, config)
    return skill, first


def _check_bundle_for_runner(skill, loaded, bundle_path: Path, config: CompileConfig) -> None:
    """What the configured runner needs of a training bundle."""
    if config.runner == "command":  # a program that cannot start would fail every rollout
        from deep_pipeline.rollouts.command import check_program

        check_program(config.agent_command, task_dir=loaded.task_dir, skill_root=skill.root, skill_name=skill.name)
    if config.runner == "replay":
        from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES

        if not any(t.error_category not in MACHINE_FAULT_CATEGORIES for t in loaded.bundle.traces):
            raise InputError(f"{bundle_path}: traces: the replay runner needs at least one trace in the bundle "
                             "that the agent finished (not api_error or sandbox_setup)")


def task_records(loaded_set) -> list[RecordedTask]:
    """compile.json's `tasks` of a task set: each task's name, split, bundle and where its copy goes."""
    return [RecordedTask(task=loaded.bundle.task_name, split=item.split, bundle_path=str(Path(loaded.path).resolve()),
                         bundle_hash=loaded.bundle_hash, identity_hash=loaded.identity_hash,
                         stored=f"input/tasks/{index:02d}-{item.split}.json",
                         task_dir=str(loaded.task_dir) if loaded.task_dir else None)
            for index, (item, loaded) in enumerate(zip(loaded_set.inputs, loaded_set.bundles))]


def write_task_bundles(cdir: CompileDir, loaded_set) -> list[RecordedTask]:
    """Copy every bundle of the set, training and held-out alike, into the compile folder
    (the bytes that were hashed); held-out copies are for after the compile, never read by a step."""
    recorded = task_records(loaded_set)
    for entry, loaded in zip(recorded, loaded_set.bundles):
        data = Path(loaded.path).read_bytes()
        if sha256_bytes(data) != loaded.bundle_hash:
            raise InputError(f"{loaded.path}: the bundle changed after it was checked; run the command again")
        atomic_write_bytes(cdir.path / entry.stored, data)
    return recorded


def check_key_variables(config: CompileConfig) -> None:
    """A named key variable must hold a key now, not at the first call."""
    from deep_pipeline.llm.access import key_env_problem

    for role in ("judge", "editor", "agent"):
        if problem := key_env_problem(role, getattr(config, f"{role}_api_key_env"), getattr(config, f"{role}_api_base")):
            raise InputError(problem)


def apply_operational_settings(cdir: CompileDir, config: CompileConfig) -> CompileRecord:
    """The operational settings given now win over the stored ones: they are not the compile's
    identity, so raising a timeout and running the same command again carries it on with it."""
    record = cdir.record()
    update = {name: getattr(config, name) for name in sorted(OPERATIONAL_SETTINGS)
              if getattr(config, name) != getattr(record.config, name)}
    if not update:
        return record
    record = record.model_copy(update={"config": record.config.model_copy(update=update)})
    atomic_write_json(cdir.record_path, record)
    return record


def resume_settings(cdir: CompileDir, overrides: dict, origin: str) -> CompileRecord:
    """`resume --config`: only operational settings may change; the others are the compile's identity."""
    from pydantic import ValidationError

    for name in overrides:
        if name not in OPERATIONAL_SETTINGS:
            raise InputError(f"{origin}: {name}: resume changes only {', '.join(sorted(OPERATIONAL_SETTINGS))}; "
                             "another setting is another compile (run `compile` with it)")
    record = cdir.record()
    try:
        config = CompileConfig.model_validate({**record.config.model_dump(), **overrides})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{origin}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    check_key_variables(config)
    return apply_operational_settings(cdir, config)


def _write_inputs(cdir: CompileDir, skill_root: Path, bundle_path: Path) -> None:
    cdir.path.mkdir(parents=True, exist_ok=True)
    if cdir.input_skill.exists() and not cdir.record_path.exists():
        # A registration that crashed half-way: start its copy again.
        shutil.rmtree(cdir.input_skill)
    atomic_copy_tree(skill_root, cdir.input_skill)
    atomic_write_bytes(cdir.input_bundle, bundle_path.read_bytes())


def list_compiles(root: Path) -> list[CompileRecord]:
    root = Path(root)
    if not root.is_dir():
        return []
    records = []
    for path in sorted(root.iterdir()):
        cdir = CompileDir(root, path.name)
        if cdir.exists():
            records.append(cdir.record())
    return records


def find_compile(root: Path, key: str) -> CompileDir:
    cdir = CompileDir(root, key)
    if not cdir.exists():
        known = ", ".join(r.key for r in list_compiles(root)) or "none"
        raise InputError(f"{cdir.path}: no such compile (known: {known})")
    return cdir

