"""The polarity of annotated emotions and directed viewpoints: how negative a description is.

The paper's distress d_i (App. B) is the annotated intensity of i's emotion, but about one annotation in eight is a
positive feeling; d_i = negativity x intensity / 10 needs the negativity of the description. A scorer maps texts
to class probabilities over ``CLASSES`` (negative, neutral, positive); ``negativity`` is the first column.

Scorers (``get_scorer(name, kind)``; ``kind`` is ``emotion`` or ``attitude``):

- ``wordmap`` (the default): the documented word map of ``rescue_env.valence.wordmap``; no dependencies.
- ``embedding``: a logistic regression on the packaged MiniLM's sentence embeddings, trained at first use on the
  shipped phrases of ``phrases.csv`` (written for this project; nothing of the release).

``scripts/valence_agreement.py`` measures both, and off-the-shelf lexicons, against hand labels of release
descriptions (keys and labels only, ``tests/data/valence_labels``); the README gives the figures.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Literal, Protocol

import numpy as np

from rescue_env.valence import wordmap

Kind = Literal["emotion", "attitude"]
KINDS: tuple[Kind, ...] = ("emotion", "attitude")
CLASSES = ("negative", "neutral", "positive")
LABELS: dict[Kind, tuple[str, str, str]] = {
    "emotion": ("distress", "neutral", "positive"),
    "attitude": ("negative", "neutral", "positive"),
}
"""Each kind's label names, in ``CLASSES`` order (an emotion's negative class is called distress)."""
SCORER_NAMES = ("wordmap", "embedding")
DEFAULT_SCORER = "wordmap"


class PolarityScorer(Protocol):
    name: str

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 3)`` probabilities over ``CLASSES``; rows sum to 1."""
        ...


class WordMapScorer:
    """The word map: all of the evidence on the polar classes in proportion to the matches, else neutral."""

    name = "wordmap"

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 3))
        for i, text in enumerate(texts):
            negative, positive = wordmap.polarity_counts(text)
            if negative + positive:
                out[i] = (negative / (negative + positive), 0.0, positive / (negative + positive))
            else:
                out[i, 1] = 1.0
        return out


def shipped_phrases(kind: Kind) -> tuple[list[str], np.ndarray]:
    """The shipped training phrases of ``kind`` and their class indices (``CLASSES`` order)."""
    names = LABELS[kind]
    texts, labels = [], []
    with resources.files("rescue_env.valence").joinpath("phrases.csv").open(encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            if record["kind"] == kind:
                texts.append(record["text"])
                labels.append(names.index(record["label"]))
    return texts, np.asarray(labels)


class EmbeddingScorer:
    """Multinomial logistic regression on MiniLM embeddings of the shipped phrases (scikit-learn, seeded)."""

    name = "embedding"

    def __init__(self, kind: Kind, C: float = 4.0) -> None:
        from sklearn.linear_model import LogisticRegression

        from rescue_env.embeddings import MiniLM

        texts, labels = shipped_phrases(kind)
        self._encode = MiniLM.get().encode
        self.model = LogisticRegression(C=C, max_iter=2000, random_state=0).fit(self._encode(texts), labels)

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 3))
        return self.model.predict_proba(self._encode(list(texts)))


@cache
def get_scorer(name: str = DEFAULT_SCORER, kind: Kind = "emotion") -> PolarityScorer:
    """The scorer ``name`` for ``kind`` (built once per process)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    if name == "wordmap":
        return WordMapScorer()
    if name == "embedding":
        return EmbeddingScorer(kind)
    raise ValueError(f"unknown polarity scorer {name!r}; choose from {', '.join(SCORER_NAMES)}")


_NEGATIVITY: dict[tuple[str, str, str], float] = {}


def negativity(texts: Sequence[str], name: str = DEFAULT_SCORER, kind: Kind = "emotion") -> np.ndarray:
    """P(negative) of each text under the scorer ``name``, cached per text for the process (the same
    description recurs across rows and conversations, and the embedding scorer is slow)."""
    missing = list(dict.fromkeys(t for t in texts if (name, kind, t) not in _NEGATIVITY))
    if missing:
        values = get_scorer(name, kind).probabilities(missing)[:, 0]
        _NEGATIVITY.update({(name, kind, t): float(x) for t, x in zip(missing, values)})
    return np.array([_NEGATIVITY[(name, kind, t)] for t in texts], dtype=np.float64)


__all__ = [
    "CLASSES",
    "DEFAULT_SCORER",
    "KINDS",
    "LABELS",
    "SCORER_NAMES",
    "EmbeddingScorer",
    "PolarityScorer",
    "WordMapScorer",
    "get_scorer",
    "negativity",
    "shipped_phrases",
]
