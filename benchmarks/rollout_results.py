"""What a rollout measured: per-scope metrics from per-step records, with 95 % bootstrap intervals over episodes,
and the files ``results.json``, ``results.csv`` and ``results.md`` of a rollout run.

Pure functions of the step records (``benchmarks.rollout.step_record``): the same records give the same report,
so a killed-and-resumed rollout reproduces an uninterrupted one exactly.

- timing: precision, recall and F1 of ``intervene`` (the yes class, as the ITP task scores it) and accuracy, over
  every decision point with a gold (every step of a replay, none of the closed loop ``RescueSim-v0``, whose
  reports leave the imitation metrics empty); a decision whose answer failed counts as what the fallback did
  (keep listening);
- target: exact match and mean Jaccard of A against A*, on the steps where z = z* = 1 and A* is known (the
  steps where the env scores the target);
- strategy: accuracy of a against a*, on the steps where z = z* = 1 and a* is known;
- failures: the steps whose answer could not be used (by kind) and their rate;
- returns: the mean episode return under the env's reward, its mean discounted return, and the mean episode
  return under every preset of the replays (``info["episode"]["returns_by_preset"]``, same lambda, kappa, gamma);
- conduct and outcome: the share of steps the policy intervened at, and (``RescueSim-v0``) the mean of the
  final max distress ``info["episode"]["final_max_distress"]``.

Intervals resample whole episodes (steps of one conversation are not independent): percentile 95 % intervals of
``bootstrap`` resamples, seeded. Every statistic is a ratio of per-episode sums, so one matrix product per scope
gives every resample at once.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from rescue_env.data.schema import SCENARIOS
from rescue_env.reward import PRESETS

SCOPES: tuple[str, ...] = (*SCENARIOS, "all")
MISSING = "—"  # a metric with nothing to measure (e.g. no family episode), never 0.00

# Per-episode sums from which every metric follows (columns of the statistics matrix).
STAT_COLUMNS: tuple[str, ...] = (
    "steps",
    "gold_steps",
    "intervention_steps",
    "tp",
    "fp",
    "tn",
    "fn",
    "target_steps",
    "target_exact",
    "target_jaccard",
    "strategy_steps",
    "strategy_correct",
    "invalid_steps",
    "failed_steps",
    "return",
    "discounted_return",
    *(f"return_{p}" for p in PRESETS),
    "final_max_distress",
)
_COLUMN = {name: i for i, name in enumerate(STAT_COLUMNS)}
# Sums of per-episode values, NaN where an env does not report them (presets: the replays; final distress: the sim).
VALUE_COLUMNS = frozenset(
    {"target_jaccard", "return", "discounted_return", "final_max_distress", *(f"return_{p}" for p in PRESETS)}
)

# (metric key, title, kind) in report order; kind "percent" prints x 100.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("timing_precision", "timing precision %", "percent"),
    ("timing_recall", "timing recall %", "percent"),
    ("timing_f1", "timing F1 %", "percent"),
    ("timing_accuracy", "timing accuracy %", "percent"),
    ("target_exact", "target exact match %", "percent"),
    ("target_jaccard", "target mean Jaccard", "number"),
    ("strategy_accuracy", "strategy accuracy %", "percent"),
    ("failure_rate", "failed decisions %", "percent"),
    ("intervention_rate", "intervened %", "percent"),
    ("mean_final_max_distress", "final max distress", "number"),
    ("mean_return", "mean return", "number"),
    ("mean_discounted_return", "mean discounted return", "number"),
    *((f"return_{p}", f"mean return [{p}]", "number") for p in PRESETS),
)


class TimingMetrics(BaseModel):
    precision: float
    recall: float
    f1: float
    accuracy: float
    tp: int
    fp: int
    tn: int
    fn: int


class ScopeReport(BaseModel):
    """One scope (a scenario, or ``all`` pooled over steps and episodes). Means are None without data."""

    episodes: int
    steps: int
    timing: TimingMetrics | None
    target_steps: int
    target_exact: float | None
    target_jaccard: float | None
    strategy_steps: int
    strategy_accuracy: float | None
    invalid_steps: int
    failed_steps: int = 0
    failures: dict[str, int] = Field(default_factory=dict)
    intervention_rate: float | None = None
    mean_final_max_distress: float | None = None
    mean_return: float | None
    mean_discounted_return: float | None
    returns_by_preset: dict[str, float | None]
    ci95: dict[str, tuple[float, float] | None] = Field(default_factory=dict)


class PolicyReport(BaseModel):
    policy: str
    data: str
    sha256: str
    reward: str
    reward_config: dict[str, Any]
    seed: int
    episodes: int
    bootstrap: int = 0
    scopes: dict[str, ScopeReport]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.model_dump(), indent=indent)


# ----------------------------------------------------------------------------------------------------------------
# statistics


def episode_stats(steps: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The per-episode sums (``STAT_COLUMNS``) of one episode's step records (the last one carries ``episode``)."""
    row = np.zeros(len(STAT_COLUMNS))
    for step in steps:
        chosen = bool(step["chosen"]["intervene"])
        row[_COLUMN["steps"]] += 1
        row[_COLUMN["intervention_steps"]] += chosen
        if step.get("gold") is None:  # a closed loop: no gold, nothing to imitate
            row[_COLUMN["invalid_steps"]] += bool(step.get("invalid"))
            row[_COLUMN["failed_steps"]] += step.get("failure") is not None
            continue
        gold = bool(step["gold"]["intervene"])
        row[_COLUMN["gold_steps"]] += 1
        row[_COLUMN["tp" if gold and chosen else "fp" if chosen else "fn" if gold else "tn"]] += 1
        target = step["components"]["target"]
        if target is not None:
            row[_COLUMN["target_steps"]] += 1
            row[_COLUMN["target_jaccard"]] += target
            row[_COLUMN["target_exact"]] += set(step["chosen"]["target"]) == set(step["gold"]["target"] or ())
        strategy = step["components"]["strategy"]
        if strategy is not None:
            row[_COLUMN["strategy_steps"]] += 1
            row[_COLUMN["strategy_correct"]] += strategy
        row[_COLUMN["invalid_steps"]] += bool(step.get("invalid"))
        row[_COLUMN["failed_steps"]] += step.get("failure") is not None
    end = steps[-1]["episode_end"] if steps else None
    if end:
        row[_COLUMN["return"]] = end["return"]
        row[_COLUMN["discounted_return"]] = end["discounted_return"]
        by_preset = end.get("returns_by_preset") or {}
        for preset in PRESETS:
            row[_COLUMN[f"return_{preset}"]] = by_preset.get(preset, np.nan)
        row[_COLUMN["final_max_distress"]] = end.get("final_max_distress", np.nan)
    return row


