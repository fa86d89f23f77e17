"""The CLI crash suite's kill points and the check each one runs (SPEC §9).

Each point is a test id of its own, split over two files by where the compile is when it is
killed, so pytest-xdist runs the two halves on two workers (the points take 15-60 s each):
tests/test_crash_suite.py (the inputs and the first matrix) and tests/test_crash_suite_iteration.py
(the iteration, the second matrix and finalize). A `deep-pipeline compile` in its own process group
(judge and editor on a scripted OpenAI-compatible server, the `command` runner with an agent of
about a second per rollout) is SIGKILLed whole at the point, then `deep-pipeline resume KEY`
carries it to its end. Checked against the session's one uninterrupted compile: the same
decisions and S_final, no finished model call or rollout made again, no run left in flight, no
`llm` slot claimed, no temp file left. Harness: tests/crash_harness.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.crash_harness import (
    CrashWorld,
    Outcome,
    Trigger,
    check_instance,
    check_no_temp_files,
    check_rollouts,
    open_world,
    outcome,
    repeated_calls,
    run_cli,
    snapshot,
)


def _starts(world: CrashWorld) -> list[str]:
    return [sha for kind, sha in world.rollouts() if kind == "start"]


def _candidate_starts(world: CrashWorld) -> int:
    starts = _starts(world)
    return sum(1 for sha in starts if sha != starts[0])


def _has(pattern: str):
    def ready(world: CrashWorld) -> bool:
        cdir = world.compile_dir()
        return cdir is not None and any(cdir.glob(pattern))

    return ready


# The reference's 13 answers: 1-5 the first matrix's columns (concurrent), 6 the edit,
# 7-8 the comparisons, 9-13 the second matrix's columns.
INPUTS_AND_FIRST_MATRIX = [
    Trigger("in-first-input-rollout", ready=lambda w: len(_starts(w)) >= 1, delay_s=0.4),
    Trigger("in-second-input-rollout", ready=lambda w: len(_starts(w)) >= 2, delay_s=0.4),
    Trigger("inputs-stored-before-the-first-matrix", ready=_has("traces/input/batch.json")),
    *(Trigger(f"after-answer-{k}", answer=k) for k in (1, 3, 5, 6)),
]
ITERATION_AND_AFTER = [
    Trigger("in-first-candidate-rollout", ready=lambda w: _candidate_starts(w) >= 1, delay_s=0.4),
    Trigger("in-second-candidate-rollout", ready=lambda w: _candidate_starts(w) >= 2, delay_s=0.4),
    *(Trigger(f"after-answer-{k}", answer=k) for k in (7, 9, 12)),
    Trigger("decision-written-before-the-next-matrix", ready=_has("iterations/*/decision.json")),
    Trigger("in-finalize-after-s-final", ready=_has("final/skill")),
    # Finalized by its records, its run still STARTED, report.html not yet written.
    Trigger("in-finalize-after-report-json", ready=_has("report.json")),
]


def kill_and_resume(tmp_path: Path, reference: Outcome, trigger: Trigger) -> None:
    """SIGKILL a CLI compile at `trigger`, resume it, and check it ended as the reference did."""
    world, server = open_world(tmp_path)
    with server:
        killed, killer = run_cli(world, world.args, trigger)
        assert killer.at is not None and killed.returncode == -9, (
            f"the compile ended ({killed.returncode}) before the kill point", killed.stderr[-2000:])
        before = snapshot(world)
        resumed, _ = run_cli(world, ["resume", world.compile_dir().name])
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        ended = outcome(world)
    assert ended.decisions == reference.decisions
    assert (ended.skill_sha256, ended.folder_sha256) == (reference.skill_sha256, reference.folder_sha256)
    assert ended.requests == reference.requests  # the same model calls, whatever was repeated
    assert repeated_calls(world, killer.at, before) == []
    check_rollouts(world, before, reference)
    check_instance(world.home)
    check_no_temp_files(world)
    assert (world.compile_dir() / "report.html").is_file()  # written again if the kill came before it
