"""Judge, editor and comparator driven through litellm by the scripted provider."""

from __future__ import annotations

import pytest

from deep_pipeline.core.config import DEFAULT_DIMENSIONS
from deep_pipeline.core.models import Cell, EvidenceRef, Rejection, Trace, TraceStep
from deep_pipeline.core.units import cut_paragraphs, cut_sections
from deep_pipeline.errors import StepError
from deep_pipeline.llm.budget import Budget, BudgetExhausted
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.comparator import compare_once
from deep_pipeline.llm.editor import propose_edit
from deep_pipeline.llm.judge import score_column

SKILL = """---
name: csv-report
description: Summarise a CSV file.
---
# CSV report

Turns a CSV file into a short report.

## Setup
Install pandas with `pip install pandas`.

## Steps
1. Load the file with pandas.
2. Print the column means.
"""
TASK = "Print the mean of each column of data.csv."
CORRECTNESS, ACTIONABILITY = DEFAULT_DIMENSIONS[0], DEFAULT_DIMENSIONS[1]


def trace(trace_id: str, *texts: str, timed_out: bool = False) -> Trace:
    steps = [TraceStep(step=i, source="agent" if i % 2 else "tool", text=t) for i, t in enumerate(texts, start=1)]
    return Trace(trace_id=trace_id, steps=steps, timed_out=timed_out)


TRACES = [
    trace("t1", "I will run pip install pandas", "Successfully installed pandas-2.2"),
    trace("t2", "Loading data.csv with pandas", "a 1.5\nb 2.0"),
]


@pytest.fixture
def units():
    return cut_sections(SKILL)


def judge(**kwargs) -> ModelClient:
    return ModelClient(ModelSettings(model="scripted/judge"), "judge", backoff_s=0.0, **kwargs)


def cell_answer(score, *evidence, reason="r"):
    return {"evidence": [dict(zip(("trace_id", "step", "quote"), e)) for e in evidence], "reason": reason, "score": score}


# -- judge: one column ---------------------------------------------------------------


def test_column_has_a_cell_per_unit_with_evidence_checked(scripted_llm, units):
    ids = [u.unit_id for u in units]

    def answer(request):
        assert request.unit_ids == ids  # the schema fixes the unit ids
        return {
            ids[0]: cell_answer(5),
            ids[1]: cell_answer(2, ("t1", 1, "pip   install pandas"), ("t1", 2, "never said"), ("t9", 1, "x")),
            ids[2]: cell_answer(4, ("t2", 1, "Loading data.csv")),
        }

    scripted_llm.script("judge", answer)
    result = score_column(
        judge(), step_key="c/section/m00/correctness", task_prompt=TASK, skill_text=SKILL,
        units=units, dimension=CORRECTNESS, traces=TRACES,
    )
    assert [(c.unit_id, c.dimension, c.score) for c in result.cells] == [
        (ids[0], "correctness", 5), (ids[1], "correctness", 2), (ids[2], "correctness", 4)
    ]
    assert result.cells[1].evidence == [EvidenceRef(trace_id="t1", step=1, quote="pip   install pandas")]
    assert result.cells[1].dropped_evidence == 2 and result.dropped_evidence == 2
    prompt = scripted_llm.requests_for("judge")[0].text
    assert f"<<unit {ids[1]}>>\n## Setup" in prompt and "<</unit>>" in prompt
    assert "[t1 step 2] tool: Successfully installed pandas-2.2" in prompt
    assert "5: Entirely right for this task" in prompt  # the rubric


def test_evidence_out_of_shape_is_dropped_and_counted_never_retried(scripted_llm, units):
    ids = [u.unit_id for u in units]
    odd = [{"trace_id": "t1", "step": 0, "quote": "x"}, "junk", {"trace_id": "t1"},
           {"trace_id": "t1", "step": 1, "quote": "pip install pandas"}, {"trace_id": "t2", "step": 1, "quote": "L" * 500}]
    answer = {uid: cell_answer(3) for uid in ids}
    answer[ids[1]] = {"evidence": odd, "reason": "r", "score": 2}
    scripted_llm.script("judge", answer)
    result = score_column(judge(), step_key="m/ev", task_prompt=TASK, skill_text=SKILL, units=units, dimension=CORRECTNESS, traces=TRACES)
    assert len(scripted_llm.requests_for("judge")) == 1  # no retry for evidence
    assert result.cells[1].evidence == [EvidenceRef(trace_id="t1", step=1, quote="pip install pandas")]
    assert result.cells[1].dropped_evidence == 4


def test_columns_of_one_matrix_share_a_long_prefix(scripted_llm, units):
    scripted_llm.always("judge", lambda request: request.answer())
    results = [
        score_column(judge(), step_key=f"m00/{d.name}", task_prompt=TASK, skill_text=SKILL, units=units, dimension=d, traces=TRACES)
        for d in DEFAULT_DIMENSIONS
    ]
    texts = [r.text for r in scripted_llm.requests]
    shared = results[0].shared_prefix_chars
    assert all(text[:shared] == texts[0][:shared] for text in texts)
    assert texts[0][: shared + 40] != texts[1][: shared + 40]  # the dimension comes right after it
    assert all(r.shared_prefix_chars > 0.5 * r.prompt_chars for r in results)


