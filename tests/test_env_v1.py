"""``Rescue-v1`` and ``RescueFlat-v1``: the API checks, no leak of the conversation's length, the group objective
on F's predicted next state, the new constant policies and the fitted policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rescue_env  # noqa: F401  (registers the ids)
from policies import make_policy
from policies.base import make_action
from policies.fitted import FittedQPolicy
from policies.sb3 import quiet_logger
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.splits import SplitConfig
from rescue_env.dynamics.fitting import fit_on_split
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.replay_v1 import RescueEnvV1
from rescue_env.reward import RewardConfig


@pytest.fixture(scope="module")
def model():
    return fit_on_split(load_dataset("demo"), SplitConfig(split="train"))


def test_ids_build_with_defaults_and_pass_the_checkers():
    check_env(gym.make("Rescue-v1").unwrapped, skip_render_check=True)
    flat = gym.make("RescueFlat-v1")
    check_env(flat.unwrapped, skip_render_check=True)
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    sb3_check_env(flat)
    observation, _ = flat.reset(seed=0)
    assert flat.observation_space.contains(observation)


def test_presets_of_v1():
    combined = RewardConfig.preset("combined", version=1)
    assert (combined.timing, combined.target, combined.strategy, combined.group, combined.kappa) == (1, 0, 0, 1, 0)
    assert RewardConfig.preset("combined").kappa == 0.65  # v0 unchanged
    with pytest.raises(ValueError, match="unknown reward version"):
        RewardConfig.preset("combined", version=7)


def _observations(env: RescueEnv, sample_id: str, steps: int) -> list[dict]:
    observation, _ = env.reset(options={"sample_id": sample_id})
    seen = [observation]
    for _ in range(steps - 1):
        observation, *_ = env.step(make_action(observation, False))
        seen.append(observation)
    return seen


def _truncated(dataset: Dataset, keep: int) -> tuple[Dataset, str]:
    sample = max(dataset.samples, key=lambda s: len(s.rows))
    short = sample.model_copy(update={"rows": sample.rows[:keep]})
    return Dataset(
        [sample, short.model_copy(update={"sample_id": sample.sample_id + "-cut"})],
        dataset.source,
        dataset.sha256,
        dataset.report,
    ), sample.sample_id


@pytest.mark.parametrize(("cls", "leaks"), [(RescueEnvV1, False), (RescueEnv, True)])
def test_no_observation_depends_on_the_rows_still_to_come(model, cls, leaks):
    # A conversation and its truncation must look the same up to the cut; v0's ``position`` fails this, which
    # shows the test can fail.
    dataset, sample_id = _truncated(load_dataset("demo"), keep=20)
    env = cls(dataset, dynamics=model) if cls is RescueEnvV1 else cls(dataset)
    steps = len(env.episode(dataset.get(sample_id + "-cut")).points)
    full, cut = _observations(env, sample_id, steps), _observations(env, sample_id + "-cut", steps)
    same = all(
        all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a) for a, b in zip(full, cut, strict=True)
    )
    assert same is not leaks
    if cls is RescueEnvV1:
        assert "position" not in full[0] and full[1]["elapsed"][0] > full[0]["elapsed"][0]


def test_group_component_is_eq14_on_the_predicted_state(model):
    env = RescueEnvV1(dynamics=model, outcome="mean", sample_order="sequential", info_level="full")
    observation, _ = env.reset(seed=0)
    action = make_action(observation, True, [0], 1)
    expected = env.action_value(action)
    _, reward, _, _, info = env.step(action)
    assert reward == pytest.approx(expected)
    d = np.array(list(info["predicted"]["distress"].values()))
    lam = env.reward_config.lam
    assert info["components"]["group"] == pytest.approx(
        np.mean(1 - d) - 0.5 * info["predicted"]["tension"] - lam * d.max(), abs=1e-5
    )


def test_effect_scale_zero_makes_every_action_equal_for_the_group(model):
    env = RescueEnvV1(dynamics=model, outcome="mean", effect_scale=0.0, reward="group")
    observation, _ = env.reset(seed=1)
    values = {
        env.action_value(make_action(observation, z, slots, s)) for z in (0, 1) for slots in ([0], None) for s in (0, 1)
    }
    assert max(values) - min(values) < 1e-9
    scaled = RescueEnvV1(dynamics=model, outcome="mean", reward="group")
    scaled.reset(seed=1)
    assert len({round(scaled.action_value(make_action(observation, 1, None, s)), 9) for s in (0, 1, 2)}) > 1


def test_sampled_outcomes_are_seeded(model):
    def rewards(seed):
        env = RescueEnvV1(dynamics=model)
        observation, _ = env.reset(seed=seed)
        out = []
        for _ in range(5):
            observation, reward, *_ = env.step(make_action(observation, True))
            out.append(reward)
        return out

    assert rewards(4) == rewards(4)


def test_new_constant_policies():
    env = RescueEnvV1(sample_order="sequential")
    observation, _ = env.reset(seed=0)
    last = make_policy("last-speaker", env).act(observation, env)
    slot = int(observation["last_speaker"])
    assert last["intervene"] == 1 and (last["target"][slot] == 1 if slot < 6 else last["target"][-1] == 1)
    vocal = make_policy("most-vocal", env)
    vocal.reset()
    assert vocal.act(observation, env)["intervene"] == 1 and vocal.counts.sum() <= 1


def test_fitted_policy_is_trained_on_rewards_and_reads_only_the_observation(tmp_path, model):
    env = RescueEnvV1(dynamics=model, sample_order="sequential")
    policy = FittedQPolicy.fit(env)
    path = tmp_path / "q.json"
    policy.save(path)
    loaded = FittedQPolicy.load(path)
    observation, _ = env.reset(seed=0)
    a, b = loaded.act(observation, env), policy.act(observation, env)
    assert a["intervene"] == b["intervene"] and a["strategy"] == b["strategy"]
    np.testing.assert_array_equal(a["target"], b["target"])
    from benchmarks.rollout import evaluate_policy

    trained = evaluate_policy(policy, env).scopes["all"].returns_by_preset["combined"]
    never = evaluate_policy("never", env).scopes["all"].returns_by_preset["combined"]
    assert trained > never  # on the conversations it was fitted on


def test_maskable_ppo_trains_on_the_flat_env():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = gym.make("RescueFlat-v1")
    agent = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, verbose=0)
    agent.set_logger(quiet_logger())
    agent.learn(64)
    observation, _ = env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    action, _ = agent.predict(observation, action_masks=env.get_wrapper_attr("action_masks")(), deterministic=True)
    assert env.action_space.contains(action) and masks["target"].any()


# ----- the fast path (issue 14): F folded per decision point, its noise drawn per episode -----------------------


def _reference_group(env: RescueEnvV1, action: dict, rng: np.random.Generator | None) -> float:
    """The group component as ``OutcomeModel`` computes it on the point's full feature matrices (a draw with
    ``rng``, or the mean when None)."""
    from rescue_env.dynamics.outcome import support_action
    from rescue_env.dynamics.state import objective

    intervene, recipients, strategy, _ = env._decode(action)
    state, support = env._point_state(), support_action(intervene, recipients, strategy)
    if rng is None:
        d, g = env.dynamics.mean(state, support, env.effect_scale)
    else:
        d, g = env.dynamics.sample(state, support, rng, env.effect_scale)
    c = env.reward_config
    return objective(d, g, env.dynamics.state.tension_weight, c.lam) - c.kappa * float(intervene)


def _generator_copy(env: RescueEnvV1) -> np.random.Generator:
    copy = np.random.default_rng()
    copy.bit_generator.state = env.np_random.bit_generator.state
    return copy


@pytest.mark.parametrize("settings", [{}, {"effect_scale": 0.5}, {"outcome": "mean"}], ids=["sample", "scaled", "mean"])
def test_fast_group_component_equals_the_outcome_model(model, settings) -> None:
    env = RescueEnvV1(dynamics=model, reward="group", info_level="full", **settings)
    env.action_space.seed(0)
    checked = 0
    for episode in range(4):
        env.reset(seed=episode)
        reference = _generator_copy(env)
        terminated, steps = False, 0
        while not terminated:
            action = env.action_space.sample()
            expected = _reference_group(env, action, None if settings.get("outcome") == "mean" else reference)
            _, reward, terminated, _, info = env.step(action)
            assert reward == pytest.approx(expected, abs=1e-9) and info["components"]["group"] == reward
            checked, steps = checked + 1, steps + 1
            if episode == 3 and steps == 2:
                break  # left early: the generator is where one draw per step would have left it
        assert env.np_random.bit_generator.state == reference.bit_generator.state
    assert checked > 20


def test_noise_drawn_ahead_is_invisible_in_np_random(model) -> None:
    """Read mid-episode, ``np_random`` is where one draw per step would have left it, and the steps after the
    read go on drawing the same numbers."""
    env = RescueEnvV1(dynamics=model, reward="group")
    env.action_space.seed(1)
    env.reset(seed=7, options={"sample_id": env.samples[0].sample_id})
    reference = _generator_copy(env)
    for step in range(len(env.episode(env.samples[0]).points)):
        action = env.action_space.sample()
        expected = _reference_group(env, action, reference)
        assert env.step(action)[1] == pytest.approx(expected, abs=1e-9)
        if step % 2 == 0:
            assert env.np_random.bit_generator.state == reference.bit_generator.state


def test_release_v1_group_component_equals_the_outcome_model(text_file) -> None:
    env = RescueEnvV1(data=str(text_file), reward="group", info_level="full")
    env.action_space.seed(0)
    for sample in env.samples[::20]:
        env.reset(seed=0, options={"sample_id": sample.sample_id})
        reference = _generator_copy(env)
        terminated = False
        while not terminated:
            action = env.action_space.sample()
            expected = _reference_group(env, action, reference)
            _, reward, terminated, _, _ = env.step(action)
            assert reward == pytest.approx(expected, abs=1e-9)
        assert env.np_random.bit_generator.state == reference.bit_generator.state
