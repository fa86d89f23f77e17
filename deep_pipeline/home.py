"""Where the Dagster instance and the compiles live: the one rule, for every process.

`$DAGSTER_HOME`, else (running from a source checkout) the checkout's `dagster_home/`;
an installed package has no such folder, so it asks for `DAGSTER_HOME` in one line.
The store is `$DEEP_PIPELINE_STORE`, else `<home>/compiles`. Our `dagster.yaml` ships
as package data (`deep_pipeline/instance/dagster.yaml`); the checkout's
`dagster_home/dagster.yaml` is a symlink to it, so `dagster dev` from a checkout and a
new home made by the CLI get the same file. `DEEP_PIPELINE_STORAGE=postgres` gives a new
home `deep_pipeline/instance/dagster-postgres.yaml` instead: the same settings on a
Postgres server named by the `DAGSTER_PG_*` variables. No Dagster import: the CLI, the
engine and the local model use this before (or without) loading Dagster.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from deep_pipeline.errors import InputError

_PACKAGE = Path(__file__).resolve().parent
HOME_VARIABLE = "DAGSTER_HOME"
STORAGE_VARIABLE = "DEEP_PIPELINE_STORAGE"
# storage -> the instance file a new home gets.
INSTANCE_FILES = {"sqlite": "dagster.yaml", "postgres": "dagster-postgres.yaml"}
# What dagster-postgres.yaml reads with `{env: ...}` (Dagster's documented names); Dagster
# itself would only fail on the first one missing, deep inside loading the instance.
POSTGRES_VARIABLES = ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOSTNAME", "DAGSTER_PG_PORT",
                      "DAGSTER_PG_DB")


def checkout_root() -> Path | None:
    """The source checkout this package runs from (an editable install), else None.

    An installed package sits in site-packages, beside other packages, with no
    pyproject.toml or dagster_home/ of ours above it.
    """
    root = _PACKAGE.parent
    if (root / "pyproject.toml").is_file() and (root / "dagster_home").is_dir():
        return root
    return None


def dagster_home() -> Path:
    """`$DAGSTER_HOME` made absolute, else the checkout's `dagster_home/`."""
    env = os.environ.get(HOME_VARIABLE)
    if env:
        return Path(env).resolve()
    root = checkout_root()
    if root is None:
        raise InputError("DAGSTER_HOME is not set: set DAGSTER_HOME to a folder for the Dagster instance "
                         "and the compiles (it is made if missing), e.g. export DAGSTER_HOME=$HOME/deep_pipeline_home")
    return (root / "dagster_home").resolve()


def storage() -> str:
    """`$DEEP_PIPELINE_STORAGE` ("sqlite", the default, or "postgres"); with postgres every
    `DAGSTER_PG_*` variable its instance file reads must be set."""
    chosen = os.environ.get(STORAGE_VARIABLE) or "sqlite"
    if chosen not in INSTANCE_FILES:
        raise InputError(f"{STORAGE_VARIABLE}={chosen!r}: expected 'sqlite' (the default) or 'postgres'")
    missing = [name for name in POSTGRES_VARIABLES if name not in os.environ] if chosen == "postgres" else []
    if missing:
        raise InputError(f"{STORAGE_VARIABLE}=postgres but {', '.join(missing)} not set: set them to the "
                         "Postgres server's user, password, host, port and database")
    return chosen


def export_dagster_home() -> Path:
    """The home, also set as `$DAGSTER_HOME` (absolute): `DagsterInstance.get()` and the
    processes we start read the variable, and Dagster refuses a relative one.

    The storage choice is checked here too, before any command opens an instance.
    """
    storage()
    home = dagster_home()
    os.environ[HOME_VARIABLE] = str(home)
    return home


def store_root() -> Path:
    """`$DEEP_PIPELINE_STORE`, else `<DAGSTER_HOME>/compiles`."""
    env = os.environ.get("DEEP_PIPELINE_STORE")
    return Path(env).resolve() if env else dagster_home() / "compiles"


def _shipped(chosen: str = "sqlite"):
    return files("deep_pipeline").joinpath("instance", INSTANCE_FILES[chosen])


def our_dagster_yaml() -> bytes:
    """The dagster.yaml we ship for the chosen storage (telemetry off, the `llm` pool, one
    run per compile; on Postgres the `DAGSTER_PG_*` server)."""
    return _shipped(storage()).read_bytes()


def our_dagster_yaml_name() -> str:
    """Where a person finds that file to copy: for SQLite the checkout's
    dagster_home/dagster.yaml (the path the README names), else the installed package's file."""
    chosen = storage()
    root = checkout_root()
    if chosen == "sqlite" and root:
        return str(root / "dagster_home" / "dagster.yaml")
    return str(_shipped(chosen))
