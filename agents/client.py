"""The one model client of rescue-env: every LLM call of the project goes through :class:`LLMClient`.

It wraps ``litellm.acompletion`` (so any litellm model string works: hosted providers, or ``openai/<name>`` with
``api_base`` for a local OpenAI-compatible server) and adds what a benchmark run needs:

- **Two routes.** An OpenAI-compatible endpoint (``openai/<name>`` with an ``api_base``: vLLM, llama.cpp, a proxy
  ...) whose model litellm has no price for takes the **direct route** (:mod:`agents.openai_route`): the same JSON
  body posted with aiohttp, the same ``openai`` exceptions on failure, a quarter of litellm's CPU per request and
  no ``import litellm`` (4 s) at all. Everything else takes the **litellm route**: hosted providers, a model
  litellm prices, the mock model, parameters litellm must convert; ``RESCUE_MODEL_ROUTE=litellm`` sends every
  request there. On that route the client turns on litellm's own HTTP handler for ``openai/`` models
  (:data:`OPENAI_ROUTE_ENV`, unless the variable is set): the same request and response transformations as its
  ``openai`` SDK route, about 30 % fewer function calls and 20-25 % less CPU per request
  (``scripts/bench_throughput.py`` prints every route). Where it differs, the client keeps the old behaviour: a
  200 whose body is not JSON (an APIError with status 200 there) is retried, and a missing ``OPENAI_API_KEY`` for
  OpenAI itself is reported before sending, as the SDK did (that handler sends no organization header).
  litellm's ``aiohttp_openai/`` provider is not used: it drops the response's ``usage`` (tokens would read 0) and
  ignores the timeout. The documented logging switches (``turn_off_message_logging``, empty callbacks ...) save
  nothing measurable. A model litellm has no price for gets the price 0 (``litellm.register_model``), which spares
  litellm a search of its price list on every request.
- **Cost** is litellm's own ``response_cost`` (it prices every response once, in ``_hidden_params``); the client
  does not price it a second time (``litellm.completion_cost`` is its fallback when that is missing). The direct
  route's answers cost 0: it takes only models litellm has no price for.
- **Concurrency limit**: an ``asyncio.Semaphore(max_connections)`` around each HTTP call (not around back-off
  sleeps), so many tasks can ``await client.complete(...)`` at once.
- **Worker processes** (``workers=N``, ``--workers``): litellm spends 3-5 milliseconds of CPU on each request
  (building it, parsing, pricing and logging the answer) on the event loop that sends it, so one process saturates
  near 200-300 requests/s however many connections it has (the direct route, about 1 ms, needs no workers on 2
  cores, where the server takes the other core; they remain for the litellm route). With ``workers > 1`` the
  requests (retries included) are sent by N worker processes, each a ``workers=1`` client with its share of
  ``max_connections`` and its own event loop. They are ``multiprocessing`` processes of the forkserver start method
  whose server imports litellm once (:meth:`LLMClient.start_workers` starts them on a thread, so that the import
  overlaps the caller's own preparation): each worker is a fork of it, not an interpreter importing litellm for
  seconds. The parent keeps the cache, the totals and this API, and hands each request to the least busy worker over
  a socket pair (length-prefixed pickles, read by asyncio streams on both sides). Answers, retries and totals are
  those of one process; a client with workers serves one event loop at a time (a new one starts new workers) and
  :meth:`LLMClient.close` stops them (so does garbage collection).
- **Retry policy**: litellm's own retries are off (``num_retries=0``); the client makes at most
  ``1 + max_retries`` attempts. It retries timeouts, rate limits (429), 408/409, server errors (5xx, which
  includes a 200 whose body is not valid JSON: litellm reports it as a 500) and connection errors. It never
  retries other 4xx (400 bad request, 401/403 auth, 404 unknown model, 422 ...). Before attempt ``n + 1`` it
  sleeps ``d/2 + U(0, d/2)`` with ``d = min(backoff_max, backoff_base * 2**(n-1))`` ("equal jitter", seeded
  RNG), at least a server's ``Retry-After`` (capped at ``backoff_max``). When the attempts run out, or on a
  non-retryable error, ``complete`` returns ``Completion(text=None, error="<ExceptionClass>: <message>")``; it
  never raises for API errors (programming errors such as forbidden parameters do raise).
- **Disk cache** (``cache_dir``): one JSON file per request at ``<cache_dir>/<key[:2]>/<key>.json``, written
  atomically (temporary file + ``os.replace``, on a thread: creating a file must not stall the event loop's
  other requests). Only successful completions are stored; a hit makes no call and
  returns ``Completion(cached=True, attempts=0)`` with the stored text and token counts (cost 0: nothing spent).
  The key (:meth:`LLMClient.cache_key`) is the SHA-256 of canonical JSON over the model, ``api_base``, the
  messages and the effective sampling parameters (``temperature``, ``max_tokens``, ``extra_params`` and the
  per-call ``params``, later ones overriding earlier ones). The timeout and the API key are never part of it;
  answers produced by ``mock_response`` get a separate key space so they never pollute a real cache.
- **Totals** (:attr:`LLMClient.usage`): logical calls, cache hits, retries, failures, tokens from
  ``response.usage`` and litellm's cost (0.0 when litellm does not know the model).
  ``calls`` counts non-cached ``complete`` calls; HTTP requests sent = ``calls + retries``.
- **Set-up checks** (before a run's first call): :func:`check_model_config` (no I/O: the key variable named by
  ``api_key_env`` is set and non-empty, the model string is not blank, ``api_base`` is an http(s) URL) and
  :meth:`LLMClient.probe` (one minimal request, no cache, not retried on connection errors) raise
  :class:`ModelSetupError` with one redacted line that names the cause and the option to fix (``--api-base``,
  ``--api-key-env``, ``--model``). Probe requests are counted in ``usage.probe_calls`` only (their tokens and cost
  in the totals).
- **Mock model**: ``ModelConfig(model="mock")`` needs no network and no key: unless ``mock_response`` is given, the
  client answers with :func:`agents.mock.mock_responder` through litellm's ``mock_response`` (litellm refuses the
  bare model string ``"mock"``, so it is sent as ``"openai/mock"``; the config and cache key keep ``"mock"``).
- **Logging**: a failed call is logged at DEBUG only (the caller tallies and reports failures, e.g.
  :class:`benchmarks.failures.ErrorTally`, so a dead endpoint does not print one line per call).
- **Secrets rule**: the API key is never stored in a config, a cache file or a cache key. ``ModelConfig`` holds
  only the *name* of the environment variable (``api_key_env``, an :data:`EnvVarName`: a pasted key is refused
  without being echoed), read at call time. Every string the client
  returns, caches or logs is passed through :func:`redact`, which replaces the value of ``api_key_env`` and of
  every environment variable whose name ends with ``_API_KEY`` (plus any ``Bearer <token>``) with ``***``; error
  strings are cut to 300 characters after redaction.

``litellm`` is imported lazily (it takes 4 s) with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so it never fetches its
cost map from the network; :func:`preload_litellm` starts the import on a thread (``evaluate`` does, before loading
its data), and the interpreter's exit skips collecting litellm's objects (``gc.freeze``: 1.5-2 s saved).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import email.utils
import gc
import hashlib
import json
import logging
import os
import pickle
import random
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from agents.mock import LITELLM_MOCK_MODEL, is_mock, mock_responder
from agents.openai_route import DirectRoute, route_setting, sendable, uses_direct_route

__all__ = [
    "Completion",
    "EnvVarName",
    "LLMClient",
    "ModelConfig",
    "ModelSetupError",
    "Usage",
    "check_env_name",
    "check_model_config",
    "needs_litellm",
    "redact",
    "MAX_ERROR_CHARS",
    "NO_KEY",
]

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 300
NO_KEY = "sk-no-key"  # dummy key for OpenAI-compatible local servers that need none
CACHE_FORMAT = 1

# Parameters a caller may not set through ``params`` or ``extra_params``: they are owned by the client (and
# ``api_key`` must never travel through a config or a cache key).
_RESERVED_PARAMS = frozenset(
    {"model", "messages", "api_key", "api_base", "base_url", "stream", "num_retries", "max_retries", "mock_response"}
)
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BEARER = re.compile(r"(Bearer\s+)[^\s\"',;\]}]+", re.IGNORECASE)
_MIN_SECRET_LEN = 4  # shorter values are not worth redacting (and would shred ordinary text)
ENV_NAME_RULE = "must be the NAME of an environment variable (letters, digits, '_'), not the key itself"


def check_env_name(value: str) -> str:
    """``value`` if it can be an environment variable's name; else ValueError that does not echo it.

    Catches the classic mistake of pasting the key itself where its variable's name belongs (keys contain '-')."""
    if not isinstance(value, str) or not _ENV_NAME.match(value):
        raise ValueError(f"the key variable {ENV_NAME_RULE}")
    return value


