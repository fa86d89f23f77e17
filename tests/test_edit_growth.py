"""Bloat in sight (SPEC §4, §8: core/growth.py): each edit's growth of SKILL.md on the decision, in
report.json and the HTML report; S_final's size against S_fast's; `max_edit_growth`
rejecting an edit that grows its unit past a factor, `edit_too_large`, before any rollout."""

from __future__ import annotations

import json
import re

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.growth import growth, line_count, skill_size, too_large
from deep_pipeline.core.models import EDIT_TOO_LARGE, EXACT_DUPLICATE, Coordinate, Decision
from deep_pipeline.defs.pages import growth_meta
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.records import CandidateRecord, ComparisonRecord, EditRecord, Report, RolloutsRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.status import compile_status, format_status
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.report import gather, render
from deep_pipeline.store import read_model
from tests.compile_world import CONFIG, MARK, SKILL, World, install_world, make_inputs

LOW = {("s02-steps", "clarity"): 2}
FILLER = "Check every line of the tracker twice, then check it again before you write anything. "


class GrowingWorld(World):
    """The compile world whose editor writes a unit about ten times the old one's length."""

    def editor(self, request) -> dict:
        answer = super().editor(request)
        answer["new_text"] = answer["new_text"] + FILLER * 10 + "\n"
        return answer


def compile_with(tmp_path, scripted_llm, world: World, **config):
    install_world(scripted_llm, world)
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), {**CONFIG, **config}))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    return ctx, run_steps(ctx, run_step)


def sign(value: int) -> str:
    return f"{value:+d}" if value else "0"


def compare_requests(scripted_llm) -> list:
    return [r for r in scripted_llm.requests_for("judge") if "score_a" in (r.schema or {}).get("properties", {})]


# -- the pure functions ------------------------------------------------------------------

def test_lines_follow_markdown_its_line_model():
    assert [line_count(t) for t in ("", "a", "a\n", "a\nb", "a\r\nb\r\n", "a\rb\r", "\n\n")] == [0, 1, 1, 2, 2, 2, 2]
    lf = SKILL
    crlf = SKILL.replace("\n", "\r\n")
    assert line_count(lf) == line_count(crlf) == SKILL.count("\n")
    assert growth(lf, lf + "one more line\n") == (len("one more line\n"), 1)
    assert growth("a\nb\nc\n", "a\n") == (-4, -2)
    size = skill_size("a\n", "a\nbb\n")
    assert (size.fast_chars, size.fast_lines, size.final_chars, size.final_lines) == (2, 1, 5, 2)
    assert (size.growth_chars, size.growth_lines) == (3, 1)


def test_the_rule_compares_the_units_new_length_with_factor_times_the_old():
    assert not too_large("x" * 10, "x" * 1000, None)  # unset: off
    assert not too_large("x" * 10, "x" * 20, 2.0)  # exactly the factor is not past it
    assert too_large("x" * 10, "x" * 21, 2.0)
    assert not too_large("x" * 10, "x" * 3, 1.5)  # shrinking never is


def test_the_setting_is_a_factor_above_one_and_keys_change_only_when_it_is_set():
    assert CompileConfig().max_edit_growth is None
    assert "max_edit_growth" not in CompileConfig().identity_settings()
    assert "max_edit_growth" not in CompileConfig().model_dump(mode="json")  # compile.json as before
    assert CompileConfig(max_edit_growth=2).identity_settings()["max_edit_growth"] == 2
    for bad in (1, 0.5, -3):
        with pytest.raises(ValueError, match="max_edit_growth"):
            CompileConfig(max_edit_growth=bad)


def test_a_decision_without_growth_writes_what_it_wrote_before():
    old = {"level": "section", "index": 0, "coordinate": {"unit_id": "s01", "dimension": "clarity"},
           "accepted": False, "reason": EXACT_DUPLICATE}
    decision = Decision.model_validate(old)
    dumped = decision.model_dump(mode="json")
    assert not {"growth_chars", "growth_lines", "unverified_regressions"} & set(dumped)
    assert Decision.model_validate(dumped) == decision
    assert growth_meta(decision) == {}
    grown = decision.model_copy(update={"growth_chars": 12, "growth_lines": -1})
    assert {k: v.value for k, v in growth_meta(grown).items()} == {"growth_chars": 12, "growth_lines": -1}


# -- whole compiles ----------------------------------------------------------------------

