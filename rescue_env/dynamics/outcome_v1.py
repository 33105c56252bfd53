r"""F1, the state-dependent outcome model of ``RescueSim-v1``: F (``outcome.py``) plus the state x action terms that
the data carries, chosen by a rule fixed before any policy was trained, and an ensemble over groups.

Why (issue 24): every action term of F is a main effect -- the same in every state, with no cost of speaking and no
saturation -- so the per-step argmax of the closed loop is the same action everywhere ("support everyone with
``join``"), and a learner's answer is a constant. F1 lets the effect of an action depend on the state where the
data says it does.

**Candidate terms** (blocks of columns added to the distress head; each computed from F's own features and the
history of the last ``HISTORY`` = 4 decision points, a window fixed before looking):

- ``strategy_x_distress``: the strategy given to i times i's distress (does a strategy work differently on the very
  upset?), 11 columns;
- ``kind_x_family``: how i is supported (alone, in a pair, a subgroup, the group) times the family scenario, 4;
- ``left_out_x_distress``: someone else is supported while i is not, times i's distress, 1 (the data: next distress
  +0.118 after the therapist supports someone else, +0.026 after supporting the person);
- ``saturation``: the share of the last 4 decision points at which the therapist spoke, that share times "the
  therapist speaks now", and the share at which i was supported times "i is supported now", 3 (a cost of
  speaking and a saturation of support, which F lacks);
- ``strategy_x_last_speaker``: the strategy given to i when i spoke last (answering the person who just spoke), 11;
- ``speaks_x_distress``: the therapist speaks, times i's distress, 1.

**The rule** (written before any policy was trained; applied on the training side only): forward selection over the
blocks by grouped 5-fold cross-validation (``GroupKFold`` over couples and families) of the distress head's mean
squared error, the ridge penalty re-chosen for every candidate set from ``outcome.ALPHAS``; at each round the
block whose addition lowers the cross-validated error most is kept, and selection stops when no block lowers it
(a term stays only if held-out fit does not get worse). Then **per-term penalties**: the action blocks of the
model (F's strategy main effects, F's recipient-kind main effects, and each kept block) get a shrinkage factor
from ``SCALES`` = (1, 0.3, 0.1, 0) -- the block's columns are scaled before the ridge fit, which multiplies its
penalty by 1 / factor^2, and 0 drops it -- chosen in that order, one block at a time, by the same grouped
cross-validated error (the factor kept is the one with the lowest error; ties keep the larger factor). On the
release (train side, seed 0) this keeps F's strategy effects whole and drops the recipient-kind effects. The
viewpoint head is F's.

**Epistemic uncertainty**: ``fit_ensemble`` refits the chosen model on ``members`` bootstrap resamples of the
training groups (whole couples and families drawn with replacement); the members' spread of an action's predicted
effect is the model's uncertainty about it (``OutcomeModelV1.effect_spread``), and an env can draw one member per
episode.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.domain import participants
from rescue_env.data.schema import Sample
from rescue_env.dynamics.outcome import (
    ALPHAS,
    DISTRESS_FEATURES,
    KINDS,
    NO_INTERVENTION,
    LinearHead,
    OutcomeModel,
    PointState,
    SupportAction,
    Transitions,
    _first_within,
    _next_values,
    action_features,
    cross_val_predict_grouped,
    episode_states,
    fit_outcome_model,
    recipient_kind,
    recorded_action,
)
from rescue_env.dynamics.state import StateConfig, snapshots
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

FORMAT_VERSION = 2
HISTORY = 4
"""Decision points of history that the saturation terms read (fixed before looking)."""

SCALES = (1.0, 0.3, 0.1, 0.0)
"""Shrinkage factors tried per action block (a factor f multiplies the block's ridge penalty by 1 / f^2)."""

_COL = {name: k for k, name in enumerate(DISTRESS_FEATURES)}
_STRATEGY_COLS = [_COL[f"strategy={s}"] for s in ALL_STRATEGY_KEYS]
_KIND_COLS = [_COL[f"recipient_{k}"] for k in KINDS]


@dataclass(frozen=True)
class History:
    """The therapist's last ``HISTORY`` decisions as F1 reads them: the share at which the therapist spoke, and per
    participant the share at which they were a recipient (0 before anything happened)."""

    speaks: float
    supported: np.ndarray  # (n,)

    @classmethod
    def of(cls, actions: Sequence[SupportAction], n: int) -> History:
        recent = list(actions)[-HISTORY:]
        supported = np.zeros(n)
        for action in recent:
            if action.intervene:
                supported[[i for i in action.recipients if 0 <= i < n]] += 1.0
        return cls(sum(a.intervene for a in recent) / HISTORY, supported / HISTORY)


def _supported(X: np.ndarray) -> np.ndarray:
    return X[:, _KIND_COLS].sum(axis=1)


BlockFn = Callable[[np.ndarray, History], np.ndarray]
BLOCKS: dict[str, tuple[tuple[str, ...], BlockFn]] = {
    "strategy_x_distress": (
        tuple(f"strategy={s}_x_d" for s in ALL_STRATEGY_KEYS),
        lambda X, h: X[:, _STRATEGY_COLS] * X[:, [_COL["d"]]],
    ),
    "kind_x_family": (
        tuple(f"recipient_{k}_x_family" for k in KINDS),
        lambda X, h: X[:, _KIND_COLS] * X[:, [_COL["family"]]],
    ),
    "left_out_x_distress": (
        ("other_supported_x_d",),
        lambda X, h: (X[:, _COL["other_supported"]] * X[:, _COL["d"]])[:, None],
    ),
    "saturation": (
        ("recent_speaks", "speaks_x_recent_speaks", "supported_x_recent_supported"),
        lambda X, h: np.column_stack(
            [
                np.full(X.shape[0], h.speaks),
                X[:, _COL["therapist_speaks"]] * h.speaks,
                _supported(X) * h.supported,
            ]
        ),
    ),
    "strategy_x_last_speaker": (
        tuple(f"strategy={s}_x_last_speaker" for s in ALL_STRATEGY_KEYS),
        lambda X, h: X[:, _STRATEGY_COLS] * X[:, [_COL["last_speaker"]]],
    ),
    "speaks_x_distress": (
        ("speaks_x_d",),
        lambda X, h: (X[:, _COL["therapist_speaks"]] * X[:, _COL["d"]])[:, None],
    ),
}
"""The candidate state x action blocks: column names and how they are computed from F's features and ``History``."""


def block_names(blocks: Sequence[str]) -> list[str]:
    return [name for block in blocks for name in BLOCKS[block][0]]


def extend(X: np.ndarray, history: History, blocks: Sequence[str]) -> np.ndarray:
    """F's distress features of every participant (rows of ``X``) with the columns of ``blocks`` appended."""
    if not blocks:
        return X
    return np.hstack([X, *(BLOCKS[block][1](X, history) for block in blocks)])


# ----- transitions with history ------------------------------------------------------------------------------


@dataclass
class RichTransitions:
    """The distress head's training rows with every candidate block's columns (``all_columns``), so that a
    selection refits on column subsets without rebuilding rows."""

    base: Transitions
    extra: dict[str, np.ndarray]

    def with_blocks(self, blocks: Sequence[str]) -> Transitions:
        X = np.hstack([self.base.X, *(self.extra[b] for b in blocks)]) if blocks else self.base.X
        b = self.base
        return Transitions(X, b.y, b.current, b.groups, b.kinds, b.strategies, b.supported, b.therapist)


def distress_transitions(
    samples: Sequence[Sample], groups: dict[str, str], config: StateConfig, horizon: int
) -> RichTransitions:
    """F's distress rows (``outcome.transitions``: the next annotation within ``horizon`` rows) with the history of
    the recorded therapist's last ``HISTORY`` decisions, and every block's columns."""
    X_rows: list[np.ndarray] = []
    extra: dict[str, list[np.ndarray]] = {b: [] for b in BLOCKS}
    keys = ("y", "current", "groups", "kinds", "strategies", "supported", "therapist")
    cols: dict[str, list] = {k: [] for k in keys}
    for sample in samples:
        people = tuple(participants(sample))
        if not people:
            continue
        snaps = snapshots(sample, people, config)
        episode = episode_states(sample, config, people, snaps=snaps)
        emotion_events, _ = _next_values(snaps, len(people))
        past: list[SupportAction] = []
        for row, state in zip(episode.rows, episode.states):
            action = recorded_action(sample, row + 1, people)
            history = History.of(past, len(people))
            past.append(action)
            X_person, _ = action_features(state, action)
            kind = recipient_kind(action, len(people))
            for i in range(len(people)):
                target = _first_within(emotion_events[i], row, horizon)
                if target is None:
                    continue
                x = X_person[i : i + 1]
                X_rows.append(x[0])
                for block, (_, fn) in BLOCKS.items():
                    extra[block].append(fn(x, History(history.speaks, history.supported[i : i + 1]))[0])
                supported = action.intervene and i in action.recipients
                for key, value in zip(
                    keys,
                    (target, state.distress[i], groups[sample.sample_id], kind if supported else None,
                     action.strategy if supported else None, supported, action.intervene),
                ):  # fmt: skip
                    cols[key].append(value)
    width = len(DISTRESS_FEATURES)
    base = Transitions(
        X=np.asarray(X_rows, dtype=np.float64).reshape(-1, width),
        y=np.asarray(cols["y"], dtype=np.float64),
        current=np.asarray(cols["current"], dtype=np.float64),
        groups=list(cols["groups"]),
        kinds=list(cols["kinds"]),
        strategies=list(cols["strategies"]),
        supported=np.asarray(cols["supported"], dtype=bool),
        therapist=np.asarray(cols["therapist"], dtype=bool),
    )
    blocks = {b: np.asarray(v, dtype=np.float64).reshape(len(X_rows), len(BLOCKS[b][0])) for b, v in extra.items()}
    return RichTransitions(base, blocks)


# ----- selection ---------------------------------------------------------------------------------------------


def cv_error(data: Transitions, folds: int = 5, alphas: Sequence[float] = ALPHAS) -> tuple[float, float]:
    """(the lowest grouped cross-validated MSE over ``alphas``, its alpha)."""
    from sklearn.linear_model import Ridge

    best = (np.inf, alphas[0])
    for alpha in alphas:
        predicted = cross_val_predict_grouped(lambda alpha=alpha: Ridge(alpha=alpha), data, folds)
        error = float(np.mean((np.clip(predicted, 0, 1) - data.y) ** 2))
        best = min(best, (error, alpha))
    return best


def action_blocks(blocks: Sequence[str]) -> dict[str, list[int]]:
    """The column indices of each action block of a model with ``blocks`` (F's strategy and kind main effects,
    then the kept blocks), in the order the shrinkage is chosen."""
    out = {"strategy": list(_STRATEGY_COLS), "kind": list(_KIND_COLS)}
    start = len(DISTRESS_FEATURES)
    for block in blocks:
        width = len(BLOCKS[block][0])
        out[block] = list(range(start, start + width))
        start += width
    return out


def _scaled(data: Transitions, scale: np.ndarray) -> Transitions:
    return Transitions(
        data.X * scale, data.y, data.current, data.groups, data.kinds, data.strategies, data.supported, data.therapist
    )


def choose_scales(data: Transitions, blocks: Sequence[str], alpha: float, folds: int = 5) -> dict[str, float]:
    """The per-term penalties of the module docstring: a factor from ``SCALES`` per action block, one block at a
    time in ``action_blocks`` order, by grouped cross-validated MSE at ridge penalty ``alpha``."""
    columns = action_blocks(blocks)
    factors = dict.fromkeys(columns, 1.0)
    for block in columns:
        errors = {}
        for factor in SCALES:
            trial = {**factors, block: factor}
            errors[factor] = cv_error(_scaled(data, scale_vector(data.X.shape[1], columns, trial)), folds, [alpha])[0]
        factors[block] = min(SCALES, key=lambda f: (errors[f], -f))
    return factors


def scale_vector(width: int, columns: dict[str, list[int]], factors: dict[str, float]) -> np.ndarray:
    scale = np.ones(width)
    for block, cols in columns.items():
        scale[cols] = factors.get(block, 1.0)
    return scale


class SelectionStep(BaseModel):
    """One round of the forward selection: the cross-validated MSE with each remaining block added."""

    model_config = ConfigDict(frozen=True)

    kept: list[str]
    base_error: float
    tried: dict[str, float]
    added: str | None


def select_blocks(data: RichTransitions, folds: int = 5) -> tuple[list[str], list[SelectionStep]]:
    """The rule of the module docstring: forward selection by grouped cross-validated MSE; stop when no block
    lowers it."""
    kept: list[str] = []
    error, _ = cv_error(data.with_blocks(kept), folds)
    steps: list[SelectionStep] = []
    while True:
        remaining = [b for b in BLOCKS if b not in kept]
        tried = {b: cv_error(data.with_blocks([*kept, b]), folds)[0] for b in remaining}
        best = min(tried, key=tried.get) if tried else None
        added = best if best is not None and tried[best] < error else None
        steps.append(SelectionStep(kept=list(kept), base_error=error, tried=tried, added=added))
        if added is None:
            return kept, steps
        kept.append(added)
        error = tried[added]


# ----- the model ---------------------------------------------------------------------------------------------


class OutcomeModelV1(BaseModel):
    """F1: F's viewpoint head, a distress head over F's features plus ``blocks``, and ``members`` refits of that
    head on bootstrap resamples of the training groups (the ensemble)."""

    model_config = ConfigDict(frozen=True)

    format_version: int = FORMAT_VERSION
    base: OutcomeModel
    """F as fitted on the same side (its state settings, horizon and viewpoint head are F1's)."""
    blocks: list[str]
    distress: LinearHead
    members: list[LinearHead] = Field(default_factory=list)
    selection: list[SelectionStep] = Field(default_factory=list)
    shrinkage: dict[str, float] = Field(default_factory=dict)
    """The per-term factor of each action block (1 = the shared ridge penalty, 0 = dropped)."""
    fitted_on: dict[str, Any] = Field(default_factory=dict)

    @property
    def state(self) -> StateConfig:
        return self.base.state

    @cached_property
    def _heads(self) -> list[LinearHead]:
        return [self.distress, *self.members]

    def head(self, member: int | None) -> LinearHead:
        """The distress head: the fit on all training groups (``member`` None) or ensemble member ``member``."""
        return self.distress if member is None else self.members[member]

    def raw(
        self,
        state: PointState,
        action: SupportAction,
        history: History,
        member: int | None = None,
        effect_scale: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The predicted next (d, G) under ``action``, unclipped (G: F's viewpoint head, 0 where no pair);
        ``effect_scale`` as F's: F1(x, a0) + scale (F1(x, a) - F1(x, a0)), a0 = keeping listening."""
        if effect_scale != 1.0:
            d0, g0 = self.raw(state, NO_INTERVENTION, history, member)
            d, g = self.raw(state, action, history, member)
            return d0 + effect_scale * (d - d0), g0 + effect_scale * (g - g0)
        X_person, X_pair = action_features(state, action)
        d = self.head(member).predict(extend(X_person, history, self.blocks))
        n = d.size
        g = np.zeros((n, n))
        if state.pair_index:
            source, target = np.asarray(state.pair_index).T
            g[source, target] = self.base.viewpoint.predict(X_pair)
        return d, g

    def mean(
        self,
        state: PointState,
        action: SupportAction,
        history: History,
        member: int | None = None,
        effect_scale: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The expected next (d, G), clipped to [0, 1]; pairs without a viewpoint stay neutral (as F's)."""
        d, g = self.raw(state, action, history, member, effect_scale)
        return np.clip(d, 0.0, 1.0), np.clip(g, 0.0, 1.0) * state.annotated_pairs

    def sample(
        self,
        state: PointState,
        action: SupportAction,
        history: History,
        rng: np.random.Generator,
        member: int | None = None,
        effect_scale: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One draw of the next (d, G): Gaussian noise of the heads' held-out residual sd, then clipped (the
        draws in ``OutcomeModel.sample``'s order: n for d, then n x n for G)."""
        d, g = self.raw(state, action, history, member, effect_scale)
        d = d + self.head(member).sigma * rng.standard_normal(d.shape)
        g = g + self.base.viewpoint.sigma * rng.standard_normal(g.shape)
        return np.clip(d, 0.0, 1.0), np.clip(g, 0.0, 1.0) * state.annotated_pairs

    def effect_spread(self, state: PointState, action: SupportAction, history: History) -> np.ndarray:
        """Per participant: the ensemble's standard deviation of the action's effect on next distress (its effect
        against keeping listening): what the data cannot pin down about this action here (0 without members)."""
        if not self.members:
            return np.zeros(state.distress.size)
        X_a = extend(action_features(state, action)[0], history, self.blocks)
        X_0 = extend(action_features(state, NO_INTERVENTION)[0], history, self.blocks)
        effects = np.stack([h.predict(X_a) - h.predict(X_0) for h in self.members])
        return effects.std(axis=0)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


def _fit(data: Transitions, features: list[str], alpha: float, scale: np.ndarray) -> LinearHead:
    """Ridge on ``data`` (columns already scaled by ``scale``), stored for unscaled features; sigma = the grouped
    held-out residual sd."""
    from sklearn.linear_model import Ridge

    model = Ridge(alpha=alpha).fit(data.X, data.y)
    predicted = cross_val_predict_grouped(lambda: Ridge(alpha=alpha), data, 5)
    return LinearHead(
        features=features,
        coef=(model.coef_ * scale).tolist(),
        intercept=float(model.intercept_),
        alpha=alpha,
        sigma=float(np.std(predicted - data.y)),
        n=int(data.y.size),
    )


def fit_outcome_model_v1(
    samples: Sequence[Sample],
    groups: dict[str, str],
    *,
    state: StateConfig | None = None,
    horizon: int = 5,
    members: int = 10,
    seed: int = 0,
    blocks: Sequence[str] | None = None,
    base: OutcomeModel | None = None,
    fitted_on: dict[str, Any] | None = None,
) -> OutcomeModelV1:
    """F1 on ``samples`` (the training side): blocks chosen by ``select_blocks`` unless given, the distress head
    refitted at its cross-validated penalty, and ``members`` group-bootstrap refits (seeded). ``base``: F fitted on
    the same samples, when the caller has it."""
    from sklearn.linear_model import Ridge

    state = state or StateConfig()
    if base is None:
        base = fit_outcome_model(samples, groups, state=state, horizon=horizon, fitted_on=fitted_on)
    rich = distress_transitions(samples, groups, state, horizon)
    steps: list[SelectionStep] = []
    if blocks is None:
        chosen, steps = select_blocks(rich)
    else:
        unknown = [b for b in blocks if b not in BLOCKS]
        if unknown:
            raise ValueError(f"unknown block(s) {', '.join(unknown)}; choose from {', '.join(BLOCKS)}")
        chosen = list(blocks)
    data = rich.with_blocks(chosen)
    _, alpha = cv_error(data)
    factors = choose_scales(data, chosen, alpha)
    scale = scale_vector(data.X.shape[1], action_blocks(chosen), factors)
    data = _scaled(data, scale)  # the ridge sees scaled columns; coefficients are stored for unscaled features
    features = DISTRESS_FEATURES + block_names(chosen)
    head = _fit(data, features, alpha, scale)
    rng = np.random.default_rng([seed, 24])
    labels = np.asarray(data.groups)
    unique = np.unique(labels)
    rows_of = {g: np.flatnonzero(labels == g) for g in unique}
    ensemble = []
    for _ in range(members):
        drawn = rng.choice(unique, size=unique.size, replace=True)
        index = np.concatenate([rows_of[g] for g in drawn])
        fitted = Ridge(alpha=alpha).fit(data.X[index], data.y[index])
        ensemble.append(
            LinearHead(
                features=features,
                coef=(fitted.coef_ * scale).tolist(),
                intercept=float(fitted.intercept_),
                alpha=alpha,
                sigma=head.sigma,
                n=int(index.size),
            )
        )
    return OutcomeModelV1(
        base=base,
        blocks=chosen,
        distress=head,
        members=ensemble,
        selection=steps,
        shrinkage=factors,
        fitted_on={**(fitted_on or {}), "samples": len(samples), "distress_transitions": int(data.y.size)},
    )
