"""Where litellm runs: in this process, or in the long-lived model worker (llm/model_worker.py).

A Dagster run a run launcher started is a fresh process that makes a few model calls
and exits; importing litellm costs it 4-5 CPU-seconds, more than the rest of the step's
fixed cost. Such a process hands its sends to one worker per home and environment,
which imported litellm once. The CLI and the `compile` job run every step of a compile
in one process and import litellm once anyway: they send in-process.

Everything that needs litellm for one send is here, behind three plain-data calls
(`send`, `estimate_usd`, `check_model`; `call_usd` is the one price lookup), so the two ways cannot drift apart: the worker
runs these very functions. The retry policy, the cache, the budget and the calls log
stay in llm/client.py, in the step's process.
"""

from __future__ import annotations

import os
import time
from typing import Literal, Protocol

from pydantic import BaseModel, Field

# litellm exception classes worth resending unchanged.
TRANSIENT = ("RateLimitError", "Timeout", "APIConnectionError", "InternalServerError",
             "ServiceUnavailableError", "BadGatewayError")
WORKER_VARIABLE = "DEEP_PIPELINE_MODEL_WORKER"  # "0": always in-process; "1": always the worker


class SendRequest(BaseModel):
    model: str  # the litellm model string actually sent (the local model resolved already)
    api_base: str | None = None
    api_key: str | None = Field(default=None, repr=False)  # never logged; None = the environment's
    messages: list[dict]
    response_format: dict | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 120.0
    free: bool = False  # our own local model: known to cost nothing


class SendResult(BaseModel):
    content: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float = 0.0
    error: str | None = None  # "<exception class>: <message>", not yet redacted
    failure: Literal["access", "context", "transient", "timeout", "other"] | None = None
    access_problem: str | None = None  # what refused the call (llm/access.py)
    key_variable: str | None = None  # the variable that would mend an access failure
    retry_after_s: float | None = None  # how long the provider asked us to wait (a 429's Retry-After)


class Transport(Protocol):
    def send(self, request: SendRequest) -> SendResult: ...
    def estimate_usd(self, model: str, messages: list[dict], max_tokens: int) -> float | None: ...
    def check_model(self, model: str, field: str, api_base: str | None) -> str | None: ...


