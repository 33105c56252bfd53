"""Overlapping segments: samples whose dialogue shares a passage, and the groups that must never share a request.

The release's samples are segments of longer recorded sessions, and two segments of one session can overlap (one
segment's rows from 7 on are another's rows from 3 on; shared/data/README.md, "Overlapping segments"). Whatever
one instance may not see (its decision row, the rows after it) can then stand in the context of an instance of the
other segment. Anything that puts two instances side by side (a batched request, a few-shot block) must keep such
samples apart, not just samples with another id.

Rows are not a safe unit to compare: the two segments of one moment are transcribed and cut into rows separately,
so the same words fall into rows of different lengths (exact row matches find only 9 of the release's pairs). A
passage is therefore a run of ``MIN_WORDS`` consecutive words of the samples' dialogue, lower-cased, punctuation
dropped, read across row boundaries. Twelve words: on the release, 10- and 12-word runs find the same 25 pairs,
every one inside one couple or family group, while 8-word runs add 11 pairs across groups (stock phrases such as
a therapist's opening line), which share no passage of the conversation itself.

``leak_groups`` is the key that batching uses: the split group of ``rescue_env.data.splits.group_of`` (a couple, or
a family found by its people), joined with every sample it overlaps, so that an overlap across groups in some
other data set is kept apart too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rescue_env.data.schema import Sample
from rescue_env.data.splits import group_of

MIN_WORDS = 12
"""Consecutive words that two samples must share to count as overlapping (see the module docstring)."""

_WORD = re.compile(r"[\w']+")


@dataclass(frozen=True)
class Overlap:
    """Two samples (``first`` < ``second`` by id) sharing ``windows`` distinct runs of ``MIN_WORDS`` words (a
    shared passage of n words counts n - MIN_WORDS + 1)."""

    first: str
    second: str
    windows: int


def _words(sample: Sample) -> list[str]:
    return _WORD.findall(" ".join(row.dialogue_cleaned or "" for row in sample.rows).lower())


def overlapping_segments(samples: Iterable[Sample], min_words: int = MIN_WORDS) -> list[Overlap]:
    """Every pair of samples whose dialogue shares a run of ``min_words`` consecutive words, sorted by ids."""
    if min_words < 1:
        raise ValueError(f"min_words must be >= 1, got {min_words}")
    holders: dict[tuple[str, ...], set[str]] = {}
    for sample in samples:
        words = _words(sample)
        for start in range(len(words) - min_words + 1):
            holders.setdefault(tuple(words[start : start + min_words]), set()).add(sample.sample_id)
    shared: dict[tuple[str, str], int] = {}
    for ids in holders.values():
        if len(ids) > 1:
            ordered = sorted(ids)
            for i, first in enumerate(ordered):
                for second in ordered[i + 1 :]:
                    shared[(first, second)] = shared.get((first, second), 0) + 1
    return [Overlap(a, b, n) for (a, b), n in sorted(shared.items())]


def leak_groups(samples: Iterable[Sample], overlaps: Iterable[Overlap] | None = None) -> dict[str, str]:
    """sample id -> the key of the samples it must never share a request with: its split group, joined with the
    groups of every sample it overlaps (the smallest group id names a joined set). Input order kept."""
    items = list(samples)
    groups = group_of(items)
    parent = {g: g for g in groups.values()}

    def find(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for overlap in overlapping_segments(items) if overlaps is None else overlaps:
        a, b = find(groups[overlap.first]), find(groups[overlap.second])
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {sid: find(g) for sid, g in groups.items()}


def across_groups(overlaps: Iterable[Overlap], groups: Mapping[str, str]) -> list[Overlap]:
    """The overlaps whose two samples sit in different split groups: a grouped split would put one moment on both
    sides (none on the release)."""
    return [o for o in overlaps if groups[o.first] != groups[o.second]]


def overlap_summary(samples: Iterable[Sample]) -> dict[str, Any]:
    """Every overlapping pair, and whether it straddles split groups (``data stats --json``)."""
    items = list(samples)
    overlaps = overlapping_segments(items)
    straddling = set(across_groups(overlaps, group_of(items)))
    return {
        "min_words": MIN_WORDS,
        "pairs": [
            {"first": o.first, "second": o.second, "shared_windows": o.windows, "across_groups": o in straddling}
            for o in overlaps
        ],
    }


def overlap_lines(summary: Mapping[str, Any]) -> list[str]:
    """``overlap_summary`` as ``data validate`` and ``data stats`` print it: a count, then a line a pair."""
    pairs, words = summary["pairs"], summary["min_words"]
    if not pairs:
        return [f"overlapping segments: none (no two samples share a run of {words} words)"]
    straddling = sum(p["across_groups"] for p in pairs)
    where = (
        f"{straddling} across groups: a grouped split puts one moment on both sides"
        if straddling
        else "all within one couple or family group"
    )
    head = (
        f"overlapping segments: {len(pairs)} pair(s) share a run of {words}+ words ({where}); "
        "batched requests keep them apart"
    )
    return [head] + [
        f"  {p['first']} ~ {p['second']}: {p['shared_windows']} shared {words}-word window(s)"
        + (" [across groups]" if p["across_groups"] else "")
        for p in pairs
    ]
