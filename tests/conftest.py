"""Shared fixtures. Tests that need the research-only release read it from ../shared/data and skip when it
is absent; everything else runs on the embedded demo data or on small records written here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TEXT_FILE = SHARED_DATA / "rescue_text.jsonl"
EXCERPT_FILE = SHARED_DATA / "rescue_excerpt.jsonl"


def _shared(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"research-only release data not found at {path} (it is never shipped with the project)")
    return path


@pytest.fixture
def text_file() -> Path:
    """The text transcription of the release (191 samples)."""
    return _shared(TEXT_FILE)


@pytest.fixture
def excerpt_file() -> Path:
    """Six verbatim release samples with every key."""
    return _shared(EXCERPT_FILE)


def make_row(position: int, speaker: str, text: str = "I have been thinking about this a lot", **extra: Any):
    """A minimal release-style row (1-based row_index = position + 1)."""
    row: dict[str, Any] = {
        "start_time": float(position * 5),
        "end_time": float(position * 5 + 4),
        "primary_speaker": speaker,
        "target": ["Therapist"] if speaker != "Therapist" else [],
        "dialogue_cleaned": text,
        "utterance_type": "" if speaker == "Therapist" else "disclosure",
        "tone_of_voice": "calm",
        "internal_emotion": [],
        "viewpoints_attitudes": [],
        "support_strategy": [],
        "row_index": position + 1,
        "relation_pattern": None,
        "relation_pattern_evidence_rows": [],
    }
    row.update(extra)
    return row


def make_sample(sample_id: str, speakers: list[str], scenario: str | None = "couple", **extra: Any):
    sample: dict[str, Any] = {
        "sample_id": sample_id,
        "rows": [make_row(i, s) for i, s in enumerate(speakers)],
    }
    if scenario is not None:
        sample["scenario"] = scenario
    sample.update(extra)
    return sample


def without_annotations(sample: Any) -> Any:
    """A copy of a ``Sample`` with every annotation of every row replaced: what a prompt, an observation, a
    heuristic or a solver's features must never read (the leak tests compare before and after)."""
    copy = sample.model_copy(deep=True)
    for row in copy.rows:
        row.internal_emotion, row.viewpoints_attitudes, row.support_strategy = [], [], []
        row.relation_cycle_state = row.relation_pattern = "scrubbed"
        row.relation_cycle_reason = row.relation_pattern_reason = "scrubbed"
        row.utterance_type = "scrubbed"
    return copy


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(autouse=True, scope="session")
def _dynamics_cache(tmp_path_factory):
    """Rescue-v1 caches its fitted outcome model; tests write it to a session folder, never to ~/.cache."""
    import os

    previous = os.environ.get("RESCUE_ENV_CACHE")
    os.environ["RESCUE_ENV_CACHE"] = str(tmp_path_factory.mktemp("rescue-env-cache"))
    yield
    if previous is None:
        os.environ.pop("RESCUE_ENV_CACHE", None)
    else:
        os.environ["RESCUE_ENV_CACHE"] = previous
