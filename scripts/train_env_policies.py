"""Train a policy on every flat env on the train side of the grouped split, evaluate it on the test side next to
reference policies, and draw its learning curve.

    python scripts/train_env_policies.py                                   # the demo, every env, ~2 minutes
    python scripts/train_env_policies.py --envs RescueFlat-v1,RescueITPFlat-v0 --timesteps 4096 --seed 1
    python scripts/train_env_policies.py --data ../shared/data/rescue_text.jsonl --timesteps 100000 \\
        --n-steps 1024 --output /tmp/env-policies                          # recommended on the release

Envs (``--envs``, comma-separated; default all): the replays ``RescueFlat-v0`` and ``RescueFlat-v1``, the closed
loop ``RescueSimFlat-v0`` and the task envs ``RescueITPFlat-v0``, ``RescueRPPFlat-v0``, ``RescueSTPFlat-v0``,
``RescueSSPFlat-v0`` (registered by ``import benchmarks``).

1. **Split.** The project's grouped split of --data (``rescue_env.data.splits``: no couple or family on both
   sides; --split-seed, --test-fraction). Training sees the train side only: the replays are built on its
   conversations, the sim starts from them (``starts="train"``), the task envs hold its instances
   (``split="train"``). ``Rescue-v1``'s outcome model F and the sim's F and session rates are fitted once, on
   the train side, and shared by the training and the test envs.
2. **Training.** sb3-contrib's ``MaskablePPO`` (``MlpPolicy``, CPU, seeded, --torch-threads threads) where the
   env has ``action_masks`` (every env here), else SB3's ``PPO`` (``--algo ppo`` forces it; on the replays it
   then goes through ``policies.sb3.fit``, so that ``rescue-bench rollout --policy ppo:PATH`` plays the model).
   Each env's model is saved as ``OUTPUT/ENV/model.zip`` with a sidecar ``model.json`` (algorithm, feature
   settings, hyperparameters, split, data sha256, training time and speed, versions) and the training's SB3
   ``Monitor`` log ``model.monitor.csv`` (``policies.sb3.monitor_path``), which ``rescue-bench report
   OUTPUT/ENV/model.zip`` also draws. Training time and steps/s (measured here, ``learn`` only) are printed.
3. **Evaluation on the test side**, with the saved model loaded back (deterministic): the replays and the sim
   with ``benchmarks.rollout.evaluate_policy`` (every test conversation once; timing P/R/F1, target, strategy,
   returns), next to ``never``, ``heuristic``, ``majority`` and ``cloning`` (the last two fitted on the train
   side; the sim: ``never``, ``heuristic``, ``perceived`` and ``imitation``, fitted on the train starts); the task
   envs with ``benchmarks.envs.play.play_task_env`` (every test instance once; the task's own metrics: ITP F1,
   RPP accuracy, STP/SSP recall@1 and MRR), next to the built-in ``majority`` agent (``baseline_actor``, its
   majority taken over the *train* instances, so that no gold of the test side is read) and ``heuristic``.
4. **Output** (--output, default ``runs/env-policies``): ``results.csv`` (one row per env x policy x scope x
   metric: ``env, kind, policy, role, scope, metric, value``; ``pandas.read_csv`` reads it; values are fractions,
   returns are the env's reward), ``training.csv`` (one row per env), ``results.md`` and the self-contained
   ``results.html`` (training table, learning curves, held-out tables), ``figures/ENV-learning-curve.png`` (the
   project's ``learning_curve_figure`` of the return *per step*, return / length, since the raw return mostly
   says how long the episode was and, in the sim, whether its calm bonus was paid; with its numbers, raw and per
   step, as ``.csv``), ``config.json`` and the models.

The default --timesteps (4096 per env) runs the whole script on the demo data in about two minutes on two cores:
a smoke test, not training. On the release (153 train / 38 test conversations), --timesteps 16384 --n-steps 1024
took 9.7 minutes on two cores (465 s of training, 180-560 steps/s by env; the rest the evaluation), and its
learning curves were still rising on the replays and the sim: we recommend --timesteps 100000 --n-steps 1024
there (about 50 minutes; --envs splits it into several runs). More steps will not rescue the task envs' bag of
words, which already fits its train instances far better than the test ones (ITP: 0.72 against 0.52).
Nothing guarantees that a trained policy beats the references, and no setting here was tuned on the test side.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

import benchmarks  # noqa: F401  (registers the task envs)
from benchmarks.envs.flat import TaskFlatObservation, make_task_flat_env
from benchmarks.envs.play import baseline_actor, play_task_env
from benchmarks.envs.task_env import RANKED, RescueTaskEnv
from benchmarks.reports.document import Report
from benchmarks.reports.rollout import learning_curve_figure, learning_curve_frame
from benchmarks.rollout import evaluate_policy, subset
from benchmarks.rollout_results import METRICS, SCOPES, PolicyReport, metric_value, table
from benchmarks.runs import versions
from policies import make_policy
from policies.base import make_action, unwrapped
from policies.sb3 import (
    ALGO_DEFAULTS,
    FEATURE_DEFAULTS,
    SB3Policy,
    close_monitor_log,
    fit,
    monitor_path,
    progress_callback,
    quiet_logger,
)
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.splits import SplitConfig, split_samples
from rescue_env.dynamics.fitting import outcome_model_for
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.replay_v1 import RescueEnvV1
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.envs.wrappers import (
    FlatAction,
    FlatObservation,
    SimFlatObservation,
    make_flat_env,
    make_sim_flat_env,
)
from rescue_env.reward import PRESETS

Kind = Literal["replay", "sim", "task"]
ALGOS = ("auto", "maskable-ppo", "ppo")
SIDECAR_FORMAT = "rescue-env/env-policy"
SIDECAR_VERSION = 1
TASK_HASH_DIM = 512  # make_task_flat_env's default
REPLAY_REFERENCES = ("never", "heuristic", "majority", "cloning")
FITTED_REFERENCES = frozenset({"majority", "cloning", "imitation"})
"""References fitted on the train side (an env of their own there), never on what they are scored on."""
SIM_REFERENCES = ("never", "heuristic", "perceived", "imitation")
TASK_REFERENCES = ("majority", "heuristic")


@dataclass(frozen=True)
class EnvTarget:
    """One flat env id of this script: its kind, the replay version or the task."""

    env_id: str
    kind: Kind
    version: int = 0
    task: str = ""


TARGETS: dict[str, EnvTarget] = {
    t.env_id: t
    for t in (
        EnvTarget("RescueFlat-v0", "replay", version=0),
        EnvTarget("RescueFlat-v1", "replay", version=1),
        EnvTarget("RescueSimFlat-v0", "sim"),
        *(EnvTarget(f"Rescue{task.upper()}Flat-v0", "task", task=task) for task in ("itp", "rpp", "stp", "ssp")),
    )
}
"""Every env id the script trains on, in the order it trains them."""


def parse_envs(text: str) -> list[str]:
    """The env ids of ``--envs`` (comma-separated, in the order given, each once); ``ValueError`` (one line)
    naming an unknown id."""
    ids = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [i for i in ids if i not in TARGETS]
    if unknown:
        raise ValueError(f"unknown env id {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    if not ids:
        raise ValueError(f"--envs names no env; choose from {', '.join(TARGETS)}")
    return ids


# ----- the split and the envs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sides:
    """The data, its grouped split, and what is fitted on the train side once for every env of the run."""

    full: Dataset
    train: Dataset
    test: Dataset
    split: SplitConfig
    dynamics: Any  # rescue_env.dynamics.outcome.OutcomeModel, fitted on the train side
    reward: str

    @classmethod
    def of(cls, dataset: Dataset, seed: int, test_fraction: float, reward: str) -> Sides:
        config = SplitConfig(split="all", seed=seed, test_fraction=test_fraction)
        train = split_samples(dataset.samples, config.model_copy(update={"split": "train"}))
        test = split_samples(dataset.samples, config.model_copy(update={"split": "test"}))
        dynamics = outcome_model_for(dataset, "train", seed=seed, test_fraction=test_fraction)
        return cls(dataset, subset(dataset, train), subset(dataset, test), config, dynamics, reward)


def replay_env(target: EnvTarget, sides: Sides, data: Dataset) -> RescueEnv:
    """The ``Dict`` replay of ``target`` on ``data`` (one side), F of the train side for v1."""
    kwargs: dict[str, Any] = {"dynamics": sides.dynamics} if target.version == 1 else {}
    cls = RescueEnvV1 if target.version == 1 else RescueEnv
    return cls(data, reward=sides.reward, sample_order="sequential", **kwargs)


def sim_env(sides: Sides, starts: str, rates: Any = None) -> RescueSimEnv:
    """``RescueSim-v0`` from the ``starts`` side, with F (and ``rates``, when given) of the train side."""
    split = sides.split
    return RescueSimEnv(
        sides.full,
        starts=starts,
        split_seed=split.seed,
        test_fraction=split.test_fraction,
        dynamics=sides.dynamics,
        rates=rates,
    )


def task_env(target: EnvTarget, sides: Sides, side: str, sample_order: str = "sequential") -> RescueTaskEnv:
    split = sides.split
    return RescueTaskEnv(
        target.task,
        dataset=sides.full,
        split=side,
        split_seed=split.seed,
        test_fraction=split.test_fraction,
        sample_order=sample_order,
    )


def training_env(target: EnvTarget, sides: Sides, rates: Any = None) -> Any:
    """The flat env of ``target`` on the train side (conversations drawn at random, as a learner wants)."""
    split = sides.split
    if target.kind == "replay":
        kwargs: dict[str, Any] = {"dynamics": sides.dynamics} if target.version == 1 else {}
        return make_flat_env(
            **FEATURE_DEFAULTS, version=target.version, data=sides.train, reward=sides.reward, **kwargs
        )
    if target.kind == "sim":
        return make_sim_flat_env(
            **FEATURE_DEFAULTS,
            data=sides.full,
            starts="train",
            split_seed=split.seed,
            test_fraction=split.test_fraction,
            dynamics=sides.dynamics,
            rates=rates,
        )
    return make_task_flat_env(
        target.task,
        hash_dim=TASK_HASH_DIM,
        dataset=sides.full,
        split="train",
        split_seed=split.seed,
        test_fraction=split.test_fraction,
        sample_order="random",
    )


# ----- training -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Training:
    env_id: str
    algo: str
    model: Path
    monitor: Path
    timesteps: int
    seconds: float

    @property
    def steps_per_second(self) -> float:
        return self.timesteps / self.seconds if self.seconds > 0 else math.nan


def choose_algo(requested: str, env: Any) -> str:
    """``auto``: ``maskable-ppo`` where the env has ``action_masks``, else ``ppo``."""
    if requested != "auto":
        return requested
    return "maskable-ppo" if callable(getattr(env, "action_masks", None)) else "ppo"


def algorithm(algo: str) -> type:
    if algo == "maskable-ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    from stable_baselines3 import PPO

    return PPO


def train_generic(
    env: Any, algo: str, timesteps: int, seed: int, hyper: Mapping[str, Any], model: Path, progress: bool, label: str
) -> tuple[Any, int, float]:
    """Train ``algo`` on ``env`` (wrapped in SB3's ``Monitor``, logging to ``monitor_path(model)``) and save it;
    (model, timesteps played, seconds in ``learn``)."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.utils import set_random_seed

    model.parent.mkdir(parents=True, exist_ok=True)
    monitored = Monitor(env, filename=str(monitor_path(model)))
    set_random_seed(seed)
    learner = algorithm(algo)("MlpPolicy", monitored, seed=seed, device="cpu", verbose=0, **hyper)
    learner.set_logger(quiet_logger())
    start = time.perf_counter()
    learner.learn(total_timesteps=timesteps, callback=progress_callback(label) if progress else None)
    seconds = time.perf_counter() - start
    close_monitor_log(monitored)
    learner.save(model)
    return learner, int(learner.num_timesteps), seconds


def write_sidecar(path: Path, payload: Mapping[str, Any]) -> None:
    meta = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, **payload}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=repr) + "\n")


