"""What bench_overhead.py and bench_batch.py share: a served world at a fixed latency, a
fake agent, fresh Dagster homes, the compile's critical path, and the CPU its processes used.

The model is tests/scripted_openai_server.py answering from tests/served_world.py's
one_edit_world() after sleeping `latency` seconds per call; the agent is the `command`
runner running tests/agents/sleeper.py, which sleeps `agent_seconds` and prints an answer.

The code under test is a source tree (`--tree`, default this checkout): its children run
with PYTHONPATH=<tree> (ahead of the editable install's finder) and cwd=<tree> (where
workspace.yaml is), and each fresh home gets that tree's instance dagster.yaml. The
bench itself imports the test helpers from this checkout.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script, `tests` (the served world) is not importable otherwise
    sys.path.insert(0, str(ROOT))

from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.served_world import answer_with, cli_env, one_edit_world, served_overrides

BIN = Path(sys.executable).parent
POSTGRES_STORAGE = {"postgres": {"postgres_db": {
    field: {"env": f"DAGSTER_PG_{var}"}
    for field, var in (("username", "USERNAME"), ("password", "PASSWORD"), ("hostname", "HOSTNAME"),
                       ("db_name", "DB"), ("port", "PORT"))
}}}
PR_SET_CHILD_SUBREAPER = 36


# --- the code under test -------------------------------------------------------------

@dataclass(frozen=True)
class Tree:
    root: Path

    def env(self, home: Path, storage: str = "sqlite") -> dict[str, str]:
        env = cli_env(home)
        env["PYTHONPATH"] = str(self.root)
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no network fetch of the cost map in any process
        if storage == "postgres":
            env["DEEP_PIPELINE_STORAGE"] = "postgres"
        return env

    def instance_yaml(self, storage: str) -> dict:
        """The tree's own instance settings; for postgres its Postgres file, or ours with a storage block."""
        folder = self.root / "deep_pipeline" / "instance"
        if storage == "postgres" and (folder / "dagster-postgres.yaml").is_file():
            return yaml.safe_load((folder / "dagster-postgres.yaml").read_text())
        settings = yaml.safe_load((folder / "dagster.yaml").read_text())
        if storage == "postgres":
            settings["storage"] = POSTGRES_STORAGE
        return settings

    def fresh_home(self, home: Path, storage: str = "sqlite", pool: int | None = None) -> Path:
        home.mkdir(parents=True)
        settings = self.instance_yaml(storage)
        if pool is not None:
            settings.setdefault("concurrency", {}).setdefault("pools", {})["default_limit"] = pool
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        return home


# --- the edges: model and agent ------------------------------------------------------

def slow_world(latency: float):
    """One world for all compiles served (its answers depend only on the prompt), `latency` s per call."""
    answer = answer_with(one_edit_world())

    def turn(body: dict) -> dict:
        time.sleep(latency)
        return answer(body)

    return turn


def bench_overrides(server: ScriptedOpenAIServer, agent_seconds: float, rollouts: int) -> dict:
    agent = ROOT / "tests" / "agents" / "sleeper.py"
    return {**served_overrides(server), "runner": "command", "agent_model": "bench-agent", "rollouts": rollouts,
            "agent_command": f"{sys.executable} {agent} --seconds {agent_seconds}", "agent_output_format": "text"}


def skill_variant(text: str, index: int) -> str:
    """A distinct skill (so a distinct compile identity) with the same units and the same decisions."""
    return text.replace("# Demo skill\n", f"# Demo skill {index}\n", 1)


# --- the compile's own records --------------------------------------------------------

@dataclass(frozen=True)
class Critical:
    seconds: float
    steps: int
    calls: int
    rollouts: int


def _phase(step_key: str) -> tuple[str, bool]:
    """(phase, concurrent?): a matrix's columns and a comparison's orders and samples are
    independent calls, `parallel` at once at best; edit attempts are sequential (each feeds
    the next its problem)."""
    parts = step_key.split("/")
    for name, concurrent in (("column", True), ("compare", True), ("edit", False)):
        if name in parts:
            return "/".join(parts[: parts.index(name) + 1]), concurrent
    return step_key, False


def critical_path(cdir: Path, latency: float, agent_seconds: float) -> Critical:
    """The compile's floor if our code cost nothing: the calls it made (llm/calls.jsonl, cache
    hits left out) at `latency` each and its rollouts (traces/<batch>/) at `agent_seconds`,
    `parallel` at once where the code runs them concurrently, phases and steps in sequence."""
    parallel = json.loads((cdir / "compile.json").read_text())["config"]["parallel"]
    phases: dict[str, list[bool]] = {}
    calls = 0
    for line in (cdir / "llm" / "calls.jsonl").read_text().splitlines():
        call = json.loads(line)
        if call.get("cache_hit"):
            continue
        calls += 1
        phase, concurrent = _phase(call["step_key"])
        phases.setdefault(phase, []).append(concurrent)
    model = sum(math.ceil(len(c) / parallel) if c[0] else len(c) for c in phases.values()) * latency
    rollouts, agent = 0, 0.0
    for batch in sorted((cdir / "traces").glob("*/batch.json")):
        n = len([p for p in batch.parent.glob("*.json") if p.name != "batch.json"])
        if json.loads(batch.read_text()).get("source", "rollout") == "rollout" and n:
            rollouts += n
            agent += math.ceil(n / min(parallel, n)) * agent_seconds
    steps = 2 + len(list((cdir / "matrices").glob("*/"))) + len(list((cdir / "iterations").glob("*/")))
    return Critical(model + agent, steps, calls, rollouts)


