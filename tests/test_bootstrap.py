"""benchmarks.bootstrap: the vectorised bootstrap equals the per-resample ``task.summary`` reference bit for bit
(every task, every scope of ``results.json``, on the demo data with failures, judge errors and BERTScore values),
hand-computed resamples of each statistic, and the helpers' exactness claims."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from benchmarks import bootstrap
from benchmarks.base import Prediction
from benchmarks.baselines import BaselineAgent
from benchmarks.bootstrap import (
    Resample,
    binary_statistic,
    loop_draws,
    macro_f1_statistic,
    mean_if_run,
    percentile_interval,
    ranked_statistic,
)
from benchmarks.metrics import resample_indices
from benchmarks.registry import TASK_NAMES, get_task
from benchmarks.results import SCOPES, bootstrap_summary
from rescue_env.data import load_dataset


def _old_bootstrap_summary(task: Any, scores: list[dict[str, Any]], resamples: int, seed: int) -> dict[str, Any]:
    """The runner's intervals before vectorising (commit aba3db1), kept verbatim as the reference."""
    n = len(scores)
    point = task.summary(scores)
    if n == 0 or resamples <= 0:
        return {k: None for k in point}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in point if point[k] is not None}
    for _ in range(resamples):
        idx = rng.integers(0, n, size=n)
        values = task.summary([scores[i] for i in idx])
        for key in draws:
            if values.get(key) is not None:
                draws[key].append(float(values[key]))
    out: dict[str, Any] = {k: None for k in point}
    for key, values in draws.items():
        if values:
            low, high = np.quantile(values, [0.025, 0.975])
            out[key] = (float(low), float(high))
    return out


def _extras(task: Any, instance: Any, prediction: Prediction, rng: np.random.Generator) -> dict[str, Any]:
    """Judge verdicts (some missing, some failed) and BERTScore F1s (arbitrary floats) for ER/VP."""
    if not getattr(task, "generative", False):
        return {}
    draw = rng.random()
    judge = None if draw < 0.15 else {"score": None, "error": "judge call failed"} if draw < 0.25 else {"score": 3}
    if judge is not None and judge["score"] is not None:
        judge["score"] = int(rng.integers(1, 6))
    pairs = task.bertscore_pairs(instance, prediction)
    return {"judge": judge, "bertscore": [float(x) for x in rng.random(len(pairs))], "rubric": "likert"}


def demo_scores(name: str, agent: str) -> list[dict[str, Any]]:
    """Per-instance scores of a built-in agent on the demo data, every 7th answer failed."""
    task = get_task(name)
    samples = load_dataset().samples
    instances = task.build_instances(samples)
    answers = BaselineAgent(agent, task, {s.sample_id: s for s in samples}, instances, seed=0)  # type: ignore[arg-type]
    rng = np.random.default_rng(11)
    scores = []
    for k, instance in enumerate(instances):
        prediction = task.parse(answers.answer([instance]), [instance])[0]
        if k % 7 == 3:
            prediction = Prediction(instance_id=instance.instance_id, failure="malformed_json")
        score = task.score(instance, prediction, _extras(task, instance, prediction, rng))
        scores.append({**score, "scenario": instance.scenario})
    return scores


