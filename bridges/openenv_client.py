"""The client of ``rescue-bench serve`` (``bridges.openenv_server``).

``RescueEnvClient`` is OpenEnv's ``EnvClient`` for the bridge's typed models (async; ``.sync()`` for plain
calls): ``reset(seed=..., options=...)`` and ``step(RescueAction(...))`` give a ``StepResult`` whose
``observation`` is a ``RescueObservation``. ``RemoteRescueEnv`` puts Gymnasium's calling convention on top of it:
``reset`` returns ``(observation, info)`` and ``step`` the five-tuple, with the observation as the numpy
``Dict`` a local ``gym.make(env_id)`` returns, so code written for the local env plays the remote one::

    with RemoteRescueEnv("http://127.0.0.1:8000") as env:
        observation, info = env.reset(seed=0)
        observation, reward, terminated, truncated, info = env.step(
            {"intervene": 1, "target": [1, 0, 0, 0, 0, 0, 0], "strategy": 0}
        )
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from bridges.openenv_models import RescueAction, RescueObservation, RescueState


class RescueEnvClient(EnvClient[RescueAction, RescueObservation, RescueState]):
    """OpenEnv client of one session (its own env on the server) over the WebSocket ``/ws``."""

    def _step_payload(self, action: RescueAction) -> dict[str, Any]:
        return RescueAction.from_gym(action).model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RescueObservation]:
        observation = RescueObservation.model_validate(
            {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> RescueState:
        return RescueState.model_validate(payload)

    async def disconnect(self) -> None:
        """Ask the server to end the session and let it close the WebSocket first (closing from this side at
        once races the server's own close)."""
        ws = self._ws
        if ws is None:
            return
        # Best effort: the session ends with the connection either way.
        with contextlib.suppress(Exception):
            await self._send({"type": "close"})
            await asyncio.wait_for(ws.wait_closed(), timeout=5.0)
        with contextlib.suppress(Exception):
            await ws.close()
        self._ws = None


class RemoteRescueEnv:
    """Gymnasium's ``reset``/``step`` against a served env id: one session (its own env on the server), opened on
    first use or by the ``with`` block and closed by ``close``. Observations come back as the numpy ``Dict`` of
    the local env (its keys and dtypes), ``info`` as JSON-safe dicts; ``last`` is the ``RescueObservation``
    of the latest call."""

    def __init__(self, base_url: str, *, message_timeout_s: float = 60.0) -> None:
        self.client = RescueEnvClient(base_url=base_url, message_timeout_s=message_timeout_s).sync()
        self.last: RescueObservation | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        kwargs: dict[str, Any] = {}
        if seed is not None:
            kwargs["seed"] = int(seed)
        if options is not None:
            kwargs["options"] = dict(options)
        self.last = self.client.reset(**kwargs).observation
        return self.last.to_gym(), dict(self.last.info)

    def step(self, action: Any):
        self.last = self.client.step(RescueAction.from_gym(action)).observation
        last = self.last
        return last.to_gym(), float(last.reward), last.terminated, last.truncated, dict(last.info)

    def state(self) -> RescueState:
        return self.client.state()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteRescueEnv:
        self.client.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RemoteRescueEnv", "RescueAction", "RescueEnvClient", "RescueObservation", "RescueState"]
