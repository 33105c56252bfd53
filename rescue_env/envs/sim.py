r"""``RescueSim-v0``: a closed-loop session, started from a real conversation, whose state moves with the support
chosen (the outcome model F of ``Rescue-v1``). See ``RescueSimEnv`` for the specification."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.data import Dataset, Sample
from rescue_env.data.domain import decision_rows, latest_relation_pattern, participants, scenario_of
from rescue_env.data.schema import SCENARIOS, Scenario
from rescue_env.data.splits import SPLITS, SplitConfig, split_samples
from rescue_env.dynamics.fitting import outcome_model_for
from rescue_env.dynamics.outcome import OutcomeModel, SupportAction, candidate_supports, recorded_action, support_action
from rescue_env.dynamics.simulation import (
    EpisodeDynamics,
    LiveState,
    SessionRates,
    SimState,
    advance_live,
    describe_levels,
    episode_dynamics,
    fit_session_rates,
    perceive_lists,
    start_state,
)
from rescue_env.dynamics.state import objective, objective_of_lists, snapshots, tension
from rescue_env.envs.replay import (
    EPISODES,
    InfoLevel,
    InfoLevelSetting,
    SlotMasks,
    check_reset_options,
    check_slots,
    decode_action,
    require_samples,
    sample_digest,
    shared_dataset,
    support_action_space,
)
from rescue_env.envs.replay_v1 import OUTCOMES
from rescue_env.rendering import MODES, Mode, render_header, render_rows
from rescue_env.reward import discounted_return
from rescue_env.taxonomy import ALL_STRATEGY_KEYS
from rescue_env.text import CHARSET, normalise_text


@dataclass(frozen=True)
class SimEpisode:
    """What an episode keeps from its source conversation (precomputed at the first reset on it)."""

    sample_id: str
    scenario: Scenario
    participants: tuple[str, ...]
    context: str
    start: SimState
    rows: tuple[int, ...]
    """The source's decision rows from the end of the opening on: one step each."""
    recorded: tuple[SupportAction, ...]
    """What the real therapist did after each of those rows (privileged: ``recorded_action()``)."""
    target_mask: np.ndarray
    strategy_mask: np.ndarray
    present: np.ndarray
    valid_strategies: frozenset[int]
    everyone: frozenset[int]
    dynamics: EpisodeDynamics
    """F specialised to the episode and its refresh probabilities (``simulation.episode_dynamics``)."""
    names: tuple[str, ...]
    """The participants' names normalised to the observation's charset, for the ``text`` observation."""
    scenario_index: int
    """``SCENARIOS.index(scenario)``: the ``scenario`` observation."""


