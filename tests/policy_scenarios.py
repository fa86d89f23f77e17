"""A scripted world for walking the policy: scores and iteration outcomes by hand.

`run(scenario)` walks `tests.reference_walk.walk` from an empty history. Each action is
executed from the scenario's script: a ScoreLevel scores the units cut from the
current SKILL.md (unscripted cells are 5; an unscripted refresh keeps the current
scores), a RunIteration edits the unit, applies the exact-duplicate check against
`state.rejected_hashes`, and decides with the real `core.decision.decide`. Usage
grows by one call per dimension per matrix and two calls per compared iteration.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from deep_pipeline.core.actions import (
    PrepareInputs,
    RunIteration,
    ScoreLevel,
    action_label,
)
from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.decision import decide
from deep_pipeline.core.history import History
from deep_pipeline.core.keys import batch_name, iteration_label
from deep_pipeline.core.models import (
    BUDGET_EXHAUSTED,
    EDIT_VALIDATION_EXHAUSTED,
    EXACT_DUPLICATE,
    Cell,
    Comparison,
    Decision,
    ScoreMatrix,
    Unit,
)
from deep_pipeline.core.policy import CompileState
from tests.reference_walk import walk

FRONT = "---\nname: demo\ndescription: a demo skill\n---\n"
SKILL = (
    FRONT
    + "# Demo\n\nIntro text.\n\n"  # s00: 1 paragraph
    + "## Setup\n\nInstall it.\n\nConfigure it.\n\n"  # s01: 2 paragraphs
    + "## Usage\n\nRun it.\n\nCheck it.\n\nShip it.\n\n"  # s02: 3 paragraphs
    + "## Notes\n\nA note.\n"  # s03: 1 paragraph
)
BUDGET = "budget"  # a script value: the matrix stops at the budget / the iteration is cut by it


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def section_units(text: str) -> list[Unit]:
    """Sections of the demo text: every '#' line starts one (a test double of core.units)."""
    starts = [m.start() for m in re.finditer(r"^#", text, re.M)]
    ends = starts[1:] + [len(text)]
    return [
        Unit(unit_id=f"s{i:02d}", level="section", heading=text[s : text.index("\n", s)].lstrip("# "),
             heading_depth=1 if i == 0 else 2, start=s, end=e, text=text[s:e])
        for i, (s, e) in enumerate(zip(starts, ends))
    ]


def paragraph_units(text: str, section_id: str) -> list[Unit]:
    """Blocks after the heading, split at blank lines; each runs to the next block."""
    section = next(u for u in section_units(text) if u.unit_id == section_id)
    body = section.start + section.text.index("\n\n") + 2
    breaks = [body + m.end() for m in re.finditer(r"\n\n", text[body : section.end])]
    starts = [body] + [start for start in breaks if start < section.end]
    ends = starts[1:] + [section.end]
    return [
        Unit(unit_id=f"{section_id}-p{i:02d}", level="paragraph", section_id=section_id, start=s, end=e, text=text[s:e])
        for i, (s, e) in enumerate(zip(starts, ends))
    ]


def paragraph_count(text: str, section_id: str) -> int:
    return len(paragraph_units(text, section_id))


@dataclass(frozen=True)
class Outcome:
    """One iteration's script: what the editor writes and what the judge says of it."""

    score: int | None = None  # candidate score; None = same as the incumbent
    text: str | None = None  # editor text; None = unique per iteration
    relevant: bool = True
    regressions: tuple[str, ...] = ()
    kind: str = "compare"  # or "invalid" (edit_validation_exhausted) or BUDGET


def accept(score: int) -> Outcome:
    return Outcome(score=score)


REJECT = Outcome()


@dataclass
class Scenario:
    name: str
    matrices: dict[str, dict[str, int] | str]  # "section/m00" -> {"s01/clarity": 2} (or BUDGET)
    iterations: dict[str, Outcome]  # "paragraph/i01" -> outcome
    expected: list[str]  # action labels, in order
    config: dict = field(default_factory=dict)


