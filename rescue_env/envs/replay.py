"""``Rescue-v0``: a recorded couple or family therapy conversation replayed as a sequential decision process
(paper App. B). See ``RescueEnv`` for the specification."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.data import Dataset, Sample, load_dataset
from rescue_env.data.domain import (
    SpeakerClass,
    decision_rows,
    is_therapist,
    latest_relation_pattern,
    latest_states,
    participants,
    primary_strategy,
    scenario_of,
    speaker_class,
    support_target,
    target_members,
)
from rescue_env.data.schema import SCENARIOS, Scenario
from rescue_env.rendering import MODES, Mode, render_header, render_rows, window
from rescue_env.reward import (
    PRESETS,
    GroupState,
    Preset,
    RewardConfig,
    components,
    discounted_return,
    group_state,
    total,
)
from rescue_env.taxonomy import ALL_STRATEGY_KEYS, strategies
from rescue_env.text import CHARSET, normalise_text


@dataclass(frozen=True)
class DecisionPoint:
    """Everything about one decision point of an episode, precomputed at the first reset on its sample."""

    row: int
    context: str
    last_speaker: int
    gold_intervene: bool
    gold_recipients: frozenset[int] | None
    gold_strategy: int | None
    distress: np.ndarray
    viewpoints: dict[str, dict[str, str]]
    pattern: str | None
    group: GroupState
    position: np.ndarray
    gold_info: dict[str, Any]
    state_info: dict[str, Any]


@dataclass(frozen=True)
class Episode:
    sample_id: str
    scenario: Scenario
    participants: tuple[str, ...]
    rows: int
    points: tuple[DecisionPoint, ...]
    present: np.ndarray
    target_mask: np.ndarray
    strategy_mask: np.ndarray
    valid_strategies: frozenset[int]
    scenario_index: int
    everyone: frozenset[int]


def support_action_space(slots: int) -> spaces.Dict:
    """The Rescue envs' ``Dict`` action: intervene, a target bit per participant slot plus the group bit, strategy."""
    return spaces.Dict(
        {
            "intervene": spaces.Discrete(2),
            "target": spaces.MultiBinary(slots + 1),
            "strategy": spaces.Discrete(len(ALL_STRATEGY_KEYS)),
        }
    )


def check_slots(samples: Sequence[Sample], max_participants: int) -> None:
    """A ``ValueError`` naming a conversation with more participants than the env has slots."""
    too_many = [s.sample_id for s in samples if len(participants(s)) > max_participants]
    if too_many:
        raise ValueError(
            f"{len(too_many)} conversation(s) have more than max_participants={max_participants} "
            f"participants (e.g. {too_many[0]}); raise max_participants"
        )


@dataclass(frozen=True)
class SlotMasks:
    """Who is present and what may be chosen in a conversation (the observation's masks)."""

    present: np.ndarray
    target_mask: np.ndarray
    strategy_mask: np.ndarray
    valid_strategies: frozenset[int]

    @classmethod
    def of(cls, n_people: int, scenario: Scenario, slots: int) -> SlotMasks:
        taxonomy = strategies(scenario)
        valid = frozenset(i for i, key in enumerate(ALL_STRATEGY_KEYS) if key in taxonomy)
        present = np.zeros(slots, dtype=np.int8)
        present[:n_people] = 1
        return cls(
            present,
            np.append(present, 1).astype(np.int8),
            np.array([i in valid for i in range(len(ALL_STRATEGY_KEYS))], dtype=np.int8),
            valid,
        )


