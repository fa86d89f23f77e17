"""SPEC §10: `evaluate` rolls out S_fast and S_final, runs the verifier, reports rates and intervals.

The compile is made with the scripted judge and editor (tests/compile_world.py) and the
command runner with a fake agent whose result depends on the skill's text
(tests/agents/skill_marker_agent.py): the accepted edit writes the marker, so S_final
passes the verifier (tests/agents/check_result.py) and S_fast does not.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from deep_pipeline.cli import main
from deep_pipeline.core.stats import newcombe_difference, wilson
from deep_pipeline.engine.compile_dir import CompileDir
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.evaluation import evaluate
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts.verifier import VerifierMissing
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.pids import alive_in, read_pids

AGENTS = Path(__file__).parent / "agents"
AGENT = AGENTS / "skill_marker_agent.py"
VERIFIER = f"{sys.executable} {AGENTS / 'check_result.py'} {{workdir}}"
WORLD = dict(low={("s02-steps", "clarity"): 2})


def command_config(counter: Path, **extra) -> dict:
    return {**CONFIG, "runner": "command", "agent_output_format": "text",
            "agent_command": f"{sys.executable} {AGENT} {counter} {{skill_dir}} {{workdir}}", **extra}


def compiled(tmp_path: Path, scripted_llm, *, bundle_extra: dict | None = None, config: dict | None = None,
             finish: bool = True, counter: Path | None = None) -> tuple[CompileDir, Path]:
    """A compile of the world's skill with the marker agent; finalized unless `finish` is False."""
    install_world(scripted_llm, World(**WORLD))
    skill, bundle = make_inputs(tmp_path)
    if bundle_extra:
        bundle.write_text(json.dumps({**json.loads(bundle.read_text()), **bundle_extra}))
    counter = counter or tmp_path / "runs.txt"
    settings = effective_config(load_deployment(), config or command_config(counter))
    record = register_compile(tmp_path / "store", skill, bundle, settings)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    if finish:
        run_steps(ctx, run_step)
    return ctx.cdir, counter


def runs(counter: Path) -> int:
    return counter.read_text().count("run") if counter.is_file() else 0


def test_evaluate_reports_both_rates_their_intervals_and_the_difference_and_a_rerun_makes_no_rollout(
        tmp_path, scripted_llm):
    cdir, counter = compiled(tmp_path, scripted_llm)
    assert MARK in (cdir.final_skill / "SKILL.md").read_text()  # the compile accepted the marker edit
    before = runs(counter)
    result = evaluate(cdir, verifier=VERIFIER, rollouts=3)
    assert runs(counter) - before == 6  # 3 a side
    assert (result.fast.passed, result.final.passed) == (0, 3)
    assert (result.fast.rate, result.final.rate) == (0.0, 1.0)
    assert result.fast.interval == wilson(0, 3) and result.final.interval == wilson(3, 3)
    assert result.difference == 1.0 and result.difference_interval == newcombe_difference(3, 3, 0, 3)
    assert set(result.fast.failures.values()) == {"exit 1: result.txt says FAIL"}
    assert result.verifier_signal_used is False
    folder = Path(result.folder)
    assert folder == cdir.path / "evaluations" / "1"
    stored = json.loads((folder / "rollouts" / "final" / "eval1-final-r0.json").read_text())
    assert stored["verdict"]["passed"] is True and stored["trace"]["trace_id"] == "eval1-final-r0"
    assert json.loads((folder / "results" / "n03.json").read_text())["final"]["passed"] == 3

    again = evaluate(cdir, verifier=VERIFIER, rollouts=3)
    assert runs(counter) - before == 6  # a rerun reuses every finished rollout and verdict
    assert again == result
    more = evaluate(cdir, verifier=VERIFIER, rollouts=5)
    assert runs(counter) - before == 10  # a larger N adds only the missing rollouts
    assert (more.fast.passed, more.final.passed, more.number) == (0, 5, 1)
    other = evaluate(cdir, verifier="test -f {workdir}/result.txt", rollouts=1)
    assert other.number == 2 and other.final.passed == other.fast.passed == 1  # a new verifier, a new folder


