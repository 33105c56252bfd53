"""``RescueSimSB3VecEnv``: stable-baselines3's ``VecEnv`` over the native vector env of ``RescueSim-v1``
(``rescue_env.envs.sim_v1_vector.RescueSimVectorEnvV1``), so that SB3's learners step N sessions with array
operations instead of N Python envs in a ``DummyVecEnv``.

    from stable_baselines3 import PPO
    from policies.sb3_vec import RescueSimSB3VecEnv

    venv = RescueSimSB3VecEnv(num_envs=64, data="demo")            # Dict observation, MultiDiscrete action
    PPO("MultiInputPolicy", venv, n_steps=64, batch_size=256).learn(10_000)

What SB3 sees:

- **observation** (``observation="dict"``, default): ``RescueSim-v1``'s ``Dict`` without its two ``Text`` keys
  (``context``, ``text``: SB3's policies take no text), for ``MultiInputPolicy``. ``observation="flat"``:
  ``RescueSimFlat-v1``'s ``Box`` vector (``wrappers.SimFlatObservation``: the context's bag of words, the slots,
  the scaled clock, the perceived distress and stances), for ``MlpPolicy``; each episode's context part is
  computed once by that wrapper's own code, the rest per step with array operations.
- **action** (``action="multidiscrete"``, default): ``FlatAction``'s ``MultiDiscrete([2] + [2] * (slots + 1) +
  [11])`` (intervene, a bit per target slot and the group bit, strategy); ``action="discrete"``:
  ``DiscreteSupportAction``'s one ``Discrete(1 + (slots + 2) * 11)`` (keep listening; last speaker, everyone or
  one slot x strategy), as ``RescueSimFlatDiscrete-v1``. ``action_masks()`` (``env_method("action_masks")``, as
  sb3-contrib's ``MaskablePPO`` asks) gives each session's valid choices in the wrappers' formats.
- **auto-reset**: SB3's (the vector env runs in ``AutoresetMode.SAME_STEP``): when a session's episode ends, the
  observation returned is the next episode's first; the last one is ``infos[i]["terminal_observation"]``, with
  ``infos[i]["TimeLimit.truncated"]`` (``RescueSim-v1`` truncates, never terminates), ``infos[i]["episode"]``
  (``{"r", "l", "t"}``: return, length, seconds since the adapter was built, as SB3's ``Monitor`` writes it, so
  that ``ep_rew_mean`` is logged without a ``VecMonitor``) and ``infos[i]["rescue_episode"]`` (the env's own
  summary: per-step return, group term, mean log pi_b, ...).
- **seeding**: the sessions share one generator; ``seed(s)`` (SB3: seeds ``s, s + 1, ...`` per env) seeds it
  with ``s`` at the next ``reset``.

``policies`` imports ``rescue_env``, never the other way around. Needs the ``rl`` extra.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from rescue_env.envs.sim_v1_vector import RescueSimVectorEnvV1
from rescue_env.envs.wrappers import SimFlatObservation

TEXT_KEYS = ("context", "text")
OBSERVATIONS = ("dict", "flat")
ACTIONS = ("multidiscrete", "discrete")


class RescueSimSB3VecEnv(VecEnv):
    """SB3's ``VecEnv`` interface (``reset``, ``step_async`` / ``step_wait``, ``get_attr``, ``set_attr``,
    ``env_method``, ``env_is_wrapped``, ``seed``, ``close``) over ``RescueSimVectorEnvV1`` (module docstring)."""

    def __init__(
        self,
        num_envs: int = 8,
        observation: str = "dict",
        action: str = "multidiscrete",
        flat_kwargs: dict[str, Any] | None = None,
        **env_kwargs: Any,
    ) -> None:
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {observation!r}")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
        self.venv = RescueSimVectorEnvV1(num_envs=num_envs, autoreset_mode="same_step", text=False, **env_kwargs)
        self.slots = self.venv.env.max_participants
        self.n_strategies = int(self.venv.single_action_space["strategy"].n)
        self.observation_kind, self.action_kind = observation, action
        single = self.venv.single_observation_space
        if observation == "dict":
            self._flat = None
            observation_space: spaces.Space = spaces.Dict(
                {k: v for k, v in single.spaces.items() if k not in TEXT_KEYS}
            )
        else:
            self._flat = FlatFeatures(self.venv, **(flat_kwargs or {}))
            observation_space = self._flat.space
        if action == "multidiscrete":
            action_space: spaces.Space = spaces.MultiDiscrete([2] + [2] * (self.slots + 1) + [self.n_strategies])
        else:
            action_space = spaces.Discrete(1 + (self.slots + 2) * self.n_strategies)
        super().__init__(num_envs, observation_space, action_space)
        self._actions: np.ndarray | None = None
        self._started = time.perf_counter()
        self._last_observation: dict[str, Any] | None = None

    # ----- the VecEnv API --------------------------------------------------------------------------------------

    def reset(self):
        seed = self._seeds[0]
        ids = [options.get("sample_id") for options in self._options]
        options = {"sample_id": ids} if all(i is not None for i in ids) else None
        observation, info = self.venv.reset(seed=seed, options=options)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = _split_info(info, self.num_envs)
        return self._observe(observation)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_async first")
        decoded, no_last_speaker = self._decode(self._actions)
        observation, rewards, terminated, truncated, info = self.venv.step(decoded)
        self._actions = None
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if no_last_speaker.any():  # DiscreteSupportAction counts "the last speaker" without one as masked
            for i in np.flatnonzero(no_last_speaker).tolist():
                infos[i]["n_invalid"] = 1
        if dones.any():
            final = info["final_info"]["episode"]
            now = round(time.perf_counter() - self._started, 6)
            for i in np.flatnonzero(dones).tolist():
                infos[i]["terminal_observation"] = self._observe_one(info["final_obs"][i])
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                summary = {key: _scalar(value[i]) for key, value in final.items() if not key.startswith("_")}
                infos[i]["episode"] = {"r": summary["return"], "l": int(summary["length"]), "t": now}
                infos[i]["rescue_episode"] = summary
            reset = _split_info(info, self.num_envs, keys=("sample_id", "scenario", "participants", "member"))
            for i in np.flatnonzero(dones).tolist():
                self.reset_infos[i] = reset[i]
        return self._observe(observation), rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of the vector env (one for all sessions), once per index."""
        value = getattr(self.venv, attr_name) if hasattr(self.venv, attr_name) else getattr(self.venv.env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"the sessions share one env: set {attr_name!r} when building RescueSimSB3VecEnv")

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list:
        """``action_masks`` per session (``MaskablePPO``); any other method of the vector env, called once."""
        rows = list(self._get_indices(indices))
        if method_name == "action_masks":
            masks = self.action_masks()
            return [masks[i] for i in rows]
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result for _ in rows]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    # ----- actions -------------------------------------------------------------------------------------------

    def action_masks(self) -> np.ndarray:
        """(num_envs, ...) bool: ``FlatAction.action_masks`` (one bool per choice of each sub-action) or
        ``DiscreteSupportAction.action_masks`` (one per action) of every session's current observation."""
        observation = self._last_observation
        if observation is None:
            raise RuntimeError("reset first")
        target = observation["target_mask"].astype(bool)
        strategy = observation["strategy_mask"].astype(bool)
        N = self.num_envs
        if self.action_kind == "multidiscrete":
            pairs = np.stack([np.ones_like(target), target], axis=2).reshape(N, -1)
            return np.concatenate([np.ones((N, 2), dtype=bool), pairs, strategy], axis=1)
        last = self.venv.last_speaker_slots()
        speaker = (last >= 0) & target[np.arange(N), np.maximum(last, 0)]
        targets = np.concatenate([speaker[:, None], target[:, -1:], target[:, :-1]], axis=1)
        choices = (targets[:, :, None] & strategy[:, None, :]).reshape(N, -1)
        return np.concatenate([np.ones((N, 1), dtype=bool), choices], axis=1)

    def _decode(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """SB3's actions as the vector env's ``Dict`` batch (``FlatAction`` / ``DiscreteSupportAction``'s reading),
        and which sessions asked for "the last speaker" without one."""
        N, P = self.num_envs, self.slots
        actions = np.asarray(actions)
        width = int(np.prod(self.action_space.shape)) if self.action_kind == "multidiscrete" else 1
        high = self.action_space.nvec if self.action_kind == "multidiscrete" else self.action_space.n
        if actions.size != N * width or actions.dtype.kind not in "iu":
            raise ValueError(f"expected {N} integer actions of {self.action_space}, got {actions.dtype}{actions.shape}")
        actions = actions.reshape(N, width).astype(np.int64)
        if (actions < 0).any() or (actions >= high).any():
            raise ValueError(f"actions outside {self.action_space}")
        nobody = np.zeros(N, dtype=bool)
        if self.action_kind == "multidiscrete":
            return {"intervene": actions[:, 0], "target": actions[:, 1 : P + 2], "strategy": actions[:, -1]}, nobody
        index = actions[:, 0]
        k, strategy = np.divmod(np.maximum(index - 1, 0), self.n_strategies)
        last = self.venv.last_speaker_slots()
        # k = 0: the last speaker's slot (none: an intervention on no one); 1: the group bit; 2 + i: slot i
        slot = np.where(k == 0, last, np.where(k == 1, P, k - 2))
        intervene = index > 0
        nobody = intervene & (k == 0) & (last < 0)
        target = np.zeros((N, P + 1), dtype=np.int8)
        rows = np.flatnonzero(intervene & ~nobody)
        target[rows, slot[rows]] = 1
        strategy = np.where(intervene, strategy, 0)  # keep listening: strategy 0 (in both taxonomies)
        return {"intervene": intervene.astype(np.int64), "target": target, "strategy": strategy}, nobody

    # ----- observations ----------------------------------------------------------------------------------------

    def _observe(self, observation: dict[str, Any]) -> Any:
        self._last_observation = observation
        if self._flat is not None:
            return self._flat(observation)
        return {k: v for k, v in observation.items() if k not in TEXT_KEYS}

    def _observe_one(self, observation: dict[str, Any]) -> Any:
        if self._flat is not None:
            batch = {k: np.asarray([v]) for k, v in observation.items() if k not in TEXT_KEYS}
            batch["context"] = (observation["context"],)
            return self._flat(batch)[0]
        return {k: np.asarray(v) for k, v in observation.items() if k not in TEXT_KEYS}


class FlatFeatures:
    """``SimFlatObservation.observation`` of a batch: the part that depends on the context, the slots, the scenario
    and the last speaker is that wrapper's own vector (computed once per context and last speaker, by its code);
    the clock (log-scaled) and the perceived distress and stances are written in per step."""

    def __init__(self, venv: RescueSimVectorEnvV1, **feature_kwargs: Any) -> None:
        self.wrapper = SimFlatObservation(venv.env, **feature_kwargs)
        self.space = self.wrapper.observation_space
        self.venv = venv
        self._points: dict[tuple[str, int], np.ndarray] = {}
        slices = self.wrapper.feature_slices
        self._time = slices["elapsed"].start
        self._extra = slices["distress"].start
        (_, self._first_cap), (_, self._second_cap) = self.wrapper.elapsed_scales

    def _point(self, observation: dict[str, Any], i: int) -> np.ndarray:
        context, last = observation["context"][i], int(observation["last_speaker"][i])
        key = (context, last)
        vector = self._points.get(key)
        if vector is None:
            one = {k: (v[i] if k != "context" else context) for k, v in observation.items() if k not in ("text",)}
            one["elapsed"] = np.zeros(2, dtype=np.float32)
            vector = self._points[key] = self.wrapper.observation(one)[: self._extra]
        return vector

    def __call__(self, observation: dict[str, Any]) -> np.ndarray:
        N = len(observation["context"])
        out = np.empty((N, self.space.shape[0]), dtype=np.float32)
        out[:, : self._extra] = np.stack([self._point(observation, i) for i in range(N)])
        elapsed = observation["elapsed"].astype(np.float64)
        out[:, self._time] = _log_scaled(elapsed[:, 0], self._first_cap)
        out[:, self._time + 1] = _log_scaled(elapsed[:, 1], self._second_cap)
        extra = np.concatenate([observation["distress"].reshape(N, -1), observation["stance"].reshape(N, -1)], 1)
        out[:, self._extra :] = np.clip(extra, 0.0, 1.0)
        return out


def _log_scaled(value: np.ndarray, cap: float) -> np.ndarray:
    """``wrappers._log_scale`` of an array (log1p(value) / log1p(cap), 0 for negative values), clipped to [0, 1]."""
    return np.clip(np.where(value > 0, np.log1p(np.maximum(value, 0.0)) / np.log1p(cap), 0.0), 0.0, 1.0)


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _split_info(info: dict[str, Any], n: int, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The vector env's info (arrays and ``_key`` masks) as one dict per session (the keys it has)."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key in keys if keys is not None else [k for k in info if not k.startswith("_")]:
        if key not in info or isinstance(info[key], dict) or key.startswith("final_"):
            continue
        mask = info[f"_{key}"]
        for i in np.flatnonzero(mask).tolist():
            out[i][key] = _scalar(info[key][i])
    return out


__all__ = ["ACTIONS", "OBSERVATIONS", "FlatFeatures", "RescueSimSB3VecEnv"]
