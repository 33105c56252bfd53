"""Prompt building blocks shared by the six tasks: observable row rendering per mode, context windows, the
closed label block (taxonomy definitions + D.3 boundary rules) and the batch envelope.

``render_row`` is the only function that reads a row for a prompt, and it reads only what an observer of the
session could see or hear: speaker, addressees, words, overlapping speech, time, and (by mode) tone of voice and
visual cues. Annotations (emotion, viewpoints, strategy, relation labels, utterance type) are never read here.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.base import Mode, PromptOptions
from rescue_env.data.schema import Row, Sample, Scenario
from rescue_env.taxonomy import BOUNDARY_RULES, LabelSet

MODE_EVIDENCE: dict[Mode, str] = {
    "dialogue": "Evidence: the transcript only (speaker, addressees, words, overlapping speech, timing).",
    "audio": "Evidence: the transcript plus each turn's tone of voice.",
    "visual": "Evidence: the transcript plus visual cues (posture, facial expression, self-directed and "
    "interaction behaviour) where they were recorded.",
    "audiovisual": "Evidence: the transcript, each turn's tone of voice and visual cues where they were recorded.",
}

SCENARIO_SETTING: dict[Scenario, str] = {
    "couple": "a couple-therapy session (two partners and a therapist)",
    "family": "a family-therapy session (several family members and a therapist)",
}


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


def context_size(options: PromptOptions, default: int) -> int:
    return default if options.context_size is None else options.context_size


def describe_window(size: int, what: str = "rows") -> str:
    if size < 0:
        return f"all earlier {what} of the session"
    return f"at most the {size} most recent {what}"


def label_block(label_set: LabelSet, heading: str) -> str:
    """The closed label set with definitions, use-when / do-not-use-when, then the D.3 boundary rules."""
    lines = [heading]
    for label in label_set:
        lines.append(f"- {label.key} ({label.name}): {label.definition}")
        lines.append(f"    Use when: {label.use_when}")
        lines.append(f"    Do not use when: {label.do_not_use_when}")
    lines.append("Boundary rules:")
    lines.extend(f"- {rule}" for rule in BOUNDARY_RULES[label_set.kind])
    return "\n".join(lines)


def system_message(scenario: Scenario) -> dict[str, str]:
    return {
        "role": "system",
        "content": "You are an experienced couple and family therapist helping to evaluate support decisions in "
        f"{SCENARIO_SETTING[scenario]}. Base every judgement only on the evidence given; never assume what "
        "happens after the last row shown. Answer with JSON only.",
    }


def envelope(
    scenario: Scenario,
    instructions: str,
    items: Sequence[str],
    answer_example: str,
    options: PromptOptions,
    extra_blocks: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages of one batch: instructions, label blocks, evidence sentence, numbered items, schema."""
    body = [instructions.strip(), *extra_blocks, MODE_EVIDENCE[options.mode]]
    for number, item in enumerate(items, start=1):
        body.append(f"### Item {number}\n{item.strip()}")
    body.append(
        "Answer every item, using its number as the id. Reply with one JSON object only, no markdown, in this form:\n"
        + answer_example
    )
    return [system_message(scenario), {"role": "user", "content": "\n\n".join(body)}]


def item_ids(count: int) -> list[str]:
    """The neutral ids a batch's items carry in the prompt ("1", "2", ...)."""
    return [str(i) for i in range(1, count + 1)]
