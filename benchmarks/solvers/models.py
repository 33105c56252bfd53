"""The trained solvers: scikit-learn models over what the prompt shows (``benchmarks.solvers.features``).

``linear`` (TF-IDF of the rows shown and of the last rows, plus turn-taking features, into L2 logistic
regression):

- ITP: a binary classifier, "speak now" when its probability is at least 1/2 (the instance set is balanced by
  construction, App. C).
- RPP, SSP: one multinomial classifier per scenario over that scenario's labels; the answer ranks the labels by
  probability (top 3, as an LLM is asked), labels never seen in training last, in taxonomy order.
- STP: a pointwise classifier over (instance, candidate) pairs (``candidate_features``: the group label, who
  spoke last, who was addressed, who is named); the answer ranks the instance's candidates by probability.

``minilm``: ``linear`` plus the packaged MiniLM's sentence embedding of the last three rows' words (cached on
disk by text hash, ``benchmarks.solvers.embeddings``) in the ITP, RPP and SSP models; STP is the same as
``linear``'s.

Every model is fitted on the instances it is given (``fit``) and answers one instance with the answer item a
model would send (``answer``). Vectorisers and scalers are fitted on the training instances only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse

from benchmarks.base import Instance
from benchmarks.ranking import RANKING_KEY, TOP_K
from benchmarks.solvers.features import InstanceView, candidate_features, last_rows_text, structure, text_fields
from rescue_env.taxonomy import relation_patterns, strategies

__all__ = ["SOLVERS", "LinearSolver", "make_solver"]

SOLVERS = ("linear", "minilm")
TASKS = ("itp", "rpp", "stp", "ssp")
_GOLD_KEY = {"rpp": "pattern", "ssp": "strategy", "stp": "target"}
TFIDF: dict[str, Any] = {"ngram_range": (1, 2), "min_df": 2, "max_features": 30000, "sublinear_tf": True}


def make_solver(name: str, task: str, seed: int = 0) -> LinearSolver:
    if name not in SOLVERS:
        raise ValueError(f"unknown solver {name!r}; choose from {', '.join(SOLVERS)}")
    if task not in TASKS:
        raise ValueError(f"no trained solver for {task.upper()} yet; trained solvers answer {', '.join(TASKS)}")
    return LinearSolver(task, seed=seed, embeddings=name == "minilm")


def _logistic(seed: int, c: float) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=2000, random_state=seed)


class _TextEncoder:
    """TF-IDF of the two text fields plus the scaled turn-taking features, fitted on the training views."""

    def __init__(self, embeddings: bool = False) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.preprocessing import StandardScaler

        self.embeddings = embeddings
        self.context, self.tail = TfidfVectorizer(**TFIDF), TfidfVectorizer(**TFIDF)
        self.scaler = StandardScaler()

    def fit(self, views: Sequence[InstanceView]) -> _TextEncoder:
        fields = [text_fields(v) for v in views]
        self.context.fit([c for c, _ in fields])
        self.tail.fit([t for _, t in fields])
        self.scaler.fit(np.stack([structure(v) for v in views]))
        return self

    def transform(self, views: Sequence[InstanceView]) -> sparse.csr_matrix:
        fields = [text_fields(v) for v in views]
        numbers = self.scaler.transform(np.stack([structure(v) for v in views]))
        blocks = [self.context.transform([c for c, _ in fields]), self.tail.transform([t for _, t in fields])]
        if self.embeddings:  # ``minilm``: what the last rows mean, beyond their words
            from benchmarks.solvers.embeddings import embed

            blocks.append(sparse.csr_matrix(embed([last_rows_text(v) for v in views])))
        return sparse.hstack([*blocks, sparse.csr_matrix(numbers)]).tocsr()


class _Constant:
    """A classifier stand-in when the training data holds one class only."""

    def __init__(self, label: Any) -> None:
        self.classes_ = np.array([label])

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.ones((X.shape[0], 1))


def _classifier(X: Any, y: Sequence[Any], seed: int, c: float) -> Any:
    if len(set(y)) < 2:
        return _Constant(y[0])
    return _logistic(seed, c).fit(X, list(y))


class LinearSolver:
    """See the module docstring. ``C``: the inverse regularisation strength of every logistic regression."""

    C = {"itp": 1.0, "rpp": 1.0, "ssp": 1.0, "stp": 1.0}

    def __init__(self, task: str, seed: int = 0, embeddings: bool = False) -> None:
        self.task, self.seed, self.embeddings = task, seed, embeddings
        self.models: dict[str, tuple[Any, Any]] = {}

    # ----- fitting ------------------------------------------------------------------------------------------

    def fit(self, instances: Sequence[Instance], views: Mapping[str, InstanceView]) -> LinearSolver:
        if self.task == "stp":
            return self._fit_stp(instances, views)
        scopes = ("all",) if self.task == "itp" else ("couple", "family")
        for scope in scopes:
            chosen = [i for i in instances if scope == "all" or i.scenario == scope]
            if not chosen:
                continue
            encoder = _TextEncoder(self.embeddings).fit([views[i.instance_id] for i in chosen])
            X = encoder.transform([views[i.instance_id] for i in chosen])
            y = [self._label(i) for i in chosen]
            self.models[scope] = (encoder, _classifier(X, y, self.seed, self.C[self.task]))
        return self

    def _label(self, instance: Instance) -> Any:
        if self.task == "itp":
            return bool(instance.gold["should_speak"])
        return instance.gold[_GOLD_KEY[self.task]]

    def _fit_stp(self, instances: Sequence[Instance], views: Mapping[str, InstanceView]) -> LinearSolver:
        from sklearn.preprocessing import StandardScaler

        rows, labels = [], []
        for instance in instances:
            candidates = list(instance.inputs["candidates"])
            item = views[instance.instance_id]
            for candidate in candidates:
                rows.append(candidate_features(item, candidate, candidates))
                labels.append(candidate == instance.gold["target"])
        scaler = StandardScaler().fit(np.stack(rows))
        model = _classifier(scaler.transform(np.stack(rows)), labels, self.seed, self.C["stp"])
        self.models["all"] = (scaler, model)
        return self

    # ----- answering ----------------------------------------------------------------------------------------

    def answer(self, instance: Instance, item: InstanceView) -> dict[str, Any]:
        """The answer item for ``instance`` (``{"should_speak": ...}`` or ``{"ranking": [...]}``)."""
        if self.task == "stp":
            return {RANKING_KEY: self._rank_candidates(instance, item)}
        scope = "all" if self.task == "itp" else instance.scenario
        choices = self._choices(instance)
        if scope not in self.models:  # no training instance of this scenario: the taxonomy order
            return {"should_speak": "yes"} if self.task == "itp" else {RANKING_KEY: choices[:TOP_K]}
        encoder, model = self.models[scope]
        probabilities = model.predict_proba(encoder.transform([item]))[0]
        score = {label: float(p) for label, p in zip(model.classes_, probabilities)}
        if self.task == "itp":
            return {"should_speak": "yes" if score.get(True, 0.0) >= 0.5 else "no"}
        ranked = sorted(choices, key=lambda c: (-score.get(c, -1.0), choices.index(c)))
        return {RANKING_KEY: ranked[:TOP_K]}

    def _choices(self, instance: Instance) -> list[str]:
        if self.task == "rpp":
            return list(relation_patterns(instance.scenario).keys())
        if self.task == "ssp":
            return list(strategies(instance.scenario).keys())
        return []

    def _rank_candidates(self, instance: Instance, item: InstanceView) -> list[str]:
        candidates = list(instance.inputs["candidates"])
        scaler, model = self.models["all"]
        X = scaler.transform(np.stack([candidate_features(item, c, candidates) for c in candidates]))
        positive = list(model.classes_).index(True) if True in list(model.classes_) else None
        scores = model.predict_proba(X)[:, positive] if positive is not None else np.zeros(len(candidates))
        order = sorted(range(len(candidates)), key=lambda k: (-scores[k], k))
        return [candidates[k] for k in order][:TOP_K]