def decisions(cdir: Path) -> list[tuple]:
    report = json.loads((cdir / "report.json").read_text())
    return [(d["level"], str(d["coordinate"]), d["accepted"], d["reason"]) for d in report["decisions"]]


# --- CPU of our children --------------------------------------------------------------

def become_subreaper() -> None:
    """Orphans of our children (run workers a daemon launched) are re-parented to us and,
    once we reap them, their CPU is in RUSAGE_CHILDREN like any waited-for child's."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def children_cpu() -> float:
    """user + sys seconds of every child (and their descendants) that ended and was reaped."""
    reap()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> float:
    """CPU so far of a live process tree, from /proc (utime+stime+cutime+cstime of each process)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick
    members, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent and p not in members]
        members.update(kids)
        frontier.extend(kids)
    return sum(times.get(p, 0.0) for p in members)


# --- the daemon ----------------------------------------------------------------------

def instance_for(home: Path, env: dict[str, str]):
    import dagster as dg

    # A Postgres home reads its connection from DAGSTER_PG_* (the children's env): so do we.
    os.environ.update({k: v for k, v in env.items() if k.startswith("DAGSTER_PG_")})
    return dg.DagsterInstance.from_config(str(home))


def compile_runs(home: Path, env: dict[str, str], key: str) -> list:
    import dagster as dg

    with instance_for(home, env) as instance:
        return [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]


def compile_ended(home: Path, env: dict[str, str], key: str) -> bool:
    """report.json is written inside the finalize run: the compile has ended when every run has."""
    if not (home / "compiles" / key / "report.json").is_file():
        return False
    runs = compile_runs(home, env, key)
    return any(r.job_name == "finalize" for r in runs) and all(r.is_finished for r in runs)


def start_daemon(tree: Tree, env: dict[str, str], log: Path) -> subprocess.Popen:
    # The storage made first, by us alone: two processes creating a new SQLite home's tables
    # at once race ("table jobs already exists").
    with instance_for(Path(env["DAGSTER_HOME"]), env):
        pass
    return subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=tree.root, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_daemon_ready(home: Path, env: dict[str, str], daemon: subprocess.Popen, timeout: float = 120) -> None:
    """Until the sensor daemon has beaten once: a long-running daemon's start is not the compile's cost."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"dagster-daemon exited with {daemon.returncode} before it was ready")
        with instance_for(home, env) as instance:
            if "SENSOR" in {str(t) for t in instance.get_daemon_heartbeats()}:
                return
        time.sleep(0.5)
    raise RuntimeError(f"dagster-daemon: no sensor heartbeat within {timeout:.0f} s")


def stop_daemon(daemon: subprocess.Popen, home: Path | None = None) -> None:
    """Stop the daemon, then the model workers its runs started under `home`: a worker
    lives on in its own session, and its CPU counts only once it ended and we reaped it."""
    if daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
    daemon.wait(timeout=120)
    for state in (Path(home) / "model_worker").glob("*.json") if home else []:
        try:
            pid = json.loads(state.read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            continue
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            reap()  # an orphan re-parented to us (a child subreaper) ends only once reaped
            time.sleep(0.1)


def dagster_job(tree: Tree, env: dict[str, str], job: str, config: dict, where: Path) -> float:
    """`dagster job execute -j <job>` with `config` as its run config; its wall time."""
    path = where / f"{job}.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.monotonic()
    done = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "deep_pipeline.definitions", "-j", job,
                           "-c", str(path)], check=False, cwd=tree.root, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"dagster job execute -j {job} failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - start


def cli_program(tree: Tree) -> list[str]:
    """`deep-pipeline` as the tree declares it: the venv's script names this checkout's entry point,
    which another tree may not have."""
    import tomllib

    target = tomllib.loads((tree.root / "pyproject.toml").read_text())["project"]["scripts"]["deep-pipeline"]
    module, func = target.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.argv[0] = 'deep-pipeline'; sys.exit({func}())"]


def cli_compile(tree: Tree, env: dict[str, str], skill: Path, bundle: Path, config: Path) -> float:
    start = time.monotonic()
    done = subprocess.run([*cli_program(tree), "compile", str(skill), "--task", str(bundle), "--config",
                           str(config)], check=False, cwd=tree.root, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"deep-pipeline compile failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - start


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown cpu")
    return f"{os.cpu_count()} cores, {model}, load {os.getloadavg()[0]:.1f}"
