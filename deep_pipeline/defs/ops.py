"""The non-asset jobs and their ops: start a compile, carry one to its end, start a batch.

They sit here rather than in jobs.py because `compile` drives the step jobs (runtime/driver.py
imports them): beside the step jobs they would import themselves.
"""


from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from deep_pipeline.errors import InputError
from deep_pipeline.inputs.tasks import load_task_set, task_inputs
from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_batch, register_with_overrides
from deep_pipeline.runtime.sweep import process_tags
from deep_pipeline.defs.resources import CompileDefaultsResource, CompileStoreResource


class CompileRequest(dg.Config):
    skill_dir: str = Field(description="The skill folder (holds SKILL.md)")
    bundle: str | None = Field(default=None, description="The task bundle JSON (or `tasks`)")
    tasks: str | None = Field(default=None, description="A task-set file (YAML: bundles with split train|holdout, "
                              "SPEC §11), in place of `bundle`")
    overrides: dict[str, Any] = Field(default_factory=dict, description="CompileConfig fields: models, runner, SPEC constants")


class BatchRequest(dg.Config):
    manifest: str = Field(default="batch.yaml", description="The batch manifest (YAML)")


def _register(context: dg.OpExecutionContext, config: CompileRequest, store: CompileStoreResource,
              defaults: CompileDefaultsResource, announce: bool = True):
    overrides = {**defaults.overrides(), **config.overrides}
    if (config.bundle is None) == (config.tasks is None):
        raise InputError("run config: give one of `bundle` (a task bundle) and `tasks` (a task-set file)")
    task_set = None
    if config.tasks is not None:  # checked as `compile --tasks` checks it
        task_set = load_task_set(task_inputs(None, None, Path(config.tasks)))
    record, new = register_with_overrides(context.instance, store.root_path(), Path(config.skill_dir),
                                          Path(config.bundle) if config.bundle else None, overrides,
                                          "run config: overrides", announce=announce, transport=store.transport(),
                                          task_set=task_set)
    context.log.info(f"{'registered' if new else 'found existing'} compile {record.key}")
    context.add_output_metadata({"compile": record.key, "new": new, "folder": str(store.root_path() / record.key)})
    return record


@dg.op(description="Register a compile; the loop sensor carries it on.")
def start_compile_op(context: dg.OpExecutionContext, config: CompileRequest, store: CompileStoreResource,
                     defaults: CompileDefaultsResource) -> str:
    return _register(context, config, store, defaults).key


@dg.op(description="Register a compile and run its steps as nested runs until it is finalized.")
def compile_op(context: dg.OpExecutionContext, config: CompileRequest, store: CompileStoreResource,
               defaults: CompileDefaultsResource) -> str:
    # This run drives the compile: a kill -9 of its process is noticed by the next driver too.
    context.instance.add_run_tags(context.run_id, process_tags(context.run_id))
    record = _register(context, config, store, defaults, announce=False)
    report = drive_compile(context.instance, store.root_path(), record.key, progress=context.log.info, parent=context.run)
    context.log.info(f"{record.key}: {report.status}; S_final at {report.final_skill_dir}")
    return record.key


@dg.op(description="Register a compile for each manifest entry whose skill + bundle + config has none yet.")
def start_batch_op(context: dg.OpExecutionContext, config: BatchRequest, store: CompileStoreResource) -> list[str]:
    started = register_batch(context.instance, store.root_path(), Path(config.manifest), store.transport())
    for key, new in started:
        context.log.info(f"{key}: {'started' if new else 'exists'}")
    return [key for key, new in started if new]


# The op jobs run their one op in the run's own process (in_process_executor): the default
# multiprocess executor spawns a second process per run, whose imports cost ~3 CPU-s (DESIGN).
@dg.job(description="Register a compile (skill + task bundle or task set + overrides) for the loop sensor to carry on.",
        executor_def=dg.in_process_executor)
def start_compile():
    start_compile_op()


@dg.job(name="compile", description="Register a compile and carry it to its end in this run (no daemon needed).",
        executor_def=dg.in_process_executor)
def compile_job():
    compile_op()


@dg.job(description="Start a compile for each entry of a batch manifest that has none yet.",
        executor_def=dg.in_process_executor)
def start_batch():
    start_batch_op()
