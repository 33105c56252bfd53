"""Every env id takes ``split`` (the side of the project's grouped split it plays) and ``data`` as a list of
``Sample``; what cannot be used is one line, never a traceback that prints the data."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import rescue_env  # noqa: F401  (registers the ids)
from rescue_env.data import load_dataset
from rescue_env.data.splits import split_samples
from rescue_env.dynamics.fitting import outcome_model_for

# The demo's grouped split, seed 0, test fraction 0.2: per scenario one group goes to the test side (couples are
# one group per pair of names, families one per family), so one couple and one family.
TEST_SIDE = ["demo_priya_and_sam/002", "demo_family/001_the_okafors"]
ALL = [
    "demo_maya_and_jordan/001",
    "demo_priya_and_sam/002",
    "demo_rosa_and_ben/003",
    "demo_noor_and_elliot/004",
    "demo_family/001_the_okafors",
    "demo_family/002_the_lindqvists",
]
REPLAY_IDS = (
    "Rescue-v0",
    "Rescue-v1",
    "RescueFlat-v0",
    "RescueFlat-v1",
    "RescueFlatDiscrete-v0",
    "RescueFlatDiscrete-v1",
)
SIM_IDS = (
    "RescueSim-v0",
    "RescueSim-v1",
    "RescueSimFlat-v0",
    "RescueSimFlatDiscrete-v0",
)


def make(env_id: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # v0 is "out of date" now that v1 exists: kept on purpose
        return gym.make(env_id, **kwargs)


def played(env) -> list[str]:
    return [s.sample_id for s in env.unwrapped.samples]


@pytest.mark.parametrize("env_id", REPLAY_IDS)
def test_every_replay_id_plays_the_side_it_is_given(env_id: str) -> None:
    assert played(make(env_id)) == ALL  # the default, "all", as before
    assert played(make(env_id, split="test")) == TEST_SIDE
    assert played(make(env_id, split="train")) == [s for s in ALL if s not in TEST_SIDE]
    assert played(make(env_id, split="test", test_fraction=0.5)) == [ALL[0], ALL[1], ALL[4]]


@pytest.mark.parametrize("env_id", SIM_IDS)
def test_every_sim_id_takes_split_too(env_id: str) -> None:
    assert played(make(env_id, split="test")) == TEST_SIDE
    assert played(make(env_id, split="test")) == played(make(env_id, starts="test"))


def test_split_and_starts_must_agree_on_the_flat_sim() -> None:
    with pytest.raises(ValueError, match="^split='test' and starts='train' disagree: give one of them$"):
        make("RescueSimFlat-v0", split="test", starts="train")


def test_the_replays_split_is_rollouts_split() -> None:
    from benchmarks.rollout import RolloutConfig

    config = RolloutConfig(policy="never", split="test")
    sides = split_samples(load_dataset("demo").samples, config.split_config())
    assert [s.sample_id for s in sides] == TEST_SIDE


def test_a_bad_split_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^unknown split 'held-out' \(expected one of: train, test, all\)$"):
        make("Rescue-v0", split="held-out")
    with pytest.raises(ValueError, match="^test_fraction must be a number strictly between 0 and 1, got 1.5$"):
        make("RescueFlat-v1", split="test", test_fraction=1.5)


def test_a_sample_of_the_other_side_is_refused_by_reset() -> None:
    env = make("Rescue-v0", split="test")
    observation, info = env.reset(options={"sample_id": TEST_SIDE[0]})
    assert info["sample_id"] == TEST_SIDE[0]
    with pytest.raises(ValueError, match="is not on the test side of the grouped split that this env plays$"):
        env.reset(options={"sample_id": ALL[0]})


def test_rescue_v1_fits_F_on_the_train_side_of_its_own_split() -> None:
    env = make("Rescue-v1", split="test", split_seed=1)
    assert played(env) == ["demo_maya_and_jordan/001", "demo_family/001_the_okafors"]
    expected = outcome_model_for(load_dataset("demo"), "train", seed=1)
    assert env.unwrapped.dynamics.digest() == expected.digest()
    assert env.unwrapped.dynamics.digest() != make("Rescue-v1").unwrapped.dynamics.digest()


@pytest.mark.parametrize("env_id", ["Rescue-v0", "RescueFlat-v1", "RescueSimFlatDiscrete-v0"])
def test_data_may_be_a_list_of_samples(env_id: str) -> None:
    samples = load_dataset("demo").samples
    env = make(env_id, data=samples[:3] + samples[4:5])
    assert env.unwrapped.dataset.source == "a list of 4 samples"
    assert env.unwrapped.dataset.sample_ids == [ALL[0], ALL[1], ALL[2], ALL[4]]
    if not env_id.startswith("RescueSim"):  # the sim plays the train side of them by default
        assert played(env) == [ALL[0], ALL[1], ALL[2], ALL[4]]
    env.reset(seed=0)


def test_data_that_is_not_usable_is_one_short_line() -> None:
    samples = load_dataset("demo").samples
    cases = [
        (samples + [{"sample_id": "x"}], "^data: item 6 of the list is a dict, not a Sample"),
        ([samples[0], samples[0]], "^data: sample id 'demo_maya_and_jordan/001' occurs more than once in the list$"),
        (42, "^data must be a path, 'demo', a Dataset or a list of Sample, got int$"),
        ([], "^0 samples could be read from an empty list: no sample found$"),
    ]
    for data, message in cases:
        with pytest.raises(ValueError, match=message) as caught:
            make("Rescue-v0", data=data)
        # Before: a TypeError that gym.make re-raised with the repr of every argument, 247,321 characters here.
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
