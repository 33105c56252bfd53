r"""The outcome model F of the paper's Eq. 12-13, fitted on annotated conversations.

App. B writes the joint update :math:`(s, G)^{t+1} = F(x^t, A^t, a^t)` and never instantiates it. Here F is two
regularised linear models (scikit-learn ``Ridge``), fitted on the user's data:

- **distress**: participant i's next annotated distress (the first emotion annotation of i within ``horizon``
  rows after the decision point) from i's current state (aged distress, whether and how long ago i was
  annotated, the others' distress, the negativity of i's outgoing and incoming viewpoints), the scenario, the
  latest relation pattern, whether i spoke last, and the support action of the row in between: whether the
  therapist spoke, whether i is a recipient alone / in a pair / in a subgroup / as the whole group, the
  strategy given to i, and the recipient indicator times i's distress.
- **viewpoints**: the negativity of i's next viewpoint about j (within ``horizon`` rows) from g_ij, g_ji, its
  age, both distress values, the scenario, the pattern, and the action as seen by i and by j.

Transitions are the decision points of ``Rescue-v1`` (after every row not spoken by the therapist); a row where
the therapist did not speak is a "no intervention" transition. F is stochastic: a prediction is a Gaussian with
the model's held-out residual standard deviation, clipped to [0, 1] and sampled with the caller's generator.
``effect_scale`` scales what the action changes: :math:`\hat s = F(x, a_0) + \text{scale} (F(x, a) - F(x, a_0))`
with :math:`a_0` = no intervention (1 = the fitted model, 0 = actions change nothing).

What F cannot know: the data is observational. The therapist chooses whom to support and when, for reasons in
the room that the annotations may not record, so an estimated "effect" of support mixes the effect with that
choice. F is a model fitted on 191 segments, not the truth; ``rescue-bench dynamics report`` shows how well it
predicts held-out conversations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.domain import (
    decision_rows,
    is_therapist,
    participants,
    primary_strategy,
    scenario_of,
    support_target,
    target_members,
)
from rescue_env.data.schema import Sample
from rescue_env.dynamics.state import Snapshot, StateConfig, age_weight, snapshots
from rescue_env.taxonomy import ALL_RELATION_PATTERN_KEYS, ALL_STRATEGY_KEYS, relation_patterns

FORMAT_VERSION = 1
PATTERNS: tuple[str, ...] = ALL_RELATION_PATTERN_KEYS
KINDS = ("alone", "pair", "subgroup", "group")
"""How a recipient is supported: alone, in a pair, in a subgroup (3+, not everyone), as the whole group."""
AGE_CAP = 30.0


@dataclass(frozen=True)
class SupportAction:
    """A support action as F sees it: recipients are participant indices; strategy a key or None (unknown)."""

    intervene: bool
    recipients: frozenset[int] = frozenset()
    strategy: str | None = None


NO_INTERVENTION = SupportAction(False)


def support_action(intervene: bool, recipients: frozenset[int], strategy: int) -> SupportAction:
    """An env's decoded action (strategy an index into ``ALL_STRATEGY_KEYS``, -1 = invalid) as F sees it: an
    intervention without recipients supports no one, so F reads it as no intervention."""
    key = ALL_STRATEGY_KEYS[strategy] if 0 <= strategy < len(ALL_STRATEGY_KEYS) else None
    return SupportAction(intervene and bool(recipients), recipients if intervene else frozenset(), key)


def candidate_supports(n: int, strategies: Iterable[int]) -> list[tuple[bool, frozenset[int], int]]:
    """Keep listening, then every single participant, pair and everyone with every strategy in ``strategies``:
    the actions a one-step greedy reference compares (decoded form: intervene, recipients, strategy index)."""
    strategies = sorted(strategies)
    subsets = {frozenset([i]) for i in range(n)} | {frozenset(p) for p in combinations(range(n), 2)}
    subsets.add(frozenset(range(n)))
    listen = (False, frozenset(), strategies[0] if strategies else -1)
    return [listen] + [(True, r, s) for r in sorted(subsets, key=sorted) for s in strategies]


def recorded_action(sample: Sample, row: int, people: Sequence[str]) -> SupportAction:
    """What the recorded row ``row`` did: the therapist's support (target and first strategy), else nothing."""
    following = sample.rows[row]
    if not is_therapist(following):
        return NO_INTERVENTION
    members = target_members(support_target(following), people)
    key = primary_strategy(following)
    return SupportAction(
        True,
        frozenset(people.index(m) for m in members if m in people),
        key if key in ALL_STRATEGY_KEYS else None,
    )


