"""Play a task env through and score it as ``rescue-bench evaluate`` does: every instance once (in order), the
per-instance score dicts from ``info["score"]``, and the task's own ``summary`` per scope (couple, family, both).

An actor is ``act(observation, env) -> action``. :func:`baseline_actor` plays the harness's built-in agents
(``benchmarks.baselines``: they answer with the JSON a model would send, turned into the action by
``env.action_from_answer``), so the oracle and the majority agent give the same numbers both ways (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.baselines import BaselineAgent, BaselineName
from benchmarks.envs.task_env import RescueTaskEnv
from benchmarks.runs import Progress

__all__ = ["Actor", "baseline_actor", "play_task_env"]

Actor = Callable[[dict[str, Any], RescueTaskEnv], Any]
SCOPES = ("couple", "family", "all")


def baseline_actor(kind: BaselineName, env: RescueTaskEnv, seed: int = 0) -> Actor:
    """The built-in agent ``kind`` (oracle, random, majority, heuristic) as an actor of ``env``. Privileged where
    the agent is (the oracle reads the gold, the majority the env's instance set, as in the harness)."""
    agent = BaselineAgent(kind, env.task, env.samples, env.instances, seed=seed)

    def act(observation: dict[str, Any], env: RescueTaskEnv) -> Any:
        assert env.instance is not None
        action, _ = env.action_from_answer(agent.answer([env.instance]))
        return action

    return act


def play_task_env(env: RescueTaskEnv, act: Actor, *, seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Every instance of ``env`` once, in order; ``{"scopes": {scope: summary}, "scores": [...], "rewards":
    [...], "failures": n}``."""
    scores, rewards, failures = [], [], 0
    bar = Progress(len(env.instances), progress, unit="instance", usage=False)
    try:
        for index in range(len(env.instances)):
            observation, _ = env.reset(seed=seed if index == 0 else None, options={"instance": index})
            _, reward, _, _, info = env.step(act(observation, env))
            scores.append({**info["score"], "scenario": info["scenario"]})
            rewards.append(float(reward))
            failures += info["failure"] is not None
            bar.update(1, int(info["failure"] is not None), 0, 0.0)
    finally:
        bar.close()
    summaries = {}
    for scope in SCOPES:
        chosen = [s for s in scores if scope == "all" or s["scenario"] == scope]
        summaries[scope] = env.task.summary(chosen) if chosen else None
    return {"scopes": summaries, "scores": scores, "rewards": rewards, "failures": failures}
