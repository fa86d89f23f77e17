"""A run launcher that fails the first launch of one job, as a code server that took too long
to start did ("Timed out waiting for gRPC server to start"); every other launch is Dagster's
own. Named in a test home's dagster.yaml (tests/test_daemon.py); the file `marker`
says the failure was spent, so it fails once per home however often the daemon restarts."""

from __future__ import annotations

from pathlib import Path

from dagster import DefaultRunLauncher, Field


class FailOnceLauncher(DefaultRunLauncher):
    def __init__(self, inst_data=None, job: str = "", marker: str = ""):
        super().__init__(inst_data=inst_data)
        self._job, self._marker = job, Path(marker)

    @classmethod
    def config_type(cls):
        return {"job": Field(str), "marker": Field(str)}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def launch_run(self, context) -> None:
        if context.dagster_run.job_name == self._job and not self._marker.exists():
            self._marker.write_text(context.dagster_run.run_id)
            raise RuntimeError("injected launch failure: timed out waiting for the code server to start")
        super().launch_run(context)
