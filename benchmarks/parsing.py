"""Tolerant parsing of model answers: JSON extraction, per-item answers, label matching.

Failures are values, not exceptions: every helper says why an answer could not be used, so that the runner can
score the instance as wrong and count the failure (never drop it, never score it right).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from benchmarks.base import Instance, Prediction
from rescue_env.taxonomy import LabelSet, match_label

M = TypeVar("M", bound=BaseModel)

ItemParser = Callable[[Mapping[str, Any], Instance], tuple[Any, "str | None", bool]]
"""One answer object (and its instance) -> (value, failure reason or None, normalised)."""

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def extract_json(text: str | None) -> Any | None:
    """The first JSON object (or array) in ``text``: whole text, then code fences, then the first decodable
    ``{``/``[`` position. None when there is none."""
    if not text:
        return None
    candidates = [text.strip(), *(m.strip() for m in _FENCE.findall(text))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, (dict, list)):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, (dict, list)):
            return value
    return None


def validate_answer(text: str | None, schema: type[M]) -> tuple[M | None, str | None, str | None]:
    """A one-object answer as ``schema``: (answer, None, None), or (None, failure kind, detail) with kind
    ``api_error`` (no text), ``malformed_json`` (no JSON object) or ``invalid_schema`` (the first error)."""
    if text is None:
        return None, "api_error", None
    payload = extract_json(text)
    if not isinstance(payload, dict):
        return None, "malformed_json", None
    try:
        return schema.model_validate(payload), None, None
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, "invalid_schema", f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"[:200]


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
