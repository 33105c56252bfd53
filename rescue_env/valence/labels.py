"""Hand labels of the polarity of release descriptions, kept as keys only (never the release's text).

A label file is a CSV ``sample_key,row,item,label``: ``sample_key`` is the first 16 hex digits of the SHA-256 of
the sample id, ``row`` the 0-based row position, ``item`` the index in the row's ``internal_emotion`` (emotions)
or ``viewpoints_attitudes`` (attitudes) list. ``resolve`` reads the texts back from the user's copy of the data.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rescue_env.data import Dataset
from rescue_env.valence import LABELS, Kind


def sample_key(sample_id: str) -> str:
    return hashlib.sha256(sample_id.encode("utf-8")).hexdigest()[:16]


def attitude_text(viewpoint: str, attitude: str) -> str:
    """How a directed viewpoint is scored: its viewpoint and its attitude, as the shipped phrases are written."""
    return f"{viewpoint.strip()} / {attitude.strip()}"


@dataclass(frozen=True)
class LabelledTexts:
    kind: Kind
    texts: list[str]
    labels: np.ndarray
    """Class indices in ``CLASSES`` order."""
    keys: list[str]


def resolve(path: str | Path, dataset: Dataset, kind: Kind) -> LabelledTexts:
    """The texts of the labelled items of ``path`` in ``dataset``; a key that resolves to nothing is an error."""
    by_key = {sample_key(s.sample_id): s for s in dataset.samples}
    names = LABELS[kind]
    texts, labels, keys = [], [], []
    with open(path, encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            sample = by_key.get(record["sample_key"])
            row, item = int(record["row"]), int(record["item"])
            try:
                found = sample.rows[row]
                entry = found.internal_emotion[item] if kind == "emotion" else found.viewpoints_attitudes[item]
            except (AttributeError, IndexError):
                raise ValueError(
                    f"{path}: label {record['sample_key']}:{row}:{item} is not in {dataset.source}"
                ) from None
            if kind == "emotion":
                texts.append(entry.emotion_description)
            else:
                texts.append(attitude_text(entry.viewpoint, entry.attitude))
            labels.append(names.index(record["label"]))
            keys.append(f"{record['sample_key']}:{row}:{item}")
    return LabelledTexts(kind, texts, np.asarray(labels), keys)


__all__ = ["LabelledTexts", "attitude_text", "resolve", "sample_key"]