# ----- the trained policies as players --------------------------------------------------------------------------


def flat_masks(observation: Mapping[str, Any]) -> np.ndarray:
    """``FlatAction.action_masks`` from the observation's own masks (the env's ``action_masks()`` returns the
    same two arrays): intervene free, per target slot "0 always, 1 where valid", the valid strategies."""
    targets = np.asarray(observation["target_mask"]).astype(bool)
    strategies = np.asarray(observation["strategy_mask"]).astype(bool)
    return np.array([True, True, *(b for valid in targets for b in (True, bool(valid))), *strategies], dtype=bool)


class FlatModelPolicy:
    """A model trained on a flat replay or sim env as a ``Policy`` of its ``Dict`` env (what ``evaluate_policy``
    plays): the observation is encoded by the training's wrapper (``FlatObservation`` / ``SimFlatObservation``,
    built on the env's spaces; a pure function of the observation), the prediction is deterministic (masked with
    the observation's masks for ``MaskablePPO``), decoded by ``FlatAction`` and repaired with ``make_action``
    like ``SB3Policy``'s, so the action is always valid."""

    def __init__(
        self, model: Any, encoder: type[FlatObservation], feature_kwargs: Mapping[str, Any], masked: bool, name: str
    ) -> None:
        self.model, self.encoder, self.feature_kwargs = model, encoder, dict(feature_kwargs)
        self.masked, self.name = masked, name
        self._space: Any = None
        self._observe: FlatObservation | None = None
        self._decode: FlatAction | None = None

    def reset(self, seed: int | None = None) -> None:
        """Deterministic and stateless: nothing to reset."""

    def _bind(self, env: Any) -> None:
        base = unwrapped(env)
        if base.observation_space is not self._space:
            self._observe = self.encoder(base, **self.feature_kwargs)
            self._decode = FlatAction(base)
            self._space = base.observation_space

    def act(self, observation: dict, env: Any) -> dict:
        self._bind(env)
        assert self._observe is not None and self._decode is not None
        vector = self._observe.observation(observation)
        extra = {"action_masks": flat_masks(observation)} if self.masked else {}
        flat, _ = self.model.predict(vector, deterministic=True, **extra)
        action = self._decode.action(np.asarray(flat, dtype=np.int64))
        target = action["target"]
        slots = None if target[-1] else np.flatnonzero(target[:-1]).tolist()
        return make_action(observation, bool(action["intervene"]), slots, action["strategy"])


