"""Validation of the outcome model F: held-out error against baselines, the estimated effects of support, and
what the data shows before any model (``rescue-bench dynamics report``).

Held-out means a grouped split (``rescue_env.data.splits``: segments of one couple or family never straddle
it): F is fitted on the train side and scored on the test side. Intervals are percentile bootstraps over groups
(couples and families), refitting F at its chosen penalty for the effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rescue_env.data.schema import Sample
from rescue_env.dynamics.outcome import (
    DISTRESS_FEATURES,
    KINDS,
    LinearHead,
    OutcomeModel,
    StateConfig,
    Transitions,
    transitions,
)
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

N_ACTION = len(DISTRESS_FEATURES) - DISTRESS_FEATURES.index("therapist_speaks")


def _mse_ci(errors: np.ndarray, groups: Sequence[str], rng: np.random.Generator, n_boot: int) -> list[float]:
    """Mean of ``errors`` with a 95 % bootstrap interval over groups."""
    labels = np.asarray(groups)
    unique = np.unique(labels)
    sums = np.array([errors[labels == g].sum() for g in unique])
    counts = np.array([np.sum(labels == g) for g in unique])
    draws = rng.integers(0, unique.size, size=(n_boot, unique.size))
    boot = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    return [float(errors.mean()), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]


def grouped_mean_ci(values: np.ndarray, groups: Sequence[str], rng: np.random.Generator, n_boot: int) -> list[float]:
    """[mean, low, high] of per-row ``values`` (squared errors, paired differences of them), the 95 % percentile
    bootstrap resampling ``groups`` (couples and families): the interval of every table of this module."""
    return _mse_ci(np.asarray(values, dtype=np.float64), groups, rng, n_boot)


def held_out_errors(
    head: LinearHead, train: Transitions, test: Transitions, rng: np.random.Generator, n_boot: int
) -> dict[str, Any]:
    """Mean squared error on ``test`` of F's ``head`` (fitted on ``train``), gradient boosting and the training
    mean (fitted on ``train``), persistence, and F's gain over persistence per test row (paired), each with a
    95 % interval over test groups."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    predictions = {
        "F (ridge)": np.clip(head.predict(test.X), 0, 1),
        "gradient boosting": np.clip(
            HistGradientBoostingRegressor(max_iter=200, learning_rate=0.05, random_state=0)
            .fit(train.X, train.y)
            .predict(test.X),
            0,
            1,
        ),
        "persistence": test.current,
        "training mean": np.full_like(test.y, train.y.mean()),
    }
    out: dict[str, Any] = {"n_test": int(test.y.size), "alpha": head.alpha, "mse": {}}
    for name, predicted in predictions.items():
        out["mse"][name] = _mse_ci((predicted - test.y) ** 2, test.groups, rng, n_boot)
    gain = (predictions["persistence"] - test.y) ** 2 - (predictions["F (ridge)"] - test.y) ** 2
    out["gain_over_persistence"] = _mse_ci(gain, test.groups, rng, n_boot)
    return out