def recipient_kind(action: SupportAction, n: int) -> str | None:
    size = len(action.recipients)
    if not action.intervene or size == 0:
        return None
    if size >= n:
        return "group"
    return "alone" if size == 1 else "pair" if size == 2 else "subgroup"


# ----- features ---------------------------------------------------------------------------------------------

STATE_NAMES = [
    "d",
    "annotated",
    "age",
    "d_others_max",
    "d_others_mean",
    "out_negative",
    "in_negative",
    "family",
    "last_speaker",
    *(f"pattern={p}" for p in PATTERNS),
]
ACTION_NAMES = [
    "therapist_speaks",
    *(f"recipient_{k}" for k in KINDS),
    "recipient_x_d",
    "other_supported",
    *(f"strategy={s}" for s in ALL_STRATEGY_KEYS),
]
DISTRESS_FEATURES = STATE_NAMES + ACTION_NAMES
PAIR_STATE_NAMES = [
    "g",
    "annotated",
    "age",
    "g_reverse",
    "d_source",
    "d_target",
    "family",
    *(f"pattern={p}" for p in PATTERNS),
]
PAIR_ACTION_NAMES = [
    "therapist_speaks",
    *(f"source_{k}" for k in KINDS),
    *(f"target_{k}" for k in KINDS),
    *(f"source_strategy={s}" for s in ALL_STRATEGY_KEYS),
]
PAIR_FEATURES = PAIR_STATE_NAMES + PAIR_ACTION_NAMES


@dataclass(frozen=True)
class PointState:
    """The state features of one decision point, per participant and per ordered pair (action-free part)."""

    distress: np.ndarray  # (n,) aged d
    g: np.ndarray  # (n, n) aged g
    annotated_pairs: np.ndarray  # (n, n) bool: i has a viewpoint about j
    person: np.ndarray  # (n, len(STATE_NAMES))
    pairs: np.ndarray  # (n*(n-1), len(PAIR_STATE_NAMES)), ordered pairs in ``pair_index`` order
    pair_index: tuple[tuple[int, int], ...]


def _age_feature(age: np.ndarray) -> np.ndarray:
    return np.minimum(age, AGE_CAP) / AGE_CAP  # inf (never) -> 1


def point_state(
    snapshot: Snapshot, row: int, last_speaker: int | None, family: bool, pattern: str | None, config: StateConfig
) -> PointState:
    d, g, emotion_age, viewpoint_age = snapshot.aged(row, config)
    n = d.size
    others = ~np.eye(n, dtype=bool)
    person = np.zeros((n, len(STATE_NAMES)))
    person[:, 0] = d
    person[:, 1] = np.isfinite(emotion_age)
    person[:, 2] = _age_feature(emotion_age)
    if n > 1:
        masked = np.where(others, d[None, :], -np.inf)
        person[:, 3] = masked.max(axis=1)
        person[:, 4] = (d.sum() - d) / (n - 1)
        person[:, 5] = (g * others).sum(axis=1) / (n - 1)
        person[:, 6] = (g * others).sum(axis=0) / (n - 1)
    person[:, 7] = float(family)
    if last_speaker is not None and 0 <= last_speaker < n:
        person[last_speaker, 8] = 1.0
    pattern_block = np.zeros(len(PATTERNS))
    if pattern in PATTERNS:
        pattern_block[PATTERNS.index(pattern)] = 1.0
    person[:, 9:] = pattern_block
    index, source, target = _ordered_pairs(n)
    pairs = np.zeros((len(index), len(PAIR_STATE_NAMES)))
    age = viewpoint_age[source, target]
    # Whole columns at once (element-wise the same operations as one pair at a time, so the same values).
    pairs[:, 0] = g[source, target]
    pairs[:, 1] = np.isfinite(age)
    pairs[:, 2] = _age_feature(age)
    pairs[:, 3] = g[target, source]
    pairs[:, 4] = d[source]
    pairs[:, 5] = d[target]
    pairs[:, 6] = float(family)
    pairs[:, 7:] = pattern_block
    return PointState(d, g, np.isfinite(viewpoint_age), person, pairs, index)