def task_actor(model: Any, env: RescueTaskEnv, masked: bool) -> Callable[[dict, RescueTaskEnv], Any]:
    """A model trained on a flat task env as an actor of the ``Dict`` task env ``env`` (deterministic; masked with
    ``TaskFlatObservation.action_masks`` of the instance being played for ``MaskablePPO``)."""
    encoder = TaskFlatObservation(env, hash_dim=TASK_HASH_DIM)
    if encoder.observation_space.shape != model.observation_space.shape or env.action_space != model.action_space:
        raise ValueError(
            f"{env.task.name.upper()}: the test side's spaces ({encoder.observation_space.shape}, {env.action_space}) "
            f"differ from training's ({model.observation_space.shape}, {model.action_space})"
        )
    ranked = env.task.name in RANKED

    def act(observation: dict, played: RescueTaskEnv) -> Any:
        extra = {"action_masks": encoder.action_masks()} if masked else {}
        action, _ = model.predict(encoder.observation(observation), deterministic=True, **extra)
        return np.asarray(action, dtype=np.int64).reshape(-1) if ranked else int(np.asarray(action).reshape(()))

    return act


# ----- metrics --------------------------------------------------------------------------------------------------


Row = dict[str, Any]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def report_rows(env_id: str, kind: Kind, policy: str, role: str, report: PolicyReport) -> list[Row]:
    """The rows of ``results.csv`` for an ``evaluate_policy`` report: every metric of ``METRICS`` per scope that
    has episodes and a value, then the episode and decision counts."""
    rows: list[Row] = []
    for scope in SCOPES:
        scoped = report.scopes[scope]
        if not scoped.episodes:
            continue
        values = {key: metric_value(scoped, key) for key, _, _ in METRICS}
        values.update(episodes=scoped.episodes, decisions=scoped.steps, invalid_steps=scoped.invalid_steps)
        for metric, value in values.items():
            if _finite(value):
                rows.append(_row(env_id, kind, policy, role, scope, metric, value))
    return rows


