"""Observable rendering of rows: what an observer of a session could see or hear, by evidence mode.

The one place that turns rows into text for a model or a policy (benchmark prompts and the environment's
observations). It reads speaker, addressees, words, overlapping speech, timing and, by mode, tone of voice and
visual cues; never annotations (emotion, viewpoints, strategy, relation labels, utterance type).
"""

from __future__ import annotations

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
