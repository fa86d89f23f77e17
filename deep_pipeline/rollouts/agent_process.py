"""The shared life of a rollout whose agent is a subprocess (mini-swe-agent, any CLI).

sandbox -> start -> pump output under limits -> archive raw output -> read the trace
-> remove the sandbox. Subclasses say how to start the agent and how to read what it
left behind; everything about failure categories lives here, in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, ErrorCategory, Trace, TraceStep
from deep_pipeline.llm.access import PLACEHOLDER_KEY
from deep_pipeline.rollouts.base import (
    Progress,
    Verify,
    RolloutTask,
    Stopwatch,
    archive_file,
    check_task_dir,
    run_parallel,
    trace_id,
)
from deep_pipeline.rollouts.process import ProcessResult, run_process, stop_leftover_agents
from deep_pipeline.rollouts.sandbox import (
    SKILL_INSTALL_DIRS,
    Sandbox,
    SandboxLimits,
    make_sandbox,
    remove_orphaned_sandboxes,
)
from deep_pipeline.secrets import redact, secret_values


@dataclass
class Launch:
    """How to start one agent: its argv, its whole environment."""

    argv: list[str]
    env: dict[str, str]


@dataclass
class Reading:
    """What a runner read from an agent's output; `error` when the output itself is bad."""

    steps: list[TraceStep] = field(default_factory=list)
    final_output: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    error: tuple[ErrorCategory, str] | None = None


class ProcessRunner:
    name = "process"
    install_dirs: tuple[str, ...] = SKILL_INSTALL_DIRS

    def __init__(
        self,
        *,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        parallel: int = 3,
        limits: SandboxLimits | None = None,
        sandbox_parent: Path | None = None,
        local_home: Path | None = None,
        agents_dir: Path | None = None,
    ) -> None:
        self.model = model  # the configured name, as traces are labelled ("local" stays "local")
        self.api_base = api_base
        self.target_model, self.target_api_base = model, api_base  # what the agent really calls
        self.key_model: str | None = model  # whose API keys the agent's environment gets
        self.extra_env: dict[str, str] = {}
        if api_base and model != "local":
            # A self-hosted endpoint gets the key agent_api_key_env names, or the placeholder:
            # never the user's provider key, which the agent's OpenAI client would send there.
            self.key_model, self.extra_env = None, {"OPENAI_API_KEY": api_key or PLACEHOLDER_KEY}
        self.parallel = parallel
        self.limits = limits or SandboxLimits()
        self.sandbox_parent = sandbox_parent
        self.local_home = local_home
        self.agents_dir = agents_dir  # records of running agents, for the next run to stop if this one dies

    # -- what subclasses provide -------------------------------------------------
    def launch(self, sandbox: Sandbox, task: RolloutTask, package_dir: Path) -> Launch:
        raise NotImplementedError

    def read(self, result: ProcessResult, sandbox: Sandbox, archive: Path) -> Reading:
        raise NotImplementedError

    # -- the batch ----------------------------------------------------------------
    def run_batch(
        self,
        *,
        package_dir: Path,
        skill_sha256: str,
        task: RolloutTask,
        batch: str,
        n: int,
        archive_dir: Path,
        progress: Progress | None = None,
        done: dict[int, Trace] | None = None,
        verify: Verify | None = None,
    ) -> list[Trace]:
        check_task_dir(task)
        if self.agents_dir is not None:  # a killed run's agents must not run beside ours
            stop_leftover_agents(self.agents_dir)
            remove_orphaned_sandboxes(self.sandbox_parent)  # and its sandboxes go, now nothing runs in them
        self._resolve_local_model()

        def rollout(index: int) -> Trace:
            labels = dict(
                trace_id=trace_id(batch, index), batch=batch, skill_sha256=skill_sha256,
                agent=self.name, model=self.model, prompt=task.prompt,
            )
            return self._rollout(index, Path(package_dir), task, Path(archive_dir), labels, verify)

        return run_parallel(n, self.parallel, rollout, progress, done)

    def _resolve_local_model(self) -> None:
        """`local` means the embedded model's OpenAI-compatible server, shared per machine."""
        if self.model != "local":
            return
        from deep_pipeline.llm.local_model import ensure_local_server

        server = ensure_local_server(self.local_home)
        self.target_model, self.target_api_base = f"openai/{server.alias}", server.api_base
        # The user's OPENAI_API_KEY must not travel to our own server: a dummy key instead.
        self.key_model, self.extra_env = None, {"OPENAI_API_KEY": PLACEHOLDER_KEY}

    def _rollout(self, index: int, package_dir: Path, task: RolloutTask, archive_dir: Path, labels: dict,
                 verify: Verify | None = None) -> Trace:
        clock = Stopwatch()
        sandbox: Sandbox | None = None
        try:
            sandbox = make_sandbox(
                task_dir=task.task_dir, package_dir=package_dir, skill_name=task.skill_name,
                install_dirs=self.install_dirs, parent=self.sandbox_parent,
            )
            launch = self.launch(sandbox, task, package_dir)
        except OSError as exc:
            if sandbox is not None:
                sandbox.remove()
            return Trace(**labels, error_category="sandbox_setup",
                         error_reason=f"could not prepare the workdir: {exc}", duration_s=clock.elapsed)
        try:
            result, reading = self._run(launch, sandbox, archive_dir, index)
            category, reason = classify(result, reading, self.limits)
            if verify is not None and category not in MACHINE_FAULT_CATEGORIES:
                verify(index, sandbox.work)  # the agent is done and stopped; its workdir is still here
        finally:
            sandbox.remove()  # after archiving (and verifying): the workdir's copy is never needed again
        return Trace(
            **labels, steps=reading.steps, final_output=final_output_once(reading),
            error_category=category, error_reason=reason, duration_s=round(result.duration_s, 3),
            prompt_tokens=reading.prompt_tokens, completion_tokens=reading.completion_tokens,
            cost_usd=reading.cost_usd,
        )

    def _run(self, launch: Launch, sandbox: Sandbox, archive_dir: Path, index: int) -> tuple[ProcessResult, Reading]:
        """Run the agent, archive its raw output (secrets scrubbed), read what it left."""
        result = run_process(launch.argv, cwd=sandbox.work, env=launch.env, limits=self.limits,
                             record_dir=self.agents_dir)
        sandbox.secrets = secret_values(launch.env)
        for stream in (result.stdout, result.stderr):
            stream.data = bytearray(redact(bytes(stream.data), sandbox.secrets))
        command = {"argv": launch.argv}
        if result.uncontained:  # the record of a rollout whose descendants could have escaped it
            command["uncontained"] = result.uncontained
        archive_file(archive_dir, index, "command.json",
                     redact(json.dumps(command, indent=1).encode("utf-8"), sandbox.secrets))
        archive_file(archive_dir, index, "stdout.txt", result.stdout.archived())
        archive_file(archive_dir, index, "stderr.txt", result.stderr.archived())
        try:
            reading = self.read(result, sandbox, archive_dir / str(index))
        except Exception as exc:  # noqa: BLE001 - the agent's output is untrusted input
            reading = Reading(error=("agent_error", f"could not read the agent's output: {type(exc).__name__}: {exc}"))
        return result, reading


