"""Every env id rejects actions outside its space with one clear ``ValueError`` naming the key and the value, keeps
accepting (and counting) masked choices inside the space, and rejects reset options it does not know."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rescue_env  # noqa: F401  (registers the ids)
from rescue_env.envs.multiparty import RescueMultiPartyEnv
from rescue_env.envs.sim_multiparty import RescueSimMultiPartyEnv

DICT_IDS = ("Rescue-v0", "Rescue-v1", "RescueSim-v0")
FLAT_IDS = ("RescueFlat-v0", "RescueFlat-v1", "RescueSimFlat-v0")


def _valid() -> dict:
    target = np.zeros(7, dtype=np.int8)
    target[0] = 1
    return {"intervene": 1, "target": target, "strategy": 1}


def _bits(*values) -> np.ndarray:
    return np.array(list(values) + [0] * (7 - len(values)))


OUTSIDE = [
    ({"intervene": 2}, "intervene=2"),
    ({"intervene": -1}, "intervene=-1"),
    ({"intervene": 0.7}, "intervene=0.7"),
    ({"intervene": None}, "intervene=None"),
    ({"strategy": 3.7}, "strategy=3.7"),
    ({"strategy": 11}, "strategy=11"),
    ({"strategy": -1}, "strategy=-1"),
    ({"target": _bits(2)}, "target="),
    ({"target": _bits(-1)}, "target="),
    ({"target": _bits(np.nan)}, "target="),
    ({"target": np.zeros((1, 7), dtype=np.int8)}, "target="),
    ({"target": np.zeros(3, dtype=np.int8)}, "target="),
]


@pytest.fixture(scope="module", params=DICT_IDS)
def dict_env(request):
    env = gym.make(request.param).unwrapped
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(("change", "needle"), OUTSIDE)
def test_dict_envs_reject_actions_outside_the_space(dict_env, change, needle):
    action = {**_valid(), **change}
    assert not dict_env.action_space.contains(action)
    with pytest.raises(ValueError, match="outside") as error:
        dict_env.step(action)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_dict_envs_reject_bad_keys_and_accept_masked_choices(dict_env):
    for bad in ({"intervene": 1, "target": _bits(1)}, {**_valid(), "extra": 0}, [1, 0, 1], None):
        with pytest.raises(ValueError, match="exactly intervene, target and strategy"):
            dict_env.step(bad)
    # In the space but masked (an absent participant slot; a strategy outside the scenario's taxonomy when the
    # conversation has one), with numpy and bool types: accepted and counted.
    dict_env.reset(seed=0)
    mask = dict_env.action_masks()
    absent = int(np.flatnonzero(~mask["target"][:-1])[0])
    masked = {"intervene": np.int64(1), "target": _bits(*([0] * absent + [1])).astype(bool), "strategy": np.int32(0)}
    invalid_strategy = np.flatnonzero(~mask["strategy"])
    if invalid_strategy.size:
        masked["strategy"] = int(invalid_strategy[0])
    _, _, _, _, info = dict_env.step(masked)
    assert info["n_invalid"] == 1 + bool(invalid_strategy.size)  # the default info counts them
    dict_env.info_level = "full"
    _, _, _, _, info = dict_env.step(masked)
    assert "target: absent participant slot" in info["invalid"]
    assert len(info["invalid"]) == 1 + bool(invalid_strategy.size)


def test_dict_envs_check_reset_options(dict_env):
    with pytest.raises(ValueError, match="must be a dict or None"):
        dict_env.reset(options="abc")
    with pytest.raises(ValueError, match="unknown reset option"):
        dict_env.reset(options={"sample": dict_env.samples[0].sample_id})
    sample_id = dict_env.samples[0].sample_id
    assert dict_env.reset(options={"sample_id": sample_id})[1]["sample_id"] == sample_id


@pytest.mark.parametrize("env_id", FLAT_IDS)
def test_flat_envs_reject_actions_outside_the_space(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    good = np.zeros(env.action_space.shape, dtype=np.int64)
    for bad, needle in (
        (np.r_[good[:1], [5], good[2:]], "action[1]=5"),
        (np.r_[good[:-1], [99]], "action[8]=99"),
        (good.astype(float) + 0.5, "must be integers"),
        (None, "must be integers"),
        (good[:-1], "shape"),
    ):
        with pytest.raises(ValueError, match="outside|integers|shape") as error:
            env.step(bad)
        assert needle in str(error.value)
    env.step(good)  # in the space: fine


@pytest.mark.parametrize("view", [RescueMultiPartyEnv, RescueSimMultiPartyEnv])
def test_multiparty_views_reject_participant_actions_outside_discrete_2(view):
    env = view()
    observations, _ = env.reset(seed=0)
    therapist = {"intervene": 0, "target": _bits(0, 0, 0, 0, 0, 0, 1), "strategy": 0}
    for bad in (0.5, 2, None):
        with pytest.raises(ValueError, match="participant_0: action must be 0"):
            env.step({"therapist": therapist, "participant_0": bad})
    with pytest.raises(ValueError, match="must be a dict or None"):
        env.reset(options="abc")
    with pytest.warns(UserWarning, match="ignoring unknown reset option"):
        env.reset(seed=0, options={"options": 1})  # what PettingZoo's api_test sends
