"""Text helpers shared by the environment and the rule-based baselines."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

CHARSET = frozenset(string.printable) - frozenset("\x0b\x0c\r")
"""Characters of the ``context`` observation: printable ASCII, tab and newline."""
_REPLACEMENTS: tuple[tuple[str, str], ...] = (
    ("\u2018", "'"),
    ("\u2019", "'"),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u2013", "-"),
    ("\u2014", "-"),
    ("\u2026", "..."),
    ("\u00a0", " "),
)


# Any one character outside CHARSET (a regex scan runs in C: the task envs normalise whole prompts)
_OUTSIDE = re.compile(f"[^{re.escape(''.join(sorted(CHARSET)))}]")


def _outside(match: re.Match[str]) -> str:
    return "" if unicodedata.combining(match.group()) else "?"


def normalise_text(text: str) -> str:
    """Map any transcript text into ``CHARSET``: typographic punctuation to ASCII, accents stripped (NFKD),
    anything else left (control characters, symbols) becomes ``?``."""
    for typographic, plain in _REPLACEMENTS:  # str.replace per character: ~15x faster than str.translate here
        text = text.replace(typographic, plain)
    return _OUTSIDE.sub(_outside, unicodedata.normalize("NFKD", text))


def has_any(text: str, phrases: Sequence[str]) -> bool:
    """Whole-word (or whole-phrase) match of any of ``phrases`` in ``text``, case-insensitive."""
    text = text.replace("\u2019", "'")  # transcripts mix typographic and plain apostrophes
    return _any_phrase(tuple(phrases)).search(text) is not None


@lru_cache(maxsize=256)
def _any_phrase(phrases: tuple[str, ...]) -> re.Pattern[str]:
    # One compiled alternation per phrase list: the scorers call has_any per row, and compiling a pattern per
    # phrase per call was ~40 % of a heuristic run (issue 14). An alternation matches where any phrase matches.
    if not phrases:
        return re.compile(r"(?!)")  # matches nothing, as any() over no phrases
    return re.compile(r"(?<![\w'])(?:" + "|".join(map(re.escape, phrases)) + r")(?![\w'])", re.I)
