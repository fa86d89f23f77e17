"""Running a task's verifier in a rollout's work directory (SPEC §10, `deep-pipeline evaluate`).

The verifier is a shell command template (the user's own test command, so a shell may
read it) with `{workdir}` replaced by the work directory, shell-quoted. It runs after
the agent finished and before the workdir is removed, with the workdir as its cwd, under
the same guard as an agent (its own process group, killed with the group at its
timeout) and with an environment from the same allowlist: no provider key reaches it.
Exit 0 is a pass. A verifier that cannot be found or run (exit 127/126) is not a fail
of the skill but a step that cannot go on (VerifierMissing, exit 1).

The chat runner has no workdir: it writes the final answer to `answer.txt` (ANSWER_FILE)
in a fresh temporary workdir and runs the verifier there.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.errors import InputError, StepError
from deep_pipeline.rollouts.base import Verify
from deep_pipeline.rollouts.process import run_process
from deep_pipeline.rollouts.sandbox import SandboxLimits, agent_env

WORKDIR = "{workdir}"
ANSWER_FILE = "answer.txt"
DEFAULT_VERIFIER_TIMEOUT_S = 120.0
SHELL = "/bin/sh"
OUTPUT_TAIL_CHARS = 2000
_CANNOT_RUN = {127: "not found", 126: "not executable"}  # what sh exits with

# A Verify (rollouts/base.py) is called with the rollout's index and its work directory
# after the agent finished; the caller keeps what it learns (the workdir goes after).


class VerifierMissing(StepError):
    """The verifier could not be started: a broken command, not a failed rollout."""


class Verdict(BaseModel):
    """What the verifier said about one rollout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: bool
    exit_code: int | None = None
    timed_out: bool = False
    reason: str = Field(description="why it failed, or 'exit 0'")
    duration_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""


def check_verifier(template: str, label: str = "verifier") -> str:
    """The template, or InputError (one line) when it cannot be a verifier."""
    if not template.strip():
        raise InputError(f"{label}: empty; expected a command such as 'pytest -q {WORKDIR}/tests'")
    if WORKDIR not in template:
        raise InputError(f"{label}: {template!r} has no {WORKDIR}; expected the rollout's work directory in it, "
                         f"e.g. 'python check.py {WORKDIR}'")
    return template


def verifier_command(template: str, workdir: Path) -> str:
    return template.replace(WORKDIR, shlex.quote(str(workdir)))


def run_verifier(template: str, workdir: Path, *, timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S) -> Verdict:
    """Run the verifier once in `workdir`; a fail is a Verdict, a verifier that cannot run raises."""
    command = verifier_command(template, workdir)
    with tempfile.TemporaryDirectory(prefix="deep-verifier-") as scratch:
        home, tmp = Path(scratch) / "home", Path(scratch) / "tmp"
        home.mkdir()
        tmp.mkdir()
        limits = SandboxLimits(timeout_s=timeout_s, idle_timeout_s=timeout_s, kill_grace_s=1.0)
        result = run_process([SHELL, "-c", command], cwd=Path(workdir), env=agent_env(home=home, tmpdir=tmp),
                             limits=limits)
    out, err = result.stdout.text()[-OUTPUT_TAIL_CHARS:], result.stderr.text()[-OUTPUT_TAIL_CHARS:]
    common = dict(duration_s=round(result.duration_s, 3), stdout_tail=out, stderr_tail=err)
    if result.start_error:
        raise VerifierMissing(f"verifier {template!r}: {result.start_error}")
    if result.limit == "cancelled":
        raise StepError("verifier stopped: the evaluation was interrupted")
    if result.limit is not None:  # the wall timeout, or as long without output
        return Verdict(passed=False, timed_out=True, reason=f"verifier killed after its timeout of {timeout_s:g} s",
                       **common)
    if result.returncode in _CANNOT_RUN:
        tail = err.strip().splitlines()[-1:] or [""]
        raise VerifierMissing(f"verifier {template!r}: command {_CANNOT_RUN[result.returncode]} "
                              f"(exit {result.returncode}) {tail[0][:200]}".rstrip())
    if result.returncode == 0:
        return Verdict(passed=True, exit_code=0, reason="exit 0", **common)
    last = (err.strip() or out.strip()).splitlines()[-1:] or [""]
    reason = f"exit {result.returncode}" + (f": {last[0][:200]}" if last[0] else "")
    return Verdict(passed=False, exit_code=result.returncode, reason=reason, **common)


def verify_answer(verify: Verify, index: int, answer: str) -> None:
    """For runners without a workdir: the answer in `answer.txt` of a fresh one, verified there."""
    with tempfile.TemporaryDirectory(prefix="deep-answer-") as root:
        work = Path(root) / "work"
        work.mkdir()
        (work / ANSWER_FILE).write_text(answer, encoding="utf-8")
        verify(index, work)
