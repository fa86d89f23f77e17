"""Crash injection for whole compiles (SPEC §9): tests/test_crash_suite.py, tests/test_crash_suite_iteration.py
and tests/test_crash_daemon.py; the CLI's kill points are in tests/crash_points.py.

A compile runs in its own process group against a scripted OpenAI-compatible server
(tests/scripted_openai_server.py logs a hash of every request and when it was answered)
with the `command` runner and tests/agents/crash_agent.py (about a second per rollout,
logged). A `Trigger` watches the compile (the k-th model answer, the agent's log, a file
of the compile folder) and SIGKILLs the group once; `Snapshot` keeps what the kill
left on disk, and `check_*` compare the resumed compile with an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg
import yaml

from deep_pipeline.locks import file_lock
from tests.compile_world import World, make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.forked_cli import ForkedCLI
from tests.served_world import answer_with, cli_env, served_overrides

REPO = Path(__file__).resolve().parents[1]
AGENT = Path(__file__).parent / "agents" / "crash_agent.py"
IN_FLIGHT = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]
TEMP_NAME = re.compile(r"^\..+\.tmp$")  # store.py's atomic writes: `.<name>.<random>.tmp`


class DeterministicWorld(World):
    """The same request always gets the same answer: the edit's text does not count the edits made,
    so a repeated edit call after a kill writes the same S_final as the uninterrupted run."""

    def editor(self, request) -> dict:
        answer = super().editor(request)
        return {**answer, "edit_summary": "scripted edit",
                "new_text": f"IMPROVED-{answer['unit_id']}: do the steps one by one.\n"}


def crash_world() -> World:
    """One low cell: two matrices (section, paragraph), one iteration with a candidate's rollouts."""
    return DeterministicWorld(low={("s02-steps", "clarity"): 2})


def tagged(answer):
    """`answer`, with a hash of the request in every reason: two requests never get the same
    text, so a cached answer names the one request it answered (repeated_calls reads them)."""

    def turn(body: dict) -> dict:
        tag = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]
        return {"content": json.dumps(_tag(json.loads(answer(body)["content"]), tag))}

    return turn


def _tag(value, tag: str):
    if isinstance(value, dict):
        return {k: f"{v} [{tag}]" if k in ("reason", "edit_summary") and isinstance(v, str) else _tag(v, tag)
                for k, v in value.items()}
    return [_tag(v, tag) for v in value] if isinstance(value, list) else value


@dataclass
class Killer:
    """SIGKILLs one process group once, from whichever watcher fires first; `at` is when."""

    pgid: int | None = None
    at: float | None = None
    why: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def kill(self, why: str, pid: int | None = None) -> None:
        """SIGKILL the group, or the one process `pid` (a daemon's run worker: the daemon goes on)."""
        with self._lock:
            if (self.pgid is None and pid is None) or self.at is not None:
                return
            self.at = time.time()
            self.why = why
            try:
                os.kill(pid, signal.SIGKILL) if pid is not None else os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class Trigger:
    """When to kill: after the `answer`-th model answer, or once `ready(world)` holds (polled)."""

    name: str
    answer: int | None = None
    ready: Callable[[CrashWorld], bool] | None = None
    delay_s: float = 0.0  # after `ready`: into the rollout, not at its first instant