def task_rows(env_id: str, policy: str, role: str, played: Mapping[str, Any]) -> list[Row]:
    """The rows of ``results.csv`` for a ``play_task_env`` result: the task's summary per scope, then the mean
    reward, the instance count and the failures (pooled)."""
    rows: list[Row] = []
    for scope, summary in played["scopes"].items():
        for metric, value in (summary or {}).items():
            if _finite(value):
                rows.append(_row(env_id, "task", policy, role, scope, metric, value))
    rewards = played["rewards"]
    extra = {"mean_reward": float(np.mean(rewards)), "instances": len(rewards), "failures": played["failures"]}
    rows += [_row(env_id, "task", policy, role, "all", k, v) for k, v in extra.items()]
    return rows


def _row(env_id: str, kind: str, policy: str, role: str, scope: str, metric: str, value: float) -> Row:
    return {
        "env": env_id,
        "kind": kind,
        "policy": policy,
        "role": role,
        "scope": scope,
        "metric": metric,
        "value": float(value),
    }


# ----- one env, end to end --------------------------------------------------------------------------------------


@dataclass
class Settings:
    timesteps: int
    seed: int
    algo: str
    hyper: dict[str, Any]
    torch_threads: int
    progress: bool
    output: Path


def log(*parts: Any) -> None:
    from tqdm.auto import tqdm

    tqdm.write(" ".join(map(str, parts)), file=sys.stderr)  # above a progress bar, never through it


