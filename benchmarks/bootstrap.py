"""Vectorised percentile bootstrap of the tasks' headline metrics: the runner's 95 % intervals
(``benchmarks.results.bootstrap_summary``) and the paired test of ``benchmarks.reports.compare``.

Resample r draws ``n`` instance positions with replacement: the r-th ``rng.integers(0, n, size=n)`` of
``np.random.default_rng(seed)`` (``benchmarks.metrics.resample_indices`` draws blocks of rows at once, the same
numbers). A task's ``summary_draws(scores)`` turns its per-instance scores into arrays once and returns a
:data:`Statistic`: every headline metric of ``task.summary`` for a whole block of resamples at once, NaN where
``summary`` gives None. A task without it, or a metric it leaves out, falls back to ``task.summary`` per resample
(:func:`loop_draws`, also the reference the tests compare with).

The draws are bit-identical to ``task.summary`` on each resampled list, because every metric is computed with the
same floating-point operations in the same order:

* counts (tp, hits, label support) are sums of 0/1 weights, exact in any order (one matrix product with the
  multiplicities W, ``W[r, i]`` = how often resample r drew instance i);
* ratios, F1 and balanced accuracy: the element-wise operations of ``benchmarks.metrics._div`` / ``_f1``;
* MRR is ``np.sum`` of the reciprocal ranks in resample order: ``values[index].sum(axis=1)`` is numpy's pairwise
  sum of each row, the same as ``np.sum`` of that row;
* the ER/VP means are Python's ``sum`` (left to right) over the present values: ``np.cumsum`` along the row adds
  in the same order (a missing value adds 0.0, which changes no sum);
* RPP's macro F1 is ``np.mean(f1s[active])``: the active labels' F1 are packed to the front of each row and
  averaged with ``np.mean`` per group of rows with the same number of active labels.

Rows of one conversation are not independent; like the authors' code, instances are resampled one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks.metrics import gold_ranks, resample_indices

__all__ = [
    "Resample",
    "Statistic",
    "binary_statistic",
    "intervals",
    "loop_draws",
    "macro_f1_statistic",
    "mean_if_run",
    "percentile_interval",
    "ranked_statistic",
    "task_draws",
]

QUANTILES = (0.025, 0.975)  # the 95 % percentile interval, as literals: (1 - 0.95) / 2 is not exactly 0.025
CHUNK_ELEMENTS = 1 << 20  # resampled positions per block: ~8 MB per float array, whatever n is

Array = NDArray[np.float64]


class Resample:
    """A block of resamples: ``index[r]`` holds the instance positions of resample r (shape ``(rows, n)``)."""

    def __init__(self, index: NDArray[np.int64], n: int) -> None:
        self.index = index
        self.n = n

    @property
    def rows(self) -> int:
        return int(self.index.shape[0])

    @cached_property
    def weights(self) -> Array:
        """``W[r, i]``: how often resample r drew instance i."""
        flat = (np.arange(self.rows)[:, None] * self.n + self.index).ravel()
        return np.bincount(flat, minlength=self.rows * self.n).reshape(self.rows, self.n).astype(float)

    def counts(self, masks: NDArray[Any]) -> Array:
        """Resampled sums of per-instance 0/1 (or small integer) columns: ``(n,)`` -> ``(rows,)``, ``(n, k)`` ->
        ``(rows, k)``; exact, since every partial sum is an integer below 2**53."""
        return self.weights @ np.asarray(masks, dtype=float)

    def pairwise_sum(self, values: Array) -> Array:
        """``np.sum(values[resample])`` per resample, in resample order (numpy's pairwise summation)."""
        return values[self.index].sum(axis=1)

    def sequential_sum(self, values: Array) -> Array:
        """Python's ``sum(values[resample])`` per resample: left to right, as ``np.cumsum``."""
        return np.cumsum(values[self.index], axis=1)[:, -1]


Statistic = Callable[[Resample], dict[str, Array]]
"""Per-metric values of a block of resamples, each of shape ``(rows,)``; NaN where the metric has no value."""


def _div(num: Array, den: Array, empty: float = 0.0) -> Array:
    """``num / den`` element-wise; ``empty`` where ``den`` is 0 (0.0 as ``metrics._div``; NaN = no value)."""
    return np.divide(num, den, out=np.full(np.shape(num), empty, dtype=float), where=den != 0)


def _f1(precision: Array, recall: Array) -> Array:
    return _div(2.0 * precision * recall, precision + recall)


# ----- the statistics of the tasks' summaries ------------------------------------------------------------------------


def binary_statistic(gold: Sequence[bool], pred: Sequence[bool | None]) -> Statistic:
    """``benchmarks.metrics.binary_metrics``' rates (ITP): ``precision recall f1`` of yes, ``precision_no
    recall_no f1_no``, ``accuracy``, ``balanced_accuracy``; a ``None`` prediction is the wrong label."""
    g = np.array([bool(x) for x in gold], dtype=bool)
    p = np.array([(not gi) if x is None else bool(x) for x, gi in zip(pred, g)], dtype=bool)
    columns = np.stack([g & p, ~g & p, ~g & ~p, g & ~p], axis=1)  # tp fp tn fn

    def statistic(resample: Resample) -> dict[str, Array]:
        tp, fp, tn, fn = resample.counts(columns).T
        precision, recall = _div(tp, tp + fp), _div(tp, tp + fn)
        precision_no, recall_no = _div(tn, tn + fn), _div(tn, tn + fp)
        return {
            "precision": precision,
            "recall": recall,
            "f1": _f1(precision, recall),
            "precision_no": precision_no,
            "recall_no": recall_no,
            "f1_no": _f1(precision_no, recall_no),
            "accuracy": _div(tp + tn, np.full(resample.rows, float(resample.n))),
            "balanced_accuracy": (recall + recall_no) / 2.0,
        }

    return statistic


def ranked_statistic(
    gold: Sequence[str], ranked: Sequence[Sequence[str] | None], ks: Sequence[int] = (1, 2, 3)
) -> Statistic:
    """``benchmarks.metrics.ranking_metrics``' ``recall@k`` for each k and ``mrr`` (a miss and a failure rank 0)."""
    ranks = gold_ranks(gold, ranked, max_rank=max(ks))
    hit = ranks > 0
    ks = sorted(set(ks))
    columns = np.stack([hit & (ranks <= k) for k in ks], axis=1)
    reciprocal = np.divide(1.0, ranks, out=np.zeros(len(ranks), dtype=float), where=hit)

    def statistic(resample: Resample) -> dict[str, Array]:
        size = np.full(resample.rows, float(resample.n))
        hits = resample.counts(columns)
        out = {f"recall@{k}": _div(hits[:, j], size) for j, k in enumerate(ks)}
        out["mrr"] = _div(resample.pairwise_sum(reciprocal), size)
        return out

    return statistic


def _masked_mean(values: Array, active: NDArray[np.bool_]) -> Array:
    """``np.mean(values[r][active[r]])`` per row (0.0 for a row with nothing active), with numpy's own summation
    order: the active entries are packed to the front and each group of rows with the same count is averaged by
    ``np.mean`` along contiguous rows."""
    order = np.argsort(~active, axis=1, kind="stable")
    packed = np.take_along_axis(values, order, axis=1)
    counts = active.sum(axis=1)
    out = np.zeros(values.shape[0], dtype=float)
    for count in np.unique(counts):
        if count == 0:
            continue
        rows = counts == count
        out[rows] = np.ascontiguousarray(packed[rows, :count]).mean(axis=1)
    return out


def macro_f1_statistic(
    gold: Sequence[str],
    top1: Sequence[str | None],
    groups: Sequence[str],
    labels_for: Callable[[frozenset[str]], Sequence[str]],
) -> Statistic:
    """``LabelReport.macro_f1`` of the top-1 labels (F1 averaged over the labels with gold support or a prediction).

    The label set may depend on which ``groups`` (scenarios) a resample holds (RPP: one scenario's set, or the
    pooled one): ``labels_for(groups present)``. A prediction outside the set is wrong and predicts no label; a
    gold outside it raises ``ValueError``, as ``label_metrics`` does."""
    group_names = sorted(set(groups))
    group_of = np.array([group_names.index(x) for x in groups], dtype=np.int64)
    membership = np.eye(len(group_names), dtype=bool)[group_of] if group_names else np.zeros((0, 0), dtype=bool)

    def codes(labels: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        index = {label: i for i, label in enumerate(labels)}
        return (
            np.array([index.get(x, -1) for x in gold], dtype=np.int64),
            np.array([index.get(x, -1) if x is not None else -1 for x in top1], dtype=np.int64),
        )

    cache: dict[frozenset[str], tuple[int, NDArray[Any], NDArray[np.bool_]]] = {}

    def columns(present: frozenset[str]) -> tuple[int, NDArray[Any], NDArray[np.bool_]]:
        if present not in cache:
            labels = list(labels_for(present))
            g, p = codes(labels)
            k = len(labels)
            one_hot = np.vstack([np.eye(k, dtype=bool), np.zeros((1, k), dtype=bool)])  # code -1 -> no label
            cache[present] = (k, np.hstack([one_hot[g], one_hot[p], one_hot[g] & (g == p)[:, None]]), g < 0)
        return cache[present]

    def statistic(resample: Resample) -> dict[str, Array]:
        out = np.zeros(resample.rows, dtype=float)
        present = resample.counts(membership) > 0 if group_names else np.zeros((resample.rows, 0), dtype=bool)
        for pattern in np.unique(present, axis=0):
            rows = (present == pattern).all(axis=1)
            k, cols, unknown = columns(frozenset(g for g, on in zip(group_names, pattern) if on))
            sums = resample.weights[rows] @ np.column_stack([cols, unknown]).astype(float)
            if sums[:, -1].any():
                raise ValueError("gold labels outside the label set")
            support, predicted, tp = sums[:, :k], sums[:, k : 2 * k], sums[:, 2 * k : 3 * k]
            f1 = _f1(_div(tp, predicted), _div(tp, support))
            out[rows] = _masked_mean(f1, (support > 0) | (predicted > 0))
        return {"macro_f1": out}

    return statistic


def _sums_exactly(values: Array, n: int) -> bool:
    """Whether every partial sum of up to ``n`` of ``values`` is exact in float64, so that the order of the additions
    cannot matter: all are multiples of 2**-20 (integers, halves: the 1-5 scores, S_ER, errors) and the largest
    possible sum stays below 2**53 units."""
    scaled = values * 2.0**20
    return bool(np.all(scaled == np.round(scaled))) and float(np.max(np.abs(scaled), initial=0.0)) * n < 2.0**53


def mean_if_run(
    values: Sequence[float | None], valid: Sequence[bool] | None = None, ran: Sequence[bool] | None = None
) -> Callable[[Resample], Array]:
    """Mean of the present (not None) ``values`` of a resample, as ``sum(present) / len(present)``; NaN when none
    is present. With ``valid`` and ``ran`` (ER/VP's rule for the judge and BERTScore), also NaN where the metric was
    not run in the resample: no valid answer with ``ran`` set, unless every answer in it failed."""
    present = np.array([v is not None for v in values], dtype=bool)
    filled = np.array([float(v) if v is not None else 0.0 for v in values], dtype=float)
    exact = _sums_exactly(filled, len(filled))  # then one matrix product gives Python's sum, bit for bit
    columns = [present.astype(float)] + ([filled] if exact else [])
    rule = valid is not None and ran is not None
    if rule:
        ok = np.array(valid, dtype=bool)
        columns += [ok.astype(float), (ok & np.array(ran, dtype=bool)).astype(float)]
    matrix = np.stack(columns, axis=1)

    def statistic(resample: Resample) -> Array:
        sums = resample.counts(matrix)
        total = sums[:, 1] if exact else resample.sequential_sum(filled)
        mean = _div(total, sums[:, 0], empty=math.nan)
        if not rule:
            return mean
        n_valid, n_ran = sums[:, -2], sums[:, -1]
        return np.where((n_valid == 0) | (n_ran > 0), mean, math.nan)

    return statistic


# ----- drawing ---------------------------------------------------------------------------------------------------


def loop_draws(
    summary: Callable[[list[Mapping[str, Any]]], Mapping[str, float | None]],
    scores: Sequence[Mapping[str, Any]],
    index: NDArray[np.int64],
    metrics: Iterable[str],
) -> dict[str, Array]:
    """``summary`` on every resampled list (None -> NaN): the reference the vectorised draws equal."""
    metrics = list(metrics)
    out = {m: np.empty(len(index)) for m in metrics}
    for r, rows in enumerate(index):
        values = summary([scores[i] for i in rows])
        for metric in metrics:
            value = values.get(metric)
            out[metric][r] = math.nan if value is None else float(value)
    return out


def task_draws(
    task: Any,
    score_lists: Sequence[Sequence[Mapping[str, Any]]],
    metrics: Sequence[str],
    resamples: int,
    seed: int,
    *,
    vectorised: bool = True,
) -> list[dict[str, Array]]:
    """The bootstrap draws of ``metrics`` for each of ``score_lists`` (aligned lists of the same length: one
    resample draws the same positions in all, as the paired test needs), ``resamples`` values per metric.

    ``task.summary_draws`` where the task has it and ``vectorised``; ``task.summary`` per resample otherwise."""
    n = len(score_lists[0]) if score_lists else 0
    if any(len(scores) != n for scores in score_lists):
        raise ValueError("the score lists differ in length")
    build = getattr(task, "summary_draws", None) if vectorised else None
    statistics = [build(list(scores)) if build is not None else None for scores in score_lists]
    parts: list[dict[str, list[Array]]] = [{m: [] for m in metrics} for _ in score_lists]
    for index in resample_indices(n, resamples, seed, chunk_elements=CHUNK_ELEMENTS):
        resample = Resample(index, n)
        for scores, statistic, part in zip(score_lists, statistics, parts):
            values = statistic(resample) if statistic is not None else {}
            missing = [m for m in metrics if m not in values]
            if missing:
                values = {**values, **loop_draws(task.summary, scores, index, missing)}
            for metric in metrics:
                part[metric].append(np.asarray(values[metric], dtype=float))
    return [{m: np.concatenate(v) if v else np.empty(0) for m, v in part.items()} for part in parts]


def percentile_interval(draws: Array) -> tuple[float, float] | None:
    """The 95 % percentile interval of the draws that have a value (NaN = none); None when no draw has one."""
    values = draws[~np.isnan(draws)]
    if values.size == 0:
        return None
    low, high = np.quantile(values, QUANTILES)
    return float(low), float(high)


def intervals(
    task: Any, scores: Sequence[Mapping[str, Any]], resamples: int, seed: int, *, vectorised: bool = True
) -> dict[str, tuple[float, float] | None]:
    """95 % percentile intervals of every headline metric of ``task.summary(scores)``, resampling instances;
    None for a metric without a value (point or every draw), and everywhere for no instance or no resample."""
    point = task.summary(list(scores))
    if not scores or resamples <= 0:
        return {k: None for k in point}
    metrics = [k for k, v in point.items() if v is not None]
    (draws,) = task_draws(task, [scores], metrics, resamples, seed, vectorised=vectorised)
    return {k: percentile_interval(draws[k]) if k in draws else None for k in point}
