"""The Ray bridge: RLlib PPO (the new API stack: ``RLModule``, ``Learner``, ``EnvRunner``) on the flat ids and on
the PettingZoo multi-party views, and a Ray Tune sweep over seeds x an env coefficient (``RescueSim-v1``'s
``beta``), with every result written where pandas reads it (``results.csv``, ``results.json``).

``scripts/train_ray.py`` is the command line; this module is what it and the tests call:

- ``ppo_config(target, ...)`` builds a ``PPOConfig`` for ``target``: a flat id (``RescueFlat-v0``,
  ``RescueFlatDiscrete-v0``, ``RescueSimFlatDiscrete-v1``, any ``Rescue*Flat*`` id) or a view (``"multiparty"``:
  the replay's ``rescue_env.envs.multiparty_v1.parallel_env``; ``"sim_multiparty"``: the closed loop's).
- ``train(config, iterations)`` runs ``Algorithm.train()`` in this process and returns the result dicts;
  ``sweep(...)`` runs one ``tune.Tuner`` over ``seeds x values`` of ``coefficient``; ``write_results`` writes the
  rows with the settings, the package versions and the data's sha256.

**Masking.** RLlib has no ``action_masks()`` protocol (sb3-contrib's ``MaskablePPO`` has one): the mask travels in
the observation. ``MaskedObservation`` turns a flat env's ``Box`` observation into ``Dict(observations=Box,
action_mask=Box(0, 1, (n,)))``, ``n`` = the ``Discrete`` action count, or the sum of the ``MultiDiscrete``
sizes (``flat_action_masks``: one bool per logit, in RLlib's order of the concatenated logits);
``MaskedPPOTorchRLModule`` builds PPO's default networks on ``observations`` alone and sets the logits of masked
actions to ``MASKED_LOGIT`` before any distribution is made, in sampling, in the loss and for the value's inputs.

**The multi-party views.** Their therapist observes a ``Text`` context, which no RLlib model takes:
``FlatMultiPartyView`` encodes it with the flat ids' own ``FlatObservation`` (``SimFlatObservation`` for the closed
loop) and gives the therapist ``DiscreteSupportAction``'s ``Discrete`` action with its mask: on the replay view
the therapist sees, takes and earns exactly what ``RescueFlatDiscrete-v0`` does (tested); on the closed-loop view
the masks and rewards are ``RescueSimFlatDiscrete-v0``'s, and the context features (bag of words, speaker
shares, last row) are those of the view's growing simulated transcript, not of the opening alone. A
participant observes its ``self`` features and keeps its ``Discrete(2)`` (speak / stay silent). RLlib's
``ParallelPettingZooEnv`` takes the spaces and the agent ids of the first episode only (a later conversation
with more participants would have agents without a space): ``RescueMultiAgentEnv`` extends it with every
possible agent and keeps ``agents`` current.

**Who learns.** The therapist (module ``"therapist"``, masked PPO). The participants play a fixed policy by
default (``participants="fixed"``: module ``"participant"``, ``ConstantActionRLModule``, always speak, which is
what the views do for a participant without an action): in both views a participant's action changes no
reward, observation or state (the replay advances as recorded; in the closed loop the words are text only and
the state moves by F), so a learned participant has no signal to learn from, only the cost and noise of a
second learner. ``participants="learned"`` trains one shared PPO module for every participant slot anyway,
for views in which participants will matter.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

try:
    import ray
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env
except ImportError as error:  # pragma: no cover - exercised only without ray
    raise ImportError(
        "the Ray bridge needs Ray RLlib and Tune: pip install 'ray[rllib,tune]>=2.40,<3' (and torch)"
    ) from error

import rescue_env  # noqa: F401  (registers the gymnasium ids in this process and in every Ray worker)
from rescue_env.envs.multiparty import THERAPIST
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.wrappers import (
    DiscreteSupportAction,
    FlatObservation,
    SimFlatObservation,
    discrete_action_masks,
)

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: put on the local Ray workers' ``PYTHONPATH`` so that they import ``bridges``."""

OBS_KEY, MASK_KEY = "observations", "action_mask"
"""The keys of a masked observation (``MaskedObservation``, the therapist's in ``FlatMultiPartyView``)."""
MASKED_LOGIT = -1e9
"""The logit a masked action gets: its probability is 0 in float32, and no arithmetic overflows."""

