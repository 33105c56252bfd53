"""``CloningPolicy``: behavioural cloning of the recorded therapist in the replays (``Rescue-v0``, ``Rescue-v1``).

Fitted on the gold of the env's conversations, then played from the observation alone. Fitting replays every
conversation of the env once (resetting and stepping it, so fit on an env of its own): at each decision point the
flat features of the observation (``FlatObservation``, the features of ``RescueFlat-v0``/``-v1``) are paired with
what the real therapist did next (``env.gold()``: z*, A*, a*), and three scikit-learn logistic regressions learn
whether the therapist intervened (every decision point), whom they supported (one participant slot, or everyone
for a pair, a subgroup or the group; points with z* = 1 and a known A*) and with which strategy (z* = 1 and a
known a*). The classifiers, the sampling and the masks are ``ImitationPolicy``'s (the sim's behavioural cloning,
fitted on the recorded actions instead of the gold): this class only changes where the training pairs come from.

At play time ``act`` reads nothing but the observation (never ``info``, ``env.gold()`` or ``env.state()``) and
samples each choice from the predicted probabilities with its own seeded generator (``reset(seed)``), masked
choices excluded, so it reproduces the therapist's frequencies and their dependence on what is observed;
deterministic given the seed. ``make_policy("cloning", env, seed)`` fits on ``env``'s conversations:
``rescue-bench rollout --policy cloning --split test`` fits on the train side and plays the test side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from policies.base import make_action, n_participants, unwrapped
from policies.imitation import EVERYONE, ConstantClassifier, ImitationPolicy, fit_classifier

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv

FALLBACK_STRATEGY = 0
"""``track``: valid in both taxonomies; the constant strategy when no training point has a known a*."""


def target_label(recipients: frozenset[int] | None, n: int) -> int | None:
    """The target class of a gold A*: the slot when it is one participant of several, ``EVERYONE`` for the group, a
    pair or a subgroup (as ``ImitationPolicy`` labels the recorded actions), None when A* is unknown."""
    if recipients is None:
        return None
    return next(iter(recipients)) if len(recipients) == 1 and n > 1 else EVERYONE


def _fit_or_constant(X: np.ndarray, y: list[int], fallback: int, seed: int) -> Any:
    """A classifier of ``y`` on ``X``; the constant ``fallback`` when there is no training point at all."""
    if not y:
        return ConstantClassifier(fallback)
    return fit_classifier(X, np.asarray(y), seed)


class CloningPolicy(ImitationPolicy):
    """Behavioural cloning of the recorded therapist's gold decisions in a replay (see the module docstring)."""

    name = "cloning"

    @classmethod
    def fit(cls, env: RescueEnv, seed: int = 0, hash_dim: int = 256) -> CloningPolicy:
        """Replay every conversation of ``env`` once and fit the three classifiers on its gold decisions."""
        from rescue_env.envs.wrappers import FlatObservation

        base = unwrapped(env)
        if hasattr(base, "recorded_action") or not hasattr(base, "gold"):
            raise ValueError(
                "the cloning policy is fitted on a replay (Rescue-v0, Rescue-v1) with gold decisions; "
                "RescueSim-v0 has the imitation policy"
            )
        features = FlatObservation(base, hash_dim=hash_dim)
        X: list[np.ndarray] = []
        z: list[int] = []
        who: list[tuple[int, int]] = []  # (row of X, target class)
        how: list[tuple[int, int]] = []  # (row of X, strategy index)
        for sample in base.samples:
            observation, _ = base.reset(options={"sample_id": sample.sample_id})
            n = n_participants(observation)
            done = False
            while not done:
                gold = base.gold()  # fitting only: the pairs' labels, never a feature
                row = len(X)
                X.append(features.observation(observation))
                z.append(int(gold["intervene"]))
                if gold["intervene"]:
                    label = target_label(gold["recipients"], n)
                    if label is not None:
                        who.append((row, label))
                    if gold["strategy"] is not None:
                        how.append((row, int(gold["strategy"])))
                # A replay continues as recorded whatever the action: keep listening costs nothing to compute.
                observation, _, terminated, truncated, _ = base.step(make_action(observation, False))
                done = terminated or truncated
        X_ = np.asarray(X)
        return cls(
            features,
            _fit_or_constant(X_, z, 0, seed),
            _fit_or_constant(X_[[r for r, _ in who]], [y for _, y in who], EVERYONE, seed),
            _fit_or_constant(X_[[r for r, _ in how]], [y for _, y in how], FALLBACK_STRATEGY, seed),
            seed,
        )

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> CloningPolicy:
        return cls.fit(env, seed=seed or 0)

    def act(self, observation: dict, env: Any = None) -> dict:
        time_key = self.features.time_key  # "position" (Rescue-v0) or "elapsed" (Rescue-v1)
        if time_key not in observation:
            version = "Rescue-v0" if time_key == "position" else "Rescue-v1"
            raise ValueError(f"{self.name}: fitted on {version}'s observations, which have {time_key!r}")
        return super().act(observation, env)


__all__ = ["CloningPolicy", "target_label"]