def _scopes(scores: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {s: [x for x in scores if s == "all" or x["scenario"] == s] for s in SCOPES}


@pytest.mark.parametrize("agent", ["heuristic", "random"])
@pytest.mark.parametrize("name", TASK_NAMES)
def test_intervals_equal_the_per_resample_reference(name: str, agent: str) -> None:
    task = get_task(name)
    assert callable(getattr(task, "summary_draws", None)), name  # every task is vectorised: no silent fallback
    for scope, scores in _scopes(demo_scores(name, agent)).items():
        assert scores, (name, scope)
        new = bootstrap_summary(task, scores, 300, 4)
        assert new == _old_bootstrap_summary(task, scores, 300, 4), (name, agent, scope)
        assert any(v is not None for v in new.values()), (name, scope)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_draws_equal_task_summary_on_every_resample(name: str) -> None:
    task = get_task(name)
    scores = demo_scores(name, "random")
    metrics = [k for k, v in task.summary(scores).items() if v is not None]
    (fast,) = bootstrap.task_draws(task, [scores], metrics, 150, 2)
    index = np.random.default_rng(2).integers(0, len(scores), size=(150, len(scores)))
    slow = loop_draws(task.summary, scores, index, metrics)
    for metric in metrics:
        assert np.array_equal(fast[metric], slow[metric], equal_nan=True), (name, metric)


def test_generative_rule_not_run_in_a_resample() -> None:
    # ER: instance 2 is the only judged valid answer. A resample of failures only reports their minimum (every
    # answer failed); one with instance 1 (valid, not judged) but not 2 has no S_EMO (not run).
    task = get_task("er")
    base = {"s_int": 3, "bertscore": None, "abs_error": 2, "s_er": None, "s_emo": None}
    scores = [
        {**base, "failed": True, "judged": False, "s_emo": 1.0, "s_er": 1.0, "s_int": 1},
        {**base, "failed": False, "judged": False},
        {**base, "failed": False, "judged": True, "s_emo": 4.0, "s_er": 3.5},
    ]
    index = np.array([[0, 0, 0], [1, 1, 0], [2, 1, 0], [1, 1, 1]])
    draws = task.summary_draws(scores)(Resample(index, 3))
    reference = loop_draws(task.summary, scores, index, ["s_emo", "s_er", "s_int"])
    assert draws["s_emo"] == pytest.approx([1.0, math.nan, 2.5, math.nan], nan_ok=True)  # (4 + 1) / 2 on row 2
    for metric, values in reference.items():
        assert np.array_equal(draws[metric], values, equal_nan=True), metric


# ----- hand-computed statistics ------------------------------------------------------------------------------------


def test_binary_statistic_by_hand() -> None:
    # gold [yes, no, yes], pred [yes, yes, failed]: instance 0 tp, 1 fp, 2 fn
    statistic = binary_statistic([True, False, True], [True, True, None])
    values = statistic(Resample(np.array([[0, 0, 0], [1, 1, 2], [0, 1, 2]]), 3))
    assert values["precision"].tolist() == [1.0, 0.0, 0.5]
    assert values["recall"].tolist() == [1.0, 0.0, 0.5]
    assert values["accuracy"].tolist() == [1.0, 0.0, 1 / 3]
    assert values["f1"].tolist() == [1.0, 0.0, 0.5]
    assert values["recall_no"].tolist() == [0.0, 0.0, 0.0]  # tn = 0 everywhere; no gold no in row 0: 0 / 0 -> 0
    assert values["balanced_accuracy"].tolist() == [0.5, 0.0, 0.25]


def test_ranked_statistic_by_hand() -> None:
    # ranks: 1, 2, miss (gold 4th), miss (failure)
    statistic = ranked_statistic(["a", "b", "c", "d"], [["a", "x"], ["x", "b"], ["x", "y", "z", "c"], None])
    values = statistic(Resample(np.array([[0, 1, 2, 3], [1, 1, 1, 1], [0, 0, 3, 3]]), 4))
    assert values["recall@1"].tolist() == [0.25, 0.0, 0.5]
    assert values["recall@2"].tolist() == [0.5, 1.0, 0.5]
    assert values["recall@3"].tolist() == [0.5, 1.0, 0.5]
    assert values["mrr"].tolist() == [1.5 / 4, 0.5, 0.5]


def test_macro_f1_statistic_by_hand_and_label_set_per_resample() -> None:
    # couple: gold a, top1 a (right); couple: gold b, top1 a (wrong); family: gold c, top1 None (failed)
    labels = {
        frozenset({"couple"}): ["a", "b"],
        frozenset({"family"}): ["c"],
        frozenset({"couple", "family"}): ["a", "b", "c"],
    }
    groups = ["couple", "couple", "family"]
    statistic = macro_f1_statistic(["a", "b", "c"], ["a", "a", None], groups, labels.__getitem__)
    values = statistic(Resample(np.array([[0, 1, 0], [0, 0, 0], [2, 2, 2], [0, 1, 2]]), 3))["macro_f1"]
    # row 0: a P 2/3 R 1 F1 0.8, b F1 0 -> 0.4; row 1: a only -> 1.0; row 2: c support, F1 0 -> 0.0;
    # row 3: a P 1/2 R 1 F1 2/3, b 0, c 0 -> 2/9
    assert values.tolist() == pytest.approx([0.4, 1.0, 0.0, 2 / 9])
    with pytest.raises(ValueError, match="outside the label set"):
        macro_f1_statistic(["z"], ["z"], ["couple"], lambda present: ["a"])(Resample(np.array([[0]]), 1))


def test_mean_if_run_by_hand() -> None:
    mean = mean_if_run([1, None, 4])
    assert mean(Resample(np.array([[0, 1, 2], [1, 1, 1], [2, 2, 0]]), 3)).tolist() == pytest.approx(
        [2.5, math.nan, 3.0], nan_ok=True
    )
    ruled = mean_if_run([1.0, 2.0, None], valid=[False, True, True], ran=[False, False, True])
    # row 0: only the failure (every answer failed: reported); row 1: a valid answer, none ran: not run
    assert ruled(Resample(np.array([[0, 0, 0], [1, 1, 0], [2, 1, 0]]), 3)).tolist() == pytest.approx(
        [1.0, math.nan, 1.5], nan_ok=True
    )


def test_means_are_pythons_left_to_right_sum() -> None:
    rng = np.random.default_rng(3)
    for values in (rng.random(500).tolist(), [float(x) for x in rng.integers(1, 6, 500)], [0.1, 0.2, 0.7] * 50):
        index = rng.integers(0, len(values), size=(40, len(values)))
        got = mean_if_run(values)(Resample(index, len(values)))
        assert got.tolist() == [sum(values[i] for i in row) / len(row) for row in index]


def test_masked_mean_is_numpys_mean_of_the_active_entries() -> None:
    rng = np.random.default_rng(5)
    values, active = rng.random((300, 20)), rng.random((300, 20)) < 0.6
    active[0] = False
    got = bootstrap._masked_mean(values, active)
    assert got[0] == 0.0
    assert got[1:].tolist() == [float(np.mean(v[a])) for v, a in zip(values[1:], active[1:])]


def test_resample_blocks_equal_one_draw_per_resample() -> None:
    for n, chunk in ((7, 20), (30, 1 << 20), (1, 3)):
        blocks = np.vstack(list(resample_indices(n, 25, 9, chunk_elements=chunk)))
        rng = np.random.default_rng(9)
        assert np.array_equal(blocks, np.stack([rng.integers(0, n, size=n) for _ in range(25)]))


def test_percentile_interval_drops_missing_draws() -> None:
    assert percentile_interval(np.array([math.nan, math.nan])) is None
    assert percentile_interval(np.array([1.0, math.nan, 3.0])) == tuple(np.quantile([1.0, 3.0], [0.025, 0.975]))


def test_no_instances_or_no_resamples_give_no_interval() -> None:
    task = get_task("stp")
    scores = demo_scores("stp", "heuristic")
    assert set(bootstrap_summary(task, scores, 0, 0).values()) == {None}
    assert set(bootstrap_summary(task, [], 100, 0).values()) == {None}
    assert bootstrap_summary(task, scores, 100, 0) != bootstrap_summary(task, scores, 100, 1)  # the seed matters


def test_a_task_without_summary_draws_falls_back_to_its_summary() -> None:
    itp = get_task("itp")

    class Plain:
        summary = staticmethod(itp.summary)

    scores = demo_scores("itp", "random")
    assert bootstrap.intervals(Plain(), scores, 120, 3) == bootstrap.intervals(itp, scores, 120, 3)
