"""Shared test set-up.

The Dagster definitions are loaded once per process, as `dagster dev` or a run worker
does; `ProviderKeysResource.from_environment()` binds the provider keys set at that
moment. Load them here, before any test sets a dummy key with monkeypatch, so no
test's key outlives it inside the definitions of later tests.

Fixtures every test module may use are defined here, once, rather than imported by
name into each module (which linters read as an unused import).
"""

import os

import deep_pipeline.definitions  # noqa: F401  (first: see above)

import pytest

# A model worker the tests' runs start (each test has its own home) lives through its test:
# under CI's load a daemon's steps came more than 15 s apart, and a worker that idled out
# between them was started again (litellm's import, 5 CPU-s) 29 times in one run. The
# fixture below stops it when its test ends; one a test left outside tmp_path idles out.
os.environ.setdefault("DEEP_PIPELINE_MODEL_WORKER_IDLE_S", "300")


@pytest.fixture(autouse=True)
def _no_local_model_server_outlives_its_test(request):
    """Stop every local model server and model worker a test's homes started (a server is
    340 MB, serving until SIGTERM by design: it is shared by a home's runs). A CLI compile with
    the command runner and `agent_model: local` starts one in its own session, so the test's
    process cleanup never reaches it; left running, a suite's worth of them exhausted the
    machine's memory. Found by its recorded pid and command line, not an HTTP probe: a busy
    server answers late."""
    # Asked for before the test, so tmp_path is torn down after this fixture, not before.
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    for state in tmp_path.rglob("local_model/server.json") if tmp_path is not None else ():
        stop_recorded_server(state, b"deep_pipeline.llm.local_server")
    for state in tmp_path.rglob("model_worker/*.json") if tmp_path is not None else ():
        stop_recorded_server(state, str(state).encode())  # its command line names its state file


def stop_recorded_server(state, marker: bytes) -> None:
    """SIGKILL the process whose pid `state` records, if its command line holds `marker`."""
    import json
    import signal

    try:
        pid = json.loads(state.read_text())["pid"]
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError, KeyError):
        return  # gone already, or never started
    if marker in cmdline:
        os.kill(pid, signal.SIGKILL)  # nothing of it is kept: the test's home goes with it


def pytest_collection_modifyitems(items):
    """Files holding slow tests first, the rest after, each file's tests kept together and in
    order. `make test` hands whole files to its workers in this order (pytest-xdist
    --dist loadfile): the long crash and daemon files start at once and the short files fill
    in around them, rather than a long file starting last and running on alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the collection's order otherwise


@pytest.fixture
def scripted_llm(monkeypatch):
    """A fresh scripted litellm provider for one test (tests/scripted_llm.py), unregistered afterwards."""
    # Imported here, not above: it loads litellm (seconds), which tests without a model skip.
    from tests.scripted_llm import install, uninstall

    # The provider lives in this process: no send may go to a model worker (llm/transport.py).
    monkeypatch.setenv("DEEP_PIPELINE_MODEL_WORKER", "0")
    provider = install()
    yield provider
    uninstall(provider)


@pytest.fixture
def fast_backoff(monkeypatch):
    """Transient model failures resent after about a millisecond instead of 1, 2, 4, 8 s, for
    tests that fail calls on purpose through a whole compile (its clients are made inside)."""
    monkeypatch.setattr("deep_pipeline.llm.client.BACKOFF_S", 0.001)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A test's own DAGSTER_HOME (`<tmp>/home`, created) and compile store (`<tmp>/store`)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    (tmp_path / "home").mkdir()
    return tmp_path


@pytest.fixture
def dagster_storage(tmp_path, monkeypatch):
    """Instances and homes on the storage this test run selected (tests/instances.py):
    SQLite as always, or with DEEP_PIPELINE_STORAGE=postgres a database of their own."""
    from tests.instances import Storages

    storages = Storages(tmp_path, monkeypatch)
    yield storages
    storages.close()


@pytest.fixture(scope="session")
def crash_reference(tmp_path_factory):
    """The crash world's uninterrupted compile (13 model answers, 2 input and 2 candidate
    rollouts), made once for the session's crash files (tests/crash_harness.session_reference)."""
    from tests.crash_harness import session_reference

    return session_reference(tmp_path_factory)
