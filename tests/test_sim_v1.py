"""``RescueSim-v1`` (issue 24): F1's blocks, history and per-term shrinkage, the therapist's behaviour model, the
behaviour-regularised reward with its default weight's rule, no calm end, and the cloned therapist policy."""

from __future__ import annotations

from itertools import combinations

import gymnasium as gym
import numpy as np
import pytest

import rescue_env  # noqa: F401  (registers the ids)
from policies import make_policy
from rescue_env.data import load_dataset
from rescue_env.data.splits import SplitConfig, group_of, split_samples
from rescue_env.dynamics.behaviour import FEATURES, BehaviourModel, features, kind_sizes, recipient_kind
from rescue_env.dynamics.outcome import DISTRESS_FEATURES, NO_INTERVENTION, SupportAction, transitions
from rescue_env.dynamics.outcome_v1 import (
    BLOCKS,
    SCALES,
    History,
    OutcomeModelV1,
    action_blocks,
    distress_transitions,
    extend,
)
from rescue_env.dynamics.state import StateConfig
from rescue_env.envs.sim_v1 import RescueSimEnvV1, compact_actions
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


@pytest.fixture(scope="module")
def env() -> RescueSimEnvV1:
    return RescueSimEnvV1(data="demo")


def _col(name: str) -> int:
    return DISTRESS_FEATURES.index(name)


# ----- F1 ----------------------------------------------------------------------------------------------------


def test_history_by_hand() -> None:
    past = [NO_INTERVENTION, SupportAction(True, frozenset({0}), "join"), SupportAction(True, frozenset({0, 1}))]
    h = History.of(past, 2)
    assert h.speaks == 2 / 4 and h.supported.tolist() == [2 / 4, 1 / 4]
    # only the last 4 decisions count
    h = History.of([SupportAction(True, frozenset({1}))] * 3 + [NO_INTERVENTION] * 4, 2)
    assert h.speaks == 0.0 and h.supported.tolist() == [0.0, 0.0]


def test_blocks_by_hand() -> None:
    X = np.zeros((2, len(DISTRESS_FEATURES)))
    X[0, [_col("d"), _col("therapist_speaks"), _col("recipient_alone"), _col("strategy=join"), _col("family")]] = [
        0.6, 1, 1, 1, 1,
    ]  # fmt: skip
    X[1, [_col("d"), _col("therapist_speaks"), _col("other_supported"), _col("last_speaker"), _col("family")]] = [
        0.2, 1, 1, 1, 1,
    ]  # fmt: skip
    h = History(speaks=0.5, supported=np.array([0.25, 0.75]))
    names = [n for b in BLOCKS for n in BLOCKS[b][0]]
    out = dict(zip(names, extend(X, h, list(BLOCKS))[:, len(DISTRESS_FEATURES) :].T))
    assert out["strategy=join_x_d"].tolist() == [0.6, 0.0]
    assert out["recipient_alone_x_family"].tolist() == [1.0, 0.0]
    assert out["other_supported_x_d"].tolist() == [0.0, 0.2]
    assert out["recent_speaks"].tolist() == [0.5, 0.5]
    assert out["speaks_x_recent_speaks"].tolist() == [0.5, 0.5]
    assert out["supported_x_recent_supported"].tolist() == [0.25, 0.0]  # only row 0 is supported now
    assert out["strategy=join_x_last_speaker"].tolist() == [0.0, 0.0]
    assert out["speaks_x_d"].tolist() == [0.6, 0.2]
    assert extend(X, h, []) is X
    assert action_blocks(["speaks_x_distress"])["speaks_x_distress"] == [len(DISTRESS_FEATURES)]


def test_f1_rows_are_fs_distress_rows() -> None:
    dataset = load_dataset("demo")
    groups = group_of(dataset.samples)
    rich = distress_transitions(dataset.samples, groups, StateConfig(), 5)
    plain, _ = transitions(dataset.samples, groups, StateConfig(), 5)
    assert np.array_equal(rich.base.X, plain.X) and np.array_equal(rich.base.y, plain.y)
    assert rich.base.groups == plain.groups
    assert all(rich.extra[b].shape == (plain.y.size, len(BLOCKS[b][0])) for b in BLOCKS)


