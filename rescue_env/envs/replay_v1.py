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
    EpisodeStates,
    OutcomeModel,
    candidate_supports,
    episode_states,
    support_action,
)
from rescue_env.dynamics.state import objective, tension
from rescue_env.envs.replay import DecisionPoint, Episode, RescueEnv
from rescue_env.rendering import Mode
from rescue_env.reward import Preset, RewardConfig

OUTCOMES = ("sample", "mean")


@dataclass(frozen=True)
class _Dynamics:
    """What v1 precomputes per conversation beside v0's episode: F's input states, the observed elapsed rows
    and minutes, and the ``info["state"]`` of each decision point."""

    states: EpisodeStates
    elapsed: np.ndarray
    info: tuple[dict[str, Any], ...]


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
    ``render_mode`` as ``Rescue-v0``; ``dynamics``: ``"train"`` (default: F fitted on the train side of the
    project's grouped split of ``data``, seed 0, so that evaluating on the test side is honest; cached by data
    hash), ``"all"``, a path to a ``rescue-bench dynamics fit`` file, or an ``OutcomeModel``; ``outcome``;
    ``effect_scale``.

    >>> import gymnasium as gym, rescue_env
    >>> env = gym.make("Rescue-v1")                      # the demo data; F fitted on its train side
    >>> observation, info = env.reset(seed=0)
    >>> sorted(observation)[:3]
    ['context', 'elapsed', 'last_speaker']

    ## Version History

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
    ) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        if not np.isfinite(effect_scale):
            raise ValueError(f"effect_scale must be a finite number, got {effect_scale!r}")
        super().__init__(
            data, reward, mode, context_size, max_chars, max_participants, sample_order, False, render_mode
        )
        if isinstance(dynamics, OutcomeModel):
            self.dynamics = dynamics
        elif str(dynamics) in ("train", "all"):
            self.dynamics = outcome_model_for(self.dataset, str(dynamics))
        else:
            self.dynamics = OutcomeModel.load(dynamics)
        self.outcome, self.effect_scale = outcome, float(effect_scale)
        spaces_ = dict(self.observation_space.spaces)
        del spaces_["position"]
        spaces_["elapsed"] = spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(spaces_)
        self._states: dict[str, _Dynamics] = {}
        self._predicted: tuple[np.ndarray, np.ndarray] | None = None

    # ----- episodes -----------------------------------------------------------------------------------------

    def episode(self, sample: Sample) -> Episode:
        episode = super().episode(sample)
        if sample.sample_id not in self._states:
            rows = [p.row for p in episode.points]
            states = episode_states(sample, self.dynamics.state, episode.participants, rows)
            elapsed = np.array([[row + 1, sample.rows[row].end_time / 60.0] for row in rows], dtype=np.float32)
            info = tuple(
                {**_state_info(s.distress, s.g, episode.participants), "pattern": p.pattern}
                for s, p in zip(states.states, episode.points)
            )
            self._states[sample.sample_id] = _Dynamics(states, np.maximum(elapsed, 0.0), info)
        return episode

    def _observation(self) -> dict[str, Any]:
        observation = super()._observation()
        del observation["position"]
        observation["elapsed"] = self._states[self._episode.sample_id].elapsed[self._step].copy()
        return observation

    def _point_state(self):
        return self._states[self._episode.sample_id].states.states[self._step]

    # ----- reward -------------------------------------------------------------------------------------------

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
        d, g = self._next_state(intervene, recipients, strategy, draw=self.outcome == "sample")
        self._predicted = (d, g)
        return self._group_value(d, g, intervene)

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
