"""A small OpenAI-compatible HTTP server for tests and benchmarks (stdlib only, 127.0.0.1, ephemeral port).

It speaks just enough of the OpenAI chat API for litellm's ``openai/<model>`` route with ``api_base`` pointed at
it: ``POST /v1/chat/completions`` (``/chat/completions`` too) answers a standard ``chat.completion`` body, and
``GET /v1/models`` lists one model. Each request is handled on its own thread, so ``latency`` overlaps across
concurrent requests instead of serialising them.

Faults make the failure modes of real providers reproducible::

    with FakeOpenAIServer(faults=[Fault("429"), Fault("500")]) as server:
        ...  # request 0 gets a 429, request 1 a 500, every later one a normal answer

``known_models`` (optional) makes the server answer 404 ``model_not_found``, OpenAI-style, to a chat request for
any other model name (as a provider does for an unknown or misspelt model).

``faults`` is either a sequence (applied in order to the first ``len(faults)`` chat requests) or a callable
``(index, body) -> Fault | None`` deciding per request (``index`` counts chat requests from 0).

Nothing outlives :meth:`FakeOpenAIServer.stop`: sleeps (latency, timeout faults) wake up at stop, and handler
threads are joined with a bound.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from agents.mock import DEFAULT_REPLY, mock_responder

__all__ = ["Fault", "FaultKind", "FakeOpenAIServer", "Responder", "DEFAULT_REPLY"]

Responder = Callable[[dict], str]
"""Gets the parsed request body and returns the assistant text."""

FaultKind = Literal["timeout", "429", "500", "503", "truncated", "garbage"]

GARBAGE_REPLY = "I cannot help with that"

_ERROR_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "service_unavailable"),
}


@dataclass(frozen=True)
class Fault:
    """One injected failure.

    - ``timeout``: sleep ``seconds`` (longer than the client's timeout) and then answer normally;
    - ``429`` / ``500`` / ``503``: that status with an OpenAI-style ``{"error": {...}}`` body;
    - ``truncated``: a 200 whose JSON body is cut in half;
    - ``garbage``: a well-formed 200 whose message content is not JSON text (``text`` or "I cannot help with that").

    ``message`` replaces the default error message; ``echo_auth`` appends the request's Authorization header to
    the error message (as careless proxies do), to test that clients redact secrets.
    """

    kind: FaultKind
    seconds: float = 2.0
    message: str | None = None
    echo_auth: bool = False
    text: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("timeout", "429", "500", "503", "truncated", "garbage"):
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.seconds < 0:
            raise ValueError("Fault.seconds must be >= 0")


def _rough_tokens(text: str) -> int:
    return max(1, len(text.split())) if text else 0


def _prompt_text(body: dict) -> str:
    parts: list[str] = []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return " ".join(parts)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # belt and braces: stop() joins them anyway
    request_queue_size = 128  # 16+ simultaneous connects must not overflow the listen backlog
    allow_reuse_address = True

    def __init__(self, owner: FakeOpenAIServer) -> None:
        self.owner = owner
        self.handler_threads: set[threading.Thread] = set()
        self.threads_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run_request, args=(request, client_address), name="fake-openai-handler", daemon=True
        )
        with self.threads_lock:
            self.handler_threads.add(thread)
        thread.start()

    def _run_request(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.threads_lock:
                self.handler_threads.discard(threading.current_thread())


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads at stop()
    timeout = 30.0  # a silent client cannot pin a handler thread forever
    server_version = "FakeOpenAI/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: tests and benchmarks read the request log instead

    # -- helpers -------------------------------------------------------------------------------------------
    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError):
            pass  # the client gave up (e.g. its timeout fired): nothing to do

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"))

    def _send_error(self, status: int, message: str) -> None:
        err_type, code = _ERROR_TYPES.get(status, ("invalid_request_error", None))
        self._send_json(status, {"error": {"message": message, "type": err_type, "param": None, "code": code}})

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    # -- routes --------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        if self._path() in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": name, "object": "model", "created": 0, "owned_by": "rescue-env"}
                        for name in (sorted(owner.known_models) if owner.known_models else [owner.model_name])
                    ],
                },
            )
        else:
            self._send_error(404, f"unknown path {self._path()}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        if self._path() not in ("/v1/chat/completions", "/chat/completions"):
            self._send_error(404, f"unknown path {self._path()}")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except (ValueError, OSError) as exc:
            self._send_error(400, f"invalid JSON body: {exc}")
            return

        index = owner._record(body)
        auth = self.headers.get("Authorization") or ""

        if owner.expected_api_key is not None and auth != f"Bearer {owner.expected_api_key}":
            shown = auth.removeprefix("Bearer ") or "<none>"
            self._send_error(401, f"Incorrect API key provided: {shown}.")
            return

        model = str(body.get("model") or "")
        if owner.known_models is not None and model not in owner.known_models:
            self._send_error(404, f"The model `{model}` does not exist or you do not have access to it.")
            return

        fault = owner._fault_for(index, body)
        if owner.latency > 0 and not owner._sleep(owner.latency):
            return  # stopping

        if fault is not None and fault.kind in ("429", "500", "503"):
            status = int(fault.kind)
            message = fault.message or f"{HTTPStatus(status).phrase} (injected fault)"
            if fault.echo_auth:
                message += f" [request Authorization: {auth or '<none>'}]"
            self._send_error(status, message)
            return
        if fault is not None and fault.kind == "timeout" and not owner._sleep(fault.seconds):
            return  # stopping

        if fault is not None and fault.kind == "garbage":
            text = fault.text if fault.text is not None else GARBAGE_REPLY
        else:
            try:
                text = owner.responder(body)
            except Exception as exc:  # a broken responder is a server error, not a crashed thread
                self._send_error(500, f"responder failed: {type(exc).__name__}: {exc}")
                return
        payload = json.dumps(owner._completion_body(body, text)).encode("utf-8")
        if fault is not None and fault.kind == "truncated":
            payload = payload[: len(payload) // 2]
        self._send(200, payload)


class FakeOpenAIServer:
    """OpenAI-compatible chat server on ``127.0.0.1:<ephemeral port>``; use as a context manager or start/stop.

    ``requests`` holds every chat request body received (in arrival order), ``request_count`` their number.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        latency: float = 0.0,
        faults: Sequence[Fault] | Callable[[int, dict], Fault | None] = (),
        expected_api_key: str | None = None,
        model_name: str = "fake",
        known_models: Sequence[str] | None = None,
    ) -> None:
        if latency < 0:
            raise ValueError("latency must be >= 0")
        self.responder: Responder = responder if responder is not None else (lambda body: DEFAULT_REPLY)
        self.latency = float(latency)
        self.faults = faults if callable(faults) else tuple(faults)
        self.expected_api_key = expected_api_key
        self.model_name = model_name
        self.known_models = frozenset(known_models) if known_models is not None else None
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        if self._server is not None:
            raise RuntimeError("server already started")
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, join_timeout: float = 5.0) -> None:
        """Stop accepting, wake sleeping handlers, close the socket and join the threads (bounded)."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(join_timeout)
        deadline = time.monotonic() + join_timeout
        with server.threads_lock:
            handlers = list(server.handler_threads)
        for handler in handlers:
            handler.join(max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- properties ----------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    # -- internals used by the handler ---------------------------------------------------------------------
    def _record(self, body: dict) -> int:
        with self._lock:
            self.requests.append(body)
            return len(self.requests) - 1

    def _fault_for(self, index: int, body: dict) -> Fault | None:
        if callable(self.faults):
            return self.faults(index, body)
        return self.faults[index] if index < len(self.faults) else None

    def _sleep(self, seconds: float) -> bool:
        """Sleep, waking early at stop(); False when stopping."""
        return not self._stopping.wait(seconds)

    def _completion_body(self, body: dict, text: str) -> dict:
        prompt_tokens = _rough_tokens(_prompt_text(body))
        completion_tokens = _rough_tokens(text)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model_name),
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def example_responder(body: dict) -> str:
    """A valid, dumb model for rescue-env prompts: :func:`agents.mock.mock_responder` on the request's messages
    (every ``### Item N`` of the last message gets the first example answer of the prompt's own JSON schema)."""
    messages = body.get("messages")
    if not messages:
        return mock_responder([{"role": "user", "content": _prompt_text(body)}])
    return mock_responder(messages)


@contextlib.contextmanager
def server_process(latency: float) -> Iterator[str]:
    """This server in a process of its own (so that it does not compete for the caller's GIL), yielding its base
    URL; for benchmark scripts."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.fake_server", "--latency", str(latency)], stdout=subprocess.PIPE, text=True
    )
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until interrupted (for benchmarks: a server in its own process, so it does not share the GIL)."""
    import argparse

    parser = argparse.ArgumentParser(description="Local OpenAI-compatible server for rescue-env tests.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    args = parser.parse_args(argv)
    with FakeOpenAIServer(example_responder, latency=args.latency) as server:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
