"""Reference policies of ``Rescue-v0``: random, majority, the gold oracle, and the constant policies that any
reward preset must not favour (always intervene on everyone, never intervene, always support the most
distressed), plus the exact maximiser of the ``group`` preset.

``oracle``, ``most-distressed`` and ``group-greedy`` are privileged: they read ``env.gold()`` or ``env.state()``,
which no observation carries. They are yardsticks for rewards and evaluation, not agents.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal

import numpy as np

from policies.base import make_action, n_participants, unwrapped, valid_strategy
from rescue_env.data import Dataset
from rescue_env.data.schema import SCENARIOS

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv

Pattern = Literal["everyone", "one person"]


class RandomPolicy:
    """Uniform over valid actions: intervene with probability 1/2; each valid target bit (present slots and the
    group bit) with probability 1/2, redrawn until at least one is set; a strategy of the scenario uniformly.
    Seeded by its own numpy Generator: the same seed gives the same actions."""

    name = "random"

    def __init__(self, seed: int | None = 0) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> RandomPolicy:
        return cls(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.seed, self.rng = seed, np.random.default_rng(seed)

    def act(self, observation: dict, env: RescueEnv) -> dict:
        valid_bits = np.flatnonzero(np.asarray(observation["target_mask"]))
        target = np.zeros(np.asarray(observation["target_mask"]).size, dtype=np.int8)
        while not target.any():
            target[valid_bits] = self.rng.integers(0, 2, size=valid_bits.size)
        valid_strategies = np.flatnonzero(np.asarray(observation["strategy_mask"]))
        return {
            "intervene": int(self.rng.integers(2)),
            "target": target,
            "strategy": int(self.rng.choice(valid_strategies)),
        }


class MajorityPolicy:
    """The most frequent gold choice of a dataset, per scenario (pooled where a scenario is absent): intervene iff
    most decision points have z* = 1; the target pattern ("everyone" or "one person", whichever is the more
    frequent gold A* of the two), "one person" being the last speaker when that is a participant (else
    everyone); the most frequent a*. Fit with ``MajorityPolicy.fit(env_or_dataset)`` beforehand."""

    name = "majority"

    def __init__(
        self,
        intervene: dict[str, bool],
        pattern: dict[str, Pattern],
        strategy: dict[str, int | None],
    ) -> None:
        self.intervene, self.pattern, self.strategy = intervene, pattern, strategy

    @classmethod
    def fit(cls, env_or_dataset: RescueEnv | Dataset | str) -> MajorityPolicy:
        from rescue_env.envs.replay import RescueEnv

        env = unwrapped(env_or_dataset)
        if not isinstance(env, RescueEnv):
            env = RescueEnv(env_or_dataset)
        counts = {scope: {"z": Counter(), "pattern": Counter(), "strategy": Counter()} for scope in (*SCENARIOS, "all")}
        for sample in env.samples:
            episode = env.episode(sample)
            n = len(episode.participants)
            for point in episode.points:
                for scope in (episode.scenario, "all"):
                    c = counts[scope]
                    c["z"][point.gold_intervene] += 1
                    recipients = point.gold_recipients
                    if point.gold_intervene and recipients is not None and n > 1:
                        if len(recipients) == n:
                            c["pattern"]["everyone"] += 1
                        elif len(recipients) == 1:
                            c["pattern"]["one person"] += 1
                    if point.gold_intervene and point.gold_strategy is not None:
                        c["strategy"][point.gold_strategy] += 1
        intervene, pattern, strategy = {}, {}, {}
        for scope, c in counts.items():
            if not c["z"]:
                continue
            intervene[scope] = c["z"][True] >= c["z"][False]  # a tie intervenes
            pattern[scope] = "one person" if c["pattern"]["one person"] > c["pattern"]["everyone"] else "everyone"
            # most frequent; a tie goes to the lower index (the taxonomy order)
            strategy[scope] = min(c["strategy"], key=lambda k: (-c["strategy"][k], k)) if c["strategy"] else None
        return cls(intervene, pattern, strategy)

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> MajorityPolicy:
        return cls.fit(env)

    def reset(self, seed: int | None = None) -> None:
        pass

    def _choice(self, table: dict, scenario: str):
        return table[scenario] if scenario in table else table["all"]

    def act(self, observation: dict, env: RescueEnv) -> dict:
        scenario = SCENARIOS[int(observation["scenario"])]
        last = int(observation["last_speaker"])
        one = self._choice(self.pattern, scenario) == "one person" and last < n_participants(observation)
        return make_action(
            observation,
            self._choice(self.intervene, scenario),
            [last] if one else None,
            self._choice(self.strategy, scenario),
        )


class OraclePolicy:
    """The real therapist's choice (``env.gold()``): z*, A* as slots, a*; where A* is unknown, everyone; where
    a* is unknown, the first valid strategy. Earns the maximum imitation reward at every step."""

    name = "oracle"

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> OraclePolicy:
        return cls()

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, observation: dict, env: RescueEnv) -> dict:
        gold = unwrapped(env).gold()
        return make_action(observation, gold["intervene"], gold["recipients"], gold["strategy"])


class _Stateless:
    name = "stateless"

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0):
        return cls()

    def reset(self, seed: int | None = None) -> None:
        pass


class AlwaysInterveneEveryone(_Stateless):
    """Intervene at every decision point, on everyone, with ``strategy`` (an index of ``ALL_STRATEGY_KEYS``) where
    the scenario allows it, else the first valid strategy (``track``; the default)."""

    name = "always-everyone"

    def __init__(self, strategy: int | None = None) -> None:
        self.strategy = strategy

    def act(self, observation: dict, env: RescueEnv) -> dict:
        return make_action(observation, True, None, self.strategy)


class AlwaysLastSpeaker(_Stateless):
    """Intervene at every decision point on the participant who just spoke (everyone when the last row was not a
    participant's), with ``strategy`` (an index of ``ALL_STRATEGY_KEYS``) where the scenario allows it, else the
    first valid strategy (the default)."""

    name = "last-speaker"

    def __init__(self, strategy: int | None = None) -> None:
        self.strategy = strategy

    def act(self, observation: dict, env: RescueEnv) -> dict:
        slot = int(observation["last_speaker"])
        return make_action(observation, True, [slot] if slot < n_participants(observation) else None, self.strategy)


class ContentBlindPolicy:
    """Intervene with probability ``rate`` at each decision point whatever is observed, on everyone, with
    ``strategies[scenario]`` (an index of ``ALL_STRATEGY_KEYS``; the first valid one where none is given or the
    scenario does not allow it). Draws with its own numpy Generator, re-seeded by ``reset(seed)``: rate 0 is
    ``never``, rate 1 ``always-everyone`` with that strategy. The yardstick of "how often" without "when"."""

    name = "content-blind"

    def __init__(self, rate: float, strategies: dict[str, int] | None = None, seed: int | None = 0) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate!r}")
        self.rate, self.strategies = float(rate), dict(strategies or {})
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def act(self, observation: dict, env: RescueEnv) -> dict:
        intervene = bool(self.rng.random() < self.rate)
        strategy = self.strategies.get(SCENARIOS[int(observation["scenario"])])
        return make_action(observation, intervene, None, strategy)


class AlwaysMostVocal:
    """Intervene at every decision point on the participant who has spoken most often so far in the episode (as
    counted from the observations' ``last_speaker``; ties: the earliest slot), with the first valid strategy."""

    name = "most-vocal"

    def __init__(self) -> None:
        self.counts: np.ndarray | None = None

    @classmethod
    def from_env(cls, env: RescueEnv, seed: int | None = 0) -> AlwaysMostVocal:
        return cls()

    def reset(self, seed: int | None = None) -> None:
        self.counts = None

    def act(self, observation: dict, env: RescueEnv) -> dict:
        n = n_participants(observation)
        if self.counts is None or self.counts.size != n:
            self.counts = np.zeros(n, dtype=np.int64)
        slot = int(observation["last_speaker"])
        if slot < n:
            self.counts[slot] += 1
        chosen = [int(np.argmax(self.counts))] if self.counts.any() else None
        return make_action(observation, True, chosen)


class NeverIntervene(_Stateless):
    """Keep listening at every decision point."""

    name = "never"

    def act(self, observation: dict, env: RescueEnv) -> dict:
        return make_action(observation, False)


def most_distressed(distress: np.ndarray) -> list[int]:
    """Slots of the participants with the highest distress (all tied ones; everyone when nothing is known)."""
    if distress.size == 0:
        return []
    return np.flatnonzero(distress == distress.max()).tolist()


class AlwaysMostDistressed(_Stateless):
    """Intervene at every decision point on the most distressed participant(s) of ``env.state()`` (ties: all
    tied), with the first valid strategy. Privileged: annotated distress is not observed."""

    name = "most-distressed"

    def act(self, observation: dict, env: RescueEnv) -> dict:
        return make_action(observation, True, most_distressed(unwrapped(env).state()["distress"]))


class GroupGreedyPolicy(_Stateless):
    """The exact per-step maximiser of the ``group`` objective under the env's lambda and kappa: support the k
    tied most distressed participants when that lowers the unmet need by more than it costs
    (lambda * d_max / k > kappa), else keep listening. Privileged (``env.state()``); the upper bound of the group
    preset, and not a constant policy whenever kappa / lambda lies inside the range of d_max / k."""

    name = "group-greedy"

    def act(self, observation: dict, env: RescueEnv) -> dict:
        env = unwrapped(env)
        if hasattr(env, "best_group_action"):  # Rescue-v1: the group objective is F's, searched exactly
            intervene, recipients, strategy = env.best_group_action()
            return make_action(observation, intervene, sorted(recipients), strategy)
        distress = env.state()["distress"]
        tied = most_distressed(distress)
        config = env.reward_config
        gain = config.lam * float(distress.max()) / len(tied) if tied else 0.0
        return make_action(observation, gain > config.kappa, tied, valid_strategy(observation, None))


class RecordedTherapist(_Stateless):
    """``RescueSim-v0``: at each step, what the real therapist did at the source conversation's matching decision
    point (``env.recorded_action()``), whatever the simulated session has become: the recorded course of
    support, played open loop. Privileged (the recorded actions are never observed); the yardstick that the
    simulator's calibration replays."""

    name = "recorded"

    def act(self, observation: dict, env: RescueEnv) -> dict:
        return unwrapped(env).recorded_action()
