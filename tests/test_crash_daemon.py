"""SPEC §9 under the daemon: SIGKILL the run worker of a step, and the daemon still ends the compile.

`start_compile` registers the compile (as tests/test_daemon.py does), `dagster-daemon run`
carries it; at each kill point the worker process of the running step (its `deep/worker` tag,
set by runtime/asset_step.py) is SIGKILLed. The daemon keeps running: its loop
sensor's sweep (release_dead_runs) fails the dead run and frees its slot, and the step is
run again. Checked as the CLI points of tests/test_crash_suite.py are, against the same
uninterrupted compile.

One compile is killed at every point, in the order the compile reaches them (a judge call
of its first matrix, a candidate's rollout, finalize): a daemon compile is the suite's
dearest set-up, and each point's run is a different step's, each retried on its own. Each
point's test checks what its kill left (the calls and rollouts finished before it are not
made again, its run failed once) and that the compile ended as the uninterrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deep_pipeline.runtime.sweep import WorkerClaim

from tests.crash_harness import (
    REPO,
    CrashWorld,
    Killer,
    Outcome,
    Snapshot,
    check_instance,
    check_no_temp_files,
    check_rollouts,
    crash_world,
    open_world,
    outcome,
    repeated_calls,
    snapshot,
)
from tests.daemon_process import running_daemon
from tests.instances import Storages, on_postgres, on_postgres_only_for
from tests.served_world import OpenAIRequest, answer_with

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def worker_of(instance: dg.DagsterInstance, job: str) -> int | None:
    """The pid of the process running the compile's STARTED `job` run, once it tagged the run."""
    for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        run = record.dagster_run
        if run.job_name == job and (claim := WorkerClaim.of(run)) is not None:
            return claim.pid
    return None


def kill_worker(world: CrashWorld, job: str, killer: Killer, why: str) -> None:
    deadline = time.monotonic() + 30
    with dg.DagsterInstance.from_config(str(world.home)) as instance:
        while (pid := worker_of(instance, job)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert pid is not None, f"no STARTED {job} run with a worker pid"
    killer.kill(why, pid)


def kill_finalize_after_s_final(world: CrashWorld, killer: Killer, deadline: float) -> None:
    """SIGKILL the finalize run's worker as S_final appears: its pid first, then the folder.

    The whole finalize run takes about 0.25 s on a quiet machine, S_final to report.json
    well under that: waiting for S_final before looking the worker up missed the run every
    time there. So the worker is found while the run starts (one open instance, polled),
    and S_final is watched by a stat; a kill that still lands after report.json (a loaded
    machine) is a later point of the same run, and the compile must end the same.
    """
    launching = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    with dg.DagsterInstance.from_config(str(world.home)) as instance:
        # Slowly until the daemon launches the run (its process start takes seconds), then closely.
        while not instance.get_runs(dg.RunsFilter(job_name="finalize", statuses=launching), limit=1) and (
                time.monotonic() < deadline):
            time.sleep(0.2)
        while (pid := worker_of(instance, "finalize")) is None and time.monotonic() < deadline:
            time.sleep(0.005)
    assert pid is not None, "no STARTED finalize run with a worker pid"
    while not _final_skill(world) and time.monotonic() < deadline:
        time.sleep(0.002)
    killer.kill(POINTS[2], pid)


def _candidate_started(world: CrashWorld) -> bool:
    starts = [sha for kind, sha in world.rollouts() if kind == "start"]
    return any(sha != starts[0] for sha in starts)


def _final_skill(world: CrashWorld) -> bool:
    cdir = world.compile_dir()
    return cdir is not None and (cdir / "final" / "skill").is_dir()


POINTS = ["in-a-judge-call-of-a-matrix", "in-a-candidate-rollout", "in-finalize-after-s-final"]
# The SQLite pass kills at every point; .ci/run's Postgres pass at the one that kills rollouts in
# flight (the sweep, the slot and the run retry all on Postgres storage): the two others add
# nothing storage-specific.
POSTGRES_POINTS = {"in-a-candidate-rollout"}


def register(world: CrashWorld, root: Path) -> str:
    config = yaml.safe_load((root / "compile.yaml").read_text())
    skill, bundle = root / "skills" / "demo-skill", root / "bundle.json"
    run_config = {"ops": {"start_compile_op": {"config": {"skill_dir": str(skill), "bundle": str(bundle), "overrides": config}}}}
    (root / "start.yaml").write_text(yaml.safe_dump(run_config))
    start = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "deep_pipeline.definitions", "-j", "start_compile",
                            "-c", str(root / "start.yaml")], check=False, cwd=REPO, env=world.env, capture_output=True, text=True,
                           timeout=180)
    assert start.returncode == 0, start.stderr[-2000:]
    return world.compile_dir().name


def runs_ended(world: CrashWorld, key: str) -> bool:
    """The compile is finalized by its records and none of its runs is queued or running.

    Not "a finalize run succeeded": a kill after report.json leaves the compile finalized and
    its one finalize run failed (swept), with nothing left to retry.
    """
    cdir = world.compile_dir()
    if cdir is None or not (cdir / "report.json").is_file():
        return False
    with dg.DagsterInstance.from_config(str(world.home)) as instance:
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
    return all(r.is_finished for r in runs)


