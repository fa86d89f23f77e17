"""Every model call of a compile goes through a ModelClient: litellm with retries, the
response cache, the budget and the calls log (SPEC §5, §8, §9).

Two kinds of retry, kept apart:
- a wrong answer (invalid JSON, wrong unit ids, out-of-range values, a failed check)
  is asked again with the problem fed back, up to `max_attempts`; only a validated
  answer is cached (with the records of the attempts it took), so a resumed run
  replays it while a rerun after a step failed on invalid answers asks again (§9);
- a transient failure (rate limit, timeout, connection, 5xx) is resent unchanged
  after an exponential backoff with jitter, up to `retries` times, never past the
  caller's deadline (a chat rollout's timeout).
Each send may take the role's per-call timeout (`judge_timeout_s`, ...), counted from
when the request is sent: the wait for a call slot (the compile's `parallel`, the local
model's one slot) and litellm's own start-up are the machinery's time, not the model's.
An access failure (credentials, permission, unknown model) is never resent (ModelAccessError).

A call is counted once its answer is kept: cached first, logged after, and a cached
answer whose log line a crash prevented is logged when next served.
"""

from __future__ import annotations

import contextlib
import copy
import random
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.secrets import redact, secret_values
from deep_pipeline.errors import AnswerError, ModelAccessError, PromptTooLong, StepError, one_line
from deep_pipeline.llm import accounting
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.access import PLACEHOLDER_KEY, access_line, key_for
from deep_pipeline.llm.model_worker import default_transport
from deep_pipeline.llm.transport import SendRequest, SendResult, Transport
from deep_pipeline.llm.cache import ResponseCache, cache_key
from deep_pipeline.llm.schemas import parse_answer, response_format
from deep_pipeline.llm.timeouts import HOSTED_TIMEOUT_S, Deadline

if TYPE_CHECKING:
    from deep_pipeline.llm.budget import Budget

M = TypeVar("M", bound=BaseModel)
Role = Literal["judge", "editor", "agent"]
LOCAL_MODEL = "local"
DEFAULT_PARALLEL = 3
# Transient failures: resends after the first send, and the first backoff (doubling each
# resend). Read when a client is made, so a test can shrink them for a whole compile.
RETRIES = 4
BACKOFF_S = 1.0
# Answers asked for in one `structured` call before it fails (an invalid answer is asked again).
ANSWER_ATTEMPTS = 3
# A provider's Retry-After is honoured up to this; a longer ask is the provider's outage,
# better met by failing the step (a resume carries on) than by a step that hangs.
RETRY_AFTER_CAP_S = 60.0


class ModelSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str  # a litellm model string ("anthropic/claude-…", "openai/…") or "local"
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = HOSTED_TIMEOUT_S
    # The setting that gives timeout_s (`judge_timeout_s`, ...), named when calls time out.
    timeout_setting: str | None = None
    # A provider key handed over by a Dagster resource; None = litellm reads the environment.
    # Excluded from dumps, so it never reaches a cache key, a record or a log.
    api_key: str | None = Field(default=None, repr=False, exclude=True)
    # Or, for a `*_api_base` endpoint, the value of the variable `<role>_api_key_env` names
    # (llm/access.role_key): that name, given here, is the setting an access error names.
    api_key_env: str | None = Field(default=None, exclude=True)
    # The setting that names the model when it is not `<role>_model` (a judge panel's
    # `compare_models`), named when the model is not found. Excluded: no cache key changes.
    model_setting: str | None = Field(default=None, exclude=True)


class ModelTimeout(StepError):
    """The caller's deadline passed while the model was still working on its first send (a chat
    rollout's timeout). A deadline that passes after sends that got no answer is a StepError."""


class StoppedByFailure(StepError):
    """A call not sent (or not resent) because another call of its step failed first: never the
    step's reason, only a consequence of it (the step reports the call that failed)."""