FLAT_ENV, VIEW_ENV = "rescue_flat", "rescue_multiparty"
"""The names ``register_env`` gives the two creators (``env_config`` says which id or view)."""
VIEWS = {
    "multiparty": "rescue_env.envs.multiparty_v1:parallel_env",
    "sim_multiparty": "rescue_env.envs.sim_multiparty:parallel_env",
}
"""The PettingZoo views by ``target`` name: the replay (``rescue_multiparty_v1``: no gold in its infos) and the
closed loop (``rescue_sim_multiparty_v0``, on ``RescueSim-v0``)."""
FEATURE_KEYS = frozenset({"hash_dim", "last_row_weight", "turn_window", "embeddings", "cache_size"})
"""``env_kwargs`` a view's observation encoder takes (the flat ids take them as their own arguments)."""
THERAPIST_MODULE, PARTICIPANT_MODULE = "therapist", "participant"
PARTICIPANTS = ("fixed", "learned")
SPEAK = 0
"""The fixed participants' action (``rescue_env.envs.multiparty.SPEAK``)."""
TIED = "tied"
"""``entropy_coeff=TIED``: PPO's entropy bonus = the env's ``beta`` (``RescueSim-v1``'s KL identity: the return
with the entropy bonus at ``beta`` is the KL-regularised objective; ``scripts/train_sim_ppo.py``'s default)."""

TRAIN_DEFAULTS: dict[str, Any] = {
    "train_batch_size_per_learner": 512,
    "minibatch_size": 128,
    "num_epochs": 4,
    "lr": 3e-4,
    "gamma": 0.99,
}
"""PPO settings of the bridge unless given (a small on-policy batch: episodes are 20-40 steps on the demo)."""
MODEL_DEFAULTS: dict[str, Any] = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "head_fcnet_hiddens": []}
"""The networks of PPO's default module (SB3's ``MlpPolicy`` sizes)."""
LEADING_COLUMNS = (
    "kind", "target", "trial", "seed", "coefficient", "value", "training_iteration", "status", "return_mean",
    "env_runners/episode_return_mean", "env_runners/episode_len_mean", "env_runners/num_episodes",
    "num_env_steps_sampled_lifetime", "data_sha256",
)  # fmt: skip
"""The columns ``results.csv`` starts with; the other numeric metrics follow in name order."""
RESULTS_FORMAT, RESULTS_VERSION = "rescue-ray-results", 1


# ----- envs -------------------------------------------------------------------------------------------------------


