"""Label-based metrics for the RESCUE-Bench classification and ranking tasks, plus bootstrap confidence intervals.

The paper (§5.2, Table 4; App. A) scores the four label-based tasks as follows:

* ITP (intervention timing): precision, recall and F1 of the ``yes`` (should-speak) class  -> :func:`binary_metrics`.
* RPP (relation pattern): accuracy of the top-1 relation label                           -> :func:`ranking_metrics`
  (``recall@1``) and, for per-label detail, :func:`label_metrics`.
* STP / SSP (support target / support strategy): Rec. = Recall@1 and MRR over a top-3
  ranking, where a gold outside the top 3 gets reciprocal rank 0                         -> :func:`ranking_metrics`.

All aggregates are micro means over instances, as in the authors' code (reference-spec §2.7, §3.5, §4.5).

Where this module deliberately differs from the authors' code:

* A failed or missing answer is passed as ``None`` and is always scored as wrong. The authors' ITP code turns a
  failure into ``no`` (correct for a gold ``no``), and their RPP code ranks the gold first on failure (always
  correct); here a failure on a gold ``no`` is a false positive and on a gold ``yes`` a false negative, and a
  failed ranking gets rank 0.
* :class:`LabelReport` gives two macro F1 values: ``macro_f1`` averages over the labels that occur in the gold *or*
  in the predictions (the usual scikit-learn convention), while ``macro_f1_all_labels`` averages over every label of
  the closed set, as the authors' RPP code does (zero-support labels then pull the mean down).

Every division by zero gives 0.0. Strings are compared exactly: callers normalise labels beforehand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

__all__ = [
    "FAILED_COLUMN",
    "OTHER_COLUMN",
    "LabelReport",
    "binary_metrics",
    "bootstrap_ci",
    "gold_rank",
    "gold_ranks",
    "label_metrics",
    "mean_ci",
    "ranking_metrics",
    "resample_indices",
]

OTHER_COLUMN = "<other>"
FAILED_COLUMN = "<failed>"

_CHUNK_ELEMENTS = 1 << 22  # bootstrap index draws per chunk (bounded memory; fixed, so results stay deterministic)


def _div(num: float, den: float) -> float:
    """``num / den``, or 0.0 when the denominator is zero."""
    return float(num) / float(den) if den else 0.0


def _f1(precision: float, recall: float) -> float:
    return _div(2.0 * precision * recall, precision + recall)


def _check_lengths(gold: Sequence[object], pred: Sequence[object]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold and predictions differ in length: {len(gold)} != {len(pred)}")


# --------------------------------------------------------------------------------------------------------------------
# ITP: binary decisions
# --------------------------------------------------------------------------------------------------------------------


def binary_metrics(gold: Sequence[bool], pred: Sequence[bool | None]) -> dict[str, float]:
    """Confusion counts and P/R/F1 for a yes/no task, ``True`` (yes) being the positive class (ITP, Table 4).

    A ``None`` prediction (failed or missing answer) is scored as the opposite of the gold label: a false negative for a
    gold yes, a false positive for a gold no. Keys: ``tp fp tn fn`` (counts), ``precision recall f1`` (yes class),
    ``precision_no recall_no f1_no``, ``accuracy``, ``balanced_accuracy`` (mean of the two recalls), ``n`` and
    ``failed`` (number of ``None`` predictions).
    """
    _check_lengths(gold, pred)
    g = np.fromiter((bool(x) for x in gold), dtype=bool, count=len(gold))
    failed = np.fromiter((p is None for p in pred), dtype=bool, count=len(pred))
    p = np.fromiter((bool(x) if x is not None else False for x in pred), dtype=bool, count=len(pred))
    p = np.where(failed, ~g, p)

    tp = int(np.sum(g & p))
    fp = int(np.sum(~g & p))
    tn = int(np.sum(~g & ~p))
    fn = int(np.sum(g & ~p))
    n = len(g)

    precision, recall = _div(tp, tp + fp), _div(tp, tp + fn)
    precision_no, recall_no = _div(tn, tn + fn), _div(tn, tn + fp)
    return {
        "tp": float(tp),
        "fp": float(fp),
        "tn": float(tn),
        "fn": float(fn),
        "precision": precision,
        "recall": recall,
        "f1": _f1(precision, recall),
        "precision_no": precision_no,
        "recall_no": recall_no,
        "f1_no": _f1(precision_no, recall_no),
        "accuracy": _div(tp + tn, n),
        "balanced_accuracy": (recall + recall_no) / 2.0,
        "n": float(n),
        "failed": float(np.sum(failed)),
    }


# --------------------------------------------------------------------------------------------------------------------
# RPP / STP / SSP: top-k rankings
# --------------------------------------------------------------------------------------------------------------------


def gold_rank(gold: str, items: Sequence[str] | None, max_rank: int = 3) -> int:
    """1-based rank of ``gold`` among the first ``max_rank`` of ``items`` (its first occurrence); 0 for a miss or a
    failure (``None``). One instance of :func:`gold_ranks`, without the array."""
    if items is None:
        return 0
    if isinstance(items, str):
        raise TypeError("ranked item is a string, expected a sequence of strings")
    top = list(items[:max_rank])
    return top.index(gold) + 1 if gold in top else 0


def gold_ranks(gold: Sequence[str], ranked: Sequence[Sequence[str] | None], max_rank: int = 3) -> NDArray[np.int64]:
    """Per-instance 1-based rank of the gold item in its ranked list; 0 means a miss.

    The rank is the position of the *first* occurrence of the gold (duplicates later in the list are ignored). It is 0
    when the gold is absent, when it first appears beyond ``max_rank`` (the paper's top-3: a gold at position 4 earns
    nothing), or when the prediction is ``None`` (failure).
    """
    _check_lengths(gold, ranked)
    if max_rank < 1:
        raise ValueError(f"max_rank must be >= 1, got {max_rank}")
    ranks = []
    for i, (g, items) in enumerate(zip(gold, ranked)):
        if isinstance(items, str):
            raise TypeError(f"ranked[{i}] is a string, expected a sequence of strings")
        ranks.append(gold_rank(g, items, max_rank))
    return np.array(ranks, dtype=np.int64)


def ranking_metrics(
    gold: Sequence[str], ranked: Sequence[Sequence[str] | None], ks: Sequence[int] = (1, 2, 3)
) -> dict[str, float]:
    """Recall@k and MRR over ranked predictions (RPP accuracy = ``recall@1``; STP/SSP Rec. = ``recall@1``, MRR).

    Ranks come from :func:`gold_ranks` with ``max_rank = max(ks)``, so the reciprocal rank of a gold outside the top
    ``max(ks)`` is 0. Keys: ``recall@k`` for each k, ``mrr``, ``n`` and ``failed`` (``None`` predictions). With no
    instances every mean is 0.0.
    """
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be a non-empty sequence of positive integers, got {ks!r}")
    ranks = gold_ranks(gold, ranked, max_rank=max(ks))
    n = len(ranks)
    hit = ranks > 0
    out: dict[str, float] = {}
    for k in sorted(set(ks)):
        out[f"recall@{k}"] = _div(np.sum(hit & (ranks <= k)), n)
    reciprocal = np.divide(1.0, ranks, out=np.zeros(n, dtype=float), where=hit)
    out["mrr"] = _div(np.sum(reciprocal), n)
    out["n"] = float(n)
    out["failed"] = float(sum(r is None for r in ranked))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Top-1 classification over a closed label set
# --------------------------------------------------------------------------------------------------------------------


class LabelReport(BaseModel):
    """Top-1 classification report over a closed label set.

    ``confusion[i][j]`` counts instances with gold ``labels[i]`` and prediction ``columns[j]``; ``columns`` is
    ``labels`` followed by ``"<other>"`` (a prediction outside the label set) and ``"<failed>"`` (``None``).
    ``per_label[label]`` holds ``precision``, ``recall``, ``f1``, ``support`` (gold count) and ``predicted``
    (prediction count) for every label, zero-support labels included.
    """

    accuracy: float
    macro_f1: float
    macro_f1_all_labels: float
    per_label: dict[str, dict[str, float]]
    labels: list[str]
    confusion: list[list[int]]
    columns: list[str]
    n: int


def label_metrics(gold: Sequence[str], pred: Sequence[str | None], labels: Sequence[str]) -> LabelReport:
    """Accuracy, per-label P/R/F1, macro F1 and a confusion matrix for top-1 predictions.

    ``None`` is a failed prediction and an unknown string an out-of-set one; both count as wrong, lower the recall of
    the gold label and are not false positives of any label. ``macro_f1`` averages F1 over labels with support > 0 or
    at least one prediction; ``macro_f1_all_labels`` averages over all ``labels`` (the authors' RPP convention, §4.5).
    Gold labels must belong to ``labels``.
    """
    _check_lengths(gold, pred)
    label_list = list(labels)
    if not label_list:
        raise ValueError("labels must not be empty")
    if len(set(label_list)) != len(label_list):
        raise ValueError("labels must be unique")
    index = {label: i for i, label in enumerate(label_list)}
    unknown_gold = sorted({g for g in gold if g not in index})
    if unknown_gold:
        raise ValueError(f"gold labels outside the label set: {unknown_gold}")

    k = len(label_list)
    other_col, failed_col = k, k + 1
    confusion = np.zeros((k, k + 2), dtype=np.int64)
    for g, p in zip(gold, pred):
        col = failed_col if p is None else index.get(p, other_col)
        confusion[index[g], col] += 1

    tp = np.diag(confusion[:, :k])
    support = confusion.sum(axis=1)
    predicted = confusion[:, :k].sum(axis=0)
    per_label: dict[str, dict[str, float]] = {}
    f1s = np.zeros(k, dtype=float)
    for i, label in enumerate(label_list):
        precision, recall = _div(tp[i], predicted[i]), _div(tp[i], support[i])
        f1s[i] = _f1(precision, recall)
        per_label[label] = {
            "precision": precision,
            "recall": recall,
            "f1": float(f1s[i]),
            "support": float(support[i]),
            "predicted": float(predicted[i]),
        }
    active = (support > 0) | (predicted > 0)
    n = len(gold)
    return LabelReport(
        accuracy=_div(np.sum(tp), n),
        macro_f1=float(np.mean(f1s[active])) if active.any() else 0.0,
        macro_f1_all_labels=float(np.mean(f1s)),
        per_label=per_label,
        labels=label_list,
        confusion=confusion.tolist(),
        columns=[*label_list, OTHER_COLUMN, FAILED_COLUMN],
        n=n,
    )


# --------------------------------------------------------------------------------------------------------------------
# Bootstrap confidence intervals
# --------------------------------------------------------------------------------------------------------------------


def _check_bootstrap_args(n: int, resamples: int, confidence: float) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def resample_indices(
    n: int, resamples: int, seed: int, *, chunk_elements: int = _CHUNK_ELEMENTS
) -> Iterator[NDArray[np.int64]]:
    """Yield ``(rows, n)`` arrays of indices drawn with replacement, ``resamples`` rows in all, from one seeded rng.

    Row r holds the same numbers as the r-th ``rng.integers(0, n, size=n)`` of ``np.random.default_rng(seed)``:
    numpy fills a ``(rows, n)`` block row-major from the same stream, so the chunking never changes a draw."""
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, chunk_elements // max(n, 1))
    done = 0
    while done < resamples:
        rows = min(rows_per_chunk, resamples - done)
        yield rng.integers(0, n, size=(rows, n))
        done += rows


def _percentile_interval(stats: NDArray[np.float64], confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float],
    n: int,
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``n`` instances.

    Each resample is an index array of size ``n`` drawn with replacement from ``range(n)``; ``statistic`` maps it to a
    float (e.g. ``lambda idx: scores[idx].mean()``). The result is deterministic given ``seed``
    (``np.random.default_rng(seed)``). ``n == 0`` gives ``(nan, nan)``.
    """
    _check_bootstrap_args(n, resamples, confidence)
    if n == 0:
        return float("nan"), float("nan")
    stats = np.fromiter(
        (float(statistic(idx)) for chunk in resample_indices(n, resamples, seed) for idx in chunk),
        dtype=float,
        count=resamples,
    )
    return _percentile_interval(stats, confidence)


def mean_ci(
    values: Sequence[float], *, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (vectorised; same draws as :func:`bootstrap_ci`)."""
    arr = np.asarray(values, dtype=float)
    n = arr.shape[0]
    _check_bootstrap_args(n, resamples, confidence)
    if n == 0:
        return float("nan"), float("nan")
    stats = np.concatenate([arr[chunk].mean(axis=1) for chunk in resample_indices(n, resamples, seed)])
    return _percentile_interval(stats, confidence)