class _Transient(Exception):
    """A failure worth resending unchanged."""

    def __init__(self, message: str, timed_out: bool, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.retry_after_s = retry_after_s  # the provider's own ask (Retry-After), if any


class ModelClient:
    def __init__(
        self,
        settings: ModelSettings,
        role: Role,
        *,
        cache_dir: Path | None = None,
        calls_log: Path | None = None,
        budget: "Budget | None" = None,
        limiter: threading.BoundedSemaphore | None = None,
        replay: bool = False,
        local_home: Path | None = None,
        retries: int | None = None,  # None: RETRIES
        backoff_s: float | None = None,  # None: BACKOFF_S
        transport: Transport | None = None,  # None: llm/transport.default_transport()
    ) -> None:
        self.settings = settings
        self.role = role
        self.calls_log = Path(calls_log) if calls_log else None
        self.budget = budget
        self.replay = replay
        self.local_home = Path(local_home) if local_home else None
        self.retries = RETRIES if retries is None else retries
        self.backoff_s = BACKOFF_S if backoff_s is None else backoff_s
        self._cache = ResponseCache(Path(cache_dir)) if cache_dir else None
        self._limiter = limiter or threading.BoundedSemaphore(DEFAULT_PARALLEL)
        self.transport = transport or default_transport()
        self._stopped = threading.Event()  # set by stop(): no further send

    def stoppable(self) -> "ModelClient":
        """This client (its cache, budget and cap) with sends of its own that `stop()` ends:
        a step stops at its first failed call instead of sending the rest."""
        view = copy.copy(self)
        view._stopped = threading.Event()
        return view

    def stop(self) -> None:
        self._stopped.set()

    @property
    def is_local(self) -> bool:
        return self.settings.model == LOCAL_MODEL

    def describe(self, step_key: str) -> str:
        return f"{self.role} call {step_key!r} (model {self.settings.model})"

    # -- the two entry points -------------------------------------------------------

    def structured(
        self,
        step_key: str,
        messages: list[dict],
        response_model: type[M],
        *,
        check: Callable[[M], str | None] | None = None,
        max_attempts: int = ANSWER_ATTEMPTS,
    ) -> tuple[M, list[CallRecord]]:
        """A validated answer of `response_model`; wrong answers are retried with the problem fed back."""
        from deep_pipeline.llm.prompts import fill

        answer_format = response_format(response_model, strict=self.is_local)
        # The validated answer is cached under the call's first request, whatever attempt it took.
        key = self._key(step_key, "valid", messages, answer_format)
        cached = self._cached(key)
        if cached is not None:
            text, records = cached
            answer, _ = parse_answer(text, response_model, check)
            if answer is not None:  # a hand-damaged entry is asked again
                return answer, records
        if self.replay:
            raise StepError(f"{self.describe(step_key)}: replay mode and no cached answer")
        history = list(messages)
        records: list[CallRecord] = []
        problem = "no attempt made"
        for attempt in range(1, max_attempts + 1):
            text, record = self._send_with_retries(step_key, attempt, history, answer_format)
            records.append(record)
            answer, problem = parse_answer(text, response_model, check)
            if answer is not None:
                self._keep(key, step_key, text, records)
                return answer, records
            self._log(record)  # an invalid answer stays in the log for the record, never in the cache
            if (record.completion_tokens or 0) >= self.settings.max_tokens:
                problem += f" (the answer was cut off at max_tokens={self.settings.max_tokens}: write less)"
            history = history + [
                {"role": "assistant", "content": text[:4000]},
                {"role": "user", "content": fill("retry", problem=problem)},
            ]
        raise AnswerError(f"{self.describe(step_key)} gave no valid answer in {max_attempts} attempts: {problem}")

    def complete(self, step_key: str, messages: list[dict], *, deadline: Deadline | None = None) -> tuple[str, CallRecord]:
        """Free text (the chat rollout runner). Independent samples need distinct step keys.

        `deadline` bounds the call and its resends from the first send: each is sent with at
        most the time left as its timeout, and none past it. If the first send is still
        unanswered at the deadline the model was too slow (ModelTimeout); if earlier sends
        got no answer within the per-call timeout (a hung request), or could not connect,
        the failure is the machinery's (StepError), whatever the deadline.
        """
        messages = list(messages)
        key = self._key(step_key, 1, messages, None)
        cached = self._cached(key)
        if cached is not None:
            return cached[0], cached[1][-1]
        if self.replay:
            raise StepError(f"{self.describe(step_key)}: replay mode and no cached answer for attempt 1")
        text, record = self._send_with_retries(step_key, 1, messages, None, deadline)
        self._keep(key, step_key, text, [record])
        return text, record

    # -- the cache and the calls log ----------------------------------------------

    def _key(self, step_key: str, attempt: int | str, messages: list[dict], answer_format: dict | None) -> str:
        return cache_key(
            step_key=step_key,
            role=self.role,
            attempt=attempt,
            model=self.settings.model,
            messages=messages,
            schema=answer_format,
            parameters=self.settings.model_dump(exclude={"model", "timeout_s", "timeout_setting"}),
        )

    def _cached(self, key: str) -> tuple[str, list[CallRecord]] | None:
        """(text, the records of the calls it took, as cache hits), logging any a crash kept from the log."""
        entry = self._cache.get(key) if self._cache else None
        if entry is None:
            return None
        try:
            sent = [CallRecord.model_validate(r) for r in entry.get("records") or [entry["record"]]]
        except (KeyError, TypeError, ValidationError):
            return None  # a hand-damaged entry: ask again
        if self.calls_log is not None:
            accounting.log_missing(self.calls_log, sent)
        return entry["text"], [r.model_copy(update={"cache_hit": True, "latency_s": 0.0}) for r in sent]

    def _keep(self, key: str, step_key: str, text: str, records: list[CallRecord]) -> None:
        """Cache an answer, then log the call that gave it: a kill between the two loses no count."""
        if self._cache:
            self._cache.put(key, {"step_key": step_key, "role": self.role, "text": text,
                                  "record": records[-1].model_dump(), "records": [r.model_dump() for r in records]})
        self._log(records[-1])

    def _log(self, record: CallRecord) -> None:
        if self.calls_log is not None:
            accounting.append_call(self.calls_log, record)

    # -- one call: the network ----------------------------------------------------

    def _send_with_retries(self, step_key: str, attempt: int, messages: list[dict], answer_format: dict | None,
                           deadline: Deadline | None = None) -> tuple[str, CallRecord]:
        for resend in range(self.retries + 1):
            try:
                return self._send_once(step_key, attempt, messages, answer_format, deadline, first=resend == 0)
            except _Transient as exc:
                failure = exc
                if (failure.retry_after_s or 0.0) > RETRY_AFTER_CAP_S:
                    # The provider's outage: fail the step (a resume carries on) rather than hang it.
                    raise StepError(f"{self.describe(step_key)}: the provider asked to wait "
                                    f"{failure.retry_after_s:g} s (Retry-After), more than {RETRY_AFTER_CAP_S:g} s; "
                                    f"run again later to carry on: {failure}") from None
                if resend == self.retries:
                    break
                # Exponential backoff with full jitter in its upper half.
                wait = self.backoff_s * (2**resend) * random.uniform(0.5, 1.0)
                # A rate limit's Retry-After says when a resend can succeed: sooner only adds to the storm.
                wait = max(wait, failure.retry_after_s or 0.0)
                if deadline is not None and time.monotonic() + wait >= deadline.at:
                    # Sends that got no answer (or no connection) are the machinery's failure, not the agent's timeout.
                    raise StepError(f"{self.describe(step_key)} failed {resend + 1} times, no time left "
                                    f"for another before its deadline: {self._failure_line(failure)}") from None
                if self._stopped.wait(wait):
                    raise StoppedByFailure(f"{self.describe(step_key)}: not resent, its step stopped at another call's "
                                    f"failure: {failure}") from None
        raise StepError(f"{self.describe(step_key)} failed {self.retries + 1} times: {self._failure_line(failure)}")

    def _failure_line(self, failure: "_Transient") -> str:
        """The failure, and for a timeout what was slow and which setting to raise."""
        if not failure.timed_out:
            return str(failure)
        setting = self.settings.timeout_setting or "the role's timeout"
        line = (f"{failure}; each send had {self.settings.timeout_s:g} s ({setting}), counted from when it was sent: "
                f"raise {setting} in the compile's config and run the same command again to carry on")
        if self.is_local:
            from deep_pipeline.llm.local_model import server_log

            line += f" (the local model's log: {server_log(self.local_home)})"
        return line

    def _send_once(self, step_key: str, attempt: int, messages: list[dict], answer_format: dict | None,
                   deadline: Deadline | None = None, first: bool = True) -> tuple[str, CallRecord]:
        """One send; an answer's record is returned to be logged once it is kept, a failure's is logged here."""
        model, api_base, api_key = self._target(messages)
        # The compile's cap on calls in flight, then the local model's one slot: waits, not latency.
        with self._limiter, self._slot():
            if self._stopped.is_set():
                raise StoppedByFailure(f"{self.describe(step_key)}: not sent, its step stopped at another call's failure")
            timeout_s = self.settings.timeout_s
            if deadline is not None:
                if (warm := getattr(self.transport, "warm", None)) is not None:
                    warm()  # litellm's import: the machinery's start-up, before the deadline starts
                deadline.start()
                timeout_s = min(timeout_s, deadline.left())
                if timeout_s <= 0:
                    raise StepError(f"{self.describe(step_key)}: its deadline passed before it could be resent")
            cut_by_deadline = deadline is not None and timeout_s < self.settings.timeout_s
            reserved = 0.0
            if self.budget is not None:
                estimate = self._estimate_usd(model, messages) if self.budget.max_usd is not None else None
                reserved = self.budget.reserve(estimate)  # raises BudgetExhausted before anything is sent
            sent = self.transport.send(SendRequest(
                model=model, api_base=api_base, api_key=api_key, messages=messages, response_format=answer_format,
                temperature=self.settings.temperature, max_tokens=self.settings.max_tokens, timeout_s=timeout_s,
                free=self.is_local))
        record = self._record(step_key, attempt, sent)
        if self.budget is not None:
            self.budget.add(record, reserved)
        if sent.error is None:
            return sent.content or "", record
        self._log(record)
        if sent.failure == "access":  # resending cannot mend it: stop at once, naming what to set
            raise ModelAccessError(access_line(sent.key_variable, self.role, self.settings.model, self.settings.api_base,
                                               sent.access_problem or "refused", record.error or "", self.settings.api_key_env,
                                               self.settings.model_setting))
        if sent.failure == "context":  # the same prompt is as long the next time
            raise PromptTooLong(f"{self.describe(step_key)}: the prompt is longer than the model's context window "
                                f"({one_line(record.error, 200)})")
        if sent.failure in ("transient", "timeout"):
            if self.is_local:
                from deep_pipeline.llm.local_model import forget_local_server

                forget_local_server(self.local_home)  # it may have died: re-check before the resend
            timed_out = sent.failure == "timeout"
            # Still working on its only send when the time was up (not a connection that timed out early).
            if timed_out and first and cut_by_deadline and deadline.left() <= 0.05:
                raise ModelTimeout(f"{self.describe(step_key)}: no answer before its deadline ({one_line(record.error)})")
            raise _Transient(one_line(record.error), timed_out, sent.retry_after_s)
        raise StepError(f"{self.describe(step_key)} failed: {one_line(record.error)}")

    def _slot(self):
        """The embedded model serves one request at a time: its callers queue here, across processes."""
        if not self.is_local:
            return contextlib.nullcontext()
        from deep_pipeline.llm.local_model import local_slot

        return local_slot(self.local_home)

    def _target(self, messages: list[dict]) -> tuple[str, str | None, str | None]:
        """(litellm model string, api_base, api_key); keys otherwise come from the environment."""
        if not self.is_local:
            api_key = key_for(self.settings.api_base, self.settings.api_key)
            return self.settings.model, self.settings.api_base, api_key
        from deep_pipeline.llm.local_model import check_prompt_fits, ensure_local_server

        server = ensure_local_server(self.local_home)
        check_prompt_fits(server, messages, self.settings.max_tokens)
        # An explicit dummy key: the user's OPENAI_API_KEY must never reach the local server.
        return f"openai/{server.alias}", server.api_base, PLACEHOLDER_KEY

    def _estimate_usd(self, model: str, messages: list[dict]) -> float | None:
        """Worst case of the next call: its prompt plus a full `max_tokens` answer; None if unpriced."""
        if self.is_local:
            return 0.0
        return self.transport.estimate_usd(model, messages, self.settings.max_tokens)

    def _record(self, step_key: str, attempt: int, sent: SendResult) -> CallRecord:
        return CallRecord(
            step_key=step_key,
            role=self.role,
            model=self.settings.model,
            attempt=attempt,
            prompt_tokens=sent.prompt_tokens,
            completion_tokens=sent.completion_tokens,
            cached_tokens=sent.cached_tokens,
            cost_usd=sent.cost_usd,
            latency_s=round(sent.latency_s, 4),
            cache_hit=False,
            # The role's own key too: its variable's name need not look secret (VLLM_AUTH).
            error=redact(redact(sent.error), secret_values({"role_api_key": self.settings.api_key or ""}))
            if sent.error is not None else None,
            call_id=uuid.uuid4().hex,
        )

