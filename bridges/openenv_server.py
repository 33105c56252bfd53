"""The replays and the closed loops served with OpenEnv (openenv-core 0.3): ``rescue-bench serve``.

``RescueOpenEnv`` is an OpenEnv ``Environment`` that wraps ``gym.make(env_id, **kwargs)``: ``reset`` (seed,
episode id, Gymnasium's ``options``) and ``step`` return a ``RescueObservation`` (the Dict observation with
arrays as lists, the reward, ``terminated``/``truncated``/``done`` and a JSON-safe ``info``), ``state`` a
``RescueState``. ``create_rescue_app`` builds the FastAPI app of ``openenv.core.create_app``: a WebSocket
session per client (``/ws``, what ``bridges.openenv_client.RescueEnvClient`` speaks) with an env of its own,
plus ``/health``, ``/schema``, ``/metadata`` and the stateless HTTP ``/reset`` and ``/step`` (OpenEnv builds a
new env for each HTTP call, so an episode is only played over the WebSocket).

Served as a module (``app`` here, as ``openenv.yaml`` says) it reads the env id from ``RESCUE_OPENENV_ENV``
(default ``RescueSim-v0``) and the env's keyword arguments from ``RESCUE_OPENENV_KWARGS`` (a JSON object)::

    RESCUE_OPENENV_ENV=Rescue-v0 uvicorn bridges.openenv_server:app --port 8000
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from openenv.core.env_server.interfaces import Environment

from bridges.openenv_models import RescueAction, RescueObservation, RescueState

ENV_IDS = ("Rescue-v0", "Rescue-v1", "RescueSim-v0", "RescueSim-v1")
"""The env ids served: those with the Dict observation and the Dict action (the flat SB3 variants have Box
observations and MultiDiscrete or Discrete actions, which the typed models do not describe)."""

DEFAULT_ENV_ID = "RescueSim-v0"


class BridgeError(RuntimeError):
    """A one-line error of a request (an env error, a step without an episode); HTTP answers it with 409."""


def check_env_id(env_id: str) -> str:
    if env_id not in ENV_IDS:
        raise BridgeError(f"unknown env id {env_id!r} for the OpenEnv bridge; choose from {', '.join(ENV_IDS)}")
    return env_id


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, BridgeError | ValueError) else f"{type(exc).__name__}: {text}"


_MAKE_LOCK = threading.Lock()  # warnings.catch_warnings is process-wide; sessions start in threads


def _make_gym_env(env_id: str, kwargs: dict[str, Any]):
    import gymnasium as gym

    import rescue_env  # noqa: F401  (registers the env ids)

    check_env_id(env_id)
    with _MAKE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # gymnasium's "RescueSim-v0 is out of date": chosen
        return gym.make(env_id, **kwargs)


class RescueOpenEnv(Environment[RescueAction, RescueObservation, RescueState]):
    """One session's env: ``gym.make(env_id, **kwargs)`` behind OpenEnv's ``reset``/``step``/``state``."""

    # Each WebSocket session gets an env of its own; the envs of a process share only read-only caches
    # (precomputed episodes, loaded datasets), so sessions may run side by side.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str = DEFAULT_ENV_ID, env_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = check_env_id(env_id)
        self.env_kwargs = dict(env_kwargs or {})
        self.env = _make_gym_env(self.env_id, self.env_kwargs)
        self._state = RescueState(env_id=self.env_id)
        self._started = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RescueObservation:
        if kwargs:
            raise BridgeError(
                f"unknown reset argument(s) {', '.join(sorted(kwargs))}; known: seed, episode_id, options"
            )
        try:
            observation, info = self.env.reset(seed=seed, options=options)
        except Exception as exc:
            raise BridgeError(f"reset failed: {_one_line(exc)}") from None
        self._started = True
        self._state = RescueState(
            env_id=self.env_id,
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            sample_id=info.get("sample_id"),
        )
        return RescueObservation.from_gym(observation, None, False, False, info)

    def step(self, action: RescueAction, timeout_s: float | None = None, **kwargs: Any) -> RescueObservation:
        if not self._started:
            raise BridgeError(
                "no episode in this session: reset first (OpenEnv's HTTP /step makes a new env per call; play "
                "episodes over the WebSocket, bridges.openenv_client.RescueEnvClient)"
            )
        if self._state.terminated or self._state.truncated:
            raise BridgeError("the episode has ended: reset to start another")
        try:
            gym_action = RescueAction.from_gym(action).to_gym(self.env.action_space)
            observation, reward, terminated, truncated, info = self.env.step(gym_action)
        except Exception as exc:
            raise BridgeError(f"step failed: {_one_line(exc)}") from None
        state = self._state
        state.step_count += 1
        state.episode_return += float(reward)
        state.terminated, state.truncated = bool(terminated), bool(truncated)
        return RescueObservation.from_gym(observation, reward, terminated, truncated, info)

    @property
    def state(self) -> RescueState:
        return self._state

    def get_metadata(self):
        from openenv.core.env_server.types import EnvironmentMetadata

        from rescue_env import __version__

        return EnvironmentMetadata(
            name=f"rescue_env:{self.env_id}",
            description=(
                f"RESCUE-Bench {self.env_id} (Gymnasium) served with OpenEnv: relation-aware, multi-party "
                "emotional support; a Dict action (intervene, target bits, strategy) at each decision point."
            ),
            version=__version__,
        )

    def close(self) -> None:
        self.env.close()


def create_rescue_app(env_id: str = DEFAULT_ENV_ID, env_kwargs: dict[str, Any] | None = None, max_sessions: int = 4):
    """The FastAPI app serving ``env_id`` (one env per WebSocket session, at most ``max_sessions`` at once).
    Raises ``BridgeError`` for an env id that is not served; the kwargs are checked by the first session."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_app

    check_env_id(env_id)
    factory = functools.partial(RescueOpenEnv, env_id, dict(env_kwargs or {}))
    app = create_app(factory, RescueAction, RescueObservation, env_name="rescue_env", max_concurrent_envs=max_sessions)

    @app.exception_handler(BridgeError)
    async def _bridge_error(request: Request, exc: BridgeError) -> JSONResponse:  # noqa: ARG001
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    app.add_middleware(_QuietDisconnect)
    return app