def through_sb3(target: EnvTarget, algo: str) -> bool:
    """PPO on a replay goes through ``policies.sb3.fit``: its model then plays as ``ppo:PATH`` in rollout."""
    return target.kind == "replay" and algo == "ppo"


def train_target(target: EnvTarget, sides: Sides, settings: Settings, rates: Any) -> Training:
    """Train on the train side and save the model, its sidecar and its monitor log under ``OUTPUT/ENV/``."""
    model_file = settings.output / target.env_id / "model.zip"
    env = training_env(target, sides, rates)
    algo = choose_algo(settings.algo, env)
    if through_sb3(target, algo):
        env.close()  # fit builds its own (the same env from the same arguments)
        start = time.perf_counter()
        trained = fit(
            "ppo",
            settings.timesteps,
            settings.seed,
            env_kwargs=_replay_kwargs(target, sides),
            algo_kwargs=settings.hyper,
            torch_threads=None,  # main set them
            monitor=monitor_path(model_file),
            progress=settings.progress,
        )
        seconds = time.perf_counter() - start
        trained.save(model_file)
        return Training(
            target.env_id, algo, model_file, monitor_path(model_file), trained.training["timesteps"], seconds
        )
    label = f"{target.env_id} {algo}"
    _, steps, seconds = train_generic(
        env, algo, settings.timesteps, settings.seed, settings.hyper, model_file, settings.progress, label
    )
    training = Training(target.env_id, algo, model_file, monitor_path(model_file), steps, seconds)
    write_sidecar(model_file, _sidecar(target, sides, settings, training))
    return training


def evaluate_task(target: EnvTarget, sides: Sides, training: Training, seed: int) -> list[Row]:
    """The saved model and the built-in agents on every test instance of the task (the task's own metrics)."""
    test = task_env(target, sides, "test")
    model = algorithm(training.algo).load(training.model, device="cpu")
    actors = {training.algo: task_actor(model, test, training.algo == "maskable-ppo")}
    # The majority agent answers the majority of the instances it is built on: the train side's, never the test's.
    actors["majority"] = baseline_actor("majority", task_env(target, sides, "train"), seed=seed)
    actors["heuristic"] = baseline_actor("heuristic", test, seed=seed)
    rows: list[Row] = []
    for name, actor in actors.items():
        played = play_task_env(test, actor, seed=seed)
        rows += task_rows(target.env_id, name, "trained" if name == training.algo else "reference", played)
    return rows


def evaluate_episodes(target: EnvTarget, sides: Sides, training: Training, seed: int, rates: Any) -> list[Row]:
    """The saved model and the references on every test conversation of a replay or start of the sim."""
    if target.kind == "replay":
        test, fit_env = replay_env(target, sides, sides.test), replay_env(target, sides, sides.train)
        references, encoder = REPLAY_REFERENCES, FlatObservation
    else:
        test, fit_env = sim_env(sides, "test", rates), sim_env(sides, "train", rates)
        references, encoder = SIM_REFERENCES, SimFlatObservation
    if through_sb3(target, training.algo):
        player: Any = SB3Policy.load(training.model, env=test)  # the saved model, as rollout plays it
        player.name = training.algo
    else:
        model = algorithm(training.algo).load(training.model, device="cpu")
        masked = training.algo == "maskable-ppo"
        player = FlatModelPolicy(model, encoder, FEATURE_DEFAULTS, masked, training.algo)
    players: dict[str, Any] = {training.algo: player}
    for name in references:
        players[name] = make_policy(name, fit_env if name in FITTED_REFERENCES else test, seed)
    rows: list[Row] = []
    for name, policy in players.items():
        report = evaluate_policy(policy, test, seed=seed)
        role = "trained" if name == training.algo else "reference"
        rows += report_rows(target.env_id, target.kind, name, role, report)
    return rows


