r"""The behaviour model :math:`\pi_b(a \mid s)` of the real therapist, fitted on the training side: when the therapist
speaks, to whom, with which strategy, in the state the closed loop simulates.

``RescueSim-v1`` adds :math:`\beta \log \pi_b(a_t \mid s_t)` to the group reward (issue 24): with the agent's own
entropy bonus at the same :math:`\beta` the expected return is :math:`E[r] - \beta\,\mathrm{KL}(\pi \| \pi_b)`, the
KL-regularised objective of offline RL and RLHF, which keeps the agent where the data has evidence about what
support does. ``policies/`` reuses the model as the cloned therapist.

Factorisation: :math:`\pi_b(a \mid s) = P(z \mid s)` for keeping listening (z = 0), and for an intervention
:math:`P(z{=}1 \mid s)\, P(k \mid s)\, \frac{1}{N_k(s)}\, P(\text{strategy} \mid s)`, where k is the recipient kind
(``last``: the last speaker alone; ``everyone``; ``other``: one other participant; ``subset``: two or more, not
everyone), :math:`N_k` the number of recipient sets of that kind in the state (a kind is spread evenly over its
sets), and the strategy model is restricted to the scenario's taxonomy and renormalised. Each factor is a
multinomial logistic regression (scikit-learn), its inverse penalty C chosen by grouped cross-validated log loss
over couples and families, mixed with 1 % of the uniform distribution so that no action has log-probability below
about -9 (an action the data never shows is improbable, not impossible).

Features :math:`\phi(s)` (fixed before fitting; every one observable in the closed loop, read from the simulated
state's latest values as from the data's latest annotations): max, mean and the last speaker's distress; the mean
and max negativity of the directed viewpoints; the family scenario; the number of participants / 6; the share of
the last 4 decision points at which the therapist spoke; the decision points since the therapist last spoke
(capped at 10, / 10). Rows of the data where a factor's label is unknown (no recipients, a strategy outside the
taxonomy) are left out of that factor only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.domain import decision_rows, participants, scenario_of
from rescue_env.data.schema import Sample
from rescue_env.dynamics.outcome import SupportAction, recorded_action
from rescue_env.dynamics.state import StateConfig, snapshots
from rescue_env.taxonomy import strategies

FEATURES = (
    "d_max",
    "d_mean",
    "d_last_speaker",
    "g_mean",
    "g_max",
    "family",
    "n_participants",
    "recent_speaks",
    "since_spoke",
)
KINDS = ("last", "everyone", "other", "subset")
HISTORY = 4
SINCE_CAP = 10
UNIFORM_MIX = 0.01
C_GRID = (0.01, 0.1, 1.0, 10.0)


def features(
    distress: Sequence[float],
    g: Sequence[Sequence[float]],
    last_speaker: int | None,
    family: bool,
    past: Sequence[SupportAction],
) -> np.ndarray:
    """:math:`\\phi(s)` (module docstring) from the latest values, the last client speaker and the past decisions."""
    d = np.asarray(distress, dtype=np.float64)
    n = d.size
    G = np.asarray(g, dtype=np.float64).reshape(n, n)
    off = G[~np.eye(n, dtype=bool)] if n > 1 else np.zeros(1)
    recent = list(past)[-HISTORY:]
    since = next((k for k, a in enumerate(reversed(past)) if a.intervene), SINCE_CAP)
    return np.array(
        [
            d.max() if n else 0.0,
            d.mean() if n else 0.0,
            d[last_speaker] if last_speaker is not None and 0 <= last_speaker < n else 0.0,
            off.mean(),
            off.max(),
            float(family),
            n / 6.0,
            sum(a.intervene for a in recent) / HISTORY,
            min(since, SINCE_CAP) / SINCE_CAP,
        ]
    )


def recipient_kind(recipients: frozenset[int], n: int, last_speaker: int | None) -> str | None:
    """The kind of a recipient set (module docstring); None for no recipients."""
    if not recipients:
        return None
    if len(recipients) >= n:
        return "everyone"
    if len(recipients) == 1:
        return "last" if last_speaker in recipients else "other"
    return "subset"


def kind_sizes(n: int, last_speaker: int | None) -> dict[str, int]:
    """N_k: how many recipient sets of each kind a state offers (n participants)."""
    has_last = last_speaker is not None and 0 <= last_speaker < n
    if n == 1:  # the one participant is everyone (``recipient_kind`` checks "everyone" first)
        return {"last": 0, "everyone": 1, "other": 0, "subset": 0}
    return {
        "last": int(has_last),
        "everyone": 1,
        "other": n - int(has_last),
        "subset": max(0, 2**n - n - 2),  # sets of 2 .. n-1 members
    }


class LogitHead(BaseModel):
    """A multinomial logistic regression: P(class) = softmax(x @ coef.T + intercept) over ``classes``."""

    model_config = ConfigDict(frozen=True)

    classes: list[str]
    coef: list[list[float]]
    intercept: list[float]
    C: float
    n: int

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.coef), np.asarray(self.intercept)

    def probabilities(self, x: np.ndarray) -> dict[str, float]:
        coef, intercept = self._arrays
        if len(self.classes) == 1:
            return {self.classes[0]: 1.0}
        logits = coef @ x + intercept
        if len(self.classes) == 2 and logits.size == 1:  # scikit-learn's binary form: one logit for classes[1]
            p = 1.0 / (1.0 + np.exp(-logits[0]))
            return {self.classes[0]: float(1 - p), self.classes[1]: float(p)}
        logits = logits - logits.max()
        weights = np.exp(logits)
        return dict(zip(self.classes, (weights / weights.sum()).tolist()))


@dataclass
class BehaviourData:
    """The training rows of the three factors."""

    X: np.ndarray
    z: np.ndarray
    groups: list[str]
    kind: list[str | None]
    strategy: list[str | None]


def behaviour_data(samples: Sequence[Sample], groups: dict[str, str], config: StateConfig) -> BehaviourData:
    """One row per decision point of ``samples``: :math:`\\phi(s)` and what the recorded therapist did next."""
    X, z, labels, kinds, chosen = [], [], [], [], []
    for sample in samples:
        people = tuple(participants(sample))
        if not people:
            continue
        valid = set(strategies(scenario_of(sample)).keys())
        family = scenario_of(sample) == "family"
        snaps = snapshots(sample, people, config)
        past: list[SupportAction] = []
        for row in decision_rows(sample):
            speaker = sample.rows[row].primary_speaker.strip()
            last = people.index(speaker) if speaker in people else None
            snap = snaps[row]
            X.append(features(snap.distress_raw, snap.g_raw, last, family, past))
            action = recorded_action(sample, row + 1, people)
            z.append(int(action.intervene))
            labels.append(groups[sample.sample_id])
            kinds.append(recipient_kind(action.recipients, len(people), last) if action.intervene else None)
            chosen.append(action.strategy if action.intervene and action.strategy in valid else None)
            past.append(action)
    return BehaviourData(np.asarray(X, dtype=np.float64).reshape(-1, len(FEATURES)), np.asarray(z), labels, kinds,
                         chosen)  # fmt: skip


def _fit_logit(X: np.ndarray, y: Sequence[str], groups: Sequence[str]) -> LogitHead:
    """Multinomial logistic regression with C chosen by grouped cross-validated log loss (``C_GRID``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    labels = np.asarray(y)
    classes = sorted(set(labels.tolist()))
    if len(classes) == 1:
        return LogitHead(classes=classes, coef=[[0.0] * X.shape[1]], intercept=[0.0], C=1.0, n=len(labels))
    index = {c: k for k, c in enumerate(classes)}
    codes = np.array([index[c] for c in labels])
    n_groups = len(set(groups))
    best_C, best_loss = C_GRID[0], np.inf
    if n_groups >= 2:
        splitter = GroupKFold(n_splits=min(5, n_groups))
        for C in C_GRID:
            loss, count = 0.0, 0
            for train, test in splitter.split(X, codes, list(groups)):
                if len(set(codes[train])) < 2:
                    continue
                model = LogisticRegression(C=C, max_iter=2000).fit(X[train], codes[train])
                proba = np.full((test.size, len(classes)), 1e-12)
                proba[:, model.classes_] = model.predict_proba(X[test])
                proba = (1 - UNIFORM_MIX) * proba + UNIFORM_MIX / len(classes)
                loss -= float(np.log(proba[np.arange(test.size), codes[test]]).sum())
                count += test.size
            if count and loss / count < best_loss:
                best_C, best_loss = C, loss / count
    model = LogisticRegression(C=best_C, max_iter=2000).fit(X, codes)
    fitted = [classes[k] for k in model.classes_]
    return LogitHead(
        classes=fitted, coef=model.coef_.tolist(), intercept=model.intercept_.tolist(), C=best_C, n=len(labels)
    )


class BehaviourModel(BaseModel):
    """:math:`\\pi_b`, as the three factors of the module docstring."""

    model_config = ConfigDict(frozen=True)

    speaks: LogitHead
    kind: LogitHead
    strategy: LogitHead
    fitted_on: dict = Field(default_factory=dict)

    def log_prob(
        self,
        x: np.ndarray,
        intervene: bool,
        recipients: frozenset[int],
        strategy: str | None,
        n: int,
        last_speaker: int | None,
        valid: Sequence[str],
    ) -> float:
        """:math:`\\log \\pi_b(a \\mid s)` of an action (an intervention without recipients is keeping listening, as
        F reads it), ``x`` = ``features(...)`` of the state, ``valid`` the scenario's strategies."""
        p_speak = self.speaks.probabilities(x).get("1", 0.0)
        p_speak = (1 - UNIFORM_MIX) * p_speak + UNIFORM_MIX / 2
        if not intervene or not recipients:
            return float(np.log(1.0 - p_speak))
        kind = recipient_kind(recipients, n, last_speaker)
        sizes = kind_sizes(n, last_speaker)
        offered = [k for k in KINDS if sizes[k] > 0]
        p_kind = self._restricted(self.kind.probabilities(x), offered)[kind] / sizes[kind]
        p_strategy = self._restricted(self.strategy.probabilities(x), list(valid)).get(strategy or "", 0.0)
        if strategy not in valid:  # an unknown or out-of-taxonomy strategy: spread as the uniform share
            p_strategy = 1.0 / max(1, len(valid))
        return float(np.log(p_speak) + np.log(p_kind) + np.log(p_strategy))

    @staticmethod
    def _restricted(probabilities: dict[str, float], allowed: Sequence[str]) -> dict[str, float]:
        """The distribution renormalised over ``allowed``, mixed with ``UNIFORM_MIX`` of the uniform over them."""
        mass = {a: probabilities.get(a, 0.0) for a in allowed}
        total = sum(mass.values())
        k = len(allowed)
        if total <= 0:
            return dict.fromkeys(allowed, 1.0 / k)
        return {a: (1 - UNIFORM_MIX) * m / total + UNIFORM_MIX / k for a, m in mass.items()}

    def distribution(
        self, x: np.ndarray, n: int, last_speaker: int | None, valid: Sequence[str]
    ) -> tuple[float, dict[str, float], dict[str, float]]:
        """(P(speak), P(kind) over the kinds the state offers, P(strategy) over ``valid``): what the cloned
        therapist samples from."""
        p_speak = (1 - UNIFORM_MIX) * self.speaks.probabilities(x).get("1", 0.0) + UNIFORM_MIX / 2
        sizes = kind_sizes(n, last_speaker)
        kinds = self._restricted(self.kind.probabilities(x), [k for k in KINDS if sizes[k] > 0])
        return p_speak, kinds, self._restricted(self.strategy.probabilities(x), list(valid))


def fit_behaviour_model(
    samples: Sequence[Sample], groups: dict[str, str], config: StateConfig | None = None, fitted_on: dict | None = None
) -> BehaviourModel:
    """:math:`\\pi_b` fitted on ``samples`` (the training side)."""
    data = behaviour_data(samples, groups, config or StateConfig())
    if data.z.size < 10 or len(set(data.groups)) < 2:
        raise ValueError("the behaviour model needs decision points of at least two groups (couples or families)")
    known_kind = [k for k, kind in enumerate(data.kind) if kind is not None]
    known_strategy = [k for k, s in enumerate(data.strategy) if s is not None]
    if not known_kind or not known_strategy:
        raise ValueError("the behaviour model needs therapist turns with a known target and strategy")
    pick = lambda rows, values: ([values[k] for k in rows], [data.groups[k] for k in rows])  # noqa: E731
    kinds, kind_groups = pick(known_kind, data.kind)
    chosen, strategy_groups = pick(known_strategy, data.strategy)
    return BehaviourModel(
        speaks=_fit_logit(data.X, [str(v) for v in data.z], data.groups),
        kind=_fit_logit(data.X[known_kind], kinds, kind_groups),
        strategy=_fit_logit(data.X[known_strategy], chosen, strategy_groups),
        fitted_on={**(fitted_on or {}), "decision_points": int(data.z.size)},
    )


__all__ = [
    "BehaviourModel",
    "FEATURES",
    "KINDS",
    "behaviour_data",
    "features",
    "fit_behaviour_model",
    "kind_sizes",
    "recipient_kind",
]
