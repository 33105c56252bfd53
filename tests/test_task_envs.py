"""The six tasks as Gymnasium envs (benchmarks/envs/): every id builds with defaults and passes the checkers, an
agent scores the same through the env as through `rescue-bench evaluate`, no gold reaches an observation, rewards
by hand, and an LLM plays them through the one client."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import without_annotations
from gymnasium.utils.env_checker import check_env

import benchmarks  # noqa: F401  (registers the task envs)
from agents.fake_server import FakeOpenAIServer, example_responder
from agents.task_agent import LLMTaskAgent
from benchmarks.base import PromptOptions
from benchmarks.envs import FLAT_TASKS, TASKS, task_env_id
from benchmarks.envs.play import baseline_actor, play_task_env
from benchmarks.envs.task_env import RescueTaskEnv, observe
from benchmarks.registry import get_task
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from policies.sb3 import quiet_logger
from rescue_env.data import load_dataset


def _evaluate(agent: str, dataset=None, **config) -> dict:
    settings = {"agent": agent, "bertscore": False, "bootstrap": 0, **config}
    return Evaluation(
        EvalConfig(**settings), tempfile.mkdtemp(), dataset=dataset, options=RunOptions(progress=False)
    ).run()


def _same_metrics(results: dict, task: str, played: dict, tolerance: float = 1e-9) -> list[tuple]:
    """The (scope, metric, harness, env) quadruples that differ by more than ``tolerance``."""
    differ = []
    for scope in ("couple", "family", "all"):
        for key, entry in results["tasks"][task]["scopes"][scope]["metrics"].items():
            mine = played["scopes"][scope][key]
            theirs = entry["value"]
            if (mine is None) != (theirs is None) or (
                mine is not None and mine != pytest.approx(theirs, abs=tolerance)
            ):
                differ.append((scope, key, theirs, mine))
    return differ


@pytest.mark.parametrize("task", TASKS)
def test_every_id_builds_with_defaults_and_passes_check_env(task: str) -> None:
    env = gym.make(task_env_id(task))
    check_env(env.unwrapped, skip_render_check=False)
    assert isinstance(gym.make(f"benchmarks:{task_env_id(task)}").unwrapped, RescueTaskEnv)


@pytest.mark.parametrize("task", FLAT_TASKS)
def test_flat_variants_pass_sb3_check_env(task: str) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(task_env_id(task, flat=True))
    sb3_check_env(env)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    masks = env.get_wrapper_attr("action_masks")()
    assert masks.dtype == bool and masks.any()


@pytest.mark.parametrize("agent", ["oracle", "majority", "heuristic", "random"])
def test_an_agent_scores_the_same_through_the_env_as_through_evaluate(agent: str) -> None:
    results = _evaluate(agent)
    for task in TASKS:
        env = RescueTaskEnv(task, scorer="none")
        played = play_task_env(env, baseline_actor(agent, env))
        assert len(played["scores"]) == results["tasks"][task]["instances"]
        assert _same_metrics(results, task, played) == [], task
    if agent == "oracle":
        assert all(r == 1.0 for r in played["rewards"])  # VP's target match, by the oracle


def test_er_and_vp_score_with_bertscore_by_default_as_evaluate_does() -> None:
    results = _evaluate("heuristic", tasks=["er", "vp"], bertscore=True)
    for task in ("er", "vp"):
        env = RescueTaskEnv(task)  # scorer defaults to BERTScore (offline MiniLM)
        played = play_task_env(env, baseline_actor("heuristic", env))
        # One pair at a time here, batched in the runner: the padding moves F1 in the 8th decimal.
        assert env.scorer == "bertscore" and _same_metrics(results, task, played, tolerance=1e-6) == [], task
        assert np.mean(played["rewards"]) == pytest.approx(played["scopes"]["all"]["bertscore"])


def test_the_release_scores_the_same_both_ways(text_file: Path) -> None:
    dataset = load_dataset(text_file)
    results = {agent: _evaluate(agent, dataset=dataset, data=str(text_file)) for agent in ("oracle", "majority")}
    for task in TASKS:
        env = RescueTaskEnv(task, dataset=dataset, scorer="none")
        for agent, result in results.items():
            played = play_task_env(env, baseline_actor(agent, env))
            assert _same_metrics(result, task, played) == [], (agent, task)
        if task == "rpp":
            assert len(env.instances) == 1608 + 525  # Table 6


@pytest.mark.parametrize("task", TASKS)
def test_no_gold_or_annotation_reaches_an_observation(task: str) -> None:
    env = RescueTaskEnv(task, mode="audiovisual", scorer="none")
    scrubbed = {k: without_annotations(s) for k, s in env.samples.items()}
    options = PromptOptions(mode="audiovisual")
    module = get_task(task)
    for instance in env.instances:
        regolded = instance.model_copy(update={"gold": {"anything": "else"}})
        assert observe(module, regolded, scrubbed, options, env.max_chars) == observe(
            module, instance, env.samples, options, env.max_chars
        )
        assert "scrubbed" not in json.dumps(observe(module, regolded, scrubbed, options, env.max_chars))
    observation, _ = env.reset(seed=0)
    assert set(observation) <= {"instructions", "prompt", "scenario", "position", "candidates"}
    assert env.instance is not None and env.instance.instance_id not in observation["prompt"]


def test_rewards_by_hand() -> None:
    env = RescueTaskEnv("rpp", scorer="none")
    env.reset(options={"instance": 0})
    gold = env.instance.gold["pattern"]
    keys = list(env.choices)
    valid = env.task.choices(env.instance).keys()  # a LabelSet: its keys, not its Label objects
    other = next(k for k in valid if k != gold)
    none = env.slots
    for ranking, reward in (
        ([gold, none, none], 1.0),
        ([other, gold, none], 0.5),
        ([other, other, gold], 0.5),  # a repeat is dropped, as the parser drops it: the gold is second
        ([other, none, gold], 0.5),  # "no label" leaves no gap
        ([other, none, none], 0.0),
    ):
        env.reset(options={"instance": 0})
        action = [keys.index(x) if isinstance(x, str) else x for x in ranking]
        _, got, terminated, truncated, info = env.step(np.array(action))
        assert (got, terminated, truncated, info["scored"]) == (pytest.approx(reward), True, False, "reciprocal_rank")
    env.reset(options={"instance": 0})
    _, got, *_, info = env.step(np.array([none, none, none]))
    assert got == 0.0 and info["failure"] is not None  # an empty ranking fails, as a model's empty answer
    itp = RescueTaskEnv("itp")
    itp.reset(options={"instance": 0})
    right = int(itp.instance.gold["should_speak"])
    assert itp.step(right)[1] == 1.0
    itp.reset(options={"instance": 0})
    assert itp.step(1 - right)[1] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        itp.step(0)  # one answer per episode
    itp.reset(options={"instance": 0})
    for bad in (2, -1, "yes", 0.5):
        with pytest.raises(ValueError, match="action"):
            itp.step(bad)
    for bad in (np.array([0, 1]), np.array([0, 1, 99]), np.array([0.5, 1, 2]), "pursue_withdraw"):
        env.reset(options={"instance": 0})
        with pytest.raises(ValueError, match="action"):
            env.step(bad)


@pytest.mark.parametrize("task", TASKS)
def test_a_model_answer_becomes_the_action_that_scores_it(task: str) -> None:
    """The oracle's answer text -> action_from_answer -> step: the best reward, no failure."""
    env = RescueTaskEnv(task, scorer="none")
    act = baseline_actor("oracle", env)
    for index in range(0, len(env.instances), max(1, len(env.instances) // 10)):
        observation, _ = env.reset(options={"instance": index})
        _, reward, *_, info = env.step(act(observation, env))
        assert info["failure"] is None and reward == (5.0 if task == "er" else 1.0), info
    env.reset(options={"instance": 0})
    action, failure = env.action_from_answer("I would rather not say")
    assert failure is not None and env.action_space.contains(action)


def test_episode_order_and_reset_options() -> None:
    env = RescueTaskEnv("ssp", sample_order="sequential")
    seen = [env.reset()[1]["instance_id"] for _ in range(len(env.instances))]
    assert seen == [i.instance_id for i in env.instances]
    randomly = RescueTaskEnv("ssp")
    first = [randomly.reset(seed=3)[1]["index"]] + [randomly.reset()[1]["index"] for _ in range(4)]
    again = [randomly.reset(seed=3)[1]["index"]] + [randomly.reset()[1]["index"] for _ in range(4)]
    assert first == again
    target = env.instances[5].instance_id
    assert env.reset(options={"instance_id": target})[1]["index"] == 5
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"sample": 1})
    with pytest.raises(ValueError, match="no instance"):
        env.reset(options={"instance_id": "nope"})
    test_side = RescueTaskEnv("ssp", split="test")
    assert 0 < len(test_side.instances) < len(env.instances)
    with pytest.raises(ValueError, match="unknown task"):
        RescueTaskEnv("xyz")
    with pytest.raises(ValueError, match="judge_model"):
        RescueTaskEnv("er", scorer="judge")