def _ratio(num: np.ndarray, den: np.ndarray, empty: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), empty)


def metrics_from_sums(sums: np.ndarray, episodes: np.ndarray | float) -> dict[str, np.ndarray]:
    """Every metric from summed statistics (last axis = ``STAT_COLUMNS``); works on one sum vector or on a
    matrix of bootstrap resamples. Timing ratios with a zero denominator are 0 (as ``binary_metrics``); the
    others are NaN (nothing to measure)."""
    c = {name: sums[..., i] for name, i in _COLUMN.items()}
    precision = _ratio(c["tp"], c["tp"] + c["fp"], 0.0)
    recall = _ratio(c["tp"], c["tp"] + c["fn"], 0.0)
    out = {
        "timing_precision": precision,
        "timing_recall": recall,
        "timing_f1": _ratio(2 * precision * recall, precision + recall, 0.0),
        "timing_accuracy": _ratio(c["tp"] + c["tn"], c["gold_steps"], np.nan),
        "target_exact": _ratio(c["target_exact"], c["target_steps"], np.nan),
        "target_jaccard": _ratio(c["target_jaccard"], c["target_steps"], np.nan),
        "strategy_accuracy": _ratio(c["strategy_correct"], c["strategy_steps"], np.nan),
        "failure_rate": _ratio(c["failed_steps"], c["steps"], np.nan),
        "intervention_rate": _ratio(c["intervention_steps"], c["steps"], np.nan),
        "mean_final_max_distress": _ratio(c["final_max_distress"], np.asarray(episodes, dtype=float), np.nan),
        "mean_return": _ratio(c["return"], np.asarray(episodes, dtype=float), np.nan),
        "mean_discounted_return": _ratio(c["discounted_return"], np.asarray(episodes, dtype=float), np.nan),
    }
    for preset in PRESETS:
        out[f"return_{preset}"] = _ratio(c[f"return_{preset}"], np.asarray(episodes, dtype=float), np.nan)
    return out


