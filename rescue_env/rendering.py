"""Observable rendering of rows: what an observer of a session could see or hear, by evidence mode, and the
parser that reads that text back.

The one place that turns rows into text for a model or a policy (benchmark prompts and the environment's
observations). It reads speaker, addressees, words, overlapping speech, timing and, by mode, tone of voice and
visual cues; never annotations (emotion, viewpoints, strategy, relation labels, utterance type). Policies and
wrappers that only see the observation parse it with ``split_context``, ``header_slots`` and ``ParsedRow``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from rescue_env.data.schema import Row, Sample

Mode = Literal["dialogue", "audio", "visual", "audiovisual"]
MODES: tuple[Mode, ...] = ("dialogue", "audio", "visual", "audiovisual")


def _seconds(value: float) -> str:
    minutes, seconds = divmod(float(value), 60.0)
    return f"{int(minutes):02d}:{seconds:04.1f}"


def _names(names: Sequence[str]) -> str:
    return ", ".join(n for n in names if n.strip()) or "-"


def render_row(row: Row, position: int, mode: Mode) -> str:
    """One row as the model sees it: ``[12] 03:21.5-03:35.0 Ana -> Therapist: "..."`` plus mode evidence."""
    lines = [
        f"[{position + 1}] {_seconds(row.start_time)}-{_seconds(row.end_time)} "
        f'{row.primary_speaker or "?"} -> {_names(row.target)}: "{row.dialogue_cleaned.strip()}"'
    ]
    for bg in row.background_dialogue:
        if bg.speaker.strip() and bg.content.strip():
            lines.append(f'    overlapping: {bg.speaker} -> {_names(bg.target)}: "{bg.content.strip()}"')
    if mode in ("audio", "audiovisual") and row.tone_of_voice.strip():
        lines.append(f"    tone of voice: {row.tone_of_voice.strip()}")
    if mode in ("visual", "audiovisual"):
        for title, cues in (
            ("body posture", row.body_posture),
            ("facial expression", row.facial_expressions),
            ("self-directed behaviour", row.self_directed_behavior),
        ):
            shown = [f"{c.person}: {c.description.strip()}" for c in cues if c.person.strip() and c.description.strip()]
            if shown:
                lines.append(f"    {title}: " + "; ".join(shown))
        acts = [
            f"{c.initiator} -> {_names(c.target)}: {c.description.strip()}"
            for c in row.interaction_behavior
            if c.initiator.strip() and c.description.strip()
        ]
        if acts:
            lines.append("    interaction: " + "; ".join(acts))
    return "\n".join(lines)


def window(end: int, size: int) -> range:
    """Row positions of a context window that ends at ``end`` (inclusive): the last ``size`` rows, all rows up
    to ``end`` when ``size`` < 0, none when ``size`` == 0."""
    if size == 0 or end < 0:
        return range(0)
    start = 0 if size < 0 else max(0, end - size + 1)
    return range(start, end + 1)


def render_rows(sample: Sample, positions: range, mode: Mode) -> str:
    if len(positions) == 0:
        return "(no earlier rows)"
    return "\n".join(render_row(sample.rows[p], p, mode) for p in positions)


def render_header(scenario: str, people: Sequence[str], group_slot: int) -> str:
    """The first line of an environment observation: the scenario and the participant slots."""
    group = "Couple" if scenario == "couple" else "Family"
    slots = ", ".join(f"[{i}] {name}" for i, name in enumerate(people))
    return f"{scenario.capitalize()} therapy session. Participant slots: {slots}, [{group_slot}] everyone ({group}).\n"


# A row as ``render_row`` writes it: ``[12] 03:21.5-03:35.0 Ana -> Therapist: "..."``.
ROW_START = re.compile(r"\[(\d+)\] \d+:\d+(?:\.\d+)?-\d+:\d+(?:\.\d+)? ")
_SLOT = re.compile(r"\[(\d+)\] (.*?)(?=, \[\d+\] |$)")


class ParsedRow:
    """One row block of a rendered context: the row line plus its indented evidence lines."""

    __slots__ = ("position", "speaker", "addressees", "words", "body", "is_row", "overlapping")

    def __init__(self, block: str) -> None:
        match = ROW_START.match(block)
        self.is_row = match is not None
        self.position = int(match.group(1)) if match else None  # the row number shown (1-based)
        # The block without "[n] mm:ss-mm:ss", whose digits are positions, not language.
        self.body = block[match.end() :] if match else block
        self.speaker = self.words = ""
        self.addressees: tuple[str, ...] = ()
        self.overlapping = "\n    overlapping:" in block
        if match:
            first, _, _ = self.body.partition("\n    ")
            speaker, arrow, rest = first.partition(" -> ")
            addressees, colon, words = rest.partition(': "')
            if arrow and colon:
                self.speaker = speaker.strip()
                self.addressees = tuple(a.strip() for a in addressees.split(",") if a.strip() not in ("", "-"))
                self.words = words[:-1] if words.endswith('"') else words


def split_context(context: str) -> tuple[str, list[str]]:
    """The header line and the row blocks of an environment observation (a block cut at its start by
    ``max_chars`` is kept; ``ParsedRow(block).is_row`` is then False)."""
    header, _, rows_text = context.partition("\n")
    blocks: list[str] = []
    for line in rows_text.split("\n"):
        if not blocks or ROW_START.match(line):
            blocks.append(line)
        else:
            blocks[-1] += "\n" + line
    return header, [b for b in blocks if b.strip()]


def header_slots(header: str, n_slots: int) -> dict[str, int]:
    """Participant name -> slot, from ``render_header``'s line (the group slot is left out)."""
    _, _, listing = header.partition("Participant slots: ")
    slots: dict[str, int] = {}
    for match in _SLOT.finditer(listing.rstrip(".")):
        slot = int(match.group(1))
        if slot < n_slots and not match.group(2).startswith("everyone ("):
            slots.setdefault(match.group(2).strip(), slot)
    return slots