def test_an_edit_ten_times_longer_is_rejected_before_any_rollout_or_judge_call(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, GrowingWorld(low=LOW), max_edit_growth=2)
    assert report.decisions, "the compile ran no iteration"
    assert all(d.reason == EDIT_TOO_LARGE and not d.accepted for d in report.decisions)
    assert compare_requests(scripted_llm) == []  # no comparison call at all
    batches = {p.name for p in (ctx.cdir.path / "traces").iterdir()}
    assert batches == {"input"}  # no candidate was rolled out
    for d in report.decisions:
        folder = ctx.cdir.iteration_dir(d.level, d.index)
        edit = read_model(folder / "edit.json", EditRecord)
        assert edit.status == "edit_too_large" and len(edit.unit_text_after) > 2 * len(edit.unit_text_before)
        assert read_model(folder / "candidate.json", CandidateRecord).skipped == "edit_too_large"
        assert read_model(folder / "rollouts.json", RolloutsRecord).skipped == "edit_too_large"
        assert read_model(folder / "comparison.json", ComparisonRecord).skipped == "edit_too_large"
        assert not (folder / "candidate").exists()
        # The rejected edit's growth is on the decision too: it is why it was rejected.
        assert d.growth_chars == len(edit.unit_text_after) - len(edit.unit_text_before) > 0
        assert d.growth_lines is not None and d.edit_sha256 == edit.edit_sha256
    # A rejection like any other: it counts toward the coordinate's limit and the editor is told.
    coordinate = Coordinate(unit_id="s02-steps", dimension="clarity")
    assert [d.coordinate for d in report.decisions[:2]] == [coordinate] * 2
    assert coordinate not in [d.coordinate for d in report.decisions[2:] if d.level == "section"]  # exhausted
    second = scripted_llm.requests_for("editor")[1].text
    assert f"not compared; {EDIT_TOO_LARGE}" in second


def test_the_same_edit_within_the_factor_is_compared_and_its_growth_recorded(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, GrowingWorld(low=LOW), max_edit_growth=50)
    accepted = [d for d in report.decisions if d.accepted]
    assert accepted and compare_requests(scripted_llm)
    first = accepted[0]
    assert first.growth_chars == len(first.skill_text) - len(SKILL) > 0
    assert first.growth_lines == line_count(first.skill_text) - line_count(SKILL)


def test_growth_reaches_decision_json_report_json_and_the_html_report(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, World(low=LOW))  # max_edit_growth unset: nothing refused
    [first, *_] = report.decisions
    assert first.accepted
    stored = json.loads((ctx.cdir.iteration_dir(first.level, first.index) / "decision.json").read_text())
    assert (stored["decision"]["growth_chars"], stored["decision"]["growth_lines"]) == (
        len(first.skill_text) - len(SKILL), line_count(first.skill_text) - line_count(SKILL))
    assert "unverified_regressions" not in stored["decision"]  # no claim at face value: not written
    written = json.loads(ctx.cdir.report_path.read_text())
    assert [d.get("growth_chars") for d in written["decisions"]] == [d.growth_chars for d in report.decisions]
    final = (ctx.cdir.final_skill / "SKILL.md").read_text()
    assert written["skill_size"] == {"fast_chars": len(SKILL), "fast_lines": line_count(SKILL),
                                     "final_chars": len(final), "final_lines": line_count(final)}
    assert read_model(ctx.cdir.report_path, Report).skill_size.growth_chars == len(final) - len(SKILL)

    page = render(gather(ctx.cdir))
    assert "<th>growth (chars, lines)</th>" in page
    cell = re.search(r'<tr id="decision-1"[^>]*>.*?<td class="growth">([^<]*)</td>', page).group(1)
    assert cell == f"{sign(first.growth_chars)} chars, {sign(first.growth_lines)} lines"
    fact = re.search(r"<dt>SKILL.md size</dt><dd>([^<]*)</dd>", page).group(1)
    size = read_model(ctx.cdir.report_path, Report).skill_size
    assert fact == (f"S_fast {size.fast_chars} chars, {size.fast_lines} lines → S_final {size.final_chars} chars, "
                    f"{size.final_lines} lines ({sign(size.growth_chars)} chars, {sign(size.growth_lines)} lines)")
    assert MARK in final


def test_status_shows_each_accepted_edits_growth_and_the_size_against_s_fast(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, World(low=LOW))
    status = compile_status(ctx)
    accepted = [d for d in report.decisions if d.accepted]
    assert accepted and [r.growth_chars for r in status.decisions] == [d.growth_chars for d in report.decisions]
    final = (ctx.cdir.final_skill / "SKILL.md").read_text()
    assert (status.skill_size.fast_chars, status.skill_size.final_chars) == (len(SKILL), len(final))
    text = format_status(status)
    first = accepted[0]
    assert f"growth: {sign(first.growth_chars)} chars, {sign(first.growth_lines)} lines" in text
    assert (f"SKILL.md: S_fast {len(SKILL)} chars, {line_count(SKILL)} lines -> now {len(final)} chars, "
            f"{line_count(final)} lines ({sign(len(final) - len(SKILL))} chars,") in text


def test_an_older_report_without_sizes_still_renders_them_from_the_texts(tmp_path, scripted_llm):
    ctx, report = compile_with(tmp_path, scripted_llm, World(low=LOW))
    data = json.loads(ctx.cdir.report_path.read_text())
    del data["skill_size"]
    for decision in data["decisions"]:
        decision.pop("growth_chars", None), decision.pop("growth_lines", None)
    ctx.cdir.report_path.write_text(json.dumps(data))
    assert read_model(ctx.cdir.report_path, Report).skill_size is None
    page = render(gather(ctx.cdir))
    assert f"S_fast {len(SKILL)} chars" in page
    assert re.search(r'<tr id="decision-1"[^>]*>.*?<td class="growth">–</td>', page)
