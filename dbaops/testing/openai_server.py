"""A small local OpenAI-compatible HTTP server for tests, driven by a script.

``POST /v1/chat/completions`` answers from a script: a sequence of ``ScriptedResponse``
consumed in order, or a callable that picks one given the request JSON. A response may carry
assistant text, tool calls, reasoning text, usage numbers (cached and reasoning tokens
included), an HTTP error status to return instead (429, 500, 400, ...) with headers such as
``Retry-After``, a delay, or a raw body. ``GET /v1/models`` lists the served model ids. Every
request is recorded with its headers (``Authorization`` included) and parsed body.

When a sequence script runs out, the server answers 410 ("script exhausted"), which clients
treat as a non-retryable error, so a test that makes more calls than scripted fails loudly.

Usage::

    with OpenAITestServer([ScriptedResponse.text("hi")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        ...
        assert server.chat_requests[0].body["model"] == "test-model"

The server binds 127.0.0.1 on a free port and serves from a background thread
(``ThreadingHTTPServer``); leaving the context stops it.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, Field

ScriptFn = Callable[[dict[str, Any]], "ScriptedResponse"]


class ScriptedToolCall(BaseModel):
    """A tool call the scripted assistant makes; string arguments are sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None


class ScriptedResponse(BaseModel):
    """One scripted answer of ``/v1/chat/completions``."""

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    reasoning_content: str | None = None
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    status: int = 200  # anything else: an OpenAI-style error body with this status
    error_message: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering
    raw_body: str | None = None  # sent verbatim (status kept) instead of the generated JSON
    model: str | None = None  # default: the requested model

    @classmethod
    def text(cls, content: str, **kw: Any) -> ScriptedResponse:
        return cls(content=content, **kw)

    @classmethod
    def tool_call(
        cls, name: str, arguments: dict[str, Any] | str | None = None, **kw: Any
    ) -> ScriptedResponse:
        call = ScriptedToolCall(name=name, arguments={} if arguments is None else arguments)
        return cls(tool_calls=[call], **kw)

    @classmethod
    def error(cls, status: int, message: str | None = None, **kw: Any) -> ScriptedResponse:
        return cls(status=status, error_message=message, **kw)


class ReceivedRequest(BaseModel):
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any = None  # parsed JSON, or None
    raw_body: str = ""
    t_wall: float = Field(default_factory=time.time)


def dead_base_url() -> str:
    """A ``/v1`` base URL on a 127.0.0.1 port nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    410: "script_exhausted",
    429: "rate_limit_error",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: OpenAITestServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True

    def _record(self) -> ReceivedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        req = ReceivedRequest(
            method=self.command,
            path=self.path.split("?", 1)[0],
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw_body=raw,
        )
        self.server.owner._add_request(req)
        return req

    def _refused_key(self, req: ReceivedRequest) -> bool:
        """With a key configured, a request without it gets 401 (as a real provider)."""
        key = self.server.owner.api_key
        if key is None or req.headers.get("authorization") == f"Bearer {key}":
            return False
        self._send(401, _error_body(401, "Incorrect API key provided"))
        return True

    def do_GET(self) -> None:
        req = self._record()
        owner = self.server.owner
        if self._refused_key(req):
            return
        if req.path.rstrip("/") in ("/v1/models", "/models"):
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "dbaops-test"}
                for m in owner.models
            ]
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(404, _error_body(404, f"no route GET {req.path}"))

    def do_POST(self) -> None:
        req = self._record()
        owner = self.server.owner
        if self._refused_key(req):
            return
        if req.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error_body(404, f"no route POST {req.path}"))
            return
        if not isinstance(req.body, dict):
            self._send(400, _error_body(400, "request body is not a JSON object"))
            return
        scripted = owner._next_response(req.body)
        if scripted is None:
            msg = f"dbaops test server: script exhausted after {owner.served} response(s)"
            self._send(410, _error_body(410, msg))
            return
        if scripted.delay_s > 0 and owner._stopping.wait(scripted.delay_s):
            return
        if scripted.raw_body is not None:
            self._send(scripted.status, scripted.raw_body.encode("utf-8"), scripted.headers)
        elif scripted.status != 200:
            message = scripted.error_message or f"scripted HTTP {scripted.status}"
            self._send(scripted.status, _error_body(scripted.status, message), scripted.headers)
        else:
            self._send(200, owner._completion_json(scripted, req.body), scripted.headers)


def _error_body(status: int, message: str) -> dict[str, Any]:
    etype = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": etype, "param": None, "code": str(status)}}


class OpenAITestServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (free port), as a context manager."""

    def __init__(
        self,
        script: Sequence[ScriptedResponse] | ScriptFn = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = ("test-model",),
        api_key: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.models = list(models)
        self.api_key = api_key  # None: any key (or none) is accepted
        self._lock = threading.Lock()
        self._requests: list[ReceivedRequest] = []
        self._script: list[ScriptedResponse] | ScriptFn = []
        self._pos = 0
        self._served = 0
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.set_script(script)

    # -- script and records ----------------------------------------------------------------

    def set_script(self, script: Sequence[ScriptedResponse] | ScriptFn) -> None:
        """Replace the script (a sequence restarts from its first response)."""
        with self._lock:
            self._script = script if callable(script) else list(script)
            self._pos = 0

    def add_responses(self, *responses: ScriptedResponse) -> None:
        """Append responses to a sequence script."""
        with self._lock:
            if callable(self._script):
                raise TypeError("the script is a callable; use set_script")
            self._script.extend(responses)

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def served(self) -> int:
        """Scripted responses handed out so far (errors included)."""
        with self._lock:
            return self._served

    @property
    def remaining(self) -> int | None:
        """Unconsumed responses of a sequence script (None for a callable script)."""
        with self._lock:
            if callable(self._script):
                return None
            return len(self._script) - self._pos

    def _add_request(self, req: ReceivedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_response(self, body: dict[str, Any]) -> ScriptedResponse | None:
        with self._lock:
            script = self._script
            if callable(script):
                fn = script
            else:
                if self._pos >= len(script):
                    return None
                self._pos += 1
                self._served += 1
                return script[self._pos - 1]
        resp = fn(body)  # outside the lock: the callable may inspect the server
        with self._lock:
            self._served += 1
        return resp

    def _completion_json(self, r: ScriptedResponse, request: dict[str, Any]) -> dict[str, Any]:
        n = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": r.content}
        if r.reasoning_content is not None:
            message["reasoning_content"] = r.reasoning_content
        if r.tool_calls:
            message["tool_calls"] = [
                {
                    "id": tc.id or f"call_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": tc.name,
                        "arguments": tc.arguments
                        if isinstance(tc.arguments, str)
                        else json.dumps(tc.arguments),
                    },
                }
                for i, tc in enumerate(r.tool_calls)
            ]
        usage: dict[str, Any] = {
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
        }
        if r.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": r.cached_tokens}
        if r.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": r.reasoning_tokens}
        return {
            "id": f"chatcmpl-test-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": r.model or str(request.get("model", "test-model")),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": r.finish_reason or ("tool_calls" if r.tool_calls else "stop"),
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (valid once started)."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> OpenAITestServer:
        if self._httpd is not None:
            return self
        httpd = _Server((self.host, self.port), _Handler)
        httpd.owner = self
        self.port = int(httpd.server_address[1])
        self._httpd = httpd
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"openai-test-server:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
