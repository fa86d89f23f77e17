"""A new DAGSTER_HOME is set up once: compiles started at the same moment all get a working
instance (without the lock, 1 of 18 such processes died on `UNIQUE constraint failed:
alembic_version.version_num` here)."""

from __future__ import annotations

import multiprocessing

import dagster as dg  # noqa: F401  (imported before forking: the children start warm)

from deep_pipeline.cli.compile_commands import _instance


def _open_instance(home: str) -> None:
    import os

    os.environ["DAGSTER_HOME"] = home
    _instance()


def test_instances_opened_at_once_on_a_new_home_all_work(tmp_path):
    fork = multiprocessing.get_context("fork")
    failed = 0
    for trial in range(4):
        home = tmp_path / f"home{trial}"
        processes = [fork.Process(target=_open_instance, args=(str(home),)) for _ in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        failed += sum(process.exitcode != 0 for process in processes)
        assert (home / "dagster.yaml").is_file()
    assert failed == 0
