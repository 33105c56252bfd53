"""F specialised to one simulated episode: ``RescueSim-v0``'s hot path.

``OutcomeModel.mean(point_state(...), action)`` builds the full feature matrices of Eq. 12-13 at every call (one
row per participant, one per ordered pair, in Python loops), which is right for fitting and for ``Rescue-v1``'s
cached states but dominates a closed-loop step. F is linear, so for one episode (fixed participants, scenario
and relation pattern) every constant feature folds into a bias and the prediction is a short sum per participant
and per pair, in plain Python (a few participants: faster than dozens of tiny numpy calls).
``EpisodeKernel.mean`` equals the reference to rounding, and ``sample`` draws the noise exactly as
``OutcomeModel.sample`` does, with the same generator calls (tested on random states and actions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rescue_env.dynamics.outcome import (
    AGE_CAP,
    DISTRESS_FEATURES,
    KINDS,
    PAIR_FEATURES,
    PATTERNS,
    OutcomeModel,
    SupportAction,
    recipient_kind,
)
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


def _weights(coef: list[float], names: list[str]) -> dict[str, float]:
    return dict(zip(names, coef))


@dataclass(frozen=True)
class EpisodeKernel:
    """The two ridge heads of F for one episode: biases with the scenario and pattern folded in, then one weight
    per varying feature (``c_*``: distress head, ``e_*``: viewpoint head)."""

    n: int
    decay_after: float
    half_life: float
    sigma_d: float
    sigma_g: float
    bias_d: float
    c: dict[str, float]
    c_kind: tuple[float, ...]  # recipient kinds
    c_strategy: tuple[float, ...]
    bias_g: float
    e: dict[str, float]
    e_source_kind: tuple[float, ...]
    e_target_kind: tuple[float, ...]
    e_strategy: tuple[float, ...]

    @classmethod
    def build(cls, model: OutcomeModel, n: int, family: bool, pattern: str | None) -> EpisodeKernel:
        c = _weights(model.distress.coef, DISTRESS_FEATURES)
        e = _weights(model.viewpoint.coef, PAIR_FEATURES)
        pattern_key = f"pattern={pattern}" if pattern in PATTERNS else None
        bias_d = model.distress.intercept + c["family"] * family + (c[pattern_key] if pattern_key else 0.0)
        bias_g = model.viewpoint.intercept + e["family"] * family + (e[pattern_key] if pattern_key else 0.0)
        return cls(
            n=n,
            decay_after=float(model.state.decay_after),
            half_life=float(model.state.half_life),
            sigma_d=model.distress.sigma,
            sigma_g=model.viewpoint.sigma,
            bias_d=bias_d,
            c=c,
            c_kind=tuple([c[f"recipient_{k}"] for k in KINDS]),
            c_strategy=tuple([c[f"strategy={s}"] for s in ALL_STRATEGY_KEYS]),
            bias_g=bias_g,
            e=e,
            e_source_kind=tuple([e[f"source_{k}"] for k in KINDS]),
            e_target_kind=tuple([e[f"target_{k}"] for k in KINDS]),
            e_strategy=tuple([e[f"source_strategy={s}"] for s in ALL_STRATEGY_KEYS]),
        )

    def _predict(self, state, action: SupportAction, effect_scale: float) -> tuple[list, list]:
        """F(x, a0) + scale (F(x, a) - F(x, a0)), unclipped: (distress per participant, G as rows of lists,
        diagonal 0); ``state`` is a ``simulation.SimState``. Plain Python on lists: with at most a few
        participants, a few hundred float operations are faster than dozens of tiny numpy calls."""
        n, c, e, row = self.n, self.c, self.e, state.row
        k, h = self.decay_after, self.half_life

        def aged(raw: float, set_at: int) -> tuple[float, float, float]:
            # (aged value, ever set, age feature), as Snapshot.aged and point_state compute them
            if set_at < 0:
                return 0.0, 0.0, 1.0
            age = row - set_at
            weight = 1.0 if age <= k else 2.0 ** (-(age - k) / h)
            return raw * weight, 1.0, min(age, AGE_CAP) / AGE_CAP

        people = [aged(x, r) for x, r in zip(state.distress_raw.tolist(), state.emotion_row.tolist())]
        d = [p[0] for p in people]
        pairs = [
            [aged(x, r) for x, r in zip(g_row, r_row)]
            for g_row, r_row in zip(state.g_raw.tolist(), state.viewpoint_row.tolist())
        ]
        g = [[p[0] for p in line] for line in pairs]

        supported = [False] * n
        own = other = speaks = 0.0
        source_add = target_add = pair_speaks = 0.0
        if action.intervene and effect_scale != 0.0:
            for i in action.recipients:
                if 0 <= i < n:
                    supported[i] = True
            kind = recipient_kind(action, n)
            strategy = ALL_STRATEGY_KEYS.index(action.strategy) if action.strategy in ALL_STRATEGY_KEYS else None
            own = (self.c_kind[KINDS.index(kind)] if kind is not None else 0.0) + (
                self.c_strategy[strategy] if strategy is not None else 0.0
            )
            other, speaks = c["other_supported"], c["therapist_speaks"]
            if kind is not None:
                source_add = self.e_source_kind[KINDS.index(kind)]
                target_add = self.e_target_kind[KINDS.index(kind)]
            if strategy is not None:
                source_add += self.e_strategy[strategy]
            pair_speaks = e["therapist_speaks"]

        total = sum(d)
        top = max(range(n), key=d.__getitem__) if n else 0
        second = max((d[j] for j in range(n) if j != top), default=0.0)
        scale_others = 1.0 / (n - 1) if n > 1 else 0.0
        columns = [sum(g[i][j] for i in range(n)) for j in range(n)]
        pred_d = []
        for i in range(n):
            value = self.bias_d + c["d"] * d[i] + c["annotated"] * people[i][1] + c["age"] * people[i][2]
            if n > 1:
                value += (
                    c["d_others_max"] * (second if i == top else d[top])
                    + c["d_others_mean"] * (total - d[i]) * scale_others
                    + c["out_negative"] * sum(g[i]) * scale_others
                    + c["in_negative"] * columns[i] * scale_others
                )
            if i == state.last_speaker:
                value += c["last_speaker"]
            if speaks or own or other:
                delta = speaks + (own + c["recipient_x_d"] * d[i] if supported[i] else other)
                value += effect_scale * delta
            pred_d.append(value)
        pred_g = []
        for i in range(n):
            line = []
            for j in range(n):
                if i == j:
                    line.append(0.0)
                    continue
                _, ever, age = pairs[i][j]
                value = (
                    self.bias_g
                    + e["g"] * g[i][j]
                    + e["annotated"] * ever
                    + e["age"] * age
                    + e["g_reverse"] * g[j][i]
                    + e["d_source"] * d[i]
                    + e["d_target"] * d[j]
                )
                if pair_speaks or source_add or target_add:
                    delta = pair_speaks + source_add * supported[i] + target_add * supported[j]
                    value += effect_scale * delta
                line.append(value)
            pred_g.append(line)
        return pred_d, pred_g

    def mean(self, state, action: SupportAction, effect_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """``OutcomeModel.mean`` of the state's ``point`` under ``action``."""
        d, g = self._predict(state, action, effect_scale)
        return _clipped(d, g, state.viewpoint_row)

    def sample(
        self, state, action: SupportAction, rng: np.random.Generator, effect_scale: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """``OutcomeModel.sample`` of the state's ``point`` under ``action`` (the same draws of ``rng``)."""
        d, g = self._predict(state, action, effect_scale)
        n = self.n
        noise_d = rng.standard_normal(n).tolist()
        noise_g = rng.standard_normal((n, n)).tolist()
        d = [x + self.sigma_d * z for x, z in zip(d, noise_d)]
        g = [[x + self.sigma_g * z for x, z in zip(line, noise)] for line, noise in zip(g, noise_g)]
        return _clipped(d, g, state.viewpoint_row)


def _clipped(d: list[float], g: list[list[float]], viewpoint_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clipped to [0, 1]; G kept only where a viewpoint exists (F does not create new stances)."""
    d_out = np.minimum(np.maximum(np.array(d), 0.0), 1.0)
    g_out = np.minimum(np.maximum(np.array(g).reshape(len(d), len(d)), 0.0), 1.0)
    return d_out, g_out * (viewpoint_row >= 0)


__all__ = ["EpisodeKernel"]
