"""The Dagster UI over a finished compile, as a person sees it.

A compile with an accepted edit (scripted model) runs through Dagster on a DAGSTER_HOME on disk;
`dagster-webserver` serves it on 127.0.0.1 and headless Chromium opens the `decision` page of
the accepted iteration: it must show the edit's diff, both scores and an evidence quote. The
lineage is checked through the webserver's GraphQL (the edges the graph is drawn from) and
shown as a screenshot. Screenshots land in test-artifacts/ui/ (gitignored; CI keeps them).

The welcome dialog ("community NUX", dagster-webserver's NUX/CommunityNux.tsx) opens unless
the browser's localStorage says it was dismissed or the server's `shouldShowNux` is false; the
test dismisses it as the dialog's own button does, with the `setNuxSeen` mutation.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.defs.pages import asset_url
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import EditRecord
from deep_pipeline.store import read_model
from tests.browser import (
    ARTIFACTS,
    REPO,
    DevToolsPage,
    chromium_binary,
    stop_group,
    wait_until,
)
from tests.compile_world import CONFIG, make_inputs
from tests.test_asset_pages import QUOTE, install_citing_world

SHOTS = ARTIFACTS / "ui"
PIPELINE = [("input_traces", "matrix/clarity"), ("matrix/clarity", "level_matrix"), ("level_matrix", "candidate_edit"),
            ("candidate_edit", "candidate_package"), ("candidate_package", "candidate_rollouts"),
            ("candidate_rollouts", "comparison"), ("comparison", "decision"), ("decision", "final_skill"),
            ("final_skill", "compile_report"), ("final_skill", "evaluation")]


@dataclass
class Served:
    url: str  # the webserver's root, no trailing slash
    cdir: CompileDir
    accepted: str  # an accepted iteration's partition key
    metadata: dict  # that decision's metadata values

    def graphql(self, query: str) -> dict:
        body = json.dumps({"query": query}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            result = json.load(answer)
        assert "errors" not in result, result
        return result["data"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/server_info", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def compile_on_disk(tmp: Path, home: Path, store: Path) -> tuple[CompileDir, str, dict]:
    """One compile through Dagster on `home` (an accept, then rejections); the accepted decision."""
    from tests.scripted_llm import install, uninstall

    llm = install()
    try:
        install_citing_world(llm)
        skill, bundle = make_inputs(tmp)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            record, _ = register_with_overrides(instance, store, skill, bundle,
                                                {**CONFIG, "runner": "chat", "section_iterations": 3})
            drive_compile(instance, store, record.key)
            found = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("decision")), limit=100)
            decisions = {r.asset_materialization.partition: {k: v.value for k, v in r.asset_materialization.metadata.items()}
                         for r in found.records}
    finally:
        uninstall(llm)
    accepted = sorted(key for key, meta in decisions.items() if meta["accepted"] == 1.0)
    assert accepted, "the scripted world accepts an edit"
    return CompileDir(store, record.key), accepted[0], decisions[accepted[0]]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    binary = shutil.which("dagster-webserver", path=str(Path(sys.executable).parent))
    assert binary, "dagster-webserver is installed with the project"
    tmp = tmp_path_factory.mktemp("ui")
    home, store = tmp / "home", tmp / "store"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")  # telemetry off, our pools
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv("DEEP_PIPELINE_STORE", str(store))
        cdir, accepted, metadata = compile_on_disk(tmp, home, store)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEEP_PIPELINE_STORE": str(store)}
    log = open(tmp / "webserver.log", "w")
    proc = subprocess.Popen([binary, "-h", "127.0.0.1", "-p", str(port), "-m", "deep_pipeline.definitions"],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("dagster-webserver to answer", lambda: answers(url) or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, (tmp / "webserver.log").read_text()[-3000:]
        yield Served(url, cdir, accepted, metadata)
    finally:
        stop_group(proc)  # the webserver and its code server, whatever happened
        log.close()


@pytest.fixture
def browser(served, tmp_path):
    served.graphql("mutation { setNuxSeen }")  # what the welcome dialog's own dismiss does
    assert served.graphql("{ shouldShowNux }")["shouldShowNux"] is False
    page = DevToolsPage(chromium_binary(), tmp_path / "profile")
    try:
        yield page
    finally:
        page.close()



ROWS = """[...document.querySelectorAll('tr')].map(tr => [...tr.children].map(td => td.innerText.trim()))
          .filter(cells => cells.length >= 2)"""


def metadata_rows(page: DevToolsPage) -> dict[str, str]:
    """The metadata table as drawn: label -> the value's text."""
    return {cells[0]: cells[1] for cells in page.evaluate(ROWS)}


def test_the_decision_page_of_an_accepted_iteration_shows_the_diff_both_scores_and_evidence(served, browser):
    browser.goto(served.url + asset_url(["decision"], served.accepted))
    browser.wait_for_text("edit_diff", "incumbent_score", "candidate_score", "evidence", QUOTE)
    rows = metadata_rows(browser)
    edit = read_model(Path(served.metadata["decision_json_path"]).parent / "edit.json", EditRecord)
    added = edit.edit.new_text.strip().splitlines()[-1]  # the unit's new line, as the editor wrote it
    assert f"+{added}" in rows["edit_diff"], rows["edit_diff"]
    assert rows["accepted"] == "1"
    incumbent, candidate = float(served.metadata["incumbent_score"]), float(served.metadata["candidate_score"])
    assert candidate > incumbent
    assert (rows["incumbent_score"], rows["candidate_score"]) == (f"{incumbent:g}", f"{candidate:g}")
    assert QUOTE in rows["evidence"] and "candidate" in rows["evidence"] and "incumbent" in rows["evidence"]
    assert "Notify me about Dagster security updates" not in browser.text(), "the welcome dialog is dismissed"
    browser.resize(1440, 4200)  # the metadata scrolls inside the page: a tall viewport shows it all
    shot = browser.screenshot(SHOTS / "decision.png")
    assert len(shot) > 50_000, "a drawn page, not a blank one"


def test_the_lineage_runs_from_the_inputs_through_the_matrix_and_the_iteration_to_the_output(served, browser):
    nodes = served.graphql("{ assetNodes { assetKey { path } dependencyKeys { path } } }")["assetNodes"]
    edges = {("/".join(dep["path"]), "/".join(node["assetKey"]["path"])) for node in nodes
             for dep in node["dependencyKeys"]}
    missing = [edge for edge in PIPELINE if edge not in edges]
    assert not missing, f"edges not in the asset graph: {missing}"

    browser.resize(1600, 1200)
    browser.goto(served.url + "/asset-groups")  # the global lineage (the left bar's "Lineage")
    # drawn as its groups, left to right in pipeline order: inputs, matrix, iteration, output, evaluation
    browser.wait_for_text("Global asset lineage", "inputs", "matrix", "iteration", "output", timeout=90)
    shot = browser.settled_screenshot(SHOTS / "lineage.png")  # the graph's layout is animated in
    assert len(shot) > 30_000, "a drawn graph, not a blank page"
