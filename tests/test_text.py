"""normalise_text maps any text into the observation charset: one character at a time, by these rules (a fast
implementation, checked here against the rules written out); has_any, one compiled alternation, matches where a
search per phrase matches."""

from __future__ import annotations

import random
import re
import unicodedata

from rescue_env.text import CHARSET, has_any, normalise_text

PLAIN = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u2026": "..."}


def _by_the_rules(text: str) -> str:
    text = "".join(PLAIN.get(c, " " if c == "\u00a0" else c) for c in text)
    text = unicodedata.normalize("NFKD", text)
    return "".join(c if c in CHARSET else ("" if unicodedata.combining(c) else "?") for c in text)


def test_examples_by_hand() -> None:
    assert (
        normalise_text("Pursue\u2013withdraw \u201cno\u201d\u2026 caf\u00e9\u00a0ok")
        == 'Pursue-withdraw "no"... cafe ok'
    )
    assert normalise_text("a\rb\x0bc\x00d\u4e2d") == "a?b?c?d?"
    assert normalise_text("tab\tand\nnewline") == "tab\tand\nnewline"


def test_random_text_follows_the_rules() -> None:
    rng = random.Random(0)
    pool = [chr(i) for i in range(0x3000)] + list("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00a0\r\x0b\x0c")
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        assert normalise_text(text) == _by_the_rules(text), repr(text)
        assert set(normalise_text(text)) <= CHARSET


def _any_by_search(text: str, phrases: tuple[str, ...]) -> bool:
    text = text.replace("\u2019", "'")
    return any(re.search(rf"(?<![\w']){re.escape(p)}(?![\w'])", text, re.I) for p in phrases)


def test_has_any_by_hand() -> None:
    assert has_any("I don\u2019t know", ("don't",))
    assert not has_any("I don't know", ("do",))  # whole words only: the apostrophe belongs to the word
    assert has_any("Never AGAIN.", ("again", "x"))
    assert not has_any("against", ("again",))
    assert not has_any("anything", ())


def test_has_any_matches_a_search_per_phrase() -> None:
    rng = random.Random(1)
    lists = [("you always", "never", "your fault"), ("sorry", "i apologise"), ("do", "don't", "a b"), ("a.b", "c+")]
    words = ["you", "always", "never", "your", "fault", "sorry", "i", "apologise", "do", "don't", "a", "b"]
    words += ["a.b", "c+", "axb", "x", "never.", "don\u2019t", "you're"]
    for _ in range(3000):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        text = text.upper() if rng.random() < 0.3 else text
        for phrases in lists:
            assert has_any(text, phrases) == _any_by_search(text, phrases), (text, phrases)
