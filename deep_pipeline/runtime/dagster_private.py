"""Every private Dagster API the project uses, and only here (`from dagster._` nowhere else).

Checked against dagster 1.13.27 (`pip show dagster`). Each name, and why no public one serves:

- `make_new_run_id` (dagster._core.utils): `str(uuid.uuid4())`; kept so the id is made the way
  Dagster makes it. Public alternative: none exported (a uuid4 of our own would do).
- `merge_run_tags` (dagster._core.execution.execute_in_process): the tags `execute_in_process`
  gives a partitioned run (`dagster/partition`, the partition set's tags). Public alternative:
  `JobDefinition.execute_in_process(partition_key=...)`, which merges them itself but creates
  its run with no origin (below).
- `InMemoryJob` (dagster._core.definitions.job_base) and `execute_run`
  (dagster._core.execution.api): execute a run we created in this process, as a run worker
  does. Public alternative: `execute_in_process`, which makes its own run without an origin
  (no Runs tab, no Overview timeline), or a code server + `DagsterInstance.submit_run` (a process
  and a gRPC server per compile).
- `RemoteJobOrigin`, `RemoteRepositoryOrigin`, `InProcessCodeLocationOrigin`
  (dagster._core.remote_origin) and `LoadableTargetOrigin`
  (dagster._core.types.loadable_target_origin): the origin a code server would give a run,
  passed to the public `DagsterInstance.create_run_for_job`. Public alternative: none; only a code
  location's server makes them.
"""

from __future__ import annotations

import os

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run
from dagster._core.execution.execute_in_process import merge_run_tags
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.utils import make_new_run_id

__all__ = ["make_new_run_id", "job_origin", "partition_run_tags", "execute_created_run"]


def job_origin(location_name: str, repository_name: str, job_name: str) -> RemoteJobOrigin:
    """The origin a run of `job_name` would have if the code location's server had made it."""
    target = LoadableTargetOrigin(module_name=location_name, working_directory=os.getcwd())
    location = InProcessCodeLocationOrigin(loadable_target_origin=target, location_name=location_name)
    return RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(location, repository_name), job_name=job_name)


def partition_run_tags(job: dg.JobDefinition, partition_key: str, instance: dg.DagsterInstance,
                       tags: dict[str, str], run_config: dict) -> dict[str, str]:
    """`tags` plus those `execute_in_process(partition_key=...)` would add."""
    return merge_run_tags(job_def=job, partition_key=partition_key, tags=tags, asset_selection=None,
                          instance=instance, run_config=run_config)


def execute_created_run(job: dg.JobDefinition, run: dg.DagsterRun, instance: dg.DagsterInstance):
    """Execute an already created run of `job` in this process; the result as execute_in_process's."""
    return execute_run(InMemoryJob(job), run, instance, raise_on_error=False)
