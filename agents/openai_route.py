"""The direct route of :class:`agents.client.LLMClient` for OpenAI-compatible endpoints: the chat request posted
with aiohttp, without litellm.

Why: litellm spends 3.5-4.5 ms of CPU on every request (building it, its logging object, parsing, pricing the
answer), so one process saturates near 200-250 requests/s on 2 cores; the ``openai`` SDK on its aiohttp transport
spends about 0.8 ms (its request options, URL parsing and response models), aiohttp alone 0.3 ms
(``scripts/bench_throughput.py`` prints each next to plain aiohttp). litellm's own faster settings were tried
first (its HTTP handler for ``openai/``, which the litellm route keeps, saves 20-25 %; its logging switches save
nothing; its ``aiohttp_openai/`` provider drops the response's ``usage``), then the SDK: the harness stayed above
1.5x the ideal on ``evaluate`` at 64 connections until the request went out through aiohttp itself.

Which requests take it (:func:`uses_direct_route`): ``openai/<name>`` with an ``api_base`` (vLLM, llama.cpp, a
proxy ...) whose name litellm has **no price** for, i.e. the requests for which litellm adds nothing but its
overhead: it would send the same JSON body to the same URL and price the answer at 0. Everything else goes
through litellm, which stays the one way to reach a provider: hosted providers, a model litellm prices (e.g.
``openai/gpt-4o-mini`` behind a proxy: its cost is litellm's), the mock model, and a request whose parameters are
not plain JSON (a pydantic class as ``response_format``: litellm converts it). ``RESCUE_MODEL_ROUTE=litellm`` sends
every request through litellm (a comparison, or a server that needs one of litellm's adaptations).

Whether litellm has a price is read from litellm's own price list (the JSON file litellm loads when
``LITELLM_LOCAL_MODEL_COST_MAP=True``, which the client sets) without importing litellm (4 s): the name as given
and without its ``openai/`` prefix, as litellm looks it up. When the file cannot be read the model is taken to be
priced (litellm's route: never a wrong cost).

The request is litellm's (tested: the same body): ``model`` without the prefix, ``messages``, ``temperature``,
``max_tokens``, the config's ``extra_params`` and the call's ``params``, posted to ``{api_base}/chat/completions``
with ``Authorization: Bearer <key>``, through the proxy that ``HTTP(S)_PROXY`` / ``NO_PROXY`` name. A failure is
the ``openai`` exception the SDK (and litellm, whose exceptions subclass them) would raise: ``RateLimitError`` for a
429, ``InternalServerError`` for a 5xx, ``APIConnectionError``, ``APITimeoutError`` ..., with the SDK's message, so
the client's retry policy and error lines read both routes alike.

An aiohttp session (``max_connections`` connections kept alive) is made per event loop, and closed when
``asyncio.run`` finalises the loop's asynchronous generators (a generator suspended until then closes it in its
``finally``), so that aiohttp never reports an unclosed session.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ROUTE_ENV", "ROUTES", "DirectRoute", "litellm_has_price", "sendable", "uses_direct_route"]

logger = logging.getLogger(__name__)

ROUTE_ENV = "RESCUE_MODEL_ROUTE"
"""``auto`` (default): the direct route where it applies; ``litellm``: every request through litellm."""
ROUTES = ("auto", "litellm")
PRICE_FILE = "model_prices_and_context_window_backup.json"
"""litellm's packaged price list (what it loads with ``LITELLM_LOCAL_MODEL_COST_MAP=True``)."""
PREFIX = "openai/"
_CLIENT_OWNED = frozenset({"model", "messages", "timeout", "num_retries", "drop_params", "api_base", "api_key"})
"""Arguments of the client's litellm call that are not part of the request body."""


def route_setting() -> str:
    """``RESCUE_MODEL_ROUTE``, checked (a one-line ValueError for anything but ``auto`` or ``litellm``)."""
    value = os.environ.get(ROUTE_ENV, "auto").strip().lower() or "auto"
    if value not in ROUTES:
        raise ValueError(f"{ROUTE_ENV} must be one of {', '.join(ROUTES)}, got {value!r}")
    return value


@functools.cache
def _priced_names() -> frozenset[str] | None:
    """The model names of litellm's price list, read without importing litellm; None when it cannot be read."""
    try:
        spec = importlib.util.find_spec("litellm")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            path = Path(folder) / PRICE_FILE
            if path.is_file():
                return frozenset(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ImportError) as exc:
        logger.debug("cannot read litellm's price list (%s): every model counts as priced", exc)
    return None


def litellm_has_price(model: str) -> bool:
    """Whether litellm may price ``model`` (``openai/<name>``): its price list names it with or without the
    prefix. True when the list cannot be read (the safe answer: litellm's route)."""
    names = _priced_names()
    return names is None or model in names or model.removeprefix(PREFIX) in names


def uses_direct_route(model: str, api_base: str | None) -> bool:
    """Whether requests for ``model`` at ``api_base`` take the direct route (see the module docstring)."""
    return (
        route_setting() == "auto"
        and bool(api_base)
        and model.startswith(PREFIX)
        and len(model) > len(PREFIX)
        and not litellm_has_price(model)
    )