def test_the_verifier_is_not_part_of_the_compile_identity_and_the_bundle_s_verifier_is_the_default(
        tmp_path, scripted_llm):
    counter = tmp_path / "runs.txt"  # one agent command for both: only the bundles differ
    plain, _ = compiled(tmp_path / "a", scripted_llm, finish=False, counter=counter)
    with_verifier, _ = compiled(tmp_path / "b", scripted_llm, bundle_extra={"verifier": VERIFIER}, counter=counter)
    assert plain.key == with_verifier.key
    result = evaluate(with_verifier, rollouts=1)  # no --verifier: the bundle's
    assert result.verifier == VERIFIER and result.final.passed == 1


def test_a_hanging_verifier_is_killed_with_its_group_at_its_timeout_and_counts_as_a_fail(tmp_path, scripted_llm):
    cdir, _ = compiled(tmp_path, scripted_llm)
    pidfile = tmp_path / "verifier.pid"
    # The child's pid@start and PID namespace: the verifier may run in a namespace of its own.
    hanging = (f"sh -c 'echo $$@$(cut -d\" \" -f22 /proc/$$/stat) $(readlink /proc/self/ns/pid) > {pidfile}; "
               f"exec sleep 120' & wait; : {{workdir}}")
    started = time.monotonic()
    result = evaluate(cdir, verifier=hanging, rollouts=1, verifier_timeout_s=1.0)
    assert time.monotonic() - started < 30
    assert result.final.passed == result.fast.passed == 0
    assert set(result.final.failures.values()) == {"verifier killed after its timeout of 1 s"}
    stored = json.loads((Path(result.folder) / "rollouts" / "fast" / "eval1-fast-r0.json").read_text())
    assert stored["verdict"]["timed_out"] is True
    [child], namespace = read_pids(pidfile)
    assert not alive_in(child, namespace)  # the verifier's own child went with its group


def test_a_verifier_that_is_not_found_fails_the_step_and_stores_no_verdict(tmp_path, scripted_llm):
    cdir, _ = compiled(tmp_path, scripted_llm)
    with pytest.raises(VerifierMissing, match="not found"):
        evaluate(cdir, verifier="no-such-verifier-xyz {workdir}", rollouts=2)
    assert not list((cdir.path / "evaluations").glob("*/rollouts/*/*.json"))


@pytest.fixture
def cli_store(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))