def run_env(target: EnvTarget, sides: Sides, settings: Settings) -> tuple[Training, list[Row]]:
    """Train on the train side, save, load back, evaluate on the test side next to the references."""
    # The sim's session rates are fitted on the train starts once and shared by training and both sides' envs.
    rates = sim_env(sides, "train").rates if target.kind == "sim" else None
    training = train_target(target, sides, settings, rates)
    log(
        f"{target.env_id}: trained {training.algo} for {training.timesteps:,} steps in {training.seconds:.1f} s "
        f"({training.steps_per_second:,.0f} steps/s) on the train side"
    )
    if target.kind == "task":
        return training, evaluate_task(target, sides, training, settings.seed)
    return training, evaluate_episodes(target, sides, training, settings.seed, rates)


def _replay_kwargs(target: EnvTarget, sides: Sides) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"data": sides.train, "reward": sides.reward, "version": target.version}
    if target.version == 1:
        kwargs["dynamics"] = sides.dynamics
    return kwargs


def _sidecar(target: EnvTarget, sides: Sides, settings: Settings, training: Training) -> dict[str, Any]:
    features = {"hash_dim": TASK_HASH_DIM} if target.kind == "task" else dict(FEATURE_DEFAULTS)
    return {
        "env_id": target.env_id,
        "algo": training.algo,
        "feature_kwargs": features,
        "hyperparameters": settings.hyper,
        "reward": sides.reward if target.kind == "replay" else None,
        "split": {**sides.split.model_dump(), "trained_on": "train"},
        "data": {"source": sides.full.source, "sha256": sides.full.sha256, "samples": len(sides.full)},
        "training": {
            "timesteps": training.timesteps,
            "seed": settings.seed,
            "seconds": round(training.seconds, 2),
            "steps_per_second": round(training.steps_per_second, 1),
            "torch_threads": settings.torch_threads,
            "monitor": training.monitor.name,
        },
        "versions": versions(),
    }


# ----- writing --------------------------------------------------------------------------------------------------


def curve_of(training: Training) -> pd.DataFrame:
    return learning_curve_frame({training.env_id: training.monitor})


PER_STEP_NOTE = (
    "return / length: episodes differ in length (one conversation each; the sim ends early once calm and then adds "
    "the calm state's reward for every step left, so its raw returns spike)"
)


def per_step_curve(curve: pd.DataFrame) -> pd.DataFrame:
    """``curve`` with ``return_per_step`` (each training episode's return / its length) and its rolling mean over
    the same window as ``rolling_mean``. The raw Monitor return is a sum over an episode's steps, so it mostly says
    which conversation was drawn (their lengths differ several times over) and, in the sim, whether the calm
    bonus (``info["calm_bonus"]``: the calm state's reward for every remaining step, up to 55 on the release) was
    paid: per step, learning shows."""
    per_step = curve["return"] / curve["length"].where(curve["length"] > 0)
    rolling = per_step.copy()
    for _, part in curve.groupby("label", sort=False):
        window = int(part["window"].iloc[0])
        rolling[part.index] = per_step[part.index].rolling(window, min_periods=1).mean()
    return curve.assign(return_per_step=per_step, rolling_mean_per_step=rolling)


def per_step_figure(curve: pd.DataFrame) -> Any:
    """The project's ``learning_curve_figure`` drawn on the return per step (``per_step_curve``), labelled so."""
    figure = learning_curve_figure(
        curve.assign(**{"return": curve["return_per_step"], "rolling_mean": curve["rolling_mean_per_step"]})
    )
    axes = figure.axes[0]
    axes.set_ylabel("training episode return per step")
    axes.set_title(f"Learning curve per step ({PER_STEP_NOTE})", fontsize=8, wrap=True)
    return figure