def test_f1_follows_its_rule(env: RescueSimEnvV1) -> None:
    model = env.outcome_model
    assert set(model.blocks) <= set(BLOCKS)
    for step in model.selection:  # each round keeps the best block only when it lowers the cross-validated error
        if step.added is not None:
            assert step.tried[step.added] == min(step.tried.values()) < step.base_error
        else:
            assert not step.tried or min(step.tried.values()) >= step.base_error
    assert model.selection[-1].added is None and [s.added for s in model.selection[:-1]] == model.blocks
    assert set(model.shrinkage) == set(action_blocks(model.blocks)) and set(model.shrinkage.values()) <= set(SCALES)
    assert len(model.members) == 10 and len(model.distress.coef) == len(model.distress.features)
    # a dropped block (factor 0) has zero coefficients; the JSON round trip keeps the model
    for block, factor in model.shrinkage.items():
        if factor == 0:
            cols = action_blocks(model.blocks)[block]
            assert all(model.distress.coef[c] == 0 for c in cols)
    assert OutcomeModelV1.model_validate_json(model.model_dump_json()).digest() == model.digest()


def test_f1_spread_is_zero_for_keeping_listening(env: RescueSimEnvV1) -> None:
    env.reset(seed=0)
    point = env._state.point(env.dynamics.state)
    h = History.of([], env._state.n)
    assert np.all(env.outcome_model.effect_spread(point, NO_INTERVENTION, h) == 0)
    support = SupportAction(True, frozenset(range(env._state.n)), "join")
    assert np.all(env.outcome_model.effect_spread(point, support, h) >= 0)


# ----- the behaviour model -----------------------------------------------------------------------------------


def test_behaviour_features_by_hand() -> None:
    g = [[0, 0.4, 0.2], [0.8, 0, 0], [0, 0, 0]]
    past = [SupportAction(True, frozenset({1}))] + [NO_INTERVENTION] * 2
    x = dict(zip(FEATURES, features([0.2, 0.5, 0.8], g, 1, True, past)))
    assert x["d_max"] == 0.8 and x["d_mean"] == pytest.approx(0.5) and x["d_last_speaker"] == 0.5
    assert x["g_mean"] == pytest.approx(1.4 / 6) and x["g_max"] == 0.8
    assert x["family"] == 1.0 and x["n_participants"] == 0.5
    assert x["recent_speaks"] == 1 / 4 and x["since_spoke"] == 2 / 10
    assert dict(zip(FEATURES, features([0.1], [[0]], None, False, [])))["since_spoke"] == 1.0  # never spoke: capped


def test_recipient_kinds_by_hand() -> None:
    assert recipient_kind(frozenset({0, 1, 2}), 3, 0) == "everyone"
    assert recipient_kind(frozenset({0}), 3, 0) == "last" and recipient_kind(frozenset({1}), 3, 0) == "other"
    assert recipient_kind(frozenset({1, 2}), 3, 0) == "subset" and recipient_kind(frozenset(), 3, 0) is None
    assert kind_sizes(3, 0) == {"last": 1, "everyone": 1, "other": 2, "subset": 3}
    assert kind_sizes(3, None) == {"last": 0, "everyone": 1, "other": 3, "subset": 3}
    assert kind_sizes(1, 0) == {"last": 0, "everyone": 1, "other": 0, "subset": 0}


def test_behaviour_probabilities_sum_to_one(env: RescueSimEnvV1) -> None:
    # pi_b over keeping listening and every recipient set x every valid strategy is a distribution
    model: BehaviourModel = env.behaviour
    valid = ["track", "reframe", "join"]
    for n, last in ((2, 0), (3, 1), (4, None)):
        x = features([0.3] * n, np.zeros((n, n)), last, False, [])
        total = np.exp(model.log_prob(x, False, frozenset(), None, n, last, valid))
        for size in range(1, n + 1):
            for members in combinations(range(n), size):
                total += sum(np.exp(model.log_prob(x, True, frozenset(members), s, n, last, valid)) for s in valid)
        assert total == pytest.approx(1.0, abs=1e-9), (n, last)


# ----- the env -----------------------------------------------------------------------------------------------