def bootstrap_intervals(stats: np.ndarray, resamples: int, seed: int) -> dict[str, tuple[float, float] | None]:
    """Percentile 95 % intervals of every metric, resampling episodes (rows of ``stats``) with replacement."""
    n = stats.shape[0]
    keys = [key for key, _, _ in METRICS]
    if n == 0 or resamples <= 0:
        return dict.fromkeys(keys)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    weights = np.zeros((resamples, n))
    np.add.at(weights, (np.arange(resamples)[:, None], draws), 1.0)
    values = metrics_from_sums(weights @ stats, float(n))
    out: dict[str, tuple[float, float] | None] = {}
    for key in keys:
        finite = values[key][np.isfinite(values[key])]
        out[key] = None if finite.size == 0 else tuple(float(x) for x in np.quantile(finite, [0.025, 0.975]))
    return out


def _value(array: np.ndarray) -> float | None:
    value = float(array)
    return None if np.isnan(value) else value


def scope_report(episodes: Sequence[Sequence[Mapping[str, Any]]], resamples: int = 0, seed: int = 0) -> ScopeReport:
    """The report of one scope from its episodes' step records."""
    stats = np.array([episode_stats(steps) for steps in episodes]).reshape(len(episodes), len(STAT_COLUMNS))
    sums = stats.sum(axis=0)
    n = len(episodes)
    m = metrics_from_sums(sums, float(n))
    c = {name: int(round(sums[i])) for name, i in _COLUMN.items() if name not in VALUE_COLUMNS}
    failures = Counter(step["failure"] for steps in episodes for step in steps if step.get("failure"))
    timing = None
    if c["gold_steps"]:
        timing = TimingMetrics(
            precision=float(m["timing_precision"]),
            recall=float(m["timing_recall"]),
            f1=float(m["timing_f1"]),
            accuracy=float(m["timing_accuracy"]),
            **{k: c[k] for k in ("tp", "fp", "tn", "fn")},
        )
    return ScopeReport(
        episodes=n,
        steps=c["steps"],
        timing=timing,
        target_steps=c["target_steps"],
        target_exact=_value(m["target_exact"]),
        target_jaccard=_value(m["target_jaccard"]),
        strategy_steps=c["strategy_steps"],
        strategy_accuracy=_value(m["strategy_accuracy"]),
        invalid_steps=c["invalid_steps"],
        failed_steps=c["failed_steps"],
        failures=dict(sorted(failures.items())),
        intervention_rate=_value(m["intervention_rate"]),
        mean_final_max_distress=_value(m["mean_final_max_distress"]),
        mean_return=_value(m["mean_return"]),
        mean_discounted_return=_value(m["mean_discounted_return"]),
        returns_by_preset={p: _value(m[f"return_{p}"]) for p in PRESETS},
        ci95=bootstrap_intervals(stats, resamples, seed),
    )


def build_report(
    episodes: Sequence[Sequence[Mapping[str, Any]]],
    *,
    policy: str,
    data: str,
    sha256: str,
    reward: str,
    reward_config: Mapping[str, Any],
    seed: int,
    bootstrap: int = 0,
) -> PolicyReport:
    """The report of a rollout: one ``ScopeReport`` per scenario and pooled (episodes in the given order)."""
    scopes = {
        scope: scope_report(
            [steps for steps in episodes if steps and scope in ("all", steps[0]["scenario"])], bootstrap, seed
        )
        for scope in SCOPES
    }
    return PolicyReport(
        policy=policy,
        data=data,
        sha256=sha256,
        reward=reward,
        reward_config=dict(reward_config),
        seed=seed,
        episodes=len(episodes),
        bootstrap=bootstrap,
        scopes=scopes,
    )


# ----------------------------------------------------------------------------------------------------------------
# text, Markdown and CSV


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def metric_value(scope: ScopeReport, key: str) -> float | None:
    """A metric of ``METRICS`` read off a scope report."""
    if key.startswith("timing_"):
        return None if scope.timing is None else getattr(scope.timing, key.removeprefix("timing_"))
    if key == "failure_rate":
        return scope.failed_steps / scope.steps if scope.steps else None
    if key.startswith("return_"):
        return scope.returns_by_preset[key.removeprefix("return_")]
    return getattr(scope, key)


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return MISSING
    return f"{100 * value:.2f}" if kind == "percent" else f"{value:.3f}"


