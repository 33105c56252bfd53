"""A policy trained on the training split that reads only the observation: one-step fitted Q.

In a replay (``Rescue-v0``/``Rescue-v1``) the state never depends on the actions, so an episode's return is the
sum of per-step rewards and the optimal policy maximises each step's expected reward given the observation. The
learner therefore regresses, on the training conversations, the reward of each candidate action (logged through
``env.action_value``, the reward the env would pay: what an RL learner would observe by trying it) on the
``FlatObservation`` features, and acts greedily at evaluation time on the features alone.

Candidates: keep listening; intervene on the last speaker (everyone when the last row was not a participant's)
with each strategy; intervene on everyone with each strategy. One ridge regression per candidate (scikit-learn).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policies.base import make_action, n_participants, unwrapped
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

Candidate = tuple[bool, str, int]  # (intervene, "last" | "everyone", strategy index)
CANDIDATES: tuple[Candidate, ...] = (
    (False, "everyone", 0),
    *((True, "last", s) for s in range(len(ALL_STRATEGY_KEYS))),
    *((True, "everyone", s) for s in range(len(ALL_STRATEGY_KEYS))),
)


def candidate_action(observation: dict, candidate: Candidate) -> dict:
    intervene, whom, strategy = candidate
    slot = int(observation["last_speaker"])
    slots = [slot] if whom == "last" and slot < n_participants(observation) else None
    return make_action(observation, intervene, slots, strategy)


_INTERVENES = np.array([c[0] for c in CANDIDATES])
_STRATEGIES = np.array([c[2] for c in CANDIDATES])


def valid_candidates(observation: dict) -> np.ndarray:
    """Which candidates the scenario allows (an intervention's strategy must be in its taxonomy)."""
    return ~_INTERVENES | np.asarray(observation["strategy_mask"], dtype=bool)[_STRATEGIES]


def _features(flat, observation: dict) -> np.ndarray:
    return np.append(flat.observation(observation), 1.0)


class FittedQPolicy:
    """Greedy on ridge estimates of each candidate's reward from the flat observation features."""

    name = "fitted-q"

    def __init__(
        self, weights: np.ndarray, hash_dim: int = 256, env_id: str = "Rescue-v1", fitted_on: dict | None = None
    ):
        self.weights = np.asarray(weights, dtype=np.float64)  # (features + 1, candidates)
        self.hash_dim, self.env_id, self.fitted_on = hash_dim, env_id, fitted_on or {}
        self._flat = None

    @classmethod
    def fit(
        cls,
        env,
        sample_ids: Sequence[str] | None = None,
        alpha: float = 10.0,
        hash_dim: int = 256,
        progress: bool = False,
    ) -> FittedQPolicy:
        """Fit on every decision point of ``sample_ids`` (default: all of ``env``'s conversations)."""
        from sklearn.linear_model import Ridge
        from tqdm import tqdm

        from rescue_env.envs.wrappers import FlatObservation

        base = unwrapped(env)
        flat = FlatObservation(base, hash_dim=hash_dim)
        ids = list(sample_ids) if sample_ids is not None else [s.sample_id for s in base.samples]
        X, Y, valid = [], [], []
        for sample_id in tqdm(ids, desc="fitted-q: logging rewards", unit="conversation", disable=not progress):
            observation, _ = base.reset(options={"sample_id": sample_id})
            done = False
            while not done:
                allowed = valid_candidates(observation)
                X.append(_features(flat, observation))
                Y.append(
                    [
                        base.action_value(candidate_action(observation, c)) if ok else np.nan
                        for c, ok in zip(CANDIDATES, allowed)
                    ]
                )
                valid.append(allowed)
                observation, _, terminated, truncated, _ = base.step(candidate_action(observation, CANDIDATES[0]))
                done = terminated or truncated
        X, Y, valid = np.asarray(X), np.asarray(Y), np.asarray(valid)
        weights = np.zeros((X.shape[1], len(CANDIDATES)))
        for k in range(len(CANDIDATES)):
            rows = valid[:, k]
            if rows.sum() >= 2:
                model = Ridge(alpha=alpha, fit_intercept=False).fit(X[rows], Y[rows, k])
                weights[:, k] = model.coef_
            else:
                weights[-1, k] = -np.inf  # never seen valid: never chosen
        return cls(weights, hash_dim, f"Rescue-v{base.version}", {"conversations": len(ids), "decisions": int(len(X))})

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, observation: dict, env) -> dict:
        if self._flat is None:
            from rescue_env.envs.wrappers import FlatObservation

            self._flat = FlatObservation(unwrapped(env), hash_dim=self.hash_dim)
        scores = np.where(valid_candidates(observation), _features(self._flat, observation) @ self.weights, -np.inf)
        return candidate_action(observation, CANDIDATES[int(np.argmax(scores))])

    def save(self, path: str | Path) -> None:
        payload: dict[str, Any] = {
            "policy": self.name,
            "env_id": self.env_id,
            "hash_dim": self.hash_dim,
            "fitted_on": self.fitted_on,
            "candidates": [list(c) for c in CANDIDATES],
            "weights": np.where(np.isfinite(self.weights), self.weights, -1e9).tolist(),
        }
        Path(path).write_text(json.dumps(payload) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> FittedQPolicy:
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(np.asarray(payload["weights"]), payload["hash_dim"], payload["env_id"], payload.get("fitted_on"))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path} is not a fitted-q policy file ({exc})") from None