@dataclass
class World:
    scenario: Scenario
    config: CompileConfig
    calls: int = 0
    labels: list[str] = field(default_factory=list)
    states: list[CompileState] = field(default_factory=list)

    def execute(self, action, state: CompileState):
        self.labels.append(action_label(action))
        self.states.append(state)
        if isinstance(action, ScoreLevel):
            return self.score(action, state)
        if isinstance(action, RunIteration):
            return self.iterate(action, state)
        return "input" if isinstance(action, PrepareInputs) else None  # Finalize: nothing to record

    def score(self, action: ScoreLevel, state: CompileState) -> ScoreMatrix:
        text = state.current_skill_text
        units = section_units(text) if action.level == "section" else paragraph_units(text, action.section_id)
        script = self.scenario.matrices.get(f"{action.level}/m{action.index:02d}")
        dims = self.config.dimension_names
        if action.reason == "start":
            previous = None
        else:  # a refresh keeps unscripted scores; a paragraph level's return refreshes the section
            previous = state.current_matrix if action.level == state.level else state.section_matrix
        self.calls += len(dims)
        cells = []
        for unit in units:
            for dim in dims:
                key = f"{unit.unit_id}/{dim}"
                if script is None and previous is not None:
                    score = next(c.score for c in previous.cells if f"{c.unit_id}/{c.dimension}" == key)
                else:
                    score = 5 if script in (None, BUDGET) else script.get(key, 5)
                cells.append(Cell(unit_id=unit.unit_id, dimension=dim, score=score, reason="scripted"))
        if script == BUDGET:
            cells = cells[:1]  # scoring stopped at the cap
        return ScoreMatrix(
            level=action.level, index=action.index, section_id=action.section_id, dimensions=dims, units=units,
            cells=cells, trace_batch=state.current_trace_batch, skill_sha256=sha(text),
            active_dimension=action.active_dimension, budget_exhausted=script == BUDGET,
        )

    def iterate(self, action: RunIteration, state: CompileState) -> Decision:
        outcome = self.scenario.iterations[iteration_label(action.level, action.index)]
        unit = next(u for u in state.current_units if u.unit_id == action.coordinate.unit_id)
        text = state.current_skill_text
        assert text[unit.start : unit.end] == unit.text, "current units must match the current text"
        body = unit.text.rstrip("\n")
        new_text = body + f" [{outcome.text or action_label(action)}]" + unit.text[len(body) :]
        base = dict(level=action.level, index=action.index, section_id=action.section_id,
                    coordinate=action.coordinate, edit_summary=f"edit {action.index}", edit_sha256=sha(new_text))
        if outcome.kind == BUDGET:
            return Decision(**base, accepted=False, reason=BUDGET_EXHAUSTED)
        if outcome.kind == "invalid":
            self.calls += 3
            return Decision(**base, accepted=False, reason=EDIT_VALIDATION_EXHAUSTED)
        self.calls += 1  # the editor
        if sha(new_text) in state.rejected_hashes(action.coordinate):
            return Decision(**base, accepted=False, reason=EXACT_DUPLICATE)
        self.calls += 1  # the comparator
        incumbent = state.current_matrix.cell(action.coordinate).score
        comparison = Comparison(
            incumbent_score=incumbent, candidate_score=outcome.score or incumbent,
            task_relevant=outcome.relevant, runtime_regressions=list(outcome.regressions),
        )
        accepted, reason, delta = decide(comparison, [], [], self.config.min_gain)
        decision = Decision(**base, accepted=accepted, reason=reason, delta=delta,
                            incumbent_score=comparison.incumbent_score, candidate_score=comparison.candidate_score)
        if not accepted:
            return decision
        batch = batch_name(action.level, action.index)
        cell = Cell(unit_id=unit.unit_id, dimension=action.coordinate.dimension, score=comparison.candidate_score)
        return decision.model_copy(update={
            "new_text": new_text, "skill_text": text[: unit.start] + new_text + text[unit.end :],
            "trace_batch": batch, "candidate_cell": cell,
        })


