"""The policy protocol of ``Rescue-v0`` and the helpers that build its ``Dict`` actions.

A policy sees the observation and, for privileged reference policies only, the unwrapped ``RescueEnv`` (through
``env.gold()`` and ``env.state()``). Observation-only policies (random, majority, heuristic) never touch the
env: the observation's masks give the shape of the action.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv


@runtime_checkable
class Policy(Protocol):
    """``reset`` starts an episode (a seed re-seeds a stochastic policy); ``act`` returns RescueEnv's action."""

    name: str

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, observation: dict, env: RescueEnv) -> dict: ...


def unwrapped(env: Any) -> RescueEnv:
    """The ``RescueEnv`` under any gymnasium wrappers."""
    return getattr(env, "unwrapped", env)


def first_valid_strategy(observation: dict) -> int:
    """The first strategy of ``ALL_STRATEGY_KEYS`` that the scenario allows (``track`` in both taxonomies)."""
    return int(np.flatnonzero(np.asarray(observation["strategy_mask"]))[0])


def valid_strategy(observation: dict, strategy: int | None) -> int:
    """``strategy`` when the scenario allows it, else the first valid one."""
    mask = np.asarray(observation["strategy_mask"])
    if strategy is not None and 0 <= strategy < mask.size and mask[strategy]:
        return int(strategy)
    return first_valid_strategy(observation)


def n_participants(observation: dict) -> int:
    return int(np.asarray(observation["participants"]).sum())


def make_action(observation: dict, intervene: bool, slots: Iterable[int] | None = None, strategy: int | None = None):
    """A valid action: ``slots`` are participant slots (``None`` or every participant = the group bit only);
    slots outside the present participants are dropped (an empty choice becomes everyone); ``strategy`` falls
    back to the first valid one."""
    mask = np.asarray(observation["target_mask"]).astype(bool)
    n = n_participants(observation)
    target = np.zeros(mask.size, dtype=np.int8)
    chosen = sorted({int(s) for s in slots if 0 <= int(s) < n}) if slots is not None else []
    if not chosen or len(chosen) == n:
        target[-1] = 1  # the group bit: every participant
    else:
        target[chosen] = 1
    return {
        "intervene": int(bool(intervene)),
        "target": target,
        "strategy": valid_strategy(observation, strategy),
    }
