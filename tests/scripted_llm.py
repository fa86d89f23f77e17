"""A scripted model for tests: a litellm CustomLLM answering `scripted/<name>` models.

The real prompt building, litellm call, parsing, retries, cache and accounting all
run; only the model's answers are scripted. Typical use:

    from tests.scripted_llm import rate_limit

    def test_x(scripted_llm):   # the fixture, defined in tests/conftest.py
        scripted_llm.script("judge", rate_limit(), lambda req: req.answer())
        client = ModelClient(ModelSettings(model="scripted/judge"), "judge", backoff_s=0)
        ...
        assert scripted_llm.requests_for("judge")[0].response_format is not None

An answer is a str (the raw content), a dict or list (sent as JSON), a pydantic model,
an exception instance (raised: see rate_limit / timeout / server_error / auth_error /
permission_denied / not_found), `slow(seconds, answer)` (answers after a delay, or raises
litellm.Timeout at the call's `timeout` as a real provider does), or a callable taking
the ScriptedRequest and returning any of those. `script()` queues answers in
order; `always()` sets the answer used once a model's queue is empty. An unscripted
call fails fast with a BadRequestError naming the model (recorded in `.unscripted`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from deep_pipeline.llm.transport import load_litellm

litellm = load_litellm()
from litellm import CustomLLM  # noqa: E402  (litellm must be loaded with its env first)
from litellm.types.utils import Usage  # noqa: E402

PROVIDER = "scripted"


@dataclass
class ScriptedRequest:
    """What the provider received for one call."""

    model: str  # the name after "scripted/", e.g. "judge"
    messages: list[dict]
    params: dict = field(default_factory=dict)  # litellm's optional params: temperature, max_tokens, response_format…
    api_key: str | None = field(default=None, repr=False)  # what litellm was handed (tests check keys travel)
    timeout: float | None = None  # the call's timeout as litellm passed it
    at: float = 0.0  # time.monotonic() when the call arrived

    @property
    def response_format(self) -> dict | None:
        return self.params.get("response_format")

    @property
    def schema(self) -> dict | None:
        fmt = self.response_format or {}
        return (fmt.get("json_schema") or {}).get("schema")

    @property
    def text(self) -> str:
        """Every message's content, joined: for `"…" in request.text` checks."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)

    @property
    def last_user(self) -> str:
        return next((str(m.get("content")) for m in reversed(self.messages) if m.get("role") == "user"), "")

    @property
    def unit_ids(self) -> list[str]:
        """The unit ids a column answer must have (its schema's required properties)."""
        return list((self.schema or {}).get("required", []))

    def answer(self, **overrides: Any) -> dict:
        """A minimal valid answer for the request's schema, with top-level `overrides`."""
        if self.schema is None:
            raise AssertionError(f"request to scripted/{self.model} has no response_format schema")
        return {**example_for(self.schema), **overrides}


Answer = Any  # str | dict | list | BaseModel | BaseException | Callable[[ScriptedRequest], Answer]


def rate_limit(message: str = "scripted rate limit") -> Exception:
    return litellm.RateLimitError(message=message, llm_provider=PROVIDER, model="scripted")


def timeout(message: str = "scripted timeout") -> Exception:
    return litellm.Timeout(message=message, llm_provider=PROVIDER, model="scripted")


def server_error(message: str = "scripted server error") -> Exception:
    return litellm.InternalServerError(message=message, llm_provider=PROVIDER, model="scripted")


def auth_error(message: str = "scripted: invalid x-api-key") -> Exception:
    return litellm.AuthenticationError(message=message, llm_provider=PROVIDER, model="scripted")


def permission_denied(message: str = "scripted: this key may not use this model") -> Exception:
    return litellm.PermissionDeniedError(message=message, llm_provider=PROVIDER, model="scripted", response=_response(403))


def not_found(message: str = "scripted: model not found") -> Exception:
    return litellm.NotFoundError(message=message, llm_provider=PROVIDER, model="scripted")


def _response(status: int):
    import httpx

    return httpx.Response(status, request=httpx.Request("POST", "http://scripted/v1/chat/completions"))


@dataclass
class Slow:
    """An answer that takes `seconds`: past the call's timeout it is a litellm.Timeout."""

    seconds: float
    answer: Any = "a late answer"


def slow(seconds: float, answer: Any = "a late answer") -> Slow:
    return Slow(seconds, answer)


def register_prices(name: str, input_usd_per_token: float, output_usd_per_token: float) -> None:
    """Give `scripted/<name>` a price so cost accounting and USD budgets can be tested."""
    litellm.register_model(
        {
            f"{PROVIDER}/{name}": {
                "input_cost_per_token": input_usd_per_token,
                "output_cost_per_token": output_usd_per_token,
                "litellm_provider": PROVIDER,
                "mode": "chat",
                "max_tokens": 100_000,
            }
        }
    )


