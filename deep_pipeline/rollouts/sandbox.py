"""Sandbox hygiene for agent processes (SPEC §3, DESIGN "Rollout runners").

Each rollout gets its own temp folder (`work/` = a copy of the task directory with the
skill installed, `home/`, `tmp/`) and an environment built from an allowlist (never
the parent's environment: it holds the user's keys). Running the process under its
limits lives in `process.py`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.rollouts.guard import start_time
from deep_pipeline.secrets import PROVIDER_VARIABLES

STREAM_CAP_BYTES = 2 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT_S = 300.0
# SkillsBench copies a task's skills into every agent's folder; we do the same inside
# the workdir so whichever CLI runs finds the skill where it looks.
SKILL_INSTALL_DIRS = (
    ".claude/skills",
    ".codex/skills",
    ".agents/skills",
    ".gemini/skills",
    ".opencode/skill",
    ".goose/skills",
    ".factory/skills",
    "skills",
)
_BASE_VARS = ("PATH", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME")
# Agent CLI (basename of argv[0]) -> the variables it authenticates with.
_CLI_VARS = {
    "claude": (*PROVIDER_VARIABLES["anthropic"], "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": PROVIDER_VARIABLES["openai"][:2],  # the key and OPENAI_BASE_URL, not OPENAI_API_BASE
    "gemini": PROVIDER_VARIABLES["gemini"],
}


class SandboxLimits(BaseModel):
    """Limits of one agent process; the wall time comes from CompileConfig.rollout_timeout_s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=600.0, gt=0)
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0)
    kill_grace_s: float = Field(default=3.0, ge=0)
    stream_cap_bytes: int = Field(default=STREAM_CAP_BYTES, ge=1024)


def model_env_vars(model: str | None, argv0: str | None = None) -> list[str]:
    """Names of the parent variables the configured model or agent CLI needs, nothing more."""
    names: list[str] = []
    lowered = (model or "").lower()
    for provider, keys in PROVIDER_VARIABLES.items():
        if lowered.startswith(f"{provider}/"):
            names.extend(keys)
    if "claude" in lowered and not lowered.startswith(("openai/", "openrouter/")):
        names.extend(PROVIDER_VARIABLES["anthropic"])
    if argv0:
        names.extend(_CLI_VARS.get(Path(argv0).name, ()))
    return list(dict.fromkeys(names))


def agent_env(
    *,
    home: Path,
    tmpdir: Path,
    model: str | None = None,
    argv0: str | None = None,
    api_base: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The agent's whole environment: an allowlist, a temp HOME/TMPDIR and the model's keys."""
    env = {name: os.environ[name] for name in _BASE_VARS if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=str(home), TMPDIR=str(tmpdir))
    for name in model_env_vars(model, argv0):
        if name in os.environ:
            env[name] = os.environ[name]
    if api_base:
        # An OpenAI-compatible endpoint (the local model, a proxy): CLIs read these.
        env["OPENAI_BASE_URL"] = api_base
        env["OPENAI_API_BASE"] = api_base
    env.update(extra or {})
    return env


@dataclass
class Sandbox:
    """One rollout's temp folder. `work` is the agent's cwd; `root` holds our files too."""

    root: Path
    work: Path
    home: Path
    tmp: Path
    secrets: list[str] = field(default_factory=list)  # values scrubbed from what we archive

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


SANDBOX_PREFIX = "deep-rollout-"
OWNER_FILE = ".owner"  # "<pid> <start time>" of the process that made the sandbox


def remove_orphaned_sandboxes(parent: Path | None = None) -> int:
    """Remove the sandboxes whose maker is gone (a driver killed mid-batch); returns how many.

    Call it after the dead driver's agents were stopped (process.stop_leftover_agents).
    A sandbox without an owner file, or whose owner still runs (or cannot be told: no
    /proc, start time 0), is not ours to remove.
    """
    removed = 0
    for root in Path(parent or tempfile.gettempdir()).glob(f"{SANDBOX_PREFIX}*"):
        try:
            pid, started = (int(v) for v in (root / OWNER_FILE).read_text(encoding="utf-8").split())
        except (OSError, ValueError):
            continue
        if started and start_time(pid) != started:  # gone, or the pid is another process's by now
            shutil.rmtree(root, ignore_errors=True)
            removed += 1
    return removed


def make_sandbox(
    *,
    task_dir: Path | None,
    package_dir: Path,
    skill_name: str,
    install_dirs: tuple[str, ...] = SKILL_INSTALL_DIRS,
    parent: Path | None = None,
) -> Sandbox:
    """A fresh copy of the task directory with the skill installed under each install dir."""
    root = Path(tempfile.mkdtemp(prefix=SANDBOX_PREFIX, dir=parent))
    try:
        # Who made it: a driver killed mid-rollout cannot remove it, the next batch does.
        (root / OWNER_FILE).write_text(f"{os.getpid()} {start_time(os.getpid()) or 0}\n", encoding="utf-8")
        work = root / "work"
        if task_dir is not None:
            shutil.copytree(task_dir, work, symlinks=True)
        else:
            work.mkdir()
        for rel in install_dirs:
            target = work / rel / skill_name
            if target.exists():  # the task shipped its own copy: ours is the one under test
                shutil.rmtree(target)
            shutil.copytree(package_dir, target, symlinks=False)
        home, tmp = root / "home", root / "tmp"
        home.mkdir()
        tmp.mkdir()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Sandbox(root=root, work=work, home=home, tmp=tmp)