def stop_model_workers(home: Path) -> None:
    """The model worker a run started lives on in its own session (llm/model_worker.py): stop it."""
    for state in (home / "model_worker").glob("*.json"):
        try:
            os.kill(json.loads(state.read_text())["pid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


@dataclass
class Kill:
    """One kill point's killer, and what the compile had done when it fired."""

    killer: Killer = field(default_factory=Killer)
    before: Snapshot | None = None
    started: list[str] = field(default_factory=list)  # the skill versions of the rollouts started before it


@dataclass
class KilledCompile:
    world: CrashWorld
    key: str
    kills: dict[str, Kill]
    ended: Outcome
    daemon_log: str


@pytest.fixture(scope="module")
def killed_compile(tmp_path_factory, crash_reference):
    """The crash world's compile under the daemon, its run workers SIGKILLed at each point this
    storage runs (all on SQLite, POSTGRES_POINTS on Postgres), carried to its end."""
    tmp_path = tmp_path_factory.mktemp("crash-daemon")
    kills = {point: Kill() for point in POINTS if not on_postgres() or point in POSTGRES_POINTS}
    world_answer = answer_with(crash_world())
    holder: dict = {}

    def answer(body: dict) -> dict:  # the first judge column's request: kill its worker while it waits
        request = OpenAIRequest(body)
        kill = kills.get(POINTS[0])
        if kill and request.role == "judge" and "score_a" not in str(request.schema) and kill.killer.at is None:
            kill_worker(holder["world"], "score_matrix", kill.killer, POINTS[0])
        return world_answer(body)

    world, server = open_world(tmp_path, answer)
    holder["world"] = world
    with pytest.MonkeyPatch.context() as monkeypatch:
        storages = Storages(tmp_path, monkeypatch)
        try:
            storages.home(world.home)  # our dagster.yaml on the storage this run selected (SQLite or Postgres)
            with server:
                key = register(world, tmp_path)
                try:
                    with running_daemon(world.env, tmp_path / "daemon.log"):
                        deadline = time.monotonic() + 900  # three kills, each waiting for the sweep and the step's retry
                        for point, kill in kills.items():
                            kill_at(world, point, kill, deadline)
                        while not runs_ended(world, key) and time.monotonic() < deadline:
                            time.sleep(0.5)
                finally:
                    stop_model_workers(world.home)
                ended = outcome(world)
            yield KilledCompile(world, key, kills, ended, (tmp_path / "daemon.log").read_text())
        finally:
            storages.close()


def kill_at(world: CrashWorld, point: str, kill: Kill, deadline: float) -> None:
    """Wait for `point` (the judge call's kill is the server's), kill there, and keep what was done."""
    if point == POINTS[2]:
        kill_finalize_after_s_final(world, kill.killer, deadline)
    while kill.killer.at is None and time.monotonic() < deadline:
        if point == POINTS[1] and _candidate_started(world):
            kill_worker(world, "run_iteration", kill.killer, point)
        time.sleep(0.02)
    assert kill.killer.at is not None, f"never reached {point}"
    kill.before = snapshot(world)
    kill.started = [sha for kind, sha in world.rollouts()[:kill.before.rollout_lines] if kind == "start"]


JOB_OF = {POINTS[0]: "score_matrix", POINTS[1]: "run_iteration", POINTS[2]: "finalize"}


@pytest.mark.parametrize("point", POINTS)
def test_a_sigkilled_run_worker_is_failed_retried_and_the_compile_ends_as_uninterrupted(point, killed_compile,
                                                                                        crash_reference):
    on_postgres_only_for(point, POSTGRES_POINTS)
    world, kill, ended = killed_compile.world, killed_compile.kills[point], killed_compile.ended
    log = killed_compile.daemon_log
    assert ended.decisions == crash_reference.decisions, log[-3000:]
    assert (ended.skill_sha256, ended.folder_sha256) == (crash_reference.skill_sha256, crash_reference.folder_sha256)
    assert ended.requests == crash_reference.requests
    assert repeated_calls(world, kill.killer.at, kill.before) == []
    if point == POINTS[0]:
        # Before the first matrix only the input rollouts ran: none of them runs again, but one
        # in flight at the kill (none, at a judge call).
        versions = set(kill.started)
        again = [sha for kind, sha in world.rollouts()[kill.before.rollout_lines:] if kind == "start" and sha in versions]
        assert len(again) == len(kill.started) - kill.before.stored_traces, (again, kill.started, kill.before)
    else:  # no later point kills a rollout: every rollout after this kill is one it still owed
        check_rollouts(world, kill.before, crash_reference)
    check_instance(world.home)
    check_no_temp_files(world)
    with dg.DagsterInstance.from_config(str(world.home)) as instance:
        failed = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE],
                                                        tags={"deep/compile": killed_compile.key}))
    failed_jobs = sorted(r.dagster_run.job_name for r in failed)
    assert failed_jobs == sorted(JOB_OF[p] for p in killed_compile.kills), "each killed run failed once, its retry succeeded"
