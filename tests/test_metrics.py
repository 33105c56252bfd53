"""benchmarks.metrics: hand-computed ITP / ranking / label metrics and bootstrap interval properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.metrics import (
    LabelReport,
    binary_metrics,
    bootstrap_ci,
    gold_rank,
    gold_ranks,
    label_metrics,
    mean_ci,
    ranking_metrics,
)

T, F = True, False

# --------------------------------------------------------------------------------------------------------------------
# binary_metrics (ITP)
# --------------------------------------------------------------------------------------------------------------------


def test_binary_metrics_by_hand() -> None:
    # (T,T) tp | (T,F) fn | (F,F) tn | (F,T) fp | (T,None) fn  ->  tp=1 fp=1 tn=1 fn=2
    m = binary_metrics([T, T, F, F, T], [T, F, F, T, None])
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (1, 1, 1, 2)
    assert m["n"] == 5 and m["failed"] == 1
    assert m["precision"] == pytest.approx(1 / 2)
    assert m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))  # 0.4
    assert m["f1"] == pytest.approx(0.4)
    assert m["precision_no"] == pytest.approx(1 / 3)  # tn / (tn + fn)
    assert m["recall_no"] == pytest.approx(1 / 2)  # tn / (tn + fp)
    assert m["f1_no"] == pytest.approx(0.4)
    assert m["accuracy"] == pytest.approx(2 / 5)
    assert m["balanced_accuracy"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_binary_metrics_zero_denominators_give_zero() -> None:
    empty = binary_metrics([], [])
    assert empty["n"] == 0
    for key in ("precision", "recall", "f1", "precision_no", "recall_no", "f1_no", "accuracy", "balanced_accuracy"):
        assert empty[key] == 0.0

    all_no = binary_metrics([F, F], [F, F])  # no gold yes and no predicted yes
    assert (all_no["tp"], all_no["fp"], all_no["tn"], all_no["fn"]) == (0, 0, 2, 0)
    assert all_no["precision"] == 0.0 and all_no["recall"] == 0.0 and all_no["f1"] == 0.0
    assert all_no["precision_no"] == 1.0 and all_no["recall_no"] == 1.0 and all_no["f1_no"] == 1.0
    assert all_no["accuracy"] == 1.0 and all_no["balanced_accuracy"] == 0.5


def test_binary_failure_is_wrong_on_both_classes() -> None:
    on_no = binary_metrics([F], [None])
    assert (on_no["tp"], on_no["fp"], on_no["tn"], on_no["fn"]) == (0, 1, 0, 0)
    on_yes = binary_metrics([T], [None])
    assert (on_yes["tp"], on_yes["fp"], on_yes["tn"], on_yes["fn"]) == (0, 0, 0, 1)
    assert on_no["accuracy"] == 0.0 and on_yes["accuracy"] == 0.0


def test_binary_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        binary_metrics([T, F], [T])


@given(st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.booleans())), max_size=30))
def test_binary_counts_partition_n(pairs: list[tuple[bool, bool | None]]) -> None:
    m = binary_metrics([g for g, _ in pairs], [p for _, p in pairs])
    assert m["tp"] + m["fp"] + m["tn"] + m["fn"] == m["n"] == len(pairs)
    for key in ("precision", "recall", "f1", "precision_no", "recall_no", "f1_no", "accuracy", "balanced_accuracy"):
        assert 0.0 <= m[key] <= 1.0


# --------------------------------------------------------------------------------------------------------------------
# gold_ranks / ranking_metrics (RPP, STP, SSP)
# --------------------------------------------------------------------------------------------------------------------

GOLD = ["a", "b", "c", "d", "e", "f", "g"]
RANKED: list[list[str] | None] = [
    ["a", "x", "y"],  # rank 1
    ["x", "b", "y"],  # rank 2
    ["x", "y", "c"],  # rank 3
    ["x", "y", "z"],  # absent -> 0
    ["x", "y", "z", "e"],  # position 4, beyond the top 3 -> 0
    None,  # failure -> 0
    ["x", "g", "x", "g"],  # duplicates: the first occurrence (2) counts
]


def test_gold_ranks_by_hand() -> None:
    assert gold_ranks(GOLD, RANKED).tolist() == [1, 2, 3, 0, 0, 0, 2]
    assert gold_ranks(GOLD, RANKED, max_rank=4).tolist() == [1, 2, 3, 0, 4, 0, 2]
    assert gold_ranks(["a", "a"], [[], ["a"]]).tolist() == [0, 1]  # empty and short lists
    assert gold_ranks(["g"], [["g", "x", "g"]]).tolist() == [1]
    assert gold_ranks([], []).tolist() == []
    assert gold_ranks([], []).dtype == np.int64


def test_gold_rank_is_one_instance_of_gold_ranks() -> None:
    assert [gold_rank(g, r) for g, r in zip(GOLD, RANKED)] == gold_ranks(GOLD, RANKED).tolist()
    assert gold_rank("c", ("a", "b", "c", "d"), max_rank=2) == 0  # any sequence; beyond the cut-off is a miss
    with pytest.raises(TypeError):
        gold_rank("a", "abc")


def test_ranking_metrics_by_hand() -> None:
    m = ranking_metrics(GOLD, RANKED)
    assert m["n"] == 7 and m["failed"] == 1
    assert m["recall@1"] == pytest.approx(1 / 7)
    assert m["recall@2"] == pytest.approx(3 / 7)
    assert m["recall@3"] == pytest.approx(4 / 7)
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 2) / 7)  # = 1/3
    assert m["mrr"] == pytest.approx(1 / 3)
    assert set(m) == {"recall@1", "recall@2", "recall@3", "mrr", "n", "failed"}


def test_ranking_metrics_custom_ks_extend_the_cutoff() -> None:
    m = ranking_metrics(GOLD, RANKED, ks=(1, 5))
    assert set(m) == {"recall@1", "recall@5", "mrr", "n", "failed"}
    assert m["recall@5"] == pytest.approx(5 / 7)  # the position-4 gold now counts
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 2) / 7)


def test_ranking_metrics_empty_and_bad_input() -> None:
    m = ranking_metrics([], [])
    assert m["n"] == 0 and m["recall@1"] == 0.0 and m["mrr"] == 0.0
    with pytest.raises(ValueError):
        ranking_metrics(["a"], [["a"]], ks=())
    with pytest.raises(ValueError):
        ranking_metrics(["a"], [["a"], ["b"]])
    with pytest.raises(TypeError):
        gold_ranks(["a"], ["abc"])  # a bare string is not a ranked list


_LABEL = st.sampled_from("abcde")


@given(
    st.lists(
        st.tuples(_LABEL, st.one_of(st.none(), st.lists(_LABEL, max_size=6))),
        max_size=25,
    )
)
def test_ranking_recall_monotone_and_mrr_bounded(pairs: list[tuple[str, list[str] | None]]) -> None:
    m = ranking_metrics([g for g, _ in pairs], [r for _, r in pairs])
    assert 0.0 <= m["recall@1"] <= m["recall@2"] <= m["recall@3"] <= 1.0
    assert m["recall@1"] <= m["mrr"] + 1e-12
    assert m["mrr"] <= m["recall@3"] + 1e-12


# --------------------------------------------------------------------------------------------------------------------
# label_metrics (top-1 classification, RPP per-label detail)
# --------------------------------------------------------------------------------------------------------------------


def test_label_metrics_by_hand() -> None:
    gold = ["A", "A", "A", "B", "B", "A"]
    pred = ["A", "B", None, "B", "Z", "A"]  # one failure, one out-of-set label; C has zero support
    r = label_metrics(gold, pred, ["A", "B", "C"])
    assert isinstance(r, LabelReport)
    assert r.n == 6 and r.labels == ["A", "B", "C"]
    assert r.columns == ["A", "B", "C", "<other>", "<failed>"]
    assert r.confusion == [
        [2, 1, 0, 0, 1],  # gold A
        [0, 1, 0, 1, 0],  # gold B
        [0, 0, 0, 0, 0],  # gold C
    ]
    assert r.accuracy == pytest.approx(3 / 6)

    a, b, c = r.per_label["A"], r.per_label["B"], r.per_label["C"]
    assert (a["precision"], a["recall"], a["support"], a["predicted"]) == (1.0, 0.5, 4, 2)
    assert a["f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)  # 2/3
    assert (b["precision"], b["recall"], b["f1"], b["support"]) == (0.5, 0.5, 0.5, 2)
    assert (c["precision"], c["recall"], c["f1"], c["support"], c["predicted"]) == (0, 0, 0, 0, 0)

    assert r.macro_f1 == pytest.approx((2 / 3 + 1 / 2) / 2)  # C has neither support nor predictions: left out
    assert r.macro_f1_all_labels == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)


def test_label_metrics_predicted_zero_support_label_counts_in_macro() -> None:
    r = label_metrics(["A", "B"], ["C", "B"], ["A", "B", "C", "D"])
    assert r.confusion == [[0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0] * 6, [0] * 6]
    assert r.per_label["C"]["precision"] == 0.0 and r.per_label["C"]["support"] == 0
    assert r.per_label["A"]["precision"] == 0.0  # never predicted: 0/0 -> 0
    assert r.accuracy == 0.5
    assert r.macro_f1 == pytest.approx((0 + 1 + 0) / 3)  # A (support), B, C (predicted); D left out
    assert r.macro_f1_all_labels == pytest.approx(1 / 4)


def test_label_metrics_input_checks() -> None:
    empty = label_metrics([], [], ["A"])
    assert empty.n == 0 and empty.accuracy == 0.0 and empty.macro_f1 == 0.0 and empty.confusion == [[0, 0, 0]]
    with pytest.raises(ValueError):
        label_metrics(["X"], ["A"], ["A", "B"])  # gold outside the label set
    with pytest.raises(ValueError):
        label_metrics(["A"], ["A"], ["A", "A"])
    with pytest.raises(ValueError):
        label_metrics(["A"], ["A"], [])


# --------------------------------------------------------------------------------------------------------------------
# bootstrap_ci / mean_ci
# --------------------------------------------------------------------------------------------------------------------


def _zero_one(n: int) -> np.ndarray:
    return (np.arange(n) % 3 == 0).astype(float)  # deterministic 0/1 values, mean close to 1/3


def test_bootstrap_deterministic_given_seed() -> None:
    values = _zero_one(200)

    def stat(idx: np.ndarray) -> float:
        return float(values[idx].mean())

    first = bootstrap_ci(stat, 200, resamples=300, seed=7)
    assert bootstrap_ci(stat, 200, resamples=300, seed=7) == first
    assert bootstrap_ci(stat, 200, resamples=300, seed=8) != first
    assert mean_ci(values, resamples=300, seed=7) == pytest.approx(first)  # same draws, vectorised


def test_bootstrap_interval_contains_point_estimate() -> None:
    values = _zero_one(200)
    point = 67 / 200  # indices 0, 3, ..., 198
    assert values.mean() == pytest.approx(point)
    low, high = mean_ci(values, seed=0)
    assert low < point < high
    assert low >= 0.0 and high <= 1.0
    low_b, high_b = bootstrap_ci(lambda idx: float(values[idx].mean()), 200, seed=0)
    assert low_b < point < high_b


def test_bootstrap_width_shrinks_with_n() -> None:
    low_s, high_s = mean_ci(_zero_one(50), seed=0)
    low_l, high_l = mean_ci(_zero_one(2000), seed=0)
    assert high_l - low_l < (high_s - low_s) / 2  # ~1/sqrt(40) of the width in expectation


def test_bootstrap_degenerate_cases() -> None:
    assert all(math.isnan(x) for x in bootstrap_ci(lambda idx: 0.0, 0))
    assert all(math.isnan(x) for x in mean_ci([]))
    assert mean_ci([0.25], seed=3) == (0.25, 0.25)  # every resample of one item is that item
    assert mean_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert bootstrap_ci(lambda idx: float(len(idx)), 5, resamples=10) == (5.0, 5.0)  # each resample has size n
    with pytest.raises(ValueError):
        mean_ci([1.0], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci(lambda idx: 0.0, 3, resamples=0)