@cache
def _ordered_pairs(n: int) -> tuple[tuple[tuple[int, int], ...], np.ndarray, np.ndarray]:
    """The ordered pairs (i, j), i != j, row-major, and their source and target index arrays (read-only)."""
    index = tuple((i, j) for i in range(n) for j in range(n) if i != j)
    source = np.array([i for i, _ in index], dtype=np.intp)
    target = np.array([j for _, j in index], dtype=np.intp)
    source.flags.writeable = target.flags.writeable = False
    return index, source, target


def action_features(state: PointState, action: SupportAction) -> tuple[np.ndarray, np.ndarray]:
    """The full feature matrices (participants, pairs) of ``state`` under ``action``."""
    n = state.distress.size
    kind = recipient_kind(action, n)
    person = np.zeros((n, len(ACTION_NAMES)))
    supported = np.zeros(n, dtype=bool)
    if action.intervene:
        person[:, 0] = 1.0
        supported[[i for i in action.recipients if 0 <= i < n]] = True
        if kind is not None:
            person[supported, 1 + KINDS.index(kind)] = 1.0
        person[:, 5] = supported * state.distress
        person[:, 6] = ~supported
        if action.strategy in ALL_STRATEGY_KEYS:
            person[supported, 7 + ALL_STRATEGY_KEYS.index(action.strategy)] = 1.0
    pairs = np.zeros((len(state.pair_index), len(PAIR_ACTION_NAMES)))
    if action.intervene:
        pairs[:, 0] = 1.0
        if kind is not None and state.pair_index:
            source, target = np.asarray(state.pair_index).T
            column = KINDS.index(kind)
            pairs[:, 1 + column] = supported[source]
            pairs[:, 5 + column] = supported[target]
            if action.strategy in ALL_STRATEGY_KEYS:
                pairs[:, 9 + ALL_STRATEGY_KEYS.index(action.strategy)] = supported[source]
    return np.hstack([state.person, person]), np.hstack([state.pairs, pairs])


# ----- transitions from the data -----------------------------------------------------------------------------


@dataclass
class Transitions:
    """Training rows of both models, with the group (``rescue_env.data.splits.group_of``) of each row."""

    X: np.ndarray
    y: np.ndarray
    current: np.ndarray  # persistence's prediction: the current (aged) value
    groups: list[str]
    kinds: list[str | None]  # the recipient kind of the row's participant (None: not supported)
    strategies: list[str | None]
    supported: np.ndarray  # bool: the participant / pair source was a recipient
    therapist: np.ndarray  # bool: the therapist spoke


@dataclass(frozen=True)
class EpisodeStates:
    """Per decision row of a sample: its ``PointState`` (cached by the env)."""

    people: tuple[str, ...]
    rows: tuple[int, ...]
    states: tuple[PointState, ...]


def episode_states(
    sample: Sample,
    config: StateConfig,
    people: Sequence[str] | None = None,
    rows: Sequence[int] | None = None,
    snaps: Sequence[Snapshot] | None = None,
) -> EpisodeStates:
    """The state of every decision row (``snaps``: the sample's ``snapshots``, when already computed)."""
    people = tuple(people if people is not None else participants(sample))
    rows = tuple(rows if rows is not None else decision_rows(sample))
    snaps = snaps if snaps is not None else snapshots(sample, people, config)
    family = scenario_of(sample) == "family"
    patterns = latest_relation_patterns(sample)
    lasts = []
    for row in rows:
        speaker = sample.rows[row].primary_speaker.strip()
        lasts.append(people.index(speaker) if speaker in people else None)
    if not rows or not people:
        states = [point_state(snaps[r], r, last, family, patterns[r], config) for r, last in zip(rows, lasts)]
        return EpisodeStates(people, rows, tuple(states))
    return EpisodeStates(people, rows, _point_states(snaps, rows, lasts, family, patterns, config))