def run(scenario: Scenario) -> tuple[World, History]:
    config = CompileConfig(**scenario.config)
    world = World(scenario, config)
    history = walk(
        History(skill_text=SKILL), config, world.execute,
        paragraph_count=paragraph_count, usage=lambda: (world.calls, world.calls * 0.01),
    )
    return world, history


def fin(status: str, section: str | None, paragraph: str | None = None) -> str:
    return f"finalize {status} section={section} paragraph={paragraph}"


START = ["inputs", "score section m00 start"]


SCENARIOS = [
    Scenario(
        "converged at once",
        {"section/m00": {}},
        {},
        START + [fin("completed", "normalized_gap_converged")],
    ),
    Scenario(
        "active dimension runs dry -> refresh, next dimension, converged",
        {"section/m00": {"s02/clarity": 2, "s03/concision": 3}},
        {"section/i00": accept(4), "section/i01": accept(5)},
        START + [
            "iter section/i00 s02/clarity",
            "score section m01 refresh",
            "iter section/i01 s03/concision",
            "score section m02 refresh",
            fin("completed", "normalized_gap_converged"),
        ],
    ),
    Scenario(
        "descent refused (1 paragraph) -> blocked, no refresh, exclusion, available coordinates exhausted",
        {"section/m00": {"s00/clarity": 1, "s01/coverage": 3}},
        {"section/i00": REJECT, "section/i01": REJECT, "section/i02": accept(5)},
        START + [
            "iter section/i00 s00/clarity",
            "iter section/i01 s00/clarity",
            "iter section/i02 s01/coverage",  # selected on the matrix as it is (SPEC §7)
            "score section m01 refresh",  # coverage, now active, runs dry
            fin("completed", "available_coordinates_exhausted"),
        ],
    ),
    Scenario(
        "descent, paragraph coordinate exhausted, return; paragraph level already visited -> no 2nd descent, no refresh",
        {
            "section/m00": {"s02/clarity": 2, "s01/coverage": 3},
            "paragraph/m00": {"s02-p01/clarity": 2, "s02-p00/concision": 1},
            "section/m01": {"s02/clarity": 3, "s01/coverage": 3},
        },
        {
            "section/i00": REJECT,
            "section/i01": Outcome(relevant=False, score=5),
            "paragraph/i00": accept(4),
            "paragraph/i01": REJECT,
            "paragraph/i02": Outcome(regressions=("slower",), score=5),
            "section/i02": REJECT,
            "section/i03": Outcome(kind="invalid"),
        },
        START + [
            "iter section/i00 s02/clarity",
            "iter section/i01 s02/clarity",
            "score paragraph(s02) m00 start active=clarity",
            "iter paragraph/i00 s02-p01/clarity",
            "score paragraph(s02) m01 refresh",
            "iter paragraph/i01 s02-p00/concision",
            "iter paragraph/i02 s02-p00/concision",
            "score section m01 refresh",
            "iter section/i02 s01/coverage",
            "iter section/i03 s01/coverage",  # exhausted; no 2nd descent: blocked, nothing left, no refresh
            fin("completed", "available_coordinates_exhausted", "coordinate_exhausted"),
        ],
    ),
    Scenario(
        "exact duplicate edit is a rejection -> exhausted -> descent; paragraph level converges",
        {"section/m00": {"s01/actionability": 2}, "paragraph/m00": {}, "section/m01": {}},
        {"section/i00": Outcome(text="same"), "section/i01": Outcome(text="same", score=5)},
        START + [
            "iter section/i00 s01/actionability",
            "iter section/i01 s01/actionability",
            "score paragraph(s01) m00 start active=actionability",
            "score paragraph(s01) m01 refresh",
            "score section m01 refresh",
            fin("completed", "normalized_gap_converged", "normalized_gap_converged"),
        ],
    ),
    Scenario(
        "max iterations, last decision rejected",
        {"section/m00": {"s02/clarity": 1}},
        {"section/i00": accept(2), "section/i01": accept(3), "section/i02": REJECT},
        START + [f"iter section/i0{i} s02/clarity" for i in range(3)] + [fin("completed", "max_iterations")],
        {"section_iterations": 3},
    ),
    Scenario(
        "max iterations after accept",
        {"section/m00": {"s02/clarity": 1}},
        {"section/i00": accept(2), "section/i01": REJECT, "section/i02": accept(3)},
        START + [f"iter section/i0{i} s02/clarity" for i in range(3)]
        + [fin("completed", "max_iterations_after_accept")],
        {"section_iterations": 3},
    ),
    Scenario(
        "out of iterations with nothing open -> converged, no refresh",
        {"section/m00": {"s02/clarity": 1}},
        {"section/i00": accept(3), "section/i01": accept(5)},
        START + [f"iter section/i0{i} s02/clarity" for i in range(2)] + [fin("completed", "normalized_gap_converged")],
        {"section_iterations": 2},
    ),
    Scenario(
        "paragraph max iterations -> return; blocked dimension leaves only an excluded open cell",
        {"section/m00": {"s01/clarity": 2}, "paragraph/m00": {"s01-p00/clarity": 2}},
        {"section/i00": REJECT, "section/i01": REJECT, "paragraph/i00": REJECT},
        START + [
            "iter section/i00 s01/clarity",
            "iter section/i01 s01/clarity",
            "score paragraph(s01) m00 start active=clarity",
            "iter paragraph/i00 s01-p00/clarity",
            "score section m01 refresh",
            fin("completed", "available_coordinates_exhausted", "max_iterations"),
        ],
        {"paragraph_iterations": 1},
    ),
    Scenario(
        "coordinate exhausted wins over the iteration budget: descent, then section max iterations",
        {"section/m00": {"s01/clarity": 2}, "paragraph/m00": {}},
        {"section/i00": REJECT, "section/i01": REJECT},
        START + [
            "iter section/i00 s01/clarity",
            "iter section/i01 s01/clarity",
            "score paragraph(s01) m00 start active=clarity",
            "score paragraph(s01) m01 refresh",
            "score section m01 refresh",
            fin("completed", "max_iterations", "normalized_gap_converged"),
        ],
        {"section_iterations": 2},
    ),
    Scenario(
        "budget: call cap",
        {"section/m00": {"s01/clarity": 2, "s02/clarity": 2}},
        {"section/i00": accept(4), "section/i01": accept(4)},
        START + ["iter section/i00 s01/clarity", "iter section/i01 s02/clarity"]
        + [fin("budget_exhausted", "budget_exhausted")],
        {"max_calls": 8},
    ),
    Scenario(
        "budget: USD cap right after the first matrix",
        {"section/m00": {"s01/clarity": 2}},
        {},
        START + [fin("budget_exhausted", "budget_exhausted")],
        {"max_usd": 0.045},
    ),
    Scenario(
        "budget: a matrix cut short by the budget",
        {"section/m00": {"s01/clarity": 2}, "section/m01": BUDGET},
        {"section/i00": accept(4)},
        START + ["iter section/i00 s01/clarity", "score section m01 refresh"]
        + [fin("budget_exhausted", "budget_exhausted")],
    ),
    Scenario(
        "budget: an iteration cut short at paragraph level",
        {"section/m00": {"s01/clarity": 2}, "paragraph/m00": {"s01-p00/clarity": 2}},
        {"section/i00": REJECT, "section/i01": REJECT, "paragraph/i00": Outcome(kind=BUDGET)},
        START + [
            "iter section/i00 s01/clarity",
            "iter section/i01 s01/clarity",
            "score paragraph(s01) m00 start active=clarity",
            "iter paragraph/i00 s01-p00/clarity",
            fin("budget_exhausted", "budget_exhausted", "budget_exhausted"),
        ],
    ),
]
