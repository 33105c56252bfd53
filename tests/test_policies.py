"""Reference policies of Rescue-v0: valid masked actions, seeding, the oracle's maximum imitation reward, the
group-greedy maximiser, majority fitting, the heuristic's observation-only rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_row, make_sample, write_jsonl

from policies import CONSTANT, POLICIES, PRIVILEGED, SIM_ONLY, MajorityPolicy, Policy, RandomPolicy, make_policy
from policies.heuristic import HeuristicPolicy, parse_context
from rescue_env.data import load_dataset
from rescue_env.envs.replay import RescueEnv
from rescue_env.reward import RewardConfig
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


def play(env: RescueEnv, policy: Policy, sample_id: str, seed: int | None = 0):
    """(action, info, reward, gold, state) per step of one episode."""
    observation, _ = env.reset(seed=seed, options={"sample_id": sample_id})
    policy.reset(seed=seed)
    steps, terminated = [], False
    while not terminated:
        gold, state = env.gold(), env.state()
        action = policy.act(observation, env)
        observation, reward, terminated, _, info = env.step(action)
        steps.append((action, info, reward, gold, state, observation))
    return steps


@pytest.fixture(scope="module")
def demo_env() -> RescueEnv:
    return RescueEnv(sample_order="sequential", info_level="full")


REPLAY = [name for name in POLICIES if name not in SIM_ONLY]  # the sim's own policies: tests/test_sim.py


def test_registry_names_and_protocol(demo_env: RescueEnv) -> None:
    assert set(POLICIES) >= {"random", "majority", "heuristic", "oracle", "always-everyone", "never", "most-distressed"}
    for name in REPLAY:
        policy = make_policy(name, demo_env, seed=0)
        assert isinstance(policy, Policy) and policy.name == name
    assert set(CONSTANT) <= set(POLICIES) and set(POLICIES) >= PRIVILEGED
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy("nope", demo_env)


@pytest.mark.parametrize("name", REPLAY)
def test_actions_are_valid_and_respect_masks(demo_env: RescueEnv, name: str) -> None:
    policy = make_policy(name, demo_env, seed=3)
    for sample in demo_env.samples:
        observation, _ = demo_env.reset(options={"sample_id": sample.sample_id})
        policy.reset(seed=3)
        terminated = False
        while not terminated:
            action = policy.act(observation, demo_env)
            assert demo_env.action_space.contains(action), action
            target = np.asarray(action["target"])
            assert not (target & (1 - observation["target_mask"])).any()
            assert target.any()
            assert observation["strategy_mask"][int(action["strategy"])] == 1
            observation, _, terminated, _, info = demo_env.step(action)
            assert info["invalid"] == []


class _Blind:
    """An env stand-in whose privileged accessors fail: observation-only policies never call them."""

    def __init__(self, env: RescueEnv) -> None:
        self.max_participants = env.max_participants

    def gold(self):
        raise AssertionError("an observation-only policy read env.gold()")

    def state(self):
        raise AssertionError("an observation-only policy read env.state()")


@pytest.mark.parametrize("name", sorted(set(REPLAY) - PRIVILEGED))
def test_observation_only_policies_never_read_gold_or_state(demo_env: RescueEnv, name: str) -> None:
    policy = make_policy(name, demo_env, seed=0)
    blind = _Blind(demo_env)
    for sample in demo_env.samples:
        observation, _ = demo_env.reset(options={"sample_id": sample.sample_id})
        terminated = False
        while not terminated:
            observation, _, terminated, _, _ = demo_env.step(policy.act(observation, blind))


def test_random_policy_is_seeded(demo_env: RescueEnv) -> None:
    sample_id = demo_env.samples[0].sample_id

    def actions(policy: RandomPolicy, seed: int | None) -> list:
        return [
            (int(a["intervene"]), tuple(a["target"]), int(a["strategy"]))
            for a, *_ in play(demo_env, policy, sample_id, seed)
        ]

    first = actions(RandomPolicy(seed=5), None)
    assert first == actions(RandomPolicy(seed=5), None)
    assert first == actions(RandomPolicy(seed=0), 5)  # reset(seed) re-seeds
    assert first != actions(RandomPolicy(seed=6), None)
    assert len({a[0] for a in first}) == 2  # both decisions occur


def test_oracle_earns_the_maximum_imitation_reward_at_every_step() -> None:
    env = RescueEnv(reward="imitation", sample_order="sequential", info_level="full")
    oracle = make_policy("oracle", env)
    checked = 0
    for sample in env.samples:
        for _, info, reward, gold, *_ in play(env, oracle, sample.sample_id):
            best = 1.0
            if gold["intervene"]:
                best += (gold["recipients"] is not None) + (gold["strategy"] is not None)
            assert reward == pytest.approx(best), info
            assert info["components"]["timing"] == 1.0
            checked += 1
    assert checked == sum(len(env.episode(s).points) for s in env.samples)


def test_constant_policies_do_what_they_say(demo_env: RescueEnv) -> None:
    sample = demo_env.samples[0]
    people = list(demo_env.episode(sample).participants)
    for _, info, *_ in play(demo_env, make_policy("always-everyone", demo_env), sample.sample_id):
        assert info["chosen"]["intervene"] and info["chosen"]["target"] == people
    for _, info, *_ in play(demo_env, make_policy("never", demo_env), sample.sample_id):
        assert not info["chosen"]["intervene"]
    for _, info, _, _, state, _ in play(demo_env, make_policy("most-distressed", demo_env), sample.sample_id):
        d = state["distress"]
        tied = [people[i] for i in np.flatnonzero(d == d.max())]
        assert info["chosen"]["intervene"] and info["chosen"]["target"] == tied


def test_group_greedy_maximises_the_group_objective_at_every_step() -> None:
    config = RewardConfig.preset("group", lam=1.0, kappa=0.65)
    env = RescueEnv(reward=config, sample_order="sequential")
    names = ("group-greedy", "never", "always-everyone", "most-distressed", "oracle", "heuristic", "random")
    for sample in env.samples:
        rewards = {n: [r for _, _, r, *_ in play(env, make_policy(n, env, seed=1), sample.sample_id)] for n in names}
        best = np.max([rewards[n] for n in names if n != "group-greedy"], axis=0)
        assert np.all(np.array(rewards["group-greedy"]) >= best - 1e-12)


def _tiny(tmp_path: Path) -> Path:
    """Two couple conversations: the therapist follows 3 of 5 decision points, targeting one person with reframe
    twice and everyone with track once."""

    def therapist(i: int, target: list[str], strategy: str) -> dict:
        return make_row(
            i,
            "Therapist",
            support_strategy=[{"provider": "Therapist", "target": target, "strategy_type": strategy}],
        )

    a = make_sample("t/1", ["Ana", "Ben"])
    a["rows"] += [therapist(2, ["Ana"], "reframe"), make_row(3, "Ben"), therapist(4, ["Ben"], "reframe")]
    b = make_sample("t/2", ["Cy", "Di"])
    b["rows"] += [therapist(2, ["Couple"], "track")]
    return write_jsonl(tmp_path / "tiny.jsonl", [a, b])


def test_majority_fit_by_hand(tmp_path: Path) -> None:
    env = RescueEnv(str(_tiny(tmp_path)), sample_order="sequential")
    # decision points: t/1 after rows 1 (Ben next), 2 (T), 4 (T); t/2 after rows 1 (Di next), 2 (T)
    policy = MajorityPolicy.fit(env)
    reframe = ALL_STRATEGY_KEYS.index("reframe")
    assert policy.intervene == {"couple": True, "all": True}
    assert policy.pattern == {"couple": "one person", "all": "one person"}
    assert policy.strategy == {"couple": reframe, "all": reframe}
    assert MajorityPolicy.fit(load_dataset(str(_tiny(tmp_path)))).strategy == policy.strategy
    # "one person" = the last speaker when a participant
    observation, _ = env.reset(options={"sample_id": "t/1"})
    action = policy.act(observation, env)
    assert action["intervene"] == 1 and int(action["strategy"]) == reframe
    assert action["target"].tolist() == [1, 0, 0, 0, 0, 0, 0]  # Ana spoke row 1


def test_parse_context_reads_back_the_rendering(demo_env: RescueEnv) -> None:
    observation, _ = demo_env.reset(options={"sample_id": demo_env.samples[0].sample_id})
    for _ in range(3):
        observation, *_ = demo_env.step(make_policy("never", demo_env).act(observation, demo_env))
    slots, rows = parse_context(observation["context"])
    assert slots == {"Maya": 0, "Jordan": 1}
    assert [r.position for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0].speaker == "Therapist" and rows[0].addressees == ("Couple",)
    assert all(r.words and '"' not in r.words[-1:] for r in rows)


def _observation(lines: list[str], last_speaker: int, scenario: int = 0) -> dict:
    header = "Couple therapy session. Participant slots: [0] Ana, [1] Ben, [6] everyone (Couple).\n"
    return {
        "context": header + "\n".join(lines),
        "scenario": scenario,
        "participants": np.array([1, 1, 0, 0, 0, 0], dtype=np.int8),
        "last_speaker": last_speaker,
        "target_mask": np.array([1, 1, 0, 0, 0, 0, 1], dtype=np.int8),
        "strategy_mask": np.array([1] * 10 + [0], dtype=np.int8),
    }


def test_heuristic_rules() -> None:
    h = HeuristicPolicy()
    to_therapist = _observation(['[1] 00:00.0-00:04.0 Ana -> Therapist: "He never listens to me."'], 0)
    assert h.decide(to_therapist)[:2] == (True, [0])
    between = _observation(['[1] 00:00.0-00:04.0 Ana -> Ben: "Did you pick up the kids?"'], 0)
    assert h.decide(between)[0] is False
    hurt = _observation(['[1] 00:00.0-00:04.0 Ben -> Ana: "I feel so alone in this house."'], 1)
    assert h.decide(hurt) == (True, [1], "evoke")
    unit = _observation(['[1] 00:00.0-00:04.0 Ben -> Therapist: "We both want this to work, together."'], 1)
    assert h.decide(unit) == (True, None, "goal_align")
    both_ways = _observation(
        [
            '[1] 00:00.0-00:04.0 Ana -> Ben: "You always walk away."',
            '[2] 00:05.0-00:09.0 Ben -> Ana: "You never give me a chance!"',
        ],
        1,
    )
    assert h.decide(both_ways) == (True, None, "safeguard")
    family = _observation(['[1] 00:00.0-00:04.0 Ana -> Therapist: "I feel hurt."'], 0, scenario=1)
    family["strategy_mask"] = np.array([1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1], dtype=np.int8)
    assert h.decide(family)[2] == "join"
    action = h.act(family, None)
    assert ALL_STRATEGY_KEYS[int(action["strategy"])] == "join"
