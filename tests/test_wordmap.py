"""The fast word map (prefix sets, caches) against a straightforward reference of its documented rules, on the
shipped phrases, on many generated strings and (when present) on every description of the release."""

from __future__ import annotations

import random

import pytest

from rescue_env.data import load_dataset
from rescue_env.valence import KINDS, shipped_phrases
from rescue_env.valence.labels import attitude_text
from rescue_env.valence.wordmap import (
    NEGATIVE_PHRASES,
    NEGATIVE_STEMS,
    NEGATORS,
    NEUTRAL_STEMS,
    POSITIVE_PHRASES,
    POSITIVE_STEMS,
    _tokens,
    polarity_counts,
    token_polarity,
)

# ----- the reference: the word map as first written (a ``startswith`` scan of every stem per token) ------------


def _reference_negated(tokens: list[str], index: int) -> bool:
    return any(t in NEGATORS or t.endswith("n't") for t in tokens[max(0, index - 3) : index])


def _reference_longest(token: str, stems: tuple[str, ...]) -> int:
    return max((len(stem) for stem in stems if token.startswith(stem)), default=0)


def reference_counts(text: str) -> tuple[int, int]:
    lowered = " ".join(_tokens(text)).replace("kind of", " ").replace("sort of", " ")
    negative = positive = 0
    for phrases, sign in ((NEGATIVE_PHRASES, -1), (POSITIVE_PHRASES, 1)):
        for phrase in phrases:
            start = lowered.find(phrase)
            while start >= 0:
                before = lowered[:start].split()
                if (sign < 0) != _reference_negated(before + ["_"], len(before)):
                    negative += 1
                else:
                    positive += 1
                lowered = lowered[:start] + " " * len(phrase) + lowered[start + len(phrase) :]
                start = lowered.find(phrase)
    tokens = lowered.split()
    for index, token in enumerate(tokens):
        if token.startswith(NEUTRAL_STEMS):
            continue
        longest_negative = _reference_longest(token, NEGATIVE_STEMS)
        longest_positive = _reference_longest(token, POSITIVE_STEMS)
        if longest_negative == longest_positive:
            continue
        if (longest_negative > longest_positive) != _reference_negated(tokens, index):
            negative += 1
        else:
            positive += 1
    return negative, positive


# ----- generated strings ----------------------------------------------------------------------------------------

_SUFFIXES = ("", "", "s", "ed", "ing", "ful", "ness", "ly", "ment", "ive", "less", "-ish")
_FILLER = ("feels", "she", "he", "is", "about", "the", "and", "but", "still", "very", "kind", "sort", "of", "a", "to")


def _generated(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    stems = (*NEGATIVE_STEMS, *POSITIVE_STEMS, *NEUTRAL_STEMS)
    phrases = (*NEGATIVE_PHRASES, *POSITIVE_PHRASES)
    negators = (*sorted(NEGATORS), "no longer", "shouldn't")
    texts = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(0, 12)):
            pick = rng.random()
            if pick < 0.4:
                words.append(rng.choice(stems) + rng.choice(_SUFFIXES))
            elif pick < 0.55:
                words.append(rng.choice(phrases))
            elif pick < 0.7:
                words.append(rng.choice(negators))
            elif pick < 0.75:
                words.append(rng.choice(stems)[: rng.randint(1, 4)])  # prefixes shorter than any stem
            else:
                words.append(rng.choice(_FILLER))
        text = " ".join(words)
        if rng.random() < 0.3:
            text = text.upper() + rng.choice(("!", "?", ", really.", " / 42"))
        texts.append(text)
    return texts


def test_reference_reads_the_rules_by_hand() -> None:
    # The reference itself, on hand-computed cases, so that a wrong reference cannot pass the comparison below.
    assert reference_counts("feels hopeless but not heard") == (2, 0)
    assert reference_counts("no longer feels let down; today she is at peace") == (0, 2)
    assert reference_counts("no longer feels let down, at peace") == (1, 1)  # "no" still within three tokens
    assert reference_counts("curious, kind of hurt") == (1, 0)


def test_token_polarity_by_hand() -> None:
    assert token_polarity("hopeless") == -1  # the longer stem wins over "hope"
    assert token_polarity("hopeful") == 1
    assert token_polarity("curiously") == 0  # neutral stems win
    assert token_polarity("table") == 0
    assert token_polarity("") == 0


def test_polarity_counts_equal_the_reference_on_generated_strings() -> None:
    texts = _generated(4000, seed=0)
    assert sum(reference_counts(t) != (0, 0) for t in texts) > 3000  # the strings exercise the matches
    mismatches = [
        (t, polarity_counts(t), reference_counts(t)) for t in texts if polarity_counts(t) != reference_counts(t)
    ]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("kind", KINDS)
def test_polarity_counts_equal_the_reference_on_the_shipped_phrases(kind) -> None:
    texts, _ = shipped_phrases(kind)
    assert [polarity_counts(t) for t in texts] == [reference_counts(t) for t in texts]


def test_polarity_counts_are_cached_and_stay_equal() -> None:
    polarity_counts.cache_clear()
    first = polarity_counts("does not feel heard")
    assert polarity_counts("does not feel heard") == first == (1, 0)
    assert polarity_counts.cache_info().hits >= 1


@pytest.mark.shared_data
def test_polarity_counts_equal_the_reference_on_the_release(text_file) -> None:
    texts = set()
    for sample in load_dataset(text_file).samples:
        for row in sample.rows:
            texts.update(e.emotion_description for e in row.internal_emotion)
            texts.update(attitude_text(v.viewpoint, v.attitude) for v in row.viewpoints_attitudes)
    assert len(texts) > 1000
    mismatches = sum(polarity_counts(t) != reference_counts(t) for t in texts)
    assert mismatches == 0
