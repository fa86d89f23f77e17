"""What the Dagster UI shows of a finished compile: the materializations'
metadata, read back from the instance after a whole compile through Dagster.

The scripted judge cites real evidence (the chat agent's answer, quoted at its step) in its
cells and comparisons, so the pages' evidence tables have something to show.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import dagster as dg
import pytest

from deep_pipeline.core.keys import parse_key
from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.records import EditRecord
from deep_pipeline.store import read_model, sha256_bytes, sha256_text
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.test_sensor import tick

ANSWER = "- shipped the parser, then wrote the weekly notes"
QUOTE = "shipped the parser"
AGENT_STEP = re.compile(r"\[(\S+) step (\d+)\] agent: ")


def install_citing_world(llm) -> None:
    """Two open cells, one edit the judge prefers, a judge that cites real quotes, a chat agent."""
    world = World(low={("s01-when-to-use", "clarity"): 2, ("s03-output", "concision"): 2},
                  compare={("s03-output", "concision"): (3, 3)})
    install_world(llm, world)
    llm.always("judge", citing_judge(world))
    llm.always("agent", ANSWER)


def citing_judge(world: World):
    """The world's judge, citing the first agent step it is shown (per side in a comparison)."""

    def judge(request):
        answer = world.judge(request)
        if "score_a" in (request.schema or {}).get("properties", {}):
            for side in "AB":
                found = re.search(rf"\[({side}\d+) step (\d+)\] agent: ", request.text)
                answer[f"evidence_{side.lower()}"] = [{"trace_id": found.group(1), "step": int(found.group(2)), "quote": QUOTE}]
            return answer
        found = AGENT_STEP.search(request.text)
        for cell in answer.values():
            cell["evidence"] = [{"trace_id": found.group(1), "step": int(found.group(2)), "quote": QUOTE}]
        return answer

    return judge


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One compile (an accept, then rejections) through Dagster, shared by the tests below."""
    from tests.scripted_llm import install, uninstall

    tmp = tmp_path_factory.mktemp("pages")
    llm = install()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp / "home"))
        mp.setenv("DEEP_PIPELINE_STORE", str(tmp / "store"))
        (tmp / "home").mkdir()
        install_citing_world(llm)
        skill, bundle = make_inputs(tmp)
        instance = dg.DagsterInstance.ephemeral()
        record, _ = register_with_overrides(instance, tmp / "store", skill, bundle,
                                            {**CONFIG, "runner": "chat", "section_iterations": 3})
        report = drive_compile(instance, tmp / "store", record.key)
        yield instance, CompileDir(tmp / "store", record.key), report
    uninstall(llm)


def latest(instance, asset) -> dict:
    """partition -> (metadata values, run id) of the asset's latest materialization per partition."""
    result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset)), limit=1000, ascending=True)
    return {r.asset_materialization.partition: ({k: v.value for k, v in r.asset_materialization.metadata.items()}, r.run_id)
            for r in result.records}


def test_quote_context_shows_the_quote_in_its_folded_step_text():
    from deep_pipeline.core.evidence import quote_context

    text = "first line\n\n" + "x" * 100 + "  shipped   the\nparser " + "y" * 100
    before, match, after = quote_context(text, "shipped the parser", 10)
    assert (before, match, after) == ("…" + "x" * 9 + " ", "shipped the parser", " " + "y" * 9 + "…")
    assert quote_context("short text", "text", 80) == ("short ", "text", "")
    assert quote_context("short text", "absent", 80) is None and quote_context("short text", "  ", 80) is None


