"""The `chat` runner: one model answer with the skill in the system prompt.

For prompt-only tasks and for models that cannot drive tools (the embedded local model
included). Each rollout is its own ModelClient call whose step key names the batch and
the rollout index, so three rollouts are three samples, not one cache hit.

A rollout has a deadline, `rollout_timeout_s` after its request is first sent (SPEC §6.4):
not after the rollout starts, since litellm's start-up and the queue for a call slot are
the machinery's time (SPEC §9). Each send may take `agent_timeout_s` and at most the time
left; a request with no answer by then is resent within the deadline. A model still working
on its one request at the deadline was too slow: a `timeout` trace, like an agent process
killed at its limit. Sends that got no answer at all (hung, unreachable) are `api_error`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from deep_pipeline.core.keys import rollout_call_key
from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, SKILL_FILE, Trace, TraceStep
from deep_pipeline.core.package import unit_files
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
from deep_pipeline.store import package_files

SYSTEM_PROMPT = """You are an agent working on a task. The skill `{name}` is installed for you; \
follow it where it applies.

<skill name="{name}" file="SKILL.md">
{skill}
</skill>
{references}{files}
Answer the task directly: you cannot run commands or open files."""


REFERENCE = """<skill name="{name}" file="{path}">
{text}
</skill>
"""


def chat_messages(package_dir: Path, task: RolloutTask) -> list[dict]:
    """System: SKILL.md, the package's markdown files that are units, and the names of the rest.

    The agent cannot open a file, so the reference files it is sent to (core/package.py's unit
    files) are in the prompt in full: an edit to one of them reaches the rollouts, as SPEC §5's
    read rule assumes of a runner whose traces show no tool calls. A package of SKILL.md alone
    gets the very prompt it always got. User: the task prompt.
    """
    skill = (package_dir / SKILL_FILE).read_text(encoding="utf-8")
    paths = [p.as_posix() for p in package_files(package_dir)]
    shown = unit_files(skill, paths)
    references = "".join(REFERENCE.format(name=task.skill_name, path=path,
                                          text=(package_dir / path).read_text(encoding="utf-8")) for path in shown)
    others = [p for p in paths if p != SKILL_FILE and p not in shown]
    files = ("\nOther files in the skill package:\n" + "\n".join(f"- {p}" for p in others) + "\n") if others else ""
    system = SYSTEM_PROMPT.format(name=task.skill_name, skill=skill, references=references, files=files)
    return [{"role": "system", "content": system}, {"role": "user", "content": task.prompt}]


class ChatRunner:
    name = "chat"

    def __init__(self, model_client: Callable[[], object], *, parallel: int = 3, default_model: str | None = None,
                 timeout_s: float | None = None):
        self.model_client = model_client
        self.parallel = parallel
        self.default_model = default_model
        self.timeout_s = timeout_s  # None: no deadline but the client's own per-call timeout

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

        def rollout(index: int) -> Trace:
            trace = self._rollout(index, Path(package_dir), skill_sha256, task, batch, Path(archive_dir))
            if verify is not None and trace.error_category not in MACHINE_FAULT_CATEGORIES:
                from deep_pipeline.rollouts.verifier import verify_answer

                verify_answer(verify, index, trace.final_output)  # no workdir: answer.txt in a fresh one
            return trace

        return run_parallel(n, self.parallel, rollout, progress, done)

    def _rollout(
        self, index: int, package_dir: Path, skill_sha256: str, task: RolloutTask, batch: str, archive_dir: Path
    ) -> Trace:
        clock = Stopwatch()
        labels = dict(trace_id=trace_id(batch, index), batch=batch, skill_sha256=skill_sha256,
                      agent=self.name, model=self.default_model, prompt=task.prompt)
        try:
            messages = chat_messages(package_dir, task)
        except (OSError, UnicodeDecodeError) as exc:
            return Trace(**labels, error_category="sandbox_setup",
                         error_reason=f"cannot read the skill package: {exc}", duration_s=clock.elapsed)
        steps = [TraceStep(step=1, source="system", text=messages[0]["content"]),
                 TraceStep(step=2, source="user", text=messages[1]["content"])]
        client = self.model_client()
        settings = getattr(client, "settings", None)
        labels["model"] = getattr(settings, "model", None) or self.default_model
        from deep_pipeline.errors import PromptTooLong
        from deep_pipeline.llm.client import ModelTimeout
        from deep_pipeline.llm.timeouts import Deadline

        deadline = Deadline(self.timeout_s) if self.timeout_s is not None else None
        try:
            answer, record = client.complete(rollout_call_key(batch, index), messages, deadline=deadline)
        except ModelTimeout as exc:
            return self._timed_out(labels, steps, clock, archive_dir, index, str(exc))
        except PromptTooLong as exc:
            # No cause chained: the CLI prints a failed step's innermost cause, and this line already holds it.
            raise PromptTooLong(too_long_line(package_dir, messages, labels["model"], str(exc))) from None
        except Exception as exc:  # noqa: BLE001 - any other model failure is this rollout's api_error
            if _must_propagate(exc):
                raise
            reason = f"model call failed: {type(exc).__name__}: {exc}"
            archive_file(archive_dir, index, "error.txt", reason)
            return Trace(**labels, steps=steps, error_category="api_error", error_reason=reason,
                         duration_s=clock.elapsed)
        archive_file(archive_dir, index, "response.txt", answer)
        if deadline is not None and not getattr(record, "cache_hit", False) and deadline.overrun():
            # An answer that still came in late (a trickling stream) is past the limit all the same.
            return self._timed_out(labels, steps, clock, archive_dir, index, "the answer came after the deadline")
        steps.append(TraceStep(step=3, source="agent", text=answer))
        return Trace(
            **labels, steps=steps, final_output=answer, duration_s=clock.elapsed,
            prompt_tokens=getattr(record, "prompt_tokens", None),
            completion_tokens=getattr(record, "completion_tokens", None),
            cost_usd=getattr(record, "cost_usd", None),
        )

    def _timed_out(self, labels: dict, steps: list[TraceStep], clock: Stopwatch, archive_dir: Path, index: int,
                   detail: str) -> Trace:
        reason = f"the agent's model gave no answer within the rollout timeout of {self.timeout_s:g} s ({detail[:300]})"
        archive_file(archive_dir, index, "error.txt", reason)
        return Trace(**labels, steps=steps, timed_out=True, error_category="timeout", error_reason=reason,
                     duration_s=clock.elapsed)


def too_long_line(package_dir: Path, messages: list[dict], model: str | None, error: str) -> str:
    """Why a chat prompt did not fit, in one line: the files it holds by size, and what would fit.

    Every rollout of the batch sends the same prompt, so no rollout can succeed and resending
    cannot help: the compile stops here rather than scoring a batch of failed traces.
    """
    skill = (package_dir / SKILL_FILE).read_text(encoding="utf-8")
    shown = [SKILL_FILE, *unit_files(skill, [p.as_posix() for p in package_files(package_dir)])]
    sizes = sorted(((len((package_dir / path).read_text(encoding="utf-8")), path) for path in shown), reverse=True)
    files = ", ".join(f"{path} {chars:,} chars" for chars, path in sizes[:4]) + (", …" if len(sizes) > 4 else "")
    total = sum(len(m["content"]) for m in messages)
    return (f"the chat runner's prompt ({total:,} chars: {files}) is longer than the context window of {model}; "
            f"it holds SKILL.md and every reference file in full: shorten the largest, or use a runner that "
            f"opens files (mini-swe-agent, command) or a model with a longer context ({error})")


def _must_propagate(exc: Exception) -> bool:
    """Budget exhaustion, bad input and a refused model end the compile; they are not a rollout's failure."""
    from deep_pipeline.errors import InputError, ModelAccessError
    from deep_pipeline.llm.budget import BudgetExhausted

    return isinstance(exc, (InputError, BudgetExhausted, ModelAccessError))
