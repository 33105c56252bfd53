"""The synthetic generator: deterministic, schema-valid, Table-3-like."""

from __future__ import annotations

from pathlib import Path

from rescue_env.data import load_dataset
from rescue_env.data.domain import relation_labels
from rescue_env.data.stats import dataset_stats
from rescue_env.data.synthetic import generate_records, generate_samples, write_jsonl


def test_deterministic_given_seed() -> None:
    assert generate_records(5, seed=3) == generate_records(5, seed=3)
    assert generate_records(5, seed=3) != generate_records(5, seed=4)


def test_written_file_loads_strictly_and_looks_like_table_3(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.jsonl"
    write_jsonl(generate_samples(400, seed=0), path)
    dataset = load_dataset(path, strict=True)
    assert len(dataset) == 400
    stats = dataset_stats(dataset)
    couple, family = stats["couple"], stats["family"]
    assert family.samples == round(400 * 17 / 191)
    assert abs(couple.avg_turns - 33.76) < 3 and abs(family.avg_turns - 70.82) < 10
    assert abs(couple.avg_minutes - 4.74) < 0.6 and abs(family.avg_minutes - 14.11) < 2.5
    assert abs(couple.therapist_turn_share - 0.354) < 0.03 and abs(family.therapist_turn_share - 0.471) < 0.04
    assert couple.avg_speakers == 3.0
    # Tasks find gold labels in it (relation labels in both fields, strategies on therapist rows).
    assert all(relation_labels(s) for s in dataset.samples[:20])
    assert couple.strategies.total > 0 and family.relation_patterns.total > 0