EnvVarName = Annotated[str, AfterValidator(check_env_name)]
"""A config field holding the NAME of a key's environment variable. Models using it need
``ConfigDict(hide_input_in_errors=True)`` so that a ValidationError does not echo a pasted key."""


class ModelSetupError(Exception):
    """The model cannot be used as configured (missing key, unreachable endpoint, unknown model ...): one redacted
    line naming the cause and the option to fix. Raised by :func:`check_model_config` and :meth:`LLMClient.probe`."""

    def __init__(self, message: str, cause: str = "setup") -> None:
        super().__init__(" ".join(redact(message).split()))
        self.cause = cause


class ModelConfig(BaseModel):
    """Which model to call and how. Holds the *name* of the key's environment variable, never the key."""

    # hide_input_in_errors: a key pasted into a field by mistake must not be echoed by a ValidationError
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key_env: EnvVarName | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    extra_params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("extra_params")
    @classmethod
    def _no_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = sorted(set(value) & _RESERVED_PARAMS)
        if bad:
            raise ValueError(f"extra_params may not set {bad}: the client owns them")
        return value


class Usage(BaseModel):
    """Running totals of one client (see the module docstring for what each counter means)."""

    calls: int = 0
    probe_calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class Completion(BaseModel):
    """The outcome of one ``complete`` call: ``text`` on success, ``text=None`` and ``error`` on failure."""

    text: str | None
    error: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    attempts: int = 1
    status_code: int | None = None
    """HTTP status of the last failed attempt, when there was one (``error`` is set)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    def usage(self) -> dict[str, Any]:
        """Tokens, cost and whether it came from the cache: what a decision or a persona turn records."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "cached": self.cached,
        }


# ----------------------------------------------------------------------------------------------------------------
# secrets


_SECRETS_SEEN: dict[str | None, tuple[tuple, list[str]]] = {}


def _secret_values(api_key_env: str | None) -> list[str]:
    # Scanning the environment decodes every variable (about 10 % of the client's own CPU per request): the
    # answer is kept until the environment changes (``os.environ``'s raw dict, compared in C).
    raw = getattr(os.environ, "_data", None)
    if not isinstance(raw, dict):  # pragma: no cover - not CPython's os.environ
        return _scan_secrets(api_key_env)
    snapshot = tuple(raw.items())
    seen = _SECRETS_SEEN.get(api_key_env)
    if seen is not None and seen[0] == snapshot:
        return seen[1]
    values = _scan_secrets(api_key_env)
    if len(_SECRETS_SEEN) > 16:
        _SECRETS_SEEN.clear()
    _SECRETS_SEEN[api_key_env] = (snapshot, values)
    return values