def training_row(training: Training, curve: pd.DataFrame, output: Path) -> Row:
    window = int(curve["window"].iloc[0]) if len(curve) else 0
    return {
        "env": training.env_id,
        "algo": training.algo,
        "timesteps": training.timesteps,
        "seconds": round(training.seconds, 3),
        "steps_per_second": round(training.steps_per_second, 1),
        "episodes": len(curve),
        "first_return": float(curve["return"].iloc[:window].mean()) if window else math.nan,
        "last_return": float(curve["return"].iloc[-window:].mean()) if window else math.nan,
        "model": str(training.model.relative_to(output)),
        "monitor": str(training.monitor.relative_to(output)),
    }


def _fmt(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:.3f}"


def metric_table(results: pd.DataFrame, env_id: str, scope: str = "all") -> tuple[list[str], list[list[str]]]:
    """Header and rows of one env's held-out metrics: a row per metric, a column per policy (trained first)."""
    part = results[(results["env"] == env_id) & (results["scope"] == scope)]
    policies = list(dict.fromkeys(part.sort_values("role", key=lambda r: r != "trained", kind="stable")["policy"]))
    pivot = part.pivot_table(index="metric", columns="policy", values="value", aggfunc="first", sort=False)
    rows = [[metric, *(_fmt(pivot.at[metric, p]) if p in pivot else "—" for p in policies)] for metric in pivot.index]
    return [f"{scope}: metric", *policies], rows


def build_report(
    results: pd.DataFrame, trainings: Sequence[Training], sides: Sides, settings: Settings
) -> tuple[Report, pd.DataFrame]:
    """``results.md``/``.html`` (training, a learning curve per env, held-out tables) and the training frame."""
    report = Report("Trained policies on the flat envs: held out on the test side", settings.output)
    report.paragraph(
        f"Data `{sides.full.source}` (sha256 `{sides.full.sha256[:12]}`): grouped split seed {sides.split.seed}, test "
        f"fraction {sides.split.test_fraction:g}, {len(sides.train)} train / {len(sides.test)} test conversations. "
        f"Seed {settings.seed}, {settings.timesteps:,} timesteps per env, hyperparameters "
        f"`{json.dumps(settings.hyper, sort_keys=True)}`, {settings.torch_threads} torch thread(s). Every figure below "
        "is measured on the test side; training saw only the train side. Values are fractions; returns are the env's."
    )
    frame_rows = []
    curves: dict[str, pd.DataFrame] = {}
    for training in trainings:
        curves[training.env_id] = per_step_curve(curve_of(training))
        frame_rows.append(training_row(training, curves[training.env_id], settings.output))
    frame = pd.DataFrame(frame_rows)
    report.heading("Training")
    report.table(
        ["Env", "Algorithm", "Timesteps", "Seconds", "Steps/s", "Episodes", "First return", "Last return", "Model"],
        [
            [
                r["env"],
                r["algo"],
                f"{r['timesteps']:,}",
                f"{r['seconds']:.1f}",
                f"{r['steps_per_second']:,.0f}",
                str(r["episodes"]),
                _fmt(r["first_return"]),
                _fmt(r["last_return"]),
                f"`{r['model']}`",
            ]
            for r in frame_rows
        ],
    )
    report.paragraph(
        "First / last return: the mean training-episode return over the first and last rolling windows. The learning "
        f"curves below show the return per step ({PER_STEP_NOTE})."
    )
    for training in trainings:
        report.heading(training.env_id)
        curve = curves[training.env_id]
        if curve.empty:
            report.paragraph(f"No training episode ended within {training.timesteps:,} steps: no learning curve.")
        else:
            report.figure(
                per_step_figure(curve),
                f"{training.env_id}-learning-curve",
                f"{training.env_id}: training episode return per step against timesteps ({training.algo}, train side;"
                f" {PER_STEP_NOTE})",
                data=curve,
            )
        header, rows = metric_table(results, training.env_id)
        report.table(header, rows)
    return report, frame


