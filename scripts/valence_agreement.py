"""Agreement of polarity scorers with hand labels of the release's descriptions (issue 8, §2).

    python scripts/valence_agreement.py --data ../shared/data/rescue_text.jsonl

For each kind (emotion descriptions; directed viewpoint + attitude) and each candidate, prints the 3-class
accuracy (negative / neutral / positive), Cohen's kappa, and the accuracy of the sign that distress needs
(negative vs not). Candidates: the project's ``wordmap`` and ``embedding`` scorers, and, when installed, VADER,
AFINN and TextBlob (``pip install vaderSentiment afinn textblob``), mapped to classes at +-0.05.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from sklearn.metrics import cohen_kappa_score

from rescue_env.data import load_dataset
from rescue_env.valence import CLASSES, KINDS, SCORER_NAMES, get_scorer
from rescue_env.valence.labels import resolve

LABEL_FILES = {"emotion": "emotions.csv", "attitude": "viewpoints.csv"}
DEFAULT_LABELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "valence_labels"


def _from_signed(scores: Sequence[float], threshold: float = 0.05) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    return np.where(values <= -threshold, 0, np.where(values >= threshold, 2, 1))


def lexicon_candidates() -> dict[str, Callable[[list[str]], np.ndarray]]:
    """Off-the-shelf lexicons that are installed, each as texts -> class indices."""
    out: dict[str, Callable[[list[str]], np.ndarray]] = {}
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        vader = SentimentIntensityAnalyzer()
        out["vader"] = lambda texts: _from_signed([vader.polarity_scores(t)["compound"] for t in texts])
    except ImportError:
        pass
    try:
        from afinn import Afinn

        afinn = Afinn()
        out["afinn"] = lambda texts: _from_signed([afinn.score(t) for t in texts], threshold=0.5)
    except ImportError:
        pass
    try:
        from textblob import TextBlob

        out["textblob"] = lambda texts: _from_signed([TextBlob(t).sentiment.polarity for t in texts])
    except Exception:  # textblob needs nltk; any failure just drops the candidate
        pass
    return out


def agreement(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    return {
        "accuracy": float(np.mean(predicted == gold)),
        "kappa": float(cohen_kappa_score(gold, predicted)),
        "negative_sign_accuracy": float(np.mean((predicted == 0) == (gold == 0))),
        "n": int(gold.size),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data", default="../shared/data/rescue_text.jsonl", help="the release (JSONL)")
    parser.add_argument("--labels", default=str(DEFAULT_LABELS), help="folder with emotions.csv, viewpoints.csv")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not Path(args.data).exists():
        parser.exit(2, f"error: {args.data} not found; pass --data PATH of the release\n")
    dataset = load_dataset(args.data)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for kind in KINDS:
        labelled = resolve(Path(args.labels) / LABEL_FILES[kind], dataset, kind)
        results[kind] = {"labels": {c: int(np.sum(labelled.labels == i)) for i, c in enumerate(CLASSES)}}
        candidates: dict[str, Callable[[list[str]], np.ndarray]] = {
            name: (lambda texts, name=name, kind=kind: get_scorer(name, kind).probabilities(texts).argmax(axis=1))
            for name in SCORER_NAMES
        }
        candidates.update(lexicon_candidates())
        for name, predict in candidates.items():
            results[kind][name] = agreement(np.asarray(predict(labelled.texts)), labelled.labels)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for kind, table in results.items():
        print(f"\n{kind}: hand labels {table['labels']}")
        print(f"{'candidate':<12} {'accuracy':>9} {'kappa':>7} {'negative-sign acc':>18}")
        for name, row in table.items():
            if name != "labels":
                print(f"{name:<12} {row['accuracy']:>9.3f} {row['kappa']:>7.3f} {row['negative_sign_accuracy']:>18.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