def _scan_secrets(api_key_env: str | None) -> list[str]:
    values: set[str] = set()
    if api_key_env:
        value = os.environ.get(api_key_env)
        if value:
            values.add(value)
    for name, value in os.environ.items():
        if name.upper().endswith("_API_KEY") and value:
            values.add(value)
    # longest first, so a key that contains another is replaced whole
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def redact(text: str, api_key_env: str | None = None) -> str:
    """Replace secret values (``api_key_env``'s, every ``*_API_KEY``'s, ``Bearer <token>``) with ``***``."""
    for secret in _secret_values(api_key_env):
        text = text.replace(secret, "***")
    return _BEARER.sub(r"\1***", text)


def _short_error(exc: BaseException, api_key_env: str | None) -> str:
    name = type(exc).__name__
    message = " ".join(str(exc).split())
    # litellm prefixes "litellm.RateLimitError: RateLimitError: ..."; keep one class name.
    for prefix in (f"litellm.{name}:", f"{name}:"):
        message = message.removeprefix(prefix).strip()
    text = redact(f"{name}: {message}" if message else name, api_key_env)  # redact BEFORE cutting
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


# ----------------------------------------------------------------------------------------------------------------
# error classification


def _status_code(exc: BaseException) -> int | None:
    for attr in ("status_code", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def _is_api_error(exc: BaseException) -> bool:
    """Errors of the remote side or the transport (returned as ``Completion.error``), not programming errors."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError, json.JSONDecodeError)):
        return True
    try:
        import httpx
        import openai

        return isinstance(exc, (openai.OpenAIError, httpx.HTTPError))
    except ImportError:  # pragma: no cover - both come with litellm
        return False


Cause = Literal["connection", "auth", "model", "timeout", "rate_limit", "server", "request"]

_MISSING_CREDENTIALS = ("missing credentials", "api_key client option must be set", "no api key provided")
_CONNECTION_TYPES = frozenset({"openai.APIConnectionError", "httpx.ConnectError", "httpx.ConnectTimeout"})


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts (litellm wraps openai errors, which wrap httpx/aiohttp/socket errors)."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(found) < 12 and all(current is not e for e in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _openai_types(*names: str) -> tuple[type, ...]:
    """The ``openai`` exception classes ``names``: litellm's exceptions subclass them (``litellm.Timeout`` is an
    ``openai.APITimeoutError``, ...), so one test covers both routes without importing litellm (seconds)."""
    import openai

    return tuple(t for t in (getattr(openai, n, None) for n in names) if isinstance(t, type))


def error_cause(exc: BaseException) -> Cause:
    """What an API error means: the endpoint cannot be reached (``connection``; litellm reports a refused
    connection as a 500 "Connection error", so the wrapped causes are inspected), the key is missing or refused
    (``auth``: 401/403, or litellm's "Missing credentials"), the model is unknown (``model``: 404, or a model
    string litellm cannot route), ``timeout``, ``rate_limit`` (429), ``server`` (other 5xx, 408/409, a body that is
    not JSON), or ``request`` (any other rejected request, e.g. 400/422)."""
    import socket

    chain = _chain(exc)
    names = {f"{type(e).__module__}.{type(e).__name__}" for e in chain}
    text = " ".join(str(e) for e in chain).lower()
    status = _status_code(exc)
    if any(isinstance(e, _MissingAPIKeyError) for e in chain) or any(m in text for m in _MISSING_CREDENTIALS):
        return "auth"
    if status in (401, 403) or isinstance(exc, _openai_types("AuthenticationError", "PermissionDeniedError")):
        return "auth"
    if status == 404 or isinstance(exc, _openai_types("NotFoundError")) or "llm provider not provided" in text:
        return "model"
    # A refused or unresolvable connection first: a transport may report a refused connection as a connect
    # *timeout* (the openai SDK's aiohttp transport: httpx's ConnectTimeout, then APITimeoutError), the refusal
    # being its cause.
    unreachable = any(isinstance(e, (ConnectionError, socket.gaierror)) for e in chain)
    timeouts = (TimeoutError, asyncio.TimeoutError, *_openai_types("APITimeoutError"))
    if not unreachable and (
        status == 408 or "openai.APITimeoutError" in names or any(isinstance(e, timeouts) for e in chain)
    ):
        return "timeout"
    if names & _CONNECTION_TYPES or unreachable:
        return "connection"
    if status == 429 or isinstance(exc, _openai_types("RateLimitError")):
        return "rate_limit"
    if _is_transient(exc, status):
        return "server"
    return "request"


def _is_transient(exc: BaseException, status: int | None) -> bool:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError, json.JSONDecodeError)):
        return True
    if status == 200 or any(isinstance(e, json.JSONDecodeError) for e in _chain(exc)):
        # an answer whose body is not valid JSON: the SDK route reports it as a 500, litellm's own HTTP handler
        # as an APIError with the response's status, 200
        return True
    # litellm's ServiceUnavailableError and BadGatewayError are plain APIStatusErrors: their 503 and 502 count below
    retry_types = _openai_types("APITimeoutError", "RateLimitError", "APIConnectionError", "InternalServerError")
    if retry_types and isinstance(exc, retry_types):
        return True
    try:
        import httpx

        if isinstance(exc, httpx.TransportError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return status is not None and (status in _RETRYABLE_STATUS or status >= 500)


def _is_retryable(exc: BaseException, *, connection: bool = True) -> bool:
    """Worth another attempt: timeouts, 429, 408/409, 5xx, connection errors (unless ``connection=False``);
    never a missing or refused key or an unknown model, whatever status litellm gave them."""
    cause = error_cause(exc)
    if cause in ("auth", "model", "request"):
        return False
    return connection or cause != "connection"


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header on the error's HTTP response, if any."""
    try:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        value = headers.get("retry-after") if headers is not None else None
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except Exception:
        return None


# ----------------------------------------------------------------------------------------------------------------
# the client


OPENAI_ROUTE_ENV = "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"
"""litellm's switch that sends ``openai/...`` requests through its own HTTP handler (the one most of its providers
use) instead of the ``openai`` SDK: the same request and response transformations, about 30 % fewer function
calls per request. The client turns it on unless the variable is set already (``=false`` keeps the SDK route)."""