def test_an_accepted_decision_page_stands_alone(compiled):
    instance, cdir, report = compiled
    accepted = next(d for d in report.decisions if d.accepted)
    pages = latest(instance, "decision")
    partition = next(p for p, (m, _) in pages.items() if m["accepted"] == 1.0)
    meta, run_id = pages[partition]
    _, level, _, index = parse_key(partition)
    assert (level, index) == (accepted.level, accepted.index)

    assert "```diff" in meta["edit_diff"] and f"+{MARK}-s01-when-to-use" in meta["edit_diff"]
    assert (meta["incumbent_score"], meta["candidate_score"]) == (2.0, 4.0)
    assert "| mean (the rule's) | 2 | 4 |" in meta["scores"] and "candidate as A" in meta["scores"]
    assert meta["judge_reason"] == "scripted comparison"
    assert (meta["growth_chars"], meta["growth_lines"]) == (accepted.growth_chars, accepted.growth_lines)
    assert latest(instance, "comparison")[partition][0]["unverified_regressions"] == []  # evidence required: none
    evidence = meta["evidence"]
    for side, batch in (("candidate", f"{level}-i{index:02d}"), ("incumbent", "input")):
        row = next(line for line in evidence.splitlines() if line.startswith(f"| {side} | evidence |"))
        assert f"| - **{QUOTE}**, then wrote the weekly notes |" in row
        assert any(f"| {t} |" in row for t in cdir.batch(batch).trace_ids), row
    assert "s01-when-to-use / clarity: 2" in meta["selected_cell"] and f"**{QUOTE}**" in meta["selected_cell"]
    assert meta["matrix_before"] != meta["matrix_after"] and "current_matrix" not in meta

    from deep_pipeline.defs.pages import asset_url

    edit = read_model(cdir.iteration_dir(level, index) / "edit.json", EditRecord)
    assert meta["link_candidate_edit"] == f"/assets/candidate_edit?view=partitions&partition={quote(partition, safe='')}"
    assert meta["link_comparison"] == asset_url(["comparison"], partition)
    assert meta["link_candidate_rollouts"] == asset_url(["candidate_rollouts"], partition)
    assert meta["link_level_matrix"] == f"/assets/level_matrix?view=partitions&partition={quote(edit.matrix_key, safe='')}"
    assert meta["link_run"] == f"/runs/{run_id}"
    assert instance.get_run_by_id(run_id).tags["deep/outcome"] == "accepted"


def test_rejected_decisions_are_told_apart(compiled):
    instance, _, report = compiled
    pages = latest(instance, "decision")
    assert sorted(m["accepted"] for m, _ in pages.values()) == sorted(1.0 if d.accepted else 0.0 for d in report.decisions)
    rejected = [(m, run) for m, run in pages.values() if m["accepted"] == 0.0]
    assert rejected
    assert {instance.get_run_by_id(run).tags["deep/outcome"] for _, run in rejected} == {"rejected"}


def test_each_column_shows_its_cells_with_reasons_and_quotes(compiled):
    instance, cdir, _ = compiled
    columns = latest(instance, ["matrix", "clarity"])
    first = columns[min(columns)][0]["cells"]
    assert first.startswith("| unit | score | reason | evidence |")
    row = next(line for line in first.splitlines() if line.startswith("| s01-when-to-use |"))
    assert "| 2 | scripted clarity |" in row
    assert any(f'[{t} step' in row for t in cdir.batch("input").trace_ids) and f'"{QUOTE}"' in row


def test_candidate_edit_sha256_is_the_new_unit_texts_and_the_record_keeps_its_own(compiled):
    instance, cdir, _ = compiled
    for partition, (meta, _) in latest(instance, "candidate_edit").items():
        _, level, _, index = parse_key(partition)
        path = cdir.iteration_dir(level, index) / "edit.json"
        edit = read_model(path, EditRecord)
        if edit.unit_text_after is not None:
            assert meta["edit_sha256"] == sha256_text(edit.unit_text_after)
        assert meta["edit_json_sha256"] == sha256_bytes(path.read_bytes())


def test_model_calls_over_every_assets_materializations_add_up_to_the_report(compiled):
    instance, cdir, report = compiled
    calls, tokens, cost, agent = 0, 0, 0.0, 0
    for asset in instance.get_asset_keys():
        if asset == dg.AssetKey("compile_report"):  # the total itself
            continue
        for partition, (meta, _) in latest(instance, asset.path).items():
            if partition and partition.startswith(cdir.key) and "model_calls" in meta:
                calls += meta["model_calls"]
                tokens += meta["prompt_tokens"] + meta["completion_tokens"]
                cost += meta["cost_usd"] if isinstance(meta["cost_usd"], float) else 0.0
                agent += meta["model_calls"] if asset.path[0] in ("input_traces", "candidate_rollouts") else 0
    assert agent > 0, "the chat agent's rollouts are model calls"
    assert calls == report.usage_total.calls
    assert tokens == report.usage_total.prompt_tokens + report.usage_total.completion_tokens
    assert cost == pytest.approx(report.usage_total.cost_usd or 0.0)


def test_final_skill_shows_the_diff_from_s_fast(compiled):
    instance, cdir, _ = compiled
    meta, _ = latest(instance, "final_skill")[cdir.key]
    assert "--- SKILL.md (S_fast)" in meta["skill_diff"] and f"+{MARK}-s01-when-to-use" in meta["skill_diff"]


def test_the_sensor_says_why_it_requested_nothing(compiled):
    instance, cdir, _ = compiled
    result, _ = tick(instance, cdir.root)
    assert result.run_requests == []
    assert result.skip_reason.skip_message == f"{cdir.key}: finished, nothing left to run"
    again, _ = tick(instance, cdir.root, result.cursor)
    assert again.skip_reason.skip_message == "no compile changed since the last tick"
