"""``SB3Policy``: a stable-baselines3 model trained on ``RescueFlat-v0``, played as a ``Policy`` of ``Rescue-v0``.

``train`` fits PPO or A2C (``MlpPolicy``) on ``make_flat_env(**feature_kwargs, **env_kwargs)`` and saves the model
(``PATH.zip``) with a JSON sidecar next to it (``PATH.json``): the algorithm, the feature settings of
``FlatObservation`` (``hash_dim``, ``embeddings``, ``last_row_weight``, ``turn_window``), the env settings that shape
the observation (``mode``, ``context_size``, ``max_chars``, ``max_participants``, ``decide_after_therapist``) and
where the model came from (data, reward, steps, seed, hyperparameters, versions). ``SB3Policy.load(PATH)`` reads
both back; ``make_policy("ppo:PATH.zip", env)`` and ``rescue-bench rollout --policy ppo:PATH.zip`` do the same.
``train`` also leaves the training's monitor log beside the model, ``PATH.monitor.csv`` (``monitor_path``: SB3's
``Monitor`` CSV, one line per training episode: return ``r``, length ``l``, seconds ``t``), which
``rescue-bench report`` draws as the learning curve; ``fit(progress=True)`` shows a bar of the timesteps with its
ETA (``progress_callback``).

At each step the policy encodes RescueEnv's ``Dict`` observation with ``FlatObservation.observation`` of a wrapper
built with the training settings (the feature code of training, not a copy of it) around a stand-in that has only
the env's spaces, predicts deterministically, decodes with ``FlatAction.action`` and repairs the masked choices
with ``policies.base.make_action``: target bits of absent slots are dropped (no target left, or every participant,
becomes the group bit), a strategy outside the scenario's taxonomy becomes the first valid one. Its actions are
therefore always valid, whatever the network outputs. Needs the ``rl`` extra (``pip install 'rescue-env[rl]'``).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from policies.base import make_action, unwrapped
from rescue_env.envs.wrappers import (
    DiscreteSupportAction,
    FlatAction,
    FlatObservation,
    SimFlatObservation,
    discrete_action_masks,
    flat_action_masks,
    make_flat_env,
)

if TYPE_CHECKING:
    from rescue_env.envs.replay import RescueEnv

ALGORITHMS: dict[str, str] = {"ppo": "PPO", "a2c": "A2C"}
"""Algorithm name (as in ``ppo:PATH.zip``) -> stable-baselines3 class name."""
FEATURE_DEFAULTS: dict[str, Any] = {"hash_dim": 256, "embeddings": False, "last_row_weight": 2.0, "turn_window": 8}
"""The feature settings of ``FlatObservation`` (its defaults), all recorded in the sidecar."""
OBSERVATION_SETTINGS = ("mode", "context_size", "max_chars", "max_participants", "decide_after_therapist")
"""RescueEnv arguments that change what the observation shows: recorded at training, checked when playing."""
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {"n_steps": 512, "batch_size": 64},
    "a2c": {},
}
"""Hyperparameters that differ from stable-baselines3's defaults (``train(algo_kwargs=...)`` overrides them)."""
SIDECAR_FORMAT = "rescue-env/sb3-policy"
SIDECAR_VERSION = 1


def algorithm_class(algo: str, saved: str | Path | None = None) -> type:
    """The stable-baselines3 class of ``algo`` (``ppo``, ``a2c``); for ``ppo``, sb3-contrib's ``MaskablePPO`` when
    the model saved at ``saved`` is one (``PPO.load`` cannot rebuild its policy)."""
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGORITHMS)}")
    try:
        import stable_baselines3
    except ImportError as exc:  # pragma: no cover - the rl extra is installed wherever tests run
        raise ImportError("trained policies need stable-baselines3: pip install 'rescue-env[rl]'") from exc
    if algo == "ppo" and saved is not None and _is_maskable(Path(saved)):
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    return getattr(stable_baselines3, ALGORITHMS[algo])


