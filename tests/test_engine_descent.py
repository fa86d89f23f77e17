"""SPEC §7 through the real steps: a refused descent blocks, clears and selects again, no refresh."""

from __future__ import annotations

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, World, install_world, make_inputs


def test_a_refused_descent_selects_on_the_same_matrix_without_a_refresh(tmp_path, scripted_llm):
    # s01-when-to-use has one paragraph: its exhausted coordinate cannot descend.
    world = World(low={("s01-when-to-use", "clarity"): 2, ("s03-output", "concision"): 3},
                  compare={("s01-when-to-use", "clarity"): (2, 2)})
    install_world(scripted_llm, world)
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)

    assert [(str(d.coordinate), d.reason) for d in report.decisions] == [
        ("s01-when-to-use/clarity", "target_cell_did_not_improve"),
        ("s01-when-to-use/clarity", "target_cell_did_not_improve"),
        ("s03-output/concision", "target_improved_without_runtime_regression"),
    ]
    # The third selection was made on the first matrix: the only refresh is the one
    # after concision ran dry, so two matrices of five columns in all.
    matrices = ctx.cdir.matrix_records()
    assert [(m.matrix.index, m.reason) for m in matrices] == [(0, "start"), (1, "refresh")]
    assert matrices[1].seq > next(d.seq for d in ctx.cdir.decision_records() if d.decision.index == 2)
    assert world.calls["column"] == 10
    assert [(lv.level, lv.stop_reason) for lv in report.levels] == [("section", "available_coordinates_exhausted")]