def _point_states(
    snaps: Sequence[Snapshot],
    rows: tuple[int, ...],
    lasts: list[int | None],
    family: bool,
    patterns: list[str | None],
    config: StateConfig,
) -> tuple[PointState, ...]:
    """``point_state`` of every row in ``rows`` at once: the same element-wise operations on arrays stacked over
    the rows (so the same values, tested bit for bit), in a few numpy calls instead of a few dozen per row."""
    n = snaps[rows[0]].distress_raw.size
    at = np.asarray(rows)
    emotion_row = np.stack([snaps[r].emotion_row for r in rows])  # (R, n)
    viewpoint_row = np.stack([snaps[r].viewpoint_row for r in rows])  # (R, n, n)
    # As ``Snapshot.aged``: ages in rows, inf = never annotated.
    emotion_age = np.where(emotion_row < 0, np.inf, at[:, None] - emotion_row)
    viewpoint_age = np.where(viewpoint_row < 0, np.inf, at[:, None, None] - viewpoint_row)
    d = np.stack([snaps[r].distress_raw for r in rows]) * age_weight(emotion_age, config.decay_after, config.half_life)
    g = np.stack([snaps[r].g_raw for r in rows]) * age_weight(viewpoint_age, config.decay_after, config.half_life)
    blocks = np.zeros((len(rows), len(PATTERNS)))
    for k, r in enumerate(rows):
        if patterns[r] in PATTERNS:
            blocks[k, PATTERNS.index(patterns[r])] = 1.0
    others = ~np.eye(n, dtype=bool)
    person = np.zeros((len(rows), n, len(STATE_NAMES)))
    person[..., 0] = d
    person[..., 1] = np.isfinite(emotion_age)
    person[..., 2] = _age_feature(emotion_age)
    if n > 1:
        person[..., 3] = np.where(others, d[:, None, :], -np.inf).max(axis=2)
        person[..., 4] = (d.sum(axis=1)[:, None] - d) / (n - 1)
        person[..., 5] = (g * others).sum(axis=2) / (n - 1)
        person[..., 6] = (g * others).sum(axis=1) / (n - 1)
    person[..., 7] = float(family)
    for k, last in enumerate(lasts):
        if last is not None and 0 <= last < n:
            person[k, last, 8] = 1.0
    person[..., 9:] = blocks[:, None, :]
    index, source, target = _ordered_pairs(n)
    pairs = np.zeros((len(rows), len(index), len(PAIR_STATE_NAMES)))
    age = viewpoint_age[:, source, target]
    pairs[..., 0] = g[:, source, target]
    pairs[..., 1] = np.isfinite(age)
    pairs[..., 2] = _age_feature(age)
    pairs[..., 3] = g[:, target, source]
    pairs[..., 4] = d[:, source]
    pairs[..., 5] = d[:, target]
    pairs[..., 6] = float(family)
    pairs[..., 7:] = blocks[:, None, :]
    annotated = np.isfinite(viewpoint_age)
    return tuple(PointState(d[k], g[k], annotated[k], person[k], pairs[k], index) for k in range(len(rows)))


def latest_relation_patterns(sample: Sample) -> list[str | None]:
    """``latest_relation_pattern(sample, row)`` of every row, in one forward pass (the per-row call scans back
    to the last label: quadratic in the length of a conversation)."""
    labels = frozenset(relation_patterns(scenario_of(sample)).keys())
    latest: str | None = None
    out: list[str | None] = []
    for row in sample.rows:
        # The same rule as ``latest_relation_pattern``: relation_pattern when non-empty, else the cycle state.
        label = (row.relation_pattern or "").strip() or (row.relation_cycle_state or "").strip()
        if label in labels:
            latest = label
        out.append(latest)
    return out


def _next_values(snaps: Sequence[Snapshot], n: int) -> tuple[dict, dict]:
    """Per participant and per ordered pair: the rows where a fresh annotation lands and its value."""
    emotion: dict[int, list[tuple[int, float]]] = {i: [] for i in range(n)}
    pair: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for position, snap in enumerate(snaps):
        for i in np.flatnonzero(snap.emotion_row == position):
            emotion[int(i)].append((position, float(snap.distress_raw[i])))
        for i, j in zip(*np.nonzero(snap.viewpoint_row == position)):
            pair.setdefault((int(i), int(j)), []).append((position, float(snap.g_raw[i, j])))
    return emotion, pair


def _first_within(events: list[tuple[int, float]], after: int, horizon: int) -> float | None:
    for position, value in events:
        if after < position <= after + horizon:
            return value
        if position > after + horizon:
            return None
    return None


