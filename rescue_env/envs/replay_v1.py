r"""``Rescue-v1``: the replay of ``Rescue-v0`` whose group objective is the paper's Eq. 14 on the next state
predicted by an outcome model F (Eq. 12-13) fitted on the data. See ``RescueEnvV1`` for the specification."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rescue_env.data import Dataset, Sample
from rescue_env.dynamics.fitting import outcome_model_for
from rescue_env.dynamics.outcome import (
    DISTRESS_FEATURES,
    PAIR_FEATURES,
    STATE_NAMES,
    EpisodeStates,
    OutcomeModel,
    PointState,
    candidate_supports,
    episode_states,
    support_action,
)
from rescue_env.dynamics.state import objective, tension
from rescue_env.envs.replay import EPISODES, DecisionPoint, Episode, InfoLevel, RescueEnv, sample_digest
from rescue_env.rendering import Mode
from rescue_env.reward import Preset, RewardConfig, jaccard
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

OUTCOMES = ("sample", "mean")


@dataclass(frozen=True)
class _Point:
    """F at one decision point with the state folded in (F is linear): the state part of each participant's and
    of each annotated pair's prediction, and the aged distress that the ``recipient_x_d`` feature reads."""

    base_d: list[float]
    base_pairs: list[float]  # per pair of ``pairs``
    distress: list[float]
    pairs: list[int]  # flat indices i * n + j of the pairs with a viewpoint (the others stay 0)


@dataclass(frozen=True)
class _Dynamics:
    """What v1 precomputes per conversation beside v0's episode: F's input states, the observed elapsed rows
    and minutes, the ``info["state"]`` of each decision point and F's state part per point."""

    states: EpisodeStates
    elapsed: tuple[np.ndarray, ...]  # read-only, one per decision point
    info: tuple[dict[str, Any], ...]
    points: tuple[_Point, ...]


class _ActionTerms:
    """F's action part for one episode (n participants), per (recipients, strategy): what the support adds to
    each participant's prediction (``add + per_distress * d_i``) and to each pair's (row-major n x n)."""

    def __init__(self, model: OutcomeModel, n: int) -> None:
        c = dict(zip(DISTRESS_FEATURES, model.distress.coef))
        e = dict(zip(PAIR_FEATURES, model.viewpoint.coef))
        self.n, self.c, self.e = n, c, e
        self._cache: dict[tuple[frozenset[int], int], tuple[list[float], list[float], list[float]]] = {}

    def get(self, recipients: frozenset[int], strategy: int) -> tuple[list[float], list[float], list[float]]:
        key = (recipients, strategy)
        terms = self._cache.get(key)
        if terms is None:
            terms = self._cache[key] = self._terms(recipients, strategy)
        return terms

    def _terms(self, recipients: frozenset[int], strategy: int) -> tuple[list[float], list[float], list[float]]:
        # ``outcome.action_features`` for an intervention with recipients, as sums of coefficients.
        n, c, e = self.n, self.c, self.e
        size = len(recipients)
        kind = "group" if size >= n else "alone" if size == 1 else "pair" if size == 2 else "subgroup"
        key = ALL_STRATEGY_KEYS[strategy] if 0 <= strategy < len(ALL_STRATEGY_KEYS) else None
        own = c[f"recipient_{kind}"] + (c[f"strategy={key}"] if key else 0.0)
        supported = [i in recipients for i in range(n)]
        add = [c["therapist_speaks"] + (own if s else c["other_supported"]) for s in supported]
        per_distress = [c["recipient_x_d"] if s else 0.0 for s in supported]
        source = e[f"source_{kind}"] + (e[f"source_strategy={key}"] if key else 0.0)
        target = e[f"target_{kind}"]
        pair = [
            e["therapist_speaks"] + source * supported[i] + target * supported[j] for i in range(n) for j in range(n)
        ]
        return add, per_distress, pair


