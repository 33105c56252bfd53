"""``--model mock``: a model that needs no network, for smoke tests, demos and CI.

:class:`agents.client.LLMClient` answers a mock model through litellm's ``mock_response`` (so the answer goes
through the same client path, cache key space and token accounting as a real one) with :func:`mock_responder`.
litellm itself does not accept the bare model string ``"mock"`` (``BadRequestError: LLM Provider NOT provided``),
so the client sends :data:`LITELLM_MOCK_MODEL` (``"openai/mock"``) together with ``mock_response``; no request
leaves the process.

:func:`mock_responder` is a valid, dumb model for rescue-env prompts:

- a task prompt (``### Item N`` blocks and ``... in this form:`` followed by a JSON example) gets, for every
  item, the first example answer of the prompt's own schema with ``id = N``; placeholders such as
  ``"<most likely label>"`` are filled from the item's ``Candidates:`` line, else from the prompt's closed label
  set (``- key (Name): ...`` lines), in the order shown. So every answer parses, and scores are those of a
  constant answer;
- a judge prompt (``exactly in this form:`` followed by a template with ``<integer L-H>`` placeholders) gets the
  template with each placeholder set to its middle value (1-5 -> 3) and each ``"<...>"`` text set to ``"mock"``;
- a prompt that a registered responder recognises gets its answer: the agents that build their own prompts
  register one at import (:func:`register_responder`): a therapist prompt (``## Your decision``) gets
  :func:`agents.therapist.mock_decision`, a persona prompt (``## Your next turn``) :func:`agents.persona.mock_persona`:
  valid, deterministic answers;
- anything else gets :data:`DEFAULT_REPLY`.

This module imports nothing of the project: the agents import it to register, and the client imports it to answer.
So that a process that imported only :mod:`agents.client` (a client worker process, the test server) still
answers every prompt kind, :func:`mock_responder` imports the modules of :data:`RESPONDER_MODULES` by name on its
first call (their import registers their responders; nothing else of theirs is used here).

The test server (:mod:`agents.fake_server`) answers with the same function.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "MOCK_MODEL",
    "LITELLM_MOCK_MODEL",
    "DEFAULT_REPLY",
    "RESPONDER_MODULES",
    "is_mock",
    "mock_responder",
    "last_user_text",
    "register_responder",
]

MOCK_MODEL = "mock"
LITELLM_MOCK_MODEL = "openai/mock"  # what the client passes to litellm (with mock_response) for MOCK_MODEL
DEFAULT_REPLY = '{"ok": true}'
RESPONDER_MODULES = ("agents.therapist", "agents.persona")
"""Modules that register a mock responder when imported, in the order their responders are asked (the first
that recognises a prompt answers it); :func:`mock_responder` imports them on its first call."""

Recognise = Callable[[Sequence[Mapping[str, Any]]], bool]
Respond = Callable[[Sequence[Mapping[str, Any]]], str]
_responders: dict[tuple[str, str], tuple[Recognise, Respond]] = {}
_loaded = False
_lock = threading.Lock()

_ITEM = re.compile(r"^### Item (\d+)$", re.M)
_LABEL = re.compile(r"^- ([a-z][a-z0-9_]*) \([^)\n]*\): ", re.M)
_CANDIDATES = re.compile(r"^Candidates: (.+)$", re.M)
_SLOT = re.compile(r"^<[^<>]*>$")
_EXAMPLE = re.compile(r"in this form:\n(\{.*\})\s*$", re.S)
_INTEGER_SLOT = re.compile(r"<integer\s+(-?\d+)\s*-\s*(-?\d+)>")
_TEXT_SLOT = re.compile(r'"<[^"<>]*>"')


def is_mock(model: str | None) -> bool:
    """True for the offline mock model (``--model mock``)."""
    return model is not None and model.strip() == MOCK_MODEL


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI "content parts"
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last message (where rescue-env prompts put the items and the answer schema)."""
    if not messages:
        return ""
    last = messages[-1]
    return _content_text(last.get("content")) if isinstance(last, Mapping) else ""


def _fill_template(template: str) -> str | None:
    """A judge answer template with ``<integer L-H>`` and ``"<text>"`` slots, filled; None if it is not one."""

    def middle(match: re.Match[str]) -> str:
        low, high = int(match.group(1)), int(match.group(2))
        return str((low + high) // 2)

    filled = _TEXT_SLOT.sub('"mock"', _INTEGER_SLOT.sub(middle, template))
    try:
        json.loads(filled)
    except ValueError:
        return None
    return filled


def _items(prompt: str) -> list[tuple[str, str]]:
    """(number, text) of every ``### Item N`` block."""
    marks = list(_ITEM.finditer(prompt))
    ends = [m.start() for m in marks[1:]] + [len(prompt)]
    return [(m.group(1), prompt[m.end() : end]) for m, end in zip(marks, ends)]


def _fill_slots(value: Any, choices: list[str]) -> Any:
    """``"<...>"`` placeholders (alone, or a list of them) replaced by the first choices."""
    if not choices:
        return value
    if isinstance(value, str) and _SLOT.match(value):
        return choices[0]
    if isinstance(value, list) and value and all(isinstance(v, str) and _SLOT.match(v) for v in value):
        return choices[: len(value)]
    return value


def register_responder(recognise: Recognise, respond: Respond) -> None:
    """Answer the prompts that ``recognise(messages)`` accepts with ``respond(messages)`` (a valid, deterministic
    answer of the prompt's own kind). Registering a function of the same module and name again replaces it (a
    reloaded module). Responders of :data:`RESPONDER_MODULES` are asked in that order, any others after them."""
    key = (respond.__module__, respond.__qualname__)
    with _lock:
        _responders[key] = (recognise, respond)


def _rank(key: tuple[str, str]) -> int:
    module = key[0]
    return RESPONDER_MODULES.index(module) if module in RESPONDER_MODULES else len(RESPONDER_MODULES)


def _registered() -> list[tuple[Recognise, Respond]]:
    """The responders, every module of :data:`RESPONDER_MODULES` imported first (once per process)."""
    global _loaded
    if not _loaded:
        for name in RESPONDER_MODULES:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)  # its import calls register_responder
        _loaded = True
    with _lock:
        return [_responders[key] for key in sorted(_responders, key=_rank)]  # sorted is stable


def mock_responder(messages: list[dict]) -> str:
    """The mock model's answer to ``messages`` (see the module docstring)."""
    for recognise, respond in _registered():
        if recognise(messages):
            return respond(messages)
    prompt = last_user_text(messages)
    match = _EXAMPLE.search(prompt)
    if match is None:
        return DEFAULT_REPLY
    try:
        example = json.loads(match.group(1))
    except ValueError:
        return _fill_template(match.group(1)) or DEFAULT_REPLY
    answers = example.get("answers") if isinstance(example, dict) else None
    if not isinstance(answers, list) or not answers or not isinstance(answers[0], dict):
        return json.dumps(example)
    first = answers[0]
    labels = list(dict.fromkeys(_LABEL.findall(prompt)))
    out = []
    for number, text in _items(prompt):
        found = _CANDIDATES.search(text)
        choices = [c.strip() for c in found.group(1).split(",") if c.strip()] if found else labels
        out.append({**{k: _fill_slots(v, choices) for k, v in first.items()}, "id": number})
    return json.dumps({"answers": out})
