"""A model's chat messages, in and out, as the tasks (``benchmarks``) and the LLM agents (``agents.therapist``,
``agents.persona``) both handle them: the prompt hash that records a request without its text, and the tolerant
reading of a JSON answer.

Failures are values, not exceptions: ``validate_answer`` says why an answer could not be used, so that the caller
can count the failure (a task scores the instance as wrong, an agent falls back) and never drop it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["extract_json", "prompt_hash", "validate_answer"]

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def prompt_hash(messages: Sequence[Mapping[str, str]]) -> str:
    """16 hex digits identifying a request's messages (records keep this, never the prompt text)."""
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()[:16]


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
