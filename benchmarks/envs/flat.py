"""``RescueITPFlat-v0``, ``RescueRPPFlat-v0``, ``RescueSTPFlat-v0``, ``RescueSSPFlat-v0``: the task envs with a flat
``Box`` observation for SB3's ``MlpPolicy`` (the actions, ``Discrete`` and ``MultiDiscrete``, SB3 takes as they
are; ER and VP answer in text, so they have no flat variant).

Features, all of the observation alone and all in [0, 1]: hashed unigram and bigram counts of the prompt, log
scaled and capped (``log1p(n) / log1p(255)``, at most 1), the scenario one-hot, the target row's relative
position and, for the rankings, the candidate mask. ``action_masks()`` gives MaskablePPO the valid choices of
each ranking slot.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from benchmarks.envs.task_env import RANKED, RescueTaskEnv
from rescue_env.data.schema import SCENARIOS
from rescue_env.envs.wrappers import term_counts

__all__ = ["TaskFlatObservation", "make_task_flat_env"]

_LOG_CAP = float(np.log1p(255.0))  # a term seen 255 times or more in one prompt counts as 1


class TaskFlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The observation of a :class:`RescueTaskEnv` as one ``float32`` vector (see the module docstring)."""

    def __init__(self, env: gym.Env, hash_dim: int = 512) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, hash_dim=hash_dim)
        super().__init__(env)
        if hash_dim < 1:
            raise ValueError(f"hash_dim must be >= 1, got {hash_dim}")
        inner = env.unwrapped
        if not isinstance(inner, RescueTaskEnv):
            raise TypeError(f"TaskFlatObservation wraps a RescueTaskEnv, got {type(inner).__name__}")
        if inner.task.name not in (*RANKED, "itp"):
            raise ValueError(f"{inner.task.name.upper()} answers in text: it has no flat variant")
        self.hash_dim = hash_dim
        self.ranked = inner.task.name in RANKED
        size = hash_dim + len(SCENARIOS) + 1 + (inner.slots if self.ranked else 0)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        scenario = np.zeros(len(SCENARIOS), dtype=np.float32)
        scenario[int(observation["scenario"])] = 1.0
        parts = [
            np.minimum(np.log1p(term_counts(observation["prompt"], self.hash_dim)) / _LOG_CAP, 1.0),
            scenario,
            np.asarray(observation["position"], dtype=np.float32),
        ]
        if self.ranked:
            parts.append(np.asarray(observation["candidates"], dtype=np.float32))
        return np.concatenate(parts).astype(np.float32)

    def action_masks(self) -> np.ndarray:
        """MaskablePPO's mask: per ranking slot, the valid choices and "none" (ITP: both answers)."""
        inner: RescueTaskEnv = self.env.unwrapped  # type: ignore[assignment]
        if not self.ranked:
            return np.ones(2, dtype=bool)
        assert inner.instance is not None, "reset() first"
        valid = np.append(inner.candidate_mask(inner.instance).astype(bool), True)
        return np.tile(valid, len(inner.action_space.nvec))


def make_task_flat_env(task: str = "itp", hash_dim: int = 512, **kwargs: Any) -> gym.Env:
    """A :class:`RescueTaskEnv` of ``task`` (keyword arguments as it takes them) with the flat observation."""
    return TaskFlatObservation(RescueTaskEnv(task, **kwargs), hash_dim=hash_dim)
