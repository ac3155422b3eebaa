"""A local HTTP server that speaks a chat provider's wire format, for tests.

It answers from a script (one `Answer` per request, the last one repeated), records every request
(path, headers, JSON body) and how many were in flight at once. `openai_body` / `anthropic_body` write
the providers' documented success bodies; `openai_error` / `anthropic_error` their error bodies.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # JSON-encoded unless bytes
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


def openai_body(
    text: str, prompt_tokens: int = 100, completion_tokens: int = 50, finish: str = "stop"
) -> Any:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def openai_error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_body(text: str, input_tokens: int = 120, output_tokens: int = 60) -> Any:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def anthropic_error(message: str, kind: str = "invalid_request_error") -> Any:
    return {"type": "error", "error": {"type": kind, "message": message}}


class ChatServer:
    """`script`: answers in order (the last repeats), or a function of the request's JSON body."""

    def __init__(self, script: list[Answer] | Callable[[Seen], Answer]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.started_at: list[float] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                answer = server._next(seen)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if answer.delay_s:
                        time.sleep(answer.delay_s)
                    payload = (
                        answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
                    )
                    try:
                        self.send_response(answer.status)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(payload)))
                        for k, v in answer.headers.items():
                            self.send_header(k, v)
                        self.end_headers()
                        self.wfile.write(payload)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _next(self, seen: Seen) -> Answer:
        with self._lock:
            self.seen.append(seen)
            self.started_at.append(time.monotonic())
            if callable(self.script):
                return self.script(seen)
            index = min(len(self.seen) - 1, len(self.script) - 1)
            return self.script[index]

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