@dataclass
class CrashWorld:
    """One compile's folder, server, agent log and environment (TMPDIR a folder of its own)."""

    root: Path
    server: ScriptedOpenAIServer
    env: dict[str, str]
    args: list[str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    @property
    def agent_log(self) -> Path:
        return self.root / "agent.log"

    def compile_dir(self) -> Path | None:
        found = sorted((self.home / "compiles").glob("*/compile.json")) if (self.home / "compiles").is_dir() else []
        return found[0].parent if found else None

    def rollouts(self) -> list[tuple[str, str]]:
        """(start|end, skill sha) per line of the agent's log."""
        if not self.agent_log.is_file():
            return []
        return [tuple(line.split()) for line in self.agent_log.read_text().splitlines() if line.strip()]


def open_world(root: Path, answer=None) -> tuple[CrashWorld, ScriptedOpenAIServer]:
    """Inputs, a compile.yaml and a server (entered by the caller) for a crash-suite compile under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    skill, bundle = make_inputs(root)
    server = ScriptedOpenAIServer([tagged(answer or answer_with(crash_world()))] * 50)
    (root / "tmp").mkdir()
    env = {**cli_env(root / "home"), "TMPDIR": str(root / "tmp")}
    # The agent calls no model: its model is a served one (never asked), not `local`, whose
    # embedded server every CLI process would start and load for nothing (2 CPU-s a process).
    config = {**served_overrides(server), "runner": "command", "agent_output_format": "text", "rollouts": 2,
              "agent_model": "openai/agent", "agent_api_base": server.api_base,
              "agent_command": f"{sys.executable} {AGENT} {root / 'agent.log'} {{skill_dir}}"}
    (root / "compile.yaml").write_text(yaml.safe_dump(config))
    args = ["compile", str(skill), "--task", str(bundle), "--config", str(root / "compile.yaml")]
    return CrashWorld(root, server, env, args), server


def run_cli(world: CrashWorld, args: list[str], trigger: Trigger | None = None, timeout_s: float = 240) -> tuple[
        subprocess.CompletedProcess, Killer]:
    """Run `deep-pipeline ARGS` in its own process group; SIGKILL the group when `trigger` fires."""
    killer = Killer()
    proc = ForkedCLI(args, cwd=REPO, env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     start_new_session=True)
    killer.pgid = proc.pid
    stop = threading.Event()
    watcher = None
    if trigger is not None and trigger.answer is not None:
        world.server.after_answer = lambda k: k == trigger.answer and killer.kill(f"after answer {k}")
    elif trigger is not None:
        watcher = threading.Thread(target=_watch, args=(world, trigger, killer, stop), daemon=True)
        watcher.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        stop.set()
        world.server.after_answer = None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), killer


def _watch(world: CrashWorld, trigger: Trigger, killer: Killer, stop: threading.Event) -> None:
    while not stop.is_set():
        if trigger.ready(world):
            time.sleep(trigger.delay_s)
            killer.kill(trigger.name)
            return
        time.sleep(0.02)


# -- what a kill left, and the checks ------------------------------------------------


@dataclass
class Snapshot:
    """The compile folder's state right after the kill: what was finished, by the records."""

    cached_answers: set[str]  # the text of every answer the response cache kept
    stored_traces: int  # rollouts whose trace was stored
    rollout_lines: int  # lines of the agent's log so far


def snapshot(world: CrashWorld) -> Snapshot:
    """Taken once the killed compile's agents are gone (their guards stop them): until then
    one waiting for its turn may still log a start of the dead run's."""
    deadline = time.monotonic() + 20
    while _agents_running(world) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _agents_running(world), "the killed compile's agents outlived it"
    cdir = world.compile_dir()
    answers, traces = set(), 0
    if cdir is not None:
        for path in (cdir / "llm" / "cache").glob("*.json"):
            answers.add(json.loads(path.read_text())["text"])
        traces = sum(1 for p in (cdir / "traces").glob("*/*.json") if p.name != "batch.json")
    return Snapshot(answers, traces, len(world.rollouts()))


def _agents_running(world: CrashWorld) -> bool:
    needle = str(world.agent_log).encode()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and needle in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@dataclass
class Outcome:
    """What an uninterrupted compile (or a resumed one) ended with."""

    decisions: list
    skill_sha256: str
    folder_sha256: str
    answers: int
    rollouts: int
    requests: set[str]


def outcome(world: CrashWorld) -> Outcome:
    cdir = world.compile_dir()
    report = json.loads((cdir / "report.json").read_text())
    decisions = [(d["level"], d["coordinate"]["unit_id"], d["coordinate"]["dimension"], d["accepted"], d["reason"])
                 for d in report["decisions"]]
    final = Path(report["final_skill_dir"])
    return Outcome(decisions, hashlib.sha256((final / "SKILL.md").read_bytes()).hexdigest(), tree_sha256(final),
                   sum(1 for e in world.server.log if e.answered), sum(1 for kind, _ in world.rollouts() if kind == "start"),
                   {e.sha256 for e in world.server.log})


def session_reference(tmp_path_factory) -> Outcome:
    """The crash world's uninterrupted compile, made once per test session and shared by every
    crash file, whichever pytest-xdist worker runs it: a file under the session's base folder,
    written by the first to ask while the others wait on its lock (each file made its own before)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # a worker's base is the session's/popen-gwN
    path = shared / "crash-reference.json"
    with file_lock(shared / "crash-reference.lock"):
        if not path.is_file():
            world, server = open_world(tmp_path_factory.mktemp("reference"))
            with server:
                done, _ = run_cli(world, world.args)
                assert done.returncode == 0, done.stderr[-3000:]
                made = outcome(world)
            path.write_text(json.dumps({**asdict(made), "requests": sorted(made.requests)}))
        data = json.loads(path.read_text())
    return Outcome(**{**data, "decisions": [tuple(d) for d in data["decisions"]], "requests": set(data["requests"])})


def tree_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def repeated_calls(world: CrashWorld, killed_at: float, before: Snapshot) -> list[str]:
    """Requests answered and kept before the kill that were sent again after it (SPEC §9: none may be).

    Finished = its answer was sent before the kill and the response cache kept it; a call
    whose answer was on the wire, or not yet written down, was in flight and may repeat.
    """
    finished = {e.sha256 for e in world.server.log
                if e.answered is not None and e.answered < killed_at and e.content in before.cached_answers}
    again = [e.sha256 for e in world.server.log if e.arrived > killed_at and e.sha256 in finished]
    return sorted(set(again))


def check_rollouts(world: CrashWorld, before: Snapshot, reference: Outcome) -> None:
    """Every rollout whose trace was stored before the kill is not run again; every other runs once."""
    after = [kind for kind, _ in world.rollouts()[before.rollout_lines:] if kind == "start"]
    assert len(after) == reference.rollouts - before.stored_traces, (
        f"{len(after)} rollouts after the kill, expected {reference.rollouts} - {before.stored_traces} stored")


def check_instance(home: Path) -> None:
    """No run left in flight, no `llm` slot claimed, no step waiting for one."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        stuck = instance.get_run_records(dg.RunsFilter(statuses=IN_FLIGHT))
        assert stuck == [], [(r.dagster_run.job_name, r.dagster_run.status) for r in stuck]
        info = instance.event_log_storage.get_concurrency_info("llm")
        assert info.claimed_slots == [] and info.pending_steps == [], (info.claimed_slots, info.pending_steps)


def bound_socket_paths() -> set[str]:
    """Paths of the unix sockets some live process has bound (Linux's /proc/net/unix)."""
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return {fields[7] for fields in (line.split() for line in lines) if len(fields) > 7}


def leftovers(tmpdir: Path) -> list[str]:
    """What is in TMPDIR, less the socket files of processes that have died.

    A code server the daemon started binds a socket file in TMPDIR. A SIGKILLed one leaves the
    file behind with nothing bound to it: Dagster's leftover, not ours (CI24 failed on one). A
    socket still bound, a directory (a rollout sandbox) or any other file still counts.
    """
    bound = bound_socket_paths()
    return sorted(p.name for p in tmpdir.iterdir() if not (p.is_socket() and str(p) not in bound))


def check_no_temp_files(world: CrashWorld) -> None:
    """Nothing in the compile's TMPDIR (rollout sandboxes live there), no atomic write's temp in its folder."""
    # A helper module, not a test module: pytest does not rewrite its asserts, so each says what it saw.
    # A code server the daemon started removes its socket file from TMPDIR as it exits, which on a
    # loaded machine can be well after the daemon itself has gone: wait for that, polled. A sandbox
    # left behind stays, so the check still fails on one.
    deadline = time.monotonic() + 120
    while (left := leftovers(world.tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"left in TMPDIR {world.tmpdir}: {left}"
    temps = [str(p) for p in world.compile_dir().rglob("*") if TEMP_NAME.match(p.name)]
    assert temps == [], f"temp files of atomic writes left: {temps}"