class RescueSimEnv(InfoLevelSetting, gym.Env):
    r"""
    ## Description

    A closed loop (paper App. B): an episode starts from a real couple or family therapy conversation -- its
    participants, its scenario, its first rows as the opening, and each participant's annotated state at the end
    of the opening -- and then the session goes on **as the agent's support makes it go**. At every step the
    agent, as the therapist, keeps listening or intervenes (whom, with which strategy); the state moves by the
    outcome model F fitted on the data (``rescue_env.dynamics.simulation``: F's draw with ``np_random``; keeping
    listening is F's "no intervention" transition, the clients' own exchange); the next client speaker is drawn;
    the reward is Eq. 14 on the new state. Nothing recorded after the opening is shown or used, except the
    number of steps.

    ## Action Space

    As ``Rescue-v1``: ``Dict`` of ``intervene`` ``Discrete(2)``, ``target`` ``MultiBinary(max_participants + 1)``
    (the last bit = everyone), ``strategy`` ``Discrete(11)`` over ``ALL_STRATEGY_KEYS``. Masked choices (absent
    slots, strategies outside the scenario's taxonomy) are ignored and counted in ``info["n_invalid"]``; an
    intervention without recipients supports no one (F reads it as keeping listening), but the therapist's turn
    still takes a row.

    ## Observation Space

    ``Dict``: ``context`` ``Text`` (the opening, rendered as in ``Rescue-v1``: a header naming the participant
    slots, then the opening's rows with the evidence of ``mode``; the oldest text is cut beyond ``max_chars``);
    ``text`` ``Text`` (the perceived state in words: "Alan seems very upset (about 7/10) and sees Evelyn
    negatively."); ``distress`` ``Box(0, 1, (max_participants,))`` and ``stance`` ``Box(0, 1, (max_participants,
    max_participants))`` (what a therapist perceives of d_i and of g_ij, the negativity of i's view of j: each
    true value plus Gaussian noise of sd ``perception_noise``, clipped, rounded to tenths; absent slots 0);
    ``elapsed`` ``Box(0, inf, (2,))`` (steps so far, therapist turns so far); ``scenario`` ``Discrete(2)``;
    ``participants`` ``MultiBinary(max_participants)``; ``last_speaker`` ``Discrete(max_participants + 3)`` (the
    slot of the last client speaker; slots as ``Rescue-v0``); ``target_mask``; ``strategy_mask``. The perceived
    state is the simulator's state (at step 0, the opening's annotated state, read with noise): it is what a
    therapist in the room is assumed to see. The real therapist's actions are never observed.

    ## Rewards

    .. math:: r_t = U(s_{t+1}, G_{t+1}) - \lambda \max_i d_i(s_{t+1}) - \kappa z_t

    with d, G, U as in ``Rescue-v1`` (``rescue_env.dynamics.state``; tension weight 0.5) but on the latest values,
    not aged (``SimState.values``: in a closed loop silence is not calm), :math:`\lambda` = ``lam``
    = 1, :math:`\kappa` = ``kappa`` = 0 (no cost of speaking); the objective of a policy is the return discounted
    by :math:`\gamma` = ``gamma`` = 0.99 (``info["episode"]["discounted_return"]``). When the episode ends calm
    (below), the step's reward also carries the calm state's reward for each remaining step, discounted
    (``info["calm_bonus"]``), so that calming a session early is never worth less than keeping it calm.

    ## Starting State

    ``reset(options={"sample_id": ...})`` starts from that conversation, else one is drawn with ``np_random``
    from the ``starts`` side of the project's grouped split (``split_seed``, ``test_fraction``: the split F is
    fitted on). The opening is rows 0 .. r_0, r_0 the first decision point (a client row followed by another row)
    at or after row ``opening - 1``. Conversations with no decision point after the opening are not played.

    ## Episode End

    Truncated after as many steps as the source conversation had decision points from the opening on (or
    ``max_steps``, when smaller). Terminated early when every participant's distress is below
    ``calm_threshold`` = 0.2 (all at most mildly distressed: "2/10"). The final ``info["episode"]`` carries the
    return, the discounted return, the length, the final max distress and the share of steps intervened.

    ## Arguments

    ``data`` (path, ``"demo"``, a ``Dataset`` or a list of ``Sample``), ``starts`` (``"train"`` default, ``"test"``,
    ``"all"``; ``split`` is the same argument under the name every env id takes),
    ``split_seed`` = 0, ``test_fraction`` = 0.2, ``dynamics`` (``"train"``: F fitted on the train side of that
    split, cached; ``"all"``; a ``rescue-bench dynamics fit`` file; an ``OutcomeModel``), ``rates`` (the
    ``SessionRates``; default: fitted on the side F is fitted on, the train side for a given model),
    ``effect_scale`` = 1, ``perception_noise`` = 0.1 (about one point on the 0-10 reading), ``opening`` = 8 rows,
    ``max_steps`` = None, ``lam``, ``kappa``, ``gamma``, ``calm_threshold``, ``mode``, ``max_chars`` = 4096,
    ``max_participants`` = 6, ``render_mode`` (``"ansi"``, ``"human"``), ``info_level`` (``"basic"``, ``"full"``).

    ## Info

    ``info_level="basic"`` (default): ``step`` (index) and ``n_invalid`` (masked choices ignored) per step, plus
    ``calm_bonus`` when the episode ends calm and the final ``episode`` summary. ``"full"`` adds ``sample_id``,
    ``scenario``, ``speaker`` (the client who speaks next), ``chosen``, ``state`` (the true distress per
    participant and the tension) and ``invalid`` (what was ignored, in words). ``reset``'s info is ``sample_id``,
    ``scenario`` and ``participants``; ``"full"`` adds ``steps`` (the truncation horizon, which the default leaves
    out so that an info shown to an agent does not tell it how many steps are left; ``limit`` is the privileged
    accessor). The attribute ``info_level`` can be set on a built env.

    >>> import gymnasium as gym, rescue_env
    >>> env = gym.make("RescueSim-v0")                   # the demo data; F fitted on its train side
    >>> observation, info = env.reset(seed=0)
    >>> sorted(observation)[:4]
    ['context', 'distress', 'elapsed', 'last_speaker']

    ## Version History

    * v0, ``split`` (issue 24): the side played under the name every env id takes, the same as ``starts``
      (which stays); ``last_speaker_slot()`` for ``DiscreteSupportAction``. Nothing else changes.
    * v0, ``reset`` info change (issue 23): at the default ``info_level`` the reset info no longer carries
      ``steps`` (the truncation horizon; still there with ``info_level="full"``), because a harness that shows
      ``info`` to an LLM agent would tell it how many steps are left. Observations, rewards, dynamics and episode
      ends are unchanged, so the version stays v0 (``RescueSimFlat-v0`` likewise).
    * v0, ``info`` change (issue 14): a step's ``info`` is small and flat by default (``step``, ``n_invalid``); the
      previous details are asked for with ``info_level="full"``. Observations, rewards, dynamics and episode ends
      are unchanged (the same given the seed), so learning results do not change and the version stays v0
      (Gymnasium's convention).
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}
    version = 0

    def __init__(
        self,
        data: str | Dataset = "demo",
        starts: str | None = None,
        split_seed: int = 0,
        test_fraction: float = 0.2,
        dynamics: str | Path | OutcomeModel = "train",
        rates: SessionRates | None = None,
        effect_scale: float = 1.0,
        outcome: str = "sample",
        perception_noise: float = 0.1,
        opening: int = 8,
        max_steps: int | None = None,
        lam: float = 1.0,
        kappa: float = 0.0,
        gamma: float = 0.99,
        calm_threshold: float = 0.2,
        mode: Mode = "dialogue",
        max_chars: int = 4096,
        max_participants: int = 6,
        render_mode: str | None = None,
        info_level: InfoLevel = "basic",
        split: str | None = None,
    ) -> None:
        # ``split`` is the name every env id takes for the side played (the replays, the task envs); ``starts`` the
        # sim's own, kept. Default: the train side.
        if split is not None and starts is not None and split != starts:
            raise ValueError(f"split={split!r} and starts={starts!r} disagree: give one of them")
        starts = split or starts or "train"
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        if starts not in SPLITS:
            raise ValueError(f"starts must be one of {', '.join(SPLITS)}, got {starts!r}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        for name, value, low, high in (
            ("effect_scale", effect_scale, -np.inf, np.inf),
            ("perception_noise", perception_noise, 0.0, np.inf),
            ("lam", lam, 0.0, np.inf),
            ("kappa", kappa, -np.inf, np.inf),
            ("gamma", gamma, 0.0, 1.0),
            ("calm_threshold", calm_threshold, 0.0, 1.0),
        ):
            if isinstance(value, bool) or not (isinstance(value, Real) and np.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} must be a finite number in [{low}, {high}], got {value!r}")
        if opening < 1 or (max_steps is not None and max_steps < 1) or max_participants < 1:
            raise ValueError("opening, max_steps and max_participants must be >= 1")
        self.dataset = require_samples(data if isinstance(data, Dataset) else shared_dataset(data))
        self.starts, self.split_seed, self.test_fraction = starts, split_seed, test_fraction
        fit_side = "all" if str(dynamics) == "all" else "train"
        if isinstance(dynamics, OutcomeModel):
            self.dynamics = dynamics
        elif str(dynamics) in ("train", "all"):
            self.dynamics = outcome_model_for(self.dataset, fit_side, seed=split_seed, test_fraction=test_fraction)
        else:
            self.dynamics = OutcomeModel.load(dynamics)
        if rates is None:
            fitted = split_samples(
                self.dataset.samples, SplitConfig(split=fit_side, seed=split_seed, test_fraction=test_fraction)
            )
            rates = fit_session_rates(fitted)
        self.rates = rates
        self.effect_scale, self.perception_noise = float(effect_scale), float(perception_noise)
        self.outcome = outcome
        self.opening, self.max_steps = opening, max_steps
        self.lam, self.kappa, self.gamma, self.calm_threshold = float(lam), float(kappa), float(gamma), calm_threshold
        self.mode, self.max_chars, self.max_participants = mode, max_chars, max_participants
        self.render_mode = render_mode
        self.info_level = info_level

        side = split_samples(
            self.dataset.samples, SplitConfig(split=starts, seed=split_seed, test_fraction=test_fraction)
        )
        self.samples = [s for s in side if self._opening_end(s) is not None]
        if not self.samples:
            raise ValueError(
                f"{self.dataset.source}: no conversation on the {starts} side has a decision point after an "
                f"opening of {opening} rows"
            )
        self._playable = {s.sample_id for s in self.samples}
        check_slots(self.samples, max_participants)

        slots, n_strategies = max_participants, len(ALL_STRATEGY_KEYS)
        charset = "".join(sorted(CHARSET))
        self.action_space = support_action_space(slots)
        self.observation_space = spaces.Dict(
            {
                "context": spaces.Text(max_length=max_chars, min_length=0, charset=charset),
                "text": spaces.Text(max_length=TEXT_CHARS, min_length=0, charset=charset),
                "distress": spaces.Box(0.0, 1.0, shape=(slots,), dtype=np.float32),
                "stance": spaces.Box(0.0, 1.0, shape=(slots, slots), dtype=np.float32),
                "elapsed": spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32),
                "scenario": spaces.Discrete(len(SCENARIOS)),
                "participants": spaces.MultiBinary(slots),
                "last_speaker": spaces.Discrete(slots + 3),
                "target_mask": spaces.MultiBinary(slots + 1),
                "strategy_mask": spaces.MultiBinary(n_strategies),
            }
        )
        self._episodes: dict[str, SimEpisode] = {}
        self._settings_key: tuple | None = None
        self._episode: SimEpisode | None = None
        # The state as lists, moved in place by a step (``advance_live``); ``_state`` builds the SimState.
        self._live: LiveState | None = None
        self._sim_state: SimState | None = None
        self._supports: dict[tuple[bool, frozenset[int], int], SupportAction] = {}
        self._step = 0
        self._interventions = 0
        self._done = False
        self._rewards: list[float] = []
        self._last_text = ""

    # ----- episodes ---------------------------------------------------------------------------------------

    def _opening_end(self, sample: Sample) -> int | None:
        rows = [r for r in decision_rows(sample) if r >= self.opening - 1]
        return rows[0] if rows else None

    def episode(self, sample: Sample) -> SimEpisode:
        """The precomputed start of ``sample`` (cached per process, keyed by the sample's content, the settings, F
        and the rates: the sub-envs of a vector env precompute each start once between them)."""
        cached = self._episodes.get(sample.sample_id)
        if cached is not None:
            return cached
        if self._settings_key is None:
            settings = (self.opening, self.mode, self.max_chars, self.max_participants)
            self._settings_key = (RescueSimEnv.episode, settings, self.dynamics.digest(), self.rates.model_dump_json())
        key = (sample_digest(sample), self._settings_key)
        episode = EPISODES.get(key)
        if episode is None:
            episode = EPISODES.put(key, self._compute_episode(sample))
        self._episodes[sample.sample_id] = episode
        return episode

    def _compute_episode(self, sample: Sample) -> SimEpisode:
        scenario = scenario_of(sample)
        people = tuple(participants(sample))
        first = self._opening_end(sample)
        if first is None:
            raise ValueError(f"sample {sample.sample_id!r} has no decision point after the opening")
        rows = tuple(r for r in decision_rows(sample) if r >= first)
        header = normalise_text(render_header(scenario, people, self.max_participants))
        body = normalise_text(render_rows(sample, range(0, first + 1), self.mode))
        budget = max(0, self.max_chars - len(header))
        context = header + body[-budget:] if budget else header[: self.max_chars]
        # The state at the end of the opening depends on the opening's rows only: score just those.
        opening = sample.model_copy(update={"rows": sample.rows[: first + 1]})
        snapshot = snapshots(opening, people, self.dynamics.state)[first]
        speaker = sample.rows[first].primary_speaker.strip()
        start = start_state(
            sample,
            people,
            snapshot,
            first,
            people.index(speaker) if speaker in people else None,
            scenario == "family",
            latest_relation_pattern(sample, first),
        )
        masks = SlotMasks.of(len(people), scenario, self.max_participants)
        episode = SimEpisode(
            sample_id=sample.sample_id,
            scenario=scenario,
            participants=people,
            context=context,
            start=start,
            rows=rows,
            recorded=tuple(recorded_action(sample, r + 1, people) for r in rows),
            target_mask=masks.target_mask,
            strategy_mask=masks.strategy_mask,
            present=masks.present,
            valid_strategies=masks.valid_strategies,
            everyone=frozenset(range(len(people))),
            dynamics=episode_dynamics(self.dynamics, self.rates, start),
            names=tuple(normalise_text(name) for name in people),
            scenario_index=SCENARIOS.index(scenario),
        )
        for array in (start.distress_raw, start.emotion_row, start.g_raw, start.viewpoint_row, start.weights):
            array.flags.writeable = False  # shared between envs: a step builds new arrays, never writes these
        return episode

    @property
    def limit(self) -> int:
        """The number of steps of the current episode before truncation."""
        steps = len(self._require().rows)
        return steps if self.max_steps is None else min(steps, self.max_steps)

    def _require(self) -> SimEpisode:
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode

    # ----- gymnasium API ----------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = check_reset_options(options)
        if "sample_id" in options:
            sample = self.dataset.get(options["sample_id"])
            if sample.sample_id not in self._playable:
                raise ValueError(f"sample {options['sample_id']!r} is not a start of this env (starts={self.starts})")
        else:
            sample = self.samples[int(self.np_random.integers(len(self.samples)))]
        self._episode = self.episode(sample)
        self._live = LiveState.of(self._episode.start)
        self._sim_state = self._episode.start
        self._step = self._interventions = 0
        self._done = False
        self._rewards = []
        self._last_text = ""
        info = {
            "sample_id": sample.sample_id,
            "scenario": self._episode.scenario,
            "participants": list(self._episode.participants),
        }
        if self._full_info:
            # The horizon only with the details: a harness that shows an LLM the info would tell it how many steps
            # are left, which the observation (``elapsed``) does not.
            info["steps"] = self.limit
        return self._observation(), info

    @property
    def _state(self) -> SimState | None:
        """The simulated state as a ``SimState`` (built from the lists when asked: privileged accessors only)."""
        if self._sim_state is None and self._live is not None:
            self._sim_state = self._live.state(self._require().start)
        return self._sim_state

    def _observation(self) -> dict[str, Any]:
        episode, live, slots = self._require(), self._live, self.max_participants
        # The latest values, not aged (SimState.values), read with noise as ``perceive`` does, on lists.
        seen_d, seen_g = perceive_lists(live.distress_raw, live.g_raw, self.perception_noise, self.np_random)
        pad = [0.0] * (slots - len(seen_d))
        distress = np.array(seen_d + pad, dtype=np.float32)
        flat: list[float] = []
        for line in seen_g:
            flat += line
            flat += pad
        flat += [0.0] * (slots * len(pad))
        stance = np.array(flat, dtype=np.float32).reshape(slots, slots)  # one flat list: faster than nested ones
        # Normalised names and ASCII words: the text is in the charset without normalising it at every step.
        text = describe_levels(episode.names, seen_d, seen_g)[:TEXT_CHARS]
        self._last_text = text
        return {
            "context": episode.context,
            "text": text,
            "distress": distress,
            "stance": stance,
            "elapsed": np.array([self._step, self._interventions], dtype=np.float32),
            "scenario": episode.scenario_index,
            "participants": episode.present.copy(),
            "last_speaker": slots + 2 if live.last_speaker is None else live.last_speaker,
            "target_mask": episode.target_mask.copy(),
            "strategy_mask": episode.strategy_mask.copy(),
        }

    def last_speaker_slot(self) -> int | None:
        """The slot of the last client speaker, as the observation's ``last_speaker`` shows it (None: none yet);
        what ``wrappers.DiscreteSupportAction`` reads to decode "the last speaker"."""
        self._require()
        return self._live.last_speaker if self._live is not None else None

    def action_masks(self) -> dict[str, np.ndarray]:
        """Valid target bits and strategies (for masking learners)."""
        episode = self._require()
        return {"target": episode.target_mask.astype(bool), "strategy": episode.strategy_mask.astype(bool)}

    def _decode(self, action: dict[str, Any]) -> tuple[bool, frozenset[int], int, list[str]]:
        episode = self._require()
        return decode_action(
            action, len(episode.participants), self.max_participants, episode.valid_strategies, episode.everyone
        )

    def step(self, action: dict[str, Any]):
        episode = self._require()
        live = self._live
        if self._done or live is None:
            raise RuntimeError("the episode has ended; call reset()")
        intervene, recipients, strategy, invalid = self._decode(action)
        key = (intervene, recipients, strategy)
        support = self._supports.get(key)
        if support is None:  # memoised: a few hundred decoded actions at most
            support = self._supports[key] = support_action(intervene, recipients, strategy)
        # ``advance`` on lists, in place (the same draws and arithmetic, so the same state).
        advance_live(
            live,
            support,
            episode.dynamics,
            self.rates.reply_recipient,
            self.np_random,
            self.effect_scale,
            draw=self.outcome == "sample",
        )
        if intervene and not support.intervene:
            live.row += 1  # the therapist's turn takes a row even when it supports no one (an empty target)
        self._sim_state = None
        self._step += 1
        self._interventions += int(intervene)
        d, g = live.distress_raw, live.g_raw  # the latest values, not aged (SimState.values)
        reward = objective_of_lists(d, g, self.dynamics.state.tension_weight, self.lam) - self.kappa * float(intervene)
        terminated = bool(max(d) < self.calm_threshold) if d else True
        truncated = not terminated and self._step >= self.limit
        bonus = 0.0
        if terminated:
            remaining = self.limit - self._step
            bonus = (reward + self.kappa * intervene) * sum(self.gamma**k for k in range(1, remaining + 1))
        reward += bonus
        self._rewards.append(reward)
        self._done = terminated or truncated
        if self._full_info:
            people = episode.participants
            info: dict[str, Any] = {
                "sample_id": episode.sample_id,
                "scenario": episode.scenario,
                "step": self._step - 1,
                "speaker": people[live.last_speaker] if live.last_speaker is not None else None,
                "chosen": {
                    "intervene": intervene,
                    "target": [people[i] for i in sorted(recipients)],
                    "strategy": ALL_STRATEGY_KEYS[strategy] if strategy >= 0 else None,
                },
                "state": {
                    "distress": {p: round(v, 6) for p, v in zip(people, d)},
                    "tension": round(tension(np.array(g, dtype=np.float64).reshape(len(d), len(d))), 6),
                },
                "invalid": invalid,
                "n_invalid": len(invalid),
            }
        else:
            # A few flat scalars by default: a vector env merges every key of every sub-env's info at every step.
            info = {"step": self._step - 1, "n_invalid": len(invalid)}
        if terminated:
            info["calm_bonus"] = bonus
        if terminated or truncated:
            info["episode"] = {
                "return": float(sum(self._rewards)),
                "discounted_return": discounted_return(self._rewards, self.gamma),
                "length": self._step,
                "final_max_distress": float(max(d)) if d else 0.0,
                "intervention_rate": self._interventions / self._step,
                "calm": terminated,
            }
        observation = self._observation()
        if self.render_mode == "human":
            self.render()
        return observation, float(reward), terminated, truncated, info

    def _reward(self, d: np.ndarray, g: np.ndarray, intervene: bool) -> float:
        """Eq. 14 at one step: U(s, G) - lambda max_i d_i - kappa z."""
        return objective(d, g, self.dynamics.state.tension_weight, self.lam) - self.kappa * float(intervene)

    # ----- privileged accessors (reference policies, calibration and analysis; never observed) --------------

    def state(self) -> dict[str, Any]:
        """The true simulated state: distress and G per slot (latest values), the relation pattern, the row clock."""
        self._require()
        d, g = self._state.values()
        return {"distress": d.copy(), "g": g.copy(), "pattern": self._state.pattern, "row": self._state.row}

    def recorded_action(self) -> dict[str, Any]:
        """What the real therapist did at the source conversation's matching decision point, as an action (its
        strategy when known, else the scenario's first; recipients when known, else everyone)."""
        episode = self._require()
        if self._done:
            raise RuntimeError("the episode has ended; call reset()")
        action = episode.recorded[self._step]
        target = np.zeros(self.max_participants + 1, dtype=np.int8)
        if action.recipients and len(action.recipients) < len(episode.participants):
            target[sorted(action.recipients)] = 1
        else:
            target[-1] = 1
        strategy = ALL_STRATEGY_KEYS.index(action.strategy) if action.strategy in ALL_STRATEGY_KEYS else -1
        if strategy not in episode.valid_strategies:
            strategy = min(episode.valid_strategies)
        return {"intervene": int(action.intervene), "target": target, "strategy": strategy}

    def expected_reward(self, intervene: bool, recipients: frozenset[int], strategy: int) -> float:
        """The step reward at F's mean next state, every participant's and viewpoint's value refreshed in
        expectation (``rates``; a plug-in approximation: the objective's max is taken of the expectation)."""
        self._require()
        state, dynamics = self._state, self._episode.dynamics
        support = support_action(intervene, recipients, strategy)
        d_next, g_next = dynamics.kernel.mean(state, support, self.effect_scale)
        p, p_pair = dynamics.p_emotion, dynamics.p_pair
        d_old, g_old = state.values()
        existing = state.viewpoint_row >= 0
        d = p * d_next + (1 - p) * d_old
        g = np.where(existing, p_pair * g_next + (1 - p_pair) * g_old, 0.0)
        return self._reward(d, g, intervene)

    def best_group_action(self) -> tuple[bool, frozenset[int], int]:
        """The action maximising ``expected_reward`` over keep-listening and every single participant, pair and
        everyone, with every valid strategy (``group-greedy``)."""
        episode = self._require()
        candidates = candidate_supports(len(episode.participants), episode.valid_strategies)
        values = [self.expected_reward(*candidate) for candidate in candidates]
        return candidates[int(np.argmax(values))]

    # ----- rendering --------------------------------------------------------------------------------------

    def render(self) -> str | None:
        """``ansi``: the current step and the perceived state in words; ``human``: printed."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        if self._episode is None:
            return ""
        text = f"--- {self._episode.sample_id} step {self._step}/{self.limit}: {self._last_text}\n"
        if self.render_mode == "human":
            print(text, end="")
            return None
        return text


TEXT_CHARS = 2048
"""Longest ``text`` observation (six participants with every stance said fit in about 600 characters)."""


__all__ = ["RescueSimEnv", "SimEpisode"]