def _is_maskable(path: Path) -> bool:
    """The zip at ``path`` holds an sb3-contrib maskable policy: read from the module name SB3 writes beside the
    pickled policy class, so nothing is unpickled to find out."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False  # not an SB3 zip: the loader itself says so
    module = data.get("policy_class", {}).get("__module__", "") if isinstance(data, dict) else ""
    return str(module).startswith("sb3_contrib.common.maskable")


def model_path(path: str | Path) -> Path:
    """``path`` with the ``.zip`` suffix that stable-baselines3 gives a saved model."""
    path = Path(path)
    return path if path.suffix == ".zip" else path.with_name(path.name + ".zip")


def sidecar_path(path: str | Path) -> Path:
    """The JSON sidecar of the model at ``path``: ``runs/ppo.zip`` -> ``runs/ppo.json``."""
    return model_path(path).with_suffix(".json")


def monitor_path(path: str | Path) -> Path:
    """The training's monitor log of the model at ``path``: ``runs/ppo.zip`` -> ``runs/ppo.monitor.csv`` (the
    name ends in ``monitor.csv``, so SB3's ``load_results`` finds it too)."""
    return model_path(path).with_suffix(".monitor.csv")


def feature_settings(feature_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``FEATURE_DEFAULTS`` updated with ``feature_kwargs`` (unknown keys are an error)."""
    given = dict(feature_kwargs or {})
    unknown = sorted(set(given) - set(FEATURE_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown feature setting(s) {', '.join(unknown)}; choose from {', '.join(FEATURE_DEFAULTS)}")
    return {**FEATURE_DEFAULTS, **given}


def _space_text(space: gym.Space) -> str:
    """``[2, 2, ..., 11]`` for a ``MultiDiscrete`` (numpy's repr pads it with spaces), ``Discrete(89)`` otherwise."""
    return str(space.nvec.tolist()) if isinstance(space, gym.spaces.MultiDiscrete) else str(space)


def _read_sidecar(side: Path) -> dict[str, Any]:
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{side}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{side}: not a {SIDECAR_FORMAT} sidecar")
    if meta.get("version") != SIDECAR_VERSION:
        version = meta.get("version")
        raise ValueError(f"{side}: sidecar version {version!r}, this rescue-env reads {SIDECAR_VERSION}")
    return meta


class _Spaces(gym.Env):
    """Only the spaces of a ``RescueEnv``: all that ``FlatObservation`` and ``FlatAction`` read when they are built.
    The policy encodes observations through a wrapper around this, never around the env it plays in."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def step(self, action: Any):  # pragma: no cover - never stepped
        raise NotImplementedError("a stand-in for the spaces only")

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # pragma: no cover
        raise NotImplementedError("a stand-in for the spaces only")


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` torch threads (``None``: as set), restoring the previous number afterwards."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SB3Policy:
    """A trained stable-baselines3 model as a ``Policy`` of ``Rescue-v0`` (observation only; deterministic).

    ``model`` was trained on ``RescueFlat-v0`` built with ``feature_kwargs``; ``env_settings`` are the
    observation-shaping RescueEnv arguments of training (a warning says when the env played in differs);
    ``training`` is free provenance written to the sidecar. The flat wrappers are built for the spaces of the first
    env given (to ``load``, ``bind`` or ``act``) and rebuilt if a later env has other spaces.
    """

    def __init__(
        self,
        model: Any,
        algo: str,
        feature_kwargs: Mapping[str, Any] | None = None,
        env_settings: Mapping[str, Any] | None = None,
        training: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        if algo not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGORITHMS)}")
        self.model, self.algo = model, algo
        self.feature_kwargs = feature_settings(feature_kwargs)
        self.env_settings = dict(env_settings or {})
        self.training = dict(training or {})
        self.name = name or algo
        self._source: gym.Space | None = None
        self._assumed = self.training.get("sidecar") == "missing"
        self.flat_observation: FlatObservation | None = None
        self.flat_action: FlatAction | DiscreteSupportAction | None = None

    # ----- saving and loading ---------------------------------------------------------------------------------

    def sidecar(self) -> dict[str, Any]:
        return {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "algo": self.algo,
            "feature_kwargs": self.feature_kwargs,
            "env_settings": self.env_settings,
            "training": self.training,
        }

    def save(self, path: str | Path) -> Path:
        """Write the model (``PATH.zip``) and its sidecar (``PATH.json``); returns the model's path."""
        path = model_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.model.save(path)
        text = json.dumps(self.sidecar(), indent=2, sort_keys=True, default=repr)
        sidecar_path(path).write_text(text + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path, algo: str | None = None, env: Any = None) -> SB3Policy:
        """The policy saved at ``path`` (``.zip`` optional) with its sidecar; ``algo`` (from ``ppo:PATH``) must
        match the sidecar's; ``env`` (optional) binds the flat wrappers to its spaces at once."""
        zip_path, side = model_path(path), sidecar_path(path)
        if not zip_path.is_file():
            raise FileNotFoundError(f"no trained model at {zip_path}")
        if side.is_file():
            meta = _read_sidecar(side)
            saved = meta.get("algo")
            if algo is not None and algo != saved:
                raise ValueError(f"{zip_path} holds a {saved} model, not {algo} (use {saved}:{path})")
        else:
            # A model saved by SB3 itself (``model.save``) has no sidecar: the flat ids' defaults are the settings it
            # was most likely trained with, and a wrong guess is caught by ``bind``'s shape check.
            saved = algo or "ppo"
            meta = {"algo": saved, "feature_kwargs": {}, "env_settings": {}, "training": {"sidecar": "missing"}}
            defaults = ", ".join(f"{k}={v!r}" for k, v in FEATURE_DEFAULTS.items())
            print(
                f"note: {side.name} (the feature settings' sidecar) is missing beside {zip_path.name}; playing it with "
                f"the flat ids' default features ({defaults})",
                file=sys.stderr,
            )
        try:
            model = algorithm_class(saved, zip_path).load(zip_path, device="cpu")
        except (TypeError, ValueError, KeyError, RuntimeError) as exc:
            first = " ".join(str(exc).split())[:200]
            raise ValueError(f"{zip_path}: stable-baselines3 cannot load it as a {saved} model ({first})") from None
        policy = cls(
            model,
            saved,
            meta.get("feature_kwargs"),
            meta.get("env_settings"),
            meta.get("training"),
            name=f"{saved}:{path}",
        )
        if env is not None:
            policy.bind(env)
        return policy

    @property
    def masked(self) -> bool:
        """The model predicts with action masks (sb3-contrib's ``MaskablePPO``): it is given the observation's."""
        return type(self.model).__name__ == "MaskablePPO"

    # ----- the Policy protocol --------------------------------------------------------------------------------

    def bind(self, env: Any) -> None:
        """Build the flat wrappers for the spaces of ``env`` (a RescueEnv, possibly wrapped) unless already built
        for equal spaces; raises ``ValueError`` when the model cannot read that env's observations, and warns when
        the env's observation settings differ from training."""
        base = unwrapped(env)
        space = base.observation_space
        if space is self._source:
            return
        if self._source is None or space != self._source:
            # The encoder of the env's flat id (the sim adds its perceived state), the decoder of the model's
            # action space (``RescueFlat``'s MultiDiscrete or ``RescueFlatDiscrete``'s Discrete).
            encoder = SimFlatObservation if "distress" in space.spaces else FlatObservation
            observer = encoder(_Spaces(space, base.action_space), **self.feature_kwargs)
            discrete = isinstance(self.model.action_space, gym.spaces.Discrete)
            actor = DiscreteSupportAction(observer) if discrete else FlatAction(observer)
            expected, got = self.model.observation_space.shape, observer.observation_space.shape
            if expected != got or self.model.action_space != actor.action_space:
                slots = self.env_settings.get("max_participants")
                trained = "" if slots is None else f" (trained with max_participants={slots}, the env has "
                trained += "" if slots is None else f"{getattr(base, 'max_participants', '?')})"
                missing = " (no sidecar: the default features were assumed)" if self._assumed else ""
                raise ValueError(
                    f"{self.name}: the model reads {expected[0]} features and acts on "
                    f"{_space_text(self.model.action_space)}, the env gives {got[0]} and "
                    f"{_space_text(actor.action_space)}{trained}{missing}"
                )
            self.flat_observation, self.flat_action = observer, actor
        self._source = space
        differ = {
            k: (v, getattr(base, k))
            for k, v in self.env_settings.items()
            if k in OBSERVATION_SETTINGS and hasattr(base, k) and getattr(base, k) != v
        }
        if differ:
            shown = ", ".join(f"{k}={now!r} (trained with {then!r})" for k, (then, now) in differ.items())
            warnings.warn(f"{self.name} plays in an env whose observations differ from training: {shown}", stacklevel=2)

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the policy is deterministic and keeps no state across steps."""

    def action_masks(self, observation: dict) -> np.ndarray:
        """The model's action masks for ``observation`` (its own ``target_mask``, ``strategy_mask`` and last speaker:
        the masks the flat id gave in training)."""
        target, strategy = observation["target_mask"], observation["strategy_mask"]
        if isinstance(self.flat_action, DiscreteSupportAction):
            slot = int(observation["last_speaker"])
            return discrete_action_masks(target, strategy, slot if slot < target.size - 1 else None)
        return flat_action_masks(target, strategy)

    def encode(self, observation: dict, env: Any = None) -> np.ndarray:
        """The flat vector the model sees for ``observation`` (``FlatObservation.observation``)."""
        if env is not None:
            self.bind(env)
        if self.flat_observation is None:
            raise ValueError(f"{self.name}: give the env (to load, bind or act) before the first observation")
        return self.flat_observation.observation(observation)

    def act(self, observation: dict, env: RescueEnv | None = None) -> dict:
        vector = self.encode(observation, env)
        masks = {"action_masks": self.action_masks(observation)} if self.masked else {}
        flat, _ = self.model.predict(vector, deterministic=True, **masks)
        action = self.flat_action.action(flat)
        target = action["target"]
        # The last bit is the group (everyone); otherwise the chosen slots, of which make_action keeps the present.
        slots = None if target[-1] else np.flatnonzero(target[:-1]).tolist()
        return make_action(observation, bool(action["intervene"]), slots, action["strategy"])


# ----- training ---------------------------------------------------------------------------------------------


def quiet_logger(verbose: int = 0) -> Any:  # a stable_baselines3 Logger
    """The logger to ``set_logger`` on a model before ``learn``: SB3's own (``configure``) makes a folder
    ``SB3-<date>`` in the temp directory on every ``learn`` call, even with ``verbose=0``, and never removes it.
    This one writes no file: nothing at ``verbose=0``, SB3's stdout table otherwise (the runs keep their own
    monitor logs and sidecars)."""
    from stable_baselines3.common.logger import Logger, make_output_format

    return Logger(folder=None, output_formats=[make_output_format("stdout", "")] if verbose else [])


def progress_callback(description: str = "training") -> Any:  # a stable_baselines3 BaseCallback
    """A callback that shows the training's timesteps as a tqdm bar (rate, elapsed, ETA) on stderr.

    Not SB3's ``progress_bar=True``: that one draws with rich on stdout, whatever stdout is; this one is tqdm with
    ``disable=None``, like ``rescue-bench``'s bars: shown on a terminal, silent in logs and CI. Its total is the
    timesteps the algorithm will really play (PPO and A2C round up to whole rollouts of ``n_steps`` x envs)."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm.auto import tqdm

    class ProgressCallback(BaseCallback):
        def _on_training_start(self) -> None:
            total = int(self.locals["total_timesteps"]) - int(self.model.num_timesteps)
            rollout = getattr(self.model, "n_steps", 1) * self.training_env.num_envs
            self.bar = tqdm(
                total=math.ceil(total / rollout) * rollout,
                desc=description,
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                file=sys.stderr,
                disable=None,
                mininterval=0.5,
            )

        def _on_step(self) -> bool:
            self.bar.update(self.training_env.num_envs)
            return True

        def _on_training_end(self) -> None:
            self.bar.close()

    return ProgressCallback()


