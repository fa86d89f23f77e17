"""Runs a driver starts carry the code location's origin and say who started them.

The job's Runs tab in the UI asks for `runsOrError(filter: {pipelineName: <job>, tags:
[{key: ".dagster/repository", value: "<repository>@<location>"}]})` (dagster-webserver's
bundle, PipelineRunsRoot); the Overview timeline groups runs by their `repositoryOrigin`.
The same filter on the instance is what that page finds.
"""

from __future__ import annotations

import getpass

import dagster as dg

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from tests.compile_world import CONFIG, World, install_world, make_inputs

# `dagster-webserver -m deep_pipeline.definitions` (and workspace.yaml) name the location so
REPOSITORY_LABEL = "__repository__@deep_pipeline.definitions"
DRIVER_TAG, PARENT_RUN_TAG = "deep/driver", "deep/parent_run"
STEP_JOBS = {"prepare_inputs", "score_matrix", "run_iteration", "finalize"}


def runs_tab(instance, job: str) -> list[dg.DagsterRun]:
    """What the job's Runs tab lists: its name and the code location's label tag."""
    return instance.get_runs(dg.RunsFilter(job_name=job, tags={".dagster/repository": REPOSITORY_LABEL}))


def test_cli_driver_runs_have_the_location_origin_and_the_driver(env, scripted_llm):
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    instance = dg.DagsterInstance.ephemeral()
    skill, bundle = make_inputs(env / "dg")
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, dict(CONFIG))
    drive_compile(instance, env / "store", record.key)

    runs = instance.get_runs()
    assert {r.job_name for r in runs} == STEP_JOBS
    for job in STEP_JOBS:
        assert runs_tab(instance, job), f"the {job} job's Runs tab would say: No runs found"
    for run in runs:
        assert run.remote_job_origin is not None and run.remote_job_origin.job_name == run.job_name
        assert run.remote_job_origin.repository_origin.get_label() == REPOSITORY_LABEL
        assert run.tags[DRIVER_TAG].startswith(f"cli:{getpass.getuser()}@") and run.tags["user"] == getpass.getuser()
        assert PARENT_RUN_TAG not in run.tags
        # The runs list shows every tag that is not Dagster's own: only those a person filters by
        # (the compile, the step kind, who started it, an iteration's outcome), the run queue's lane and the sweep's claim.
        ours = {k for k in run.tags if not k.startswith(("dagster/", ".dagster/"))}
        outcome = {"deep/outcome"} if run.job_name == "run_iteration" else set()
        assert ours == {"deep/compile", "deep/queue", "deep/step", "deep/driver", "user", "deep/worker", *outcome}, sorted(run.tags)
    # a partitioned run is still a run of its partition, as execute_in_process made it
    assert {r.tags["dagster/partition"] for r in runs_tab(instance, "prepare_inputs")} == {record.key}


def test_compile_job_tags_each_nested_run_with_its_compile_run(env, scripted_llm):
    from deep_pipeline.definitions import defs

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "job")
    instance = dg.DagsterInstance.ephemeral()
    run_config = {"ops": {"compile_op": {"config": {"skill_dir": str(skill), "bundle": str(bundle), "overrides": CONFIG}}}}
    result = defs.resolve_job_def("compile").execute_in_process(instance=instance, run_config=run_config,
                                                                tags={"user": "someone"})
    assert result.success
    nested = instance.get_runs(dg.RunsFilter(tags={PARENT_RUN_TAG: result.run_id}))  # the tag's filter in the UI
    assert {r.job_name for r in nested} == STEP_JOBS
    assert len(nested) == len(instance.get_runs()) - 1  # every run but the compile run itself
    for run in nested:
        assert run.tags[DRIVER_TAG] == f"run:{result.run_id}" and run.tags["user"] == "someone"
        assert run.remote_job_origin.repository_origin.get_label() == REPOSITORY_LABEL
