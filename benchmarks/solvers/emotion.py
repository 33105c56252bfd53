"""The trained solver of ER (emotion recognition, App. A.5): an intensity regressor and an emotion phrase taken from
the training folds.

ER asks for the current speaker's internal emotion as a short phrase and its intensity 0-10 (``benchmarks.er``).
A small supervised model cannot write a phrase, so it answers with one that annotators wrote for *another*
couple or family (the training folds only: cross-fitting by family, ``benchmarks.solvers.crossfit``):

- **intensity**: ridge regression over TF-IDF of the current row (the last row shown) and of the rows before it,
  the turn-taking features of ``features.structure``, the current row's distress words, question and exclamation
  marks, and with ``embeddings`` the MiniLM embedding of the current row; rounded and clipped to 0-10.
- **emotion**: the ``NEIGHBOURS`` training instances whose current row is most like this one (cosine of the
  MiniLM embeddings, or of TF-IDF vectors without ``embeddings``) vote for a phrase: among their gold phrases,
  the one most like the others (the similarity-weighted medoid), i.e. the phrase a judge or BERTScore is least
  likely to find far from what was felt. A single nearest neighbour's phrase is noisier.

Everything it reads of an instance is ``features.view`` (what the prompt shows); the gold phrases and intensities
it holds are those of its training instances.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse

from benchmarks.base import Instance
from benchmarks.solvers.features import NEGATIVE, InstanceView, structure, text_fields
from rescue_env.data.domain import THERAPIST

__all__ = ["NEIGHBOURS", "EmotionSolver", "current_row", "row_features"]

NEIGHBOURS = 15
TFIDF: dict[str, Any] = {"ngram_range": (1, 2), "min_df": 2, "max_features": 20000, "sublinear_tf": True}


def current_row(item: InstanceView) -> str:
    """The words of the row whose speaker's emotion is asked for: the last row of the item (``er.render``)."""
    return item.rows[-1].words if item.rows else ""


def row_features(item: InstanceView) -> np.ndarray:
    """The current row's affect cues: distress words, question and exclamation marks, length (log), overlapping
    speech, and whether it addresses the therapist."""
    row = item.rows[-1] if item.rows else None
    words = row.words.lower() if row else ""
    return np.array(
        [
            float(len(NEGATIVE.findall(words))),
            float(words.count("?")),
            float(words.count("!")),
            math.log1p(len(words.split())),
            float(bool(row and row.overlapping)),
            float(bool(row and THERAPIST in row.addressees)),
        ],
        dtype=np.float64,
    )


def _normalised(matrix: Any) -> Any:
    """Rows scaled to unit L2 norm (sparse or dense), so that a product of two is a cosine."""
    from sklearn.preprocessing import normalize

    return normalize(matrix)


class EmotionSolver:
    """See the module docstring. ``fit`` on training instances, then ``answer`` one instance at a time."""

    ALPHA = 3.0  # ridge strength: a few hundred training rows per fold and tens of thousands of n-grams

    def __init__(self, seed: int = 0, embeddings: bool = False) -> None:
        self.seed, self.embeddings = seed, embeddings
        self._fitted = False

    # ----- inputs ---------------------------------------------------------------------------------------------

    def _embedded(self, views: Sequence[InstanceView]) -> np.ndarray | None:
        """The current rows' MiniLM embeddings (None without ``embeddings``): read once, used by both the
        regressor's inputs and the neighbour search."""
        if not self.embeddings:
            return None
        from benchmarks.solvers.embeddings import embed

        return embed([current_row(v) for v in views])

    def _similarity_space(self, views: Sequence[InstanceView], embedded: np.ndarray | None) -> Any:
        """Each instance's current row as a unit vector (MiniLM, or TF-IDF without embeddings)."""
        if embedded is not None:
            return embedded
        return _normalised(self.rows.transform([current_row(v) for v in views]))

    def _phrase_space(self, phrases: Sequence[str]) -> np.ndarray:
        """The gold phrases as unit vectors, for the medoid vote."""
        if self.embeddings:
            from benchmarks.solvers.embeddings import embed

            return embed(list(phrases))
        return _normalised(self.phrase_words.transform(list(phrases))).toarray()

    @staticmethod
    def _numbers(views: Sequence[InstanceView]) -> np.ndarray:
        return np.column_stack([np.stack([structure(v) for v in views]), np.stack([row_features(v) for v in views])])

    def _design(self, views: Sequence[InstanceView], embedded: np.ndarray | None) -> sparse.csr_matrix:
        blocks = [
            self.rows.transform([current_row(v) for v in views]),
            self.context.transform([text_fields(v)[0] for v in views]),
            sparse.csr_matrix(self.scaler.transform(self._numbers(views))),
        ]
        if embedded is not None:
            blocks.append(sparse.csr_matrix(embedded))
        return sparse.hstack(blocks).tocsr()

    # ----- fitting and answering --------------------------------------------------------------------------------

    def fit(self, instances: Sequence[Instance], views: Mapping[str, InstanceView]) -> EmotionSolver:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import Ridge
        from sklearn.preprocessing import StandardScaler

        if not instances:
            raise ValueError("ER: no training instance to fit on")
        chosen = [views[i.instance_id] for i in instances]
        self.rows = TfidfVectorizer(**TFIDF).fit([current_row(v) for v in chosen])
        self.context = TfidfVectorizer(**TFIDF).fit([text_fields(v)[0] for v in chosen])
        self.scaler = StandardScaler().fit(self._numbers(chosen))
        intensities = np.array([float(i.gold["intensity"]) for i in instances])
        embedded = self._embedded(chosen)
        self.regressor = Ridge(alpha=self.ALPHA).fit(self._design(chosen, embedded), intensities)
        self.phrases = [str(i.gold["emotion"]) for i in instances]
        if not self.embeddings:
            self.phrase_words = TfidfVectorizer(ngram_range=(1, 1), sublinear_tf=True).fit(self.phrases)
        self.train_rows = self._similarity_space(chosen, embedded)
        self.train_phrases = self._phrase_space(self.phrases)
        self._fitted = True
        return self

    def answer(self, instance: Instance, item: InstanceView) -> dict[str, Any]:
        """``{"emotion": phrase, "intensity": 0..10}`` for ``instance`` (what a model would send)."""
        if not self._fitted:
            raise RuntimeError("call fit() first")
        embedded = self._embedded([item])
        predicted = float(self.regressor.predict(self._design([item], embedded))[0])
        intensity = int(min(10, max(0, round(predicted))))
        return {"emotion": self._phrase(item, embedded), "intensity": intensity}

    def _phrase(self, item: InstanceView, embedded: np.ndarray | None) -> str:
        product = self.train_rows @ self._similarity_space([item], embedded).T
        similarity = (product.toarray() if sparse.issparse(product) else np.asarray(product)).ravel()
        k = min(NEIGHBOURS, similarity.size)
        # The k most similar training rows; ties broken by training order, so the answer is deterministic.
        nearest = np.lexsort((np.arange(similarity.size), -similarity))[:k]
        weights = np.clip(similarity[nearest], 0.0, None) + 1e-6
        vectors = self.train_phrases[nearest]
        agreement = (vectors @ vectors.T) @ weights  # each neighbour phrase against the weighted others
        return self.phrases[int(nearest[int(np.argmax(agreement))])]
