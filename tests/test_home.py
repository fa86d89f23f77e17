"""Where the instance and the compiles live (deep_pipeline/home.py), and the one secrets
module: one rule each, the same for the CLI, the Dagster layer and the local model."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from deep_pipeline import home
from deep_pipeline.errors import InputError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)


def test_dagster_home_wins_and_is_made_absolute(tmp_path, monkeypatch, no_env):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", "rel/home")
    assert home.dagster_home() == tmp_path / "rel" / "home"
    assert home.store_root() == tmp_path / "rel" / "home" / "compiles"


def test_from_a_checkout_the_home_is_its_dagster_home_folder(no_env):
    assert home.checkout_root() == REPO
    assert home.dagster_home() == REPO / "dagster_home"


def test_the_store_override_wins_over_the_home(tmp_path, monkeypatch, no_env):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    assert home.store_root() == tmp_path / "store"


def test_an_install_without_a_checkout_asks_for_dagster_home_in_one_line(monkeypatch, capsys, no_env):
    from deep_pipeline.cli import main

    monkeypatch.setattr(home, "checkout_root", lambda: None)
    with pytest.raises(InputError, match="DAGSTER_HOME") as raised:
        home.dagster_home()
    assert "\n" not in str(raised.value)
    assert main(["status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set DAGSTER_HOME" in err, err


def test_the_local_model_server_lives_under_the_same_home(tmp_path, monkeypatch, no_env):
    from deep_pipeline.llm import local_model

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert local_model.default_home() == tmp_path
    monkeypatch.delenv("DAGSTER_HOME")
    monkeypatch.setattr(home, "checkout_root", lambda: None)
    with pytest.raises(InputError, match="DAGSTER_HOME"):  # never a home of its own (~/.cache)
        local_model.default_home()


def test_the_shipped_dagster_yaml_is_package_data_and_the_checkouts_file(monkeypatch, no_env):
    shipped = files("deep_pipeline").joinpath("instance", "dagster.yaml")
    assert shipped.is_file()
    assert home.our_dagster_yaml() == shipped.read_bytes()
    assert (REPO / "dagster_home" / "dagster.yaml").read_bytes() == shipped.read_bytes()
    monkeypatch.setattr(home, "checkout_root", lambda: None)  # an install names the file it ships
    assert home.our_dagster_yaml_name() == str(shipped)


def test_one_secret_pattern_and_one_redaction_for_text_and_bytes():
    from deep_pipeline import secrets

    env = {"MY_CREDENTIAL": "abcdefgh-1", "SOME_TOKEN": "abcdefgh-1-longer", "SHORT_KEY": "1234", "PATH": "/usr/bin/x"}
    found = secrets.secret_values(env)
    assert sorted(found) == ["abcdefgh-1", "abcdefgh-1-longer"]
    # The longer value is blanked whole even though the shorter one is a prefix of it.
    assert secrets.redact("a abcdefgh-1-longer b abcdefgh-1", found) == "a <redacted> b <redacted>"
    assert secrets.redact(b"x abcdefgh-1-longer", found) == b"x <redacted>"


def test_the_log_redaction_blanks_secret_environment_values(monkeypatch):
    from deep_pipeline.llm.client import redact

    monkeypatch.setenv("SERVICE_CREDENTIAL", "s3cr3t-value-xyz")
    assert redact("failed: s3cr3t-value-xyz refused") == "failed: <redacted> refused"


def test_one_provider_map_for_the_sandbox_the_key_messages_and_the_resource():
    from deep_pipeline.defs.resources import KEY_VARIABLES
    from deep_pipeline.llm.access import key_variable
    from deep_pipeline.rollouts.sandbox import model_env_vars
    from deep_pipeline.secrets import PROVIDER_VARIABLES

    for provider, names in PROVIDER_VARIABLES.items():
        assert key_variable(f"{provider}/some-model") == names[0]
        assert model_env_vars(f"{provider}/some-model")[: len(names)] == list(names)
    assert KEY_VARIABLES == {p: PROVIDER_VARIABLES[p][0] for p in ("anthropic", "openai", "gemini")}
