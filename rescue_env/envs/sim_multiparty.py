"""``rescue_sim_multiparty_v0``: the closed loop of ``RescueSim-v0`` seen by every party of the session, as a
PettingZoo environment in which the simulated participants speak. See ``RescueSimMultiPartyEnv`` for the
specification.

``parallel_env()`` gives the ``ParallelEnv``; ``raw_env()`` the AEC version (``parallel_to_aec``); ``env()`` the AEC
version with the usual wrappers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rescue_env.data.domain import GROUP_LABELS
from rescue_env.data.schema import Row, Sample, Scenario
from rescue_env.envs.multiparty import (
    SILENT,
    SPEAK,
    THERAPIST,
    aec_factories,
    agent_space,
    participant_agent,
    participant_choice,
    view_reset_options,
)
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.rendering import render_row, split_context
from rescue_env.text import normalise_text

WORDS_PER_SECOND = 2.5
"""Speaking rate used to give a simulated row a plausible duration (the row format needs a time span)."""
THERAPIST_SECONDS = 6.0
"""Duration given to a simulated therapist turn (it has no words to time)."""
TURN_GAP_SECONDS = 0.4
"""Pause between simulated rows."""


@dataclass(frozen=True)
class Intervention:
    """What the therapist did in a step where it intervened: the names it addressed (empty: no one valid) and its
    strategy key (``None``: outside the scenario's taxonomy)."""

    targets: tuple[str, ...]
    strategy: str | None


@dataclass(frozen=True)
class PersonaTurn:
    """Everything a simulated participant may use to say its next turn (observable facts only, plus its own
    recorded lines of the opening)."""

    agent: str
    slot: int
    name: str
    scenario: Scenario
    sample_id: str
    participants: tuple[str, ...]
    """Everyone in the session, by slot (``name`` included)."""
    therapist: Intervention | None
    """The therapist's action this step; ``None`` when it kept listening."""
    state: str
    """The perceived state in words after this step's move (the therapist's ``text`` observation)."""
    context: str
    """The rendered context up to this turn: the opening, the simulated rows so far, this step's therapist row."""
    transcript: tuple[dict[str, Any], ...]
    """The simulated transcript records before this step (see ``RescueSimMultiPartyEnv.transcript``)."""
    opening_lines: tuple[str, ...]
    """This participant's own recorded lines of the opening (rows 0 .. r_0), in order."""


@runtime_checkable
class SimParticipant(Protocol):
    """A simulated participant: what the participant drawn to speak says this turn (``None``: nothing)."""

    def say(self, turn: PersonaTurn) -> str | None: ...


class ReplaySimParticipant:
    """The default participant: says its own recorded lines of the source conversation after the opening, in
    order, one per turn it is asked, then nothing when they run out. Text only: the lines were recorded after
    the real therapist's actions, not after the agent's."""

    def __init__(self, sim: RescueSimEnv) -> None:
        self.sim = sim
        self._lines: dict[tuple[str, str], tuple[str, ...]] = {}

    def later_lines(self, sample_id: str, name: str) -> tuple[str, ...]:
        """``name``'s recorded lines after the opening of ``sample_id`` (cached)."""
        key = (sample_id, name)
        if key not in self._lines:
            sample = self.sim.dataset.get(sample_id)
            first = self.sim.episode(sample).rows[0]
            self._lines[key] = _own_lines(sample.rows[first + 1 :], name)
        return self._lines[key]

    def say(self, turn: PersonaTurn) -> str | None:
        # Stateless: the transcript says how many times this participant was asked already.
        asked = sum(1 for record in turn.transcript if record["speaker"] == turn.name and not record["silent"])
        lines = self.later_lines(turn.sample_id, turn.name)
        return lines[asked] if asked < len(lines) else None


def _own_lines(rows: Sequence[Row], name: str) -> tuple[str, ...]:
    return tuple(
        row.dialogue_cleaned.strip()
        for row in rows
        if row.primary_speaker.strip() == name and row.dialogue_cleaned.strip()
    )


def _one_line(words: str | None) -> str | None:
    """Words as one ASCII line (a newline could forge a row of the context), or ``None`` when nothing is said."""
    if words is None:
        return None
    cleaned = " ".join(normalise_text(str(words)).split())
    return cleaned or None


def fit_context(header: str, blocks: Sequence[str], max_chars: int) -> str:
    """``header`` and the newest ``blocks`` within ``max_chars``: whole oldest blocks are dropped first; the
    header is never cut unless it alone is too long; a single block still too long keeps its end (as
    ``RescueSim-v0`` cuts the opening)."""
    budget = max_chars - len(header) - 1  # the characters left for the rows, after the header and its newline
    if budget < 0:
        return header[:max_chars]
    kept = list(blocks)
    while len(kept) > 1 and len("\n".join(kept)) > budget:
        kept.pop(0)
    rows = "\n".join(kept)
    return header + "\n" + (rows[-budget:] if budget else "")


@dataclass(frozen=True)
class _Pending:
    """A step between the sim's move and the participant's words (``step`` and ``astep`` share both halves)."""

    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    position: int
    speaker: str | None
    slot: int | None
    silent: bool


class RescueSimMultiPartyEnv(ParallelEnv[str, dict[str, Any], Any]):
    """
    ## Description

    The closed loop of ``RescueSim-v0`` (``rescue_env.envs.sim.RescueSimEnv``), seen by every party, with
    participants who speak. The environment holds one ``RescueSimEnv`` (``self.sim``) and delegates the episode,
    the state, the speaker draw, the rewards and the end to it. One parallel step is one ``RescueSim-v0`` step: the
    therapist's turn when it intervenes, then one client turn by the participant the sim draws as the speaker
    (``info["speaker"]``). That participant, and only that one, says something, through a ``SimParticipant``
    (``say(PersonaTurn)``); the default ``ReplaySimParticipant`` says that participant's own recorded lines of the
    source conversation after the opening, in order, one per turn it is drawn, then nothing when they run out;
    ``agents.persona.PersonaParticipant`` plays each participant with a language model.

    **The words are text only: the state still moves by F.** What a participant says enters the transcript and
    the context that every agent observes, but it never changes the simulated state, the next speaker, the rewards
    or the end of the episode: those come from the outcome model F and the session rates of ``RescueSim-v0``,
    exactly as without words. The replayed lines were spoken after the real therapist's actions, not the agent's.

    The context grows with the simulated transcript: the opening's rows, then each step's rows in the same format
    (``[n] mm:ss.s-mm:ss.s Speaker -> Addressees: "words"``, read back by ``rescue_env.rendering.ParsedRow``).
    Row numbers follow the sim's row clock. The therapist's own turn is a row ``Therapist -> <its targets>`` (the
    group label when it addressed everyone) whose words are ``(support: <strategy key>)``: the agent chooses a
    strategy, not words. A client row addresses ``Therapist`` after an intervention, else the other
    participants (keeping listening is the clients' own exchange). A turn in which nothing is said leaves no
    row (its number is skipped). Times are not recorded: each simulated row starts 0.4 s after the previous one
    and lasts its word count / 2.5 s (at least 1 s; a therapist turn 6 s). Words are normalised to the context's
    charset and to one line.

    Each step's ``infos``: the therapist's is the sim's plus ``said`` (the words of the turn, or ``None``); a
    participant's is ``name``, ``slot``, ``speaker`` (drawn this step), ``silent`` (chose silence) and ``said``.
    ``transcript`` lists one JSON-able record per step: ``step``, ``row`` (the client row's number), ``speaker``,
    ``slot``, ``silent``, ``words`` (``None``: nothing said), ``therapist`` (``intervene``, ``target`` names,
    ``strategy``: the action that preceded) and ``state`` (the perceived state in words after the step).

    ## Agents

    ``possible_agents``: ``"therapist"``, then ``"participant_0"`` ... ``"participant_{max_participants - 1}"``
    (participant_i is slot i of the header and of the ``target`` bits). After ``reset``, ``agents`` is the
    therapist and the slots present in the episode's conversation.

    ## Action Space

    Therapist: ``RescueSim-v0``'s ``Dict`` action (``intervene``, ``target``, ``strategy``). Participant:
    ``Discrete(2)``: 0 = speak, 1 = stay silent. Only the drawn speaker's choice matters: speaking asks its
    ``SimParticipant`` for the words; silence means nothing is said (the participant is not asked, the turn still
    passes). A participant missing from the action dict speaks, so ``step({"therapist": action})`` works.

    ## Observation Space

    Therapist: ``RescueSim-v0``'s observation, except ``context``: the opening plus the simulated rows so far
    (above), the oldest rows dropped whole beyond ``max_chars``, never the header. Participant: ``Dict`` with
    ``context`` (the same ``Text`` as the therapist's, same value) and ``self`` ``Box(0, 1, (2,))``: 1 if this
    participant was the last client speaker (drawn in the last step; at reset, the speaker of the opening's last
    row), 1 if the therapist's last action addressed them (0 at reset).

    ## Rewards

    Therapist: ``RescueSim-v0``'s reward. Participant i: its own well-being 1 - d_i of the new simulated state
    (``info["state"]["distress"]``). Words do not change either.

    ## Starting State

    ``reset(seed, options)`` resets ``self.sim`` with the same arguments (``options={"sample_id": ...}``). The
    first observations show the opening, exactly ``RescueSim-v0``'s ``context``. The transcript is empty.

    ## Episode End

    Terminated and truncated as ``RescueSim-v0`` (every agent at once); ``agents`` is then empty. The therapist's
    final ``info`` carries the sim's ``episode`` summary.

    ## Arguments

    ``participant_policy`` (a ``SimParticipant``; default ``ReplaySimParticipant(self.sim)``), ``render_mode``
    (``"ansi"``, ``"human"``), and every argument of ``RescueSimEnv`` (``data``, ``starts``, ``dynamics``, ``mode``,
    ``max_chars``, ``max_participants``, ...), passed on.

    ## Version History

    * v0: initial version (participants speak; words are text only, the state moves by F).
    """

    metadata = {"name": "rescue_sim_multiparty_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        participant_policy: SimParticipant | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        # The inner env renders text only on request, so that "human" prints once per step, here.
        # The view reads the step's details (speaker, chosen, state) and passes them on as the therapist's info.
        kwargs.setdefault("info_level", "full")
        self.sim = RescueSimEnv(render_mode=None if render_mode is None else "ansi", **kwargs)
        policy = ReplaySimParticipant(self.sim) if participant_policy is None else participant_policy
        if not isinstance(policy, SimParticipant):
            raise TypeError(f"participant_policy must have a say() method, got {type(policy).__name__}")
        self.participant_policy = policy
        self.render_mode = render_mode
        self.possible_agents = [THERAPIST] + [participant_agent(i) for i in range(self.sim.max_participants)]
        self.agents: list[str] = []
        self._action_spaces: dict[str, spaces.Space] = {THERAPIST: self.sim.action_space}
        self._observation_spaces: dict[str, spaces.Space] = {THERAPIST: self.sim.observation_space}
        for agent in self.possible_agents[1:]:
            # One object per agent, so that seeding one agent's space leaves the others' alone.
            self._action_spaces[agent] = spaces.Discrete(2)
            self._observation_spaces[agent] = spaces.Dict(
                {
                    "context": copy.deepcopy(self.sim.observation_space["context"]),
                    "self": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
                }
            )
        self._sample: Sample | None = None
        self._names: tuple[str, ...] = ()
        self._opening_lines: tuple[tuple[str, ...], ...] = ()
        self._header = ""
        self._blocks: list[str] = []
        self._clock = 0.0
        self._context = ""
        self._features = np.zeros((0, 2), dtype=np.float32)
        self._transcript: list[dict[str, Any]] = []

    # ----- spaces -----------------------------------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Space:
        return agent_space(self._observation_spaces, agent, "observation")

    def action_space(self, agent: str) -> spaces.Space:
        return agent_space(self._action_spaces, agent, "action")

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The simulated transcript of the current episode, one JSON-able record per step (a copy)."""
        return copy.deepcopy(self._transcript)

    # ----- the growing context ----------------------------------------------------------------------------

    def _add_row(self, position: int, speaker: str, targets: Sequence[str], words: str, seconds: float) -> None:
        """Render one simulated row at ``position`` (0-based, the sim's row clock) and refit the context."""
        start = self._clock + TURN_GAP_SECONDS
        self._clock = start + seconds
        row = Row(
            start_time=start, end_time=self._clock, primary_speaker=speaker, target=list(targets),
            dialogue_cleaned=words,
        )  # fmt: skip
        # Simulated rows carry words only: there is no recorded tone or cue to show, whatever the mode.
        self._blocks.append(normalise_text(render_row(row, position, "dialogue")))
        self._context = fit_context(self._header, self._blocks, self.sim.max_chars)

    def _observations(self, therapist: dict[str, Any]) -> dict[str, Any]:
        observations: dict[str, Any] = {THERAPIST: {**therapist, "context": self._context}}
        for slot in range(len(self._names)):
            observations[participant_agent(slot)] = {"context": self._context, "self": self._features[slot].copy()}
        return observations

    # ----- pettingzoo API ---------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.sim.reset(seed=seed, options=view_reset_options(options))
        sample = self.sim.dataset.get(info["sample_id"])
        episode = self.sim.episode(sample)
        first = episode.rows[0]
        self._sample, self._names = sample, episode.participants
        self._opening_lines = tuple(_own_lines(sample.rows[: first + 1], name) for name in self._names)
        self._header, self._blocks = split_context(episode.context)
        self._context = fit_context(self._header, self._blocks, self.sim.max_chars)
        self._clock = float(sample.rows[first].end_time)
        self._transcript = []
        self._features = np.zeros((len(self._names), 2), dtype=np.float32)
        if episode.start.last_speaker is not None:
            self._features[episode.start.last_speaker, 0] = 1.0
        self.agents = [THERAPIST] + [participant_agent(i) for i in range(len(self._names))]
        infos: dict[str, dict[str, Any]] = {THERAPIST: info}
        for slot, name in enumerate(self._names):
            infos[participant_agent(slot)] = {"name": name, "slot": slot}
        return self._observations(observation), infos

    def _therapist_row(self, position: int, chosen: dict[str, Any]) -> None:
        targets = list(chosen["target"])
        if len(self._names) > 1 and len(targets) == len(self._names):
            targets = [GROUP_LABELS[self.sim.episode(self._sample).scenario]]
        words = f"(support: {chosen['strategy']})" if chosen["strategy"] else "(support)"
        self._add_row(position, "Therapist", targets, words, THERAPIST_SECONDS)

    def _begin(self, actions: dict[str, Any]) -> tuple[_Pending, PersonaTurn | None]:
        """Check the actions, step the sim and write the therapist's row; the turn to ask for words, if any."""
        if not self.agents:
            raise RuntimeError("the episode has ended (or never started); call reset()")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(f"actions for agents not in the episode: {sorted(unknown)}")
        if THERAPIST not in actions:
            raise ValueError("step() needs the therapist's action")
        choices = {
            participant_agent(slot): participant_choice(
                participant_agent(slot), actions.get(participant_agent(slot), SPEAK)
            )
            for slot in range(len(self._names))
        }
        row_before = int(self.sim.state()["row"])
        observation, reward, terminated, truncated, info = self.sim.step(actions[THERAPIST])
        chosen = info["chosen"]
        if chosen["intervene"]:
            self._therapist_row(row_before + 1, chosen)
        # The client's row is the sim's clock after the step (the therapist's turn, if any, took the row before).
        position = int(self.sim.state()["row"])
        speaker = info["speaker"]
        slot = self._names.index(speaker) if speaker in self._names else None
        turn, silent = None, False
        if slot is not None:
            agent = participant_agent(slot)
            silent = choices[agent] == SILENT
            if not silent:
                turn = PersonaTurn(
                    agent=agent,
                    slot=slot,
                    name=speaker,
                    scenario=self.sim.episode(self._sample).scenario,
                    sample_id=self._sample.sample_id,
                    participants=self._names,
                    therapist=Intervention(tuple(chosen["target"]), chosen["strategy"])
                    if chosen["intervene"]
                    else None,
                    state=observation["text"],
                    context=self._context,
                    transcript=tuple(copy.deepcopy(self._transcript)),
                    opening_lines=self._opening_lines[slot],
                )
        pending = _Pending(observation, reward, terminated, truncated, info, position, speaker, slot, silent)
        return pending, turn

    def step(self, actions: dict[str, Any]):
        pending, turn = self._begin(actions)
        return self._end(pending, None if turn is None else self.participant_policy.say(turn))

    async def astep(self, actions: dict[str, Any]):
        """``step`` for a participant policy that calls a model inside a running event loop: its ``asay(turn)``
        is awaited (``agents.persona.PersonaParticipant``; a policy without ``asay`` is asked ``say``)."""
        pending, turn = self._begin(actions)
        if turn is None:
            return self._end(pending, None)
        asay = getattr(self.participant_policy, "asay", None)
        said = await asay(turn) if asay is not None else self.participant_policy.say(turn)
        return self._end(pending, said)

    def _end(self, pending: _Pending, said: str | None):
        """Write the participant's row and the transcript record; the PettingZoo step's five dicts."""
        observation, reward, terminated, truncated, info = (
            pending.observation, pending.reward, pending.terminated, pending.truncated, pending.info
        )  # fmt: skip
        position, speaker, slot, silent = pending.position, pending.speaker, pending.slot, pending.silent
        chosen = info["chosen"]
        words = _one_line(said)
        if words is not None:
            others = [n for n in self._names if n != speaker]
            targets = ["Therapist"] if chosen["intervene"] else others
            self._add_row(position, speaker, targets, words, max(1.0, len(words.split()) / WORDS_PER_SECOND))
        self._transcript.append(
            {
                "step": int(info["step"]),
                "row": position + 1,
                "speaker": speaker,
                "slot": slot,
                "silent": silent,
                "words": words,
                # Keeping listening has no target or strategy (the sim decodes the unused fields anyway).
                "therapist": {
                    "intervene": bool(chosen["intervene"]),
                    "target": list(chosen["target"]) if chosen["intervene"] else [],
                    "strategy": chosen["strategy"] if chosen["intervene"] else None,
                },
                "state": observation["text"],
            }
        )
        addressed = set(chosen["target"]) if chosen["intervene"] else set()
        self._features = np.array(
            [[float(name == speaker), float(name in addressed)] for name in self._names], dtype=np.float32
        ).reshape(len(self._names), 2)

        rewards: dict[str, float] = {THERAPIST: float(reward)}
        infos: dict[str, dict[str, Any]] = {THERAPIST: {**info, "said": words}}
        distress = info["state"]["distress"]
        for i, name in enumerate(self._names):
            agent = participant_agent(i)
            rewards[agent] = float(1.0 - distress[name])
            drawn = i == slot
            infos[agent] = {
                "name": name,
                "slot": i,
                "speaker": drawn,
                "silent": drawn and silent,
                "said": words if drawn else None,
            }
        observations = self._observations(observation)
        agents = list(self.agents)
        terminations = dict.fromkeys(agents, bool(terminated))
        truncations = dict.fromkeys(agents, bool(truncated))
        if terminated or truncated:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        """``ansi``: ``RescueSim-v0``'s text of the last step, then the turn said; ``human``: printed."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        text = self.sim.render() or ""
        if self._transcript:
            last = self._transcript[-1]
            words = "(silent)" if last["silent"] else (last["words"] or "(nothing)")
            text += f"{last['speaker']}: {words}\n"
        if self.render_mode == "human":
            print(text, end="")
            return None
        return text

    def close(self) -> None:
        self.sim.close()


def parallel_env(**kwargs: Any) -> RescueSimMultiPartyEnv:
    """The ``ParallelEnv`` (keyword arguments: see ``RescueSimMultiPartyEnv``)."""
    return RescueSimMultiPartyEnv(**kwargs)


raw_env, env = aec_factories(parallel_env)


__all__ = [
    "Intervention",
    "PersonaTurn",
    "ReplaySimParticipant",
    "RescueSimMultiPartyEnv",
    "SimParticipant",
    "env",
    "fit_context",
    "parallel_env",
    "raw_env",
]