def mask_size(action_space: spaces.Space) -> int:
    """The length of the mask of ``action_space``: ``n`` of a ``Discrete``, the sum of a ``MultiDiscrete``'s
    sizes (one entry per logit: RLlib's multi-categorical concatenates the logits of the sub-actions)."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    raise TypeError(f"masking needs a Discrete or MultiDiscrete action space, got {action_space}")


def masked_space(observation_space: spaces.Space, size: int) -> spaces.Dict:
    """``Dict(observations=observation_space, action_mask=Box(0, 1, (size,)))``."""
    mask = spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)
    return spaces.Dict({OBS_KEY: observation_space, MASK_KEY: mask})


class MaskedObservation(gym.Wrapper):
    """A flat env's observation with its action mask beside it (``Dict(observations, action_mask)``, the mask as
    float32 0/1), read from ``action_masks()`` after every reset and step: what ``MaskedPPOTorchRLModule`` takes."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._masks = env.get_wrapper_attr("action_masks")
        self.observation_space = masked_space(env.observation_space, mask_size(env.action_space))
        self._mask = np.ones(mask_size(env.action_space), dtype=np.float32)

    def _with_mask(self, observation: np.ndarray, done: bool = False) -> dict[str, np.ndarray]:
        # After the last step there is no decision left to mask (the replays refuse ``action_masks()`` then): the
        # final observation keeps the last mask, which no action is ever drawn with.
        if not done:
            self._mask = np.asarray(self._masks(), dtype=np.float32)
        return {OBS_KEY: observation, MASK_KEY: self._mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        return self._with_mask(observation), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(observation, terminated or truncated), reward, terminated, truncated, info


class FlatMultiPartyView(ParallelEnv):
    """A multi-party view (``rescue_env.envs.multiparty`` or ``sim_multiparty``) with spaces an RLlib model takes.

    The therapist observes ``Dict(observations, action_mask)``: the flat ids' encoding of its ``Dict``
    observation (``FlatObservation`` of the replay, ``SimFlatObservation`` of the closed loop, with
    ``features``) and the mask of ``DiscreteSupportAction``, whose ``Discrete`` action it takes (decoded into the
    view's ``Dict`` action; a masked choice is accepted and counted in the therapist's ``info["masked_choice"]``).
    A participant observes its ``self`` features ``Box(0, 1, (2,))`` (not the context: the fixed policy needs
    nothing, and a learned one gets what is its own) and keeps its ``Discrete(2)``. Rewards, ends and infos are
    the view's.
    """

    def __init__(self, view: ParallelEnv, **features: Any) -> None:
        self.view = view
        inner = view_inner(view)
        encoder = FlatObservation if isinstance(inner, RescueEnv) else SimFlatObservation
        # The encoder and the decoder wrap the view's inner env for its spaces only: they are never stepped.
        self.encoder = encoder(inner, **features)
        self.decoder = DiscreteSupportAction(self.encoder)
        self.metadata = dict(view.metadata)
        self.render_mode = getattr(view, "render_mode", None)
        self.possible_agents = list(view.possible_agents)
        n = int(self.decoder.action_space.n)
        self._observation_spaces: dict[str, spaces.Space] = {THERAPIST: masked_space(self.encoder.observation_space, n)}
        self._action_spaces: dict[str, spaces.Space] = {THERAPIST: spaces.Discrete(n)}
        for agent in self.possible_agents[1:]:
            self._observation_spaces[agent] = view.observation_space(agent)["self"]
            self._action_spaces[agent] = view.action_space(agent)
        self._mask = np.ones(n, dtype=np.float32)

    @property
    def agents(self) -> list[str]:  # type: ignore[override]
        return self.view.agents

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent]

    def _observations(self, observations: Mapping[str, Any]) -> dict[str, Any]:
        therapist = observations[THERAPIST]
        features = self.encoder.observation(therapist)  # also records the last speaker, for the decoder
        mask = discrete_action_masks(
            therapist["target_mask"], therapist["strategy_mask"], self.encoder.last_speaker_slot()
        )
        self._mask = mask.astype(np.float32)
        out: dict[str, Any] = {THERAPIST: {OBS_KEY: features, MASK_KEY: self._mask.copy()}}
        for agent, observation in observations.items():
            if agent != THERAPIST:
                out[agent] = np.asarray(observation["self"], dtype=np.float32)
        return out

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        observations, infos = self.view.reset(seed=seed, options=options)
        return self._observations(observations), infos

    def step(self, actions: Mapping[str, Any]):
        index = int(actions[THERAPIST])
        masked = not bool(self._mask[index]) if 0 <= index < self._mask.size else True
        view_actions = {agent: int(action) for agent, action in actions.items() if agent != THERAPIST}
        view_actions[THERAPIST] = self.decoder.action(index)
        observations, rewards, terminations, truncations, infos = self.view.step(view_actions)
        infos[THERAPIST] = {**infos.get(THERAPIST, {}), "masked_choice": masked}
        return self._observations(observations), rewards, terminations, truncations, infos

    def render(self) -> str | None:
        return self.view.render()

    def close(self) -> None:
        self.view.close()


class RescueMultiAgentEnv(ParallelPettingZooEnv):
    """RLlib's ``ParallelPettingZooEnv`` with every possible agent: that wrapper takes the agent ids and spaces of
    the episode its constructor resets, so an agent first seen later (a conversation with more participants)
    would have no space; here ``possible_agents`` and the spaces are the view's whole list, and ``agents``
    follows the view at every reset and step."""

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self.possible_agents = list(env.possible_agents)
        self._agent_ids = set(self.possible_agents)
        self.observation_spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        self.action_spaces = {agent: env.action_space(agent) for agent in self.possible_agents}
        self.observation_space = spaces.Dict(self.observation_spaces)
        self.action_space = spaces.Dict(self.action_spaces)
        self.agents = list(env.agents)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        result = super().reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return result

    def step(self, action_dict: dict):
        result = super().step(action_dict)
        self.agents = list(self.par_env.agents)
        return result


