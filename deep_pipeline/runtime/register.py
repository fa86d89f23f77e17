"""Registering compiles with Dagster: a compile's `compiles` partition, a batch's entries,
and the one line that says when the instance lacks the limits our dagster.yaml sets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from deep_pipeline.defs.partitions import COMPILES
from deep_pipeline.engine.batch import load_manifest
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.records import CompileRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.runtime.tags import QUEUE_TAG

LLM_POOL = "llm"


def register_with_overrides(instance: dg.DagsterInstance, root: Path, skill_dir: Path, bundle: Path | None,
                            overrides: dict[str, Any], origin: str = "config", announce: bool = True, transport=None,
                            task_set=None) -> tuple[CompileRecord, bool]:
    """Register a compile from the deployment's settings and these overrides. Returns (record, newly created).

    `task_set` (a checked `LoadedTaskSet`) in place of `bundle`: a compile of a task set (SPEC §11).

    `announce` adds its `compiles` partition, which hands it to the loop sensor; a driver
    that carries the compile itself leaves that to `drive_compile`, which does it under its lock.
    """
    config = effective_config(load_deployment(), overrides, origin)
    existed = {p.name for p in Path(root).iterdir()} if Path(root).is_dir() else set()
    record = register_compile(root, skill_dir, bundle, config, transport, task_set=task_set)
    if announce:
        announce_compile(instance, record.key)
    return record, record.key not in existed


def announce_compile(instance: dg.DagsterInstance, key: str) -> None:
    if not instance.has_dynamic_partition(COMPILES, key):
        instance.add_dynamic_partitions(COMPILES, [key])


def instance_warning(instance: dg.DagsterInstance) -> str | None:
    """One line when the instance lacks the limits our dagster.yaml sets, else None.

    Only the CLI gives a new home our dagster.yaml: `dagster job execute` or `dagster dev`
    on a fresh home run with Dagster's defaults, without the `llm` pool limit and one run
    per compile, and nothing else would say so.
    """
    missing = []
    if not instance.event_log_storage.get_concurrency_info(LLM_POOL).limit:
        missing.append(f"no limit on the '{LLM_POOL}' pool (concurrency.pools.default_limit)")
    queue = instance.get_concurrency_config().run_queue_config
    if queue is None or not any(limit.get("key") == QUEUE_TAG for limit in queue.tag_concurrency_limits or []):
        missing.append(f"no one-run-per-compile limit (concurrency.runs.tag_concurrency_limits on '{QUEUE_TAG}')")
    if not missing:
        return None
    from deep_pipeline.home import HOME_VARIABLE, our_dagster_yaml_name

    home = os.environ.get(HOME_VARIABLE) or HOME_VARIABLE
    return (f"{home}: this Dagster instance has {' and '.join(missing)}: copy "
            f"{our_dagster_yaml_name()} to {home}/dagster.yaml, or add those settings to yours")


def register_batch(instance: dg.DagsterInstance, root: Path, manifest_path: Path, transport=None) -> list[tuple[str, bool]]:
    """Register every entry; those with a compile already are left as they are."""
    manifest = load_manifest(manifest_path)
    base = Path(manifest_path).resolve().parent
    started = []
    for i, entry in enumerate(manifest.entries):
        task_set = None
        if entry.tasks is not None:  # a task set (SPEC §11), checked as `compile --tasks` checks it
            from deep_pipeline.inputs.tasks import load_task_set, task_inputs

            task_set = load_task_set(task_inputs(None, None, base / entry.tasks))
        record, new = register_with_overrides(instance, root, base / entry.skill,
                                              base / entry.bundle if entry.bundle is not None else None,
                                              entry.overrides, origin=f"{manifest_path}: entries[{i}].overrides",
                                              transport=transport, task_set=task_set)
        started.append((record.key, new))
    return started

