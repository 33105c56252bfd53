"""F specialised to one simulated episode: ``RescueSim-v0``'s hot path.

``OutcomeModel.mean(point_state(...), action)`` builds the full feature matrices of Eq. 12-13 at every call (one
row per participant, one per ordered pair, in Python loops), which is right for fitting and for ``Rescue-v1``'s
cached states but dominates a closed-loop step. F is linear, so for one episode (fixed participants, scenario
and relation pattern) every constant feature folds into a bias and the prediction is a short sum per participant
and per pair, in plain Python (a few participants: faster than dozens of tiny numpy calls).
``EpisodeKernel.mean`` equals the reference to rounding, and ``sample`` draws the noise exactly as
``OutcomeModel.sample`` does, with the same generator calls (tested on random states and actions). ``heads`` gives
the prediction of one participant or one pair at a time, so that a step of the sim (``simulation.advance_live``)
evaluates F only where a value is refreshed; ``predict`` is both heads everywhere, the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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

_MEMO = 4096
"""Bound of each memo of ``EpisodeKernel`` (ages in rows, actions: a few dozen of each in practice)."""


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
    _c_terms: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _e_terms: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _ages: dict[int, tuple[float, float]] = field(init=False, repr=False, compare=False)
    _actions: dict[tuple, tuple] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The weights ``predict`` reads, in its order (locals, not dict look-ups, on the hot path), and its memos.
        c, e = self.c, self.e
        names = ("d", "annotated", "age", "d_others_max", "d_others_mean", "out_negative", "in_negative")
        c_terms = (self.bias_d, *(c[name] for name in names), c["last_speaker"], c["recipient_x_d"])
        e_terms = (self.bias_g, *(e[name] for name in ("g", "annotated", "age", "g_reverse", "d_source", "d_target")))
        object.__setattr__(self, "_c_terms", c_terms)
        object.__setattr__(self, "_e_terms", e_terms)
        object.__setattr__(self, "_ages", {})
        object.__setattr__(self, "_actions", {})

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
        """``predict`` of a ``simulation.SimState``."""
        return self.predict(
            state.distress_raw.tolist(),
            state.emotion_row.tolist(),
            state.g_raw.tolist(),
            state.viewpoint_row.tolist(),
            state.row,
            state.last_speaker,
            action,
            effect_scale,
        )

    def predict(
        self,
        distress_raw: list[float],
        emotion_row: list[int],
        g_raw: list[list[float]],
        viewpoint_row: list[list[int]],
        row: int,
        last_speaker: int | None,
        action: SupportAction,
        effect_scale: float,
    ) -> tuple[list[float], list[list[float]]]:
        """F(x, a0) + scale (F(x, a) - F(x, a0)), unclipped: (distress per participant, G as rows of lists,
        diagonal 0), from the state's raw values and the rows they were set at (-1 = never) as lists (``heads``
        for every participant and pair)."""
        distress, pair = self.heads(
            distress_raw, emotion_row, g_raw, viewpoint_row, row, last_speaker, action, effect_scale
        )
        n = self.n
        return [distress(i) for i in range(n)], [[0.0 if i == j else pair(i, j) for j in range(n)] for i in range(n)]

    def heads(
        self,
        distress_raw: list[float],
        emotion_row: list[int],
        g_raw: list[list[float]],
        viewpoint_row: list[list[int]],
        row: int,
        last_speaker: int | None,
        action: SupportAction,
        effect_scale: float,
    ) -> tuple[Callable[[int], float], Callable[[int, int], float]]:
        """``predict``'s two heads as functions of a participant i and of a pair (i, j), i != j: a step asks only
        for the values it refreshes (about one participant and one pair of a few). Plain Python on lists: with at
        most a few participants, a few hundred float operations are faster than dozens of tiny numpy calls."""
        n, ages, age_of = self.n, self._ages, self._age
        # aged values, as Snapshot.aged computes them (``_age``); "ever set" and the age feature where asked
        d = [0.0 if r < 0 else x * (ages.get(row - r) or age_of(row - r))[0] for x, r in zip(distress_raw, emotion_row)]
        g = [
            [0.0 if r < 0 else x * (ages.get(row - r) or age_of(row - r))[0] for x, r in zip(g_line, r_line)]
            for g_line, r_line in zip(g_raw, viewpoint_row)
        ]
        key = (action.intervene and effect_scale != 0.0, action.recipients, action.strategy)
        terms = self._actions.get(key) or self._action_terms(action, key)
        supported, own, other, speaks, source_add, target_add, pair_speaks = terms
        moves_d = bool(speaks or own or other)
        moves_g = bool(pair_speaks or source_add or target_add)
        bias_d, c_d, c_annotated, c_age, c_max, c_mean, c_out, c_in, c_last, c_x_d = self._c_terms
        bias_g, e_g, e_annotated, e_age, e_reverse, e_source, e_target = self._e_terms
        total = sum(d)
        top = max(range(n), key=d.__getitem__) if n else 0
        second = max((d[j] for j in range(n) if j != top), default=0.0)
        scale_others = 1.0 / (n - 1) if n > 1 else 0.0

        def distress(i: int) -> float:
            r = emotion_row[i]
            ever, age = (0.0, 1.0) if r < 0 else (1.0, (ages.get(row - r) or age_of(row - r))[1])
            value = bias_d + c_d * d[i] + c_annotated * ever + c_age * age
            if n > 1:
                value += (
                    c_max * (second if i == top else d[top])
                    + c_mean * (total - d[i]) * scale_others
                    + c_out * sum(g[i]) * scale_others
                    + c_in * sum([line[i] for line in g]) * scale_others
                )
            if i == last_speaker:
                value += c_last
            if moves_d:
                delta = speaks + (own + c_x_d * d[i] if supported[i] else other)
                value += effect_scale * delta
            return value

        def pair(i: int, j: int) -> float:
            r = viewpoint_row[i][j]
            ever, age = (0.0, 1.0) if r < 0 else (1.0, (ages.get(row - r) or age_of(row - r))[1])
            value = (
                bias_g
                + e_g * g[i][j]
                + e_annotated * ever
                + e_age * age
                + e_reverse * g[j][i]
                + e_source * d[i]
                + e_target * d[j]
            )
            if moves_g:
                delta = pair_speaks + source_add * supported[i] + target_add * supported[j]
                value += effect_scale * delta
            return value

        return distress, pair

    def _age(self, age: int) -> tuple[float, float]:
        """(weight, age feature) of an annotation ``age`` rows old (``state.age_weight``, ``point_state``'s
        capped age), memoised per age."""
        k, h = self.decay_after, self.half_life
        weight = 1.0 if age <= k else 2.0 ** (-(age - k) / h)
        value = (weight, min(age, AGE_CAP) / AGE_CAP)
        if len(self._ages) < _MEMO:
            self._ages[age] = value
        return value

    def _action_terms(self, action: SupportAction, key: tuple) -> tuple:
        """The action's terms of both heads (supported flags, own, other, speaks; source, target, speaks),
        memoised per (moves, recipients, strategy)."""
        n, c, e = self.n, self.c, self.e
        supported = [False] * n
        own = other = speaks = 0.0
        source_add = target_add = pair_speaks = 0.0
        if key[0]:
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
        terms = (tuple(supported), own, other, speaks, source_add, target_add, pair_speaks)
        if len(self._actions) < _MEMO:
            self._actions[key] = terms
        return terms

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
    """Clipped to [0, 1]; G kept only where a viewpoint exists (F does not create new stances). In plain Python
    (clipping and masking are exact, so this equals the numpy expression ``clip(g) * (viewpoint_row >= 0)``)."""
    n = len(d)
    d_out = np.array([0.0 if x < 0.0 else 1.0 if x > 1.0 else x for x in d])
    existing = viewpoint_row.tolist()
    g_out = np.array(
        [
            [(0.0 if x < 0.0 else 1.0 if x > 1.0 else x) if row >= 0 else 0.0 for x, row in zip(line, rows)]
            for line, rows in zip(g, existing)
        ]
    ).reshape(n, n)
    return d_out, g_out


__all__ = ["EpisodeKernel"]