def load_litellm():
    """Import litellm on first use (seconds on 2 cores) with the local price list."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def send(request: SendRequest) -> SendResult:
    """One litellm completion, its usage and cost, and a failure classified: never raises."""
    litellm = load_litellm()
    started = time.monotonic()
    try:
        response = litellm.completion(
            model=request.model, messages=request.messages, api_base=request.api_base, api_key=request.api_key,
            temperature=request.temperature, max_tokens=request.max_tokens, timeout=request.timeout_s,
            num_retries=0,  # retries are the client's: counted, logged and budgeted
            **({"response_format": request.response_format} if request.response_format else {}),
        )
    except Exception as exc:  # noqa: BLE001 - every failure is classified and returned
        return _failed(litellm, request, exc, time.monotonic() - started)
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return SendResult(
        content=response.choices[0].message.content or "",
        prompt_tokens=getattr(usage, "prompt_tokens", None), completion_tokens=getattr(usage, "completion_tokens", None),
        cached_tokens=getattr(details, "cached_tokens", None), cost_usd=_cost(litellm, response, request),
        latency_s=time.monotonic() - started,
    )


def _failed(litellm, request: SendRequest, error: Exception, latency: float) -> SendResult:
    from deep_pipeline.llm.access import access_failure, key_variable

    message = f"{type(error).__name__}: {str(error)[:500]}"
    # A failed call may still have been billed: unknown, except on our own free CPU.
    result = SendResult(error=message, latency_s=latency, cost_usd=0.0 if request.free else None)
    if (problem := access_failure(litellm, error)) is not None:
        return result.model_copy(update={"failure": "access", "access_problem": problem,
                                         "key_variable": key_variable(request.model, litellm)})
    if isinstance(error, litellm.ContextWindowExceededError):  # before the transient ones: never resent
        return result.model_copy(update={"failure": "context"})
    if isinstance(error, tuple(getattr(litellm, name) for name in TRANSIENT)):
        return result.model_copy(update={"failure": "timeout" if isinstance(error, litellm.Timeout) else "transient",
                                         "retry_after_s": retry_after(error)})
    return result.model_copy(update={"failure": "other"})


def retry_after(error: Exception) -> float | None:
    """Seconds the provider asked to wait before a resend (Retry-After, retry-after-ms), else None."""
    headers = getattr(error, "litellm_response_headers", None) or getattr(getattr(error, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        if value.strip().replace(".", "", 1).isdigit():
            return float(value)
        from email.utils import parsedate_to_datetime  # the HTTP-date form

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, AttributeError):
        return None  # a header we cannot read: the client's own backoff


def _cost(litellm, response, request: SendRequest) -> float | None:
    if request.free:
        return 0.0  # our own CPU: known to be free, not a guess
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    if cost is None:
        try:
            cost = litellm.completion_cost(completion_response=response, model=request.model)
        except Exception:  # noqa: BLE001 - unpriced model: unknown, never guessed
            return None
    return float(cost)


def prompt_tokens(messages: list[dict], model: str | None = None) -> int:
    """litellm's count of a prompt's tokens: with `model`, that model's tokenizer as litellm
    picks it; without, its default encoding (tiktoken: local, never a download)."""
    litellm = load_litellm()
    return int(litellm.token_counter(model=model or "", messages=messages))


def call_usd(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What a call of these token counts costs by litellm's price map; None if unpriced.
    The one price lookup: the budget's worst case and the estimate before a run both use it."""
    litellm = load_litellm()
    try:
        prompt_usd, answer_usd = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens,
                                                        completion_tokens=completion_tokens)
        return float(prompt_usd + answer_usd)
    except Exception:  # noqa: BLE001 - an unpriced model has no price
        return None


def token_prices(model: str) -> tuple[float, float] | None:
    """(USD per prompt token, USD per answer token) of `model`; None if unpriced."""
    prompt, answer = call_usd(model, 1, 0), call_usd(model, 0, 1)
    return None if prompt is None or answer is None else (prompt, answer)


def estimate_usd(model: str, messages: list[dict], max_tokens: int) -> float | None:
    """Worst case of a call: its prompt plus a full `max_tokens` answer; None if unpriced."""
    try:
        tokens = prompt_tokens(messages, model)
    except Exception:  # noqa: BLE001 - a prompt litellm cannot count has no estimate
        return None
    return call_usd(model, tokens, max_tokens)


def check_model(model: str, field: str, api_base: str | None) -> str | None:
    """Why `model` cannot be used (an unknown provider, a hosted one without its key), else None."""
    litellm = load_litellm()
    from litellm.utils import custom_llm_setup

    custom_llm_setup()  # providers registered in litellm.custom_provider_map count as known
    try:
        litellm.get_llm_provider(model)
    except Exception:  # noqa: BLE001 - litellm raises its BadRequestError for an unknown provider
        return (f"config: {field}: unknown model {model!r} (expected 'local' or a litellm model string "
                f"such as 'anthropic/claude-sonnet-4-5' or 'openai/gpt-4o-mini')")
    if api_base:
        return None  # a self-hosted endpoint: whether it wants a key is its own business
    missing = [k for k in litellm.validate_environment(model).get("missing_keys", []) if k.endswith("_KEY")]
    return f"config: {field}: model {model!r} needs {', '.join(missing)} in the environment" if missing else None


class InProcess:
    """litellm in this process."""

    def warm(self) -> None:
        """Import litellm now, before a caller's clock starts (seconds on 2 busy cores)."""
        load_litellm()

    def send(self, request: SendRequest) -> SendResult:
        return send(request)

    def estimate_usd(self, model: str, messages: list[dict], max_tokens: int) -> float | None:
        return estimate_usd(model, messages, max_tokens)

    def check_model(self, model: str, field: str, api_base: str | None) -> str | None:
        return check_model(model, field, api_base)
