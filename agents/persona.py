"""An LLM as each participant of ``rescue_sim_multiparty_v0``: ``PersonaParticipant`` asks a model what the
participant drawn to speak says next (a ``SimParticipant`` of ``rescue_env.envs.sim_multiparty``).

Every call goes through the project's one client (``agents.client.LLMClient``: cache, retries, concurrency limit,
token and cost totals). The prompt (``persona_messages``) is built from the ``PersonaTurn`` alone: who the
participant is (name, couple or family therapy, the other people by name; names such as "Father" are roles),
their own recorded lines of the opening as examples of how they speak (words only), how everyone seems now (the
simulated state in words, as a therapist would read it), what the therapist just did and to whom (the agent's
own action: its strategy's name and definition from the taxonomy), and the last few rows of the conversation
(the opening, then the simulated rows). No annotation of the release (emotions, viewpoints, the recorded support
strategies, relation labels) is read.

The model answers one JSON object::

    {"say": "what you say next"}

**Parsing** (``parse_say``): the first JSON object of the answer (the whole answer, a code fence, or the first
decodable object, as the therapist's parser reads it) must have ``say`` as a JSON string, non-empty after
trimming and at most ``MAX_SAY_CHARS`` characters; other keys are ignored. Nothing else is repaired: text outside
the object is never taken as words. **A failed or unusable answer says nothing** (the participant's turn passes
in silence) and is recorded by kind (``FAILURE_KINDS``): ``api_error`` (no answer after the client's retries),
``malformed_json`` (no JSON object), ``invalid_schema`` (``say`` missing or not a string), ``empty_say``,
``too_long``. ``PersonaParticipant.usage`` counts calls, cache hits, tokens, cost and failures by kind;
``failure_log`` keeps one small record per failure.

``--model mock`` answers persona prompts (recognised by ``PERSONA_HEADING``) with ``mock_persona``: a valid,
deterministic line.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from agents.messages import prompt_hash, validate_answer
from agents.mock import register_responder
from rescue_env.data.domain import GROUP_LABELS
from rescue_env.prompting import SCENARIO_SETTING
from rescue_env.rendering import ParsedRow, split_context
from rescue_env.taxonomy import strategies

if TYPE_CHECKING:
    from agents.client import LLMClient
    from rescue_env.envs.sim_multiparty import PersonaTurn

__all__ = [
    "FAILURE_KINDS",
    "MAX_SAY_CHARS",
    "PERSONA_HEADING",
    "PersonaParticipant",
    "PersonaReply",
    "PersonaUsage",
    "is_persona_prompt",
    "mock_persona",
    "parse_say",
    "persona_messages",
]

PERSONA_HEADING = "## Your next turn"  # marks the persona prompt (the mock model recognises it by this)
MAX_SAY_CHARS = 1000
"""Longest usable ``say``: a spoken turn, not a monologue (a longer one is a ``too_long`` failure, never cut)."""
ANSWER_EXAMPLE = '{"say": "what you say next, in your own words"}'
FailureKind = Literal["api_error", "malformed_json", "invalid_schema", "empty_say", "too_long"]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
EXAMPLE_CHARS = 400
"""Longest example line shown (the end of a longer one is cut: it is an example of a voice, not a quote)."""

_SYSTEM = (
    "You are role-playing one client in {setting}, for a therapy training simulation. Stay in character: speak "
    "as this person would, in the first person, one turn of a spoken conversation. Never speak for anyone else "
    "or as the therapist. Answer with JSON only."
)


class PersonaAnswer(BaseModel):
    """The JSON object the model must send; ``say`` must be a JSON string (a number or a list is a schema
    failure, not words)."""

    model_config = ConfigDict(extra="ignore")

    say: StrictStr


@dataclass(frozen=True)
class PersonaReply:
    """One answer of a persona: the words (``None``: nothing said), and how they were obtained."""

    say: str | None
    raw: str | None = None
    failure: FailureKind | None = None
    detail: str | None = None
    prompt_hash: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


class PersonaUsage(BaseModel):
    """Running totals of one ``PersonaParticipant``."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    failures: dict[str, int] = Field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


# ----------------------------------------------------------------------------------------------------------------
# the prompt


