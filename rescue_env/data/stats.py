"""Dataset statistics: the paper's Table 3, label distributions (Figs. 6-9) and the relation transition matrix
(Fig. 3), per scenario and overall."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from rescue_env.data.domain import (
    RelationProtocol,
    is_therapist,
    primary_strategy,
    relation_labels,
    scenario_of,
    support_target,
)
from rescue_env.data.schema import SCENARIOS, Sample, Scenario
from rescue_env.taxonomy import relation_patterns, strategies

Scope = Literal["couple", "family", "all"]
SCOPES: tuple[Scope, ...] = ("couple", "family", "all")


class CorpusStats(BaseModel):
    """Table 3 figures for one scope. Minutes are the last row's ``end_time`` of each sample (as the paper)."""

    samples: int
    turns: int
    total_minutes: float
    avg_minutes: float
    avg_turns: float
    avg_speakers: float
    therapist_turn_share: float
    """Fraction of rows spoken by the therapist (0-1)."""


class LabelStats(BaseModel):
    counts: dict[str, int]
    shares: dict[str, float]
    total: int


class TransitionStats(BaseModel):
    """Transitions between consecutive relation labels of a sample (self-transitions excluded)."""

    labels: list[str]
    counts: list[list[int]]
    row_normalised: list[list[float]]


class ScopeStats(CorpusStats):
    relation_patterns: LabelStats
    strategies: LabelStats
    transitions: TransitionStats


POSITION_BINS = 10  # Figs. 4-5: each dialogue normalised into ten bins, 0-10 % ... 90-100 %


def relative_position(row: int, rows: int) -> float:
    """Where a 0-based ``row`` sits in a sample of ``rows`` rows, in [0, 1): ``row / rows``."""
    if rows <= 0 or not 0 <= row < rows:
        raise ValueError(f"row {row} is not a row of a sample with {rows} rows")
    return row / rows


def position_bin(row: int, rows: int, bins: int = POSITION_BINS) -> int:
    """The bin (0 .. bins-1) of 0-based ``row`` in a sample of ``rows`` rows (Figs. 4-5): ``row * bins // rows``,
    in integers so that a row on a bin's edge never falls to the bin below by rounding."""
    relative_position(row, rows)  # the same range check
    return row * bins // rows


def corpus_stats(samples: Iterable[Sample]) -> CorpusStats:
    samples = list(samples)
    n = len(samples)
    turns = sum(len(s.rows) for s in samples)
    minutes = sum((s.rows[-1].end_time if s.rows else 0.0) for s in samples) / 60.0
    # Table 3 counts distinct primary speakers, the therapist and group pseudo-speakers included.
    speakers = sum(len({r.primary_speaker for r in s.rows}) for s in samples)
    therapist_turns = sum(is_therapist(r) for s in samples for r in s.rows)
    return CorpusStats(
        samples=n,
        turns=turns,
        total_minutes=minutes,
        avg_minutes=minutes / n if n else 0.0,
        avg_turns=turns / n if n else 0.0,
        avg_speakers=speakers / n if n else 0.0,
        therapist_turn_share=therapist_turns / turns if turns else 0.0,
    )


def _label_stats(counter: Counter[str], order: list[str]) -> LabelStats:
    total = sum(counter.values())
    keys = order + sorted(k for k in counter if k not in order)
    return LabelStats(
        counts={k: counter[k] for k in keys},
        shares={k: counter[k] / total if total else 0.0 for k in keys},
        total=total,
    )


def _ordered_union(*key_lists: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(k for keys in key_lists for k in keys))