def fit(
    algo: str = "ppo",
    timesteps: int = 20_000,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    algo_kwargs: Mapping[str, Any] | None = None,
    torch_threads: int | None = 1,
    verbose: int = 0,
    monitor: str | Path | None = None,
    progress: bool = False,
) -> SB3Policy:
    """Train ``algo``'s ``MlpPolicy`` on ``RescueFlat-v0`` for ``timesteps`` steps (PPO rounds up to a multiple of
    ``n_steps``) and return it as an in-memory ``SB3Policy``, bound to the training env's spaces. Deterministic
    given ``seed`` (python, numpy and torch seeded; CPU; ``torch_threads`` torch threads during training).
    ``monitor``: write the training episodes to that CSV (SB3's ``Monitor``; ``monitor_path`` of the model is where
    ``rescue-bench report`` looks); ``progress``: show a bar of the timesteps (``progress_callback``)."""
    from stable_baselines3.common.utils import set_random_seed

    cls = algorithm_class(algo)
    if timesteps < 1:
        raise ValueError(f"timesteps must be >= 1, got {timesteps}")
    features = feature_settings(feature_kwargs)
    env_kwargs = dict(env_kwargs or {})
    hyper = {**ALGO_DEFAULTS[algo], **dict(algo_kwargs or {})}
    env = make_flat_env(**features, **env_kwargs)
    base = env.unwrapped
    if monitor is not None:
        from stable_baselines3.common.monitor import Monitor

        # SB3 wraps a bare env in a Monitor without a file anyway, so this changes no result: it only keeps the log.
        Path(monitor).parent.mkdir(parents=True, exist_ok=True)
        env = Monitor(env, filename=str(monitor))
    start = time.perf_counter()
    with _torch_threads(torch_threads):
        set_random_seed(seed)
        model = cls("MlpPolicy", env, seed=seed, device="cpu", verbose=verbose, **hyper)
        model.set_logger(quiet_logger(verbose))
        model.learn(total_timesteps=timesteps, callback=progress_callback(algo.upper()) if progress else None)
    seconds = time.perf_counter() - start
    close_monitor_log(env)
    reward = env_kwargs.get("reward", "combined")
    training = {
        "data": base.dataset.source,
        "sha256": base.dataset.sha256,
        "reward": reward if isinstance(reward, str) else "custom",
        "sample_order": base.sample_order,
        "timesteps": int(model.num_timesteps),
        "seed": seed,
        "algo_kwargs": hyper,
        "seconds": round(seconds, 2),
        "versions": _versions(),
    }
    if monitor is not None:
        training["monitor"] = Path(monitor).name
    settings = {k: getattr(base, k) for k in OBSERVATION_SETTINGS}
    policy = SB3Policy(model, algo, features, settings, training, name=algo)
    policy.bind(base)
    return policy


