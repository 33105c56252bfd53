"""``Rescue-v0``: a recorded couple or family therapy conversation replayed as a sequential decision process
(paper App. B). See ``RescueEnv`` for the specification."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.data import Dataset, Sample, load_dataset
from rescue_env.data.domain import (
    SpeakerClass,
    decision_rows,
    is_therapist,
    participants,
    primary_strategy,
    scenario_of,
    speaker_class,
    support_target,
    target_members,
)
from rescue_env.data.loading import LoadReport, nothing_read, resolve_path
from rescue_env.data.schema import SCENARIOS, Scenario
from rescue_env.data.splits import SplitConfig, split_samples
from rescue_env.rendering import MODES, Mode, render_header, render_row, window
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
from rescue_env.taxonomy import ALL_STRATEGY_KEYS, relation_patterns, strategies
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


InfoLevel = Literal["basic", "full"]
INFO_LEVELS: tuple[InfoLevel, ...] = ("basic", "full")
"""``info_level``: ``basic`` (default) a few flat scalars per step, ``full`` every detail (gold, chosen, state)."""


def check_info_level(value: Any) -> InfoLevel:
    if value not in INFO_LEVELS:
        raise ValueError(f"info_level must be one of {', '.join(INFO_LEVELS)}, got {value!r}")
    return value


def check_context_size(value: Any, *, allow_none: bool = False) -> int | None:
    """``context_size`` as an int: -1 (every prior row) or a number of rows >= 0 (``None`` too with
    ``allow_none``: the task's default). Anything else is a one-line ``ValueError``: ``window`` reads any negative
    size as "all rows", so -3 would silently mean -1, and a float or a string fails somewhere deep inside."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or value < -1:
        none = ", or None (the task's default)" if allow_none else ""
        raise ValueError(f"context_size must be -1 (all prior rows) or an integer >= 0{none}, got {value!r}")
    return int(value)


def reset_options_dict(options: Any) -> dict[str, Any]:
    """``reset``'s ``options`` as a new dict (``{}`` for None); anything else is the one line every env id gives
    (``dict(options)`` would answer a string with Python's "dictionary update sequence element #0 ...")."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"reset options must be a dict or None, got {type(options).__name__}")
    return dict(options)


def require_samples(dataset: Dataset) -> Dataset:
    """``dataset`` when it holds a sample; else a one-line ``ValueError`` with the loader's wording ("0 samples
    could be read from SOURCE: REASON", ``rescue_env.data.loading.nothing_read``). Without it an empty ``Dataset``
    would only say later that "no conversation has a decision point", which hides that nothing was read at all."""
    if dataset.samples:
        return dataset
    raise ValueError(str(nothing_read(dataset.source, dataset.report))) from None


class SharedCache:
    """A process-wide dict (precomputed episodes, sample digests, loaded datasets) that forgets the oldest entries
    beyond ``maxsize``. Entries are never changed once stored (their arrays are flagged read-only), so envs can
    share them."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self._data.get(key)

    def put(self, key: Any, value: Any) -> Any:
        self._data[key] = value
        while len(self._data) > self.maxsize:
            del self._data[next(iter(self._data))]
        return value

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


EPISODES = SharedCache(maxsize=8192)
"""The replays' precomputed episodes, shared by every env of the process (the release has 191 conversations)."""


def sample_digest(sample: Sample) -> str:
    """A hash of the sample's whole content: the cache key, so that an edited sample under the same id (e.g. its
    annotations scrubbed) is precomputed again (about 0.3 ms for a conversation of the release; remembered per
    sample object)."""
    known = _DIGESTS.get(id(sample))
    if known is not None and known[0] is sample:
        return known[1]
    digest = hashlib.sha256(sample.__pydantic_serializer__.to_json(sample)).hexdigest()
    _DIGESTS.put(id(sample), (sample, digest))
    return digest


_DIGESTS = SharedCache(maxsize=8192)


def shared_dataset(data: str | Path | Sequence[Sample]) -> Dataset:
    """``load_dataset(data)``, loaded once per process for a file (keyed by its path, size and modification
    time): the sub-envs of a vector env, or several envs on the same file, share one read-only ``Dataset``
    instead of parsing and validating the release each (0.6 s) and hashing each sample again. A list (or tuple)
    of ``Sample`` becomes a ``Dataset`` of them (``samples_dataset``); any other type is a one-line
    ``ValueError``: left to ``Path()``, it would be a ``TypeError`` that ``gym.make`` re-raises with every
    argument's repr, the whole data included."""
    if isinstance(data, list | tuple):
        return samples_dataset(data)
    if data is not None and not isinstance(data, str | os.PathLike):
        raise ValueError(f"data must be a path, 'demo', a Dataset or a list of Sample, got {type(data).__name__}")
    path = resolve_path(data)
    if not path.is_file():
        return load_dataset(data)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    dataset = _DATASETS.get(key)
    if dataset is None:
        dataset = _DATASETS.put(key, load_dataset(data))
    return dataset


_DATASETS = SharedCache(maxsize=8)


def samples_dataset(samples: Sequence[Sample]) -> Dataset:
    """A ``Dataset`` of ``samples`` (already validated: ``Sample`` objects), hashed by content so that F's cache
    (``outcome_model_for``, keyed by the data's sha256) tells two lists apart; a non-``Sample`` item or a
    repeated sample id is a one-line ``ValueError`` that names it, never the list."""
    for index, sample in enumerate(samples):
        if not isinstance(sample, Sample):
            raise ValueError(
                f"data: item {index} of the list is a {type(sample).__name__}, not a Sample (give a path, 'demo', "
                "a Dataset or a list of Sample)"
            )
    ids = [s.sample_id for s in samples]
    if len(set(ids)) < len(ids):
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"data: sample id {repeated!r} occurs more than once in the list")
    source = f"a list of {len(samples)} samples" if samples else "an empty list"
    digest = hashlib.sha256("\n".join(sample_digest(s) for s in samples).encode()).hexdigest()
    report = LoadReport(source=source, samples_read=len(samples), samples_loaded=len(samples))
    return Dataset(samples=list(samples), source=source, sha256=digest, report=report)