def write_outputs(
    results: pd.DataFrame, trainings: Sequence[Training], sides: Sides, settings: Settings, argv: Sequence[str]
) -> None:
    output = settings.output
    results.to_csv(output / "results.csv", index=False)
    report, frame = build_report(results, trainings, sides, settings)
    frame.to_csv(output / "training.csv", index=False)
    (output / "results.md").write_text(report.markdown(), encoding="utf-8")
    (output / "results.html").write_text(report.html(), encoding="utf-8")
    config = {
        "command": ["scripts/train_env_policies.py", *argv],
        "envs": [t.env_id for t in trainings],
        "timesteps": settings.timesteps,
        "seed": settings.seed,
        "algo": settings.algo,
        "hyperparameters": settings.hyper,
        "torch_threads": settings.torch_threads,
        "reward": sides.reward,
        "split": sides.split.model_dump(),
        "data": {"source": sides.full.source, "sha256": sides.full.sha256, "samples": len(sides.full)},
        "sides": {"train": len(sides.train), "test": len(sides.test)},
        "versions": versions(),
    }
    (output / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def print_summary(results: pd.DataFrame, trainings: Sequence[Training]) -> None:
    for training in trainings:
        header, rows = metric_table(results, training.env_id)
        print(
            f"\n{training.env_id} ({training.algo}: {training.timesteps:,} steps in {training.seconds:.1f} s, "
            f"{training.steps_per_second:,.0f} steps/s); held out on the test side"
        )
        print(table(header, rows))


# ----- command line ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train_env_policies.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--envs", default=",".join(TARGETS), metavar="IDS", help="comma-separated env ids")
    parser.add_argument("--data", default="demo", metavar="PATH", help="release JSONL, directory, or 'demo'")
    parser.add_argument("--output", "-o", default="runs/env-policies", metavar="DIR", help="output directory")
    parser.add_argument("--timesteps", type=int, default=4096, metavar="N", help="training steps per env")
    parser.add_argument("--seed", type=int, default=0, help="seeds training and evaluation")
    parser.add_argument("--algo", choices=ALGOS, default="auto", help="auto: MaskablePPO where the env masks")
    training = parser.add_argument_group("hyperparameters (PPO / MaskablePPO; SB3's defaults otherwise)")
    training.add_argument("--n-steps", type=int, default=ALGO_DEFAULTS["ppo"]["n_steps"], metavar="N")
    training.add_argument("--batch-size", type=int, default=ALGO_DEFAULTS["ppo"]["batch_size"], metavar="N")
    training.add_argument("--learning-rate", type=float, default=None, metavar="LR")
    training.add_argument("--ent-coef", type=float, default=None, metavar="C")
    training.add_argument("--torch-threads", type=int, default=1, metavar="N")
    split = parser.add_argument_group("split and reward")
    split.add_argument("--split-seed", type=int, default=0, help="seed of the grouped train/test split")
    split.add_argument("--test-fraction", type=float, default=0.2, help="test share of the split")
    split.add_argument("--reward", choices=list(PRESETS), default="combined", help="the replays' reward preset")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs and CI never get them)")
    return parser


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        env_ids = parse_envs(args.envs)
    except ValueError as exc:
        return _error(str(exc))
    for name in ("timesteps", "n_steps", "batch_size", "torch_threads"):
        if getattr(args, name) < 1:
            return _error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 < args.test_fraction < 1:
        return _error("--test-fraction must lie strictly between 0 and 1")
    try:
        dataset = load_dataset(args.data)
    except (OSError, ValueError) as exc:
        return _error(f"cannot load {args.data}: {str(exc).splitlines()[0]}")

    import torch

    torch.set_num_threads(args.torch_threads)
    hyper: dict[str, Any] = {"n_steps": args.n_steps, "batch_size": args.batch_size}
    for key in ("learning_rate", "ent_coef"):
        if getattr(args, key) is not None:
            hyper[key] = getattr(args, key)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    settings = Settings(args.timesteps, args.seed, args.algo, hyper, args.torch_threads, not args.no_progress, output)
    sides = Sides.of(dataset, args.split_seed, args.test_fraction, args.reward)
    sizes = f"{len(sides.train)} train / {len(sides.test)} test conversations"
    log(f"{dataset.source}: {sizes} (split seed {args.split_seed})")

    trainings: list[Training] = []
    rows: list[Row] = []
    for env_id in env_ids:
        training, env_rows = run_env(TARGETS[env_id], sides, settings)
        trainings.append(training)
        rows += env_rows
    results = pd.DataFrame(rows, columns=["env", "kind", "policy", "role", "scope", "metric", "value"])
    write_outputs(results, trainings, sides, settings, argv)
    print_summary(results, trainings)
    print(f"\nwrote {output / 'results.csv'}, {output / 'results.md'}, {output / 'training.csv'} and the models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
