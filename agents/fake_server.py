"""A small OpenAI-compatible HTTP server for tests and benchmarks (stdlib only, 127.0.0.1, ephemeral port).

It speaks just enough of the OpenAI chat API for litellm's ``openai/<model>`` route with ``api_base`` pointed at
it: ``POST /v1/chat/completions`` (``/chat/completions`` too) answers a standard ``chat.completion`` body, and
``GET /v1/models`` lists one model.

It is an ``asyncio`` server (``asyncio.start_server``, HTTP/1.1 with keep-alive) on an event loop of its own
thread: ``latency`` is an ``asyncio.sleep``, so concurrent requests overlap, and a connection is reused as real
providers' are. The earlier ``ThreadingHTTPServer`` (a thread and a new connection per request) was itself the
limit of the throughput benchmarks: plain httpx at 64 and 256 connections with 0.2 s latency got 158 and 184
requests/s out of it on 2 cores, where the ideal is 320 and 1,280 (``scripts/bench_throughput.py`` prints what
this one sustains). ``server_process`` runs it in a process of its own, so that it does not share the client's
GIL.

Faults make the failure modes of real providers reproducible::

    with FakeOpenAIServer(faults=[Fault("429"), Fault("500")]) as server:
        ...  # request 0 gets a 429, request 1 a 500, every later one a normal answer

``known_models`` (optional) makes the server answer 404 ``model_not_found``, OpenAI-style, to a chat request for
any other model name (as a provider does for an unknown or misspelt model).

``faults`` is either a sequence (applied in order to the first ``len(faults)`` chat requests) or a callable
``(index, body) -> Fault | None`` deciding per request (``index`` counts chat requests from 0).

``requests`` holds every chat request body, ``max_in_flight`` the most chat requests it was handling at once (so
that a test can check a client's concurrency without timing it).

Responders run on a thread pool (a test's responder may block without stalling other requests). At
:meth:`FakeOpenAIServer.stop` the handlers (sleeping in a latency or a timeout fault, or waiting on an idle
keep-alive connection) are cancelled, their connections closed and the server thread joined; only a responder
that is still computing an answer finishes on its own thread, and its answer is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Literal

from agents.mock import DEFAULT_REPLY, mock_responder

__all__ = ["Fault", "FaultKind", "FakeOpenAIServer", "Responder", "DEFAULT_REPLY"]

Responder = Callable[[dict], str]
"""Gets the parsed request body and returns the assistant text."""

FaultKind = Literal["timeout", "429", "500", "503", "truncated", "garbage"]

GARBAGE_REPLY = "I cannot help with that"
IDLE_SECONDS = 30.0  # a silent keep-alive connection is closed after this (a client cannot pin a handler forever)
HEAD_LIMIT = 1 << 20  # bytes of request line and headers
RESPONDER_THREADS = 128  # responders run on threads (they may block), this many at once

_ERROR_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "service_unavailable"),
}
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODEL_PATHS = ("/v1/models", "/models")


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


def _error_body(status: int, message: str) -> bytes:
    err_type, code = _ERROR_TYPES.get(status, ("invalid_request_error", None))
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}}).encode()


def _response(status: int, payload: bytes, keep_alive: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Server: FakeOpenAI/2.0\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + payload


class FakeOpenAIServer:
    """OpenAI-compatible chat server on ``127.0.0.1:<ephemeral port>``; use as a context manager or start/stop.

    ``requests`` holds every chat request body received (in arrival order), ``request_count`` their number,
    ``max_in_flight`` the most chat requests handled at the same time. ``record=False`` (the benchmarks' server
    process) keeps only the count: a server that keeps every body of a long benchmark grows to hundreds of MB,
    and its garbage collections slow every later measurement down.
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
        record: bool = True,
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
        self.record = record
        self._count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._handlers: set[asyncio.Task] = set()
        self._responders: ThreadPoolExecutor | None = None
        self._port: int | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                # backlog: hundreds of simultaneous connects must not overflow the listen queue
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=1024, limit=HEAD_LIMIT)
                )
                self._port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as exc:  # e.g. no free port: re-raised by start()
                failed.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._responders = ThreadPoolExecutor(RESPONDER_THREADS, thread_name_prefix="fake-openai-responder")
        self._thread = threading.Thread(target=serve, name="fake-openai-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            self._thread.join()
            self._responders.shutdown(wait=False)
            self._thread = self._loop = self._responders = None
            raise failed[0]
        return self

    def stop(self, join_timeout: float = 5.0) -> None:
        """Stop accepting, cancel the handlers (a sleeping one wakes at once), close the connections, join."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):  # a loop that is already gone has nothing left to stop
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(join_timeout)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(join_timeout)
        if self._responders is not None:
            self._responders.shutdown(wait=False, cancel_futures=True)  # a responder still running ends on its own
        self._server = self._loop = self._thread = self._responders = None
        self._port = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- properties ----------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return self._count

    # -- HTTP ----------------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests one after the other while the client keeps it alive (HTTP/1.1)."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_SECONDS)
                    request_line, *lines = head.decode("latin-1").split("\r\n")
                    method, target, version = request_line.split(" ", 2)
                    headers = {}
                    for line in lines:
                        name, sep, value = line.partition(":")
                        if sep:
                            headers[name.strip().lower()] = value.strip()
                    length = int(headers.get("content-length") or 0)
                    raw = await reader.readexactly(length) if length > 0 else b""
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
                    return  # the client closed, went silent or sent something that is not HTTP
                keep_alive = version.strip() == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    status, payload = 400, _error_body(400, "chunked request bodies are not supported")
                    keep_alive = False
                else:
                    status, payload = await self._route(method, target.split("?", 1)[0].rstrip("/"), headers, raw)
                writer.write(_response(status, payload, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, OSError):
            return  # the client gave up (e.g. its timeout fired): nothing to do
        except asyncio.CancelledError:
            # stop(): end quietly (Python 3.11's stream server logs a handler task that ends cancelled)
            return
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.transport.abort()  # no lingering close handshake: stop() must not wait on it

    async def _route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, bytes]:
        if method == "GET" and path in _MODEL_PATHS:
            names = sorted(self.known_models) if self.known_models else [self.model_name]
            models = [{"id": name, "object": "model", "created": 0, "owned_by": "rescue-env"} for name in names]
            return 200, json.dumps({"object": "list", "data": models}).encode()
        if method != "POST" or path not in _CHAT_PATHS:
            return 404, _error_body(404, f"unknown path {path}")
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            return 400, _error_body(400, f"invalid JSON body: {exc}")
        index = self._record(body)
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._chat(index, body, headers.get("authorization") or "")
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _chat(self, index: int, body: dict, auth: str) -> tuple[int, bytes]:
        if self.expected_api_key is not None and auth != f"Bearer {self.expected_api_key}":
            shown = auth.removeprefix("Bearer ") or "<none>"
            return 401, _error_body(401, f"Incorrect API key provided: {shown}.")
        model = str(body.get("model") or "")
        if self.known_models is not None and model not in self.known_models:
            return 404, _error_body(404, f"The model `{model}` does not exist or you do not have access to it.")

        fault = self._fault_for(index, body)
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if fault is not None and fault.kind in ("429", "500", "503"):
            status = int(fault.kind)
            message = fault.message or f"{HTTPStatus(status).phrase} (injected fault)"
            if fault.echo_auth:
                message += f" [request Authorization: {auth or '<none>'}]"
            return status, _error_body(status, message)
        if fault is not None and fault.kind == "timeout":
            await asyncio.sleep(fault.seconds)
        if fault is not None and fault.kind == "garbage":
            text = fault.text if fault.text is not None else GARBAGE_REPLY
        else:
            try:
                # On a thread: a responder may block (tests make slow ones), and must not stall other requests.
                text = await asyncio.get_running_loop().run_in_executor(self._responders, self.responder, body)
            except Exception as exc:  # a broken responder is a server error, not a dead connection
                return 500, _error_body(500, f"responder failed: {type(exc).__name__}: {exc}")
        payload = json.dumps(self._completion_body(body, text)).encode("utf-8")
        if fault is not None and fault.kind == "truncated":
            payload = payload[: len(payload) // 2]
        return 200, payload

    # -- internals -----------------------------------------------------------------------------------------
    def _record(self, body: dict) -> int:
        with self._lock:
            if self.record:
                self.requests.append(body)
            self._count += 1
            return self._count - 1

    def _fault_for(self, index: int, body: dict) -> Fault | None:
        if callable(self.faults):
            return self.faults(index, body)
        return self.faults[index] if index < len(self.faults) else None

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
    with FakeOpenAIServer(example_responder, latency=args.latency, record=False) as server:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