_litellm: Any = None
_preload: threading.Thread | None = None
_import_lock = threading.Lock()


def _import_litellm() -> Any:
    """litellm, imported once (waiting for :func:`preload_litellm`'s thread when it runs) and set up for the
    client: the local cost map, no banners, its own HTTP handler for ``openai/`` models."""
    global _litellm
    if _litellm is not None:
        return _litellm
    thread = _preload
    if thread is not None and thread is not threading.current_thread():
        thread.join()
    with _import_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the cost map
            os.environ.setdefault(OPENAI_ROUTE_ENV, "true")
            import litellm

            litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
            # A request cancelled while litellm hands it to its executor (a run stopping at its failure budget)
            # drops litellm's inner coroutine; Python would print "coroutine ... was never awaited" for it.
            warnings.filterwarnings(
                "ignore", message=r"coroutine '.*a(sync_)?completion' was never awaited", category=RuntimeWarning
            )
            _litellm = litellm
            # Tearing down litellm's modules at interpreter exit takes 1.5-2 s (the final collections of its
            # millions of objects); the process is ending, so they are left to the OS (``gc.freeze`` at exit).
            atexit.register(gc.freeze)
    return _litellm


def preload_litellm() -> None:
    """Start importing litellm on a background thread and return at once (``import litellm`` takes seconds), so
    that the import overlaps what the caller does before its first request; the first use of litellm waits
    for the thread. A failed import is not reported here: the first use imports again and raises."""
    global _preload
    with _import_lock:
        if _litellm is not None or _preload is not None:
            return
        _preload = threading.Thread(target=_import_quietly, name="import-litellm", daemon=True)
        _preload.start()


def _import_quietly() -> None:
    # One interpreter lock: the import and the caller's own work (both mostly Python) take turns, so this saves
    # only the import's waits (0-0.3 s before the first request, scripts/bench_throughput.py); a real overlap
    # takes another process (``workers > 1``: the forkserver imports litellm while the caller prepares).
    try:
        _import_litellm()
    except Exception:  # pragma: no cover - raised again, to the caller, by the first use
        logger.debug("importing litellm in the background failed", exc_info=True)


