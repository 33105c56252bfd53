"""Edges of every env id (issue 23): reset options that are not a dict, ER/VP text outside the ``Text`` space, the
PettingZoo AEC views' out-of-space actions and unknown agents, ``context_size`` below -1, data of which nothing
could be read, and the default reset info, which must not tell an agent the episode's length."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import benchmarks  # noqa: F401  (registers the task envs)
import rescue_env  # noqa: F401  (registers the ids)
from benchmarks.envs import FLAT_TASKS, TASKS, task_env_id
from benchmarks.envs.task_env import ANSWER_CHARS, RescueTaskEnv
from rescue_env.data.loading import DataError, Dataset, LoadProblem, LoadReport
from rescue_env.envs import multiparty, sim_multiparty
from rescue_env.envs.multiparty import RescueMultiPartyEnv
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.sim import RescueSimEnv

TASK_IDS = [task_env_id(t) for t in TASKS] + [task_env_id(t, flat=True) for t in FLAT_TASKS]
REPLAY_IDS = ("Rescue-v0", "RescueFlat-v0", "Rescue-v1", "RescueFlat-v1")
SIM_IDS = ("RescueSim-v0", "RescueSimFlat-v0")
VIEWS = (multiparty, sim_multiparty)
BASIC_RESET_INFO = {"sample_id", "scenario", "participants"}


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and message
    return message


# ----- 1. reset options that are not a dict ----------------------------------------------------------------------


@pytest.mark.parametrize("env_id", TASK_IDS)
@pytest.mark.parametrize(("options", "kind"), [("abc", "str"), (["instance"], "list"), ("", "str")])
def test_task_envs_answer_reset_options_that_are_not_a_dict_with_the_replays_line(env_id, options, kind):
    env = gym.make(env_id)
    with pytest.raises(ValueError) as error:
        env.reset(options=options)
    assert _one_line(error) == f"reset options must be a dict or None, got {kind}"  # word for word the replays'
    assert env.reset(seed=0, options={"instance": 0})[1]["index"] == 0  # a dict still works


@pytest.mark.parametrize("env_id", ("Rescue-v0", "Rescue-v1", "RescueSim-v0", "RescueSimFlat-v0"))
def test_replays_and_sims_give_the_same_line(env_id):
    with pytest.raises(ValueError) as error:
        gym.make(env_id).reset(options="abc")
    assert _one_line(error) == "reset options must be a dict or None, got str"


# ----- 2. ER and VP text outside the Text space ----------------------------------------------------------------


@pytest.mark.parametrize("task", ("er", "vp"))
def test_er_and_vp_raise_one_line_for_text_outside_their_space(task):
    env = gym.make(task_env_id(task), scorer="none")
    space = env.action_space
    for bad, needle in (
        ("x" * 5000, "5000 characters long"),
        ('{"emotion": "caf\u00e9", "intensity": 3}', "'\u00e9'"),
        ("a\x00b\rc", "2 character(s) outside"),
    ):
        assert not space.contains(bad)
        env.reset(seed=0)
        with pytest.raises(ValueError, match=task.upper()) as error:
            env.step(bad)
        assert needle in _one_line(error)
    # Inside the space, however wrong: scored, not refused.
    for good in ("x" * ANSWER_CHARS, "not json\twith a tab\nand a newline"):
        assert space.contains(good)
        env.reset(seed=0)
        _, _, terminated, _, info = env.step(good)
        assert terminated and info["failure"]  # a failed answer, scored as the task scores one


def test_an_overlong_model_answer_is_played_as_the_failed_answer_not_an_error():
    env = RescueTaskEnv("er", scorer="none")
    env.reset(seed=0)
    text = json.dumps({"answers": [{"id": "1", "emotion": "upset " * 1000, "intensity": 7}]})
    action, failure = env.action_from_answer(text)
    assert action == "" and failure.startswith("answer_too_long: ")
    assert env.step(action)[4]["failure"]  # in the space: scored as the failed answer


# ----- 3. the PettingZoo views: out-of-space actions and unknown agents ---------------------------------------


@pytest.mark.parametrize("view", VIEWS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_aec_views_refuse_out_of_space_actions_with_one_line_naming_agent_and_value(view):
    aec = view.env()
    aec.reset(seed=0)
    assert aec.agent_selection == "therapist"
    bad = {"intervene": 2, "target": np.zeros((2, 7), dtype=np.int8), "strategy": 0}  # a 2-D repr spans lines
    with pytest.raises(ValueError) as error:
        aec.step(bad)
    message = _one_line(error)
    assert message.startswith("therapist: action {'intervene': 2,") and "outside its action space Dict(" in message
    assert aec.agent_selection == "therapist"  # refused before anything moved
    target = np.zeros(7, dtype=np.int8)
    target[-1] = 1
    aec.step({"intervene": 0, "target": target, "strategy": 0})
    assert aec.agent_selection == "participant_0"
    for value, shown in ((2, "2"), (0.5, "0.5"), (None, "None")):
        with pytest.raises(ValueError) as error:
            aec.step(value)
        assert _one_line(error) == f"participant_0: action {shown} is outside its action space Discrete(2)"
    aec.step(0)  # in the space: taken
    assert aec.agent_selection == "participant_1"


@pytest.mark.parametrize("view", VIEWS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_views_name_an_unknown_agent_instead_of_a_bare_key_error(view):
    for made in (view.parallel_env(), view.env(), view.raw_env()):
        for method, kind in ((made.action_space, "action"), (made.observation_space, "observation")):
            with pytest.raises(ValueError) as error:
                method("ghost")
            message = _one_line(error)
            assert message.startswith(f"no {kind} space for agent 'ghost'; the agents are therapist, participant_0")
        assert made.action_space("therapist") is not None  # the known agents still answer


# ----- 4. context_size ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", (*REPLAY_IDS, *TASK_IDS))
@pytest.mark.parametrize("value", (-3, -2, 2.5, True, "3"))
def test_every_id_that_takes_context_size_rejects_bad_values_with_one_line(env_id, value):
    with pytest.raises(ValueError, match="context_size must be -1 \\(all prior rows\\) or an integer >= 0") as error:
        gym.make(env_id, context_size=value)
    assert _one_line(error).endswith(f"got {value!r}")


def test_documented_context_sizes_are_accepted():
    for value in (-1, 0, 3, np.int64(3)):
        env = RescueEnv(context_size=value)
        assert env.context_size == int(value) and type(env.context_size) is int
        assert RescueTaskEnv("itp", context_size=value).context_size == int(value)
    assert RescueTaskEnv("itp", context_size=None).context_size is None  # the task's default
    with pytest.raises(ValueError, match="context_size"):
        RescueEnv(context_size=None)  # the replays have no task default
    with pytest.raises(ValueError, match="context_size"):
        RescueMultiPartyEnv(context_size=-3)  # the view passes it on to the replay


# ----- 5. data of which nothing could be read -----------------------------------------------------------------


def _empty(source: str, problems: int) -> Dataset:
    report = LoadReport(
        source=source,
        problems=[LoadProblem(file=source, line=i + 1, message="not valid UTF-8") for i in range(problems)],
    )
    return Dataset(samples=[], source=source, sha256="0" * 64, report=report)


@pytest.mark.parametrize(
    "build",
    (
        lambda data: RescueEnv(data=data),
        lambda data: RescueSimEnv(data=data),
        lambda data: RescueTaskEnv("rpp", dataset=data),
    ),
    ids=("replay", "sim", "task"),
)
def test_an_empty_dataset_says_0_samples_could_be_read(build):
    with pytest.raises(ValueError) as error:
        build(_empty("broken.jsonl", 3))
    assert (
        _one_line(error)
        == "0 samples could be read from broken.jsonl: 3 problems, the first: broken.jsonl:1: not valid UTF-8"
    )
    with pytest.raises(ValueError, match="^0 samples could be read from none.jsonl: no sample found$"):
        build(_empty("none.jsonl", 0))


@pytest.mark.parametrize("env_id", ("Rescue-v0", "RescueFlat-v1", "RescueSim-v0", "RescueITP-v0", "RescueER-v0"))
def test_a_binary_file_says_0_samples_could_be_read_from_it(tmp_path, env_id):
    path = tmp_path / "random.bin"
    path.write_bytes(b"\xb4\x80\x9b binary\n\xff\xfe\x00\n\x80\n")  # three lines, none of them UTF-8
    # The loader may say it itself (DataError) or leave it to the env (ValueError): the line is the same.
    with pytest.raises((DataError, ValueError)) as error:
        gym.make(env_id, data=str(path))
    message = _one_line(error)
    assert message.startswith(f"0 samples could be read from {path}: 3 problems, the first: random.bin:1: ")
    assert "decision point" not in message and "instance" not in message


# ----- 6. the default reset info does not carry the episode's length -------------------------------------------


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else a == b


@pytest.mark.parametrize("env_id", (*REPLAY_IDS, *SIM_IDS))
def test_default_reset_info_leaves_the_length_out_and_full_keeps_it(env_id):
    basic, full = gym.make(env_id), gym.make(env_id, info_level="full")
    for seed in (0, 1, 2):
        observation, info = basic.reset(seed=seed)
        assert set(info) == BASIC_RESET_INFO  # nothing that tells the horizon
        full_observation, full_info = full.reset(seed=seed)
        assert _equal(observation, full_observation)  # observations do not depend on the info level
        inner = full.unwrapped
        if env_id in SIM_IDS:
            assert full_info == {**info, "steps": inner.limit}
        else:
            assert full_info == {
                **info,
                "decision_points": len(inner.episode(inner.dataset.get(info["sample_id"])).points),
            }
