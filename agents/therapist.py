"""An LLM as the therapist of ``Rescue-v0``: ``LLMPolicy`` asks a model, at each decision point, what the therapist
does next (paper App. B: intervene now? whom to support? with which strategy?).

The prompt is built from the observation alone (``therapist_messages``): the rendered rows of the observation's
``context`` (``rescue_env.rendering``, the same observable-only renderer as the six tasks), who is present (from
the observation's header, with their slot numbers) and the scenario's strategies with their definitions and
the D.3 boundary rules (``rescue_env.taxonomy`` through ``rescue_env.prompting.label_block``). It works for any
env whose observation has ``context``, ``scenario``, ``participants``, ``target_mask`` and ``strategy_mask``
(``Rescue-v0`` and its successors); with ``RescueSim-v0`` the observation's ``text`` (the perceived state of the
simulated session, in words) follows the rows. Nothing annotated or gold is read.

The model answers one JSON object::

    {"intervene": true, "targets": ["Alan"], "strategy": "reframe", "rationale": "one short sentence"}

``targets`` is a list of participant names or ``"everyone"`` (the group label, ``Couple``/``Family``, means the
same); with ``"intervene": false`` the other fields are ignored. Names and strategy keys are matched exactly
after trimming and case-folding (the match is recorded as ``normalised``); nothing else is repaired.

**Fallback.** An answer that cannot be used becomes the action *keep listening* (``intervene`` 0; the target
and strategy fields carry the group bit and the scenario's first strategy, which the env ignores when nobody
intervenes), and the failure is recorded by kind (``FAILURE_KINDS``): ``api_error`` (no answer after the
client's retries), ``malformed_json`` (no JSON object in the text), ``invalid_schema`` (``intervene`` missing
or not a JSON boolean, or a field of the wrong type), ``missing_target`` / ``unknown_target`` (an intervention
without recipients, or naming someone who is not in the session), ``missing_strategy`` / ``invalid_strategy``
(an intervention without a strategy, or with one outside the scenario's taxonomy). Rollouts count them; an
unusable answer is never silently turned into an intervention.

**Options** (both off by default, both recorded in a run's config): ``history`` adds the agent's own earlier
decisions in this episode to the prompt; few-shot ``examples`` are gold decisions of *other* conversations
(``few_shot_examples`` draws them from an env over the conversations outside the evaluated split), shown with
the observation the real therapist had at that moment.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, StrictBool

from agents.messages import prompt_hash, validate_answer
from agents.mock import register_responder
from policies.base import make_action
from rescue_env.data.domain import GROUP_LABELS
from rescue_env.data.schema import SCENARIOS, Scenario
from rescue_env.prompting import SCENARIO_SETTING, label_block
from rescue_env.rendering import ParsedRow, header_slots, split_context
from rescue_env.taxonomy import ALL_STRATEGY_KEYS, strategies

if TYPE_CHECKING:
    from agents.client import LLMClient
    from rescue_env.envs.replay import RescueEnv

__all__ = [
    "EVERYONE",
    "FAILURE_KINDS",
    "Decision",
    "FewShotExample",
    "LLMPolicy",
    "TherapistAnswer",
    "fallback_action",
    "few_shot_examples",
    "is_therapist_prompt",
    "mock_decision",
    "parse_decision",
    "therapist_messages",
]

EVERYONE = "everyone"
DECISION_HEADING = "## Your decision"  # marks the therapist prompt (the mock model recognises it by this)
FailureKind = Literal[
    "api_error",
    "malformed_json",
    "invalid_schema",
    "missing_target",
    "unknown_target",
    "missing_strategy",
    "invalid_strategy",
]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
ANSWER_EXAMPLE = (
    '{"intervene": true, "targets": ["NAME"], "strategy": "STRATEGY_KEY", "rationale": "one short sentence"}'
)


class TherapistAnswer(BaseModel):
    """The JSON object the model must send. ``intervene`` must be a JSON boolean (a string such as "yes" is a
    schema failure, not a guess)."""

    model_config = ConfigDict(extra="ignore")

    intervene: StrictBool
    targets: list[str] | str | None = None
    strategy: str | None = None
    rationale: str | None = None


@dataclass(frozen=True)
class Session:
    """What the observation shows of the session: scenario, participant names by slot, the rendered rows."""

    scenario: Scenario
    slots: dict[str, int]
    group_slot: int
    rows: str
    last_row: int | None
    strategy_keys: tuple[str, ...]

    @property
    def people(self) -> list[str]:
        return sorted(self.slots, key=self.slots.__getitem__)


def read_observation(observation: Mapping[str, Any]) -> Session:
    """The observable facts of an observation (Rescue-v0's ``Dict``), for prompts and for mapping answers."""
    scenario = SCENARIOS[int(observation["scenario"])]
    n_slots = int(np.asarray(observation["participants"]).size)
    header, blocks = split_context(str(observation["context"]))
    present = np.flatnonzero(np.asarray(observation["participants"]))
    slots = {name: slot for name, slot in header_slots(header, n_slots).items() if slot in set(present.tolist())}
    mask = np.asarray(observation["strategy_mask"]).astype(bool)
    rows = [ParsedRow(b) for b in blocks]
    last = next((r.position for r in reversed(rows) if r.is_row), None)
    return Session(
        scenario=scenario,
        slots=slots,
        group_slot=int(np.asarray(observation["target_mask"]).size) - 1,
        rows="\n".join(blocks),
        last_row=last,
        strategy_keys=tuple(k for i, k in enumerate(ALL_STRATEGY_KEYS) if i < mask.size and mask[i]),
    )


# ----------------------------------------------------------------------------------------------------------------
# the prompt


class FewShotExample(BaseModel):
    """One gold decision of another conversation: the rows the therapist had seen, and what they did next."""

    model_config = ConfigDict(frozen=True)

    scenario: Scenario
    rows: str
    answer: dict[str, Any]


_SYSTEM = (
    "You are an experienced couple and family therapist conducting {setting}. At each moment you decide whether "
    "to speak now or to keep listening, whom to support, and how. Base every decision only on what has been "
    "said so far; never assume what happens after the last row shown. Answer with JSON only."
)


def therapist_messages(
    observation: Mapping[str, Any],
    *,
    examples: Sequence[FewShotExample] = (),
    history: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages for one decision (observable-only; see the module docstring)."""
    session = read_observation(observation)
    group = GROUP_LABELS[session.scenario]
    names = ", ".join(session.people) or "(none named)"
    taxonomy = strategies(session.scenario)
    body = [
        f"You are the therapist in {SCENARIO_SETTING[session.scenario]}. The most recent rows of the conversation "
        "are below. After the last row, decide what you do next: keep listening (the clients go on talking), or "
        "intervene now: whom you address (one person, several, or everyone together) and with which support "
        "strategy.",
        f'People in the session: {names}. "{EVERYONE}" means all of them together (the {group.lower()} as a unit).',
        label_block(taxonomy, f"Support strategies ({session.scenario} therapy), by key:"),
        "Rows show the speaker, whom they address, their words, overlapping speech and timing, and any cues that "
        "were recorded.",
    ]
    if examples:
        shown = [
            f"Example {n}:\n{example.rows}\nThe therapist's decision: {json.dumps(example.answer)}"
            for n, example in enumerate(examples, start=1)
        ]
        body.append("Decisions real therapists made in other sessions:\n\n" + "\n\n".join(shown))
    if history:
        body.append("Your earlier decisions in this session:\n" + "\n".join(f"- {line}" for line in history))
    body.append("## Conversation\n" + (session.rows or "(no rows yet)"))
    if observation.get("text"):  # RescueSim-v0: what the therapist perceives of the simulated session now
        steps = int(np.asarray(observation.get("elapsed", [0]))[0])
        body.append(f"## How they seem now (after {steps} simulated turn(s))\n{observation['text']}")
    body.append(
        f"{DECISION_HEADING}\n"
        'Reply with one JSON object only, no markdown. "intervene": true to speak now, false to keep listening '
        '(then the other fields are ignored). "targets": a list of names from the people above, or '
        f'"{EVERYONE}". "strategy": one key from the list above. "rationale": one short sentence. In this form:\n'
        + ANSWER_EXAMPLE
    )
    return [
        {"role": "system", "content": _SYSTEM.format(setting=SCENARIO_SETTING[session.scenario])},
        {"role": "user", "content": "\n\n".join(body)},
    ]


def is_therapist_prompt(messages: Sequence[Mapping[str, Any]]) -> bool:
    return bool(messages) and DECISION_HEADING in str(messages[-1].get("content", ""))


def describe_decision(row: int | None, intervene: bool, targets: Sequence[str], strategy: str | None) -> str:
    """One line of the history option: what the agent itself decided after a row."""
    where = f"after row {row}" if row is not None else "at the start"
    if not intervene:
        return f"{where}: kept listening"
    return f"{where}: intervened, addressing {', '.join(targets) or EVERYONE}, with {strategy}"


# ----------------------------------------------------------------------------------------------------------------
# answers


@dataclass(frozen=True)
class Decision:
    """One decision of the policy: the env action, what it means, and how it was obtained."""

    action: dict[str, Any]
    intervene: bool
    targets: tuple[str, ...]
    strategy: str | None
    rationale: str | None = None
    raw: str | None = None
    failure: FailureKind | None = None
    detail: str | None = None
    normalised: bool = False
    prompt_hash: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


def fallback_action(observation: Mapping[str, Any]) -> dict[str, Any]:
    """Keep listening: the action every unusable answer becomes (see the module docstring)."""
    return make_action(observation, False)


def _casefold_match(text: str, choices: Sequence[str]) -> tuple[str | None, bool]:
    cleaned = text.strip()
    if cleaned in choices:
        return cleaned, False
    for choice in choices:
        if choice.casefold() == cleaned.casefold():
            return choice, True
    return None, False


def parse_decision(text: str | None, observation: Mapping[str, Any]) -> Decision:
    """The decision a model's answer stands for, validated against the observation's masks (or the fallback
    with its failure kind)."""
    session = read_observation(observation)

    def failed(kind: FailureKind, detail: str | None = None) -> Decision:
        return Decision(fallback_action(observation), False, (), None, raw=text, failure=kind, detail=detail)

    answer, kind, detail = validate_answer(text, TherapistAnswer)
    if answer is None:
        return failed(kind, detail)
    if not answer.intervene:
        return Decision(
            fallback_action(observation), False, (), None, rationale=answer.rationale, raw=text, normalised=False
        )

    normalised = False
    targets = answer.targets
    if isinstance(targets, str):
        targets = [targets]
    targets = [t for t in (targets or []) if t.strip()]
    if not targets:
        return failed("missing_target")
    group_words = (EVERYONE, GROUP_LABELS[session.scenario])
    slots: set[int] = set()
    everyone = False
    for name in targets:
        group_word, folded = _casefold_match(name, group_words)
        if group_word is not None:
            everyone, normalised = True, normalised or (folded and group_word != name.strip())
            continue
        person, folded = _casefold_match(name, session.people)
        if person is None:
            return failed("unknown_target", name[:60])
        slots.add(session.slots[person])
        normalised |= folded
    if not answer.strategy or not answer.strategy.strip():
        return failed("missing_strategy")
    strategy, folded = _casefold_match(answer.strategy, session.strategy_keys)
    if strategy is None:
        return failed("invalid_strategy", answer.strategy[:60])
    normalised |= folded
    chosen = None if everyone else sorted(slots)
    action = make_action(observation, True, chosen, ALL_STRATEGY_KEYS.index(strategy))
    names = (
        tuple(session.people)
        if everyone or len(slots) == len(session.people)
        else tuple(p for p in session.people if session.slots[p] in slots)
    )
    return Decision(action, True, names, strategy, rationale=answer.rationale, raw=text, normalised=normalised)


# ----------------------------------------------------------------------------------------------------------------
# the policy


class LLMPolicy:
    """The therapist played by a model through the project's one client (``agents.client.LLMClient``).

    ``await policy.decide(observation)`` asks for one decision; ``act(observation, env)`` does the same
    synchronously (the ``policies.Policy`` protocol). ``reset()`` starts an episode (it clears the history).
    Decisions inside one episode are sequential; run several episodes concurrently with one policy each (they
    share the client, its cache and its connection limit).
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        examples: Mapping[str, Sequence[FewShotExample]] | None = None,
        history: bool = False,
    ) -> None:
        self.client = client
        self.examples = {k: list(v) for k, v in (examples or {}).items()}
        self.history = history
        self.name = f"llm:{client.config.model}"
        self._history: list[str] = []
        self.last: Decision | None = None

    def reset(self, seed: int | None = None) -> None:
        self._history = []
        self.last = None

    def messages(self, observation: Mapping[str, Any]) -> list[dict[str, str]]:
        scenario = SCENARIOS[int(observation["scenario"])]
        return therapist_messages(
            observation,
            examples=self.examples.get(scenario, ()),
            history=self._history if self.history else (),
        )

    async def decide(self, observation: Mapping[str, Any]) -> Decision:
        messages = self.messages(observation)
        completion = await self.client.complete(messages)
        decision = parse_decision(completion.text, observation)
        detail = completion.error if decision.failure == "api_error" else decision.detail
        decision = replace(decision, prompt_hash=prompt_hash(messages), usage=completion.usage(), detail=detail)
        self._history.append(
            describe_decision(
                read_observation(observation).last_row, decision.intervene, decision.targets, decision.strategy
            )
        )
        self.last = decision
        return decision

    def act(self, observation: Mapping[str, Any], env: Any = None) -> dict[str, Any]:
        return asyncio.run(self.decide(observation)).action


# ----------------------------------------------------------------------------------------------------------------
# few-shot examples


def gold_answer(gold: Mapping[str, Any], people: Sequence[str]) -> dict[str, Any] | None:
    """The real therapist's decision as the JSON the model is asked for (None when it cannot be written: an
    intervention without a known target set or strategy)."""
    if not gold["intervene"]:
        return {"intervene": False, "targets": None, "strategy": None}
    recipients, strategy = gold["recipients"], gold["strategy"]
    if recipients is None or strategy is None:
        return None
    targets: list[str] | str = EVERYONE if len(recipients) == len(people) else [people[i] for i in sorted(recipients)]
    return {"intervene": True, "targets": targets, "strategy": ALL_STRATEGY_KEYS[strategy]}


def few_shot_examples(env: RescueEnv, k: int, seed: int = 0) -> dict[str, list[FewShotExample]]:
    """``k`` gold decisions per scenario from the conversations of ``env`` (which must hold only conversations
    outside the evaluated ones), half of them interventions where possible, drawn with a seeded generator."""
    if k < 1:
        return {}
    candidates: dict[str, dict[bool, list[FewShotExample]]] = {s: {True: [], False: []} for s in SCENARIOS}
    for sample in env.samples:
        episode = env.episode(sample)
        for point in episode.points:
            gold = {
                "intervene": point.gold_intervene,
                "recipients": point.gold_recipients,
                "strategy": point.gold_strategy,
            }
            answer = gold_answer(gold, episode.participants)
            if answer is None:
                continue
            _, blocks = split_context(point.context)
            candidates[episode.scenario][point.gold_intervene].append(
                FewShotExample(scenario=episode.scenario, rows="\n".join(blocks), answer=answer)
            )
    rng = np.random.default_rng(seed)
    chosen: dict[str, list[FewShotExample]] = {}
    for scenario, pools in candidates.items():
        wanted_yes = (k + 1) // 2
        picks: list[FewShotExample] = []
        for intervene, count in ((True, wanted_yes), (False, k - wanted_yes)):
            pool = pools[intervene]
            order = rng.permutation(len(pool))[:count] if pool else []
            picks += [pool[i] for i in sorted(order)]
        if len(picks) < k:  # one side ran short: fill from the other
            rest = [e for e in pools[True] + pools[False] if e not in picks]
            picks += rest[: k - len(picks)]
        if picks:
            chosen[scenario] = picks
    return chosen


# ----------------------------------------------------------------------------------------------------------------
# the offline mock model

_PEOPLE = re.compile(r"^People in the session: (.*?)\. \"", re.M)
_STRATEGY_KEY = re.compile(r"^- ([a-z_]+) \(", re.M)


def mock_decision(messages: Sequence[Mapping[str, Any]]) -> str:
    """A valid, deterministic answer to a therapist prompt, for ``--model mock`` (no network): intervene when the
    last row addresses the therapist, on its speaker when that is a participant (else everyone), with the first
    strategy listed; else keep listening."""
    prompt = str(messages[-1].get("content", ""))
    people_match = _PEOPLE.search(prompt)
    people = [p.strip() for p in people_match.group(1).split(",")] if people_match else []
    keys = _STRATEGY_KEY.findall(prompt.partition("## Conversation")[0])
    conversation = prompt.partition("## Conversation\n")[2].partition(f"\n\n{DECISION_HEADING}")[0]
    _, blocks = split_context("header\n" + conversation)
    rows = [ParsedRow(b) for b in blocks if ParsedRow(b).is_row]
    last = rows[-1] if rows else None
    if last is None or "Therapist" not in last.addressees or not keys:
        return json.dumps({"intervene": False, "targets": None, "strategy": None, "rationale": "listening"})
    target: list[str] | str = [last.speaker] if last.speaker in people else EVERYONE
    return json.dumps(
        {"intervene": True, "targets": target, "strategy": keys[0], "rationale": "the last speaker asked me"}
    )


register_responder(is_therapist_prompt, mock_decision)  # --model mock answers therapist prompts