def annotated_states(
    sample: Sample, scenario: Scenario, people: Sequence[str], rows: Sequence[int], max_age: int | None
) -> list[tuple[tuple[float, ...], dict[str, dict[str, str]], str | None]]:
    """Per row of ``rows`` (ascending): the distress of each participant (latest intensity / 10, 0 when none or
    older than ``max_age``), their viewpoints (source -> target -> text, without those older than ``max_age``)
    and the latest relation pattern: ``domain.latest_states`` and ``domain.latest_relation_pattern`` at each
    row, in one pass over the rows instead of one per decision point (tested equal)."""
    names = set(people)
    labels = relation_patterns(scenario)
    intensity: dict[str, float | None] = dict.fromkeys(people)
    emotion_row: dict[str, int] = {}
    views: dict[str, dict[str, str]] = {p: {} for p in people}
    view_rows: dict[str, dict[str, int]] = {p: {} for p in people}
    pattern: str | None = None
    out = []
    wanted = iter(rows)
    through = next(wanted, None)
    for position, row in enumerate(sample.rows):
        if through is None:
            break
        for emotion in row.internal_emotion:
            person = emotion.person.strip()
            if person in names and emotion.intensity is not None:
                intensity[person], emotion_row[person] = float(emotion.intensity), position
        for view in row.viewpoints_attitudes:
            source, target = view.source.strip(), view.target.strip()
            if source in names and target and view.viewpoint.strip():
                views[source][target] = view.viewpoint
                view_rows[source][target] = position
        label = (row.relation_pattern or "").strip() or (row.relation_cycle_state or "").strip()
        if label in labels:
            pattern = label
        while through == position:
            oldest = -1 if max_age is None else through - max_age  # an annotation at a row < oldest is forgotten
            distress = tuple(
                (intensity[p] or 0.0) / 10.0 if intensity[p] is not None and emotion_row[p] >= oldest else 0.0
                for p in people
            )
            viewpoints = {}
            for p in people:
                kept = {t: v for t, v in views[p].items() if view_rows[p][t] >= oldest}
                if kept:
                    viewpoints[p] = kept
            out.append((distress, viewpoints, pattern))
            through = next(wanted, None)
    return out


