"""The score matrix: open cells, selection, the current matrix, a markdown view (SPEC §5);
a task set's cell as the mean of its training tasks' cells (SPEC §11).

Selection reads the matrix's unit order (`matrix.units`) and the configured dimension
order, never the order the cells happen to be stored in, so a column that finished
scoring first cannot change which coordinate wins a tie. Cells of a dimension outside
the configured list, or of a unit outside `matrix.units`, are never selected.
"""

from __future__ import annotations

from collections.abc import Iterable

from deep_pipeline.core.comparison import mean_score
from deep_pipeline.core.models import Cell, Coordinate, Decision, ScoreMatrix, TaskSetCell


def is_open(cell: Cell, threshold: float) -> bool:
    """Open = worth fixing: normalized gap strictly above the threshold (0.375 = score below 3.5)."""
    return cell.gap > threshold


def open_cells(matrix: ScoreMatrix, threshold: float) -> list[Cell]:
    return [cell for cell in matrix.cells if is_open(cell, threshold)]


def coordinate_of(cell: Cell) -> Coordinate:
    return Coordinate(unit_id=cell.unit_id, dimension=cell.dimension)


def select_coordinate(
    matrix: ScoreMatrix,
    *,
    dimensions: list[str],
    threshold: float,
    excluded: set[Coordinate] | frozenset[Coordinate] = frozenset(),
    blocked: set[str] | frozenset[str] = frozenset(),
    active_dimension: str | None = None,
) -> Coordinate | None:
    """The weakest selectable cell: largest gap; ties -> earlier dimension, then earlier unit.

    Selectable = open, not excluded, not in a blocked dimension, in the active
    dimension when one is set, and of a unit whose file some rollout opened (`unread_files`). None when nothing is selectable.
    """
    dimension_rank = {name: rank for rank, name in enumerate(dimensions)}
    unread = set(matrix.unread_files or ())
    # A unit in a file no rollout opened cannot have been seen at work: not selectable (SPEC §5).
    unit_rank = {unit.unit_id: rank for rank, unit in enumerate(matrix.units) if unit.file not in unread}
    best: tuple[float, int, int] | None = None
    chosen: Coordinate | None = None
    for cell in open_cells(matrix, threshold):
        if cell.dimension not in dimension_rank or cell.unit_id not in unit_rank:
            continue
        if cell.dimension in blocked or (active_dimension is not None and cell.dimension != active_dimension):
            continue
        coordinate = coordinate_of(cell)
        if coordinate in excluded:
            continue
        # Smallest key wins: larger gap first, then configured dimension order, then unit order.
        key = (-cell.gap, dimension_rank[cell.dimension], unit_rank[cell.unit_id])
        if best is None or key < best:
            best, chosen = key, coordinate
    return chosen


def mean_cell(per_task: dict[str, Cell]) -> TaskSetCell:
    """The level's cell over the training tasks (SPEC §11): their mean score, each task's
    reason named by its task, their evidence together (trace ids are unique in a compile).
    One task's cell is the level's cell unchanged."""
    if not per_task:
        raise ValueError("a cell needs at least one task's cell")
    cells = list(per_task.values())
    first = cells[0]
    for task, cell in per_task.items():
        if (cell.unit_id, cell.dimension) != (first.unit_id, first.dimension):
            raise ValueError(f"task {task!r}: cell {cell.unit_id}/{cell.dimension} is not {first.unit_id}/{first.dimension}")
    if len(cells) == 1:
        return TaskSetCell(cell=first, per_task=dict(per_task))
    mean = Cell(
        unit_id=first.unit_id,
        dimension=first.dimension,
        score=mean_score([cell.score for cell in cells]),
        reason=" | ".join(f"{task}: {cell.reason}" for task, cell in per_task.items() if cell.reason),
        evidence=[ref for cell in cells for ref in cell.evidence],
        dropped_evidence=sum(cell.dropped_evidence for cell in cells),
    )
    return TaskSetCell(cell=mean, per_task=dict(per_task))


def mean_cells(per_task: dict[str, list[Cell]]) -> list[TaskSetCell]:
    """Every coordinate's TaskSetCell from each training task's cells (a column or a
    whole matrix per task), in the first task's cell order. Every task must have scored
    the same coordinates: a missing or extra one is an error naming the task."""
    by_task = {task: {(c.unit_id, c.dimension): c for c in cells} for task, cells in per_task.items()}
    if not by_task:
        return []
    order = [(c.unit_id, c.dimension) for c in next(iter(per_task.values()))]
    for task, cells in by_task.items():
        if missing := [f"{u}/{d}" for u, d in order if (u, d) not in cells]:
            raise ValueError(f"task {task!r}: no cell for {', '.join(missing)}")
        if extra := sorted(f"{u}/{d}" for u, d in set(cells) - set(order)):
            raise ValueError(f"task {task!r}: cells for coordinates the other tasks lack: {', '.join(extra)}")
    return [mean_cell({task: cells[key] for task, cells in by_task.items()}) for key in order]


def accepted_cell(decision: Decision) -> Cell | None:
    """The cell an accepted decision puts into the matrix (SPEC §6.7), None for a rejection."""
    if not decision.accepted:
        return None
    if decision.candidate_cell is not None:
        return decision.candidate_cell.model_copy(
            update={"unit_id": decision.coordinate.unit_id, "dimension": decision.coordinate.dimension}
        )
    if decision.candidate_score is None:
        return None
    return Cell(
        unit_id=decision.coordinate.unit_id,
        dimension=decision.coordinate.dimension,
        score=decision.candidate_score,
        reason=decision.reason,
    )


def current_matrix(matrix: ScoreMatrix, accepted_decisions: Iterable[Decision]) -> ScoreMatrix:
    """The matrix with each later accepted decision's candidate cell applied, in order."""
    current = matrix
    for decision in accepted_decisions:
        cell = accepted_cell(decision)
        if cell is not None and decision.level == matrix.level:
            current = current.with_cell(cell)
    return current


def _table_text(text: str) -> str:
    # A pipe or a newline would break the markdown table row.
    return " ".join(text.split()).replace("|", "\\|")


def matrix_markdown(matrix: ScoreMatrix, threshold: float | None = None) -> str:
    """Units x dimensions as a markdown table; open cells in bold when a threshold is given; the
    units of a file no rollout opened say so (`unread_files`)."""
    scores = {(cell.unit_id, cell.dimension): cell for cell in matrix.cells}
    header = "| unit | " + " | ".join(matrix.dimensions) + " |"
    rule = "|---|" + "---|" * len(matrix.dimensions)
    rows = [header, rule]
    for unit in matrix.units:
        label = unit.unit_id + (f" {unit.heading}" if unit.heading else "")
        if unit.file in (matrix.unread_files or ()):
            label += " (file not opened by any rollout: not selectable)"
        cells = []
        for dimension in matrix.dimensions:
            cell = scores.get((unit.unit_id, dimension))
            if cell is None:
                cells.append("–")
            elif threshold is not None and is_open(cell, threshold):
                cells.append(f"**{cell.score}**")
            else:
                cells.append(str(cell.score))
        rows.append(f"| {_table_text(label)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