def test_the_cli_prints_the_table(tmp_path, scripted_llm, cli_store, capsys):
    cdir, _ = compiled(tmp_path, scripted_llm)
    assert main(["evaluate", cdir.key, "--verifier", VERIFIER, "--rollouts", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "S_fast        0/2     0%  [0%, 66%]" in out
    assert "S_final       2/2   100%  [34%, 100%]" in out
    assert "final - fast       +100 pts" in out
    assert main(["evaluate", cdir.key, "--verifier", VERIFIER, "--rollouts", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["final"]["passed"] == 2


def test_the_cli_gives_one_line_exit_1_for_a_missing_verifier(tmp_path, scripted_llm, cli_store, capsys):
    cdir, _ = compiled(tmp_path, scripted_llm)
    assert main(["evaluate", cdir.key, "--verifier", "no-such-verifier-xyz {workdir}", "--rollouts", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step failed" in err[0] and "not found" in err[0]


@pytest.mark.parametrize("args, expected", [
    (["--verifier", "pytest -q"], "has no {workdir}"),
    (["--verifier", VERIFIER, "--rollouts", "0"], "--rollouts: 0"),
    ([], "verifier: the task bundle has none"),
])
def test_the_cli_refuses_bad_input_in_one_line_exit_2_writing_nothing(tmp_path, scripted_llm, cli_store, capsys,
                                                                    args, expected):
    cdir, _ = compiled(tmp_path, scripted_llm)
    assert main(["evaluate", cdir.key, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not (cdir.path / "evaluations").exists()


def test_the_cli_refuses_an_unknown_or_unfinished_compile(tmp_path, scripted_llm, cli_store, capsys):
    assert main(["evaluate", "nope-123456", "--verifier", VERIFIER]) == 2
    assert "no such compile" in capsys.readouterr().err
    cdir, _ = compiled(tmp_path, scripted_llm, finish=False)
    assert main(["evaluate", cdir.key, "--verifier", VERIFIER]) == 2
    assert "not finalized" in capsys.readouterr().err
    assert not (cdir.path / "evaluations").exists()


def test_a_replay_compile_cannot_be_evaluated(tmp_path, scripted_llm):
    cdir, _ = compiled(tmp_path, scripted_llm, config=dict(CONFIG))
    with pytest.raises(InputError, match="runner 'replay' cannot be evaluated"):
        evaluate(cdir, verifier=VERIFIER)


def test_the_evaluation_asset_runs_in_its_own_job_and_shows_the_figures(tmp_path, scripted_llm, cli_store):
    import dagster as dg

    from deep_pipeline.definitions import defs
    from deep_pipeline.defs.jobs import ASSET_JOBS

    cdir, _ = compiled(tmp_path, scripted_llm)  # the store of cli_store: DEEP_PIPELINE_STORE
    job = defs.resolve_job_def("evaluate")
    assert [k.to_user_string() for k in job.asset_layer.selected_asset_keys] == ["evaluation"]
    assert "evaluate" not in {j.name for j in ASSET_JOBS}  # never a step the loop drives
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("compiles", [cdir.key])
    run_config = {"ops": {"evaluation": {"config": {"verifier": VERIFIER, "rollouts": 2}}}}
    result = job.execute_in_process(instance=instance, partition_key=cdir.key, run_config=run_config)
    assert result.success
    event = instance.get_latest_materialization_event(dg.AssetKey("evaluation"))
    meta = event.asset_materialization.metadata
    assert (meta["fast_passed"].value, meta["final_passed"].value, meta["difference"].value) == (0, 2, 1.0)
    assert meta["final_interval_95"].value == {"low": wilson(2, 2).low, "high": 1.0}
    assert meta["evaluation_dir"].value == str(cdir.path / "evaluations" / "1")


def test_the_chat_runner_writes_the_answer_to_answer_txt_and_the_demo_verifier_counts_three_lines(
        tmp_path, scripted_llm):
    from deep_pipeline.inputs.bundle import load_bundle
    from deep_pipeline.llm.client import ModelClient, ModelSettings
    from deep_pipeline.rollouts.base import RolloutTask
    from deep_pipeline.rollouts.chat import ChatRunner
    from deep_pipeline.rollouts.verifier import ANSWER_FILE, run_verifier

    answers = ["red leaves fall\nslowly to the ground\nautumn ends\n", "one line only"]
    scripted_llm.script("agent", *answers)
    skill, _ = make_inputs(tmp_path)
    runner = ChatRunner(lambda: ModelClient(ModelSettings(model="scripted/agent"), "agent"), parallel=1)
    demo = load_bundle(Path(__file__).parent.parent / "deep_pipeline" / "examples" / "haiku-task.json").bundle
    seen, verdicts = {}, {}

    def verify(index: int, workdir: Path) -> None:
        seen[index] = (workdir / ANSWER_FILE).read_text()
        verdicts[index] = run_verifier(demo.verifier, workdir, timeout_s=10)

    runner.run_batch(package_dir=skill, skill_sha256="0" * 64, task=RolloutTask(prompt="p", skill_name="demo-skill"),
                     batch="eval1-fast", n=2, archive_dir=tmp_path / "raw", verify=verify)
    assert seen == dict(enumerate(answers))
    assert [verdicts[i].passed for i in range(2)] == [True, False]
    assert verdicts[1].reason == "exit 1: answer.txt has 1 non-empty lines; expected 3"