def scope_stats(samples: list[Sample], scenarios: list[Scenario], protocol: RelationProtocol) -> ScopeStats:
    relation_order = _ordered_union(*(relation_patterns(s).keys() for s in scenarios))
    strategy_order = _ordered_union(*(strategies(s).keys() for s in scenarios))
    relation_counts: Counter[str] = Counter()
    strategy_counts: Counter[str] = Counter()
    transition_counts: Counter[tuple[str, str]] = Counter()
    for sample in samples:
        scenario = scenario_of(sample)
        sequence = [label for _, label in relation_labels(sample, protocol)]
        relation_counts.update(sequence)
        transition_counts.update((a, b) for a, b in zip(sequence, sequence[1:]) if a != b)
        taxonomy = strategies(scenario)
        for row in sample.rows:
            # Same rows as the SSP task (App. C): in-taxonomy strategy with a resolvable target.
            label = primary_strategy(row)
            if is_therapist(row) and label in taxonomy and support_target(row):
                strategy_counts[label] += 1
    counts = [[transition_counts[(a, b)] for b in relation_order] for a in relation_order]
    normalised = [[c / sum(line) if sum(line) else 0.0 for c in line] for line in counts]
    return ScopeStats(
        **corpus_stats(samples).model_dump(),
        relation_patterns=_label_stats(relation_counts, relation_order),
        strategies=_label_stats(strategy_counts, strategy_order),
        transitions=TransitionStats(labels=relation_order, counts=counts, row_normalised=normalised),
    )


def dataset_stats(samples: Iterable[Sample], protocol: RelationProtocol = "paper") -> dict[Scope, ScopeStats]:
    """Statistics for ``couple``, ``family`` and ``all``."""
    samples = list(samples)
    by_scenario = {s: [x for x in samples if scenario_of(x) == s] for s in SCENARIOS}
    result: dict[Scope, ScopeStats] = {s: scope_stats(by_scenario[s], [s], protocol) for s in SCENARIOS}
    result["all"] = scope_stats(samples, list(SCENARIOS), protocol)
    return result


class PositionDistribution(BaseModel):
    """Fig. 5 for one scope: gold relation-pattern instances (the RPP rows) per relative-position bin.

    ``counts[b][i]`` is the number of instances of ``labels[i]`` whose row falls in bin ``b`` (0-10 % ... 90-100 %
    of its sample's rows, :func:`position_bin`)."""

    bins: int
    labels: list[str]
    counts: list[list[int]]

    def totals(self) -> list[int]:
        """Instances per bin."""
        return [sum(line) for line in self.counts]

    def total(self) -> int:
        return sum(self.totals())

    def proportions(self) -> list[list[float]]:
        """Each bin's counts divided by the bin's total (Fig. 5's stacked bars); a bin with no instance is all 0."""
        return [[c / sum(line) if sum(line) else 0.0 for c in line] for line in self.counts]


def bin_label(index: int, bins: int = POSITION_BINS) -> str:
    """``"0–10 %"`` ... ``"90–100 %"`` for ten bins (Figs. 4-5)."""
    low, high = 100 * index / bins, 100 * (index + 1) / bins
    return f"{low:g}–{high:g} %"


def _position_counts(samples: list[Sample], order: list[str], protocol: RelationProtocol, bins: int) -> list[list[int]]:
    counts = [[0] * len(order) for _ in range(bins)]
    for sample in samples:
        for row, label in relation_labels(sample, protocol):
            counts[position_bin(row, len(sample.rows), bins)][order.index(label)] += 1
    return counts


def position_distribution(
    samples: Iterable[Sample], protocol: RelationProtocol = "paper", bins: int = POSITION_BINS
) -> dict[Scope, PositionDistribution]:
    """Fig. 5: gold relation-pattern counts per relative-position bin for ``couple``, ``family`` and ``all``, over the
    same instances as the RPP task (``relation_labels``); labels in taxonomy order, as ``dataset_stats``."""
    samples = list(samples)
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    scopes: dict[Scope, tuple[list[Sample], list[Scenario]]] = {
        s: ([x for x in samples if scenario_of(x) == s], [s]) for s in SCENARIOS
    }
    scopes["all"] = (samples, list(SCENARIOS))
    result: dict[Scope, PositionDistribution] = {}
    for scope, (members, scenarios) in scopes.items():
        order = _ordered_union(*(relation_patterns(s).keys() for s in scenarios))
        counts = _position_counts(members, order, protocol, bins)
        result[scope] = PositionDistribution(bins=bins, labels=order, counts=counts)
    return result