def close_monitor_log(env: Any) -> None:
    """Close the log file of SB3's ``Monitor`` / ``VecMonitor`` (``env``) once training is over, leaving the env
    open: SB3 closes it only with the env, and an open file left to the garbage collector warns in whatever runs
    next."""
    writer = getattr(env, "results_writer", None)
    if writer is not None:
        writer.close()


def train(
    algo: str = "ppo",
    timesteps: int = 20_000,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    save_to: str | Path | None = None,
    algo_kwargs: Mapping[str, Any] | None = None,
    torch_threads: int | None = 1,
    verbose: int = 0,
    progress: bool = False,
) -> Path:
    """``fit`` then save to ``save_to`` (default ``runs/ALGO-seedSEED.zip``) with the sidecar and the monitor log
    (``monitor_path``); returns the zip's path, which ``SB3Policy.load`` and ``--policy ALGO:PATH`` take."""
    target = model_path(save_to if save_to is not None else f"runs/{algo}-seed{seed}.zip")
    policy = fit(
        algo,
        timesteps,
        seed,
        env_kwargs,
        feature_kwargs,
        algo_kwargs,
        torch_threads,
        verbose,
        monitor=monitor_path(target),
        progress=progress,
    )
    return policy.save(target)


def _versions() -> dict[str, str]:
    import stable_baselines3
    import torch

    from rescue_env import __version__

    return {"rescue-env": __version__, "stable-baselines3": stable_baselines3.__version__, "torch": torch.__version__}


__all__ = [
    "ALGORITHMS",
    "ALGO_DEFAULTS",
    "FEATURE_DEFAULTS",
    "OBSERVATION_SETTINGS",
    "SB3Policy",
    "algorithm_class",
    "feature_settings",
    "fit",
    "model_path",
    "monitor_path",
    "progress_callback",
    "quiet_logger",
    "sidecar_path",
    "train",
]
