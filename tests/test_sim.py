"""``RescueSim-v0`` and ``RescueSimFlat-v0``: the API checks, determinism, the closed loop's dynamics by hand,
rewards, episode ends, nothing recorded after the opening in the observation, and the sim's policies."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import make_row
from gymnasium.utils.env_checker import check_env

import rescue_env  # noqa: F401  (registers the ids)
from policies import POLICIES, REPLAY_ONLY, SIM_V1_ONLY, make_policy
from policies.base import make_action
from policies.imitation import ImitationPolicy
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.schema import Sample
from rescue_env.data.splits import SplitConfig
from rescue_env.dynamics.fitting import fit_on_split
from rescue_env.dynamics.outcome import (
    DISTRESS_FEATURES,
    NO_INTERVENTION,
    PAIR_FEATURES,
    LinearHead,
    OutcomeModel,
    SupportAction,
)
from rescue_env.dynamics.simulation import (
    SessionRates,
    advance,
    describe_state,
    fit_session_rates,
    perceive,
    start_state,
)
from rescue_env.dynamics.state import StateConfig, objective, snapshots
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.replay_v1 import RescueEnvV1
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.envs.wrappers import SimFlatObservation, make_sim_flat_env
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


@pytest.fixture(scope="module")
def demo() -> Dataset:
    return load_dataset("demo")


@pytest.fixture(scope="module")
def model(demo) -> OutcomeModel:
    return fit_on_split(demo, SplitConfig(split="train"))


def constant_model(distress: float, viewpoint: float, sigma: float = 0.0) -> OutcomeModel:
    """An F that predicts ``distress`` for everyone and ``viewpoint`` for every existing pair, whatever happens."""

    def head(features: list[str], value: float) -> LinearHead:
        return LinearHead(features=features, coef=[0.0] * len(features), intercept=value, alpha=1, sigma=sigma, n=10)

    return OutcomeModel(distress=head(DISTRESS_FEATURES, distress), viewpoint=head(PAIR_FEATURES, viewpoint))


ALWAYS = SessionRates(
    emotion_speaker=1, emotion_other=1, viewpoint_speaker=1, viewpoint_other=1, reply_recipient=1, steps=1
)
NEVER = SessionRates(
    emotion_speaker=0, emotion_other=0, viewpoint_speaker=0, viewpoint_other=0, reply_recipient=0, steps=1
)


def _sample() -> Sample:
    emotion = {"person": "Ana", "emotion_description": "feels hurt", "intensity": 8}
    view = {"source": "Ben", "target": "Ana", "viewpoint": "she blames me", "attitude": "resentful"}
    reframe = {"provider": "Therapist", "target": ["Ana"], "strategy_type": "reframe", "strategy_content": "x"}
    rows = [
        make_row(0, "Ana", internal_emotion=[emotion]),
        make_row(1, "Ben", viewpoints_attitudes=[view]),
        make_row(2, "Therapist", support_strategy=[reframe]),
        make_row(3, "Ana"),
        make_row(4, "Ben"),
        make_row(5, "Ana"),
        make_row(6, "Ben"),
    ]
    return Sample.model_validate({"sample_id": "demo_ana_and_ben/001", "scenario": "couple", "rows": rows})


def _dataset(*samples: Sample) -> Dataset:
    demo = load_dataset("demo")
    return Dataset(list(samples), "tiny", "0" * 64, demo.report)


# ----- API ---------------------------------------------------------------------------------------------------


def test_ids_build_with_defaults_and_pass_the_checkers():
    env = gym.make("RescueSim-v0")
    check_env(env.unwrapped, skip_render_check=True)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    flat = gym.make("RescueSimFlat-v0")
    check_env(flat.unwrapped, skip_render_check=True)
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    sb3_check_env(flat)
    vector = gym.make_vec("RescueSim-v0", num_envs=2, vectorization_mode="sync")
    observations, _ = vector.reset(seed=0)
    assert observations["distress"].shape == (2, 6)
    _, rewards, *_ = vector.step(vector.action_space.sample())
    assert rewards.shape == (2,) and np.isfinite(rewards).all()


def test_flat_features_hold_the_perceived_state():
    flat = make_sim_flat_env()
    vector, _ = flat.reset(seed=3)
    wrapper = flat.env
    assert isinstance(wrapper, SimFlatObservation)
    observation = flat.unwrapped._observation()  # a fresh perception of the same state
    names = wrapper.feature_names
    assert names[wrapper.feature_slices["distress"].start] == "distress[0]"
    assert wrapper.feature_slices["stance"].stop == vector.size
    assert "elapsed[steps]" in names and "elapsed[interventions]" in names
    features = wrapper.observation(observation)
    np.testing.assert_allclose(features[wrapper.feature_slices["distress"]], observation["distress"])
    np.testing.assert_allclose(features[wrapper.feature_slices["stance"]], observation["stance"].ravel())


def _trajectory(env: RescueSimEnv, seed: int, sample_id: str | None = None, steps: int = 50):
    options = {"sample_id": sample_id} if sample_id else None
    observation, info = env.reset(seed=seed, options=options)
    rng = np.random.default_rng(seed)
    seen = [observation]
    rewards = []
    for _ in range(steps):
        action = make_action(observation, bool(rng.integers(2)), [int(rng.integers(2))], int(rng.integers(10)))
        observation, reward, terminated, truncated, info = env.step(action)
        seen.append(observation)
        rewards.append(reward)
        if terminated or truncated:
            break
    return seen, rewards, info


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(np.asarray(x[k]), np.asarray(y[k])) for k in x) for x, y in zip(a, b)
    )


def test_deterministic_given_the_seed(demo, model):
    env = RescueSimEnv(demo, starts="all", dynamics=model)
    first, rewards_a, _ = _trajectory(env, seed=5)
    second, rewards_b, _ = _trajectory(env, seed=5)
    assert _same(first, second) and rewards_a == rewards_b
    other, rewards_c, _ = _trajectory(env, seed=6)
    assert not (_same(first, other) and rewards_a == rewards_c)


def test_no_observation_depends_on_the_rows_after_the_opening(demo, model):
    # A conversation and a copy with different rows after the opening must play identically (same seed, same
    # actions) for as many steps as the shorter has: only the number of steps comes from the source.
    sample = max(demo.samples, key=lambda s: len(s.rows))
    rows = list(sample.rows)
    changed = rows[:12] + [r.model_copy(update={"dialogue_cleaned": "something else entirely"}) for r in rows[12:30]]
    other = sample.model_copy(update={"rows": changed, "sample_id": sample.sample_id + "-other"})
    dataset = Dataset([sample, other], demo.source, demo.sha256, demo.report)
    env = RescueSimEnv(dataset, starts="all", dynamics=model, rates=fit_session_rates(demo.samples), opening=8)
    steps = env.episode(other).rows.__len__()
    full, rewards_full, _ = _trajectory(env, seed=1, sample_id=sample.sample_id, steps=steps)
    cut, rewards_cut, _ = _trajectory(env, seed=1, sample_id=other.sample_id, steps=steps)
    assert _same(full[: len(cut)], cut) and rewards_full[: len(rewards_cut)] == rewards_cut
    first = env.episode(sample).rows[0]  # the opening's last row (0-based); rendered rows are 1-based
    assert f"\n[{first + 1}] " in full[0]["context"] and f"\n[{first + 2}] " not in full[0]["context"]


# ----- dynamics by hand --------------------------------------------------------------------------------------


def test_session_rates_by_hand():
    rates = fit_session_rates([_sample()])
    # Decision rows 0, 1, 3, 4, 5 (client rows followed by a row). Consecutive pairs: (0,1) speaker Ben, no
    # fresh emotion; (1,3) Ana, none; (3,4), (4,5) none: emotion_speaker = (0 + 1) / (4 + 2), other likewise.
    assert rates.emotion_speaker == pytest.approx(1 / 6) and rates.emotion_other == pytest.approx(1 / 6)
    # Ben's view of Ana exists from row 1: pairs (1,3), (3,4), (4,5), its source Ben speaking at 4 only; never
    # refreshed. After row 1 the therapist supports Ana and Ana speaks next (row 3): reply_recipient 2 / 3.
    assert rates.viewpoint_speaker == pytest.approx(1 / 3) and rates.viewpoint_other == pytest.approx(1 / 4)
    assert rates.reply_recipient == pytest.approx(2 / 3) and rates.steps == 4


def _start(sample: Sample, row: int = 1):
    people = ("Ana", "Ben")
    snapshot = snapshots(sample, people, StateConfig())[row]
    return start_state(sample, people, snapshot, row, 1, False, None)


def test_advance_moves_refreshed_values_to_fs_draw_and_keeps_the_others():
    state = _start(_sample())
    np.testing.assert_allclose(state.distress_raw, [0.8 * state.distress_raw[0] / 0.8, 0.0])
    assert state.g_raw[1, 0] > 0.5 and state.viewpoint_row[1, 0] == 1
    rng = np.random.default_rng(0)
    F = constant_model(0.3, 0.2)
    moved = advance(state, SupportAction(True, frozenset({0}), "reframe"), F, ALWAYS, rng)
    np.testing.assert_allclose(moved.distress_raw, [0.3, 0.3])
    assert moved.g_raw[1, 0] == pytest.approx(0.2) and moved.g_raw[0, 1] == 0.0  # no new viewpoint appears
    assert moved.row == state.row + 2 and moved.last_speaker == 0  # therapist row + reply of the recipient
    still = advance(state, NO_INTERVENTION, F, NEVER, rng)
    np.testing.assert_allclose(still.distress_raw, state.distress_raw)
    assert still.row == state.row + 1 and np.array_equal(still.g_raw, state.g_raw)
    # The objective reads the latest values, not aged ones: many steps without a refresh change nothing.
    for _ in range(40):
        still = advance(still, NO_INTERVENTION, F, NEVER, rng)
    np.testing.assert_allclose(still.values()[0], state.values()[0])


def test_next_speaker_follows_the_opening_weights():
    state = _start(_sample(), row=5)
    np.testing.assert_allclose(state.weights, [1 + 3, 1 + 2])  # rows 0-5: Ana 0, 3, 5; Ben 1, 4
    rng = np.random.default_rng(0)
    from rescue_env.dynamics.simulation import next_speaker

    draws = [next_speaker(state, NO_INTERVENTION, NEVER, rng) for _ in range(4000)]
    assert np.mean(np.asarray(draws) == 0) == pytest.approx(4 / 7, abs=0.03)
    to_ben = SupportAction(True, frozenset({1}), "join")
    assert all(next_speaker(state, to_ben, ALWAYS, rng) == 1 for _ in range(50))


def test_perception_and_words_by_hand():
    rng = np.random.default_rng(0)
    d, g = perceive(np.array([0.74, 0.06]), np.array([[0.3, 0.81], [0.5, 0.0]]), 0.0, rng)
    np.testing.assert_allclose(d, [0.7, 0.1])
    np.testing.assert_allclose(g, [[0.0, 0.8], [0.5, 0.0]])
    text = describe_state(["Ana", "Ben"], d, g)
    assert text == (
        "Ana seems very upset (about 7/10) and sees Ben negatively. Ben seems calm (about 1/10) and sees Ana with "
        "some tension."
    )
    noisy, _ = perceive(np.full(1000, 0.5), np.zeros((2, 2)), 0.1, rng)
    assert 0.08 < noisy.std() < 0.12 and set(np.round(noisy * 10) / 10) == set(noisy)


def test_rewards_episode_end_and_calm_bonus():
    sample = _sample()
    dataset = _dataset(sample)
    F = constant_model(0.3, 0.2)
    env = RescueSimEnv(dataset, starts="all", dynamics=F, rates=ALWAYS, opening=2, calm_threshold=0.0)
    observation, info = env.reset(seed=0)
    # The opening ends at decision row 1 (rows 0-1); then decision rows 3, 4, 5: four steps in all.
    assert "steps" not in info and env.episode(sample).rows == (1, 3, 4, 5) and env.limit == 4
    observation, reward, terminated, truncated, info = env.step(make_action(observation, False))
    d, g = np.array([0.3, 0.3]), np.array([[0.0, 0.0], [0.2, 0.0]])
    assert reward == pytest.approx(objective(d, g, 0.5, 1.0))
    steps = 1
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(make_action(observation, False))
        steps += 1
    assert truncated and not terminated and steps == 4 and info["episode"]["length"] == 4
    assert info["episode"]["final_max_distress"] == pytest.approx(0.3)
    # Calm: distress 0.1 < 0.2 ends the episode at the first step, with the calm reward for the 3 steps left.
    calm = RescueSimEnv(dataset, starts="all", dynamics=constant_model(0.1, 0.0), rates=ALWAYS, opening=2)
    observation, _ = calm.reset(seed=0)
    observation, reward, terminated, truncated, info = calm.step(make_action(observation, False))
    base = objective(np.array([0.1, 0.1]), np.zeros((2, 2)), 0.5, 1.0)
    assert terminated and not truncated and info["episode"]["calm"]
    assert info["calm_bonus"] == pytest.approx(base * (0.99 + 0.99**2 + 0.99**3))
    assert reward == pytest.approx(base + info["calm_bonus"])
    with pytest.raises(RuntimeError, match="ended"):
        calm.step(make_action(observation, False))  # terminated early: no step after the end


def test_max_steps_and_bad_arguments(demo, model):
    env = RescueSimEnv(demo, starts="all", dynamics=model, max_steps=3)
    _, _, info = _trajectory(env, seed=0)
    assert info["episode"]["length"] <= 3
    for kwargs in ({"starts": "valid"}, {"perception_noise": -1}, {"gamma": 2}, {"opening": 0}, {"outcome": "x"}):
        with pytest.raises(ValueError):
            RescueSimEnv(demo, dynamics=model, **kwargs)
    with pytest.raises(ValueError, match="no conversation"):
        RescueSimEnv(demo, dynamics=model, opening=10_000)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside"):
        env.step({"intervene": 1, "target": np.zeros(3, dtype=np.int8), "strategy": 0})
    with pytest.raises(RuntimeError, match="reset"):
        RescueSimEnv(demo, dynamics=model).step({})


def test_invalid_choices_are_ignored_and_counted():
    env = RescueSimEnv(
        _dataset(_sample()), starts="all", dynamics=constant_model(0.3, 0.2), rates=ALWAYS, opening=2, info_level="full"
    )
    env.reset(seed=0)
    target = np.zeros(7, dtype=np.int8)
    target[4] = 1  # an absent slot
    boundary = ALL_STRATEGY_KEYS.index("boundary")  # family only
    _, _, _, _, info = env.step({"intervene": 1, "target": target, "strategy": boundary})
    assert len(info["invalid"]) == 2 and info["chosen"]["target"] == [] and info["chosen"]["strategy"] is None
    assert info["n_invalid"] == 2
    env.info_level = "basic"
    _, _, _, _, info = env.step({"intervene": 1, "target": target, "strategy": boundary})
    assert info == {"step": 1, "n_invalid": 2}


def test_recorded_action_is_what_the_therapist_did():
    env = RescueSimEnv(_dataset(_sample()), starts="all", dynamics=constant_model(0.3, 0.2), rates=NEVER, opening=2)
    env.reset(seed=0)
    recorded = env.recorded_action()  # after row 1 the therapist supports Ana with reframe
    assert recorded["intervene"] == 1 and recorded["target"].tolist()[:2] == [1, 0]
    assert recorded["strategy"] == ALL_STRATEGY_KEYS.index("reframe")
    env.step(recorded)
    assert env.recorded_action()["intervene"] == 0  # after row 3 Ben speaks


# ----- policies ----------------------------------------------------------------------------------------------


def test_policies_play_the_sim_and_refuse_the_wrong_env(demo, model):
    env = RescueSimEnv(demo, starts="all", dynamics=model)
    for name in POLICIES:
        if name in REPLAY_ONLY or name in SIM_V1_ONLY:
            with pytest.raises(ValueError, match="replays" if name in REPLAY_ONLY else "RescueSim-v1"):
                make_policy(name, env)
            continue
        policy = make_policy(name, env, seed=0)
        observation, _ = env.reset(seed=1)
        policy.reset(seed=1)
        done = False
        while not done:
            action = policy.act(observation, env)
            assert env.action_space.contains(action), name
            observation, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            assert info["n_invalid"] == 0, name
    with pytest.raises(ValueError, match="RescueSim-v0 only"):
        make_policy("recorded", RescueEnv(demo))


class _Blind:
    """The env as an observation-only policy may see it: every privileged accessor fails the test."""

    def __getattr__(self, name: str):
        if name in ("state", "recorded_action", "best_group_action", "expected_reward", "dynamics", "_state"):
            raise AssertionError(f"an observation-only policy read env.{name}")
        raise AttributeError(name)


@pytest.mark.parametrize("name", ["perceived", "imitation", "random", "never", "last-speaker"])
def test_observation_only_policies_never_read_the_state(demo, model, name):
    env = RescueSimEnv(demo, starts="all", dynamics=model)
    policy = make_policy(name, env, seed=0)
    observation, _ = env.reset(seed=4)
    done = False
    while not done:
        observation, _, terminated, truncated, _ = env.step(policy.act(observation, _Blind()))
        done = terminated or truncated


def test_group_greedy_maximises_the_expected_reward(demo, model):
    env = RescueSimEnv(demo, starts="all", dynamics=model)
    env.reset(seed=2)
    best = env.best_group_action()
    value = env.expected_reward(*best)
    assert value >= env.expected_reward(False, frozenset(), 0) - 1e-12
    assert value >= env.expected_reward(True, frozenset({0}), ALL_STRATEGY_KEYS.index("track")) - 1e-12


def test_perceived_heuristic_rules():
    policy = make_policy(
        "perceived", RescueSimEnv(_dataset(_sample()), starts="all", dynamics=constant_model(0, 0), opening=2)
    )
    base = {
        "participants": np.array([1, 1, 0, 0, 0, 0]),
        "target_mask": np.array([1, 1, 0, 0, 0, 0, 1]),
        "strategy_mask": np.array([1] * 10 + [0]),
        "distress": np.array([0.2, 0.6, 0, 0, 0, 0]),
        "stance": np.zeros((6, 6)),
    }
    action = policy.act(base, None)
    assert action["intervene"] == 1 and action["target"].tolist()[:2] == [0, 1]
    assert action["strategy"] == ALL_STRATEGY_KEYS.index("join")
    stance = np.zeros((6, 6))
    stance[0, 1] = stance[1, 0] = 0.8
    action = policy.act({**base, "stance": stance}, None)
    assert action["target"].tolist()[-1] == 1 and action["strategy"] == ALL_STRATEGY_KEYS.index("repair")
    assert policy.act({**base, "distress": np.zeros(6)}, None)["intervene"] == 0


def test_imitation_learns_the_recorded_frequencies(demo, model):
    env = RescueSimEnv(demo, starts="all", dynamics=model)
    policy = ImitationPolicy.fit(env, seed=0)
    recorded = np.mean([a.intervene for s in env.samples for a in env.episode(s).recorded])
    chosen = []
    for seed in range(6):
        observation, _ = env.reset(seed=seed)
        policy.reset(seed=seed)
        done = False
        while not done:
            action = policy.act(observation, env)
            chosen.append(action["intervene"])
            observation, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    assert abs(np.mean(chosen) - recorded) < 0.2


# ----- the hot path ------------------------------------------------------------------------------------------


def test_episode_kernel_equals_the_reference_outcome_model(model):
    # F specialised to an episode (rescue_env.dynamics.kernel) against OutcomeModel on the full features, on random
    # states and actions: the same means, and the same draws from the same generator.
    from rescue_env.dynamics.kernel import EpisodeKernel

    rng = np.random.default_rng(0)
    for trial in range(300):
        state = _random_state(rng, trial, unset_viewpoints=0.5, equal_weights=True)
        n = len(state.distress_raw)
        recipients = frozenset(i for i in range(n) if rng.random() < 0.5) or frozenset({0})
        strategy = ALL_STRATEGY_KEYS[int(rng.integers(0, 11))] if rng.random() < 0.9 else None
        action = NO_INTERVENTION if rng.random() < 0.3 else SupportAction(True, recipients, strategy)
        scale = (1.0, 0.0, 0.5, 2.0)[trial % 4]
        kernel = EpisodeKernel.build(model, n, state.family, state.pattern)
        point = state.point(model.state)
        for reference, fast in (
            (model.mean(point, action, scale), kernel.mean(state, action, scale)),
            (
                model.sample(point, action, np.random.default_rng(trial), scale),
                kernel.sample(state, action, np.random.default_rng(trial), scale),
            ),
        ):
            np.testing.assert_allclose(fast[0], reference[0], atol=1e-12)
            np.testing.assert_allclose(fast[1], reference[1], atol=1e-12)


def test_bench_env_script_prints_every_figure():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_env.py"
    args = [sys.executable, str(script), "--data", "demo", "--steps", "200", "--repeat", "1", "--vector", "2"]
    args += ["--ids", "RescueSim-v0", "Rescue-v1", "--no-baseline", "--json"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    figures = report["figures"]["new"]
    for env_id in ("CartPole-v1", "RescueSim-v0", "Rescue-v1"):
        for key in ("single", "vec", "vec+sample"):
            assert figures[env_id][key] > 0 and figures[env_id][f"{key}_reference"] > 0
    passes = report["first_pass"]["new"]
    assert passes["Rescue-v1"]["steps"] == sum(len(RescueEnvV1().episode(s).points) for s in RescueEnvV1().samples)
    assert passes["RescueSim-v0"]["episodes"] == len(RescueSimEnv().samples) and passes["RescueSim-v0"]["pass_s"] > 0


def test_calibration_script_bins_by_hand_and_writes_its_files(tmp_path):
    import json
    import sys
    from pathlib import Path

    import pandas as pd

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        import sim_calibration
    finally:
        sys.path.pop(0)
    np.testing.assert_allclose(sim_calibration.bin_means([1, 2, 3, 4], 2), [1.5, 3.5])
    np.testing.assert_allclose(sim_calibration.bin_means([1, 2, 3], 4), [1, 2, 3, np.nan])
    out = tmp_path / "calibration"
    args = ["--data", "demo", "--seeds", "2", "--bins", "4", "--bootstrap", "50", "--output", str(out)]
    assert sim_calibration.main(args) == 0
    record = json.loads((out / "calibration.json").read_text())
    assert record["data"]["sha256"] and record["versions"]["python"] and record["starts"] >= 1
    assert set(record["verdict"]) >= {"mean_abs_gap", "largest_gap", "bins_inside_observed_ci", "within_tolerance"}
    frame = pd.read_csv(out / "calibration.csv")
    assert set(frame["course"]) == {"observed", "recorded actions", "never intervene"} and len(frame) == 12
    assert (out / "calibration.png").stat().st_size > 0


# ----- the fast path (issue 14) --------------------------------------------------------------------------------


def _describe_reference(names, distress, g) -> str:
    """``describe_state`` as first written: the bands looked up for every value."""
    from rescue_env.dynamics.simulation import DISTRESS_WORDS, STANCE_WORDS

    def band(value, bands):
        return next(words for bound, words in bands if value < bound)

    lines = []
    for i, name in enumerate(names):
        sentence = f"{name} {band(float(distress[i]), DISTRESS_WORDS)} (about {round(10 * float(distress[i]))}/10)"
        stances = [
            f"{names[j]} {band(float(g[i, j]), STANCE_WORDS)}"
            for j in range(len(names))
            if j != i and band(float(g[i, j]), STANCE_WORDS) is not None
        ]
        if stances:
            sentence += " and sees " + ", ".join(stances)
        lines.append(sentence + ".")
    return " ".join(lines)


def test_state_words_equal_the_band_lookup():
    rng = np.random.default_rng(0)
    names = ["Alan", "Evelyn", "Sam"]
    for _ in range(200):
        raw_d, raw_g = rng.random(3), rng.random((3, 3))
        for d, g in ((np.round(raw_d, 1), np.round(raw_g, 1)), (raw_d, raw_g)):  # readings, then any values
            assert describe_state(names, d, g) == _describe_reference(names, d, g)


def test_kernel_clipping_equals_numpy():
    from rescue_env.dynamics.kernel import _clipped

    rng = np.random.default_rng(1)
    for n in (1, 2, 4):
        d, g = rng.normal(0.5, 0.8, n), rng.normal(0.5, 0.8, (n, n))
        rows = rng.integers(-1, 3, (n, n))
        d_out, g_out = _clipped(d.tolist(), g.tolist(), rows)
        assert d_out.tolist() == np.clip(d, 0.0, 1.0).tolist()
        assert g_out.tolist() == (np.clip(g, 0.0, 1.0) * (rows >= 0)).tolist()


def test_basic_and_full_info_play_the_same_session(demo, model):
    def play(level: str) -> list:
        env = RescueSimEnv(demo, starts="all", dynamics=model, info_level=level)
        env.action_space.seed(2)
        observation, _ = env.reset(seed=2)
        trace = []
        for _ in range(40):
            observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
            trace.append((observation["text"], observation["distress"].tolist(), reward, terminated, truncated, info))
            if terminated or truncated:
                env.reset()
        return trace

    for basic, full in zip(play("basic"), play("full")):
        assert basic[:5] == full[:5]
        info_b, info_f = basic[5], full[5]
        assert set(info_b) - {"episode", "calm_bonus"} == {"step", "n_invalid"}
        assert info_b["step"] == info_f["step"] and info_b["n_invalid"] == len(info_f["invalid"])
        assert info_b.get("episode") == info_f.get("episode") and "chosen" in info_f


def test_starts_are_precomputed_once_per_process(demo, model):
    first, second = (RescueSimEnv(demo, starts="all", dynamics=model) for _ in range(2))
    sample = first.samples[0]
    assert first.episode(sample) is second.episode(sample)
    other = RescueSimEnv(demo, starts="all", dynamics=model, opening=4)  # other settings: precomputed again
    assert other.episode(sample) is not first.episode(sample)
    with pytest.raises(ValueError, match="read-only"):
        first.episode(sample).start.distress_raw[0] = 1.0


# ----- the step on lists (issue 14): the same numbers as the numpy step it replaced ------------------------------


def _random_state(rng: np.random.Generator, trial: int, unset_viewpoints: float = 0.4, equal_weights: bool = False):
    """A random sim state of 1-6 participants; ``equal_weights``: every speaking weight 1 (nothing drawn)."""
    from rescue_env.dynamics.simulation import SimState

    n, row = int(rng.integers(1, 7)), int(rng.integers(0, 60))
    emotion_row = np.where(rng.random(n) < 0.3, -1, rng.integers(0, row + 1, n))
    viewpoint_row = np.where(rng.random((n, n)) < unset_viewpoints, -1, rng.integers(0, row + 1, (n, n)))
    np.fill_diagonal(viewpoint_row, -1)
    return SimState(
        np.where(emotion_row >= 0, rng.random(n), 0.0),
        emotion_row,
        np.where(viewpoint_row >= 0, rng.random((n, n)), 0.0),
        viewpoint_row,
        row,
        int(rng.integers(0, n)) if rng.random() < 0.8 else None,
        bool(trial % 2),
        (None, "attack_attack", "boundary_hierarchy_strain")[trial % 3],
        np.ones(n) if equal_weights else rng.integers(1, 9, n).astype(float),
    )


def test_advance_live_equals_advance(model):
    # advance_live (lists, in place, batched draws) against advance (numpy): the same state to the bit and the
    # generator left in the same state, on random states, actions, rates, scales, with F's draw and its mean.
    from rescue_env.dynamics.simulation import LiveState, advance_live, episode_dynamics

    rng = np.random.default_rng(3)
    for trial in range(400):
        state = _random_state(rng, trial)
        n = state.n
        p = rng.random(5)
        rates = SessionRates(
            emotion_speaker=p[0], emotion_other=p[1], viewpoint_speaker=p[2], viewpoint_other=p[3],
            reply_recipient=p[4], steps=1,
        )  # fmt: skip
        dynamics = episode_dynamics(model, rates, state)
        live = LiveState.of(state)
        for step in range(4):
            recipients = frozenset(i for i in range(n) if rng.random() < 0.5)
            strategy = ALL_STRATEGY_KEYS[int(rng.integers(0, 11))] if rng.random() < 0.9 else None
            action = NO_INTERVENTION if rng.random() < 0.3 else SupportAction(bool(recipients), recipients, strategy)
            scale, draw = (1.0, 0.0, 0.5, 2.0)[trial % 4], step % 3 != 2
            old_rng, new_rng = np.random.default_rng(trial * 10 + step), np.random.default_rng(trial * 10 + step)
            state = advance(state, action, model, rates, old_rng, scale, draw=draw, dynamics=dynamics)
            advance_live(live, action, dynamics, rates.reply_recipient, new_rng, scale, draw=draw)
            rebuilt = live.state(state)
            for name in ("distress_raw", "emotion_row", "g_raw", "viewpoint_row"):
                expected, got = getattr(state, name), getattr(rebuilt, name)
                assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), (trial, step, name)
            assert (rebuilt.row, rebuilt.last_speaker) == (state.row, state.last_speaker)
            assert new_rng.bit_generator.state == old_rng.bit_generator.state


def test_perceive_lists_equals_perceive():
    from rescue_env.dynamics.simulation import describe_levels, perceive_lists

    rng = np.random.default_rng(4)
    for trial in range(300):
        n = int(rng.integers(1, 7))
        d, g = rng.random(n), np.where(rng.random((n, n)) < 0.5, rng.random((n, n)), 0.0)
        noise = (0.0, 0.1, 0.4, 2.0)[trial % 4]
        old_rng, new_rng = np.random.default_rng(trial), np.random.default_rng(trial)
        seen_d, seen_g = perceive(d, g, noise, old_rng)
        levels, stances = perceive_lists(d.tolist(), g.tolist(), noise, new_rng)
        assert np.array(levels).tobytes() == seen_d.tobytes() and np.array(stances).tobytes() == seen_g.tobytes()
        assert new_rng.bit_generator.state == old_rng.bit_generator.state
        names = [f"P{i}" for i in range(n)]
        assert describe_levels(names, levels, stances) == describe_state(names, seen_d, seen_g)


def test_objective_of_lists_equals_numpy():
    from rescue_env.dynamics.state import numpy_sum, objective_of_lists

    rng = np.random.default_rng(5)
    for size in range(1, 300):  # numpy's pairwise sum: below 8, up to 128 (8 partial sums), above (halves)
        values = rng.normal(size=size) * 10.0 ** rng.integers(-3, 4, size)
        assert numpy_sum(values.tolist()) == float(values.sum()), size
    assert numpy_sum([0.1, 0.2, 0.3]) == (0.1 + 0.2) + 0.3 and numpy_sum([-0.0]) == 0.0
    for trial in range(500):
        n = int(rng.integers(1, 7))
        d, g = rng.random(n), rng.random((n, n))
        if trial % 2:
            np.fill_diagonal(g, 0.0)
        weight, lam = float(rng.random()), float(rng.random() * 2)
        assert objective_of_lists(d.tolist(), g.tolist(), weight, lam) == objective(d, g, weight, lam)


class _ReferenceSim(RescueSimEnv):
    """``RescueSimEnv``'s step as written before the step on lists (commit aba3db1): numpy arrays through
    ``advance``, ``perceive``, ``describe_state`` and ``objective``, one draw per call."""

    def reset(self, *, seed=None, options=None):
        self._reference = None
        observation, info = super().reset(seed=seed, options=options)
        self._reference = self._episode.start
        return observation, info

    def _observation(self):
        episode, slots = self._episode, self.max_participants
        state = episode.start if self._reference is None else self._reference
        seen_d, seen_g = perceive(*state.values(), self.perception_noise, self.np_random)
        distress, stance = np.zeros(slots, dtype=np.float32), np.zeros((slots, slots), dtype=np.float32)
        distress[: state.n], stance[: state.n, : state.n] = seen_d, seen_g
        from rescue_env.data.schema import SCENARIOS

        return {
            "context": episode.context,
            "text": describe_state(episode.names, seen_d, seen_g)[:2048],
            "distress": distress,
            "stance": stance,
            "elapsed": np.array([self._step, self._interventions], dtype=np.float32),
            "scenario": SCENARIOS.index(episode.scenario),
            "participants": episode.present.copy(),
            "last_speaker": slots + 2 if state.last_speaker is None else state.last_speaker,
            "target_mask": episode.target_mask.copy(),
            "strategy_mask": episode.strategy_mask.copy(),
        }

    def step(self, action):
        from dataclasses import replace

        from rescue_env.dynamics.outcome import support_action
        from rescue_env.dynamics.state import tension
        from rescue_env.reward import discounted_return

        episode = self._episode
        intervene, recipients, strategy, invalid = self._decode(action)
        support = support_action(intervene, recipients, strategy)
        draw = self.outcome == "sample"
        moved = advance(self._reference, support, self.dynamics, self.rates, self.np_random, self.effect_scale, draw)
        if intervene and not support.intervene:
            moved = replace(moved, row=moved.row + 1)
        self._reference = moved
        self._step += 1
        self._interventions += int(intervene)
        d, g = moved.values()
        reward = self._reward(d, g, intervene)
        terminated = bool(d.max() < self.calm_threshold)
        truncated = not terminated and self._step >= self.limit
        bonus = 0.0
        if terminated:
            remaining = self.limit - self._step
            bonus = (reward + self.kappa * intervene) * sum(self.gamma**k for k in range(1, remaining + 1))
        reward += bonus
        self._rewards.append(reward)
        self._done = terminated or truncated
        info = {"step": self._step - 1, "n_invalid": len(invalid)}
        if self._full_info:
            people = episode.participants
            info["speaker"] = people[moved.last_speaker] if moved.last_speaker is not None else None
            info["state"] = {
                "distress": {p: round(v, 6) for p, v in zip(people, d.tolist())},
                "tension": round(tension(g), 6),
            }
        if terminated:
            info["calm_bonus"] = bonus
        if terminated or truncated:
            info["episode"] = {
                "return": float(sum(self._rewards)),
                "discounted_return": discounted_return(self._rewards, self.gamma),
                "length": self._step,
                "final_max_distress": float(d.max()),
                "intervention_rate": self._interventions / self._step,
                "calm": terminated,
            }
        return self._observation(), float(reward), terminated, truncated, info

    def state(self):
        d, g = self._reference.values()
        return {"distress": d.copy(), "g": g.copy(), "pattern": self._reference.pattern, "row": self._reference.row}


def _same_value(a, b) -> bool:
    """Equal to the bit: arrays by dtype, shape and bytes, floats by their bits (so 0.0 != -0.0)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return type(b) is float and a.hex() == b.hex()
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"info_level": "full", "starts": "all"},
        {"outcome": "mean", "kappa": 0.3, "lam": 0.5},
        {"perception_noise": 0.0, "effect_scale": 2.0, "max_steps": 7},
        {"perception_noise": 0.4, "effect_scale": 0.0, "calm_threshold": 0.5},
    ],
)
@pytest.mark.parametrize("flat", [False, True])
def test_long_traces_equal_the_numpy_step(demo, model, settings, flat):
    # RescueSim-v0 (and RescueSimFlat-v0's wrappers on it) against the numpy step above, 1,500 random actions,
    # episodes ended and abandoned: every observation, reward, end, info and state, and the generator, to the bit.
    from rescue_env.envs.wrappers import FlatAction

    envs = [cls(demo, dynamics=model, **settings) for cls in (RescueSimEnv, _ReferenceSim)]
    if flat:
        envs = [FlatAction(SimFlatObservation(env)) for env in envs]
    fast, reference = envs
    fast.action_space.seed(1)
    actions = [fast.action_space.sample() for _ in range(1500)]
    outputs = [env.reset(seed=11) for env in envs]
    assert _same_value(*(dict(enumerate(out)) for out in outputs))
    ends = 0
    for t, action in enumerate(actions):
        outputs = [dict(enumerate(env.step(action))) for env in envs]
        info, reference_info = outputs[0][4], outputs[1][4]
        assert reference_info.keys() <= info.keys(), t  # "full": the details too (the dynamics' ones compared)
        outputs[0][4] = {key: info[key] for key in reference_info}
        assert _same_value(*outputs), t
        assert _same_value(*(env.unwrapped.state() for env in envs)), t
        if outputs[0][2] or outputs[0][3] or t % 53 == 52:  # ended, or abandoned mid-episode
            ends += bool(outputs[0][2] or outputs[0][3])
            assert _same_value(*(dict(enumerate(env.reset())) for env in envs)), t
    assert ends > 20
    states = [env.unwrapped.np_random.bit_generator.state for env in envs]
    assert states[0] == states[1]