class ScriptedLLM(CustomLLM):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ScriptedRequest] = []
        self.unscripted: list[ScriptedRequest] = []
        self._queues: dict[str, deque] = defaultdict(deque)
        self._fallback: dict[str, Answer] = {}
        self._lock = threading.Lock()

    def script(self, name: str, *answers: Answer) -> "ScriptedLLM":
        with self._lock:
            self._queues[name].extend(answers)
        return self

    def always(self, name: str, answer: Answer) -> "ScriptedLLM":
        with self._lock:
            self._fallback[name] = answer
        return self

    def requests_for(self, name: str) -> list[ScriptedRequest]:
        with self._lock:
            return [r for r in self.requests if r.model == name]

    def pending(self, name: str) -> int:
        """Queued answers not yet used (a test can assert its script was consumed)."""
        with self._lock:
            return len(self._queues[name])

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.unscripted.clear()
            self._queues.clear()
            self._fallback.clear()

    def completion(  # litellm's CustomLLM signature
        self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose, encoding, api_key,
        logging_obj, optional_params, acompletion=None, litellm_params=None, logger_fn=None, headers=None,
        timeout=None, client=None,
    ):
        request = ScriptedRequest(model=model, messages=[dict(m) for m in messages], params=dict(optional_params),
                                  api_key=api_key, timeout=_seconds(timeout), at=time.monotonic())
        with self._lock:
            self.requests.append(request)
            queue = self._queues.get(model)
            answer = queue.popleft() if queue else self._fallback.get(model, _UNSCRIPTED)
        if answer is _UNSCRIPTED:
            with self._lock:
                self.unscripted.append(request)
            raise litellm.BadRequestError(
                message=f"no scripted answer for scripted/{model}: {request.last_user[:200]!r}",
                model=model,
                llm_provider=PROVIDER,
            )
        content = _content(answer, request, request.timeout)
        model_response.choices[0].message.content = content
        model_response.model = f"{PROVIDER}/{model}"
        prompt_tokens = max(1, len(request.text) // 4)  # a deterministic stand-in for a tokenizer
        completion_tokens = max(1, len(content) // 4)
        model_response.usage = Usage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
        )
        return model_response

    async def acompletion(self, *args, **kwargs):
        return self.completion(*args, **kwargs)


_UNSCRIPTED = object()


def _seconds(timeout: Any) -> float | None:
    """litellm hands a float, or an httpx.Timeout whose read timeout is the one that fires."""
    if timeout is None or isinstance(timeout, (int, float)):
        return timeout
    return getattr(timeout, "read", None)


def _content(answer: Answer, request: ScriptedRequest, timeout: float | None = None) -> str:
    while callable(answer) and not isinstance(answer, (BaseException, type)):
        answer = answer(request)
    if isinstance(answer, Slow):
        # litellm does not enforce `timeout` for a custom provider; an HTTP client would.
        if timeout is not None and answer.seconds > timeout:
            time.sleep(timeout)
            raise litellm.Timeout(message=f"scripted: no answer within {timeout} s", llm_provider=PROVIDER,
                                  model=request.model)
        time.sleep(answer.seconds)
        return _content(answer.answer, request, None)
    if isinstance(answer, type) and issubclass(answer, BaseException):
        answer = answer("scripted failure")
    if isinstance(answer, BaseException):
        raise answer
    if isinstance(answer, BaseModel):
        return answer.model_dump_json(by_alias=True)
    if isinstance(answer, (dict, list)):
        return json.dumps(answer)
    return str(answer)


def example_for(schema: dict, root: dict | None = None) -> Any:
    """A small valid instance of a JSON schema (the subset pydantic emits for our answers)."""
    root = root or schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return example_for(root["$defs"][name], root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return example_for(schema["anyOf"][0], root)
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {key: example_for(properties[key], root) for key in schema.get("required", properties)}
    if kind == "array":
        return [example_for(schema.get("items", {}), root) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 0), schema.get("maximum", schema.get("minimum", 0) + 4)
        return (low + high) // 2 if kind == "integer" else (low + high) / 2
    if kind == "boolean":
        return True
    if kind == "string":
        text = "scripted text"
        return text[: schema["maxLength"]] if "maxLength" in schema else text
    return None


def install(provider: ScriptedLLM | None = None) -> ScriptedLLM:
    """Register `provider` (or a new one) as litellm's `scripted` provider, replacing any other."""
    provider = provider or ScriptedLLM()
    litellm.custom_provider_map = [e for e in litellm.custom_provider_map if e.get("provider") != PROVIDER]
    litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": provider})
    return provider


def uninstall(provider: ScriptedLLM) -> None:
    litellm.custom_provider_map = [e for e in litellm.custom_provider_map if e.get("custom_handler") is not provider]