def _counts_rows(report: PolicyReport) -> list[list[str]]:
    scopes = [report.scopes[s] for s in SCOPES]
    return [
        ["episodes", *(str(s.episodes) for s in scopes)],
        ["decision points", *(str(s.steps) for s in scopes)],
        ["target steps", *(str(s.target_steps) for s in scopes)],
        ["strategy steps", *(str(s.strategy_steps) for s in scopes)],
        ["steps with invalid bits", *(str(s.invalid_steps) for s in scopes)],
        ["failed decisions", *(str(s.failed_steps) for s in scopes)],
    ]


def _title(report: PolicyReport) -> str:
    config = report.reward_config
    return (
        f"policy {report.policy} on {report.data} ({report.episodes} episodes, seed {report.seed}); reward "
        f"{report.reward}: lam={config['lam']:g}, kappa={config['kappa']:g}, gamma={config['gamma']:g}"
    )


def format_report(report: PolicyReport) -> str:
    """The report as a plain-text table: one row per metric, one column per scope (couple, family, all); metrics
    with nothing to measure in any scope are listed after the table instead."""
    scopes = [report.scopes[s] for s in SCOPES]
    rows = _counts_rows(report)
    unmeasured = []
    for key, title, kind in METRICS:
        values = [metric_value(s, key) for s in scopes]
        if all(v is None for v in values):  # e.g. the imitation metrics of a closed loop, which has no gold
            unmeasured.append(title)
            continue
        shown = f"{title} ({report.reward})" if key == "mean_return" else title
        rows.append([shown, *(_fmt(v, kind) for v in values)])
    text = _title(report) + "\n" + table(["metric", *SCOPES], rows)
    if unmeasured:
        text += "\nnothing to measure in this run: " + ", ".join(unmeasured)
    failures = report.scopes["all"].failures
    if failures:
        text += "\nfailed decisions by kind (each became 'keep listening'): " + ", ".join(
            f"{k} {v}" for k, v in failures.items()
        )
    return text


def _with_interval(value: float | None, interval: Sequence[float] | None, kind: str) -> str:
    shown = _fmt(value, kind)
    if value is None or not interval:
        return shown
    low, high = interval
    return f"{shown} [{_fmt(low, kind)}, {_fmt(high, kind)}]"


def report_markdown(report: PolicyReport, config: Mapping[str, Any] | None = None) -> str:
    """``results.md``: counts, every metric with its 95 % interval (over episodes), failures by kind."""
    scopes = [report.scopes[s] for s in SCOPES]
    header = "| Metric | " + " | ".join(s.capitalize() if s != "all" else "Both" for s in SCOPES) + " |"
    lines = ["# Rollout results", "", _title(report) + ".", ""]
    if config:
        shown = {k: v for k, v in config.items() if v not in (None, False, 0, "")}
        lines += ["Settings: " + ", ".join(f"`{k}={v}`" for k, v in shown.items()) + ".", ""]
    lines += [
        f"Intervals: 95 % percentile bootstrap over episodes ({report.bootstrap} resamples). {MISSING}: nothing to "
        "measure.",
        "",
        header,
        "|---|" + "---:|" * len(SCOPES),
    ]
    for name, *cells in _counts_rows(report):
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for key, title, kind in METRICS:
        cells = [_with_interval(metric_value(s, key), s.ci95.get(key), kind) for s in scopes]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    kinds = sorted({k for s in scopes for k in s.failures})
    lines += ["", "## Failed decisions (each became the fallback: keep listening)", ""]
    if kinds:
        lines += ["| Kind | " + " | ".join(SCOPES) + " |", "|---|" + "---:|" * len(SCOPES)]
        lines += [f"| {k} | " + " | ".join(str(s.failures.get(k, 0)) for s in scopes) + " |" for k in kinds]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def report_csv(report: PolicyReport) -> str:
    """``results.csv``: one row per scope x metric, with its interval and the scope's counts (pandas-ready)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["scope", "metric", "value", "ci95_low", "ci95_high", "episodes", "steps", "failed_steps"])
    for name in SCOPES:
        scope = report.scopes[name]
        for key, _, _ in METRICS:
            value = metric_value(scope, key)
            low, high = scope.ci95.get(key) or ("", "")
            writer.writerow(
                [name, key, "" if value is None else value, low, high, scope.episodes, scope.steps, scope.failed_steps]
            )
    return buffer.getvalue()
