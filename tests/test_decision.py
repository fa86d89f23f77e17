"""The decision rule (SPEC §6.5–§6.6), the blind A/B order, and the step keys."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from deep_pipeline.core.decision import candidate_label, decide, order_seed, regressions, timeout_share
from deep_pipeline.core.keys import batch_name, compile_key, iteration_key, matrix_key, parse_key
from deep_pipeline.core.models import ACCEPTED, NO_IMPROVEMENT, NOT_RELEVANT, Comparison, Trace


def traces(timed_out: int, total: int = 3) -> list[Trace]:
    return [Trace(trace_id=f"t{i}", timed_out=i < timed_out) for i in range(total)]


def comparison(incumbent: int = 2, candidate: int = 4, relevant: bool = True, regressions=()) -> Comparison:
    return Comparison(incumbent_score=incumbent, candidate_score=candidate, task_relevant=relevant,
                      runtime_regressions=list(regressions))


def test_timeout_share_counts_both_timeout_kinds() -> None:
    mixed = [Trace(trace_id="a", error_category="idle_timeout"), Trace(trace_id="b", error_category="timeout"),
             Trace(trace_id="c", error_category="api_error"), Trace(trace_id="d")]
    assert timeout_share(mixed) == 0.5
    assert timeout_share([]) == 0.0


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (dict(relevant=False, regressions=["slower"], candidate=5), (False, NOT_RELEVANT, 3.0)),  # first rule wins
        (dict(regressions=["slower"], candidate=5), (False, "runtime_regressed:slower", 3.0)),
        (dict(candidate=2), (False, NO_IMPROVEMENT, 0.0)),
        (dict(candidate=1), (False, NO_IMPROVEMENT, -1.0)),
        (dict(candidate=3), (True, ACCEPTED, 1.0)),
    ],
)
def test_rules_apply_in_order(case: dict, expected: tuple) -> None:
    assert decide(comparison(**case), traces(0), traces(0), min_gain=0.5) == expected


def test_min_gain_is_inclusive() -> None:
    assert decide(comparison(2, 3), traces(0), traces(0), min_gain=1.0)[0] is True
    assert decide(comparison(2, 3), traces(0), traces(0), min_gain=1.5)[:2] == (False, NO_IMPROVEMENT)


def test_more_timeouts_in_the_candidate_is_a_regression() -> None:
    assert decide(comparison(2, 5), traces(0), traces(1), 0.5) == (False, "runtime_regressed:timeout", 3.0)
    assert decide(comparison(2, 5), traces(1), traces(1), 0.5)[0] is True  # same share: no regression
    assert decide(comparison(2, 5), traces(2), traces(1), 0.5)[0] is True  # fewer: no regression
    # Shares, not counts: 1 of 3 rollouts vs 1 of 2 input traces.
    assert decide(comparison(2, 5), traces(1, total=2), traces(1, total=3), 0.5)[0] is True


def test_not_relevant_still_beats_a_timeout_regression() -> None:
    assert decide(comparison(relevant=False), traces(0), traces(3), 0.5)[1] == NOT_RELEVANT


def test_regression_list_format() -> None:
    found = regressions(comparison(regressions=[" more  tool calls ", "", "slower, louder", "more tool calls"]),
                        traces(0), traces(2))
    assert found == ["more tool calls", "slower; louder", "timeout"]
    reason = decide(comparison(regressions=["timeout", "slower"]), traces(0), traces(2), 0.5)[1]
    assert reason == "runtime_regressed:timeout,slower"  # the judge named it already: not twice


# Pinned from outside Python: `printf %s KEY | sha256sum`, first 12 hex digits. A resumed
# compile re-derives these seeds, so they must never change between versions or machines.
PINNED_SEEDS = {"pdf-3fa2b1/section/i00": 0x8E5D7925D0D2, "pdf-3fa2b1/paragraph/i03": 0xCA1B1CF897B5}


def test_order_seed_is_pinned_and_independent_of_the_process() -> None:
    assert {key: order_seed(key) for key in PINNED_SEEDS} == PINNED_SEEDS
    # Another interpreter with a different str-hash salt derives the same seeds.
    code = "import sys; from deep_pipeline.core.decision import order_seed; print(*map(order_seed, sys.argv[1:]))"
    child = subprocess.run([sys.executable, "-c", code, *PINNED_SEEDS], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert child.stdout.split() == [str(seed) for seed in PINNED_SEEDS.values()]
    seeds = [order_seed(iteration_key("pdf-3fa2b1", "section", i)) for i in range(20)]
    assert len(set(seeds)) == 20 and all(0 <= seed < 2**48 for seed in seeds)  # 48 bits fit int64 metadata


def test_candidate_label_is_a_function_of_the_seed_alone() -> None:
    # Even seeds show the candidate first (as A), odd ones second.
    assert [candidate_label(seed) for seed in (0, 1, 2, 7, 2**47, 2**47 + 1)] == ["A", "B", "A", "B", "A", "B"]
    assert candidate_label(PINNED_SEEDS["pdf-3fa2b1/section/i00"]) == "A"
    assert candidate_label(PINNED_SEEDS["pdf-3fa2b1/paragraph/i03"]) == "B"
    labels = [candidate_label(order_seed(iteration_key("pdf-3fa2b1", "section", i))) for i in range(20)]
    assert {"A", "B"} == set(labels)  # both orders occur across iterations


def test_keys_round_trip() -> None:
    key = compile_key("PDF Processing!", "3FA2B1" + "0" * 58)
    assert key == "pdf-processing-3fa2b1"
    assert matrix_key(key, "section", 0) == "pdf-processing-3fa2b1/section/m00"
    assert iteration_key(key, "paragraph", 12) == "pdf-processing-3fa2b1/paragraph/i12"
    assert parse_key(iteration_key(key, "paragraph", 12)) == (key, "paragraph", "iteration", 12)
    assert parse_key(matrix_key(key, "section", 104)) == (key, "section", "matrix", 104)
    assert batch_name("section", 3) == "section-i03"


@pytest.mark.parametrize(
    "junk",
    ["", "pdf-3fa2b1", "pdf-3fa2b1/section/x00", "pdf-3fa2b1/chapter/m00", "pdf-3fa2b1/section/m0",
     "pdf/section/m00", "pdf-3fa2b1/section/m00/extra", "PDF-3FA2B1/section/m00"],
)
def test_parse_key_refuses_junk(junk: str) -> None:
    with pytest.raises(ValueError, match="not a matrix or iteration key"):
        parse_key(junk)


def test_key_builders_refuse_bad_parts() -> None:
    with pytest.raises(ValueError, match="6 hex digits"):
        compile_key("pdf", "xyz")
    with pytest.raises(ValueError, match="level"):
        matrix_key("pdf-3fa2b1", "chapter", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index"):
        batch_name("section", -1)
    assert compile_key("...", "abcdef") == "skill-abcdef"  # nothing usable left of the name
