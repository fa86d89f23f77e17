"""Dagster instances and homes on the storage the test run selected.

`DEEP_PIPELINE_STORAGE` unset (or sqlite): what the tests always used — an ephemeral
instance, or a home with the checkout's dagster.yaml. `DEEP_PIPELINE_STORAGE=postgres`
(with the `DAGSTER_PG_*` server, e.g. from `.ci/postgres.sh start`): every instance and
home gets a database of its own on that server, created here and dropped after the test,
so tests never see each other's runs. The `dagster_storage` fixture (tests/conftest.py)
hands out a `Storages`.
"""

from __future__ import annotations

import os
import uuid
from contextlib import closing
from pathlib import Path

import dagster as dg
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SQLITE_YAML = REPO / "dagster_home" / "dagster.yaml"
POSTGRES_YAML = REPO / "deep_pipeline" / "instance" / "dagster-postgres.yaml"


def on_postgres() -> bool:
    return os.environ.get("DEEP_PIPELINE_STORAGE") == "postgres"


def on_postgres_only_for(value, kept: set) -> None:
    """Skip a parametrized case on Postgres unless `value` is one of `kept`.

    For cases that differ by their world, kill point or budget but make the same kinds of
    storage calls: the SQLite run covers every case, .ci/run's Postgres pass the ones kept
    (a whole compile each, and the pass runs beside make test on the same 2 cores).
    """
    if on_postgres() and value not in kept:
        pytest.skip(f"{value}: run on SQLite storage; on Postgres only {sorted(kept)}")


# The file a message tells a person to copy for this storage (home.our_dagster_yaml_name()).
OUR_YAML = POSTGRES_YAML if on_postgres() else SQLITE_YAML


def _server(database: str):
    import psycopg2

    connection = psycopg2.connect(user=os.environ["DAGSTER_PG_USERNAME"], password=os.environ["DAGSTER_PG_PASSWORD"],
                                  host=os.environ["DAGSTER_PG_HOSTNAME"], port=int(os.environ["DAGSTER_PG_PORT"]),
                                  dbname=database)
    # CREATE/DROP DATABASE cannot run inside a transaction (nor under `with connection`).
    connection.autocommit = True
    return connection


def postgres_yaml(database: str, ours: bool = True) -> dict:
    """Our Postgres dagster.yaml on `database` (its name written in, the server from the
    variables); without `ours`, only the storage: Dagster's defaults otherwise."""
    config = yaml.safe_load(POSTGRES_YAML.read_text())
    config["storage"]["postgres"]["postgres_db"]["db_name"] = database
    return config if ours else {"storage": config["storage"]}


class Storages:
    """Instances and homes for one test; `close()` disposes them and drops their databases."""

    def __init__(self, tmp_path: Path, monkeypatch) -> None:
        self.postgres = on_postgres()
        self._tmp = tmp_path
        self._monkeypatch = monkeypatch
        self._databases: list[str] = []
        # The server's own database, to create and drop ours from: `for_new_homes` changes
        # DAGSTER_PG_DB for the test, and a database cannot be dropped from inside itself.
        self._admin = os.environ["DAGSTER_PG_DB"] if self.postgres else ""
        self._instances: list[dg.DagsterInstance] = []

    def database(self) -> str:
        """A new empty database on the server (Postgres only)."""
        name = f"deep_test_{uuid.uuid4().hex[:16]}"
        with closing(_server(self._admin)) as connection, connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        self._databases.append(name)
        return name

    def home(self, home: Path, ours: bool = True) -> Path:
        """`home` (made) with a dagster.yaml for this storage: ours, or (not `ours`) Dagster's
        defaults — no file on SQLite, only the storage on Postgres."""
        home.mkdir(parents=True, exist_ok=True)
        if self.postgres:
            (home / "dagster.yaml").write_text(yaml.safe_dump(postgres_yaml(self.database(), ours)))
        elif ours:
            (home / "dagster.yaml").write_bytes(SQLITE_YAML.read_bytes())
        return home

    def instance(self, on_disk: bool = False) -> dg.DagsterInstance:
        """Dagster's defaults on this storage: ephemeral on SQLite (or, `on_disk`, SQLite files
        in a temp home, for what the in-memory storage lacks, e.g. pool slots), else Postgres."""
        if not self.postgres and not on_disk:
            return dg.DagsterInstance.ephemeral()
        home = self.home(self._tmp / f"instance-{len(self._instances)}", ours=False)
        instance = dg.DagsterInstance.from_config(str(home))
        self._instances.append(instance)
        return instance

    def for_new_homes(self) -> None:
        """A home the CLI makes gets our Postgres dagster.yaml, which reads the database from
        `DAGSTER_PG_DB`: point it at a database of this test's (SQLite: nothing to do)."""
        if self.postgres:
            self._monkeypatch.setenv("DAGSTER_PG_DB", self.database())

    def close(self) -> None:
        for instance in self._instances:
            instance.dispose()
        if not self._databases:
            return
        with closing(_server(self._admin)) as connection, connection.cursor() as cursor:
            for name in self._databases:
                # FORCE: a run worker or daemon the test started may still hold a connection.
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