def sendable(call: Mapping[str, Any]) -> bool:
    """Whether the request's parameters are plain JSON (what the direct route posts as they are); otherwise
    litellm converts them (a pydantic class as ``response_format``). The messages are not checked (serialising
    them twice per request costs): chat messages are JSON, on either route."""
    try:
        json.dumps({k: v for k, v in call.items() if k not in _CLIENT_OWNED})
        return True
    except (TypeError, ValueError):
        return False


class DirectRoute:
    """Posts chat requests to one OpenAI-compatible ``api_base`` with aiohttp (see the module docstring)."""

    def __init__(self, api_base: str, max_connections: int) -> None:
        self.api_base = api_base.rstrip("/")
        self.url = self.api_base + "/chat/completions"
        self.proxy = env_proxy(self.url)
        self.max_connections = max_connections
        self._loops: dict[int, tuple[asyncio.AbstractEventLoop, Any, AsyncIterator[None]]] = {}

    async def _session(self) -> Any:
        """The aiohttp session of the running loop (made on first use; closed at the loop's shutdown)."""
        loop = asyncio.get_running_loop()
        entry = self._loops.get(id(loop))
        if entry is None or entry[0] is not loop:
            self._loops = {k: v for k, v in self._loops.items() if not v[0].is_closed()}
            import aiohttp

            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.max_connections))
            closer = _close_at_shutdown(session)
            entry = (loop, session, closer)
            self._loops[id(loop)] = entry
            # Started now, so that the loop tracks it; held here, so that it is not collected (and closed) before
            # the loop's shutdown closes it.
            await closer.__anext__()
        return entry[1]

    async def create(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """One chat completion for the client's litellm-shaped ``call``: the response body (a ``chat.completion``
        dict: ``choices[0].message.content``, ``usage``). Failures raise the ``openai`` exceptions the SDK would
        (``_status_error``, ``APIConnectionError``, ``APITimeoutError``); a 200 whose body is not JSON raises
        ``json.JSONDecodeError``, one without ``choices[0].message`` ``openai.APIResponseValidationError``
        (status 200): both retried, as on the litellm route."""
        import aiohttp

        body = {k: v for k, v in call.items() if k not in _CLIENT_OWNED}
        body["model"] = str(call["model"]).removeprefix(PREFIX)
        body["messages"] = call["messages"]
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = call.get("api_key")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        session = await self._session()
        timeout = aiohttp.ClientTimeout(total=float(call["timeout"]))
        try:
            async with session.post(
                self.url, data=json.dumps(body), headers=headers, timeout=timeout, proxy=self.proxy
            ) as response:
                status, content = response.status, await response.read()
                response_headers = dict(response.headers)
        except asyncio.TimeoutError as exc:  # aiohttp's total timeout (ServerTimeoutError is one too)
            raise _openai().APITimeoutError(request=_request(self.url)) from exc
        except aiohttp.ClientError as exc:  # refused, reset, disconnected, a cut body
            raise _openai().APIConnectionError(message=f"Connection error: {exc}", request=_request(self.url)) from exc
        if status >= 300:
            raise _status_error(self.url, status, response_headers, content)
        data = json.loads(content)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            response = _response(self.url, status, response_headers, content)
            raise _openai().APIResponseValidationError(response, data, message="the response has no choices[0].message")
        return data


def env_proxy(url: str) -> str | None:
    """The proxy that ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY`` give ``url`` (None: direct), as the openai SDK
    and litellm read them. Found once per route: aiohttp's ``trust_env`` looks it up (and ``~/.netrc``) on a
    thread for every request, two thread hops a request."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def _openai() -> Any:
    import openai  # only on a failure: its import is a third of a second

    return openai


def _http() -> Any:
    """The openai SDK's HTTP library (its exceptions carry its ``Request`` and ``Response``): httpx2 from openai
    3.x, httpx before."""
    try:
        import httpx2 as http
    except ImportError:  # pragma: no cover - openai < 3
        import httpx as http
    return http


def _request(url: str) -> Any:
    return _http().Request("POST", url)


def _response(url: str, status: int, headers: Mapping[str, str], content: bytes) -> Any:
    return _http().Response(status, headers=dict(headers), content=content, request=_request(url))


_STATUS_ERRORS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
"""The SDK's exception per status (``InternalServerError`` from 500, ``APIStatusError`` otherwise), so that an error
reads as the SDK's and litellm's do ("RateLimitError: Error code: 429 - {...}")."""


def _status_error(url: str, status: int, headers: Mapping[str, str], content: bytes) -> Exception:
    """The ``openai`` exception the SDK raises for an answer with ``status`` (its message and body)."""
    openai = _openai()
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = content.decode("utf-8", errors="replace")
    name = _STATUS_ERRORS.get(status, "InternalServerError" if status >= 500 else "APIStatusError")
    data = body.get("error", body) if isinstance(body, dict) else body
    message = f"Error code: {status} - {json.dumps(body) if isinstance(body, dict | list) else body}"
    return getattr(openai, name)(message, response=_response(url, status, headers, content), body=data)


async def _close_at_shutdown(session: Any) -> AsyncIterator[None]:
    """Suspended until the loop's ``shutdown_asyncgens`` (``asyncio.run``'s end) closes it: then ``session``."""
    try:
        yield
    finally:
        try:
            await session.close()
        except Exception:  # pragma: no cover - closing is best effort at shutdown
            logger.debug("closing an aiohttp session failed", exc_info=True)
