"""``HeuristicPolicy``: documented rules over the observation only (the ``context`` text and ``last_speaker``).

The context is the env's rendering (``rescue_env.rendering``): a header naming the participant slots, then one
line per row, ``[12] 03:21.5-03:35.0 Ana -> Therapist: "..."``, with indented evidence lines (overlapping
speech; tone of voice and visual cues by mode). ``parse_context`` reads it back; nothing else is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from policies.base import make_action, n_participants
from rescue_env.data.domain import GROUP_SPEAKERS, THERAPIST
from rescue_env.data.schema import SCENARIOS
from rescue_env.rendering import ParsedRow, header_slots, split_context
from rescue_env.taxonomy import ALL_STRATEGY_KEYS
from rescue_env.text import has_any

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv


def parse_context(context: str) -> tuple[dict[str, int], list[ParsedRow]]:
    """The participant slots named in the header (name -> slot) and the rendered rows, oldest first (a row cut
    by ``max_chars`` at the front is skipped)."""
    header, blocks = split_context(context)
    rows = [row for row in map(ParsedRow, blocks) if row.is_row]
    return header_slots(header, n_slots=1 << 30), rows


DISTRESS = (
    "hurt", "hurts", "scared", "afraid", "sad", "lonely", "alone", "cry", "crying", "ashamed", "hopeless",
    "can't take", "can't do this", "exhausted", "upset", "angry", "furious", "hate", "done", "tired of",
)  # fmt: skip
BLAME = (
    "you always", "you never", "your fault", "blame", "ridiculous", "sick of", "shut up", "never enough",
    "you don't", "you didn't", "you won't", "you just",
)  # fmt: skip
APOLOGY = ("sorry", "apologise", "apologize", "my fault", "i was wrong", "forgive")
TOGETHER = ("we both", "both of us", "together", "let's", "our relationship", "our marriage", "our family")
HIERARCHY = ("mom", "mum", "dad", "parent", "parents", "rules", "in charge", "respect", "grounded")
APPEAL = ("help me", "help us", "what do we do", "what should we", "what should i", "i don't know what to do")


def _strategy_index(key: str) -> int:
    return ALL_STRATEGY_KEYS.index(key)


class HeuristicPolicy:
    """Observation-only rules (``context`` and ``last_speaker``; no gold, no annotation).

    Timing: intervene when the last client row addresses the therapist (the clients are talking to you), appeals
    for help (``APPEAL``), or shows distress or escalation (``DISTRESS`` words; ``BLAME`` with "!" or overlapping
    speech); keep listening while clients talk to each other. Two rules one might expect are left out on
    purpose, because on the release they point the other way: a row ending in "?" is usually a question to the
    other client (the therapist speaks next after 35 % of them, against 51 % of all decision points), and the
    longer the clients' exchange runs without the therapist, the less likely the therapist speaks next (31-39 %
    after runs of 3 or more rows).

    Target: the last client speaker; everyone when blame flies both ways (two different clients blamed in the
    rows since the therapist last spoke), when the last row talks of the two or the family as a unit
    (``TOGETHER``: "we both", "together", "our marriage", ...), or when the last
    speaker is not a participant slot.

    Strategy (the first rule that fires; one outside the scenario's taxonomy falls back to its first valid
    strategy): escalating blame ("!" or overlapping speech) -> safeguard; an apology -> repair; distress ->
    evoke (couple) / join (family); family talk of parents, rules or respect -> boundary; a group target with
    blame -> reframe; talk of the unit -> goal_align (couple) / join (family); any other group target -> track;
    else reframe, the most frequent strategy of both scenarios (paper Figs. 8-9).
    """

    name = "heuristic"

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> HeuristicPolicy:
        return cls()

    def reset(self, seed: int | None = None) -> None:
        pass

    def decide(self, observation: dict) -> tuple[bool, list[int] | None, str]:
        """(intervene, target slots or None for everyone, strategy key) from the observation."""
        scenario = SCENARIOS[int(observation["scenario"])]
        slots, rows = parse_context(observation["context"])
        since = []  # client rows since the therapist last spoke, oldest first
        for row in reversed(rows):
            if row.speaker == THERAPIST:
                break
            since.insert(0, row)
        clients = [r for r in since if r.speaker not in GROUP_SPEAKERS]
        last = rows[-1] if rows else None
        text = last.words if last else ""

        blame = has_any(text, BLAME)
        distress = has_any(text, DISTRESS)
        escalation = "!" in text or (last is not None and last.overlapping)
        intervene = bool(last) and (
            THERAPIST in last.addressees or has_any(text, APPEAL) or distress or (blame and escalation)
        )

        blamers = {r.speaker for r in clients if has_any(r.words, BLAME)}
        together = has_any(text, TOGETHER)
        last_slot = int(observation["last_speaker"])
        everyone = len(blamers) >= 2 or together or last_slot >= n_participants(observation)
        target = None if everyone else [last_slot]

        if blame and escalation:
            strategy = "safeguard"
        elif has_any(text, APOLOGY):
            strategy = "repair"
        elif distress:
            strategy = "evoke" if scenario == "couple" else "join"
        elif scenario == "family" and any(has_any(r.words, HIERARCHY) for r in clients):
            strategy = "boundary"
        elif everyone and blamers:
            strategy = "reframe"
        elif together:
            strategy = "goal_align" if scenario == "couple" else "join"
        elif everyone:
            strategy = "track"
        else:
            strategy = "reframe"
        return intervene, target, strategy

    def act(self, observation: dict, env: RescueEnv) -> dict:
        intervene, target, strategy = self.decide(observation)
        return make_action(observation, intervene, target, _strategy_index(strategy))


class PerceivedStatePolicy:
    """Observation-only rules over the perceived state of ``RescueSim-v0`` (``distress``, ``stance``), the sim's
    heuristic: what a therapist who reads the room and nothing else might do.

    1. Mutual hostility (i sees j negatively and j sees i negatively, both readings >= ``hostile`` = 0.7): support
       the most hostile such pair together with ``repair``.
    2. Else, someone upset (reading >= ``upset`` = 0.5): support the most distressed participant with ``join`` (in
       both taxonomies: make their feeling heard by the others).
    3. Else keep listening.
    """

    name = "perceived"

    def __init__(self, upset: float = 0.5, hostile: float = 0.7) -> None:
        self.upset, self.hostile = upset, hostile

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> PerceivedStatePolicy:
        return cls()

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, observation: dict, env: RescueEnv) -> dict:
        n = n_participants(observation)
        distress = np.asarray(observation["distress"], dtype=float)[:n]
        stance = np.asarray(observation["stance"], dtype=float)[:n, :n]
        mutual = np.minimum(stance, stance.T)
        if n >= 2 and mutual.max() >= self.hostile:
            i, j = np.unravel_index(int(np.argmax(mutual)), mutual.shape)
            return make_action(observation, True, [int(i), int(j)], _strategy_index("repair"))
        if n and distress.max() >= self.upset:
            return make_action(observation, True, [int(np.argmax(distress))], _strategy_index("join"))
        return make_action(observation, False)