def test_wrong_unit_ids_are_retried_naming_them(scripted_llm, units):
    ids = [u.unit_id for u in units]
    wrong = {ids[0]: cell_answer(3), ids[1]: cell_answer(3), "s09-bogus": cell_answer(3)}
    scripted_llm.script("judge", wrong, lambda request: request.answer())
    result = score_column(
        judge(), step_key="k", task_prompt=TASK, skill_text=SKILL, units=units, dimension=CORRECTNESS, traces=TRACES
    )
    assert [c.unit_id for c in result.cells] == ids and len(result.calls) == 2
    feedback = scripted_llm.requests_for("judge")[1].last_user
    assert f"{ids[2]}: Field required" in feedback and "s09-bogus: Extra inputs are not permitted" in feedback


def test_a_column_that_stays_wrong_fails_naming_the_ids(scripted_llm, units):
    scripted_llm.always("judge", {units[0].unit_id: cell_answer(3)})
    with pytest.raises(StepError) as failure:
        score_column(judge(), step_key="c/m00/clarity", task_prompt=TASK, skill_text=SKILL, units=units, dimension=CORRECTNESS, traces=TRACES)
    assert "'c/m00/clarity'" in str(failure.value) and f"{units[1].unit_id}: Field required" in str(failure.value)


def test_a_rerun_column_is_answered_from_the_cache_and_a_spent_budget_sends_nothing(scripted_llm, units, tmp_path):
    scripted_llm.always("judge", lambda request: request.answer())
    column = dict(step_key="c/m00/coverage", task_prompt=TASK, skill_text=SKILL, units=units, dimension=CORRECTNESS, traces=TRACES)
    first = score_column(judge(cache_dir=tmp_path), **column)
    budget = Budget(max_calls=1, calls_used=1)  # spent: only cached answers can still come back
    again = score_column(judge(cache_dir=tmp_path, budget=budget), **column)
    assert again.cells == first.cells and [c.cache_hit for c in again.calls] == [True]
    with pytest.raises(BudgetExhausted):
        score_column(judge(cache_dir=tmp_path, budget=budget), **{**column, "step_key": "c/m01/coverage"})
    assert len(scripted_llm.requests) == 1


# -- editor ----------------------------------------------------------------------------


def test_editor_gets_the_body_the_verdict_and_the_feedback(scripted_llm, units):
    setup = units[1]
    cell = Cell(unit_id=setup.unit_id, dimension="actionability", score=2, reason="no version given",
                evidence=[EvidenceRef(trace_id="t1", step=1, quote="pip install pandas")])
    rejection = Rejection(unit_id=setup.unit_id, dimension="actionability", edit_summary="added a venv step",
                          score_change="2 -> 2", reason="target_cell_did_not_improve")

    def answer(request):
        assert request.schema["properties"]["unit_id"]["const"] == setup.unit_id
        return request.answer(new_text="Run `pip install pandas==2.2`.\n", edit_summary="pin pandas")

    scripted_llm.script("editor", answer)
    editor = ModelClient(ModelSettings(model="scripted/editor"), "editor")
    edit, calls = propose_edit(
        editor, step_key="c/section/i00/edit/0", task_prompt=TASK, skill_text=SKILL, unit=setup, cell=cell,
        dimension=ACTIONABILITY, rejections=[rejection], failed_checks=["the text adds a heading of depth 2"],
    )
    assert (edit.unit_id, edit.dimension, edit.new_text) == (setup.unit_id, "actionability", "Run `pip install pandas==2.2`.\n")
    assert edit.edit_summary == "pin pandas" and calls[0].role == "editor"
    prompt = scripted_llm.requests_for("editor")[0].last_user
    shown = prompt.split("<<current text>>\n")[1].split("<</current text>>")[0]
    assert shown.strip() == "Install pandas with `pip install pandas`." and "## Setup" not in shown
    assert "Its heading line, kept as it is (do not repeat it): ## Setup" in prompt
    for expected in ("no version given", '[t1 step 1] "pip install pandas"', "added a venv step",
                     "2 -> 2", "target_cell_did_not_improve", "the text adds a heading of depth 2"):
        assert expected in prompt


def test_editor_blank_text_is_retried(scripted_llm, units):
    scripted_llm.script("editor", lambda r: r.answer(new_text="   "), lambda r: r.answer(new_text="Better text.\n"))
    cell = Cell(unit_id=units[2].unit_id, dimension="correctness", score=2)
    edit, calls = propose_edit(
        ModelClient(ModelSettings(model="scripted/editor"), "editor"), step_key="k", task_prompt=TASK,
        skill_text=SKILL, unit=units[2], cell=cell, dimension=CORRECTNESS, rejections=[], failed_checks=[],
    )
    assert edit.new_text == "Better text.\n" and len(calls) == 2