class _QuietDisconnect:
    """openenv-core 0.3.0 closes a session's WebSocket after the client has gone and catches only
    ``RuntimeError``; Starlette 1.x raises ``WebSocketDisconnect`` there, which uvicorn would log as a traceback
    for a normal end of session. The session is already cleaned up by then, so the disconnect is dropped."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        with contextlib.suppress(WebSocketDisconnect):
            await self.app(scope, receive, send)


def check_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Make the env once and close it: a bad id, keyword or data path fails here, in one line
    (``BridgeError``; a data error stays the loader's ``DataError``), not in the first client's session."""
    from rescue_env.data.loading import DataError

    check_env_id(env_id)
    try:
        env = _make_gym_env(env_id, dict(env_kwargs or {}))
    except DataError:
        raise
    except Exception as exc:
        raise BridgeError(f"cannot make {env_id} with {env_kwargs or {}}: {_one_line(exc)}") from None
    env.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); ``BridgeError`` in one line when it is busy or
    the address is not this machine's."""
    if not 0 <= port <= 65535:
        raise BridgeError(f"cannot listen on {host}:{port}: a port is 0 to 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BridgeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT, not one in use
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise BridgeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class Server:
    """``uvicorn`` serving ``create_rescue_app`` on a socket bound first (so a busy port is a one-line error,
    and port 0 tells the port it got). ``run()`` blocks (Ctrl-C stops it); ``start()`` serves from a thread
    until ``stop()`` (tests, notebooks)."""

    def __init__(
        self,
        env_id: str = DEFAULT_ENV_ID,
        env_kwargs: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_sessions: int = 4,
        log_level: str = "warning",
    ) -> None:
        import uvicorn

        check_env(env_id, env_kwargs)
        self.env_id, self.host = env_id, host
        app = create_rescue_app(env_id, env_kwargs, max_sessions=max_sessions)
        self.socket = bind(host, port)
        self.port = self.socket.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on"))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def ws_url(self) -> str:
        """Where a session's WebSocket connects (what ``RescueEnvClient(base_url=url)`` derives from ``url``)."""
        return "ws" + self.url[len("http") :] + "/ws"

    def run(self) -> None:
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self.socket.close()

    def start(self, timeout_s: float = 30.0) -> Server:
        self._thread = threading.Thread(target=self.run, name=f"openenv-{self.env_id}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                self.stop()
                raise BridgeError(f"the server on {self.url} did not start in {timeout_s:g} s")
            time.sleep(0.02)
        if not self._server.started:
            raise BridgeError(f"the server on {self.url} stopped while starting")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _app_from_environment():
    env_id = os.environ.get("RESCUE_OPENENV_ENV", DEFAULT_ENV_ID)
    raw = os.environ.get("RESCUE_OPENENV_KWARGS", "") or "{}"
    try:
        kwargs = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BridgeError(f"RESCUE_OPENENV_KWARGS is not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise BridgeError("RESCUE_OPENENV_KWARGS must be a JSON object")
    sessions = int(os.environ.get("RESCUE_OPENENV_MAX_SESSIONS", "4"))
    return create_rescue_app(env_id, kwargs, max_sessions=sessions)


_APP: Callable[[], Any] | Any = None


def __getattr__(name: str) -> Any:
    # ``bridges.openenv_server:app`` (openenv.yaml, uvicorn): built when first asked for, so importing the
    # module for RescueOpenEnv or Server builds nothing.
    global _APP
    if name == "app":
        if _APP is None:
            _APP = _app_from_environment()
        return _APP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_ENV_ID",
    "ENV_IDS",
    "BridgeError",
    "RescueAction",
    "RescueObservation",
    "RescueOpenEnv",
    "RescueState",
    "Server",
    "bind",
    "check_env",
    "check_env_id",
    "create_rescue_app",
]
