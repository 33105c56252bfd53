"""``ImitationPolicy``: behavioural cloning of the recorded therapist in ``RescueSim-v0``.

Fitted on the simulator's own observations: every start conversation of the env is played with the recorded
therapist's actions (``env.recorded_action()``), and three scikit-learn logistic regressions learn, from the flat
features of what was observed (``SimFlatObservation``: the opening's words, the perceived distress and stances,
the steps so far), whether the therapist intervened, whom they supported (one participant slot, or everyone for
a pair, a subgroup or the group) and with which strategy. At play time the policy samples each choice from the
predicted probabilities with its own seeded generator, so it reproduces the therapist's frequencies as well as
their dependence on the state; masked choices are excluded. Fit it on the training starts and evaluate it on the
held-out ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from policies.base import make_action, n_participants, unwrapped

if TYPE_CHECKING:
    from rescue_env.envs.sim import RescueSimEnv

EVERYONE = -1


class ConstantClassifier:
    """A classifier stand-in when the training data has a single class."""

    def __init__(self, label: int) -> None:
        self.classes_ = np.array([label])

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.ones((len(X), 1))


def fit_classifier(X: np.ndarray, y: np.ndarray, seed: int):
    from sklearn.linear_model import LogisticRegression

    labels = np.unique(y)
    if labels.size == 1:
        return ConstantClassifier(int(labels[0]))
    return LogisticRegression(max_iter=2000, random_state=seed).fit(X, y)


class ImitationPolicy:
    name = "imitation"

    def __init__(self, features: Any, intervene: Any, target: Any, strategy: Any, seed: int | None = 0) -> None:
        self.features, self.intervene, self.target, self.strategy = features, intervene, target, strategy
        self.rng = np.random.default_rng(seed)

    @classmethod
    def fit(cls, env: RescueSimEnv, seed: int = 0, episodes_per_start: int = 1) -> ImitationPolicy:
        """Play every start of ``env`` ``episodes_per_start`` times with the recorded actions and fit."""
        from rescue_env.envs.wrappers import SimFlatObservation

        env = unwrapped(env)
        if not hasattr(env, "recorded_action"):
            raise ValueError("the imitation policy is fitted on RescueSim-v0 (it replays the recorded therapist)")
        features = SimFlatObservation(env)
        X, z, who, how = [], [], [], []
        for repeat in range(episodes_per_start):
            for index, sample in enumerate(env.samples):
                observation, _ = env.reset(seed=seed + 1000 * repeat + index, options={"sample_id": sample.sample_id})
                done = False
                while not done:
                    action = env.recorded_action()
                    X.append(features.observation(observation))
                    z.append(int(action["intervene"]))
                    target = np.asarray(action["target"])
                    chosen = np.flatnonzero(target[:-1])
                    who.append(int(chosen[0]) if target[-1] == 0 and chosen.size == 1 else EVERYONE)
                    how.append(int(action["strategy"]))
                    observation, _, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
        X_, z_ = np.asarray(X), np.asarray(z)
        on = z_ == 1
        if not on.any():
            raise ValueError("the recorded therapist never intervened on these starts: nothing to imitate")
        return cls(
            features,
            fit_classifier(X_, z_, seed),
            fit_classifier(X_[on], np.asarray(who)[on], seed),
            fit_classifier(X_[on], np.asarray(how)[on], seed),
            seed,
        )

    @classmethod
    def from_env(cls, env: RescueSimEnv, seed: int | None = 0) -> ImitationPolicy:
        return cls.fit(env, seed=seed or 0)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def _draw(self, model: Any, x: np.ndarray, allowed: set[int] | None = None) -> int | None:
        p = model.predict_proba(x[None, :])[0]
        labels = model.classes_.astype(int)
        if allowed is not None:
            p = np.where([label in allowed for label in labels], p, 0.0)
        if p.sum() <= 0:
            return None
        return int(labels[self.rng.choice(labels.size, p=p / p.sum())])

    def act(self, observation: dict, env: Any = None) -> dict:
        x = self.features.observation(observation)
        if not self._draw(self.intervene, x):
            return make_action(observation, False)
        slots = set(range(n_participants(observation))) | {EVERYONE}
        who = self._draw(self.target, x, slots)
        valid = set(np.flatnonzero(np.asarray(observation["strategy_mask"])).tolist())
        how = self._draw(self.strategy, x, valid)
        return make_action(observation, True, None if who in (None, EVERYONE) else [who], how)


__all__ = ["ImitationPolicy"]