if sys.version_info >= (3, 11):

    async def _bounded(awaitable: Any, seconds: float) -> Any:
        """``await awaitable``, TimeoutError after ``seconds``: ``asyncio.timeout`` runs it in the caller's task,
        where ``asyncio.wait_for`` (before Python 3.12) wraps every request in a task of its own."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def _bounded(awaitable: Any, seconds: float) -> Any:
        return await asyncio.wait_for(awaitable, timeout=seconds)


def _check_params(params: Mapping[str, Any]) -> None:
    bad = sorted(set(params) & _RESERVED_PARAMS)
    if bad:
        raise ValueError(f"complete() may not set {bad}: the client owns them")


def _canonical(value: Any) -> Any:
    """JSON-able stand-in for values such as a pydantic class passed as response_format."""
    if isinstance(value, type):
        schema = getattr(value, "model_json_schema", None)
        if callable(schema):
            return {"__type__": f"{value.__module__}.{value.__qualname__}", "schema": schema()}
        return {"__type__": f"{value.__module__}.{value.__qualname__}"}
    return repr(value)


class LLMClient:
    """Async, rate-limited, retrying, caching front end to ``litellm.acompletion``. See the module docstring."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        max_connections: int = 8,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        cache_dir: str | Path | None = None,
        mock_response: str | Callable[[list[dict]], str] | None = None,
        seed: int | None = 0,
        workers: int = 1,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if backoff_base < 0 or backoff_max < 0:
            raise ValueError("backoff_base and backoff_max must be >= 0")
        self.config = config
        self.max_connections = max_connections
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        if mock_response is None and is_mock(config.model):
            mock_response = mock_responder
        self.mock_response = mock_response
        self.usage = Usage()
        self.seed = seed
        self._rng = random.Random(seed)
        # More workers than connections would leave some without a connection.
        self.workers = min(workers, max_connections)
        self._pool: _WorkerPool | None = None
        self._priced = False
        self._provider: str | None = None  # litellm's provider of the model, once asked (``_openai_provider``)
        # OpenAI-compatible endpoints without a litellm price: posted with aiohttp, without litellm (``openai_route``)
        self._direct = (
            DirectRoute(config.api_base or "", max_connections)
            if mock_response is None and not needs_litellm(config)
            else None
        )
        if self.workers > 1 and callable(mock_response):
            try:
                pickle.dumps(mock_response)
            except Exception as exc:
                raise ValueError(
                    "workers > 1 needs a mock_response that can be pickled (a module-level function)"
                ) from exc
        self._semaphores: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}

    def __repr__(self) -> str:
        return (
            f"LLMClient(model={self.config.model!r}, api_base={self.config.api_base!r}, "
            f"max_connections={self.max_connections}, workers={self.workers}, "
            f"cache_dir={str(self.cache_dir) if self.cache_dir else None!r})"
        )

    # -- worker processes ----------------------------------------------------------------------------------
    def start_workers(self) -> None:
        """Start the worker processes now (no-op with ``workers=1``), so that they import litellm while the
        caller still prepares its run; otherwise they start at the first request."""
        if self.workers > 1 and self._pool is None:
            spec = {
                "config": self.config.model_dump(),
                "max_retries": self.max_retries,
                "backoff_base": self.backoff_base,
                "backoff_max": self.backoff_max,
                "mock_response": self.mock_response,
                "seed": self.seed,
                "litellm": self._direct is None,  # what the workers' forkserver preloads
            }
            self._pool = _WorkerPool(spec, self.workers, self.max_connections)

    def close(self) -> None:
        """Stop the worker processes (if any). A client that is not closed stops them when it is collected."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def _pool_call(self, op: str, *args: Any) -> Any:
        if self._pool is not None and self._pool.stale():
            self.close()  # its event loop is gone (a client used from several ``asyncio.run`` calls)
        self.start_workers()
        assert self._pool is not None
        kind, result, delta = await self._pool.call(op, *args)
        for name, value in delta.items():
            setattr(self.usage, name, getattr(self.usage, name) + value)
        if kind == "raise":
            raise result
        return result

    # -- cache key -----------------------------------------------------------------------------------------
    @staticmethod
    def cache_key(config: ModelConfig, messages: list[dict[str, Any]], params: Mapping[str, Any] | None = None) -> str:
        """SHA-256 (hex) of the request's identity: model, api_base, messages and effective sampling parameters.

        ``params`` override ``extra_params``, which override the config's temperature/max_tokens; so
        ``temperature=0.0`` passed per call and the config default give the same key. Never includes the key.
        """
        effective: dict[str, Any] = {"temperature": config.temperature, "max_tokens": config.max_tokens}
        effective.update(config.extra_params)
        effective.update(params or {})
        effective.pop("api_key", None)  # defensive: never hash a secret
        identity = {
            "v": CACHE_FORMAT,
            "model": config.model,
            "api_base": config.api_base,
            "messages": messages,
            "params": effective,
        }
        blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_canonical)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / key[:2] / f"{key}.json"

    def _cache_read(self, key: str) -> dict[str, Any] | None:
        path = self.cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable cache file %s (%s)", path, type(exc).__name__)
            return None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            return None
        return record

    def _cache_write(self, key: str, record: dict[str, Any]) -> None:
        path = self.cache_path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(record, fh, ensure_ascii=False, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:  # a full disk must not lose the answer we already have
            logger.warning("could not write cache file %s (%s)", path, type(exc).__name__)

    # -- calling -------------------------------------------------------------------------------------------
    def _semaphore(self) -> asyncio.Semaphore:
        """One semaphore per running event loop (a client may be used from several ``asyncio.run`` calls)."""
        loop = asyncio.get_running_loop()
        entry = self._semaphores.get(id(loop))
        if entry is None or entry[0] is not loop:
            self._semaphores = {k: v for k, v in self._semaphores.items() if not v[0].is_closed()}
            entry = (loop, asyncio.Semaphore(self.max_connections))
            self._semaphores[id(loop)] = entry
        return entry[1]

    def _api_key(self) -> str | None:
        cfg = self.config
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise _MissingAPIKeyError(f"environment variable {cfg.api_key_env} is not set or empty")
            return key
        if cfg.api_base:
            return NO_KEY
        if self._openai_provider() and not _openai_key_set():
            # What the openai SDK says before sending; litellm's own HTTP handler would send the request without
            # a key and get a 401 (or, offline, a connection error that names the wrong cause).
            raise _MissingAPIKeyError("Missing credentials: OPENAI_API_KEY is not set")
        return None

    def _openai_provider(self) -> bool:
        """Whether litellm sends this model to OpenAI itself (``openai/...`` or a bare OpenAI model name)."""
        if self._provider is None:
            try:
                self._provider = str(_import_litellm().get_llm_provider(model=self.config.model)[1])
            except Exception:  # litellm cannot route it: the request itself reports that
                self._provider = ""
        return self._provider == "openai"

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        server_hint = _retry_after(exc)
        if server_hint is not None:
            delay = max(delay, min(server_hint, self.backoff_max))
        return delay

    def _call(self, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``litellm.acompletion`` arguments of one request (without the key, added per attempt)."""
        cfg = self.config
        mocking = self.mock_response is not None
        call: dict[str, Any] = {
            "model": _litellm_model(cfg.model, mocking),
            "messages": messages,
            "temperature": cfg.temperature,
            "timeout": cfg.timeout,
            "num_retries": 0,
            "drop_params": True,
        }
        if cfg.max_tokens is not None:
            call["max_tokens"] = cfg.max_tokens
        if cfg.api_base and not is_mock(cfg.model):
            call["api_base"] = cfg.api_base
        call.update(cfg.extra_params)
        call.update(params)
        if mocking:
            mock = self.mock_response
            call["mock_response"] = mock(messages) if callable(mock) else mock
        return call

    async def _send(
        self, call: dict[str, Any], *, retry_connection: bool = True, probe: bool = False
    ) -> tuple[Any, BaseException | None, int]:
        """Attempt ``call`` per the retry policy: ``(response, None, attempts)`` or ``(None, last_error, attempts)``.

        Programming errors (not API errors) propagate."""
        direct = self._direct if self._direct is not None and sendable(call) else None
        mocking = "mock_response" in call
        if direct is None:
            litellm = _import_litellm()
            if not mocking and self.config.api_base and not self._priced:
                _price_unknown_as_free(litellm, self.config.model)
                self._priced = True
        send = direct.create if direct is not None else lambda call: litellm.acompletion(**call)
        timeout = float(call["timeout"])
        attempt = 0
        while True:
            attempt += 1
            if probe:
                self.usage.probe_calls += 1
            try:
                if not mocking:
                    call["api_key"] = self._api_key()  # read at call time; lives only in this dict
                async with self._semaphore():
                    # litellm (aiohttp, direct) enforces ``timeout``; the outer bound guards a hung transport.
                    response = await _bounded(send(call), timeout * 1.5 + 5.0)
                return response, None, attempt
            except Exception as exc:
                if not (_is_api_error(exc) or isinstance(exc, _MissingAPIKeyError)):
                    raise
                if attempt <= self.max_retries and _is_retryable(exc, connection=retry_connection):
                    delay = self._backoff(attempt, exc)
                    if not probe:
                        self.usage.retries += 1
                    logger.debug(
                        "attempt %d/%d failed (%s); retrying in %.2fs",
                        attempt,
                        self.max_retries + 1,
                        _short_error(exc, self.config.api_key_env),
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                return None, exc, attempt
            finally:
                call.pop("api_key", None)

    def _account(self, response: Any) -> tuple[str, int, int, float]:
        """Text, tokens and cost of a response: litellm's ``ModelResponse``, or the direct route's body (a dict:
        no price, by that route's rule)."""
        if isinstance(response, dict):
            text = response["choices"][0]["message"].get("content")
            cost = 0.0
        else:
            text = response.choices[0].message.content
            cost = _cost(response)
        prompt_tokens, completion_tokens = _token_counts(response)
        if not isinstance(text, str):
            text = None
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += completion_tokens
        self.usage.cost_usd += cost
        return redact(text or "", self.config.api_key_env), prompt_tokens, completion_tokens, cost

    async def complete(self, messages: list[dict[str, str]], **params: Any) -> Completion:
        """One chat completion. ``params`` (e.g. ``temperature``, ``response_format``) override the config's.

        Returns a :class:`Completion`; API errors come back as ``Completion.error`` (one redacted line), never as
        exceptions, and are logged at DEBUG only: tallying and reporting them is the caller's business.
        """
        _check_params(params)
        cfg = self.config
        mocking = self.mock_response is not None
        key = self.cache_key(cfg, messages, {**params, "__mock__": True} if mocking else params)

        record = self._cache_read(key)
        if record is not None:
            self.usage.cache_hits += 1
            return Completion(
                text=record["text"],
                cached=True,
                prompt_tokens=int(record.get("prompt_tokens", 0)),
                completion_tokens=int(record.get("completion_tokens", 0)),
                cost_usd=0.0,
                attempts=0,
            )

        completion = await (
            self._pool_call("fetch", messages, params) if self.workers > 1 else self._fetch(messages, params)
        )
        if completion.ok and self.cache_dir is not None:
            # In a thread: creating a file can take a millisecond on a busy disk, which the event loop (every
            # other request) would otherwise wait for.
            await asyncio.to_thread(
                self._cache_write,
                key,
                {
                    "format": CACHE_FORMAT,
                    "model": cfg.model,
                    "text": completion.text,
                    "prompt_tokens": completion.prompt_tokens,
                    "completion_tokens": completion.completion_tokens,
                    "cost_usd": completion.cost_usd,
                    "created": time.time(),
                },
            )
        return completion

    async def _fetch(self, messages: list[dict[str, Any]], params: Mapping[str, Any]) -> Completion:
        """One request per the retry policy (no cache), in this process."""
        self.usage.calls += 1
        response, exc, attempt = await self._send(self._call(messages, params))
        if exc is not None:
            error = _short_error(exc, self.config.api_key_env)
            self.usage.failures += 1
            logger.debug("model call failed after %d attempt(s): %s", attempt, error)
            return Completion(text=None, error=error, attempts=attempt, status_code=_status_code(exc))
        text, prompt_tokens, completion_tokens, cost = self._account(response)
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost,
            attempts=attempt,
        )

    async def probe(self) -> None:
        """One minimal request before a run, so that a wrong set-up stops it at once instead of failing every call.

        No cache read or write; counted in ``usage.probe_calls`` (not ``calls``). A refused or unreachable
        connection and a missing/refused key or unknown model are not retried; timeouts, 429 and 5xx are, per the
        client's policy. Raises :class:`ModelSetupError` (one redacted line naming the cause and the option to
        fix); a mock client returns at once.
        """
        cfg = self.config
        if self.mock_response is not None:
            return
        check_model_config(cfg)
        if self.workers > 1:
            failed = await self._pool_call("probe")
            if failed is not None:
                raise ModelSetupError(*failed)
            return
        limit = min(cfg.max_tokens or 16, 16)
        call = self._call([{"role": "user", "content": "Reply with the word OK."}], {"max_tokens": limit})
        response, exc, attempts = await self._send(call, retry_connection=False, probe=True)
        if exc is None:
            self._account(response)
            return
        raise _setup_error(cfg, exc, attempts)


