"""Synthetic, schema-valid conversations with Table-3-like statistics.

For scale and speed tests only: the dialogue is random filler and the labels are random draws, so nothing
computed on it means anything clinically. Never report scores on synthetic data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rescue_env.data.schema import Sample, Scenario
from rescue_env.taxonomy import relation_patterns, strategies

# Paper Table 3, per scenario: mean turns, mean seconds per turn, therapist share, clients per sample.
_SHAPE: dict[Scenario, dict[str, float]] = {
    "couple": {"turns": 33.76, "seconds_per_turn": 4.74 * 60 / 33.76, "therapist": 0.354, "clients": 2},
    "family": {"turns": 70.82, "seconds_per_turn": 14.11 * 60 / 70.82, "therapist": 0.471, "clients": 3},
}
_NAMES = (
    "Avery Blake Casey Devon Emery Finley Harper Jules Kai Logan Morgan Noel Parker Quinn Reese Rowan Sage Tatum"
).split()
_WORDS = (
    "i you we feel think always never maybe really just want need when because home work talk listen "
    "heard hurt tired angry scared close far time again sorry trying both together alone"
).split()
_UTTERANCE_TYPES = (
    "disclosure defense recollection reflection validation accusation request withdrawal repair other".split()
)


def _sentence(rng: np.random.Generator, low: int = 3, high: int = 25) -> str:
    words = rng.choice(_WORDS, size=int(rng.integers(low, high)))
    return " ".join(words).capitalize() + "."


def _synthetic_sample(index: int, scenario: Scenario, rng: np.random.Generator) -> dict[str, Any]:
    shape = _SHAPE[scenario]
    people = [str(n) for n in rng.choice(_NAMES, size=int(shape["clients"]), replace=False)]
    group = "Couple" if scenario == "couple" else "Family"
    n_rows = max(4, int(rng.normal(shape["turns"], shape["turns"] / 3)))
    patterns = relation_patterns(scenario).keys()
    strategy_keys = strategies(scenario).keys()
    rows: list[dict[str, Any]] = []
    clock = 0.0
    for position in range(n_rows):
        # Every client speaks once first, so that distinct speakers per sample match Table 3.
        therapist = position >= len(people) and rng.random() < shape["therapist"]
        speaker = (
            "Therapist" if therapist else people[position if position < len(people) else int(rng.integers(len(people)))]
        )
        duration = float(rng.exponential(shape["seconds_per_turn"]))
        start, clock = round(clock, 2), round(clock + duration, 2)
        others = [p for p in people if p != speaker]
        if therapist:
            target = [str(rng.choice([*people, group]))] if rng.random() < 0.8 else list(people)
        else:
            target = ["Therapist"] if rng.random() < 0.6 else [others[int(rng.integers(len(others)))]]
        row: dict[str, Any] = {
            "start_time": start,
            "end_time": clock,
            "primary_speaker": speaker,
            "target": target,
            "dialogue_cleaned": _sentence(rng),
            "utterance_type": "" if therapist else str(rng.choice(_UTTERANCE_TYPES)),
            "background_dialogue": [],
            "tone_of_voice": "calm" if therapist else str(rng.choice(["tense", "quiet", "sharp", "warm"])),
            "internal_emotion": []
            if therapist
            else [
                {
                    "person": speaker,
                    "emotion_description": "feels " + _sentence(rng, 2, 6).lower(),
                    "intensity": int(rng.integers(0, 11)),
                }
            ],
            "viewpoints_attitudes": []
            if therapist or rng.random() < 0.5
            else [
                {
                    "source": speaker,
                    "target": others[0],
                    "viewpoint": _sentence(rng, 4, 12),
                    "attitude": str(rng.choice(["resentful", "hopeful", "guarded"])),
                }
            ],
            "support_strategy": [
                {
                    "provider": "Therapist",
                    "target": target,
                    "strategy_type": str(rng.choice(strategy_keys)),
                    "strategy_content": _sentence(rng, 4, 10),
                }
            ]
            if therapist and rng.random() < 0.85
            else [],
        }
        if therapist or scenario == "family":
            row["relation_cycle_state"] = str(rng.choice(patterns)) if therapist else ""
        row["row_index"] = position + 1
        labelled = scenario == "family" and therapist or rng.random() < 0.05
        row["relation_pattern"] = str(rng.choice(patterns)) if labelled else None
        row["relation_pattern_evidence_rows"] = [position + 1] if labelled else []
        rows.append(row)
    prefix = "family_therapy" if scenario == "family" else "synthetic_couple"
    return {
        "sample_id": f"{prefix}/{index:05d}",
        "scenario": scenario,
        "participants": people,
        "source_file": f"synthetic/{prefix}/{index:05d}.json",
        "rows": rows,
    }


def generate_records(count: int, seed: int = 0, family_share: float = 17 / 191) -> list[dict[str, Any]]:
    """``count`` synthetic samples as plain release-style records (deterministic given ``seed``)."""
    if not 0.0 <= family_share <= 1.0:
        raise ValueError(f"family_share must be in [0, 1], got {family_share}")
    rng = np.random.default_rng(seed)
    n_family = round(count * family_share)
    scenarios: list[Scenario] = ["couple"] * (count - n_family) + ["family"] * n_family
    return [_synthetic_sample(i, s, rng) for i, s in enumerate(scenarios)]


def generate_samples(count: int, seed: int = 0, family_share: float = 17 / 191) -> list[Sample]:
    """``count`` validated synthetic samples (see ``generate_records``)."""
    return [Sample.model_validate(r) for r in generate_records(count, seed, family_share)]


def write_jsonl(samples: list[Sample] | list[dict[str, Any]], path: str | Path) -> None:
    """Write samples as release-style JSONL (one sample per line)."""
    with Path(path).open("w", encoding="utf-8") as out:
        for sample in samples:
            record = sample.to_record() if isinstance(sample, Sample) else sample
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
