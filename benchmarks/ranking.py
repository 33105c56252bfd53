"""Ranked answers shared by RPP, STP and SSP: all three ask for ``{"id": ..., "ranking": [3 choices]}``.

Parsing (out-of-set entries and repeats dropped, never padded), scoring (rank of the gold in the top 3; a failure
is a miss), recall@k/MRR summaries, failure counts, and the choice orders the built-in agents answer with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.base import Instance, Prediction
from benchmarks.bootstrap import Statistic, ranked_statistic
from benchmarks.metrics import gold_rank, ranking_metrics
from benchmarks.parsing import match_ranked, parse_batch
from rescue_env.data.schema import Scenario
from rescue_env.taxonomy import LabelSet

TOP_K = 3
"""Length of a ranked answer (the paper's top-3)."""

RANKING_KEY = "ranking"
# Tolerated spellings of the answer field (the authors' own keys among them); "ranking" is the one we ask for.
_RANKING_ALIASES = (RANKING_KEY, "top3", "relation_top3", "target_top3", "strategy_top3", "labels")

Choices = LabelSet | Sequence[str]


def answer_example(what: str) -> str:
    """The answer schema shown to the model: placeholders, not real labels, so the example biases nothing."""
    ranking = f'["<most likely {what}>", "<second {what}>", "<third {what}>"]'
    return f'{{"answers": [{{"id": "1", "{RANKING_KEY}": {ranking}}}, {{"id": "2", "{RANKING_KEY}": {ranking}}}]}}'


def one_scenario(batch: Sequence[Instance]) -> Scenario:
    """The scenario of a batch; a batch mixing couple and family instances has no single label set."""
    scenarios = {instance.scenario for instance in batch}
    if len(scenarios) != 1:
        raise ValueError(f"a batch must hold instances of one scenario, got {sorted(scenarios)}")
    return batch[0].scenario


def parse_ranked(
    text: str | None, batch: Sequence[Instance], choices_of: Callable[[Instance], Choices]
) -> list[Prediction]:
    """One prediction per instance: its top-3 choices (out-of-set entries and repeats dropped, a longer list cut
    to 3, a shorter one kept short). Failures: the batch's (``no_answer``, ``malformed_json``), ``missing_item``,
    ``missing_field`` and ``out_of_set: ...`` (no valid choice at all)."""

    def parse_item(answer: Mapping[str, Any], instance: Instance) -> tuple[list[str] | None, str | None, bool]:
        raw = next((answer[key] for key in _RANKING_ALIASES if key in answer), None)
        return match_ranked(raw, choices_of(instance), k=TOP_K)

    return parse_batch(text, batch, parse_item)


def score_ranked(instance: Instance, prediction: Prediction, gold_key: str) -> dict[str, Any]:
    """Rank of the gold in the top 3 (0 = miss; a failure is a miss). ``top1`` is None for a failure."""
    gold = instance.gold[gold_key]
    ranking = list(prediction.value) if prediction.ok and prediction.value else None
    rank = gold_rank(gold, ranking, max_rank=TOP_K)
    return {
        "scenario": instance.scenario,
        "gold": gold,
        "ranking": ranking,
        "top1": ranking[0] if ranking else None,
        "rank": rank,
        "failure": prediction.failure,
        "normalised": prediction.normalised,
    }


def ranked_summary(scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """recall@1/2/3 and MRR (micro means; a gold outside the top 3 and a failure both count 0)."""
    m = ranking_metrics([s["gold"] for s in scores], [s["ranking"] for s in scores], ks=(1, 2, 3))
    return {k: m[k] for k in ("recall@1", "recall@2", "recall@3", "mrr")}


def ranked_summary_draws(scores: Sequence[Mapping[str, Any]]) -> Statistic:
    """:func:`ranked_summary` over blocks of bootstrap resamples (``benchmarks.bootstrap``)."""
    return ranked_statistic([s["gold"] for s in scores], [s["ranking"] for s in scores], ks=(1, 2, 3))


def failure_counts(scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many answers failed (by reason, the text before ``:``) and how many needed label normalisation."""
    reasons = Counter(str(s["failure"]).split(":", 1)[0] for s in scores if s["failure"] is not None)
    return {
        "n": len(scores),
        "failed": sum(reasons.values()),
        "failures": dict(sorted(reasons.items())),
        "normalised": sum(bool(s["normalised"]) for s in scores),
    }


def by_scenario(
    scores: Sequence[Mapping[str, Any]], summarise: Callable[[Sequence[Mapping[str, Any]]], dict[str, float | None]]
) -> dict[str, dict[str, float | None]]:
    """``summarise`` per scenario present (the paper reports couple and family apart, Tables 11-12)."""
    out = {}
    for scenario in ("couple", "family"):
        part = [s for s in scores if s["scenario"] == scenario]
        if part:
            out[scenario] = summarise(part)
    return out


def choice_keys(choices: Choices) -> list[str]:
    return list(choices.keys()) if isinstance(choices, LabelSet) else list(dict.fromkeys(choices))


def oracle_ranking(gold: str, choices: Choices) -> list[str]:
    """The gold first, then the first other choices (up to 3 in all)."""
    return [gold, *(c for c in choice_keys(choices) if c != gold)][:TOP_K]


def random_ranking(choices: Choices, rng: np.random.Generator) -> list[str]:
    """Up to 3 distinct choices drawn uniformly without replacement."""
    keys = choice_keys(choices)
    picked = rng.choice(len(keys), size=min(TOP_K, len(keys)), replace=False)
    return [keys[int(i)] for i in picked]


def majority_ranking(choices: Choices, pool_golds: Sequence[str]) -> list[str]:
    """This instance's choices by how often each is the gold in the pool (ties and unseen: choice order)."""
    counts = Counter(pool_golds)
    keys = choice_keys(choices)
    return sorted(keys, key=lambda c: (-counts[c], keys.index(c)))[:TOP_K]


def ranked_by_score(scores: Mapping[str, float], fallback: Sequence[str]) -> list[str]:
    """Labels with a positive score first (highest first, ties in ``fallback`` order), then ``fallback``."""
    order = {label: i for i, label in enumerate(fallback)}
    hits = sorted((k for k, v in scores.items() if v > 0), key=lambda k: (-scores[k], order.get(k, len(order))))
    return list(dict.fromkeys([*hits, *fallback]))[:TOP_K]


def baseline_answers(gold_key: str, choices_of: Callable[[Instance], Choices]):
    """The oracle, random and majority answers of a ranked task whose gold is ``instance.gold[gold_key]``."""

    def oracle_answer(instance: Instance) -> dict[str, Any]:
        return {RANKING_KEY: oracle_ranking(instance.gold[gold_key], choices_of(instance))}

    def random_answer(instance: Instance, sample: Any, rng: np.random.Generator) -> dict[str, Any]:
        return {RANKING_KEY: random_ranking(choices_of(instance), rng)}

    def majority_answer(instance: Instance, pool: Sequence[Instance]) -> dict[str, Any]:
        """This instance's choices by how often each is the gold in ``pool`` (same scenario)."""
        golds = [i.gold[gold_key] for i in pool if i.scenario == instance.scenario]
        return {RANKING_KEY: majority_ranking(choices_of(instance), golds)}

    return oracle_answer, random_answer, majority_answer