def effects(data: Transitions, alpha: float, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    """F's estimated effect on next distress of the support each participant actually received, by recipient
    kind and by strategy (and for participants when the therapist supported someone else), averaged over those
    transitions, with a 95 % bootstrap interval over groups (F refitted on each resample)."""
    from sklearn.linear_model import Ridge

    cells: dict[str, np.ndarray] = {}
    for kind in KINDS:
        cells[f"supported {kind}"] = np.array([k == kind for k in data.kinds])
    for strategy in ALL_STRATEGY_KEYS:
        cells[f"strategy {strategy}"] = np.array([s == strategy for s in data.strategies])
    cells["therapist supports someone else"] = data.therapist & ~data.supported
    groups = np.asarray(data.groups)
    unique = np.unique(groups)
    by_group = [np.flatnonzero(groups == g) for g in unique]

    def estimate(index: np.ndarray) -> dict[str, float]:
        model = Ridge(alpha=alpha).fit(data.X[index], data.y[index])
        delta = data.X[:, -N_ACTION:] @ model.coef_[-N_ACTION:]
        return {name: float(delta[mask].mean()) if mask.any() else float("nan") for name, mask in cells.items()}

    point = estimate(np.arange(data.y.size))
    draws = [
        estimate(np.concatenate([by_group[i] for i in rng.integers(0, unique.size, unique.size)]))
        for _ in range(n_boot)
    ]
    table = {}
    for name, mask in cells.items():
        values = np.array([d[name] for d in draws])
        values = values[np.isfinite(values)]
        low, high = np.percentile(values, [2.5, 97.5]).tolist() if values.size else [float("nan")] * 2
        table[name] = {"effect": point[name], "low": low, "high": high, "n": int(mask.sum())}
    return table


def observed_changes(data: Transitions, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    """Before any model: the mean of (next annotated distress - current aged distress) by what happened in
    between, with a 95 % bootstrap interval over groups."""
    change = data.y - data.current
    cells = {
        "therapist supports them": data.supported,
        "therapist supports someone else": data.therapist & ~data.supported,
        "clients among themselves": ~data.therapist,
    }
    for strategy in ALL_STRATEGY_KEYS:
        cells[f"strategy {strategy}"] = np.array([s == strategy for s in data.strategies])
    out = {}
    for name, mask in cells.items():
        if mask.sum() == 0:
            continue
        groups = [g for g, m in zip(data.groups, mask) if m]
        mean, low, high = _mse_ci(change[mask], groups, rng, n_boot)
        out[name] = {"mean": mean, "low": low, "high": high, "n": int(mask.sum())}
    return out


def dynamics_report(
    train: Sequence[Sample],
    test: Sequence[Sample],
    groups: dict[str, str],
    model: OutcomeModel,
    *,
    n_boot: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything ``rescue-bench dynamics report`` prints, as one JSON-able dict; ``model`` is F fitted on
    ``train`` (``fitting.fit_on_split``), so that the report describes the F an env would use."""
    rng = np.random.default_rng(seed)
    state: StateConfig = model.state
    d_train, g_train = transitions(train, groups, state, model.horizon)
    d_test, g_test = transitions(test, groups, state, model.horizon)
    return {
        "distress": held_out_errors(model.distress, d_train, d_test, rng, n_boot),
        "viewpoint": held_out_errors(model.viewpoint, g_train, g_test, rng, n_boot),
        "effects": effects(d_train, model.distress.alpha, rng, n_boot),
        "observed": observed_changes(d_train, rng, n_boot),
        "train_samples": len(train),
        "test_samples": len(test),
        "bootstrap": n_boot,
        "seed": seed,
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    lines = [
        f"Held-out: fitted on {report['train_samples']} conversations, scored on {report['test_samples']} "
        "(grouped split); mean squared error, 95 % interval over test groups.",
        "",
    ]
    for head, title in (("distress", "next distress d"), ("viewpoint", "next viewpoint negativity g")):
        block = report[head]
        lines += [f"| {title} (n = {block['n_test']}) | MSE | 95 % CI |", "|---|---:|---|"]
        for name, (mean, low, high) in block["mse"].items():
            lines.append(f"| {name} | {mean:.4f} | [{low:.4f}, {high:.4f}] |")
        mean, low, high = block["gain_over_persistence"]
        lines += [f"| F's gain over persistence (paired) | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] |", ""]
    lines += [
        "F's estimated effect on next distress of the support received (F(x, recorded) - F(x, no "
        "intervention), mean over those transitions of the training side; 95 % CI over groups):",
        "",
        "| support | n | effect | 95 % CI |",
        "|---|---:|---:|---|",
    ]
    for name, row in report["effects"].items():
        if row["n"]:
            lines.append(f"| {name} | {row['n']} | {row['effect']:+.3f} | [{row['low']:+.3f}, {row['high']:+.3f}] |")
    lines += [
        "",
        "Observed, before any model: next annotated distress minus current (aged) distress, by what "
        "happened in between (training side):",
        "",
        "| in between | n | change | 95 % CI |",
        "|---|---:|---:|---|",
    ]
    for name, row in report["observed"].items():
        lines.append(f"| {name} | {row['n']} | {row['mean']:+.3f} | [{row['low']:+.3f}, {row['high']:+.3f}] |")
    return "\n".join(lines) + "\n"