def test_an_llm_plays_them_one_request_per_instance_as_evaluate_batch_1() -> None:
    from agents.client import ModelConfig

    tasks = ("rpp", "ssp")
    with FakeOpenAIServer(example_responder) as server:
        results = _evaluate("litellm", model="openai/fake", api_base=server.base_url, batch_size=1, tasks=list(tasks))
        before = server.request_count
        for task in tasks:
            env = RescueTaskEnv(task, scorer="none")
            agent = LLMTaskAgent(ModelConfig(model="openai/fake", api_base=server.base_url))
            played = play_task_env(env, agent.act)
            assert agent.answers == len(env.instances) and not agent.failures
            assert _same_metrics(results, task, played) == [], task
        assert server.request_count - before == sum(len(RescueTaskEnv(t).instances) for t in tasks)


def test_the_judge_scores_er_and_vp_when_a_model_is_given() -> None:
    env = RescueTaskEnv("er", judge_model="mock")
    act = baseline_actor("heuristic", env)
    observation, _ = env.reset(options={"instance": 0})
    _, reward, *_, info = env.step(act(observation, env))
    assert env.scorer == "judge" and info["scored"] == "s_er" and 1.0 <= reward <= 5.0
    assert reward == info["score"]["s_er"]


def test_maskable_ppo_trains_on_a_flat_ranking_and_respects_the_masks() -> None:
    from sb3_contrib import MaskablePPO

    env = gym.make(task_env_id("ssp", flat=True))
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, seed=0)
    model.set_logger(quiet_logger())
    model.learn(128)
    for index in range(0, 40, 4):
        observation, _ = env.reset(options={"instance": index})
        masks = env.get_wrapper_attr("action_masks")()
        action, _ = model.predict(observation, action_masks=masks, deterministic=True)
        inner = env.unwrapped
        valid = set(np.flatnonzero(inner.candidate_mask(inner.instance))) | {inner.slots}
        assert set(int(a) for a in action) <= valid