def _fold(model: OutcomeModel, states: tuple[PointState, ...]) -> tuple[_Point, ...]:
    """F's state part at each of an episode's ``states`` (its prediction under no intervention, unclipped), in a
    few numpy calls over the stacked points: the same products as one point at a time, to rounding (tested)."""
    if not states:
        return ()
    n = states[0].distress.size
    c_state = np.asarray(model.distress.coef[: len(STATE_NAMES)])
    base_d = (np.stack([s.person for s in states]) @ c_state + model.distress.intercept).tolist()  # (R, n)
    base_g = np.zeros((len(states), n * n))
    if states[0].pair_index:  # every point of an episode has the same ordered pairs
        width = states[0].pairs.shape[1]
        source, target = np.asarray(states[0].pair_index).T
        values = np.stack([s.pairs for s in states]) @ np.asarray(model.viewpoint.coef[:width])
        base_g[:, source * n + target] = values + model.viewpoint.intercept
    annotated = np.stack([s.annotated_pairs.ravel() for s in states])
    points = []
    for k, state in enumerate(states):
        pairs = np.flatnonzero(annotated[k])
        points.append(_Point(base_d[k], base_g[k, pairs].tolist(), state.distress.tolist(), pairs.tolist()))
    return tuple(points)


def _state_info(d: np.ndarray, g: np.ndarray, people) -> dict[str, Any]:
    return {"distress": dict(zip(people, np.round(d, 6).tolist())), "tension": round(tension(g), 6)}


