"""Every model call of a compile goes through a ModelClient: litellm with retries, the
response cache, the budget and the calls log (SPEC §5, §8, §9).

Two kinds of retry, kept apart:
- a wrong answer (invalid JSON, wrong unit ids, out-of-range values, a failed check)
  is asked again with the problem fed back, up to `max_attempts`; each attempt is its
  own cached step (attempt number in the key), so a resumed run replays them all;
- a transient failure (rate limit, timeout, connection, 5xx) is resent unchanged
  after an exponential backoff with jitter, up to `retries` times.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deep_pipeline.errors import AnswerError, StepError
from deep_pipeline.llm.cache import ResponseCache, cache_key
from deep_pipeline.llm.schemas import describe_errors, response_format

if TYPE_CHECKING:
    from deep_pipeline.llm.budget import Budget

M = TypeVar("M", bound=BaseModel)
Role = Literal["judge", "editor", "agent"]
LOCAL_MODEL = "local"
DEFAULT_PARALLEL = 3
_TRANSIENT = (  # litellm exception classes worth resending unchanged
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


class ModelSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str  # a litellm model string ("anthropic/claude-…", "openai/…") or "local"
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 120.0
    # A provider key handed over by a Dagster resource; None = litellm reads the environment.
    # Excluded from dumps, so it never reaches a cache key, a record or a log.
    api_key: str | None = Field(default=None, repr=False, exclude=True)


class CallRecord(BaseModel):
    """Accounting of one call; never holds a key or the prompt."""

    step_key: str
    role: str
    model: str
    attempt: int
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None
    latency_s: float
    cache_hit: bool
    error: str | None = None


class _Transient(Exception):
    """A failure worth resending unchanged."""


def load_litellm():
    """Import litellm on first use (seconds on 2 cores) with the local price list."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def redact(text: str) -> str:
    """Blank out the value of every secret-looking environment variable."""
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    return text


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
        retries: int = 4,
        backoff_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.role = role
        self.calls_log = Path(calls_log) if calls_log else None
        self.budget = budget
        self.replay = replay
        self.local_home = Path(local_home) if local_home else None
        self.retries = retries
        self.backoff_s = backoff_s
        self._cache = ResponseCache(Path(cache_dir)) if cache_dir else None
        self._limiter = limiter or threading.BoundedSemaphore(DEFAULT_PARALLEL)

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
        max_attempts: int = 3,
    ) -> tuple[M, list[CallRecord]]:
        """A validated answer of `response_model`; wrong answers are retried with the problem fed back."""
        from deep_pipeline.llm.prompts import fill

        answer_format = response_format(response_model, strict=self.is_local)
        history = list(messages)
        records: list[CallRecord] = []
        problem = "no attempt made"
        for attempt in range(1, max_attempts + 1):
            text, record = self._call(step_key, attempt, history, answer_format)
            records.append(record)
            answer, problem = _parse(text, response_model, check)
            if answer is not None:
                return answer, records
            if (record.completion_tokens or 0) >= self.settings.max_tokens:
                problem += f" (the answer was cut off at max_tokens={self.settings.max_tokens}: write less)"
            history = history + [
                {"role": "assistant", "content": text[:4000]},
                {"role": "user", "content": fill("retry", problem=problem)},
            ]
        raise AnswerError(f"{self.describe(step_key)} gave no valid answer in {max_attempts} attempts: {problem}")

    def complete(self, step_key: str, messages: list[dict]) -> tuple[str, CallRecord]:
        """Free text (the chat rollout runner). Independent samples need distinct step keys."""
        return self._call(step_key, 1, list(messages), None)

    # -- one call: cache, then the network ----------------------------------------

    def _call(
        self, step_key: str, attempt: int, messages: list[dict], answer_format: dict | None
    ) -> tuple[str, CallRecord]:
        key = cache_key(
            step_key=step_key,
            role=self.role,
            attempt=attempt,
            model=self.settings.model,
            messages=messages,
            schema=answer_format,
            parameters=self.settings.model_dump(exclude={"model", "timeout_s"}),
        )
        cached = self._cache.get(key) if self._cache else None
        if cached is not None:
            record = CallRecord.model_validate({**cached["record"], "cache_hit": True, "latency_s": 0.0})
            return cached["text"], record
        if self.replay:
            raise StepError(f"{self.describe(step_key)}: replay mode and no cached answer for attempt {attempt}")
        text, record = self._send_with_retries(step_key, attempt, messages, answer_format)
        if self._cache:
            self._cache.put(key, {"step_key": step_key, "role": self.role, "text": text, "record": record.model_dump()})
        return text, record

    def _send_with_retries(
        self, step_key: str, attempt: int, messages: list[dict], answer_format: dict | None
    ) -> tuple[str, CallRecord]:
        for resend in range(self.retries + 1):
            try:
                return self._send_once(step_key, attempt, messages, answer_format)
            except _Transient as exc:
                failure = str(exc)
                if resend < self.retries:
                    # Exponential backoff with full jitter in its upper half.
                    time.sleep(self.backoff_s * (2**resend) * random.uniform(0.5, 1.0))
        raise StepError(f"{self.describe(step_key)} failed {self.retries + 1} times: {failure}")

    def _send_once(
        self, step_key: str, attempt: int, messages: list[dict], answer_format: dict | None
    ) -> tuple[str, CallRecord]:
        litellm = load_litellm()
        model, api_base, api_key = self._target(messages)
        if self.budget is not None:
            estimate = self._estimate_usd(litellm, model, messages) if self.budget.max_usd is not None else None
            self.budget.reserve(estimate)  # raises BudgetExhausted before anything is sent
        with self._limiter:  # the compile's cap on calls in flight; the wait is not latency
            response, error, latency = self._completion(litellm, model, api_base, api_key, messages, answer_format)
        record = self._record(step_key, attempt, response, error, latency, litellm, model)
        if self.budget is not None:
            self.budget.add(record)
        if self.calls_log is not None:
            from deep_pipeline.llm.accounting import append_call

            append_call(self.calls_log, record)
        if error is not None:
            transient = tuple(getattr(litellm, name) for name in _TRANSIENT)
            if isinstance(error, transient):
                if self.is_local:
                    from deep_pipeline.llm.local_model import forget_local_server

                    forget_local_server(self.local_home)  # it may have died: re-check before the resend
                raise _Transient(record.error)
            raise StepError(f"{self.describe(step_key)} failed: {record.error}")
        text = response.choices[0].message.content or ""
        return text, record

    def _completion(self, litellm, model, api_base, api_key, messages, answer_format):
        """(response, error, latency): every failure is returned, to be logged and classified."""
        started = time.monotonic()
        try:
            response = litellm.completion(
                model=model,
                messages=messages,
                api_base=api_base,
                api_key=api_key,
                temperature=self.settings.temperature,
                max_tokens=self.settings.max_tokens,
                timeout=self.settings.timeout_s,
                num_retries=0,  # retries are ours: counted, logged and budgeted
                **({"response_format": answer_format} if answer_format else {}),
            )
        except Exception as exc:  # noqa: BLE001 - classified by the caller
            return None, exc, time.monotonic() - started
        return response, None, time.monotonic() - started

    def _target(self, messages: list[dict]) -> tuple[str, str | None, str | None]:
        """(litellm model string, api_base, api_key); keys otherwise come from the environment."""
        if not self.is_local:
            return self.settings.model, self.settings.api_base, self.settings.api_key
        from deep_pipeline.llm.local_model import check_prompt_fits, ensure_local_server

        server = ensure_local_server(self.local_home)
        check_prompt_fits(server, messages, self.settings.max_tokens)
        # An explicit dummy key: the user's OPENAI_API_KEY must never reach the local server.
        return f"openai/{server.alias}", server.api_base, "sk-local-no-key"

    def _estimate_usd(self, litellm, model: str, messages: list[dict]) -> float | None:
        """Worst case of the next call: its prompt plus a full `max_tokens` answer; None if unpriced."""
        if self.is_local:
            return 0.0
        try:
            prompt_tokens = litellm.token_counter(model=model, messages=messages)
            prompt_usd, answer_usd = litellm.cost_per_token(
                model=model, prompt_tokens=prompt_tokens, completion_tokens=self.settings.max_tokens
            )
            return float(prompt_usd + answer_usd)
        except Exception:  # noqa: BLE001 - an unpriced model has no estimate
            return None

    def _record(self, step_key, attempt, response, error, latency, litellm, model) -> CallRecord:
        usage = getattr(response, "usage", None)
        details = getattr(usage, "prompt_tokens_details", None)
        return CallRecord(
            step_key=step_key,
            role=self.role,
            model=self.settings.model,
            attempt=attempt,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cached_tokens=getattr(details, "cached_tokens", None),
            cost_usd=self._cost(litellm, response, model) if response is not None else None,
            latency_s=round(latency, 4),
            cache_hit=False,
            error=redact(f"{type(error).__name__}: {str(error)[:500]}") if error is not None else None,
        )

    def _cost(self, litellm, response, model: str) -> float | None:
        if self.is_local:
            return 0.0  # our own CPU: known to be free, not a guess
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is None:
            try:
                cost = litellm.completion_cost(completion_response=response, model=model)
            except Exception:  # noqa: BLE001 - unpriced model: unknown, never guessed
                return None
        return float(cost)


def _parse(text: str, response_model: type[M], check: Callable[[M], str | None] | None) -> tuple[M | None, str]:
    try:
        answer = response_model.model_validate_json(_strip_fence(text))
    except ValidationError as exc:
        return None, describe_errors(exc)
    problem = check(answer) if check else None
    return (None, problem) if problem else (answer, "")


def _strip_fence(text: str) -> str:
    """Some hosted models wrap JSON in a ```json fence even when asked not to."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```"):
        stripped = stripped[3:-3]
        if stripped.startswith("json"):
            stripped = stripped[4:]
    return stripped
