"""Tolerant parsing of model answers: per-item answers, label matching; JSON extraction and one-object answers
(``extract_json``, ``validate_answer``) come from ``agents.messages``, which the LLM agents share.

Failures are values, not exceptions: every helper says why an answer could not be used, so that the runner can
score the instance as wrong and count the failure (never drop it, never score it right).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.messages import extract_json, validate_answer  # noqa: F401  (re-exported: shared with the agents)
from benchmarks.base import Instance, Prediction
from rescue_env.taxonomy import LabelSet, match_label

ItemParser = Callable[[Mapping[str, Any], Instance], tuple[Any, "str | None", bool]]
"""One answer object (and its instance) -> (value, failure reason or None, normalised)."""


def answer_items(text: str | None, item_ids: Sequence[str]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Map item id -> answer object from ``{"answers": [{"id": ..., ...}, ...]}`` (or a bare list / single
    object). Returns (answers, batch failure reason). Unknown ids are ignored; a one-item batch accepts an answer
    without a usable id."""
    if text is None:
        return {}, "no_answer"
    payload = extract_json(text)
    if payload is None:
        return {}, "malformed_json"
    if isinstance(payload, dict):
        items = payload.get("answers", payload.get("predictions"))
        if items is None:
            items = [payload]
        elif isinstance(items, dict):
            items = [items]
    else:
        items = payload
    if not isinstance(items, list):
        return {}, "malformed_json"
    wanted = set(item_ids)
    found: dict[str, dict[str, Any]] = {}
    loose: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        key = str(item.get("id", "")).strip()
        if key in wanted:
            found.setdefault(key, item)
        else:
            loose.append(item)
    if len(item_ids) == 1 and not found and len(loose) == 1:
        found[item_ids[0]] = loose[0]
    return found, None


def parse_batch(text: str | None, batch: Sequence[Instance], parse_item: ItemParser) -> list[Prediction]:
    """One ``Prediction`` per instance of a batch answer: the batch's failure (``no_answer``,
    ``malformed_json``) or ``missing_item`` for every instance it applies to, else ``parse_item``'s verdict."""
    ids = [str(i) for i in range(1, len(batch) + 1)]
    answers, failure = answer_items(text, ids)
    predictions = []
    for item_id, instance in zip(ids, batch):
        answer = answers.get(item_id)
        if failure is not None or answer is None:
            predictions.append(Prediction(instance_id=instance.instance_id, failure=failure or "missing_item"))
            continue
        value, reason, normalised = parse_item(answer, instance)
        if reason is not None:
            predictions.append(Prediction(instance_id=instance.instance_id, failure=reason))
        else:
            predictions.append(Prediction(instance_id=instance.instance_id, value=value, normalised=normalised))
    return predictions


def match_ranked(
    values: Any, label_set: LabelSet | Sequence[str], k: int = 3
) -> tuple[list[str] | None, str | None, bool]:
    """Top-k labels from a list answer: (labels, failure, normalised). Out-of-set entries are dropped; an answer
    with no valid label fails as ``out_of_set``. Never padded: a short list just cannot earn credit lower down."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        return None, "missing_field", False
    ranked: list[str] = []
    normalised = False
    for value in values:
        if not isinstance(value, str):
            continue
        key, needed = match_choice(value, label_set)
        if key is not None and key not in ranked:
            ranked.append(key)
            normalised |= needed
    if not ranked:
        return None, f"out_of_set: {str(values[0])[:60]}", False
    return ranked[:k], None, normalised


def match_choice(text: str, choices: LabelSet | Sequence[str]) -> tuple[str | None, bool]:
    """Match a label against a taxonomy set or a plain list of choices (case- and separator-insensitive)."""
    if isinstance(choices, LabelSet):
        return match_label(text, choices)
    if text in choices:
        return text, False
    from rescue_env.taxonomy import normalise_label

    wanted = normalise_label(text)
    for choice in choices:
        if normalise_label(choice) == wanted:
            return choice, True
    return None, False