# What a trace keeps of a long final output that is also one of its steps: its head and
# tail, more than the judge is ever shown of it (render.py shortens it to 1500 chars).
FINAL_OUTPUT_KEEP_CHARS = 8000


def final_output_once(reading: Reading) -> str:
    """The final output, not stored a second time in full when a step already holds it.

    With the `text` format the whole capped stdout is both the one step and the final
    output; evidence is quoted from steps, so the step keeps it whole.
    """
    text = reading.final_output
    if len(text) <= 2 * FINAL_OUTPUT_KEEP_CHARS:
        return text
    step = next((s.step for s in reading.steps if s.text == text), None)
    if step is None:
        return text
    omitted = len(text) - 2 * FINAL_OUTPUT_KEEP_CHARS
    return (f"{text[:FINAL_OUTPUT_KEEP_CHARS]}\n[deep_pipeline: {omitted} chars omitted here; "
            f"the whole final output is step {step}]\n{text[-FINAL_OUTPUT_KEEP_CHARS:]}")


def classify(
    result: ProcessResult, reading: Reading, limits: SandboxLimits
) -> tuple[ErrorCategory | None, str | None]:
    """The rollout's failure, most fundamental first: start, limit, exit status, output."""
    leftover = f"; {len(result.leftover_pids)} processes survived SIGKILL" if result.leftover_pids else ""
    if result.start_error:
        return "sandbox_setup", result.start_error
    if result.limit == "timeout":
        return "timeout", f"killed after the rollout timeout of {limits.timeout_s:g} s{leftover}"
    if result.limit == "idle_timeout":
        return "idle_timeout", f"killed after no output for {limits.idle_timeout_s:g} s (idle timeout){leftover}"
    if result.returncode:
        tail = result.stderr.text().strip()[-300:]
        return "agent_error", f"agent exited with status {result.returncode}" + (f"; stderr: {tail}" if tail else "")
    if reading.error:
        return reading.error
    return None, None
