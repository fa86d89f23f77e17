"""The Kubernetes example (deploy/k8s): parsed, and held to what the code and our instance need.

No cluster and no `helm` here (nor Dagster's chart, which lives outside the package
registries), so nothing is rendered: these checks tie the values to the code's own names
(the code location, the run tag, the store variable) and to our dagster.yaml, so the two
cannot drift apart, and keep every secret out of the files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from deep_pipeline.runtime.tags import QUEUE_TAG
from deep_pipeline.secrets import PROVIDER_VARIABLES

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"
STORE_VARIABLE = "DEEP_PIPELINE_STORE"


def load(name: str) -> dict:
    return yaml.safe_load((K8S / name).read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return load("values.yaml")


@pytest.fixture(scope="module")
def deployment(values) -> dict:
    (only,) = values["dagster-user-deployments"]["deployments"]
    return only


def env_of(deployment: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in deployment["env"]}


def test_every_yaml_file_parses_to_a_mapping():
    files = sorted(K8S.glob("*.yaml"))
    assert {f.name for f in files} >= {"values.yaml", "pvc.yaml"}
    for f in files:
        assert isinstance(yaml.safe_load(f.read_text()), dict), f.name


def test_runs_go_to_the_k8s_run_launcher_on_postgres(values):
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert "k8sRunLauncher" in values["runLauncher"]["config"]
    pg = values["postgresql"]
    assert pg["enabled"] or pg["postgresqlHost"]  # the subchart, or an external server
    assert values["dagsterDaemon"]["enabled"] and values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"


def test_the_code_location_is_ours(values, deployment):
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    module = workspace["load_from"][0]["python_module"]["module_name"]
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("-m") + 1] == module == "deep_pipeline.definitions"
    assert values["dagster-user-deployments"]["enabled"]


def test_the_limits_are_those_of_our_dagster_yaml(values):
    ours = yaml.safe_load((REPO / "deep_pipeline" / "instance" / "dagster.yaml").read_text())
    concurrency = values["concurrency"]
    assert concurrency["enabled"]
    # The `llm` pool has no limit of its own: the default limit is its limit.
    assert concurrency["pools"]["defaultLimit"] == ours["concurrency"]["pools"]["default_limit"]
    limits = concurrency["runs"]["tagConcurrencyLimits"]
    assert limits == ours["concurrency"]["runs"]["tag_concurrency_limits"]
    assert [(t["key"], t["value"], t["limit"]) for t in limits] == [(QUEUE_TAG, {"applyLimitPerUniqueValue": True}, 1)]
    # The chart refuses tag limits in both places.
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert not queued.get("tagConcurrencyLimits")
    daemon = values["dagsterDaemon"]
    assert daemon["runRetries"] == {"enabled": ours["run_retries"]["enabled"], "maxRetries": ours["run_retries"]["max_retries"]}
    camel = {"enabled": "enabled", "start_timeout_seconds": "startTimeoutSeconds", "max_resume_run_attempts": "maxResumeRunAttempts",
             "poll_interval_seconds": "pollIntervalSeconds", "free_slots_after_run_end_seconds": "freeSlotsAfterRunEndSeconds"}
    assert {camel[k]: v for k, v in ours["run_monitoring"].items()} == daemon["runMonitoring"]


def test_the_store_is_one_rwx_claim_mounted_at_the_store_path_in_both_pod_kinds(values, deployment):
    pvc = load("pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    path = env_of(deployment)[STORE_VARIABLE]
    assert path and path.startswith("/") and not path.startswith(values.get("dagsterHome", "/opt/dagster/dagster_home"))

    def mounts(volumes: list, volume_mounts: list) -> set[str]:
        claims = {v["name"] for v in volumes if v.get("persistentVolumeClaim", {}).get("claimName") == pvc["metadata"]["name"]}
        return {m["mountPath"] for m in volume_mounts if m["name"] in claims}

    code_pod = mounts(deployment.get("volumes", []), deployment.get("volumeMounts", []))
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    run_pod = mounts(launcher.get("volumes", []), launcher.get("volumeMounts", []))
    if deployment.get("includeConfigInLaunchedRuns", {}).get("enabled"):
        run_pod |= code_pod  # the code location's env, secrets and volumes go into every run pod
        run_env = env_of(deployment)
    else:
        run_env = {v.split("=", 1)[0]: v.split("=", 1)[1] for v in launcher.get("envVars", []) if "=" in v}
    assert path in code_pod and path in run_pod
    assert run_env.get(STORE_VARIABLE) == path


def test_model_keys_come_from_a_secret_and_no_secret_value_is_inline(values, deployment):
    assert deployment["envSecrets"] == [{"name": "deep-pipeline-model-keys"}]
    key_names = {name for names in PROVIDER_VARIABLES.values() for name in names}
    assert not key_names & set(env_of(deployment))  # a key variable is never given a literal value
    assert "postgresqlPassword" not in values["postgresql"] and values["generatePostgresqlPasswordSecret"] is False
    for f in sorted(K8S.iterdir()):
        text = f.read_text()
        assert not re.search(r"sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{20,}|postgres(ql)?://[^\s:]+:[^\s@]+@", text), f.name
    for f in sorted(K8S.glob("*.yaml")):
        assert not list(inline_secrets(yaml.safe_load(f.read_text()))), f.name
    assert not re.search(r"(?im)^\s*(ENV|ARG)\b.*(KEY|PASSWORD|TOKEN|SECRET)\w*=", (K8S / "Dockerfile").read_text())


SECRETISH = re.compile(r"(?i)(password|api_?key|token|secret)")


def inline_secrets(node, key: str = ""):
    """Literal values given to secret-looking keys or env variables (a Secret's name is not one)."""
    if isinstance(node, dict):
        if "name" in node and "value" in node and SECRETISH.search(str(node["name"])):
            yield node["name"]  # an env entry {name: X_API_KEY, value: ...}
        for k, v in node.items():
            yield from inline_secrets(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from inline_secrets(item, key)
    elif isinstance(node, str) and SECRETISH.search(key) and not key.endswith(("SecretName", "Secret")):
        yield key


def test_the_image_installs_our_pins_and_the_chart_matches_dagster(values):
    dockerfile = (K8S / "Dockerfile").read_text()
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    assert re.search(r"pip install [^\n]*-c constraints\.txt \.", dockerfile)
    # dagster-k8s is not a dependency of ours: it is pinned at the libraries' version of our dagster.
    assert re.search(rf"dagster-k8s=={re.escape(pins['dagster-postgres'])}\b", dockerfile)
    assert f"--version {pins['dagster']}" in (K8S / "values.yaml").read_text()