def _setup_error(cfg: ModelConfig, exc: BaseException, attempts: int) -> ModelSetupError:
    """The one line a user sees when the probe fails."""
    cause = error_cause(exc)
    detail = _short_error(exc, cfg.api_key_env)
    where = f" at {cfg.api_base}" if cfg.api_base else ""
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if cause == "connection":
        message = f"cannot connect to {cfg.model}{where} ({detail}); check --api-base (is the server running?)"
    elif cause == "auth" and any(m in detail.lower() for m in _MISSING_CREDENTIALS):
        message = f"no API key for {cfg.model}{where} ({detail}); name the variable holding it with --api-key-env"
    elif cause == "auth":
        if cfg.api_key_env:
            hint = f"check the key in ${cfg.api_key_env} (--api-key-env)"
        else:
            hint = "name the environment variable holding the key with --api-key-env"
        message = f"{cfg.model}{where} refused the credentials ({detail}); {hint}"
    elif cause == "model":
        message = f"unknown model {cfg.model!r}{where} ({detail}); check --model"
    elif cause == "timeout":
        message = (
            f"{cfg.model}{where} did not answer in {cfg.timeout:g}s{tries} ({detail}); "
            "check --api-base, or raise --timeout"
        )
    elif cause == "rate_limit":
        message = f"{cfg.model}{where} is rate limiting{tries} ({detail}); wait, or lower --max-connections"
    elif cause == "server":
        message = f"{cfg.model}{where} failed the probe request{tries} ({detail}); try again later, or check --api-base"
    else:
        message = f"{cfg.model}{where} rejected the probe request ({detail}); check --model and --api-base"
    return ModelSetupError(redact(message, cfg.api_key_env), cause)


