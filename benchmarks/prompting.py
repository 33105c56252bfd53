"""Prompt building blocks shared by the six tasks: observable row rendering per mode, context windows, the
closed label block (taxonomy definitions + D.3 boundary rules; ``rescue_env.prompting``, with the scenario
settings, since the LLM agents share them) and the batch envelope.

Rows reach a prompt only through ``rescue_env.rendering`` (observable fields only, by mode); annotations
(emotion, viewpoints, strategy, relation labels, utterance type) are never read here.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.base import Mode, PromptOptions
from rescue_env.data.schema import Sample, Scenario
from rescue_env.prompting import SCENARIO_SETTING, label_block  # noqa: F401  (re-exported; shared with the agents)
from rescue_env.rendering import render_row, render_rows, window  # noqa: F401  (re-exported for the tasks)

MODE_EVIDENCE: dict[Mode, str] = {
    "dialogue": "Evidence: the transcript only (speaker, addressees, words, overlapping speech, timing).",
    "audio": "Evidence: the transcript plus each turn's tone of voice.",
    "visual": "Evidence: the transcript plus visual cues (posture, facial expression, self-directed and "
    "interaction behaviour) where they were recorded.",
    "audiovisual": "Evidence: the transcript, each turn's tone of voice and visual cues where they were recorded.",
}


def current_row_note(size: int) -> str:
    """The ER/VP instruction about context (reference-spec 8.2: the current turn's evidence dominates)."""
    if size == 0:
        return "Only the current row is shown."
    return "Earlier rows are shown only to resolve references; the current row's evidence should dominate."


def current_row_item(sample: Sample, row: int, size: int, mode: Mode) -> list[str]:
    """The ER/VP item body: up to ``size`` earlier rows, then the current row."""
    parts = [f"Earlier rows:\n{render_rows(sample, window(row - 1, size), mode)}"] if size != 0 else []
    parts.append(f"Current row:\n{render_row(sample.rows[row], row, mode)}")
    return parts


def context_size(options: PromptOptions, default: int) -> int:
    return default if options.context_size is None else options.context_size


def describe_window(size: int, what: str = "rows") -> str:
    if size < 0:
        return f"all earlier {what} of the session"
    return f"at most the {size} most recent {what}"


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