def rendered_window(sample: Sample, positions: range, mode: Mode, texts: dict[int, str]) -> str:
    """``normalise_text(render_rows(sample, positions, mode))`` with each row rendered and normalised once into
    ``texts`` (normalising is per character and rows are joined by a newline, so the two agree)."""
    if len(positions) == 0:
        return normalise_text("(no earlier rows)")
    parts = []
    for p in positions:
        text = texts.get(p)
        if text is None:
            text = texts[p] = normalise_text(render_row(sample.rows[p], p, mode))
        parts.append(text)
    return "\n".join(parts)


class InfoLevelSetting:
    """The ``info_level`` attribute of the replays and the sim: settable on a built env (a rollout that records the
    details asks for them on an env it is given)."""

    _info_level: InfoLevel
    _full_info: bool

    @property
    def info_level(self) -> InfoLevel:
        """``basic`` or ``full``."""
        return self._info_level

    @info_level.setter
    def info_level(self, value: InfoLevel) -> None:
        self._info_level = check_info_level(value)
        self._full_info = value == "full"


class RescueEnv(InfoLevelSetting, gym.Env):
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
    ``info["n_invalid"]`` (listed in ``info["invalid"]`` with ``info_level="full"``).

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
    says which were (``info_level="full"``).

    ## Info

    ``info_level="basic"`` (default): a few flat scalars per step, ``decision`` (index), ``row`` (1-based row
    number) and ``n_invalid`` (masked choices ignored), cheap to merge for a vector env. ``"full"`` adds
    ``sample_id``, ``scenario``, ``components``, ``scored``, ``gold`` (the real therapist's choice), ``chosen``,
    ``state`` (the annotated state) and ``invalid`` (what was ignored, in words). ``reset``'s info is
    ``sample_id``, ``scenario`` and ``participants``; ``"full"`` adds ``decision_points`` (the episode's length,
    which the default leaves out so that an info shown to an agent does not tell it the horizon). The final
    ``episode`` is the same at both levels. The attribute ``info_level`` can be set on a built env.

    ## Starting State

    ``reset(seed, options)`` starts a conversation of the ``split`` side: ``options={"sample_id": ...}`` picks
    one, else ``sample_order="random"`` draws one with ``np_random``, and ``"sequential"`` takes them in dataset
    order (so that as many episodes as the side has conversations cover it exactly once). The first observation
    is the first decision point.

    ## Episode End

    Terminated after the last decision point of the conversation (never truncated). The final ``info`` carries
    ``episode``: return, discounted return (``gamma``), length and the return under every preset.

    ## Arguments

    ``data`` (path, ``"demo"``, a loaded ``Dataset`` or a list of ``Sample``), ``reward`` (a preset name or
    ``RewardConfig``), ``mode`` (dialogue, audio, visual, audiovisual), ``context_size`` (rows; -1 = all),
    ``max_chars``, ``max_participants``, ``sample_order``, ``decide_after_therapist``, ``render_mode``
    (``"ansi"``, ``"human"``), ``info_level`` (``"basic"``, ``"full"``), ``split`` (``"all"`` default, ``"train"``,
    ``"test"``: the side of the project's grouped split of ``data`` that is played, ``rescue_env.data.splits``),
    ``split_seed`` = 0, ``test_fraction`` = 0.2 (the split's, as in ``RescueSim-v0``).

    ## Version History

    * v0, ``split``, ``split_seed``, ``test_fraction`` and ``data`` as a list of ``Sample`` (issue 24): an env can
      play one side of the grouped split, as the sim and the task envs can. The default ``split="all"`` plays
      every conversation as before, so nothing changes unless asked and the version stays v0.
    * v0, ``reset`` info change (issue 23): at the default ``info_level`` the reset info no longer carries
      ``decision_points`` (the episode's length; still there with ``info_level="full"``), because a harness that
      shows ``info`` to an LLM agent would tell it the horizon. Observations, rewards and episode ends are
      unchanged, so the version stays v0 (Gymnasium's convention; ``RescueFlat-v0`` likewise).
    * v0, ``info`` change (issue 14): a step's ``info`` is small and flat by default (``decision``, ``row``,
      ``n_invalid``); the previous details are asked for with ``info_level="full"``. Observations, rewards and
      episode ends are unchanged, so learning results do not change and the version stays v0 (Gymnasium's
      convention). Conversations are precomputed once per process, shared between envs.
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
        info_level: InfoLevel = "basic",
        split: str = "all",
        split_seed: int = 0,
        test_fraction: float = 0.2,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if sample_order not in ("random", "sequential"):
            raise ValueError(f"sample_order must be 'random' or 'sequential', got {sample_order!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        context_size = check_context_size(context_size)
        self.dataset = require_samples(data if isinstance(data, Dataset) else shared_dataset(data))
        # The whole data stays ``dataset`` (Rescue-v1 fits F on its train side); ``samples`` are the side played.
        self.split_config = SplitConfig(split=split, seed=split_seed, test_fraction=test_fraction)
        self.split, self.split_seed, self.test_fraction = split, split_seed, test_fraction
        self.reward_config = (
            reward if isinstance(reward, RewardConfig) else RewardConfig.preset(reward, version=self.version)
        )
        self.mode, self.context_size, self.max_chars = mode, context_size, max_chars
        self.max_participants = max_participants
        self.sample_order, self.decide_after_therapist = sample_order, decide_after_therapist
        self.render_mode = render_mode
        self.info_level = info_level
        self._presets = {name: RewardConfig.preset(name, version=self.version, **self._constants()) for name in PRESETS}
        self._episodes: dict[str, Episode] = {}
        side = split_samples(self.dataset.samples, self.split_config)
        self.samples = [s for s in side if self.decision_rows(s)]
        self._playable = {s.sample_id for s in self.samples}
        if not self.samples:
            where = "" if split == "all" else f" on the {split} side"
            raise ValueError(f"{self.dataset.source}: no conversation{where} has a decision point")
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
        self._last: tuple | None = None  # (point, decision, intervene, recipients, strategy, invalid, parts, reward)

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

    def _episode_key(self) -> tuple:
        """What a precomputed episode depends on besides the sample (the key of the process-wide cache)."""
        c = self.reward_config
        return (RescueEnv.episode, self.mode, self.context_size, self.max_chars, self.max_participants,
                self.decide_after_therapist, c.max_age, c.utility)  # fmt: skip

    def episode(self, sample: Sample) -> Episode:
        """The precomputed decision points of ``sample`` (cached: a replay does not depend on the actions). The
        cache is per process (``EPISODES``), keyed by the sample's content and the settings: the sub-envs of a
        vector env, or a second env on the same data, precompute each conversation once between them."""
        cached = self._episodes.get(sample.sample_id)
        if cached is not None:
            return cached
        key = (sample_digest(sample), self._episode_key())
        episode = EPISODES.get(key)
        if episode is None:
            episode = EPISODES.put(key, self._compute_episode(sample))
        self._episodes[sample.sample_id] = episode
        return episode

    def _compute_episode(self, sample: Sample) -> Episode:
        scenario = scenario_of(sample)
        people = tuple(participants(sample))
        taxonomy = strategies(scenario)
        header = normalise_text(render_header(scenario, people, self.max_participants))
        budget = max(0, self.max_chars - len(header))
        rows = self.decision_rows(sample)
        annotated = annotated_states(sample, scenario, people, rows, self.reward_config.max_age)
        texts: dict[int, str] = {}  # each row rendered once, not once per window it is in
        points = []
        for step, (row, (distress_values, viewpoints, pattern)) in enumerate(zip(rows, annotated)):
            rows_text = rendered_window(sample, window(row, self.context_size), self.mode, texts)
            following = sample.rows[row + 1]
            gold_intervene = is_therapist(following)
            gold_recipients = gold_strategy = None
            if gold_intervene and following.support_strategy:
                members = target_members(support_target(following), people)
                slots = frozenset(people.index(m) for m in members if m in people)
                gold_recipients = slots or None
                key = primary_strategy(following)
                gold_strategy = ALL_STRATEGY_KEYS.index(key) if key in taxonomy else None
            distress = np.array(distress_values, dtype=np.float64)
            position = np.array([row / max(1, len(sample.rows) - 1), step / max(1, len(rows) - 1)])
            position = np.clip(position, 0.0, 1.0).astype(np.float32)
            position.flags.writeable = False  # shared by the cache; observations get a copy
            distress.flags.writeable = False
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
                    position=position,
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
        for array in (masks.present, masks.target_mask, masks.strategy_mask):
            array.flags.writeable = False
        return Episode(
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

    # ----- gymnasium API ----------------------------------------------------------------------------------

    def _observation(self) -> dict[str, Any]:
        episode, point = self._episode, self._point()
        # Fresh arrays each step: a learner may keep or modify them (Gymnasium's check_env asserts that no two
        # observations share an object), copied from the read-only precomputed ones.
        return {
            "context": point.context,
            "scenario": episode.scenario_index,
            "participants": episode.present.copy(),
            "last_speaker": point.last_speaker,
            self.time_key: self._time_value(point),
            "target_mask": episode.target_mask.copy(),
            "strategy_mask": episode.strategy_mask.copy(),
        }

    time_key = "position"
    """The observation's time entry: v0's progress in [0, 1]; v1 observes ``elapsed`` rows and minutes instead."""

    def _time_value(self, point: DecisionPoint) -> np.ndarray:
        """The time entry of the current point's observation, a fresh copy."""
        return point.position.copy()

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

    def last_speaker_slot(self) -> int | None:
        """The participant slot of the current observation's ``last_speaker`` (None when that is the therapist,
        the group or someone else): what an action "support the last speaker" points at
        (``wrappers.DiscreteSupportAction``). Read from the observed point, so it tells nothing the observation
        does not; a flat wrapper that never builds the ``Dict`` asks it here."""
        slot = self._episode.points[self.observed_point()].last_speaker
        return slot if slot < self.max_participants else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._next_sequential = 0  # a seeded reset restarts the sequential order too
        options = check_reset_options(options)
        if "sample_id" in options:
            sample = self.dataset.get(options["sample_id"])
            if sample.sample_id not in self._playable:
                if self.split != "all" and self.decision_rows(sample):
                    raise ValueError(
                        f"sample {options['sample_id']!r} is not on the {self.split} side of the grouped split that "
                        "this env plays"
                    )
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
        }
        if self._full_info:
            # The episode's length only with the details: a harness that shows an LLM the info would tell it the
            # horizon, which the observation does not (v1 removed ``position`` for that reason).
            info["decision_points"] = len(self._episode.points)
        return self._observation(), info

    def _decode(self, action: dict[str, Any]) -> tuple[bool, frozenset[int], int, list[str]]:
        episode = self._episode
        return decode_action(
            action, len(episode.participants), self.max_participants, episode.valid_strategies, episode.everyone
        )

    def step(self, action: dict[str, Any]):
        reward, terminated, info = self.advance(action)
        return self.current_observation(), reward, terminated, False, info

    def advance(self, action: dict[str, Any]) -> tuple[float, bool, dict[str, Any]]:
        """``step`` without building the observation: (reward, terminated, info). The observation after it is the
        decision point ``observed_point()`` (a replay's observations depend on nothing else), so a wrapper that
        keeps its own encoding of each point's observation (``FlatObservation``) steps without the ``Dict``."""
        episode, t = self._episode, self._step
        if episode is None or t >= len(episode.points):
            self._point()  # the error of calling step() before reset() or after the end
        point = episode.points[t]
        intervene, recipients, strategy, invalid = decode_action(
            action, len(episode.participants), self.max_participants, episode.valid_strategies, episode.everyone
        )
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
        self._last = (point, t, intervene, recipients, strategy, invalid, parts, reward)
        # A few flat scalars by default: a vector env merges every key of every sub-env's info at every step.
        if self._full_info:
            info = self._detailed_info(point, t, intervene, recipients, strategy, invalid, parts)
        else:
            info = {"decision": t, "row": point.row + 1, "n_invalid": len(invalid)}
        self._step = t + 1
        terminated = self._step >= len(episode.points)
        if terminated:
            info["episode"] = {
                "return": float(sum(self._rewards)),
                "discounted_return": discounted_return(self._rewards, self.reward_config.gamma),
                "length": len(self._rewards),
                # Returns are linear in the components, so every preset's follows from their sums.
                "returns_by_preset": {name: total(sums, config) for name, config in self._presets.items()},
            }
        if self.render_mode == "human":
            self.render()
        return reward, terminated, info

    def current_observation(self) -> dict[str, Any]:
        """The observation of ``observed_point()``, fresh arrays (what the last ``reset`` or ``step`` returned)."""
        return self._observation_at_end() if self._step >= len(self._episode.points) else self._observation()

    def observed_point(self) -> int:
        """The index of the decision point the current observation shows (after the last step: the last one)."""
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return min(self._step, len(self._episode.points) - 1)

    def _detailed_info(
        self,
        point: DecisionPoint,
        t: int,
        intervene: bool,
        recipients: frozenset[int],
        strategy: int,
        invalid: list[str],
        parts: dict[str, float | None],
    ) -> dict[str, Any]:
        """``info_level="full"``: what was scored, the gold, the choice and the annotated state."""
        episode = self._episode
        people = episode.participants
        return {
            "sample_id": episode.sample_id,
            "scenario": episode.scenario,
            "row": point.row + 1,
            "decision": t,
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
            "n_invalid": len(invalid),
        }

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
        point, t, intervene, recipients, strategy, invalid, parts, reward = self._last
        info = RescueEnv._detailed_info(self, point, t, intervene, recipients, strategy, invalid, parts)
        tail = "\n".join(point.context.splitlines()[-3:])
        shown = ", ".join(f"{k}={v:.2f}" for k, v in info["components"].items() if v is not None)
        return (
            f"--- {info['sample_id']} decision {info['decision'] + 1} after row {info['row']}\n{tail}\n"
            f"gold:   {_describe_gold(info['gold'])}\nchosen: {_describe_chosen(info['chosen'], info['gold'])}\n"
            f"reward {reward:.3f} ({shown})\n"
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
    intervene = action["intervene"]
    # The common types first (Python ints, numpy integer scalars as ``Dict.sample`` gives): this runs every step.
    if type(intervene) is not int:
        intervene = int(intervene) if isinstance(intervene, np.integer) else integer_value(intervene)
    if intervene != 0 and intervene != 1:  # None (not an integer) too
        raise ValueError(f"action intervene={action['intervene']!r} is outside Discrete(2): give 0 or 1")
    strategy = action["strategy"]
    if type(strategy) is not int:
        strategy = int(strategy) if isinstance(strategy, np.integer) else integer_value(strategy)
    if strategy is None or not 0 <= strategy < len(ALL_STRATEGY_KEYS):
        raise ValueError(
            f"action strategy={action['strategy']!r} is outside Discrete({len(ALL_STRATEGY_KEYS)}): give an integer "
            f"index of ALL_STRATEGY_KEYS"
        )
    bits = action["target"]
    bits = bits if type(bits) is np.ndarray else np.asarray(bits)
    flags = tuple(bits.tolist()) if bits.ndim == 1 and bits.size == slots + 1 and bits.dtype.kind in "iub" else None
    decoded = None if flags is None else _TARGETS.get((n, flags))
    if decoded is None:
        # A few Python comparisons: cheaper than numpy calls on seven bits; then memoised per bit pattern.
        if flags is None or not _BITS.issuperset(flags):
            raise ValueError(
                f"action target={action['target']!r} is outside MultiBinary({slots + 1}): give {slots + 1} bits of "
                "0 or 1"
            )
        recipients = frozenset(range(n)) if flags[slots] else frozenset(i for i in range(n) if flags[i])
        decoded = _TARGETS[(n, flags)] = (recipients, any(flags[n:slots]))
    recipients, absent = decoded
    invalid = ["target: absent participant slot"] if absent else []
    if strategy not in valid_strategies:
        invalid.append("strategy: outside the scenario's taxonomy")
        strategy = -1
    return intervene == 1, recipients, strategy, invalid


_BITS = frozenset((0, 1))
_TARGETS: dict[tuple[int, tuple[int, ...]], tuple[frozenset[int], bool]] = {}
"""Decoded target bits by (participants, bits): at most 2 ** (slots + 1) patterns per number of participants."""


def check_reset_options(options: Any) -> dict[str, Any]:
    """``reset``'s options: None or a dict whose keys are in ``RESET_OPTIONS`` (anything else is a one-line
    ``ValueError``: an ignored option would silently play another conversation than the one asked for)."""
    options = reset_options_dict(options)
    unknown = sorted(set(map(str, options)) - RESET_OPTIONS)
    if unknown:
        raise ValueError(f"unknown reset option(s) {', '.join(unknown)}; known: {', '.join(sorted(RESET_OPTIONS))}")
    return options


def _describe_gold(gold: dict[str, Any]) -> str:
    """What the real therapist did after this row, in words: the release may annotate no target or no strategy
    on a therapist row, which the render says rather than printing a bare ``?``."""
    if not gold["intervene"]:
        return "keep listening (the therapist did not speak next)"
    target, strategy = gold["target"], gold["strategy"]
    if not target and not strategy:
        return "intervene (the therapist spoke next; no target or strategy annotated)"
    shown = f"intervene -> {', '.join(target)}" if target else "intervene (no target annotated)"
    return shown + (f" with {strategy}" if strategy else ", no strategy annotated")


def _describe_chosen(choice: dict[str, Any], gold: dict[str, Any]) -> str:
    """The policy's action; where the gold has no strategy, the chosen one is a filler the action space forces
    (a strategy must be given) and is not scored, and the render says so, lest it read as a clinical choice."""
    if not choice["intervene"]:
        return "keep listening"
    target = ", ".join(choice["target"]) if choice["target"] else "nobody"
    text = f"intervene -> {target} with {choice['strategy'] or 'an invalid strategy'}"
    if gold["intervene"] and not gold["strategy"]:
        text += " (no strategy annotated for the therapist here: not scored)"
    return text


__all__ = [
    "CHARSET",
    "DecisionPoint",
    "Episode",
    "RescueEnv",
    "SlotMasks",
    "check_context_size",
    "check_reset_options",
    "check_slots",
    "decode_action",
    "integer_value",
    "normalise_text",
    "require_samples",
    "reset_options_dict",
    "support_action_space",
]
