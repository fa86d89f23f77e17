"""Open cells, selection and its ties, the current matrix, the markdown view (SPEC §5)."""

from __future__ import annotations

import pytest

from deep_pipeline.core.matrix import current_matrix, is_open, matrix_markdown, open_cells, select_coordinate
from deep_pipeline.core.models import ACCEPTED, NO_IMPROVEMENT, Cell, Coordinate, Decision, ScoreMatrix, Unit

DIMS = ["correctness", "clarity", "concision"]


def unit(unit_id: str, start: int, heading: str | None = None) -> Unit:
    return Unit(unit_id=unit_id, level="section", heading=heading, start=start, end=start + 1, text="x")


def matrix(scores: dict[str, int], unit_ids=("s00", "s01", "s02"), dims=DIMS) -> ScoreMatrix:
    """All cells 5 but the given `unit/dimension` scores; cells stored in reverse order on purpose."""
    cells = [
        Cell(unit_id=u, dimension=d, score=scores.get(f"{u}/{d}", 5))
        for u in unit_ids for d in dims
    ]
    return ScoreMatrix(level="section", dimensions=list(dims), units=[unit(u, i) for i, u in enumerate(unit_ids)],
                       cells=cells[::-1], trace_batch="input", skill_sha256="0" * 64)


def select(m: ScoreMatrix, **kwargs) -> str | None:
    kwargs.setdefault("dimensions", DIMS)
    kwargs.setdefault("threshold", 0.375)
    found = select_coordinate(m, **kwargs)
    return str(found) if found else None


@pytest.mark.parametrize(("score", "open_"), [(1, True), (3, True), (4, False), (5, False)])
def test_gap_threshold_boundary(score: int, open_: bool) -> None:
    assert is_open(Cell(unit_id="s00", dimension="clarity", score=score), 0.375) is open_


def test_a_gap_equal_to_the_threshold_is_not_open() -> None:
    assert not is_open(Cell(unit_id="s00", dimension="clarity", score=3), 0.5)  # gap 0.5 is not above 0.5


def test_open_cells_lists_only_open_ones() -> None:
    m = matrix({"s00/clarity": 3, "s01/concision": 4, "s02/correctness": 1})
    assert {(c.unit_id, c.dimension) for c in open_cells(m, 0.375)} == {("s00", "clarity"), ("s02", "correctness")}


def test_largest_gap_wins() -> None:
    assert select(matrix({"s00/correctness": 3, "s02/concision": 2})) == "s02/concision"


def test_tie_goes_to_the_earlier_configured_dimension() -> None:
    m = matrix({"s00/concision": 2, "s02/clarity": 2})
    assert select(m) == "s02/clarity"
    assert select(m, dimensions=["concision", "clarity", "correctness"]) == "s00/concision"


def test_tie_in_one_dimension_goes_to_the_earlier_unit_in_matrix_order() -> None:
    m = matrix({"s01/clarity": 2, "s02/clarity": 2}, unit_ids=("s02", "s01", "s00"))
    assert select(m) == "s02/clarity"  # the matrix lists s02 first


def test_selection_respects_active_blocked_and_excluded() -> None:
    m = matrix({"s00/correctness": 1, "s01/clarity": 2, "s02/clarity": 3, "s02/concision": 3})
    assert select(m, active_dimension="clarity") == "s01/clarity"
    excluded = {Coordinate(unit_id="s01", dimension="clarity")}
    assert select(m, active_dimension="clarity", excluded=excluded) == "s02/clarity"
    assert select(m, blocked={"correctness"}) == "s01/clarity"
    assert select(m, blocked={"correctness", "clarity"}) == "s02/concision"
    assert select(m, active_dimension="correctness", blocked={"correctness"}) is None


def test_nothing_open_selects_nothing() -> None:
    assert select(matrix({"s00/clarity": 4})) is None


def test_dimensions_outside_the_configuration_are_never_selected() -> None:
    m = matrix({"s00/clarity": 1, "s01/concision": 3})
    assert select(m, dimensions=["correctness", "concision"]) == "s01/concision"


def _decision(accepted: bool, score: int, unit_id: str = "s01") -> Decision:
    coordinate = Coordinate(unit_id=unit_id, dimension="clarity")
    cell = Cell(unit_id=unit_id, dimension="clarity", score=score, reason="candidate")
    return Decision(level="section", index=0, coordinate=coordinate, accepted=accepted,
                    reason=ACCEPTED if accepted else NO_IMPROVEMENT, candidate_score=score,
                    candidate_cell=cell if accepted else None)


def test_current_matrix_applies_accepted_cells_in_order_and_ignores_rejections() -> None:
    m = matrix({"s01/clarity": 2, "s02/clarity": 2})
    now = current_matrix(m, [_decision(True, 3), _decision(False, 5, "s02"), _decision(True, 4)])
    assert now.cell(Coordinate(unit_id="s01", dimension="clarity")).score == 4
    assert now.cell(Coordinate(unit_id="s01", dimension="clarity")).reason == "candidate"
    assert now.cell(Coordinate(unit_id="s02", dimension="clarity")).score == 2
    assert m.cell(Coordinate(unit_id="s01", dimension="clarity")).score == 2  # the scored matrix is untouched


def test_matrix_markdown_is_a_table_of_units_by_dimensions() -> None:
    m = matrix({"s01/clarity": 2}, unit_ids=("s00", "s01"))
    m = m.model_copy(update={"units": [unit("s00", 0, "Intro | more"), unit("s01", 1, "Usage")],
                             "cells": [c for c in m.cells if (c.unit_id, c.dimension) != ("s00", "concision")]})
    lines = matrix_markdown(m, threshold=0.375).splitlines()
    assert lines[0] == "| unit | correctness | clarity | concision |"
    assert lines[2] == "| s00 Intro \\| more | 5 | 5 | – |"
    assert lines[3] == "| s01 Usage | 5 | **2** | 5 |"
