"""`deep-pipeline report`: the compile as one self-contained HTML page (SPEC §8).

The compile descends (two rejections at section level, then an accepted paragraph edit),
so both levels have matrices; the scripted comparator quotes the traces, and the bundle's
traces hold a `<script>` the page must show as text. The page is checked twice: parsed
as written (html.parser, fast), and as headless Chromium left it after loading, with a
screenshot kept under test-artifacts/report_html/ at the repo root (gitignored).
"""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from deep_pipeline.cli import main
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.records import Report
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.report import gather, render, write_html_report
from deep_pipeline.store import read_model
from tests.browser import chromium, chromium_binary
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "report_html"
SCRIPT = "<script>alert(1)</script>"
STEP_TEXT = f"Before the quote. {SCRIPT} shipped the parser. After the quote."


class QuotingWorld(World):
    """The compile world, with a reason per cell and comparisons that quote the traces."""

    def judge(self, request) -> dict:
        answer = super().judge(request)
        if "score_a" not in answer:
            for unit_id, cell in answer.items():
                cell["reason"] = f"{unit_id}: {cell['reason']}"
        return answer

    def _compare(self, request) -> dict:
        answer = super()._compare(request)
        a_text = request.text.split("<<version A>>", 1)[1].split("<</version A>>", 1)[0]
        cand, inc = ("a", "b") if MARK in a_text else ("b", "a")
        answer[f"evidence_{cand}"] = [{"trace_id": f"{cand.upper()}1", "step": 2, "quote": SCRIPT}]
        answer[f"evidence_{inc}"] = [{"trace_id": f"{inc.upper()}1", "step": 2, "quote": "shipped the parser"}]
        return answer


def descent_world() -> QuotingWorld:
    # s02-steps/actionability: no edit helps at section level, so the compile descends into
    # s02-steps' paragraphs, where the edit of s02-steps-p01 is accepted.
    return QuotingWorld(low={("s02-steps", "actionability"): 2, ("s02-steps-p01", "actionability"): 2},
                        compare={("s02-steps", "actionability"): (2, 2)})


def quoting_inputs(tmp: Path) -> tuple[Path, Path]:
    skill, bundle = make_inputs(tmp)
    data = json.loads(bundle.read_text())
    for trace in data["traces"]:
        trace["steps"][1]["text"] = STEP_TEXT
    bundle.write_text(json.dumps(data))
    return skill, bundle


@pytest.fixture(scope="module")
def descended(tmp_path_factory) -> CompileDir:
    """A finished compile with a descent, made once for the module (its own scripted provider)."""
    from tests.scripted_llm import install, uninstall

    tmp = tmp_path_factory.mktemp("report")
    provider = install()
    try:
        install_world(provider, descent_world())
        skill, bundle = quoting_inputs(tmp)
        record = register_compile(tmp / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
        ctx = CompileHandle.open(tmp / "store", record.key)
        run_steps(ctx, run_step)
    finally:
        uninstall(provider)
    return ctx.cdir


# -- a small DOM, from html.parser -------------------------------------------------------
VOID = {"meta", "br", "link", "img", "input", "hr", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: Node | None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if ((tag is None or child.tag == tag) and (cls is None or cls in child.classes())
                        and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())):
                    found.append(child)
                found.extend(child.all(tag, cls, **attrs))
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs) -> Node:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, (tag, cls, attrs, len(found))
        return found[0]


