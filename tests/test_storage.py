"""The storage switch (deep_pipeline/home.py): `DEEP_PIPELINE_STORAGE` picks the dagster.yaml a
new home gets; the Postgres file is the SQLite one plus its storage, and stays so."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from deep_pipeline import home
from deep_pipeline.errors import InputError
from tests.instances import POSTGRES_YAML, SQLITE_YAML

PG = {"DAGSTER_PG_USERNAME": "deep", "DAGSTER_PG_PASSWORD": "pw-not-a-secret", "DAGSTER_PG_HOSTNAME": "127.0.0.1",
      "DAGSTER_PG_PORT": "5432", "DAGSTER_PG_DB": "deep_pipeline"}


@pytest.fixture
def postgres_chosen(monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORAGE", "postgres")
    for name, value in PG.items():
        monkeypatch.setenv(name, value)
    return tmp_path / "home"


def test_the_postgres_dagster_yaml_is_the_sqlite_one_plus_postgres_storage():
    sqlite = yaml.safe_load(SQLITE_YAML.read_text())
    postgres = yaml.safe_load(POSTGRES_YAML.read_text())
    storage = postgres.pop("storage")
    # Every setting but the storage is the same: a change to one file needs the other.
    assert postgres == sqlite, f"{POSTGRES_YAML} and {SQLITE_YAML} differ outside `storage`"
    assert "storage" not in sqlite
    db = storage["postgres"]["postgres_db"]
    assert db.pop("scheme") == "postgresql+psycopg2"  # the driver we pin, not SQLAlchemy 2.1's default
    assert db == {field: {"env": f"DAGSTER_PG_{name}"} for field, name in
                  [("username", "USERNAME"), ("password", "PASSWORD"), ("hostname", "HOSTNAME"), ("port", "PORT"),
                   ("db_name", "DB")]}
    assert files("deep_pipeline").joinpath("instance", "dagster-postgres.yaml").read_bytes() == POSTGRES_YAML.read_bytes()


def test_sqlite_is_the_default(monkeypatch):
    monkeypatch.delenv("DEEP_PIPELINE_STORAGE", raising=False)
    assert home.storage() == "sqlite"
    assert home.our_dagster_yaml() == SQLITE_YAML.read_bytes()
    assert home.our_dagster_yaml_name() == str(SQLITE_YAML)


def test_postgres_gives_a_new_home_the_postgres_file(postgres_chosen):
    from deep_pipeline.cli.compile_commands import _home

    assert home.storage() == "postgres"
    assert _home() == postgres_chosen
    assert (postgres_chosen / "dagster.yaml").read_bytes() == POSTGRES_YAML.read_bytes()
    assert home.our_dagster_yaml_name() == str(POSTGRES_YAML)  # what the instance warning tells one to copy
    assert PG["DAGSTER_PG_PASSWORD"] not in (postgres_chosen / "dagster.yaml").read_text()


@pytest.mark.parametrize("value", ["mysql", "Postgres"])
def test_a_bad_storage_value_is_one_line_and_exit_2(value, monkeypatch, tmp_path, capsys):
    from deep_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORAGE", value)
    with pytest.raises(InputError, match="DEEP_PIPELINE_STORAGE") as raised:
        home.storage()
    assert "'sqlite'" in str(raised.value) and "'postgres'" in str(raised.value) and value in str(raised.value)
    assert main(["status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DEEP_PIPELINE_STORAGE" in err, err
    assert not (tmp_path / "home").exists()  # nothing made


def test_postgres_without_its_variables_names_the_missing_ones_and_makes_nothing(postgres_chosen, monkeypatch,
                                                                                  capsys):
    from deep_pipeline.cli import main

    monkeypatch.delenv("DAGSTER_PG_PASSWORD")
    monkeypatch.delenv("DAGSTER_PG_PORT")
    with pytest.raises(InputError, match="DAGSTER_PG_PASSWORD, DAGSTER_PG_PORT not set"):
        home.our_dagster_yaml()
    assert main(["status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DAGSTER_PG_PASSWORD, DAGSTER_PG_PORT" in err, err
    assert "DAGSTER_PG_USERNAME" not in err
    assert not postgres_chosen.exists()


@pytest.mark.slow
def test_a_postgres_server_that_does_not_answer_is_one_line_and_exit_1(postgres_chosen, monkeypatch):
    """dagster-postgres retries for ~15 s, logging each retry: the CLI says once what failed.

    A process of its own: there the retries' warnings would reach stderr (under pytest they
    go to its log capture instead)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        monkeypatch.setenv("DAGSTER_PG_PORT", str(probe.getsockname()[1]))
    examples = Path(__file__).resolve().parents[1] / "deep_pipeline" / "examples"
    done = subprocess.run([str(Path(sys.executable).parent / "deep-pipeline"), "compile", str(examples / "haiku-writer"),
                           "--task", str(examples / "haiku-task.json")], env=dict(os.environ), capture_output=True,
                          text=True, timeout=180)
    err = done.stderr.strip()
    assert done.returncode == 1, err
    assert len(err.splitlines()) == 1 and "Postgres server (DAGSTER_PG_*)" in err and "refused" in err, err
    assert PG["DAGSTER_PG_PASSWORD"] not in err
