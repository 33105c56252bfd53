"""``BehaviourPolicy``: the cloned therapist of ``RescueSim-v1``, sampling the env's behaviour model
:math:`\\pi_b` (``rescue_env.dynamics.behaviour``, fitted on the training side) from what it observes.

The env scores actions with :math:`\\log \\pi_b(a \\mid s)` on the true state; this policy reads the same features
from the observation instead -- the perceived distress and stances (the true values plus the perception noise),
the last speaker, the scenario, who is present -- and from its own past decisions in the episode (the history
features), so it never reads the state, the recorded actions or ``info``. It samples, with its own seeded
generator: whether to intervene, the recipient kind (the last speaker, everyone, one other participant, a subset),
the recipients within the kind uniformly, and the strategy among the scenario's. Deterministic given the seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from policies.base import make_action, n_participants, unwrapped
from rescue_env.dynamics.behaviour import BehaviourModel, features
from rescue_env.dynamics.outcome import SupportAction
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

if TYPE_CHECKING:
    from rescue_env.envs.sim_v1 import RescueSimEnvV1


class BehaviourPolicy:
    """Samples :math:`\\pi_b` (module docstring); ``from_env`` takes the model of a ``RescueSim-v1`` env."""

    name = "behaviour"

    def __init__(self, model: BehaviourModel, seed: int | None = 0) -> None:
        self.model = model
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._past: list[SupportAction] = []

    @classmethod
    def from_env(cls, env: RescueSimEnvV1, seed: int | None = 0) -> BehaviourPolicy:
        model = getattr(unwrapped(env), "behaviour", None)
        if not isinstance(model, BehaviourModel):
            raise ValueError("policy 'behaviour' plays RescueSim-v1 (an env with a fitted behaviour model) only")
        return cls(model, seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.seed, self.rng = seed, np.random.default_rng(seed)
        self._past = []

    def act(self, observation: dict, env: Any = None) -> dict:
        n = n_participants(observation)
        slots = np.asarray(observation["distress"]).size
        distress = np.asarray(observation["distress"], dtype=np.float64)[:n]
        stance = np.asarray(observation["stance"], dtype=np.float64).reshape(slots, slots)[:n, :n]
        last = int(observation["last_speaker"])
        last_speaker = last if last < n else None
        family = int(observation["scenario"]) == 1
        valid = [ALL_STRATEGY_KEYS[i] for i in np.flatnonzero(np.asarray(observation["strategy_mask"]))]
        x = features(distress, stance, last_speaker, family, self._past)
        p_speak, kinds, strategies = self.model.distribution(x, n, last_speaker, valid)
        if self.rng.random() >= p_speak:
            self._past.append(SupportAction(False))
            return make_action(observation, False)
        kind = self._draw(kinds)
        recipients = self._recipients(kind, n, last_speaker)
        strategy = self._draw(strategies)
        self._past.append(SupportAction(True, frozenset(recipients), strategy))
        return make_action(observation, True, recipients, ALL_STRATEGY_KEYS.index(strategy))

    def _draw(self, distribution: dict[str, float]) -> str:
        keys = list(distribution)
        weights = np.array([distribution[k] for k in keys])
        return keys[int(self.rng.choice(len(keys), p=weights / weights.sum()))]

    def _recipients(self, kind: str, n: int, last_speaker: int | None) -> list[int]:
        """A recipient set of ``kind``, uniformly among the kind's sets (as :math:`\\pi_b` spreads a kind)."""
        if kind == "everyone" or n == 1:
            return list(range(n))
        if kind == "last" and last_speaker is not None:
            return [last_speaker]
        others = [i for i in range(n) if i != last_speaker]
        if kind == "other" or n == 2:
            return [int(self.rng.choice(others))]
        subsets = [[i for i in range(n) if mask >> i & 1] for mask in range(1, 2**n)]
        subsets = [s for s in subsets if 2 <= len(s) < n]
        return subsets[int(self.rng.integers(len(subsets)))]
