"""A store that is not shared: a compile registered on one machine, a run on another.

The run's process sees its own store root (DEEP_PIPELINE_STORE, empty there): the step
and the loop sensor each fail with one line naming the root, the host and the compile,
and saying what to do, instead of a traceback about a missing compile.json.
"""

from __future__ import annotations

import socket

import dagster as dg
import pytest

from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.defs.sensors import compile_loop_sensor
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, make_inputs


@pytest.fixture
def elsewhere(tmp_path, monkeypatch, scripted_llm):
    """A compile registered in `machine_a/store`; this process's store is `machine_b/store` (empty)."""
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "machine_a" / "store", skill, bundle,
                              effective_config(load_deployment(), CONFIG))
    other = tmp_path / "machine_b" / "store"
    other.mkdir(parents=True)
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(other))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("compiles", [record.key])
    line = (f"the store at {other.resolve()} on host {socket.gethostname()} has no compile {record.key} "
            f"(no {record.key}/compile.json): DEEP_PIPELINE_STORE must be a filesystem every run's machine "
            "mounts at the same path (or the compile was removed)")
    return instance, record.key, line


def test_a_step_run_on_a_machine_without_the_compile_fails_with_one_line(elsewhere):
    from deep_pipeline.defs.jobs import step_defs

    instance, key, line = elsewhere
    # The code location's own resource: its root comes from DEEP_PIPELINE_STORE, as in a run pod.
    result = step_defs.resolve_job_def("prepare_inputs").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False)
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert len(failures) == 1
    data = failures[0].step_failure_data
    assert data.user_failure_data.description == line  # what the UI shows as the failure
    assert data.error.cause is None  # not Dagster's "Error occurred while executing op" wrapper
    assert data.error.message.strip().endswith(line) and "\n" not in data.error.message.strip()


def test_the_loop_sensor_skips_such_a_compile_with_the_same_line(elsewhere):
    instance, key, line = elsewhere
    with dg.build_sensor_context(instance=instance, resources={"store": CompileStoreResource()}) as context:
        result = compile_loop_sensor(context)
    assert result.run_requests == []
    assert result.skip_reason.skip_message == f"{key}: skipped: {line}"