class RescueEnv(gym.Env):
    """
    ## Description

    A recorded couple or family therapy conversation of RESCUE-Bench is replayed row by row (paper App. B). After
    every client row (the ITP boundaries of App. C, without balancing; ``decide_after_therapist=True`` adds the
    therapist's rows) the agent decides, as the therapist would: intervene now or keep listening, whom to support
    (a person, a dyad, a subgroup or everyone) and with which strategy. The conversation then continues as
    recorded, whatever the agent chose, and the choice is scored against what the real therapist did next and
    against a group objective computed from the annotated state (``rescue_env.reward``).

    ## Action Space

    ``Dict``: ``intervene`` ``Discrete(2)`` (1 = the therapist takes the next turn); ``target``
    ``MultiBinary(max_participants + 1)`` (one bit per participant slot, the last bit = the whole group);
    ``strategy`` ``Discrete(11)`` over ``rescue_env.taxonomy.ALL_STRATEGY_KEYS`` (couple strategies, then the
    family-only ``boundary``). Bits for absent slots and strategies outside the scenario's taxonomy are masked
    (``target_mask``, ``strategy_mask`` in the observation; ``action_masks()``): they are ignored, and counted in
    ``info["invalid"]``.

    ## Observation Space

    ``Dict``: ``context`` ``Text`` (a header naming the scenario and the participant slots, then the last
    ``context_size`` rows through the current one, rendered with the evidence of ``mode``: speaker, addressees,
    words, overlapping speech, timing, and tone of voice / visual cues by mode; normalised to ``CHARSET``; the
    oldest text is cut beyond ``max_chars``); ``scenario`` ``Discrete(2)`` (couple, family); ``participants``
    ``MultiBinary(max_participants)`` (present slots); ``last_speaker`` ``Discrete(max_participants + 3)`` (a slot,
    then therapist, group, other); ``position`` ``Box(0, 1, (2,))`` (row and decision progress); ``target_mask``;
    ``strategy_mask``. No annotation and nothing gold is observed.

    ## Rewards

    With z* = 1 iff the next recorded row is the therapist's, A* the target set of that row's support strategy
    and a* its strategy (when in the scenario's taxonomy), and d_i = latest annotated intensity of i / 10:
    timing 1[z = z*]; target Jaccard(A, A*) when z = z* = 1 and A* is known; strategy 1[a = a*] when z = z* = 1 and
    a* is known; group U(d, G) - lambda * max over the most distressed of d_i (1 - w_i) - kappa * z, with w_i = 1/|A|
    for the recipients of an intervention. The step reward is the preset's weighted sum (``imitation``,
    ``group``, ``combined``; see ``rescue_env.reward``). Components without gold are not scored, and ``info``
    says which were.

    ## Starting State

    ``reset(seed, options)`` starts a conversation: ``options={"sample_id": ...}`` picks one, else
    ``sample_order="random"`` draws one with ``np_random``, and ``"sequential"`` takes them in dataset order
    (so that len(dataset) episodes cover it exactly once). The first observation is the first decision point.

    ## Episode End

    Terminated after the last decision point of the conversation (never truncated). The final ``info`` carries
    ``episode``: return, discounted return (``gamma``), length and the return under every preset.

    ## Arguments

    ``data`` (path, ``"demo"`` or a loaded ``Dataset``), ``reward`` (a preset name or ``RewardConfig``),
    ``mode`` (dialogue, audio, visual, audiovisual), ``context_size`` (rows; -1 = all), ``max_chars``,
    ``max_participants``, ``sample_order``, ``decide_after_therapist``, ``render_mode`` (``"ansi"``, ``"human"``).

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}
    version = 0

    def __init__(
        self,
        data: str | Dataset = "demo",
        reward: Preset | RewardConfig = "combined",
        mode: Mode = "dialogue",
        context_size: int = 8,
        max_chars: int = 4096,
        max_participants: int = 6,
        sample_order: str = "random",
        decide_after_therapist: bool = False,
        render_mode: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if sample_order not in ("random", "sequential"):
            raise ValueError(f"sample_order must be 'random' or 'sequential', got {sample_order!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.dataset = data if isinstance(data, Dataset) else load_dataset(data)
        self.reward_config = (
            reward if isinstance(reward, RewardConfig) else RewardConfig.preset(reward, version=self.version)
        )
        self.mode, self.context_size, self.max_chars = mode, context_size, max_chars
        self.max_participants = max_participants
        self.sample_order, self.decide_after_therapist = sample_order, decide_after_therapist
        self.render_mode = render_mode
        self._presets = {name: RewardConfig.preset(name, version=self.version, **self._constants()) for name in PRESETS}
        self._episodes: dict[str, Episode] = {}
        self.samples = [s for s in self.dataset.samples if self.decision_rows(s)]
        self._playable = {s.sample_id for s in self.samples}
        if not self.samples:
            raise ValueError(f"{self.dataset.source}: no conversation has a decision point")
        check_slots(self.samples, max_participants)

        n_slots, n_strategies = max_participants, len(ALL_STRATEGY_KEYS)
        self.action_space = support_action_space(n_slots)
        self.observation_space = spaces.Dict(
            {
                "context": spaces.Text(max_length=max_chars, min_length=0, charset="".join(sorted(CHARSET))),
                "scenario": spaces.Discrete(len(SCENARIOS)),
                "participants": spaces.MultiBinary(n_slots),
                "last_speaker": spaces.Discrete(n_slots + 3),
                "position": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
                "target_mask": spaces.MultiBinary(n_slots + 1),
                "strategy_mask": spaces.MultiBinary(n_strategies),
            }
        )
        self._episode: Episode | None = None
        self._step = 0
        self._next_sequential = 0
        self._rewards: list[float] = []
        self._component_sums: dict[str, float] = {}
        self._last: tuple[DecisionPoint, dict[str, Any], float] | None = None

    # ----- episodes ---------------------------------------------------------------------------------------

    def _constants(self) -> dict[str, Any]:
        c = self.reward_config
        return {"lam": c.lam, "kappa": c.kappa, "gamma": c.gamma, "max_age": c.max_age, "utility": c.utility}

    def decision_rows(self, sample: Sample) -> list[int]:
        """Row positions after which the agent decides (every client row but the last row; therapist rows too
        with ``decide_after_therapist``): the episode's length without precomputing it."""
        return decision_rows(sample, self.decide_after_therapist)

    def _slot_of(self, name: str, people: Sequence[str]) -> int:
        kind = speaker_class(name)
        if kind is SpeakerClass.THERAPIST:
            return self.max_participants
        if kind is SpeakerClass.GROUP:
            return self.max_participants + 1
        return people.index(name) if name in people else self.max_participants + 2

    def episode(self, sample: Sample) -> Episode:
        """The precomputed decision points of ``sample`` (cached: a replay does not depend on the actions)."""
        cached = self._episodes.get(sample.sample_id)
        if cached is not None:
            return cached
        scenario = scenario_of(sample)
        people = tuple(participants(sample))
        taxonomy = strategies(scenario)
        header = normalise_text(render_header(scenario, people, self.max_participants))
        budget = max(0, self.max_chars - len(header))
        rows = self.decision_rows(sample)
        points = []
        for step, row in enumerate(rows):
            rows_text = normalise_text(render_rows(sample, window(row, self.context_size), self.mode))
            following = sample.rows[row + 1]
            gold_intervene = is_therapist(following)
            gold_recipients = gold_strategy = None
            if gold_intervene and following.support_strategy:
                members = target_members(support_target(following), people)
                slots = frozenset(people.index(m) for m in members if m in people)
                gold_recipients = slots or None
                key = primary_strategy(following)
                gold_strategy = ALL_STRATEGY_KEYS.index(key) if key in taxonomy else None
            states = latest_states(sample, row, max_age=self.reward_config.max_age)
            distress = np.array([(states[p].intensity or 0.0) / 10.0 for p in people], dtype=np.float64)
            pattern = latest_relation_pattern(sample, row)
            viewpoints = {p: dict(states[p].viewpoints) for p in people if states[p].viewpoints}
            position = np.array([row / max(1, len(sample.rows) - 1), step / max(1, len(rows) - 1)])
            points.append(
                DecisionPoint(
                    row=row,
                    context=header + rows_text[-budget:] if budget else header[: self.max_chars],
                    last_speaker=self._slot_of(sample.rows[row].primary_speaker.strip(), people),
                    gold_intervene=gold_intervene,
                    gold_recipients=gold_recipients,
                    gold_strategy=gold_strategy,
                    distress=distress,
                    viewpoints=viewpoints,
                    pattern=pattern,
                    group=group_state(distress, self.reward_config, viewpoints, pattern),
                    position=np.clip(position, 0.0, 1.0).astype(np.float32),
                    gold_info={
                        "intervene": gold_intervene,
                        "target": None if gold_recipients is None else [people[i] for i in sorted(gold_recipients)],
                        "strategy": None if gold_strategy is None else ALL_STRATEGY_KEYS[gold_strategy],
                    },
                    state_info={
                        "distress": dict(zip(people, distress.tolist())),
                        "viewpoints": viewpoints,
                        "pattern": pattern,
                    },
                )
            )
        masks = SlotMasks.of(len(people), scenario, self.max_participants)
        episode = Episode(
            sample.sample_id,
            scenario,
            people,
            len(sample.rows),
            tuple(points),
            present=masks.present,
            target_mask=masks.target_mask,
            strategy_mask=masks.strategy_mask,
            valid_strategies=masks.valid_strategies,
            scenario_index=SCENARIOS.index(scenario),
            everyone=frozenset(range(len(people))),
        )
        self._episodes[sample.sample_id] = episode
        return episode

    # ----- gymnasium API ----------------------------------------------------------------------------------

    def _observation(self) -> dict[str, Any]:
        episode, point = self._episode, self._point()
        # Fresh arrays each step: a learner may keep or modify them.
        return {
            "context": point.context,
            "scenario": episode.scenario_index,
            "participants": episode.present.copy(),
            "last_speaker": point.last_speaker,
            "position": point.position.copy(),
            "target_mask": episode.target_mask.copy(),
            "strategy_mask": episode.strategy_mask.copy(),
        }

    def _point(self) -> DecisionPoint:
        if self._episode is None:
            raise RuntimeError("call reset() first")
        if self._step >= len(self._episode.points):
            raise RuntimeError("the episode has ended; call reset()")
        return self._episode.points[self._step]

    def action_masks(self) -> dict[str, np.ndarray]:
        """Valid target bits and strategies at the current step (for masking learners)."""
        self._point()
        return {"target": self._episode.target_mask.astype(bool), "strategy": self._episode.strategy_mask.astype(bool)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._next_sequential = 0  # a seeded reset restarts the sequential order too
        options = check_reset_options(options)
        if "sample_id" in options:
            sample = self.dataset.get(options["sample_id"])
            if sample.sample_id not in self._playable:
                raise ValueError(f"sample {options['sample_id']!r} has no decision point")
        elif self.sample_order == "sequential":
            sample = self.samples[self._next_sequential % len(self.samples)]
            self._next_sequential += 1
        else:
            sample = self.samples[int(self.np_random.integers(len(self.samples)))]
        self._episode = self.episode(sample)
        self._step = 0
        self._rewards = []
        self._component_sums = {"timing": 0.0, "target": 0.0, "strategy": 0.0, "group": 0.0}
        self._last = None
        info = {
            "sample_id": sample.sample_id,
            "scenario": self._episode.scenario,
            "participants": list(self._episode.participants),
            "decision_points": len(self._episode.points),
        }
        return self._observation(), info

    def _decode(self, action: dict[str, Any]) -> tuple[bool, frozenset[int], int, list[str]]:
        episode = self._episode
        return decode_action(
            action, len(episode.participants), self.max_participants, episode.valid_strategies, episode.everyone
        )

    def step(self, action: dict[str, Any]):
        point = self._point()
        intervene, recipients, strategy, invalid = self._decode(action)
        parts = self._parts(point, intervene, recipients, strategy, expected=False)
        reward = total(parts, self.reward_config)
        self._rewards.append(reward)
        sums = self._component_sums
        sums["timing"] += parts["timing"]
        sums["group"] += parts["group"]
        if parts["target"] is not None:
            sums["target"] += parts["target"]
        if parts["strategy"] is not None:
            sums["strategy"] += parts["strategy"]
        episode = self._episode
        people = episode.participants
        info: dict[str, Any] = {
            "sample_id": episode.sample_id,
            "scenario": episode.scenario,
            "row": point.row + 1,
            "decision": self._step,
            "components": parts,
            "scored": {
                "timing": True,
                "target": parts["target"] is not None,
                "strategy": parts["strategy"] is not None,
                "group": True,
            },
            "gold": point.gold_info,
            "chosen": {
                "intervene": intervene,
                "target": [people[i] for i in sorted(recipients)],
                "strategy": ALL_STRATEGY_KEYS[strategy] if strategy >= 0 else None,
            },
            "state": point.state_info,
            "invalid": invalid,
        }
        self._last = (point, info, reward)
        self._step += 1
        terminated = self._step >= len(episode.points)
        if terminated:
            info["episode"] = {
                "return": float(sum(self._rewards)),
                "discounted_return": discounted_return(self._rewards, self.reward_config.gamma),
                "length": len(self._rewards),
                # Returns are linear in the components, so every preset's follows from their sums.
                "returns_by_preset": {name: total(sums, config) for name, config in self._presets.items()},
            }
            observation = self._observation_at_end()
        else:
            observation = self._observation()
        if self.render_mode == "human":
            self.render()
        return observation, reward, terminated, False, info

    def _group_component(
        self,
        point: DecisionPoint,
        intervene: bool,
        recipients: frozenset[int],
        strategy: int,
        v0_value: float,
        expected: bool,
    ) -> float:
        """The group component of this step (v0: the annotated-state objective of ``rescue_env.reward``, which is
        deterministic; ``expected`` asks for the expectation where a version draws it)."""
        return v0_value

    def action_value(self, action: dict[str, Any]) -> float:
        """The step reward ``action`` would earn at the current decision point, without advancing (for a stochastic
        group component, its expectation). Privileged, like ``gold()``: for fitting policies on logged rewards
        (a replay's state never depends on the actions, so one step's value is all a return is made of) and for
        analysis; never for an agent at evaluation time."""
        point = self._point()
        intervene, recipients, strategy, _ = self._decode(action)
        return total(self._parts(point, intervene, recipients, strategy, expected=True), self.reward_config)

    def _parts(
        self, point: DecisionPoint, intervene: bool, recipients: frozenset[int], strategy: int, expected: bool
    ) -> dict[str, float | None]:
        parts = components(
            intervene=intervene,
            recipients=recipients,
            strategy=strategy,
            gold_intervene=point.gold_intervene,
            gold_recipients=point.gold_recipients,
            gold_strategy=point.gold_strategy,
            state=point.group,
            config=self.reward_config,
        )
        parts["group"] = self._group_component(point, intervene, recipients, strategy, parts["group"], expected)
        return parts

    def _observation_at_end(self) -> dict[str, Any]:
        # Gymnasium needs an observation after the last step: the last decision point's, unchanged.
        self._step -= 1
        observation = self._observation()
        self._step += 1
        return observation

    # ----- privileged accessors (reference policies and evaluation only; not part of the observation) -----

    def gold(self) -> dict[str, Any]:
        """The real therapist's choice at the current decision point (z*, A* as slots, a* as an index)."""
        point = self._point()
        return {"intervene": point.gold_intervene, "recipients": point.gold_recipients, "strategy": point.gold_strategy}

    def state(self) -> dict[str, Any]:
        """The annotated state at the current decision point: distress per slot, viewpoints, relation pattern."""
        point = self._point()
        return {"distress": point.distress.copy(), "viewpoints": point.viewpoints, "pattern": point.pattern}

    # ----- rendering --------------------------------------------------------------------------------------

    def render(self) -> str | None:
        """``ansi``: the last step as text (context tail, gold vs chosen action, reward); ``human``: printed."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        text = self._render_text()
        if self.render_mode == "human":
            print(text, end="")
            return None
        return text

    def _render_text(self) -> str:
        if self._last is None:
            if self._episode is None:
                return ""
            return f"{self._episode.sample_id} ({self._episode.scenario}), {len(self._episode.points)} decisions\n"
        point, info, reward = self._last
        tail = "\n".join(point.context.splitlines()[-3:])
        parts = ", ".join(f"{k}={v:.2f}" for k, v in info["components"].items() if v is not None)
        return (
            f"--- {info['sample_id']} decision {info['decision'] + 1} after row {info['row']}\n{tail}\n"
            f"gold:   {_describe(info['gold'])}\nchosen: {_describe(info['chosen'])}\n"
            f"reward {reward:.3f} ({parts})\n"
        )


ACTION_KEYS = frozenset({"intervene", "target", "strategy"})
RESET_OPTIONS = frozenset({"sample_id"})


def integer_value(value: Any) -> int | None:
    """``value`` as an int when it is an integer scalar (Python, numpy, or a one-element integer array), else
    None: a float, even 1.0, is not a ``Discrete`` value, and casting would hide 0.7 or 3.7."""
    if type(value) is int:  # the common case first: this runs at every step
        return value
    if isinstance(value, np.ndarray):
        if value.size != 1 or value.ndim > 1 or value.dtype.kind not in "iub":
            return None
        value = value.reshape(()).item()
    if isinstance(value, bool | np.bool_ | int | np.integer):
        return int(value)
    return None


def decode_action(
    action: dict[str, Any], n: int, slots: int, valid_strategies: frozenset[int], everyone: frozenset[int]
) -> tuple[bool, frozenset[int], int, list[str]]:
    """A ``Dict`` action of the Rescue envs as (intervene, recipient slots, strategy index or -1, what was invalid):
    bits of absent slots are ignored, the group bit means ``everyone``, a strategy outside the scenario's taxonomy
    becomes -1 (in the space but masked: allowed, and counted). An action outside the space raises a one-line
    ``ValueError`` naming the key and the value: a missing or extra key, ``intervene`` not 0 or 1, ``strategy``
    not an integer in [0, 11), ``target`` not a flat array of ``slots + 1`` integer bits in {0, 1}."""
    if (
        not (type(action) is dict or isinstance(action, Mapping))
        or len(action) != 3
        or not ACTION_KEYS.issuperset(action)
    ):
        keys = sorted(map(str, action)) if isinstance(action, Mapping) else type(action).__name__
        raise ValueError(f"action must be a dict with exactly intervene, target and strategy, got {keys}")
    intervene = integer_value(action["intervene"])
    if intervene not in (0, 1):
        raise ValueError(f"action intervene={action['intervene']!r} is outside Discrete(2): give 0 or 1")
    strategy = integer_value(action["strategy"])
    if strategy is None or not 0 <= strategy < len(ALL_STRATEGY_KEYS):
        raise ValueError(
            f"action strategy={action['strategy']!r} is outside Discrete({len(ALL_STRATEGY_KEYS)}): give an integer "
            f"index of ALL_STRATEGY_KEYS"
        )
    bits = action["target"]
    bits = bits if isinstance(bits, np.ndarray) else np.asarray(bits)
    flags = bits.tolist() if bits.ndim == 1 and bits.size == slots + 1 and bits.dtype.kind in "iub" else None
    # A few Python comparisons: cheaper than numpy calls on seven bits, on the hot path of every step.
    if flags is None or any(f != 0 and f != 1 for f in flags):
        raise ValueError(
            f"action target={action['target']!r} is outside MultiBinary({slots + 1}): give {slots + 1} bits of 0 or 1"
        )
    invalid = []
    if any(flags[n:slots]):
        invalid.append("target: absent participant slot")
    recipients = everyone if flags[slots] else frozenset(i for i in range(n) if flags[i])
    if strategy not in valid_strategies:
        invalid.append("strategy: outside the scenario's taxonomy")
        strategy = -1
    return bool(intervene), recipients, strategy, invalid


def check_reset_options(options: Any) -> dict[str, Any]:
    """``reset``'s options: None or a dict whose keys are in ``RESET_OPTIONS`` (anything else is a one-line
    ``ValueError``: an ignored option would silently play another conversation than the one asked for)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"reset options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(set(map(str, options)) - RESET_OPTIONS)
    if unknown:
        raise ValueError(f"unknown reset option(s) {', '.join(unknown)}; known: {', '.join(sorted(RESET_OPTIONS))}")
    return dict(options)


def _describe(choice: dict[str, Any]) -> str:
    if not choice["intervene"]:
        return "keep listening"
    target = ", ".join(choice["target"]) if choice["target"] else "?"
    return f"intervene -> {target} with {choice['strategy'] or '?'}"


__all__ = [
    "CHARSET",
    "DecisionPoint",
    "Episode",
    "RescueEnv",
    "SlotMasks",
    "check_reset_options",
    "check_slots",
    "decode_action",
    "integer_value",
    "normalise_text",
    "support_action_space",
]
