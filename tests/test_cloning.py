"""``policies.cloning.CloningPolicy`` (``cloning``): behavioural cloning of the recorded therapist in the replays,
fitted on the train side of the grouped split and played on the test side from the observation alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from benchmarks.rollout import evaluate_policy, subset
from policies import REPLAY_ONLY, make_policy
from policies.cloning import CloningPolicy, target_label
from policies.imitation import EVERYONE
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.splits import SplitConfig, split_samples
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.replay_v1 import RescueEnvV1


def _side(dataset: Dataset, side: str) -> Dataset:
    return subset(dataset, split_samples(dataset.samples, SplitConfig(split=side)))


@pytest.fixture(scope="module")
def demo() -> Dataset:
    return load_dataset("demo")


@pytest.fixture(scope="module")
def sides(demo: Dataset) -> tuple[RescueEnv, RescueEnv]:
    """(an env on the train side, an env on the test side)."""
    return RescueEnv(_side(demo, "train"), sample_order="sequential"), RescueEnv(
        _side(demo, "test"), sample_order="sequential"
    )


def _actions(policy: CloningPolicy, env: RescueEnv, seed: int) -> list[tuple]:
    out = []
    for sample in env.samples:
        observation, _ = env.reset(options={"sample_id": sample.sample_id})
        policy.reset(seed=seed)
        done = False
        while not done:
            action = policy.act(observation, env)
            out.append((int(action["intervene"]), tuple(np.asarray(action["target"])), int(action["strategy"])))
            observation, _, done, _, _ = env.step(action)
    return out


def test_registered_as_a_replay_only_policy(sides) -> None:
    train, _ = sides
    policy = make_policy("cloning", train, seed=0)
    assert isinstance(policy, CloningPolicy) and policy.name == "cloning"
    assert "cloning" in REPLAY_ONLY


def test_fits_on_the_train_side_and_plays_the_test_side(sides) -> None:
    train, test = sides
    assert not {s.sample_id for s in train.samples} & {s.sample_id for s in test.samples}
    policy = make_policy("cloning", train, seed=0)
    report = evaluate_policy(policy, test, seed=0)
    assert report.episodes == len(test.samples)
    assert report.scopes["all"].steps == sum(len(test.decision_rows(s)) for s in test.samples)
    assert report.scopes["all"].invalid_steps == 0
    # It both intervenes and keeps listening on the held-out side (not a constant policy).
    assert 0 < report.scopes["all"].intervention_rate < 1


class _Blind:
    """An env stand-in whose privileged accessors fail."""

    def gold(self):
        raise AssertionError("the cloning policy read env.gold() at play time")

    def state(self):
        raise AssertionError("the cloning policy read env.state() at play time")


def test_never_reads_gold_or_state_at_play_time(sides, monkeypatch: pytest.MonkeyPatch) -> None:
    train, test = sides
    policy = make_policy("cloning", train, seed=0)
    blind = _Blind()
    for sample in test.samples:
        observation, _ = test.reset(options={"sample_id": sample.sample_id})
        done = False
        while not done:
            observation, _, done, _, _ = test.step(policy.act(observation, blind))
    # And through evaluate_policy with the env itself: its gold and state raise if anything asks for them.
    monkeypatch.setattr(test, "gold", blind.gold)
    monkeypatch.setattr(test, "state", blind.state)
    evaluate_policy(policy, test, seed=0)


def test_the_gold_of_the_played_env_does_not_change_its_actions(demo: Dataset) -> None:
    """Fit on the train side, then play the test side twice: once as recorded, once with every annotation of the
    test side removed (no strategies, no targets, no emotions): what the policy sees is the same, so it acts the
    same. (The gold of the next row is what the annotations define; the rows' words and speakers stay.)"""
    train = RescueEnv(_side(demo, "train"))
    policy = make_policy("cloning", train, seed=0)
    test = _side(demo, "test")
    stripped = Dataset(
        [
            s.model_copy(
                update={
                    "rows": [
                        r.model_copy(
                            update={"support_strategy": [], "internal_emotion": [], "viewpoints_attitudes": []}
                        )
                        for r in s.rows
                    ]
                }
            )
            for s in test.samples
        ],
        test.source,
        test.sha256,
        test.report,
    )
    first = _actions(policy, RescueEnv(test, sample_order="sequential"), seed=4)
    second = _actions(policy, RescueEnv(stripped, sample_order="sequential"), seed=4)
    assert first == second


def test_deterministic_given_the_seed(sides) -> None:
    train, test = sides
    a, b = CloningPolicy.fit(train, seed=0), CloningPolicy.fit(train, seed=0)
    np.testing.assert_array_equal(a.intervene.coef_, b.intervene.coef_)
    assert _actions(a, test, seed=7) == _actions(b, test, seed=7)
    assert _actions(a, test, seed=7) != _actions(a, test, seed=8)  # the seed drives the sampling
    assert evaluate_policy(a, test, seed=3) == evaluate_policy(b, test, seed=3)


def test_learns_the_timing_in_sample() -> None:
    """In sample on the whole demo: the intervene classifier ranks the gold decision points well above chance
    (AUC > 0.7), the policy intervenes more often where the therapist did than where they did not, and its
    timing F1 beats never's (0) by a margin."""
    from sklearn.metrics import roc_auc_score

    env = RescueEnv(sample_order="sequential")
    policy = make_policy("cloning", env, seed=0)
    features, gold, chosen = [], [], []
    for sample in env.samples:
        observation, _ = env.reset(options={"sample_id": sample.sample_id})
        policy.reset(seed=1)
        done = False
        while not done:
            gold.append(env.gold()["intervene"])  # the test reads the gold; the policy does not
            features.append(policy.features.observation(observation))
            action = policy.act(observation, env)
            chosen.append(bool(action["intervene"]))
            observation, _, done, _, _ = env.step(action)
    gold_, chosen_ = np.asarray(gold), np.asarray(chosen)
    assert roc_auc_score(gold_, policy.intervene.predict_proba(np.asarray(features))[:, 1]) > 0.7
    assert chosen_[gold_].mean() > chosen_[~gold_].mean() + 0.1
    cloning = evaluate_policy(policy, env, seed=0).scopes["all"].timing.f1
    never = evaluate_policy("never", env, seed=0).scopes["all"].timing.f1
    assert never == 0.0 and cloning > 0.5


def test_rescue_v1_and_the_wrong_env(demo: Dataset) -> None:
    train = RescueEnvV1(_side(demo, "train"), sample_order="sequential")
    test = RescueEnvV1(_side(demo, "test"), dynamics=train.dynamics, sample_order="sequential")
    policy = make_policy("cloning", train, seed=0)
    assert policy.features.time_key == "elapsed"
    assert evaluate_policy(policy, test, seed=0).scopes["all"].invalid_steps == 0
    fitted_on_v0 = make_policy("cloning", RescueEnv(_side(demo, "train")), seed=0)
    observation, _ = test.reset(options={"sample_id": test.samples[0].sample_id})
    with pytest.raises(ValueError, match="fitted on Rescue-v0"):
        fitted_on_v0.act(observation, test)
    from rescue_env.envs.sim import RescueSimEnv

    with pytest.raises(ValueError, match="replays"):
        make_policy("cloning", RescueSimEnv(demo, starts="all"))
    with pytest.raises(ValueError, match="fitted on a replay"):
        CloningPolicy.fit(RescueSimEnv(demo, starts="all"))


def test_target_labels() -> None:
    assert target_label(None, 2) is None
    assert target_label(frozenset({1}), 2) == 1
    assert target_label(frozenset({0}), 1) == EVERYONE  # one participant: supporting them is everyone
    assert target_label(frozenset({0, 1}), 2) == EVERYONE
    assert target_label(frozenset({0, 2}), 4) == EVERYONE  # a pair of a family: everyone, as imitation labels it