def view_inner(view: ParallelEnv) -> gym.Env:
    """The single-agent env a multi-party view holds (``view.rescue``: the replay; ``view.sim``: the closed loop)."""
    for name in ("rescue", "sim"):
        inner = getattr(view, name, None)
        if isinstance(inner, gym.Env):
            return inner
    raise TypeError(f"not a Rescue multi-party view: {type(view).__name__} holds no rescue or sim env")


def _entry_point(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def split_view_kwargs(env_kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A view's ``env_kwargs`` as (the view's arguments, the encoder's ``FEATURE_KEYS``)."""
    view = {k: v for k, v in env_kwargs.items() if k not in FEATURE_KEYS}
    features = {k: v for k, v in env_kwargs.items() if k in FEATURE_KEYS}
    return view, features


def make_flat(env_config: Mapping[str, Any]) -> gym.Env:
    """The creator of ``FLAT_ENV``: ``gym.make(env_config["env_id"], **env_config["env_kwargs"])``, in
    ``MaskedObservation`` unless ``env_config["masked"]`` is false."""
    env = gym.make(env_config["env_id"], **dict(env_config.get("env_kwargs") or {}))
    return MaskedObservation(env) if env_config.get("masked", True) else env


def make_view(env_config: Mapping[str, Any]) -> RescueMultiAgentEnv:
    """The creator of ``VIEW_ENV``: the view ``env_config["view"]`` (``VIEWS``) with ``env_kwargs``, flat
    (``FlatMultiPartyView``) and seen by RLlib (``RescueMultiAgentEnv``)."""
    view_kwargs, features = split_view_kwargs(env_config.get("env_kwargs") or {})
    view = _entry_point(VIEWS[env_config["view"]])(**view_kwargs)
    return RescueMultiAgentEnv(FlatMultiPartyView(view, **features))


def register_envs() -> None:
    """Register the two creators with Ray Tune's registry (idempotent; the workers get them from there)."""
    register_env(FLAT_ENV, make_flat)
    register_env(VIEW_ENV, make_view)


def is_view(target: str) -> bool:
    return target in VIEWS


def check_target(target: str) -> None:
    """A one-line ``ValueError`` unless ``target`` is a view name or a registered flat id."""
    if is_view(target):
        return
    if target not in gym.envs.registry:
        raise ValueError(f"unknown target {target!r}: a view ({', '.join(VIEWS)}) or a registered flat id")
    if "Flat" not in target:
        raise ValueError(
            f"{target!r} observes text, which no RLlib model takes: use its flat id (RescueFlat-v0, "
            f"RescueFlatDiscrete-v0, RescueSimFlatDiscrete-v1, ...) or a view ({', '.join(VIEWS)})"
        )


def env_config_for(target: str, env_kwargs: Mapping[str, Any] | None = None, masked: bool = True) -> dict:
    """The ``env_config`` of ``target``'s creator."""
    check_target(target)
    env_kwargs = dict(env_kwargs or {})
    if is_view(target):
        return {"view": target, "env_kwargs": env_kwargs}
    return {"env_id": target, "env_kwargs": env_kwargs, "masked": masked}


def probe(target: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the driver records about ``target`` before training: the data's source and sha256, the spaces, and
    the env's ``beta`` where it has one (``RescueSim-v1``). Builds one env here, with ``env_kwargs``."""
    env_kwargs = dict(env_kwargs or {})
    if is_view(target):
        view_kwargs, _ = split_view_kwargs(env_kwargs)
        view = _entry_point(VIEWS[target])(**view_kwargs)
        inner = view_inner(view)
        action, observation = view.action_space(THERAPIST), view.observation_space(THERAPIST)
    else:
        view = gym.make(target, **env_kwargs)
        inner = view.unwrapped
        action, observation = view.action_space, view.observation_space
    try:
        dataset = inner.dataset
        beta = getattr(inner, "beta", None)
        return {
            "data": {"source": str(dataset.source), "sha256": dataset.sha256, "samples": len(dataset.samples)},
            "beta": None if beta is None else float(beta),
            "action_space": str(action),
            "observation_space": str(observation) if not is_view(target) else "Dict (the view's)",
        }
    finally:
        view.close()


# ----- modules ----------------------------------------------------------------------------------------------------


class MaskedPPOTorchRLModule(DefaultPPOTorchRLModule):
    """PPO's default torch module on ``observations``, with the logits of the actions that ``action_mask`` rules
    out set to ``MASKED_LOGIT`` (so they are never sampled and carry no probability in the loss, the entropy or
    the KL). The observation space must be ``Dict(observations, action_mask)`` (``masked_space``); the networks
    are built for ``observations`` alone, then the space is set back to the ``Dict`` (what a checkpoint rebuilds
    the module with)."""

    def __init__(self, *, observation_space: spaces.Space | None = None, **kwargs: Any) -> None:
        if not (isinstance(observation_space, spaces.Dict) and set(observation_space.spaces) == {OBS_KEY, MASK_KEY}):
            raise ValueError(
                f"MaskedPPOTorchRLModule needs Dict({OBS_KEY}=..., {MASK_KEY}=Box(0, 1, (n,))), got {observation_space}"
            )
        super().__init__(observation_space=observation_space[OBS_KEY], **kwargs)
        self.observation_space = observation_space

    @staticmethod
    def _unmasked(batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(the mask or None, ``batch`` with the bare observations): a shallow copy, the caller's batch unchanged."""
        observation = batch[Columns.OBS]
        if not isinstance(observation, Mapping):
            return None, batch
        return observation[MASK_KEY], {**batch, Columns.OBS: observation[OBS_KEY]}

    @staticmethod
    def _mask_logits(output: dict[str, Any], mask: Any) -> dict[str, Any]:
        if mask is not None:
            import torch

            logits = output[Columns.ACTION_DIST_INPUTS]
            output[Columns.ACTION_DIST_INPUTS] = torch.where(mask > 0.5, logits, torch.full_like(logits, MASKED_LOGIT))
        return output

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, inner = self._unmasked(batch)
        return self._mask_logits(super()._forward(inner, **kwargs), mask)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, inner = self._unmasked(batch)
        return self._mask_logits(super()._forward_train(inner, **kwargs), mask)

    def compute_values(self, batch: dict[str, Any], embeddings: Any | None = None) -> Any:
        _, inner = self._unmasked(batch)
        return super().compute_values(inner, embeddings)


class ConstantActionRLModule(RLModule):
    """A fixed policy: one action (``model_config["action"]``, default ``SPEAK``) for every observation. It has
    no parameters and is never trained: keep its module id out of ``policies_to_train``."""

    def setup(self) -> None:
        config = self.model_config if isinstance(self.model_config, Mapping) else {}
        self.constant = int(config.get("action", SPEAK))
        if not self.action_space.contains(self.constant):
            raise ValueError(f"action {self.constant} is outside {self.action_space}")

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        observation = batch[Columns.OBS]
        while isinstance(observation, Mapping):
            observation = next(iter(observation.values()))
        return {Columns.ACTIONS: np.full(len(observation), self.constant, dtype=np.int64)}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError("ConstantActionRLModule is fixed: leave it out of policies_to_train")


def agent_to_module(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """The policy mapping of the views: the therapist to ``"therapist"``, every participant to ``"participant"``
    (one module for all slots: they are the same kind of agent)."""
    return THERAPIST_MODULE if agent_id == THERAPIST else PARTICIPANT_MODULE


# ----- metrics ----------------------------------------------------------------------------------------------------


class EpisodeSummaryCallback(RLlibCallback):
    """Logs the numeric fields of the env's end-of-episode summary (``info["episode"]``: the return under every
    reward preset on the replays; the group term, ``mean_log_pi_b``, the intervention rate on ``RescueSim-v1``) as
    ``env_runners/rescue/<field>`` (the mean over the iteration's episodes); the therapist's, on a view."""

    def on_episode_end(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
        if metrics_logger is None:
            return
        info = episode.get_infos(-1)
        if isinstance(info, Mapping) and THERAPIST in info and "episode" not in info:
            info = info[THERAPIST]
        summary = info.get("episode") if isinstance(info, Mapping) else None
        if not isinstance(summary, Mapping):
            return
        for key, value in _numeric_items(summary):
            metrics_logger.log_value(("rescue", key), value, reduce="mean")


def _numeric_items(summary: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, float]]:
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _numeric_items(value, f"{name}.")
        elif isinstance(value, bool | np.bool_ | int | float | np.integer | np.floating) and math.isfinite(value):
            yield name, float(value)


# ----- configs ----------------------------------------------------------------------------------------------------


def _tied_entropy(spec: Any) -> float:
    """``tune.sample_from`` of ``entropy_coeff=TIED`` in a sweep over ``beta``: the trial's own ``beta``."""
    return float(spec["config"]["env_config"]["env_kwargs"]["beta"])


def ppo_config(
    target: str,
    *,
    seed: Any = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    masked: bool = True,
    participants: str = "fixed",
    entropy_coeff: Any = None,
    training: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    num_env_runners: int = 0,
    num_envs_per_env_runner: int = 1,
) -> PPOConfig:
    """A ``PPOConfig`` of ``target`` (a flat id or a view name, ``VIEWS``) on the new API stack.

    ``seed`` seeds torch, numpy, ``random`` and every env's first reset (``debugging(seed=...)``); a
    ``tune.grid_search`` is fine. ``env_kwargs`` go to ``gym.make`` (a view: to the view, the ``FEATURE_KEYS`` to
    its encoder); a value may be a ``tune.grid_search``. ``masked`` (flat ids; the views' therapist is always
    masked): ``MaskedObservation`` + ``MaskedPPOTorchRLModule``, else PPO's default module on the bare ``Box``.
    ``participants``: ``"fixed"`` or ``"learned"`` (see the module's docstring). ``entropy_coeff``: a number,
    ``TIED`` (= ``beta``; with ``beta`` a grid search, each trial's own), or None (``TIED`` on an env with a
    ``beta``, else 0). ``training`` overrides ``TRAIN_DEFAULTS`` (``PPOConfig.training`` arguments), ``model``
    ``MODEL_DEFAULTS``. ``num_env_runners=0`` samples in the algorithm's own process (the test's setting; on a
    cluster, give each trial runners).
    """
    if participants not in PARTICIPANTS:
        raise ValueError(f"participants must be one of {', '.join(PARTICIPANTS)}, got {participants!r}")
    env_kwargs = dict(env_kwargs or {})
    env_config = env_config_for(target, env_kwargs, masked)
    hyper = {**TRAIN_DEFAULTS, **dict(training or {})}
    model_config = {**MODEL_DEFAULTS, **dict(model or {})}

    beta = env_kwargs.get("beta")
    if entropy_coeff is None:
        has_beta = "beta" in env_kwargs or (not is_view(target) and "Sim" in target and target.endswith("-v1"))
        entropy_coeff = TIED if has_beta else 0.0
    if entropy_coeff == TIED:
        if isinstance(beta, Mapping) and "grid_search" in beta:
            entropy_coeff = tune.sample_from(_tied_entropy)
        elif beta is not None:
            entropy_coeff = float(beta)
        else:
            found = probe(target, env_kwargs).get("beta")
            if found is None:
                raise ValueError(f"entropy_coeff={TIED!r} needs an env with a beta; {target} has none")
            entropy_coeff = found
    hyper["entropy_coeff"] = entropy_coeff

    register_envs()
    config = (
        PPOConfig()
        .environment(FLAT_ENV if not is_view(target) else VIEW_ENV, env_config=env_config)
        .framework("torch")
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=num_envs_per_env_runner)
        .learners(num_learners=0)
        .training(**hyper)
        .callbacks(EpisodeSummaryCallback)
        .debugging(seed=seed)
        .reporting(min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=0)
    )
    if not is_view(target):
        module_class = MaskedPPOTorchRLModule if masked else None
        spec = RLModuleSpec(model_config=model_config, **({"module_class": module_class} if module_class else {}))
        return config.rl_module(rl_module_spec=spec)

    participant = (
        RLModuleSpec(module_class=ConstantActionRLModule, model_config={"action": SPEAK})
        if participants == "fixed"
        else RLModuleSpec(model_config=model_config)
    )
    trained = [THERAPIST_MODULE] + ([PARTICIPANT_MODULE] if participants == "learned" else [])
    return config.multi_agent(
        policies={THERAPIST_MODULE, PARTICIPANT_MODULE},
        policy_mapping_fn=agent_to_module,
        policies_to_train=trained,
    ).rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={
                THERAPIST_MODULE: RLModuleSpec(module_class=MaskedPPOTorchRLModule, model_config=model_config),
                PARTICIPANT_MODULE: participant,
            }
        )
    )


# ----- running ----------------------------------------------------------------------------------------------------


def init_ray(address: str | None = None, num_cpus: int | None = 2, **kwargs: Any) -> None:
    """``ray.init`` once: to the cluster at ``address`` (or ``RAY_ADDRESS``: what ``ray job submit`` sets) when
    there is one, else a local Ray of ``num_cpus`` CPUs, no dashboard, with this repository on the workers'
    ``PYTHONPATH`` (``bridges`` is not an installed package)."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **kwargs)
        return
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = dict(kwargs.pop("runtime_env", None) or {})
    runtime_env.setdefault("env_vars", {}).setdefault("PYTHONPATH", path)
    ray.init(num_cpus=num_cpus, include_dashboard=False, runtime_env=runtime_env, **kwargs)


def train(config: PPOConfig, iterations: int = 1, checkpoint: str | Path | None = None) -> list[dict[str, Any]]:
    """Build ``config``'s algorithm here, run ``iterations`` training iterations, return their result dicts
    (``checkpoint``: save the algorithm there at the end)."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(iterations)]
        if checkpoint is not None:
            algo.save_to_path(str(Path(checkpoint).resolve()))
        return results
    finally:
        algo.stop()


def sweep(
    target: str,
    seeds: Sequence[int],
    values: Sequence[float],
    *,
    coefficient: str = "beta",
    iterations: int = 1,
    storage_path: str | Path = "runs/ray",
    name: str | None = None,
    max_concurrent_trials: int | None = None,
    **config_kwargs: Any,
) -> tuple[list[dict[str, Any]], Any]:
    """One ``tune.Tuner`` over ``seeds x values`` of the env argument ``coefficient`` (``RescueSim-v1``'s
    ``beta``: with the default ``entropy_coeff``, each trial's entropy bonus is its own ``beta``), each trial
    ``iterations`` PPO iterations. Returns one row per trial and iteration (``flatten`` of Tune's reported
    metrics, with ``trial``, ``seed``, ``coefficient``, ``value``, ``status``) and the ``ResultGrid``. Tune's own
    files (per trial ``progress.csv``, ``result.json``) go under ``storage_path/name``; ``storage_path`` is made
    absolute (on a multi-node cluster, give shared storage: NFS or a ``s3://`` / ``gs://`` URI)."""
    if not seeds or not values:
        raise ValueError("a sweep needs at least one seed and one value")
    env_kwargs = dict(config_kwargs.pop("env_kwargs", None) or {})
    env_kwargs[coefficient] = tune.grid_search(list(values))
    config = ppo_config(target, seed=tune.grid_search(list(seeds)), env_kwargs=env_kwargs, **config_kwargs)
    storage = str(storage_path) if "://" in str(storage_path) else str(Path(storage_path).resolve())
    name = name or f"ppo-{target.replace('/', '_')}-{coefficient}-{time.strftime('%Y%m%d-%H%M%S')}"
    tuner = tune.Tuner(
        config.algo_class,
        param_space=config,
        tune_config=tune.TuneConfig(num_samples=1, max_concurrent_trials=max_concurrent_trials),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage,
            stop={"training_iteration": iterations},
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
        ),
    )
    grid = tuner.fit()
    rows: list[dict[str, Any]] = []
    for result in grid:
        trial_config = result.config or {}
        trial = {
            "trial": Path(result.path).name if result.path else None,
            "seed": trial_config.get("seed"),
            "coefficient": coefficient,
            "value": (trial_config.get("env_config") or {}).get("env_kwargs", {}).get(coefficient),
            "status": "error" if result.error else "ok",
            "error": None if result.error is None else str(result.error).splitlines()[0][:300],
        }
        frame = result.metrics_dataframe
        records = frame.to_dict("records") if frame is not None and len(frame) else [result.metrics or {}]
        for record in records:
            rows.append({**flatten(record), **trial})
    return rows, grid


def flatten(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The numeric (and short text) leaves of a result dict, keyed ``a/b/c`` (Tune's own flattening); the
    ``config`` and the per-iteration timers' details are left out (the settings are written once, beside)."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if name in ("config", "hist_stats") or name.startswith(("config/", "hist_stats/")):
            continue  # Tune's progress rows carry the config flattened as config/...
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}/"))
        elif isinstance(value, bool | np.bool_):
            out[name] = bool(value)
        elif isinstance(value, int | np.integer):
            out[name] = int(value)
        elif isinstance(value, float | np.floating):
            out[name] = float(value)
        elif isinstance(value, str) and len(value) <= 200:
            out[name] = value
    return out


def therapist_return(row: Mapping[str, Any], target: str) -> float | None:
    """The mean episode return of the learner the target is about, from a ``flatten``ed row: the therapist's on
    a view (``episode_return_mean`` there sums every agent's, the participants' well-being included), the
    env's on a flat id. None when the iteration finished no episode."""
    key = "env_runners/agent_episode_returns_mean/therapist" if is_view(target) else "env_runners/episode_return_mean"
    value = row.get(key)
    return None if value is None or not math.isfinite(float(value)) else float(value)


def versions() -> dict[str, str]:
    """The versions that made a result: rescue-env, ray, torch, gymnasium, pettingzoo, numpy, python."""
    import pettingzoo
    import torch

    return {
        "rescue-env": rescue_env.__version__,
        "ray": ray.__version__,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "pettingzoo": pettingzoo.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def settings_digest(settings: Mapping[str, Any]) -> str:
    """A short sha256 of the settings (JSON, sorted keys): rows of one configuration share it."""
    text = json.dumps(_json_safe(settings), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_results(
    output: str | Path, rows: Sequence[Mapping[str, Any]], *, kind: str, target: str, settings: Mapping[str, Any],
    data: Mapping[str, Any],
) -> dict[str, Path]:  # fmt: skip
    """Write ``output/results.csv`` (one row per trial and iteration: ``LEADING_COLUMNS`` first, every other
    metric after, with ``kind``, ``target``, ``data_sha256``, ``settings_sha256`` and the ray version on every
    row: ``pandas.read_csv`` reads it as it is) and ``output/results.json`` (``settings``, ``versions``, ``data``
    and the same rows: ``pandas.DataFrame(json.load(f)["rows"])``). Returns both paths."""
    import pandas as pd

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    meta = {
        "kind": kind,
        "target": target,
        "data_sha256": data.get("sha256"),
        "settings_sha256": settings_digest(settings),
        "ray_version": ray.__version__,
    }
    records = [{**meta, **row} for row in rows]
    frame = pd.DataFrame.from_records(records)
    leading = [c for c in LEADING_COLUMNS if c in frame.columns]
    frame = frame[leading + sorted(c for c in frame.columns if c not in leading)]
    paths = {"csv": output / "results.csv", "json": output / "results.json"}
    frame.to_csv(paths["csv"], index=False)
    payload = {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "kind": kind,
        "target": target,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": sys.argv,
        "settings": settings,
        "versions": versions(),
        "data": data,
        "rows": records,
    }
    paths["json"].write_text(json.dumps(_json_safe(payload), indent=1) + "\n")
    return paths


__all__ = [
    "FEATURE_KEYS",
    "FLAT_ENV",
    "MASKED_LOGIT",
    "MASK_KEY",
    "MODEL_DEFAULTS",
    "OBS_KEY",
    "PARTICIPANTS",
    "TIED",
    "TRAIN_DEFAULTS",
    "VIEWS",
    "VIEW_ENV",
    "ConstantActionRLModule",
    "EpisodeSummaryCallback",
    "FlatMultiPartyView",
    "MaskedObservation",
    "MaskedPPOTorchRLModule",
    "RescueMultiAgentEnv",
    "agent_to_module",
    "check_target",
    "env_config_for",
    "flatten",
    "init_ray",
    "make_flat",
    "make_view",
    "mask_size",
    "ppo_config",
    "probe",
    "register_envs",
    "sweep",
    "therapist_return",
    "train",
    "versions",
    "write_results",
]