def _addressed(turn: PersonaTurn) -> str:
    """Whom the therapist addressed, from the participant's point of view."""
    targets = turn.therapist.targets if turn.therapist is not None else ()
    if len(turn.participants) > 1 and set(targets) == set(turn.participants):
        return f"everyone (the {GROUP_LABELS[turn.scenario].lower()} as a whole)"
    names = ["you" if name == turn.name else name for name in targets]
    return " and ".join(names)


def _what_happened(turn: PersonaTurn) -> str:
    if turn.therapist is None:
        return "The therapist kept listening: the clients are talking among themselves."
    if not turn.therapist.targets:
        return "The therapist just spoke, without addressing anyone in particular."
    text = f"The therapist just spoke to {_addressed(turn)}"
    label = strategies(turn.scenario).get(turn.therapist.strategy) if turn.therapist.strategy else None
    if label is not None:
        text += f', using the support strategy "{label.name}": {label.definition.rstrip(".")}'
    return text + "."


def _recent_rows(context: str, history: int) -> list[str]:
    """The last ``history`` rows of the rendered context as ``Speaker -> Addressees: words`` (no numbers, times or
    cues: a participant remembers what was said)."""
    _, blocks = split_context(context)
    rows = [row for row in (ParsedRow(block) for block in blocks) if row.is_row]
    return [f"{r.speaker} -> {', '.join(r.addressees) or '-'}: {r.words}" for r in rows[-history:]] if history else []


def persona_messages(turn: PersonaTurn, *, history: int = 8, examples: int = 8) -> list[dict[str, str]]:
    """The chat messages asking ``turn.name`` for their next turn (see the module docstring); ``history`` rows of
    the conversation and up to ``examples`` of their own opening lines (the latest ones)."""
    setting = SCENARIO_SETTING[turn.scenario]
    others = ", ".join(name for name in turn.participants if name != turn.name) or "no other client"
    lines = [line if len(line) <= EXAMPLE_CHARS else line[:EXAMPLE_CHARS] + "..." for line in turn.opening_lines]
    shown = lines[-examples:] if examples else []
    spoken = "\n".join(f'- "{line}"' for line in shown) if shown else "(You have not spoken yet in this session.)"
    recent = _recent_rows(turn.context, history)
    body = [
        f"You are {turn.name}, one of the clients in {setting}. The other people in the session: {others}, and "
        'the therapist. Names such as "Father" or "Daughter" are roles in the family: "You are Father" means you '
        "are the father.",
        "## How you speak\nLines you said earlier in this session, in order (your own words):\n" + spoken,
        "## How you seem now\nHow the people in the room seem at this moment, as a therapist reads them (distress "
        f"0-10): {turn.state or '(no reading)'}\nLet this colour what you say; do not quote it.",
        "## What just happened\n" + _what_happened(turn),
        "## The conversation so far\nThe most recent turns, the last one is the latest:\n"
        + ("\n".join(recent) if recent else "(nothing has been said yet)"),
        f"{PERSONA_HEADING}\nIt is your turn to speak, as {turn.name}. Say what {turn.name} says next: one to "
        "three spoken sentences, in your own voice, reacting to the conversation. Reply with one JSON object only, "
        'no markdown: "say" is exactly what you say aloud. In this form:\n' + ANSWER_EXAMPLE,
    ]
    return [
        {"role": "system", "content": _SYSTEM.format(setting=setting)},
        {"role": "user", "content": "\n\n".join(body)},
    ]


def is_persona_prompt(messages: Sequence[Mapping[str, Any]]) -> bool:
    return bool(messages) and PERSONA_HEADING in str(messages[-1].get("content", ""))


# ----------------------------------------------------------------------------------------------------------------
# answers


def parse_say(text: str | None) -> PersonaReply:
    """The words a model's answer stands for, or ``say=None`` with its failure kind (module docstring)."""

    def failed(kind: FailureKind, detail: str | None = None) -> PersonaReply:
        return PersonaReply(None, raw=text, failure=kind, detail=detail)

    answer, kind, detail = validate_answer(text, PersonaAnswer)
    if answer is None:
        return failed(kind, detail)
    words = answer.say.strip()
    if not words:
        return failed("empty_say")
    if len(words) > MAX_SAY_CHARS:
        return failed("too_long", f"{len(words)} characters")
    return PersonaReply(words, raw=text)


# ----------------------------------------------------------------------------------------------------------------
# the participant


