"""SPEC §11 "After the compile": a task set's evaluation on every task, training and held-out.

A task set of two training tasks (status-update, release-notes) and one held-out task
(retro) is compiled with the scripted judge and editor (tests/test_task_set_compile.py's
world) and the command runner with tests/agents/task_marker_agent.py: the accepted edit
makes the agent pass the verifier on the training tasks and fail it on the held-out one,
so the figures per task, per split and the overfitting sentence are all known. The judged
comparison's judge is scripted by the order it sees the packages in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from deep_pipeline.cli import main
from deep_pipeline.core.stats import newcombe_difference, wilson
from deep_pipeline.core.winrate import win_rate
from deep_pipeline.engine.evaluation import format_result
from deep_pipeline.engine.evaluation_tasks import evaluate_compile as evaluate
from deep_pipeline.engine.evaluation_judged import judge_held_out
from deep_pipeline.errors import InputError
from tests.compile_world import MARK
from tests.test_evaluate import VERIFIER, cli_store, runs  # noqa: F401  (a fixture)
from tests.test_evaluate import compiled as one_task_compiled
from tests.test_task_set_compile import TaskWorld, compiled

AGENT = Path(__file__).parent / "agents" / "task_marker_agent.py"
SENTENCE = "S_final gained on the training tasks and lost on the held-out ones"
# What the scripted judge answers, by the side S_final's traces are shown as: a win when
# they are A, a tie when they are B. Both orders asked: S_final's win rate is (1 + 0.5) / 2.
JUDGED = {"A": "A", "B": "tie"}


class JudgedWorld(TaskWorld):
    def __init__(self, table: dict[str, str] | None = None) -> None:
        super().__init__({"status-update": (2, 4), "release-notes": (2, 4)})
        self.table = table or JUDGED  # the side S_final is shown as -> the judge's answer
        self.judged: list[str] = []  # the side S_final was shown as, per judged call

    def judge(self, request) -> dict:
        if "better" not in (request.schema or {}).get("properties", {}):
            return super().judge(request)
        assert "Write the retro." in request.text and "Write the release notes." not in request.text
        a_part = request.text.split("# Traces with version A", 1)[1].split("# Traces with version B", 1)[0]
        final_as = "A" if "skill: edited" in a_part else "B"
        self.judged.append(final_as)
        return {"reason": f"scripted: version {self.table[final_as]} did better", "better": self.table[final_as]}


def task_set(tmp_path: Path, scripted_llm, table: dict[str, str] | None = None) -> tuple[object, JudgedWorld, Path]:
    counter = tmp_path / "runs.txt"
    world = JudgedWorld(table)
    command = f"{sys.executable} {AGENT} {counter} {{skill_dir}} {{workdir}} {{prompt}}"
    ctx = compiled(tmp_path, scripted_llm, world, runner="command", agent_output_format="text", agent_command=command)
    assert MARK in (ctx.cdir.final_skill / "SKILL.md").read_text()  # the compile accepted the marker edit
    return ctx.cdir, world, counter


def set_verifier(cdir, task: str, verifier: str) -> None:
    """A task's stored bundle with a verifier (not part of the compile's identity, SPEC §10)."""
    entry = next(e for e in cdir.record().tasks if e.task == task)
    path = cdir.path / entry.stored
    path.write_text(json.dumps({**json.loads(path.read_text()), "verifier": verifier}))


def test_every_task_is_evaluated_with_figures_per_task_and_pooled_per_split_and_a_rerun_makes_no_rollout(
        tmp_path, scripted_llm):
    cdir, _, counter = task_set(tmp_path, scripted_llm)
    with pytest.raises(InputError, match="no task bundle has one and none was given"):
        evaluate(cdir, rollouts=2)
    assert not (cdir.path / "evaluations").exists()

    # Only release-notes brings its own verifier: the other two are listed, not failed.
    set_verifier(cdir, "release-notes", VERIFIER)
    before = runs(counter)
    partial = evaluate(cdir, rollouts=2)
    assert runs(counter) - before == 4
    assert [(t.task, t.split, t.verifier) for t in partial.tasks] == [
        ("status-update", "training", None), ("release-notes", "training", VERIFIER), ("retro", "held_out", None)]
    assert partial.no_verifier == ["status-update", "retro"]
    assert [p.split for p in partial.pooled] == ["training"] and partial.pooled[0].tasks == ["release-notes"]
    assert "status-update          training  no verifier" in format_result(partial)

    # --verifier for the others: release-notes keeps its own (the same here), so its rollouts are reused.
    result = evaluate(cdir, verifier=VERIFIER, rollouts=2)
    assert runs(counter) - before == 12  # 2 a side for the two tasks not yet evaluated
    by_task = {t.task: t.result for t in result.tasks}
    assert by_task["release-notes"] == partial.tasks[1].result
    for name, (fast, final) in {"status-update": (0, 2), "release-notes": (0, 2), "retro": (2, 0)}.items():
        r = by_task[name]
        assert (r.task, r.fast.passed, r.final.passed, r.rollouts) == (name, fast, final, 2)
        assert r.fast.interval == wilson(fast, 2) and r.final.interval == wilson(final, 2)
        assert r.difference_interval == newcombe_difference(final, 2, fast, 2)
        stored = json.loads((Path(r.folder) / "spec.json").read_text())
        assert stored["task"] == name
    training, held_out = result.pooled
    assert (training.split, training.tasks, training.rollouts) == ("training", ["status-update", "release-notes"], 4)
    assert (training.fast_passed, training.final_passed, training.difference) == (0, 4, 1.0)
    assert training.final_interval == wilson(4, 4) and training.difference_interval == newcombe_difference(4, 4, 0, 4)
    assert (held_out.split, held_out.fast_passed, held_out.final_passed, held_out.difference) == ("held_out", 2, 0, -1.0)
    assert held_out.difference_interval == newcombe_difference(0, 2, 2, 2)
    assert result.no_verifier == [] and result.verifier_signal_used is False
    assert json.loads(Path(result.folder).read_text())["pooled"][1]["final_passed"] == 0

    text = format_result(result)
    assert SENTENCE in text
    assert "pooled                 training      0/4    0% [0%, 49%]        4/4  100% [51%, 100%]   +100 pts" in text
    assert "pooled                 held_out      2/2  100% [34%, 100%]      0/2    0% [0%, 66%]     -100 pts" in text

    again = evaluate(cdir, verifier=VERIFIER, rollouts=2)
    assert runs(counter) - before == 12 and again == result  # a rerun makes no rollout


def test_the_judged_comparison_scores_s_final_s_win_rate_in_both_orders_and_a_rerun_repeats_nothing(
        tmp_path, scripted_llm):
    cdir, world, counter = task_set(tmp_path, scripted_llm)
    compile_calls = cdir.calls_log.read_text()
    before, asked = runs(counter), len(scripted_llm.requests_for("judge"))
    result = judge_held_out(cdir, rollouts=2)
    assert runs(counter) - before == 4  # the held-out task only, 2 a side
    assert sorted(world.judged) == ["A", "B"]  # both orders, one call each
    (task,) = result.tasks
    assert task.task == "retro" and [c.final_label for c in task.calls] == world.judged
    assert [c.outcome for c in task.calls] == [{"A": "win", "B": "tie"}[side] for side in world.judged]
    assert (task.win.rate, task.win.wins, task.win.ties, task.win.losses) == (0.75, 1, 1, 0)
    assert task.win.interval == wilson(1.5, 2) == win_rate(["win", "tie"]).interval
    assert result.pooled == task.win
    # The reasons lose their blind sides: "version A" reads as the package it was.
    assert [c.reason for c in task.calls] == [
        {"win": "scripted: S_final did better", "tie": "scripted: version tie did better"}[c.outcome] for c in task.calls]
    # The judge's calls are the evaluation's own: not in the compile's log, in judged/llm/.
    assert cdir.calls_log.read_text() == compile_calls
    folder = cdir.path / "evaluations" / "judged"
    assert len((folder / "llm" / "calls.jsonl").read_text().splitlines()) == 2
    assert json.loads((folder / "n02.json").read_text())["pooled"]["rate"] == 0.75
    assert (folder / "rollouts" / "final" / "judged-h0-final-r1.json").is_file()
    assert "pooled (held-out)" in format_result(result)

    again = judge_held_out(cdir, rollouts=2)
    assert runs(counter) - before == 4 and len(scripted_llm.requests_for("judge")) == asked + 2
    assert again.tasks == result.tasks and again.judge_usage.cache_hits == 2


def test_a_held_out_loss_after_accepted_edits_is_said_in_a_plain_sentence(tmp_path, scripted_llm):
    cdir, _, _ = task_set(tmp_path, scripted_llm, table={"A": "B", "B": "A"})  # S_fast always better
    result = judge_held_out(cdir, rollouts=1)
    assert (result.pooled.rate, result.pooled.losses, result.accepted_edits) == (0.0, 2, 1)
    assert SENTENCE in format_result(result)


def test_the_cli_prints_per_task_rows_and_the_judged_comparison(tmp_path, scripted_llm, cli_store, capsys):
    cdir, _, _ = task_set(tmp_path, scripted_llm)
    assert main(["evaluate", cdir.key, "--verifier", VERIFIER, "--rollouts", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "retro                  held_out      1/1  100%" in out and SENTENCE in out
    assert main(["evaluate", cdir.key, "--verifier", VERIFIER, "--rollouts", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["split"] for p in data["pooled"]] == ["training", "held_out"]
    from deep_pipeline.report.gather import latest_evaluation

    assert latest_evaluation(cdir) is None  # a task's own result is not shown as the compile's evaluation
    assert main(["evaluate", cdir.key, "--judge", "--rollouts", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pooled"]["rate"] == 0.75
    # The HTML report shows both, training and held-out side by side, with the plain sentence.
    from deep_pipeline.report import gather, render

    page = render(gather(cdir))
    assert "Training and held-out tasks side by side" in page and "pooled (held-out)" in page
    assert "retro                  held_out      1/1  100%" in page and SENTENCE in page


def test_judge_on_a_compile_without_a_held_out_task_is_refused_in_one_line_exit_2(
        tmp_path, scripted_llm, cli_store, capsys):
    cdir, _ = one_task_compiled(tmp_path, scripted_llm)
    assert main(["evaluate", cdir.key, "--judge"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"deep-pipeline: error: {cdir.key}: no held-out task to compare on; compile with --holdout"]
    assert not (cdir.path / "evaluations").exists()


def test_the_evaluation_asset_shows_a_task_set_s_figures_per_task_and_split(tmp_path, scripted_llm, cli_store):
    import dagster as dg

    from deep_pipeline.definitions import defs

    cdir, _, _ = task_set(tmp_path, scripted_llm)  # the store of cli_store: DEEP_PIPELINE_STORE
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("compiles", [cdir.key])
    run_config = {"ops": {"evaluation": {"config": {"verifier": VERIFIER, "rollouts": 1}}}}
    result = defs.resolve_job_def("evaluate").execute_in_process(instance=instance, partition_key=cdir.key,
                                                                 run_config=run_config)
    assert result.success
    meta = instance.get_latest_materialization_event(dg.AssetKey("evaluation")).asset_materialization.metadata
    assert meta["tasks"].value["retro"]["difference"] == -1.0
    assert meta["pooled"].value["training"]["final"] == 1.0 and meta["no_verifier"].value == []


@pytest.mark.parametrize("outcomes, score, rate", [
    (["win", "win"], 2.0, 1.0), (["loss", "loss"], 0.0, 0.0), (["tie", "tie"], 1.0, 0.5), (["win", "loss", "tie"], 1.5, 0.5)])
def test_the_win_rate_counts_a_tie_as_half_a_win_with_wilson_s_interval(outcomes, score, rate):
    result = win_rate(outcomes)
    assert (result.score, result.rate, result.calls) == (score, rate, len(outcomes))
    assert result.interval == wilson(score, len(outcomes))  # type: ignore[arg-type]
    assert result.interval.low <= rate <= result.interval.high
    if rate == 0.5:  # ties alone: an interval centred on a half
        assert abs(result.interval.low + result.interval.high - 1.0) < 1e-12


def test_the_win_rate_refuses_no_call_and_an_unknown_outcome():
    with pytest.raises(ValueError, match="no judge call"):
        win_rate([])
    with pytest.raises(ValueError, match="unknown outcomes"):
        win_rate(["win", "draw"])  # type: ignore[list-item]


def test_judge_on_a_replay_compile_is_refused_before_anything_is_written(tmp_path, scripted_llm):
    from tests.test_task_set_compile import compiled as replay_compiled

    ctx = replay_compiled(tmp_path, scripted_llm, TaskWorld({"status-update": (2, 4), "release-notes": (2, 4)}))
    with pytest.raises(InputError, match="--judge: runner 'replay' cannot roll out a held-out task"):
        judge_held_out(ctx.cdir, rollouts=1)
    assert not (ctx.cdir.path / "evaluations").exists()
