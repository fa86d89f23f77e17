"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for agents in a subprocess.

The agent (mini-swe-agent, any CLI) calls it as `openai/<name>` with
`api_base=server.api_base`, exactly as it would call the embedded local model. Answers
come from a script, chosen by how many assistant messages the request already holds, so
concurrent conversations each follow the script from the start:

    turns = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
        {"content": "done", "tool_calls": [{"name": "bash", "arguments": {"command": "echo X"}}]},
        {"status": 500, "error": "boom"},          # an API failure
        {"status": 429, "error": "slow down", "headers": {"Retry-After": "2"}},
    ]
    with ScriptedOpenAIServer(turns) as server:
        ...  server.requests  # every request body and its Authorization header

A turn may also be a callable `(request_body) -> turn`. `server.log` has one entry per
request (the sha256 of its body, when it arrived, when its answer was sent), and
`after_answer(k)`, when set, is called once the k-th answer has been sent (the crash
suite kills a compile there).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dataclasses import dataclass
from typing import Any, Callable

Turn = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def completion(turn: dict[str, Any], model: str, index: int) -> dict[str, Any]:
    """An OpenAI chat.completion object for one scripted turn."""
    tool_calls = [
        {
            "id": f"call_{index}_{n}",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
        }
        for n, call in enumerate(turn.get("tool_calls", []))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content", "")}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage = turn.get("usage", {"prompt_tokens": 50, "completion_tokens": 10})
    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": usage,
    }


@dataclass
class Exchange:
    """One request as the server saw it; times are time.time() (comparable across processes)."""

    sha256: str
    arrived: float
    answered: float | None = None  # None: no answer sent (yet, or the caller went away)
    content: str | None = None  # the answer's message content


class ScriptedOpenAIServer:
    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.requests: list[dict[str, Any]] = []
        self.log: list[Exchange] = []
        self.after_answer: Callable[[int], None] | None = None
        self._answers = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedOpenAIServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any], authorization: str | None) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append({"body": body, "authorization": authorization})
            count = len(self.requests)
        index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if index >= len(self.turns):
            return 500, {"error": {"message": f"script exhausted at turn {index}", "type": "server_error"}}
        turn = self.turns[index]
        turn = turn(body) if callable(turn) else turn
        if turn.get("status", 200) != 200:
            error = {"error": {"message": turn.get("error", "scripted failure"), "type": "server_error"}}
            return turn["status"], error, turn.get("headers")  # e.g. {"Retry-After": "2"} with a 429
        return 200, completion(turn, body.get("model", "scripted"), count)

    def _answered(self, exchange: Exchange, status: int, payload: dict[str, Any]) -> None:
        exchange.answered = time.time()
        if status == 200:
            exchange.content = payload["choices"][0]["message"]["content"]
        with self._lock:
            self._answers += 1
            count = self._answers
        if self.after_answer is not None:
            self.after_answer(count)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if len(raw) < length:  # the caller was killed before its request was sent whole: no call
                    return
                exchange = Exchange(hashlib.sha256(raw).hexdigest(), time.time())
                with server._lock:
                    server.log.append(exchange)
                body = json.loads(raw or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, payload, *headers = server.answer(body, self.headers.get("Authorization"))
                try:
                    self._send(status, payload, *headers)
                except OSError:  # the caller was killed while we answered
                    return
                server._answered(exchange, status, payload)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

        return Handler
