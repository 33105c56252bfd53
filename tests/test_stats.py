"""Table 3 statistics, label distributions and transitions: hand-computed values and the paper's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_row

from rescue_env.data import load_dataset
from rescue_env.data.schema import Sample
from rescue_env.data.stats import corpus_stats, dataset_stats


def _couple(sample_id: str, rows: list[dict]) -> Sample:
    return Sample.model_validate({"sample_id": sample_id, "scenario": "couple", "rows": rows})


def test_corpus_stats_by_hand() -> None:
    a = _couple("a/1", [make_row(0, "Ana"), make_row(1, "Therapist"), make_row(2, "Bo")])  # ends at 14 s
    b = _couple("b/1", [make_row(0, "Ana"), make_row(1, "Couple")])  # ends at 9 s
    stats = corpus_stats([a, b])
    assert stats.samples == 2 and stats.turns == 5
    assert stats.total_minutes == pytest.approx(23 / 60)
    assert stats.avg_turns == 2.5
    assert stats.avg_speakers == (3 + 2) / 2  # therapist and group pseudo-speakers count as speakers
    assert stats.therapist_turn_share == pytest.approx(1 / 5)


def test_labels_and_transitions_by_hand() -> None:
    labels = ["pursue_withdraw", "pursue_withdraw", "attack_attack", "pursue_withdraw", "repair_softening"]
    rows = [make_row(0, "Ana")]
    for i, label in enumerate(labels, start=1):
        rows.append(
            make_row(
                i,
                "Therapist",
                relation_cycle_state=label,
                support_strategy=[{"target": ["Ana"], "strategy_type": "track"}],
            )
        )
    rows.append(make_row(6, "Therapist", support_strategy=[{"target": ["Ana"], "strategy_type": "boundary"}]))
    stats = dataset_stats([_couple("c/1", rows)])["couple"]
    assert stats.relation_patterns.counts["pursue_withdraw"] == 3
    assert stats.relation_patterns.shares["attack_attack"] == pytest.approx(0.2)
    assert stats.strategies.counts["track"] == 5 and stats.strategies.total == 5  # boundary is family-only
    t = stats.transitions
    pw, aa, rs = (t.labels.index(k) for k in ("pursue_withdraw", "attack_attack", "repair_softening"))
    assert t.counts[pw][pw] == 0  # self-transitions excluded
    assert (t.counts[pw][aa], t.counts[aa][pw], t.counts[pw][rs]) == (1, 1, 1)
    assert t.row_normalised[pw][aa] == pytest.approx(0.5)


def test_table_3_on_the_release(text_file: Path) -> None:
    stats = dataset_stats(load_dataset(text_file))
    paper = {  # samples, total min, turns, avg min, avg turns, avg speakers, therapist share %
        "couple": (174, 824.9, 5875, 4.74, 33.76, 3.00, 35.4),
        "family": (17, 239.9, 1204, 14.11, 70.82, 4.06, 47.1),
        "all": (191, 1064.8, 7079, 5.57, 37.06, 3.09, 37.4),
    }
    for scope, expected in paper.items():
        s = stats[scope]
        got = (
            s.samples,
            round(s.total_minutes, 1),
            s.turns,
            round(s.avg_minutes, 2),
            round(s.avg_turns, 2),
            round(s.avg_speakers, 2),
            round(100 * s.therapist_turn_share, 1),
        )
        assert got == expected, scope


def test_label_shares_match_the_paper_figures(text_file: Path) -> None:
    stats = dataset_stats(load_dataset(text_file))
    couple, family = stats["couple"], stats["family"]
    shares = {
        "pursue_withdraw": (couple.relation_patterns, 38.7),
        "repair_softening": (couple.relation_patterns, 27.0),
        "cooperative_family_alliance": (family.relation_patterns, 41.9),
        "reframe": (couple.strategies, 23.3),
        "evoke": (couple.strategies, 18.9),
        "track": (couple.strategies, 18.2),
        "goal_align": (couple.strategies, 17.1),
        "repair": (couple.strategies, 0.9),
    }
    for label, (label_stats, percent) in shares.items():
        assert round(100 * label_stats.shares[label], 1) == percent, label
    assert (couple.relation_patterns.total, family.relation_patterns.total) == (1608, 525)
    assert (couple.strategies.total, family.strategies.total) == (1290, 347)
