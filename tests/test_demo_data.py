"""The embedded demo dataset: what issue 2 promises about it."""

from __future__ import annotations

from rescue_env.data import load_dataset
from rescue_env.data.domain import THERAPIST, participants, relation_labels, scenario_of, target_members
from rescue_env.data.stats import dataset_stats
from rescue_env.taxonomy import relation_patterns, strategies


def test_shape() -> None:
    dataset = load_dataset(strict=True)
    scenarios = [scenario_of(s) for s in dataset]
    assert scenarios.count("couple") >= 4 and scenarios.count("family") >= 2
    assert all(20 <= len(s.rows) <= 60 for s in dataset)
    assert all([r.row_index for r in s.rows] == list(range(1, len(s.rows) + 1)) for s in dataset)
    assert all(a.end_time <= b.start_time for s in dataset for a, b in zip(s.rows, s.rows[1:]))


def test_every_label_is_used() -> None:
    stats = dataset_stats(load_dataset())
    for scenario in ("couple", "family"):
        used_patterns = {k for k, n in stats[scenario].relation_patterns.counts.items() if n}
        used_strategies = {k for k, n in stats[scenario].strategies.counts.items() if n}
        assert used_patterns == set(relation_patterns(scenario).keys()), scenario
        assert used_strategies == set(strategies(scenario).keys()), scenario


def test_fields_populated_like_the_release() -> None:
    dataset = load_dataset()
    rows = [r for s in dataset for r in s.rows]
    clients = [r for r in rows if r.primary_speaker not in (THERAPIST, "Couple", "Family")]
    assert all(
        any(e.person == r.primary_speaker and e.intensity is not None for e in r.internal_emotion) for r in clients[:10]
    )
    assert sum(bool(r.viewpoints_attitudes) for r in clients) > len(clients) / 3
    assert any(r.body_posture for r in rows) and any(r.interaction_behavior for r in rows)
    assert any(r.background_dialogue for r in rows)
    assert any(r.relation_pattern == "" for r in rows) and any(r.relation_pattern is None for r in rows)
    assert all(relation_labels(s) for s in dataset)


def test_family_targets_include_dyads_and_quirks() -> None:
    dataset = load_dataset()
    family = [s for s in dataset if scenario_of(s) == "family"]
    dyads = [
        target_members(r.support_strategy[0].target, participants(s))
        for s in family
        for r in s.rows
        if r.support_strategy
    ]
    assert any(len(t) == 2 for t in dyads)
    assert any(r.primary_speaker == "Family" for s in family for r in s.rows)
    assert any(set(participants(s)) - set(s.participants) for s in family)  # an incomplete participants field
