"""The typed action, observation and state that the OpenEnv bridge sends over the wire (shared by the server,
``bridges.openenv_server``, and the client, ``bridges.openenv_client``).

The four Dict-action environments (``Rescue-v0``, ``Rescue-v1``, ``RescueSim-v0``, ``RescueSim-v1``) share one
action (``intervene``, ``target`` bits, ``strategy``) and observations whose keys are a subset of one list: the
observation model has a field per key, ``None`` where the env id has no such key (``position`` is v0's replay
only, ``text``/``distress``/``stance`` the closed loop's). Numpy arrays travel as (nested) lists; ``to_gym``
turns them back into the arrays Gymnasium returns (``int8`` for ``MultiBinary``, ``float32`` for ``Box``), so a
remote episode compares equal to a local one, array for array.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

# Each observation key of the four env ids and the dtype of its array (None: a str or a Discrete's int).
OBSERVATION_DTYPES: dict[str, str | None] = {
    "context": None,
    "text": None,
    "scenario": None,
    "last_speaker": None,
    "participants": "int8",
    "target_mask": "int8",
    "strategy_mask": "int8",
    "position": "float32",
    "elapsed": "float32",
    "distress": "float32",
    "stance": "float32",
}


class RescueAction(Action):
    """One support decision: ``intervene`` (0 keep listening, 1 intervene), ``target`` (one bit per participant
    slot, then the whole group) and ``strategy`` (an index into the strategy list). Invalid parts are the env's to
    judge (counted in ``info["n_invalid"]``), exactly as with a local env."""

    intervene: int = Field(description="0 = keep listening, 1 = intervene")
    target: list[int] = Field(description="one bit per participant slot, then the group bit (MultiBinary)")
    strategy: int = Field(description="index of the strategy (Discrete)")

    @classmethod
    def from_gym(cls, action: Any) -> RescueAction:
        """From the Dict action a local env takes (numpy scalars and arrays welcome)."""
        if isinstance(action, RescueAction):
            return action
        return cls(
            intervene=int(action["intervene"]),
            target=[int(bit) for bit in np.asarray(action["target"]).reshape(-1)],
            strategy=int(action["strategy"]),
        )

    def to_gym(self, space: Any = None) -> dict[str, Any]:
        """The Dict action a local env takes (``target`` as an array of the space's dtype, int8 by default)."""
        dtype = space["target"].dtype if space is not None else np.int8
        return {
            "intervene": int(self.intervene),
            "target": np.asarray(self.target, dtype=dtype),
            "strategy": int(self.strategy),
        }


class RescueObservation(Observation):
    """The Dict observation of the env id served, a field per key (``None``: the env id has no such key), with
    Gymnasium's ``terminated``, ``truncated`` and ``info`` (``done`` = terminated or truncated; ``reward`` is
    None after a reset). ``info`` is made JSON-safe: arrays as lists, tuples as lists, NaN and infinities as None."""

    context: str | None = Field(default=None, description="the dialogue so far (Text)")
    text: str | None = Field(default=None, description="the closed loop's last generated turns (Text)")
    scenario: int | None = Field(default=None, description="scenario index (Discrete)")
    last_speaker: int | None = Field(default=None, description="slot of the last speaker (Discrete)")
    participants: list[int] | None = Field(default=None, description="occupied participant slots (MultiBinary)")
    target_mask: list[int] | None = Field(default=None, description="valid target bits (MultiBinary)")
    strategy_mask: list[int] | None = Field(default=None, description="valid strategies (MultiBinary)")
    position: list[float] | None = Field(default=None, description="Rescue-v0: progress through the episode (Box)")
    elapsed: list[float] | None = Field(default=None, description="elapsed time features (Box)")
    distress: list[float] | None = Field(default=None, description="closed loop: distress per slot (Box)")
    stance: list[list[float]] | None = Field(default=None, description="closed loop: stance matrix (Box)")
    terminated: bool = Field(default=False, description="Gymnasium's terminated")
    truncated: bool = Field(default=False, description="Gymnasium's truncated")
    info: dict[str, Any] = Field(default_factory=dict, description="Gymnasium's info, JSON-safe")

    @classmethod
    def from_gym(
        cls,
        observation: dict[str, Any],
        reward: float | None = None,
        terminated: bool = False,
        truncated: bool = False,
        info: dict[str, Any] | None = None,
    ) -> RescueObservation:
        unknown = sorted(set(observation) - set(OBSERVATION_DTYPES))
        if unknown:
            raise ValueError(f"observation key(s) {', '.join(unknown)} have no field in the OpenEnv bridge")
        fields = {key: jsonable(value) for key, value in observation.items()}
        return cls(
            **fields,
            reward=None if reward is None else float(reward),
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=jsonable(info or {}),
        )

    def to_gym(self) -> dict[str, Any]:
        """The Dict observation as the local env returns it (only the keys the env id has)."""
        out: dict[str, Any] = {}
        for key, dtype in OBSERVATION_DTYPES.items():
            value = getattr(self, key)
            if value is None:
                continue
            out[key] = value if dtype is None else np.asarray(value, dtype=dtype)
        return out


class RescueState(State):
    """The session's episode: which env id and conversation, how far (``step_count``), and how it stands."""

    env_id: str = Field(default="", description="the Gymnasium id served")
    sample_id: str | None = Field(default=None, description="the conversation of the current episode")
    terminated: bool = Field(default=False)
    truncated: bool = Field(default=False)
    episode_return: float = Field(default=0.0, description="sum of the rewards so far")


def jsonable(value: Any) -> Any:
    """``value`` with numpy arrays and scalars, tuples and sets turned into JSON types (NaN and infinities: None,
    which is what JSON would make of them anyway)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return [jsonable(v) for v in sorted(value, key=repr)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


__all__ = ["OBSERVATION_DTYPES", "RescueAction", "RescueObservation", "RescueState", "jsonable"]