class Tree(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#document", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(html: str) -> Node:
    tree = Tree()
    tree.feed(html)
    tree.close()
    return tree.root


def check_page(dom: Node, report: Report) -> None:
    """The page's parts, whichever way it was read (as written, or as Chromium left it)."""
    # Heatmaps: both levels, first and last matrix of each, a coloured cell per (unit, dimension).
    levels = [n.attrs["data-level"] for n in dom.one("section", id="matrices").all("div", cls="level")]
    assert levels == ["section", "paragraph"]
    figures = {f.attrs["data-matrix"]: f for f in dom.all("figure")}
    assert set(figures) == {"section-m00", "section-m01", "paragraph-m00", "paragraph-m01"}
    section = figures["section-m00"]
    assert len(section.all("td", cls="cell")) == 3 * 5  # three sections (the title merges into the first), five dimensions
    assert len(figures["paragraph-m00"].all("td", cls="cell")) == 2 * 5
    row = next(tr for tr in section.all("tr") if tr.all("th") and tr.all("th")[0].text() == "s02-steps")
    low = row.all("td")[1]  # actionability, the second dimension
    assert "s2" in low.classes() and low.text() == "2"
    assert low.attrs["title"].startswith("s02-steps: scripted actionability")
    assert all(td.attrs.get("title") for f in figures.values() for td in f.all("td", cls="cell"))
    assert "s5" in figures["section-m00"].all("td", cls="cell")[0].classes()

    # The timeline: numbered across levels, outcome, reason, delta, per-call scores, orders.
    rows = dom.one("table", cls="timeline").one("tbody").all("tr")
    assert [r.attrs["id"] for r in rows] == ["decision-1", "decision-2", "decision-3"]
    assert [r.attrs["class"] for r in rows] == ["rejected", "rejected", "accepted"]
    cells = {td.attrs["class"]: td.text() for td in rows[2].all("td")}
    assert cells["iteration"] == "paragraph/i00" and cells["coordinate"] == "s02-steps-p01/actionability"
    assert cells["reason"] == "target_improved_without_runtime_regression" and cells["delta"] == "+2.00"
    assert sorted(cells["calls"].split("; ")) == ["A: 2 → 4", "B: 2 → 4"]
    assert cells["disagree"] == "no" and cells["scores"] == "2 → 4"
    assert cells["skill-use"].startswith("n/a")  # the replay runner's traces show no tool calls
    assert {td.attrs["class"]: td.text() for td in rows[0].all("td")}["reason"] == "target_cell_did_not_improve"

    # The diff S_fast -> S_final.
    diff = dom.one("section", id="diff").one("pre", cls="diff")
    assert [s.text() for s in diff.all("span", cls="del")] == ["-Group them by project and write one line each."]
    assert [s.text() for s in diff.all("span", cls="add")] == [f"+{MARK}-s02-steps-p01 attempt 3: do the steps one by one."]

    # Evidence: the accepted iteration's quotes with their trace steps, for both sides.
    block = dom.one("article", id="evidence-3")
    candidate = block.one("tr", cls="candidate").all("td")
    assert [td.text() for td in candidate[:4]] == ["candidate", "paragraph-i00-r0", "2", SCRIPT]
    assert candidate[4].text() == STEP_TEXT and candidate[4].one("mark").text() == SCRIPT
    incumbent = block.one("tr", cls="incumbent").all("td")
    assert [td.text() for td in incumbent[1:4]] == ["t0", "2", "shipped the parser"]
    assert incumbent[4].one("mark").text() == "shipped the parser"

    # Tokens and cost per role, and the totals.
    usage = {tr.one("th").text(): [td.text() for td in tr.all("td")] for tr in dom.one("table", cls="usage").all("tr")
             if tr.all("th") and tr.parent.tag == "tbody"}
    assert set(usage) == {*report.usage_by_role, "total"} and {"judge", "editor"} <= set(usage)
    assert usage["judge"][:2] == ["scripted/judge", str(report.usage_by_role["judge"].calls)]
    assert usage["total"][1] == str(report.usage_total.calls)
    assert usage["total"][3] == str(report.usage_total.prompt_tokens)

    assert "Not evaluated" in dom.one("section", id="evaluation").text()
    assert not dom.all("script"), "the page runs no script, and no trace text became one"


def report_of(cdir: CompileDir) -> Report:
    return read_model(cdir.report_path, Report)


def test_page_shows_both_levels_timeline_diff_evidence_and_usage(descended):
    check_page(parse(render(gather(descended))), report_of(descended))


def test_each_decisions_edit_is_shown_accepted_or_not_with_a_chart_of_scores(descended):
    # A rejected candidate's text is on the page too, and a chart shows the scores
    dom = parse(render(gather(descended)))
    edits = dom.one("section", id="edits").all("article", cls="edit")
    assert [(e.attrs["id"], e.attrs["data-outcome"]) for e in edits] == [
        ("edit-1", "rejected"), ("edit-2", "rejected"), ("edit-3", "accepted")]
    for block in edits:  # each candidate's text as a diff of its unit, rejected ones too
        added = [s.text() for s in block.one("pre", cls="diff").all("span", cls="add")]
        assert any(f"{MARK}-" in line for line in added), block.attrs["id"]
    assert [s.text() for s in edits[2].one("pre", cls="diff").all("span", cls="add")][-1] == \
        f"+{MARK}-s02-steps-p01 attempt 3: do the steps one by one."
    marks = dom.one("section", id="chart").one("svg").all("g")
    report = report_of(descended)
    compared = [n for n, d in enumerate(report.decisions, start=1) if d.candidate_score is not None]
    assert [int(g.attrs["data-iteration"]) for g in marks] == compared and compared
    assert marks[-1].attrs["class"] == "accepted" and "2 → 4" in marks[-1].one("title").text()


def test_a_trace_quote_holding_a_script_is_escaped(descended):
    html = render(gather(descended))
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html and "src=" not in html  # nothing fetched


# -- in a real browser -------------------------------------------------------------------
def test_chromium_renders_the_page(descended, tmp_path):
    binary = chromium_binary()
    page = write_html_report(descended, tmp_path / "report.html")
    url = page.resolve().as_uri()
    dom = chromium(binary, tmp_path / "profile", "--dump-dom", url=url).stdout
    check_page(parse(dom), report_of(descended))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    chromium(binary, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,3400", url=url)
    shutil.copy(page, ARTIFACTS / "report.html")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, "a screenshot of a drawn page, not a blank one"


# -- the command and the asset -----------------------------------------------------------
@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    def use(store: Path) -> None:
        monkeypatch.setenv("DEEP_PIPELINE_STORE", str(store))
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return use


def test_cli_writes_the_page_into_the_compile_folder_or_to_o(descended, cli_env, tmp_path, capsys):
    cli_env(descended.root)
    default = descended.path / "report.html"
    default.unlink(missing_ok=True)
    assert main(["report", descended.key]) == 0
    assert capsys.readouterr().out.strip() == str(default)
    check_page(parse(default.read_text(encoding="utf-8")), report_of(descended))

    out = tmp_path / "out" / "page.html"
    assert main(["report", descended.key, "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == default.read_text(encoding="utf-8")
    assert not (tmp_path / "home").exists(), "report only reads: no Dagster home is made"


def test_cli_refuses_an_unknown_or_unfinished_compile_and_a_folder_as_output(descended, cli_env, tmp_path, capsys,
                                                                             scripted_llm):
    install_world(scripted_llm, descent_world())
    skill, bundle = quoting_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    cli_env(tmp_path / "store")
    capsys.readouterr()
    assert main(["report", record.key]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not finalized" in err[0] and record.key in err[0]
    assert not (tmp_path / "store" / record.key / "report.html").exists()

    assert main(["report", "no-such-compile"]) == 2
    assert "no such compile" in capsys.readouterr().err

    cli_env(descended.root)
    assert main(["report", descended.key, "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_report_help_names_the_default_output(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: <compile folder>/report.html)" in out and "[-o FILE] [--json] COMPILE" in out


def test_the_compile_report_asset_writes_the_page_and_links_it(tmp_path, monkeypatch, scripted_llm):
    import dagster as dg

    from deep_pipeline.runtime.driver import drive_compile as dagster_drive
    from deep_pipeline.runtime.register import register_with_overrides

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))  # where the step runs find the compile
    monkeypatch.setenv("DEEP_PIPELINE_REPORT_URL", "https://reports.example/dp/")  # a deployment's own server
    (tmp_path / "home").mkdir()
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    record, _ = register_with_overrides(instance, tmp_path / "store", skill, bundle, dict(CONFIG))
    dagster_drive(instance, tmp_path / "store", record.key)

    events = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("compile_report")), limit=5)
    metadata = events.records[0].asset_materialization.metadata
    page = Path(metadata["report_html"].value)
    assert page == tmp_path / "store" / record.key / "report.html"
    html = page.read_text(encoding="utf-8")
    assert 'id="timeline"' in html and "section-m00" in html and f"+{MARK}-s02-steps" in html
    # The UI shows a url value as a link it opens (a browser never opens file:// from the UI's page)
    assert isinstance(metadata["report_url"], dg.UrlMetadataValue)
    assert metadata["report_url"].value == f"https://reports.example/dp/{record.key}/report.html"


def test_the_report_server_serves_each_report_and_nothing_else_of_a_compile(tmp_path, monkeypatch):
    import threading
    import urllib.error
    import urllib.request

    from deep_pipeline.report.serve import report_server, report_url

    store = tmp_path / "store"
    (store / "tidy-abc123").mkdir(parents=True)
    (store / "tidy-abc123" / "report.html").write_text("<p>the page</p>")
    (store / "tidy-abc123" / "calls.jsonl").write_text("{}")
    (store / "unfinished-def456").mkdir()
    (tmp_path / "report.html").write_text("outside the store")
    server = report_server(store, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("DEEP_PIPELINE_REPORT_URL", base)

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, ""

    try:
        assert get(report_url("tidy-abc123").removeprefix(base)) == (200, "<p>the page</p>")
        status, index = get("/")
        assert status == 200 and "tidy-abc123/report.html" in index and "unfinished" not in index
        for refused in ("/tidy-abc123/calls.jsonl", "/unfinished-def456/report.html", "/../report.html",
                        "/%2e%2e/report.html", "/tidy-abc123/../tidy-abc123/report.html"):
            assert get(refused)[0] == 404, refused
    finally:
        server.shutdown()
        server.server_close()


def test_the_latest_evaluation_is_shown_with_both_rates_intervals_and_the_difference(tmp_path, scripted_llm):
    from deep_pipeline.engine.evaluation import evaluate
    from tests.test_evaluate import VERIFIER, compiled

    cdir, _ = compiled(tmp_path, scripted_llm)
    evaluate(cdir, verifier=VERIFIER, rollouts=1)
    evaluate(cdir, verifier=VERIFIER, rollouts=2)  # the latest: N=2
    section = parse(render(gather(cdir))).one("section", id="evaluation")
    rows = [[c.text() for c in tr.children if not isinstance(c, str)] for tr in section.one("tbody").all("tr")]
    assert rows == [["S_fast", "0/2", "0%", "[0%, 66%] (Wilson)"], ["S_final", "2/2", "100%", "[34%, 100%] (Wilson)"],
                    ["final − fast", "", "+100 pts", "[+7, +100] pts (Newcombe)"]]
    assert "results/n02.json" in section.text() and "2 rollouts a side" in section.text()