def check_model_config(config: ModelConfig) -> None:
    """Set-up checks that need no request: raise :class:`ModelSetupError` (one line) when the model string is
    blank, ``api_base`` is not an http(s) URL, or the key variable named by ``api_key_env`` is unset or empty.
    A mock model passes (it needs nothing). Without ``api_key_env`` nothing is checked here: a local server needs
    no key, and a hosted provider's own variable is the probe's business."""
    if not config.model.strip():
        raise ModelSetupError("the model string is empty; pass --model", "model")
    try:
        route_setting()
    except ValueError as exc:
        raise ModelSetupError(str(exc), "setup") from None
    if is_mock(config.model):
        return
    if config.api_base is not None:
        parsed = urlparse(config.api_base)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ModelSetupError("--api-base must be an http(s) URL such as http://127.0.0.1:8000/v1", "connection")
    if config.api_key_env:
        check_env_name(config.api_key_env)
        if not os.environ.get(config.api_key_env):
            raise ModelSetupError(
                f"environment variable {config.api_key_env} (named by --api-key-env) is not set or empty; "
                f"export it, or pass --api-key-env with the variable that holds the key",
                "auth",
            )


def needs_litellm(config: ModelConfig) -> bool:
    """Whether a client for ``config`` imports litellm: all but the direct route (``openai_route.uses_direct_route``;
    a misspelt ``RESCUE_MODEL_ROUTE`` is litellm's route here, and the probe's ``check_model_config`` reports it in
    one line). What ``evaluate`` preloads."""
    try:
        return is_mock(config.model) or not uses_direct_route(config.model, config.api_base)
    except ValueError:
        return True


def _openai_key_set() -> bool:
    litellm = _import_litellm()
    return bool(os.environ.get("OPENAI_API_KEY") or litellm.api_key or litellm.openai_key)


class _MissingAPIKeyError(RuntimeError):
    """``api_key_env`` names a variable that is not set: a configuration error, reported, not retried."""


def _token_counts(response: Any) -> tuple[int, int]:
    usage = response.get("usage") if isinstance(response, dict) else getattr(response, "usage", None)
    if usage is None:
        return 0, 0

    def get(name: str) -> int:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        return int(value) if isinstance(value, (int, float)) else 0

    return get("prompt_tokens"), get("completion_tokens")


def _litellm_model(model: str, mocking: bool) -> str:
    """The model string litellm gets: ``model``, or for the mock the one litellm accepts (``agents.mock``)."""
    return LITELLM_MOCK_MODEL if mocking and is_mock(model) else model


def _price_unknown_as_free(litellm: Any, model: str) -> None:
    """Give a model that litellm has no price for (a self-hosted one behind ``api_base``) the price 0, which is
    what litellm reports for it anyway: otherwise litellm searches its whole price list for a near match, twice
    per request (about 12 % of its function calls per request, ``scripts/bench_throughput.py``)."""
    try:
        litellm.get_model_info(model=model)
        return  # known: its price stands (e.g. a hosted model behind a proxy)
    except Exception:
        pass
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    # every price, cache writes and reads included (litellm warns about a custom price without them)
    free = {
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
    }
    try:
        litellm.register_model({model: {**free, "litellm_provider": provider, "mode": "chat"}})
    except Exception:  # pragma: no cover - pricing is an optimisation, never a reason to fail a request
        logger.debug("could not register a zero price for %s", model)


def _cost(response: Any) -> float:
    """litellm's price of ``response``: the one it computed already, else ``completion_cost`` (0.0 if unknown)."""
    hidden = getattr(response, "_hidden_params", None)
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else getattr(hidden, "response_cost", None)
    if cost is None:
        try:
            cost = _import_litellm().completion_cost(completion_response=response)
        except Exception:  # unknown model (local servers), missing pricing ...
            return 0.0
    try:
        return float(cost) if cost else 0.0
    except (TypeError, ValueError):
        return 0.0


# ----------------------------------------------------------------------------------------------------------------
# worker processes (see the module docstring). They are ``multiprocessing`` processes of the forkserver start
# method, whose server imports litellm once: every worker is a fork of it (milliseconds) instead of an
# interpreter importing litellm for seconds, and the server's import runs while the caller prepares its run.
# Requests and answers travel as pickles over a socket pair per worker (4-byte length, then the pickle), read and
# written by each side's event loop (asyncio streams: no thread, no lock); the worker answers
# ("ok" | "raise", result, usage delta).

_FRAME = struct.Struct("!I")
_context: Any = None


def _frame(payload: Any) -> bytes:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(data)) + data


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = _FRAME.unpack(await reader.readexactly(_FRAME.size))
    return pickle.loads(await reader.readexactly(size))


def _worker_context(litellm: bool) -> Any:
    """``multiprocessing``'s forkserver context, its server preloading litellm (``litellm``; else aiohttp
    for the direct route), ``spawn`` where there is no forkserver. The server is one per process: the first
    client's needs decide its preload."""
    global _context
    if _context is None:
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            # The server is started (once per process) with the environment of its first use: litellm's settings
            # must be in it before its import. "__main__" keeps a script's own module from being re-run per worker.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            os.environ.setdefault(OPENAI_ROUTE_ENV, "true")
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["__main__", "agents.client", "litellm" if litellm else "aiohttp"])
        else:  # pragma: no cover - not on Linux
            context = multiprocessing.get_context("spawn")
        _context = context
    return _context


class _Worker:
    """One worker process: ``poll()`` is its exit code, None while it runs (or before it has started)."""

    def __init__(self, process: Any) -> None:
        self.process = process

    def poll(self) -> int | None:
        return self.process.exitcode


def _start_processes(workers: list[_Worker], children: list[socket.socket], failed: list[BaseException]) -> None:
    try:
        for worker, child in zip(workers, children):
            worker.process.start()  # waits for the forkserver's litellm import the first time
            child.close()
    except BaseException as exc:  # reported by the first request
        failed.append(exc)
    finally:
        for child in children:
            child.close()


def _stop_processes(workers: list[_Worker], sockets: list[socket.socket], starter: threading.Thread) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()  # a worker whose parent died exits when its socket closes
    starter.join(timeout=60)
    for worker in workers:
        if worker.process.exitcode is None and worker.process.pid is not None:
            worker.process.terminate()  # no request is left to it: no need to wait for its interpreter to wind down
    for worker in workers:
        if worker.process.pid is None:
            continue
        worker.process.join(timeout=5)
        if worker.process.exitcode is None:
            worker.process.kill()
            worker.process.join(timeout=5)