def test_ids_build_with_defaults_and_pass_check_env() -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make("RescueSim-v1")
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert set(info) == {"sample_id", "scenario", "participants", "member"}  # no horizon at the default level


def test_no_calm_end_and_the_reward_is_its_terms(env: RescueSimEnvV1) -> None:
    never = make_policy("never", env, 0)
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        steps, done = 0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(never.act(obs, env))
            assert not terminated
            assert reward == pytest.approx(info["group"] + env.beta * info["log_pi_b"])
            steps += 1
            done = truncated
        assert steps == info["episode"]["length"] == env.limit
        assert info["episode"]["per_step_return"] == pytest.approx(info["episode"]["return"] / steps)
    with pytest.raises(ValueError, match="no calm end"):
        RescueSimEnvV1(data="demo", calm_threshold=0.2)


def test_same_seed_same_episode(env: RescueSimEnvV1) -> None:
    def run(seed: int) -> list[float]:
        obs, _ = env.reset(seed=seed)
        policy = make_policy("random", env, 5)
        out, done = [], False
        while not done:
            obs, reward, _, truncated, _ = env.step(policy.act(obs, env))
            out.append(reward)
            done = truncated
        return out

    assert run(7) == run(7) and run(7) != run(8)


def test_default_beta_follows_the_rule(env: RescueSimEnvV1) -> None:
    # The rule recomputed here: mean over the train side's start states of the sd across the compact actions of
    # the expected group term, over the same mean sd of log pi_b.
    side = split_samples(env.dataset.samples, SplitConfig(split="train", seed=0))
    group_sd, prior_sd = [], []
    for sample in side:
        if env._opening_end(sample) is None:
            continue
        env.reset(seed=0, options={"sample_id": sample.sample_id})
        state = env._state
        terms = [
            env.expected_terms(*a)
            for a in compact_actions(state.n, state.last_speaker, sorted(env._episode.valid_strategies))
        ]
        group_sd.append(np.std([t[0] for t in terms]))
        prior_sd.append(np.std([t[1] for t in terms]))
    assert env.beta == pytest.approx(np.mean(group_sd) / np.mean(prior_sd))
    assert RescueSimEnvV1(data="demo", beta=0.5).beta == 0.5
    with pytest.raises(ValueError, match="beta"):
        RescueSimEnvV1(data="demo", beta=-1)


def test_ensemble_member_is_drawn_per_episode() -> None:
    env = RescueSimEnvV1(data="demo", ensemble="member")
    members = {env.reset(seed=s)[1]["member"] for s in range(12)}
    assert len(members) > 1 and members <= set(range(10))
    with pytest.raises(ValueError, match="ensemble"):
        RescueSimEnvV1(data="demo", ensemble="bag")


def test_the_cloned_therapist_reads_the_observation_only(env: RescueSimEnvV1) -> None:
    policy = make_policy("behaviour", env, 3)
    obs, _ = env.reset(seed=2)
    policy.reset(3)
    first = [policy.act(obs, None) for _ in range(30)]  # no env at all: the observation is enough
    policy.reset(3)
    again = [policy.act(obs, None) for _ in range(30)]
    assert all(
        a["intervene"] == b["intervene"] and a["strategy"] == b["strategy"] and np.array_equal(a["target"], b["target"])
        for a, b in zip(first, again)
    )
    assert {a["intervene"] for a in first} == {0, 1}
    valid = set(np.flatnonzero(obs["strategy_mask"]).tolist())
    assert all(a["strategy"] in valid for a in first if a["intervene"])
    with pytest.raises(ValueError, match="RescueSim-v1"):
        make_policy("behaviour", gym.make("RescueSim-v0"), 0)


def test_compact_actions_by_hand() -> None:
    actions = compact_actions(3, 1, [0, 4])
    assert actions[0] == (False, frozenset(), 0)
    assert actions[1:] == [
        (True, frozenset({1}), 0), (True, frozenset({1}), 4),
        (True, frozenset({0, 1, 2}), 0), (True, frozenset({0, 1, 2}), 4),
        (True, frozenset({0}), 0), (True, frozenset({0}), 4),
        (True, frozenset({2}), 0), (True, frozenset({2}), 4),
    ]  # fmt: skip
    assert ALL_STRATEGY_KEYS[4] == "join"
