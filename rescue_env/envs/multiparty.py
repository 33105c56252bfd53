"""``rescue_multiparty_v0``: the ``Rescue-v0`` replay seen by every party of the session, as a PettingZoo
environment (the therapist plus one agent per participant). See ``RescueMultiPartyEnv`` for the specification.

``parallel_env()`` gives the ``ParallelEnv``; ``raw_env()`` the AEC version (``parallel_to_aec``); ``env()`` the AEC
version with the usual wrappers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec
from pettingzoo.utils.wrappers.base import BaseWrapper

from rescue_env.data.domain import target_members
from rescue_env.envs.replay import RESET_OPTIONS, RescueEnv, integer_value, reset_options_dict

THERAPIST = "therapist"
SPEAK, SILENT = 0, 1
"""Participant actions."""


def participant_agent(slot: int) -> str:
    """The agent name of a participant slot (slot i of ``RescueEnv``'s header and ``target`` bits)."""
    return f"participant_{slot}"


def view_reset_options(options: Any) -> dict[str, Any] | None:
    """The options a multi-party view passes to its env's ``reset``: the env's known ones. PettingZoo's
    ``api_test`` resets with an option it makes up (``{"options": 1}``), so a view warns about unknown keys and
    drops them instead of failing; anything but a dict or None is still a one-line ``ValueError``."""
    if options is None:
        return None
    options = reset_options_dict(options)
    unknown = sorted(set(map(str, options)) - RESET_OPTIONS)
    if unknown:
        gym.logger.warn(f"ignoring unknown reset option(s) {', '.join(unknown)}")
    return {k: v for k, v in options.items() if k in RESET_OPTIONS}


def agent_space(spaces_: Mapping[str, spaces.Space], agent: Any, kind: str) -> spaces.Space:
    """``spaces_[agent]``; an agent the view does not have is a one-line ``ValueError`` naming it and the agents
    it has (a bare ``KeyError: 'ghost'`` says neither what was looked up nor what exists)."""
    try:
        return spaces_[agent]
    except (KeyError, TypeError):  # TypeError: an unhashable agent, e.g. a list
        raise ValueError(f"no {kind} space for agent {agent!r}; the agents are {', '.join(spaces_)}") from None


def _one_line_repr(value: Any, limit: int = 300) -> str:
    """``repr(value)`` on one line (a 2-D array's repr spans several), cut to ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CheckedActionWrapper(BaseWrapper):
    """PettingZoo's ``AssertOutOfBoundsWrapper`` with the envs' one-line ``ValueError`` in place of its bare
    ``AssertionError("action is not in action space")`` (which names neither the agent nor the value, and which
    ``python -O`` skips): an action outside the acting agent's space is refused, ``None`` for an agent that is
    done is accepted (the AEC convention), exactly as that wrapper decides."""

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if not (action is None and (self.terminations[agent] or self.truncations[agent])):
            space = self.action_space(agent)
            try:
                inside = bool(space.contains(action))
            except (TypeError, ValueError):  # a value numpy cannot even compare with the space's bounds
                inside = False
            if not inside:
                raise ValueError(f"{agent}: action {_one_line_repr(action)} is outside its action space {space}")
        super().step(action)

    def __str__(self) -> str:
        return str(self.env)


def participant_choice(agent: str, action: Any) -> int:
    """A participant's ``Discrete(2)`` action: ``SPEAK`` or ``SILENT``; anything else (0.5, 2, None) is a
    one-line ``ValueError``."""
    value = integer_value(action)
    if value not in (SPEAK, SILENT):
        raise ValueError(f"{agent}: action must be 0 (speak) or 1 (stay silent), got {action!r}")
    return value


@runtime_checkable
class ParticipantPolicy(Protocol):
    """What a participant says in the segment after a decision point.

    ``agent`` is the agent name, ``slot`` its participant slot, ``context`` the observed context at the decision
    point (the therapist's ``context`` text), ``recorded`` this participant's recorded line(s) of the segment
    (``None`` when they did not speak in it). Return the utterance, or ``None`` for saying nothing.
    """

    def utterance(self, agent: str, slot: int, context: str, recorded: str | None) -> str | None: ...


class ReplayParticipant:
    """The default participant policy: says exactly what was recorded."""

    def utterance(self, agent: str, slot: int, context: str, recorded: str | None) -> str | None:
        return recorded


@dataclass(frozen=True)
class _Segment:
    """The rows after one decision point, up to and including the next one's row (the last: to the end)."""

    rows: range
    recorded: tuple[str | None, ...]
    """Per slot, that participant's recorded lines of the segment, one per row, joined by newlines."""
    features: np.ndarray
    """Per slot, the ``self`` observation at the decision point: (was the last speaker, was addressed)."""


class RescueMultiPartyEnv(ParallelEnv[str, dict[str, Any], Any]):
    """
    ## Description

    The conversation of ``Rescue-v0`` (``rescue_env.envs.replay.RescueEnv``), seen by every party: the therapist
    and each participant are agents. One parallel step is one decision point of the underlying ``RescueEnv``, which this
    environment holds (``self.rescue``) and to which it delegates the episodes, their precomputation, the gold and
    the rewards. The therapist is exactly the ``Rescue-v0`` agent. Each participant speaks, in the segment that
    follows the decision point (the rows after it, up to and including the next decision point's row; after the
    last one, to the end), through a ``ParticipantPolicy``; the default ``ReplayParticipant`` says the lines that
    the participant spoke in that segment (rows whose speaker is that participant, words as recorded, one line
    per row; group rows such as ``Family`` and overlapping speech are attributed to no one). What each
    participant said is reported in ``infos[agent]["said"]``, next to ``recorded``, ``silent`` and ``rows`` (the
    segment's first and last row, 1-based like ``RescueEnv``'s ``info["row"]``).

    This is a replay: whatever the agents choose and whatever a participant policy says, **the transcript
    advances as recorded**, and every observation and reward comes from the recorded conversation. A simulated
    participant (e.g. a language model behind ``ParticipantPolicy``) can already be plugged in and its words are
    recorded in ``infos``, but they do not enter the context; making them do so is a later, versioned change.

    ## Agents

    ``possible_agents``: ``"therapist"``, then ``"participant_0"`` ... ``"participant_{max_participants - 1}"``
    (participant_i is slot i of the ``RescueEnv`` header and ``target`` bits). After ``reset``, ``agents`` is the
    therapist and the slots present in the episode's conversation.

    ## Action Space

    Therapist: ``RescueEnv``'s ``Dict`` action (``intervene``, ``target``, ``strategy``). Participant:
    ``Discrete(2)``: 0 = speak (the participant policy is asked for the segment's utterance), 1 = stay silent this
    segment (the policy is not asked; ``said`` is ``None``). Both are neutral for the transcript; they are
    reported in ``infos[agent]["silent"]``. This is the one participant choice that a replay can honour without
    inventing text; richer behaviour belongs to the participant policy, not to the action. A participant missing
    from the action dict speaks, so ``step({"therapist": action})`` runs the replay with the therapist alone.

    ## Observation Space

    Therapist: ``RescueEnv``'s observation. Participant: ``Dict`` with ``context`` (the same ``Text`` as the
    therapist's ``context``, with the same value) and ``self`` ``Box(0, 1, (2,))``: 1 if this participant spoke
    the current row (the one after which the decision is taken), 1 if that row addresses them (by name or as the
    group). Both are visible in the
    context; nothing annotated or gold is observed.

    ## Rewards

    Therapist: ``RescueEnv``'s reward for its action. Participant i: its own well-being 1 - d_i, where d_i is the
    annotated distress at the decision point (``RescueEnv.state()["distress"][i]``, the latest intensity / 10).
    This is a replay signal: it follows the recorded conversation, and no action changes it.

    ## Starting State

    ``reset(seed, options)`` resets the underlying ``RescueEnv`` with the same arguments
    (``options={"sample_id": ...}`` picks a conversation; otherwise ``sample_order`` with the seeded
    ``np_random``). The first observations are those of the first decision point; the rows up to it are the
    opening, seen in the context and said by no agent.

    ## Episode End

    Every agent terminates at once after the last decision point (never truncated); ``agents`` is then empty.
    The therapist's final ``info`` carries ``RescueEnv``'s ``episode`` summary.

    ## Arguments

    ``participant_policy`` (a ``ParticipantPolicy``; default ``ReplayParticipant()``), ``render_mode``
    (``"ansi"``, ``"human"``), and every argument of ``RescueEnv`` (``data``, ``reward``, ``mode``,
    ``context_size``, ``max_chars``, ``max_participants``, ``sample_order``, ``decide_after_therapist``), passed on.

    ## Version History

    * v1 (``rescue_env.envs.multiparty_v1``): the therapist's ``info`` defaults to ``"basic"`` (no gold).
    * v0: initial version (replay participants: the transcript advances as recorded). Its therapist ``info``
      defaults to ``info_level="full"``, gold included: use v1 wherever a policy can read ``infos``.
    """

    metadata = {"name": "rescue_multiparty_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        participant_policy: ParticipantPolicy | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        policy = ReplayParticipant() if participant_policy is None else participant_policy
        if not isinstance(policy, ParticipantPolicy):
            raise TypeError(f"participant_policy must have an utterance() method, got {type(policy).__name__}")
        self.participant_policy = policy
        self.render_mode = render_mode
        # The inner env renders text only on request, so that "human" prints once per step, here.
        # The view passes the therapist's detailed info on (gold, chosen, state), as before ``info_level`` existed.
        kwargs.setdefault("info_level", "full")
        self.rescue = RescueEnv(render_mode=None if render_mode is None else "ansi", **kwargs)
        self.possible_agents = [THERAPIST] + [participant_agent(i) for i in range(self.rescue.max_participants)]
        self.agents: list[str] = []
        self._action_spaces: dict[str, spaces.Space] = {THERAPIST: self.rescue.action_space}
        self._observation_spaces: dict[str, spaces.Space] = {THERAPIST: self.rescue.observation_space}
        for agent in self.possible_agents[1:]:
            # One object per agent, so that seeding one agent's space leaves the others' alone.
            self._action_spaces[agent] = spaces.Discrete(2)
            self._observation_spaces[agent] = spaces.Dict(
                {
                    "context": copy.deepcopy(self.rescue.observation_space["context"]),
                    "self": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
                }
            )
        self._segments: dict[str, tuple[_Segment, ...]] = {}
        self._episode_segments: tuple[_Segment, ...] = ()
        self._names: tuple[str, ...] = ()
        self._decision = 0
        self._context = ""
        self._last_said: dict[str, dict[str, Any]] = {}

    # ----- spaces -----------------------------------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Space:
        return agent_space(self._observation_spaces, agent, "observation")

    def action_space(self, agent: str) -> spaces.Space:
        return agent_space(self._action_spaces, agent, "action")

    # ----- episodes ---------------------------------------------------------------------------------------

    def _segments_of(self, sample_id: str) -> tuple[_Segment, ...]:
        # Cached like RescueEnv.episode(): the replay does not depend on the actions.
        cached = self._segments.get(sample_id)
        if cached is not None:
            return cached
        sample = self.rescue.dataset.get(sample_id)
        episode = self.rescue.episode(sample)
        people = episode.participants
        ends = [point.row for point in episode.points[1:]] + [episode.rows - 1]
        segments = []
        for point, end in zip(episode.points, ends):
            rows = range(point.row + 1, end + 1)
            recorded = tuple(
                "\n".join(
                    sample.rows[r].dialogue_cleaned.strip()
                    for r in rows
                    if sample.rows[r].primary_speaker.strip() == name
                )
                or None
                for name in people
            )
            addressed = set(target_members(sample.rows[point.row].target, people))
            features = np.array(
                [[float(point.last_speaker == i), float(name in addressed)] for i, name in enumerate(people)],
                dtype=np.float32,
            ).reshape(len(people), 2)
            segments.append(_Segment(rows, recorded, features))
        self._segments[sample_id] = tuple(segments)
        return self._segments[sample_id]

    def _observations(self, therapist: dict[str, Any], decision: int) -> dict[str, Any]:
        features = self._episode_segments[decision].features
        observations: dict[str, Any] = {THERAPIST: therapist}
        for slot in range(len(self._names)):
            observations[participant_agent(slot)] = {"context": therapist["context"], "self": features[slot].copy()}
        return observations

    # ----- pettingzoo API ---------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.rescue.reset(seed=seed, options=view_reset_options(options))
        self._names = tuple(info["participants"])
        self._episode_segments = self._segments_of(info["sample_id"])
        self._decision = 0
        self._last_said = {}
        self.agents = [THERAPIST] + [participant_agent(i) for i in range(len(self._names))]
        self._context = observation["context"]
        infos: dict[str, dict[str, Any]] = {THERAPIST: info}
        for slot, name in enumerate(self._names):
            infos[participant_agent(slot)] = {"name": name, "slot": slot}
        return self._observations(observation, 0), infos

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode has ended (or never started); call reset()")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(f"actions for agents not in the episode: {sorted(unknown)}")
        if THERAPIST not in actions:
            raise ValueError("step() needs the therapist's action")
        segment = self._episode_segments[self._decision]
        wellbeing = 1.0 - self.rescue.state()["distress"]
        context = self._context
        said: dict[str, dict[str, Any]] = {}
        for slot, name in enumerate(self._names):
            agent = participant_agent(slot)
            silent = participant_choice(agent, actions.get(agent, SPEAK)) == SILENT
            recorded = segment.recorded[slot]
            utterance = None if silent else self.participant_policy.utterance(agent, slot, context, recorded)
            said[agent] = {"name": name, "slot": slot, "said": utterance, "recorded": recorded, "silent": silent}

        observation, reward, terminated, truncated, info = self.rescue.step(actions[THERAPIST])
        rewards: dict[str, float] = {THERAPIST: float(reward)}
        infos: dict[str, dict[str, Any]] = {THERAPIST: info}
        for slot in range(len(self._names)):
            agent = participant_agent(slot)
            rewards[agent] = float(wellbeing[slot])
            infos[agent] = {**said[agent], "rows": (segment.rows.start + 1, segment.rows.stop)}
        self._last_said = said
        done = bool(terminated or truncated)
        if not done:
            self._decision += 1
        observations = self._observations(observation, self._decision)
        self._context = observation["context"]
        agents = list(self.agents)
        terminations = dict.fromkeys(agents, bool(terminated))
        truncations = dict.fromkeys(agents, bool(truncated))
        if done:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        """``ansi``: ``RescueEnv``'s text of the last step, then what each participant said; ``human``: printed."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        text = self.rescue.render() or ""
        for agent, entry in self._last_said.items():
            words = "(silent)" if entry["silent"] else (entry["said"] or "(nothing)").replace("\n", " / ")
            text += f"{agent} {entry['name']}: {words}\n"
        if self.render_mode == "human":
            print(text, end="")
            return None
        return text

    def close(self) -> None:
        self.rescue.close()


def parallel_env(**kwargs: Any) -> RescueMultiPartyEnv:
    """The ``ParallelEnv`` (keyword arguments: see ``RescueMultiPartyEnv``)."""
    return RescueMultiPartyEnv(**kwargs)


def aec_factories(parallel: Callable[..., ParallelEnv]) -> tuple[Callable[..., AECEnv], Callable[..., AECEnv]]:
    """``raw_env`` (``parallel_to_aec`` of ``parallel``: agents act in ``agents`` order each step) and ``env`` (the
    same with the usual wrappers: an action outside the acting agent's space is a one-line ``ValueError``
    (``CheckedActionWrapper``), calls out of order raise), for a multi-party view."""

    def raw_env(**kwargs: Any) -> AECEnv:
        return parallel_to_aec(parallel(**kwargs))

    def env(**kwargs: Any) -> AECEnv:
        return wrappers.OrderEnforcingWrapper(CheckedActionWrapper(raw_env(**kwargs)))

    return raw_env, env


raw_env, env = aec_factories(parallel_env)


__all__ = [
    "SILENT",
    "SPEAK",
    "THERAPIST",
    "CheckedActionWrapper",
    "aec_factories",
    "agent_space",
    "participant_choice",
    "view_reset_options",
    "ParticipantPolicy",
    "ReplayParticipant",
    "RescueMultiPartyEnv",
    "env",
    "parallel_env",
    "participant_agent",
    "raw_env",
]
