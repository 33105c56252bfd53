"""One conversation, row by row (``rescue-bench data show SAMPLE_ID``): a plain-text transcript with every
row's annotations, or the same as one JSON object.

Per row: its number (1-based, as the release's ``row_index``), start and end time, speaker and addressees, the
words, each annotated emotion with its intensity, each viewpoint (source -> target), the relation label (the
``relation_pattern`` field, else the ``relation_cycle_state`` one: the release keeps labels in both) and the
therapist's support target and strategy. The JSON keeps both relation fields as read, so ``""`` (no clear
pattern) and a missing label stay apart.
"""

from __future__ import annotations

import difflib
import textwrap
from collections.abc import Sequence
from typing import Any

from rescue_env.data.domain import participants, scenario_of
from rescue_env.data.schema import Row, Sample

__all__ = ["close_ids", "sample_record", "sample_text", "unknown_id_message"]

NONE = "—"
WIDTH = 100
INDENT = " " * 5


def _clock(seconds: float) -> str:
    """``83.4`` -> ``1:23.4`` (minutes:seconds, one decimal)."""
    minutes, rest = divmod(float(seconds), 60.0)
    return f"{int(minutes)}:{rest:04.1f}"


def _number(value: float | None) -> str:
    return "?" if value is None else f"{float(value):g}"


def relation_label(row: Row) -> str:
    """The row's relation label for display: ``relation_pattern`` when non-empty, else ``relation_cycle_state``
    (marked ``(cycle)``), ``no clear pattern`` where the annotators left the pattern empty, else a dash."""
    pattern = (row.relation_pattern or "").strip()
    if pattern:
        return pattern
    cycle = (row.relation_cycle_state or "").strip()
    if cycle:
        return f"{cycle} (cycle)"
    return "no clear pattern" if row.relation_pattern == "" else NONE


def _support(row: Row) -> str:
    """``Maya, Jordan: reframe`` per support item, ``; ``-joined; a dash when the row has none."""
    items = []
    for item in row.support_strategy:
        target = ", ".join(t for t in item.target if t.strip()) or "?"
        items.append(f"{target}: {item.strategy_type.strip() or 'no strategy annotated'}")
    return "; ".join(items) or NONE


def sample_record(sample: Sample) -> dict[str, Any]:
    """The sample as ``--json`` prints it: its header fields and one object per row."""
    rows = []
    for position, row in enumerate(sample.rows):
        rows.append(
            {
                "row": position + 1,
                "start_time": row.start_time,
                "end_time": row.end_time,
                "speaker": row.primary_speaker,
                "target": list(row.target),
                "text": row.dialogue_cleaned,
                "emotions": [
                    {"person": e.person, "emotion": e.emotion_description, "intensity": e.intensity}
                    for e in row.internal_emotion
                ],
                "viewpoints": [
                    {"source": v.source, "target": v.target, "viewpoint": v.viewpoint, "attitude": v.attitude}
                    for v in row.viewpoints_attitudes
                ],
                "relation_pattern": row.relation_pattern,
                "relation_cycle_state": row.relation_cycle_state,
                "support": [
                    {"target": list(s.target), "strategy": s.strategy_type, "content": s.strategy_content}
                    for s in row.support_strategy
                ],
            }
        )
    return {
        "sample_id": sample.sample_id,
        "scenario": scenario_of(sample),
        "participants": participants(sample),
        "rows": rows,
    }


def _wrapped(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=f"{INDENT}{label}", subsequent_indent=INDENT + " " * len(label)
    ) or [f"{INDENT}{label}".rstrip()]


def _row_lines(position: int, row: Row, widths: Sequence[int]) -> list[str]:
    addressees = ", ".join(t for t in row.target if t.strip()) or NONE
    cells = [
        str(position + 1),
        f"{_clock(row.start_time)}-{_clock(row.end_time)}",
        row.primary_speaker,
        addressees,
        relation_label(row),
        _support(row),
    ]
    lines = ["  ".join(c.rjust(w) if i == 0 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()]
    if row.dialogue_cleaned.strip():
        lines += _wrapped("", f'"{row.dialogue_cleaned.strip()}"')
    for emotion in row.internal_emotion:
        feeling = f"{emotion.person} ({_number(emotion.intensity)}/10): {emotion.emotion_description}"
        lines += _wrapped("emotion   ", feeling)
    for view in row.viewpoints_attitudes:
        attitude = f" ({view.attitude})" if view.attitude.strip() else ""
        lines += _wrapped("viewpoint ", f"{view.source} -> {view.target}: {view.viewpoint}{attitude}")
    for item in row.support_strategy:
        if item.strategy_content.strip():
            lines += _wrapped("support   ", f"{item.strategy_type.strip() or '?'}: {item.strategy_content.strip()}")
    return lines


HEADER = ("row", "time", "speaker", "to", "relation", "support (target: strategy)")


def sample_text(sample: Sample, source: str = "") -> str:
    """The plain-text transcript: a title line, a header, then per row one line of columns and, indented under
    it, the words, the emotions and the viewpoints."""
    rows = sample.rows
    cells = [
        (
            str(p + 1),
            f"{_clock(r.start_time)}-{_clock(r.end_time)}",
            r.primary_speaker,
            ", ".join(t for t in r.target if t.strip()) or NONE,
            relation_label(r),
            "",
        )
        for p, r in enumerate(rows)
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER)]
    widths[-1] = 0  # the last column is not padded
    people = ", ".join(participants(sample)) or NONE
    title = (
        f"{sample.sample_id}: {scenario_of(sample)}, participants {people}; {len(rows)} rows, "
        f"{_clock(rows[-1].end_time)}" + (f" ({source})" if source else "")
    )
    header = "  ".join(h.rjust(w) if i == 0 else h.ljust(w) for i, (h, w) in enumerate(zip(HEADER, widths)))
    lines = [title, header.rstrip()]
    for position, row in enumerate(rows):
        lines += _row_lines(position, row, widths)
    return "\n".join(lines) + "\n"


SIMILAR = 0.6  # difflib ratio an id needs to be suggested at all
NEAR_BEST = 0.1  # ... and how close to the best one: ids of one corpus share their shape, so all look alike


def close_ids(wanted: str, ids: Sequence[str], limit: int = 5) -> list[str]:
    """Up to ``limit`` ids that look like ``wanted``: those containing it (a prefix such as a couple's name, an id
    without the release's ``/merged``), then the most similar ones (difflib), only those near the best match."""
    lowered = wanted.lower()
    containing = [i for i in ids if lowered and lowered in i.lower()]
    ratios = {i: difflib.SequenceMatcher(None, wanted, i).ratio() for i in ids}
    best = max(ratios.values(), default=0.0)
    similar = sorted((i for i, r in ratios.items() if r >= SIMILAR and r >= best - NEAR_BEST), key=lambda i: -ratios[i])
    return list(dict.fromkeys([*containing, *similar]))[:limit]


def unknown_id_message(wanted: str, ids: Sequence[str], source: str) -> str:
    """One line: the id is not in the data, with the closest ids (or how to list them)."""
    close = close_ids(wanted, ids)
    hint = f"; close: {', '.join(close)}" if close else f"; {len(ids)} sample ids, e.g. {', '.join(ids[:3])}"
    return f"no sample {wanted!r} in {source}{hint}"