class _WorkerPool:
    """The worker processes of one client; serves the event loop that first calls it. The processes are started
    on a thread (the forkserver's first start waits for its import), so that the caller goes on meanwhile."""

    def __init__(self, spec: dict[str, Any], count: int, max_connections: int) -> None:
        context = _worker_context(spec["litellm"])
        environment = dict(os.environ)  # a fork of the server has the server's environment: it gets the caller's
        self.processes: list[_Worker] = []
        self.sockets: list[socket.socket] = []
        children: list[socket.socket] = []
        for index in range(count):
            share = max_connections // count + (1 if index < max_connections % count else 0)
            seed = None if spec["seed"] is None else spec["seed"] + index  # a jitter stream of its own
            parent, child = socket.socketpair()
            own = {**spec, "max_connections": share, "seed": seed, "environment": environment}
            process = context.Process(target=_worker_main, args=(child, own), name=f"model-worker-{index}", daemon=True)
            self.processes.append(_Worker(process))
            self.sockets.append(parent)
            children.append(child)
        self._failed: list[BaseException] = []
        self._starter = threading.Thread(
            target=_start_processes, args=(self.processes, children, self._failed), name="start-model-workers"
        )
        self._starter.daemon = True
        self._starter.start()
        self.load = [0] * count
        self._loop: asyncio.AbstractEventLoop | None = None
        self._attached: asyncio.Task | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._readers: list[asyncio.Task] = []
        self._pending: dict[int, tuple[int, asyncio.Future]] = {}
        self._next = 0
        self._finalizer = weakref.finalize(self, _stop_processes, self.processes, self.sockets, self._starter)

    def stale(self) -> bool:
        return self._loop is not None and self._loop.is_closed()

    async def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._attached = loop.create_task(self._connect())  # concurrent first callers all wait for it
        elif self._loop is not loop:
            raise RuntimeError("an LLMClient with workers serves one event loop at a time")
        await asyncio.shield(self._attached)

    async def _connect(self) -> None:
        assert self._loop is not None
        if self._starter.is_alive():
            await asyncio.to_thread(self._starter.join)
        if self._failed:
            failure = self._failed[0]
            raise RuntimeError(f"could not start the model workers ({type(failure).__name__}: {failure})")
        for index, sock in enumerate(self.sockets):
            reader, writer = await asyncio.open_connection(sock=sock)
            self._writers.append(writer)
            self._readers.append(self._loop.create_task(self._read(index, reader)))

    async def _read(self, index: int, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                ident, answer = await _read_frame(reader)
                entry = self._pending.pop(ident, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            gone = RuntimeError(f"model worker {index} exited (exit code {self.processes[index].poll()})")
            for worker, future in list(self._pending.values()):
                if worker == index and not future.done():
                    future.set_exception(gone)

    async def call(self, op: str, *args: Any) -> tuple[str, Any, dict[str, Any]]:
        await self._attach()
        assert self._loop is not None
        index = min(range(len(self.load)), key=self.load.__getitem__)  # the least busy worker
        ident = self._next
        self._next += 1
        future: asyncio.Future = self._loop.create_future()
        self._pending[ident] = (index, future)
        self.load[index] += 1
        writer = self._writers[index]
        try:
            writer.write(_frame((ident, op, args)))
            await writer.drain()
            return await future
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the worker drops it too: nothing keeps calling the model
                writer.write(_frame((ident, "cancel", ())))
            raise
        finally:
            self.load[index] -= 1
            self._pending.pop(ident, None)

    def close(self) -> None:
        for task in self._readers:
            task.cancel()
        for writer in self._writers:
            with contextlib.suppress(Exception):
                writer.close()
        self._finalizer()


def _worker_main(sock: socket.socket, spec: dict[str, Any]) -> None:
    """A worker process (``_WorkerPool``): the caller's environment, litellm (imported by the forkserver
    already), then serve requests until the socket closes."""
    os.environ.clear()
    os.environ.update(spec.pop("environment"))
    if spec["litellm"]:
        _import_litellm()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_worker_loop(sock, spec))


async def _worker_loop(sock: socket.socket, spec: dict[str, Any]) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    client = LLMClient(
        ModelConfig.model_validate(spec["config"]),
        max_connections=spec["max_connections"],
        max_retries=spec["max_retries"],
        backoff_base=spec["backoff_base"],
        backoff_max=spec["backoff_max"],
        mock_response=spec["mock_response"],
        seed=spec["seed"],
    )
    sent = client.usage.model_dump()
    running: dict[int, asyncio.Task] = {}

    async def serve(ident: int, op: str, args: tuple) -> None:
        nonlocal sent
        try:
            if op == "fetch":
                answer: tuple[str, Any] = ("ok", await client._fetch(*args))
            else:  # probe
                try:
                    await client.probe()
                    answer = ("ok", None)
                except ModelSetupError as exc:
                    answer = ("ok", (str(exc), exc.cause))
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a programming error: raised in the parent
            answer = ("raise", exc if _picklable(exc) else RuntimeError(f"{type(exc).__name__}: {exc}"))
        finally:
            running.pop(ident, None)
        now = client.usage.model_dump()
        delta = {k: now[k] - sent[k] for k in now if now[k] != sent[k]}
        sent = now
        writer.write(_frame((ident, (answer[0], answer[1], delta))))

    try:
        while True:
            ident, op, args = await _read_frame(reader)
            if op == "cancel":
                task = running.get(ident)
                if task is not None:
                    task.cancel()
                continue
            running[ident] = asyncio.create_task(serve(ident, op, args))
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass  # the parent closed the socket (or died): stop
    finally:
        for task in list(running.values()):
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False