def test_a_paragraph_is_rewritten_whole(scripted_llm, units):
    paragraph = cut_paragraphs(SKILL, units[2])[0]
    scripted_llm.script("editor", lambda r: r.answer(new_text="1. Load data.csv with pandas.read_csv.\n"))
    cell = Cell(unit_id=paragraph.unit_id, dimension="correctness", score=2)
    edit, _ = propose_edit(
        ModelClient(ModelSettings(model="scripted/editor"), "editor"), step_key="k", task_prompt=TASK,
        skill_text=SKILL, unit=paragraph, cell=cell, dimension=CORRECTNESS, rejections=[], failed_checks=[],
    )
    prompt = scripted_llm.requests_for("editor")[0].last_user
    assert "<<current text>>\n1. Load the file with pandas.\n2. Print the column means.\n" in prompt
    assert "This paragraph has no heading line of its own." in prompt and "(none: this is the first attempt)" in prompt
    assert edit.unit_id == paragraph.unit_id == "s02-steps-p00"


# -- comparator ------------------------------------------------------------------------

INCUMBENT = [trace("input-0", "pip install pandas failed: no network"), trace("input-1", "ok")]
CANDIDATE = [trace("section-i00-0", "used the preinstalled pandas"), trace("section-i00-1", "done", timed_out=True)]


@pytest.mark.parametrize("candidate_label", ["A", "B"])
def test_blind_order_is_mapped_back(scripted_llm, units, candidate_label):
    new_side, old_side = candidate_label.lower(), ("b" if candidate_label == "A" else "a")
    new_label, old_label = candidate_label, old_side.upper()

    def answer(request):
        shown = request.last_user
        assert "section-i00" not in shown and "input-0" not in shown  # ids are hidden
        # The candidate's text and traces sit on its side.
        assert shown.index("Use the preinstalled pandas.") < shown.index("<</version A>>") if candidate_label == "A" \
            else shown.index("Use the preinstalled pandas.") > shown.index("<<version B>>")
        return request.answer(**{
            f"score_{new_side}": 5, f"score_{old_side}": 2, "task_relevant": True,
            f"regressions_{new_side}": [
                {"kind": "timeout", "trace_id": f"{new_label}2", "step": 1, "quote": "done"},  # valid
                {"kind": "error", "trace_id": f"{new_label}1", "step": 5, "quote": "crash"},  # no step 5
            ],
            f"regressions_{old_side}": [{"kind": "failed_command", "trace_id": f"{old_label}1", "step": 1,
                                         "quote": "pip install pandas failed"}],
            f"evidence_{new_side}": [{"trace_id": f"{new_label}1", "step": 1, "quote": "preinstalled pandas"},
                                     {"trace_id": f"{new_label}2", "step": 1, "quote": "not there"}],
            f"evidence_{old_side}": [{"trace_id": f"{old_label}1", "step": 1, "quote": "no network"}],
            "reason": f"{new_label}1 step 1 uses the preinstalled pandas; version {old_label} fails in {old_label}1",
        })

    scripted_llm.script("judge", answer)
    call, calls = compare_once(
        judge(), step_key="c/section/i00/compare", task_prompt=TASK, unit=units[1],
        old_text="Install pandas with pip.", new_text="Use the preinstalled pandas.", dimension=CORRECTNESS,
        incumbent_traces=INCUMBENT, candidate_traces=CANDIDATE, candidate_label=candidate_label,
    )
    assert (call.incumbent_score, call.candidate_score, call.candidate_label) == (2, 5, candidate_label)
    assert call.candidate_evidence == [EvidenceRef(trace_id="section-i00-0", step=1, quote="preinstalled pandas")]
    assert call.incumbent_evidence == [EvidenceRef(trace_id="input-0", step=1, quote="no network")]
    assert call.dropped_evidence == 1
    # Claims are mapped to real trace ids and checked against their own side's traces.
    assert [(c.kind, c.trace_id, c.step) for c in call.candidate_regressions] == [("timeout", "section-i00-1", 1)]
    assert [(c.kind, c.trace_id) for c in call.incumbent_regressions] == [("failed_command", "input-0")]
    assert call.dropped_regressions == 1
    # The reason a person reads names trace ids and sides, never the blind labels.
    assert call.reason == "section-i00-0 step 1 uses the preinstalled pandas; the incumbent fails in input-0"


def test_candidate_evidence_must_come_from_candidate_traces(scripted_llm, units):
    # Quoting an incumbent trace under the candidate's side is dropped, even if the quote is real.
    scripted_llm.script("judge", lambda r: r.answer(evidence_b=[{"trace_id": "A1", "step": 1, "quote": "no network"}]))
    call, _ = compare_once(
        judge(), step_key="k", task_prompt=TASK, unit=units[1], old_text="x", new_text="y", dimension=CORRECTNESS,
        incumbent_traces=INCUMBENT, candidate_traces=CANDIDATE[:1], candidate_label="B",
    )
    assert call.candidate_evidence == [] and call.dropped_evidence == 1
    assert call.candidate_regressions == [] and call.dropped_regressions == 0  # the judge named none