class PersonaParticipant:
    """Each participant played by a model through the project's one client (a ``SimParticipant``).

    ``say(turn)`` is the synchronous ``SimParticipant`` method (one ``asyncio.run``); ``say_all(turns)`` asks for
    several turns in one ``asyncio.run`` (gathered, so the client's connection limit applies); ``await
    respond(turn)`` is the async form and returns the full ``PersonaReply`` (``await asay(turn)``: its words, for
    ``RescueSimMultiPartyEnv.astep``). ``usage`` and ``failure_log``
    accumulate over the object's life; ``last`` is the latest reply.
    """

    def __init__(self, client: LLMClient, *, history: int = 8, examples: int = 8) -> None:
        if history < 0 or examples < 0:
            raise ValueError("history and examples must be >= 0")
        self.client = client
        self.history, self.examples = history, examples
        self.name = f"persona:{client.config.model}"
        self.usage = PersonaUsage()
        self.failure_log: list[dict[str, Any]] = []
        self.last: PersonaReply | None = None

    def messages(self, turn: PersonaTurn) -> list[dict[str, str]]:
        return persona_messages(turn, history=self.history, examples=self.examples)

    def _record(self, turn: PersonaTurn, reply: PersonaReply) -> None:
        usage = self.usage
        usage.calls += 1
        usage.cache_hits += int(reply.usage.get("cached", False))
        usage.prompt_tokens += int(reply.usage.get("prompt_tokens", 0))
        usage.completion_tokens += int(reply.usage.get("completion_tokens", 0))
        usage.cost_usd += float(reply.usage.get("cost_usd", 0.0))
        if reply.failure is not None:
            usage.failures[reply.failure] = usage.failures.get(reply.failure, 0) + 1
            self.failure_log.append(
                {"sample_id": turn.sample_id, "agent": turn.agent, "kind": reply.failure, "detail": reply.detail}
            )
        self.last = reply

    async def respond(self, turn: PersonaTurn) -> PersonaReply:
        messages = self.messages(turn)
        completion = await self.client.complete(messages)
        reply = parse_say(completion.text if completion.ok else None)
        detail = completion.error if reply.failure == "api_error" else reply.detail
        reply = replace(reply, prompt_hash=prompt_hash(messages), usage=completion.usage(), detail=detail)
        self._record(turn, reply)
        return reply

    async def respond_all(self, turns: Sequence[PersonaTurn]) -> list[PersonaReply]:
        return list(await asyncio.gather(*(self.respond(turn) for turn in turns)))

    def say_all(self, turns: Sequence[PersonaTurn]) -> list[str | None]:
        return [reply.say for reply in asyncio.run(self.respond_all(turns))] if turns else []

    def say(self, turn: PersonaTurn) -> str | None:
        return self.say_all([turn])[0]

    async def asay(self, turn: PersonaTurn) -> str | None:
        """``say`` inside a running event loop (``RescueSimMultiPartyEnv.astep``, the rollout)."""
        return (await self.respond(turn)).say


# ----------------------------------------------------------------------------------------------------------------
# the offline mock model

_NAME = re.compile(r"^You are (.+?), one of the clients in ", re.M)


def mock_persona(messages: Sequence[Mapping[str, Any]]) -> str:
    """A valid, deterministic answer to a persona prompt, for ``--model mock`` (no network): a reply to the
    therapist when it just spoke to this participant (or to everyone), else a line to the latest other speaker."""
    prompt = str(messages[-1].get("content", "")) if messages else ""
    match = _NAME.search(prompt)
    name = match.group(1) if match else ""
    happened = prompt.partition("## What just happened\n")[2].partition("\n\n")[0]
    if happened.startswith(("The therapist just spoke to you", "The therapist just spoke to everyone")):
        say = "I hear you. It is hard for me to say this, but I want to try."
    else:
        conversation = prompt.partition("## The conversation so far\n")[2].partition(f"\n\n{PERSONA_HEADING}")[0]
        speakers = [line.partition(" -> ")[0] for line in conversation.splitlines()[1:] if " -> " in line]
        other = next((s for s in reversed(speakers) if s not in (name, "Therapist")), None)
        say = f"{other}, I want you to understand how this feels for me." if other else "I have more to say about this."
    return json.dumps({"say": say})


register_responder(is_persona_prompt, mock_persona)  # --model mock answers persona prompts
