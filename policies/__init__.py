"""Non-LLM policies for ``Rescue-v0``: random, majority, heuristic and oracle baselines, and constant reference
policies. LLM agents live in ``agents``.

Every policy follows ``policies.base.Policy``: ``reset(seed)`` at the start of an episode, ``act(observation,
env)`` returning RescueEnv's ``Dict`` action. ``make_policy(name, env, seed)`` builds one by registry name
(``cloning``: behavioural cloning of the recorded therapist in the replays, ``policies.cloning``), or loads a trained
stable-baselines3 model named ``ppo:PATH.zip`` / ``a2c:PATH.zip`` (``policies.sb3``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies.base import Policy, make_action
from policies.behaviour import BehaviourPolicy
from policies.cloning import CloningPolicy
from policies.heuristic import HeuristicPolicy, PerceivedStatePolicy
from policies.imitation import ImitationPolicy
from policies.reference import (
    AlwaysInterveneEveryone,
    AlwaysLastSpeaker,
    AlwaysMostDistressed,
    AlwaysMostVocal,
    GroupGreedyPolicy,
    MajorityPolicy,
    NeverIntervene,
    OraclePolicy,
    RandomPolicy,
    RecordedTherapist,
)
from policies.sb3 import ALGORITHMS

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv

POLICIES: dict[str, type] = {
    "random": RandomPolicy,
    "majority": MajorityPolicy,
    "heuristic": HeuristicPolicy,
    "oracle": OraclePolicy,
    "always-everyone": AlwaysInterveneEveryone,
    "never": NeverIntervene,
    "last-speaker": AlwaysLastSpeaker,
    "most-vocal": AlwaysMostVocal,
    "most-distressed": AlwaysMostDistressed,
    "group-greedy": GroupGreedyPolicy,
    "recorded": RecordedTherapist,
    "perceived": PerceivedStatePolicy,
    "imitation": ImitationPolicy,
    "cloning": CloningPolicy,
    "behaviour": BehaviourPolicy,
}
"""Registry name -> policy class (each has ``from_env(env, seed)``)."""

PRIVILEGED = frozenset({"oracle", "most-distressed", "group-greedy", "recorded"})
"""Policies that read ``env.gold()`` or ``env.state()``: references, not agents."""
CONSTANT = ("always-everyone", "never", "most-distressed", "last-speaker", "most-vocal")
"""The constant reference policies (the same decision at every step) that no preset may favour."""
TRAINED = tuple(ALGORITHMS)
"""Prefixes of trained policies: ``ppo:PATH.zip``, ``a2c:PATH.zip`` (``policies.sb3.SB3Policy``, the ``rl`` extra)."""


SIM_ONLY = frozenset({"recorded", "perceived", "imitation", "behaviour"})
"""Policies of the closed loops only (they read the perceived state, replay the recorded actions, or sample
``RescueSim-v1``'s behaviour model)."""
SIM_V1_ONLY = frozenset({"behaviour"})
"""Policies of ``RescueSim-v1`` only (they sample its behaviour model)."""
REPLAY_ONLY = frozenset({"oracle", "majority", "cloning"})
"""Policies of the replays only (they read, or are fitted on, the gold of the next row, which a closed loop does not
have)."""


def is_policy_name(name: str) -> bool:
    """``name`` is a registry name or ``ALGO:PATH`` with ``ALGO`` in ``TRAINED`` (the file is not checked)."""
    algo, sep, path = name.partition(":")
    return name in POLICIES or bool(sep and path and algo in TRAINED)


def make_policy(name: str, env: RescueEnv, seed: int | None = 0) -> Policy:
    """The policy ``name`` for ``env`` (``majority`` and ``cloning`` are fitted on the env's conversations;
    ``ppo:PATH.zip`` and ``a2c:PATH.zip`` load a trained model and its sidecar)."""
    algo, sep, path = name.partition(":")
    if sep and algo in TRAINED:
        from policies.sb3 import SB3Policy

        return SB3Policy.load(path, algo=algo, env=env)
    if name not in POLICIES:
        trained = " / ".join(f"{a}:PATH.zip" for a in TRAINED)
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}, or {trained}")
    inner = getattr(env, "unwrapped", env)
    closed_loop = hasattr(inner, "recorded_action")
    if name in SIM_ONLY and not closed_loop:
        raise ValueError(f"policy {name!r} plays RescueSim-v0 only")
    if name in REPLAY_ONLY and closed_loop:
        raise ValueError(f"policy {name!r} plays the replays (Rescue-v0, Rescue-v1) only: a closed loop has no gold")
    return POLICIES[name].from_env(inner, seed)


__all__ = [
    "CONSTANT",
    "POLICIES",
    "PRIVILEGED",
    "AlwaysInterveneEveryone",
    "AlwaysLastSpeaker",
    "AlwaysMostDistressed",
    "AlwaysMostVocal",
    "BehaviourPolicy",
    "CloningPolicy",
    "ImitationPolicy",
    "PerceivedStatePolicy",
    "RecordedTherapist",
    "REPLAY_ONLY",
    "SIM_ONLY",
    "SIM_V1_ONLY",
    "GroupGreedyPolicy",
    "HeuristicPolicy",
    "MajorityPolicy",
    "NeverIntervene",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "TRAINED",
    "is_policy_name",
    "make_action",
    "make_policy",
]