def transitions(
    samples: Iterable[Sample], groups: dict[str, str], config: StateConfig, horizon: int
) -> tuple[Transitions, Transitions]:
    """The (distress, viewpoint) training rows of ``samples``."""
    rows_d: dict[str, list] = {k: [] for k in Transitions.__dataclass_fields__}
    rows_g: dict[str, list] = {k: [] for k in Transitions.__dataclass_fields__}
    for sample in samples:
        people = tuple(participants(sample))
        if not people:
            continue
        snaps = snapshots(sample, people, config)
        episode = episode_states(sample, config, people, snaps=snaps)
        emotion_events, pair_events = _next_values(snaps, len(people))
        group = groups[sample.sample_id]
        for row, state in zip(episode.rows, episode.states):
            action = recorded_action(sample, row + 1, people)
            kind = recipient_kind(action, len(people))
            X_person, X_pair = action_features(state, action)
            for i in range(len(people)):
                _add(rows_d, emotion_events[i], row, horizon, X_person[i], state.distress[i], i, action, kind, group)
            for k, (i, j) in enumerate(state.pair_index):
                events = pair_events.get((i, j), [])
                _add(rows_g, events, row, horizon, X_pair[k], state.g[i, j], i, action, kind, group)
    return _finish(rows_d, len(DISTRESS_FEATURES)), _finish(rows_g, len(PAIR_FEATURES))


def _add(
    rows: dict[str, list],
    events,
    row: int,
    horizon: int,
    x: np.ndarray,
    current: float,
    source: int,
    action: SupportAction,
    kind: str | None,
    group: str,
) -> None:
    """One training row when ``events`` holds a fresh annotation within ``horizon`` rows after ``row``; the
    recipient kind and strategy are the action's as seen by participant (or pair source) ``source``."""
    target = _first_within(events, row, horizon)
    if target is None:
        return
    supported = action.intervene and source in action.recipients
    values = (
        x,
        target,
        current,
        group,
        kind if supported else None,
        action.strategy if supported else None,
        supported,
        action.intervene,
    )
    for key, value in zip(("X", "y", "current", "groups", "kinds", "strategies", "supported", "therapist"), values):
        rows[key].append(value)


def _finish(rows: dict[str, list], width: int) -> Transitions:
    return Transitions(
        X=np.asarray(rows["X"], dtype=np.float64).reshape(-1, width),
        y=np.asarray(rows["y"], dtype=np.float64),
        current=np.asarray(rows["current"], dtype=np.float64),
        groups=list(rows["groups"]),
        kinds=list(rows["kinds"]),
        strategies=list(rows["strategies"]),
        supported=np.asarray(rows["supported"], dtype=bool),
        therapist=np.asarray(rows["therapist"], dtype=bool),
    )


# ----- the fitted model --------------------------------------------------------------------------------------


class LinearHead(BaseModel):
    """One ridge regression: y = X @ coef + intercept, with the residual standard deviation ``sigma``."""

    model_config = ConfigDict(frozen=True)

    features: list[str]
    coef: list[float]
    intercept: float
    alpha: float
    sigma: float = Field(ge=0)
    n: int

    @cached_property
    def _coef(self) -> np.ndarray:
        return np.asarray(self.coef)  # converted once, not at every step

    def predict(self, X: np.ndarray) -> np.ndarray:
        return X @ self._coef + self.intercept


