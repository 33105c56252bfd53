"""Text helpers shared by the environment and the rule-based baselines."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence

CHARSET = frozenset(string.printable) - frozenset("\x0b\x0c\r")
"""Characters of the ``context`` observation: printable ASCII, tab and newline."""
_REPLACEMENTS = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2026": "...",
        "\u00a0": " ",
    }
)


def normalise_text(text: str) -> str:
    """Map any transcript text into ``CHARSET``: typographic punctuation to ASCII, accents stripped (NFKD),
    anything else left (control characters, symbols) becomes ``?``."""
    text = unicodedata.normalize("NFKD", text.translate(_REPLACEMENTS))
    return "".join(c if c in CHARSET else ("" if unicodedata.combining(c) else "?") for c in text)


def has_any(text: str, phrases: Sequence[str]) -> bool:
    """Whole-word (or whole-phrase) match of any of ``phrases`` in ``text``, case-insensitive."""
    text = text.replace("\u2019", "'")  # transcripts mix typographic and plain apostrophes
    return any(re.search(rf"(?<![\w']){re.escape(p)}(?![\w'])", text, re.I) for p in phrases)