class RescueEnvV1(RescueEnv):
    r"""
    ## Description

    The replay of ``Rescue-v0`` (paper App. B): a recorded couple or family therapy conversation, row by row; after
    every row not spoken by the therapist the agent decides to intervene or keep listening, whom to support and
    with which strategy, and the conversation continues as recorded. What changes is the group objective: it is
    the paper's Eq. 14 evaluated on the state that an **outcome model F** (Eq. 12-13, ``rescue_env.dynamics``)
    predicts after the chosen action, so that whom and how one supports has consequences.

    ## Action Space

    As ``Rescue-v0``: ``Dict`` of ``intervene`` ``Discrete(2)``, ``target`` ``MultiBinary(max_participants + 1)``
    (the last bit = everyone), ``strategy`` ``Discrete(11)`` over ``ALL_STRATEGY_KEYS``; masked choices are ignored
    and counted in ``info["invalid"]``.

    ## Observation Space

    As ``Rescue-v0`` but ``position`` (row / total rows, decision / total decisions, which told an agent how much
    of the conversation was left) is replaced by ``elapsed`` ``Box(0, inf, (2,))``: rows seen so far and minutes
    elapsed (the current row's end time). Nothing in the observation depends on the rows still to come
    (tested: the observations of a conversation and of its truncation agree). No annotation, nothing gold.

    ## Rewards

    Step reward :math:`w_z r_z + w_A r_A + w_a r_a + w_g r_g`. The imitation components are those of
    ``Rescue-v0`` (timing :math:`1[z = z^*]`; target Jaccard and strategy accuracy when z = z* = 1). The group
    component (ours: the paper only sketches it) is

    .. math:: r_g = U(\hat s, \hat G) - \lambda \max_i \hat d_i - \kappa z,
              \quad (\hat s, \hat G) = F(x^t, A, a)

    with d_i = negativity(emotion) x intensity / 10, aged toward 0 after 8 rows (half-life 8 rows);
    :math:`U = \text{mean}(1 - d_i) - 0.5\, T(G)`, T = the share of ordered pairs whose latest viewpoint is negative
    (``rescue_env.dynamics.state``); F predicts each participant's next annotated distress and each viewpoint's next
    negativity from the current state and the action (``rescue_env.dynamics.outcome``). ``outcome="sample"``
    (default) draws the next state from F's predictive distribution with ``np_random``; ``"mean"`` uses its mean.
    ``effect_scale`` scales what the action changes (0: actions change nothing).

    Presets (``RewardConfig.preset(name, version=1)``): ``combined`` (default) = timing + group, when to speak
    learned from the therapist, whom and how from the outcome model; ``imitation`` = timing + target + strategy;
    ``group`` = r_g alone. Defaults :math:`\lambda = 1`, :math:`\kappa = 0` (no intervention cost: v0's 0.65 was
    chosen on the whole release; a cost must be chosen on a training split), :math:`\gamma = 0.99`.

    Which parts are the paper's: the decision (z, A, a), the imitation targets, the form of Eq. 12-14. Ours: the
    valence of distress, the ageing, U's tension term and weight, F's features and fit, kappa = 0.

    ## Starting State, Episode End

    As ``Rescue-v0``: ``reset(options={"sample_id": ...})`` or a draw with ``np_random``; terminated after the last
    decision point, with ``info["episode"]``.

    ## Arguments

    ``data``, ``reward``, ``mode``, ``context_size``, ``max_chars``, ``max_participants``, ``sample_order``,
    ``render_mode``, ``split``, ``split_seed``, ``test_fraction`` as ``Rescue-v0`` (``split="test"`` plays the
    held-out side); ``dynamics``: ``"train"`` (default: F fitted on the train side of the project's grouped split
    of the whole ``data``, ``split_seed`` and ``test_fraction``, so that evaluating on the test side is honest;
    cached by data hash), ``"all"``, a path to a ``rescue-bench dynamics fit`` file, or an ``OutcomeModel``;
    ``outcome``; ``effect_scale``.

    >>> import gymnasium as gym, rescue_env
    >>> env = gym.make("Rescue-v1")                      # the demo data; F fitted on its train side
    >>> observation, info = env.reset(seed=0)
    >>> sorted(observation)[:3]
    ['context', 'elapsed', 'last_speaker']

    ## Version History

    * v1, ``split``, ``split_seed``, ``test_fraction`` and ``data`` as a list of ``Sample`` (issue 24), as in
      ``Rescue-v0``; F (``dynamics="train"``) is fitted on the train side of that same split. The defaults
      (``"all"``, seed 0, 0.2) play and fit exactly as before, so the version stays v1.
    * v1, ``reset`` info change (issue 23): at the default ``info_level`` the reset info no longer carries
      ``decision_points`` (the episode's length; still there with ``info_level="full"``): a harness that shows
      ``info`` to an LLM agent would tell it the horizon, which v1's observation was made not to reveal.
      Observations, rewards and episode ends are unchanged, so the version stays v1 (``RescueFlat-v1`` likewise).
    * v1, ``info`` change (issue 14): a step's ``info`` is small and flat by default (``decision``, ``row``,
      ``n_invalid``); the previous details (with ``predicted``) are asked for with ``info_level="full"``.
      Observations, rewards and episode ends are unchanged (F's draws are the
      same numbers of ``np_random``, drawn per episode), so learning results do not change and the version stays
      v1 (Gymnasium's convention).
    * v1: group objective on F's predicted next state (valence-aware distress, ageing, relational U, no kappa);
      ``elapsed`` replaces ``position``, which leaked the conversation's length; ``combined`` = timing + group.
    * v0: initial version (kept unchanged for reproducibility).
    """

    version = 1

    def __init__(
        self,
        data: str | Dataset = "demo",
        reward: Preset | RewardConfig = "combined",
        mode: Mode = "dialogue",
        context_size: int = 8,
        max_chars: int = 4096,
        max_participants: int = 6,
        sample_order: str = "random",
        dynamics: str | Path | OutcomeModel = "train",
        outcome: str = "sample",
        effect_scale: float = 1.0,
        render_mode: str | None = None,
        info_level: InfoLevel = "basic",
        split: str = "all",
        split_seed: int = 0,
        test_fraction: float = 0.2,
    ) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        if not np.isfinite(effect_scale):
            raise ValueError(f"effect_scale must be a finite number, got {effect_scale!r}")
        super().__init__(
            data, reward, mode, context_size, max_chars, max_participants, sample_order, False, render_mode, info_level,
            split=split, split_seed=split_seed, test_fraction=test_fraction,
        )  # fmt: skip
        if isinstance(dynamics, OutcomeModel):
            self.dynamics = dynamics
        elif str(dynamics) in ("train", "all"):
            self.dynamics = outcome_model_for(self.dataset, str(dynamics), seed=split_seed, test_fraction=test_fraction)
        else:
            self.dynamics = OutcomeModel.load(dynamics)
        self.outcome, self.effect_scale = outcome, float(effect_scale)
        spaces_ = dict(self.observation_space.spaces)
        del spaces_["position"]
        spaces_["elapsed"] = spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(spaces_)
        self._states: dict[str, _Dynamics] = {}
        self._terms: dict[int, _ActionTerms] = {}  # by number of participants
        self._predicted: tuple[np.ndarray, np.ndarray] | None = None
        self._model_digest = self.dynamics.digest()
        # F's noise, drawn for the rest of the episode at once: the same numbers, in the same order, as one draw
        # of n then n x n standard normals per step (``_sync_noise`` puts the generator back where per-step
        # draws would have left it when the episode is left early or ``np_random`` is read mid-episode).
        self._noise: list[float] = []
        self._noise_used = 0
        self._noise_state: dict[str, Any] | None = None

    # ----- episodes -----------------------------------------------------------------------------------------

    def episode(self, sample: Sample) -> Episode:
        episode = super().episode(sample)
        if sample.sample_id not in self._states:
            key = (sample_digest(sample), self._episode_key(), RescueEnvV1.episode, self._model_digest)
            dynamics = EPISODES.get(key)
            if dynamics is None:
                dynamics = EPISODES.put(key, self._compute_dynamics(sample, episode))
            self._states[sample.sample_id] = dynamics
            n = len(episode.participants)
            if n not in self._terms:
                self._terms[n] = _ActionTerms(self.dynamics, n)
        return episode

    def _compute_dynamics(self, sample: Sample, episode: Episode) -> _Dynamics:
        rows = [p.row for p in episode.points]
        states = episode_states(sample, self.dynamics.state, episode.participants, rows)
        elapsed = np.array([[row + 1, sample.rows[row].end_time / 60.0] for row in rows], dtype=np.float32)
        elapsed = np.maximum(elapsed, 0.0)
        elapsed.flags.writeable = False  # shared by the cache and by every observation of the point
        info = tuple(
            {**_state_info(s.distress, s.g, episode.participants), "pattern": p.pattern}
            for s, p in zip(states.states, episode.points)
        )
        points = _fold(self.dynamics, states.states)
        return _Dynamics(states, tuple(elapsed), info, points)

    time_key = "elapsed"

    def _time_value(self, point: DecisionPoint) -> np.ndarray:
        # v0's observation with ``elapsed`` (rows, minutes) in place of ``position``.
        return self._states[self._episode.sample_id].elapsed[self._step].copy()

    def _point_state(self):
        return self._states[self._episode.sample_id].states.states[self._step]

    # ----- reward -------------------------------------------------------------------------------------------

    def _parts(
        self, point: DecisionPoint, intervene: bool, recipients: frozenset[int], strategy: int, expected: bool
    ) -> dict[str, float | None]:
        # ``reward.components`` without v0's group objective, which v1 replaces (computing it would be wasted).
        both = intervene and point.gold_intervene
        gold_recipients, gold_strategy = point.gold_recipients, point.gold_strategy
        return {
            "timing": float(intervene == point.gold_intervene),
            "target": jaccard(recipients, gold_recipients) if both and gold_recipients is not None else None,
            "strategy": float(strategy == gold_strategy) if both and gold_strategy is not None else None,
            "group": self._group_component(point, intervene, recipients, strategy, 0.0, expected),
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
        if expected:
            return self.expected_group(intervene, recipients, strategy)
        return self._drawn_group(intervene, recipients, strategy)

    def _drawn_group(self, intervene: bool, recipients: frozenset[int], strategy: int) -> float:
        """The group component of a step: U - lambda max d - kappa z on F's next state (a draw, or F's mean with
        ``outcome="mean"``). F is linear, so its prediction is the point's state part plus the action's terms
        (``_Point``, ``_ActionTerms``); with a few participants, plain floats beat numpy calls on tiny arrays.
        Equal to ``OutcomeModel.sample`` / ``mean`` on ``_point_state()`` to rounding (tested)."""
        point = self._states[self._episode.sample_id].points[self._step]
        n, pairs = len(point.base_d), point.pairs
        d, g = point.base_d, point.base_pairs
        if intervene and recipients:
            add, per_distress, pair = self._terms[n].get(recipients, strategy)
            scale = self.effect_scale
            d = [b + scale * (a + p * x) for b, a, p, x in zip(d, add, per_distress, point.distress)]
            g = [b + scale * pair[k] for b, k in zip(g, pairs)]
        if self.outcome == "sample":
            noise = self._draw_noise(n)
            sd, sg = self.dynamics.distress.sigma, self.dynamics.viewpoint.sigma
            d = [x + sd * z for x, z in zip(d, noise)]  # the first n normals; then G's n x n, row-major
            g = [x + sg * noise[n + k] for x, k in zip(g, pairs)]
        d = [0.0 if x < 0.0 else 1.0 if x > 1.0 else x for x in d]
        g = [0.0 if x < 0.0 else 1.0 if x > 1.0 else x for x in g]
        if self._full_info:
            matrix = np.zeros(n * n)
            matrix[pairs] = g
            self._predicted = (np.array(d), matrix.reshape(n, n))
        c = self.reward_config
        wellbeing = sum([1.0 - x for x in d]) / n if n else 1.0
        tension_ = sum(g) / (n * (n - 1)) if n >= 2 else 0.0
        top = max(d) if n else 0.0
        return wellbeing - self.dynamics.state.tension_weight * tension_ - c.lam * top - c.kappa * float(intervene)

    def _draw_noise(self, n: int) -> list[float]:
        """The next step's n + n x n standard normals of ``np_random`` (see ``__init__``)."""
        width = n + n * n
        used = self._noise_used
        if used + width > len(self._noise):
            self._sync_noise()
            remaining = len(self._episode.points) - self._step
            generator = self.np_random
            self._noise_state = generator.bit_generator.state
            self._noise = generator.standard_normal(remaining * width).tolist()
            used = 0
        self._noise_used = used + width
        return self._noise[used : used + width]

    def _sync_noise(self) -> None:
        """Leave ``np_random`` where one draw per step would have: rewind to before the block and draw again only
        what the steps so far used (nothing to do when the block was used up, as at an episode's end)."""
        if self._noise_state is not None and self._noise_used < len(self._noise):
            generator = self._np_random
            generator.bit_generator.state = self._noise_state
            generator.standard_normal(self._noise_used)
        self._noise, self._noise_used, self._noise_state = [], 0, None

    @property
    def np_random(self) -> np.random.Generator:
        """Gymnasium's ``np_random``, in the state that per-step draws of F's noise would leave it."""
        self._sync_noise()
        return super().np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._noise, self._noise_used, self._noise_state = [], 0, None
        RescueEnv.np_random.fset(self, value)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._sync_noise()
        self._predicted = None
        return super().reset(seed=seed, options=options)

    def expected_group(self, intervene: bool, recipients: frozenset[int], strategy: int) -> float:
        """The group component's expectation under F's mean for an action at the current step (privileged:
        reference policies and analysis only)."""
        self._point()
        return self._group_value(*self._next_state(intervene, recipients, strategy, draw=False), intervene)

    def _next_state(
        self, intervene: bool, recipients: frozenset[int], strategy: int, draw: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """F's next (d, G) at the current step under the action: a draw with ``np_random``, or F's mean."""
        state, action = self._point_state(), support_action(intervene, recipients, strategy)
        if draw:
            return self.dynamics.sample(state, action, self.np_random, self.effect_scale)
        return self.dynamics.mean(state, action, self.effect_scale)

    def _group_value(self, d: np.ndarray, g: np.ndarray, intervene: bool) -> float:
        """U(d, G) - lambda max d - kappa z."""
        c = self.reward_config
        return objective(d, g, self.dynamics.state.tension_weight, c.lam) - c.kappa * float(intervene)

    def best_group_action(self) -> tuple[bool, frozenset[int], int]:
        """The action maximising ``expected_group`` over keep-listening and every single participant, pair and
        everyone, with every valid strategy (privileged; ``group-greedy`` on v1)."""
        episode = self._episode
        self._point()
        candidates = candidate_supports(len(episode.participants), episode.valid_strategies)
        values = [self.expected_group(*candidate) for candidate in candidates]
        return candidates[int(np.argmax(values))]

    # ----- info and privileged state ------------------------------------------------------------------------

    def step(self, action: dict[str, Any]):
        if not self._full_info:
            return super().step(action)
        self._point()
        current = self._states[self._episode.sample_id].info[self._step]
        observation, reward, terminated, truncated, info = super().step(action)
        info["state"] = current
        info["predicted"] = _state_info(*self._predicted, self._episode.participants)
        return observation, reward, terminated, truncated, info

    def state(self) -> dict[str, Any]:
        """The state at the current decision point as v1 reads it: valence-aware aged distress per slot, the
        directed negativity matrix G, the latest relation pattern."""
        point, state = self._point(), self._point_state()
        return {"distress": state.distress.copy(), "g": state.g.copy(), "pattern": point.pattern}