class OutcomeModel(BaseModel):
    """F, as written by ``rescue-bench dynamics fit`` (JSON). ``fitted_on`` records the data and the split."""

    model_config = ConfigDict(frozen=True)

    format_version: int = FORMAT_VERSION
    state: StateConfig = StateConfig()
    horizon: int = Field(5, ge=1, description="rows within which the next annotation is looked for")
    distress: LinearHead
    viewpoint: LinearHead
    fitted_on: dict[str, Any] = Field(default_factory=dict)

    # --- prediction ---
    def mean(
        self, state: PointState, action: SupportAction, effect_scale: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """The expected next (d, G) under ``action``; pairs without a viewpoint stay neutral (F models how a
        relational state changes, not whether a new one appears)."""
        d, g = self._scaled(state, action, effect_scale)
        return np.clip(d, 0.0, 1.0), np.clip(g, 0.0, 1.0) * state.annotated_pairs

    def sample(
        self, state: PointState, action: SupportAction, rng: np.random.Generator, effect_scale: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """One draw of the next (d, G): Gaussian noise of the held-out residual sd around ``mean``, clipped."""
        d, g = self._scaled(state, action, effect_scale)
        d = d + self.distress.sigma * rng.standard_normal(d.shape)
        g = g + self.viewpoint.sigma * rng.standard_normal(g.shape)
        return np.clip(d, 0.0, 1.0), np.clip(g, 0.0, 1.0) * state.annotated_pairs

    def _scaled(self, state: PointState, action: SupportAction, effect_scale: float) -> tuple[np.ndarray, np.ndarray]:
        """F(x, a0) + scale (F(x, a) - F(x, a0)), unclipped (a0 = no intervention)."""
        d, g = self._raw(state, action)
        if effect_scale != 1.0:
            d0, g0 = self._raw(state, NO_INTERVENTION)
            d, g = d0 + effect_scale * (d - d0), g0 + effect_scale * (g - g0)
        return d, g

    def _raw(self, state: PointState, action: SupportAction) -> tuple[np.ndarray, np.ndarray]:
        X_person, X_pair = action_features(state, action)
        d = self.distress.predict(X_person)
        n = d.size
        g = np.zeros((n, n))
        if state.pair_index:
            source, target = np.asarray(state.pair_index).T
            g[source, target] = self.viewpoint.predict(X_pair)
        return d, g

    # --- files ---
    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> OutcomeModel:
        try:
            return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"cannot read the outcome model {path}: {exc.strerror}") from None
        except ValueError as exc:
            first = str(exc).splitlines()
            raise ValueError(
                f"{path} is not an outcome model file ({first[1] if len(first) > 1 else first[0]})"
            ) from None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


ALPHAS = (0.1, 1.0, 10.0, 100.0)


def fit_head(data: Transitions, features: list[str], *, alpha: float | None = None, folds: int = 5) -> LinearHead:
    """Ridge on ``data``; ``alpha`` chosen by grouped cross-validation when None; sigma = held-out residual sd."""
    from sklearn.linear_model import Ridge

    if data.y.size < 10:
        raise ValueError(f"only {data.y.size} transitions with a next annotation: too few to fit the outcome model")
    best, best_error, residuals = alpha, np.inf, None
    for candidate in [alpha] if alpha is not None else ALPHAS:
        predicted = cross_val_predict_grouped(lambda candidate=candidate: Ridge(alpha=candidate), data, folds)
        error = float(np.mean((predicted - data.y) ** 2))
        if error < best_error:
            best, best_error, residuals = candidate, error, predicted - data.y
    model = Ridge(alpha=best).fit(data.X, data.y)
    return LinearHead(
        features=features,
        coef=model.coef_.tolist(),
        intercept=float(model.intercept_),
        alpha=best,
        sigma=float(np.std(residuals)),
        n=int(data.y.size),
    )


def cross_val_predict_grouped(make_model, data: Transitions, folds: int) -> np.ndarray:
    """Out-of-fold predictions with whole groups held out (``GroupKFold``); fewer groups than folds = one per group."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(data.groups))
    splitter = GroupKFold(n_splits=max(2, min(folds, n_groups)))
    predicted = np.zeros_like(data.y)
    for train, test in splitter.split(data.X, data.y, data.groups):
        predicted[test] = make_model().fit(data.X[train], data.y[train]).predict(data.X[test])
    return predicted


def fit_outcome_model(
    samples: Sequence[Sample],
    groups: dict[str, str],
    *,
    state: StateConfig | None = None,
    horizon: int = 5,
    fitted_on: dict[str, Any] | None = None,
) -> OutcomeModel:
    """F fitted on ``samples`` (``groups``: sample id -> group, for the grouped choice of the ridge penalty)."""
    state = state or StateConfig()
    d_rows, g_rows = transitions(samples, groups, state, horizon)
    if len(set(d_rows.groups)) < 2:
        raise ValueError("the outcome model needs conversations of at least two groups (couples or families)")
    return OutcomeModel(
        state=state,
        horizon=horizon,
        distress=fit_head(d_rows, DISTRESS_FEATURES),
        viewpoint=fit_head(g_rows, PAIR_FEATURES),
        fitted_on={
            **(fitted_on or {}),
            "samples": len(samples),
            "distress_transitions": int(d_rows.y.size),
            "viewpoint_transitions": int(g_rows.y.size),
        },
    )
