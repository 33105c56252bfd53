"""Train MaskablePPO on ``RescueSimFlatDiscrete-v1`` (training-split starts), draw its learning curve, and evaluate it
on the held-out starts next to every baseline, with an analysis of what the trained policy actually does.

``--env-version 0`` trains on ``RescueSim-v0`` as before (headline: the discounted return); v1 (the default: F1,
the behaviour prior, no calm end) compares the per-step return and reports its two terms apart (the group term per
step, the mean log pi_b), with the cloned therapist (``behaviour``) among the baselines; PPO's entropy bonus
defaults to v1's beta, which makes the objective the KL-regularised one (``RescueSim-v1``'s docstring).
``--action multidiscrete`` trains on ``RescueSimFlat-v*`` instead of the one Discrete action.

    python scripts/train_sim_ppo.py                                  # the release when present, else the demo
    python scripts/train_sim_ppo.py --timesteps 200000 --eval-seeds 10 --output runs/sim_ppo
    python scripts/train_sim_ppo.py --data demo --timesteps 512 --n-envs 2 --n-steps 64 --eval-seeds 1

1. Training: sb3-contrib's ``MaskablePPO`` (``MlpPolicy``, CPU, seeded, --torch-threads threads) on --n-envs
   copies of ``RescueSimFlat-v0`` whose starts are the *train* side of the project's grouped split of --data
   (--split-seed, --test-fraction); F and the session rates are fitted on that side, once, and shared by every env
   of the run (training, curve and evaluation). The model is saved as OUTPUT/model.zip with a sidecar
   OUTPUT/model.json (format ``rescue-env/sim-maskable-ppo``: feature and env settings, provenance) and the
   training's monitor log OUTPUT/model.monitor.csv (SB3's ``VecMonitor``: return, length and time of every
   training episode of every env, in the order they ended; ``rescue-bench report`` draws it). It is loaded
   back by ``load_trained`` here, not by ``policies.sb3.SB3Policy``: that class plays the replay env's
   ``FlatObservation`` with ``PPO`` / ``A2C``, and its registry of algorithms is pinned by its tests.
2. Learning curve: every --curve-every steps (and before training) the deterministic policy plays every test start
   and every train start --curve-seeds times; the mean discounted return (95 % bootstrap interval over starts) goes
   to OUTPUT/curve.csv and OUTPUT/curve.png, where the constant policies' held-out levels (step 3) are horizontal
   lines. The training time is reported with and without the time spent on the curve.
3. Held-out evaluation: every test start, --eval-seeds seeds each (the same env seeds for every policy), played by
   the trained policy (deterministic, and sampling from it: ``ppo-stochastic``) and by every baseline: the
   constants (never, always-everyone with each strategy -- the scenario's first valid strategy, track, where the
   strategy is outside its taxonomy --, last-speaker, most-vocal, most-distressed), random, heuristic, perceived,
   imitation (fitted on the train starts), recorded and group-greedy. Mean discounted return and mean final max
   distress per start (over its seeds), then the mean over starts with a 95 % bootstrap interval resampling starts
   (conversations, not episodes), and the paired difference to the trained policy (same starts, same resamples).
   Written to OUTPUT/results.json (config, package versions, data sha256, training, curve, table, action analysis,
   verdict), OUTPUT/results.csv (one row per policy) and OUTPUT/episodes.csv (one row per episode).
4. What the policies do (on the same held-out episodes): how often they intervene, whom (alone, pair, subgroup,
   everyone, or an intervention with no recipient), whether a selective intervention includes the most distressed
   participant (true state, ties count), and the strategy frequencies; the trained policy is flagged when it does
   one thing always (one strategy > 90 % of its interventions, everyone > 90 %, intervening at > 95 % of steps, or
   at < 5 %).

Privileged policies (most-distressed, recorded, group-greedy) read the simulator's true state or the recorded
actions: references, not competitors. Nothing guarantees that the trained policy beats anything.

On a terminal, training (timesteps) and the held-out evaluation (episodes) show progress bars with their ETA;
``--no-progress`` or ``--quiet`` turns them off, and logs and CI never get them.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.metrics import mean_ci
from benchmarks.rollout import episode_seed
from benchmarks.rollout_results import table
from benchmarks.runs import versions
from policies import AlwaysInterveneEveryone, make_policy
from policies.imitation import ImitationPolicy
from policies.sb3 import close_monitor_log, monitor_path, progress_callback, quiet_logger
from rescue_env.data import Dataset, load_dataset
from rescue_env.dynamics.outcome import SupportAction, recipient_kind
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.envs.sim_v1 import RescueSimEnvV1
from rescue_env.envs.wrappers import DiscreteSupportAction, SimFlatObservation, discrete_action_masks, make_sim_flat_env
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT.parent / "shared" / "data" / "rescue_text.jsonl"
DEFAULT_OUTPUT = ROOT / "runs" / "sim_ppo"

SIDECAR_FORMAT = "rescue-env/sim-maskable-ppo"
SIDECAR_VERSION = 1
TRAINED = ("ppo", "ppo-stochastic")
CONSTANT_NAMES = ("never", "last-speaker", "most-vocal", "most-distressed")
OTHER_BASELINES = ("random", "heuristic", "perceived", "imitation", "recorded", "group-greedy")
V1_BASELINES = ("behaviour",)
"""Baselines of ``RescueSim-v1`` only: the cloned therapist (its behaviour model, sampled from the observation)."""
METRIC = {0: "discounted_return", 1: "per_step_return"}
"""The headline of each env version: v1 has no calm end and compares conversations of different lengths per step."""
PRIVILEGED = frozenset({"most-distressed", "recorded", "group-greedy"})
TO_BEAT_OTHERS = ("heuristic", "perceived", "imitation")
"""Besides every constant: the policies the trained one is asked to beat (observation-only, or fitted)."""
RECIPIENT_KINDS = ("alone", "pair", "subgroup", "everyone", "nobody")
FLAG_SHARE, FLAG_ALWAYS, FLAG_NEVER = 0.9, 0.95, 0.05


def always_everyone_name(strategy: str) -> str:
    return f"always-everyone[{strategy}]"


def policy_kind(name: str) -> str:
    if name in TRAINED:
        return "trained"
    if name in CONSTANT_NAMES or name.startswith("always-everyone["):
        return "constant"
    return "reference" if name in PRIVILEGED else "baseline"


def is_privileged(name: str) -> bool:
    return name in PRIVILEGED


# ----- the trained policy ---------------------------------------------------------------------------------------


def flat_masks(observation: Mapping[str, Any]) -> np.ndarray:
    """The ``MultiDiscrete`` masks of ``FlatAction.action_masks`` from an observation's own masks (the env's
    ``action_masks()`` returns the same two arrays)."""
    targets = np.asarray(observation["target_mask"]).astype(bool)
    strategies = np.asarray(observation["strategy_mask"]).astype(bool)
    pairs = [b for valid in targets for b in (True, bool(valid))]
    return np.array([True, True, *pairs, *strategies.tolist()], dtype=bool)


class TrainedSimPolicy:
    """A ``MaskablePPO`` model of ``RescueSimFlat-v0`` as a ``Policy`` of ``RescueSim-v0``: the observation is
    encoded with ``SimFlatObservation`` (the training feature settings), the masks come from the observation, and
    the flat action is decoded as ``FlatAction`` does (intervene, target bits, strategy). ``deterministic=False``
    samples from the policy, seeded through torch at ``reset(seed)``."""

    def __init__(self, model: Any, feature_kwargs: Mapping[str, Any], deterministic: bool = True) -> None:
        self.model, self.feature_kwargs, self.deterministic = model, dict(feature_kwargs), deterministic
        self.name = "ppo" if deterministic else "ppo-stochastic"
        self.discrete = type(model.action_space).__name__ == "Discrete"  # RescueSimFlatDiscrete's one action
        self._encoder: SimFlatObservation | None = None
        self._decoder: DiscreteSupportAction | None = None
        self._space: Any = None

    def encode(self, observation: Mapping[str, Any], env: Any) -> np.ndarray:
        base = getattr(env, "unwrapped", env)
        if self._encoder is None or base.observation_space is not self._space:
            # A pure function of the observation: the wrapper never steps or resets the env it is built on.
            self._encoder, self._space = SimFlatObservation(base, **self.feature_kwargs), base.observation_space
            # The discrete action is decoded as in training: its "last speaker" is the encoded observation's.
            self._decoder = DiscreteSupportAction(self._encoder) if self.discrete else None
        return self._encoder.observation(dict(observation))

    def reset(self, seed: int | None = None) -> None:
        if not self.deterministic and seed is not None:
            import torch

            torch.manual_seed(seed)

    def act(self, observation: Mapping[str, Any], env: Any) -> dict[str, Any]:
        vector = self.encode(observation, env)
        if self._decoder is not None:
            slot = int(observation["last_speaker"])
            target = np.asarray(observation["target_mask"])
            masks = discrete_action_masks(target, np.asarray(observation["strategy_mask"]),
                                          slot if slot < target.size - 1 else None)  # fmt: skip
            index, _ = self.model.predict(vector, action_masks=masks, deterministic=self.deterministic)
            return self._decoder.action(int(np.asarray(index).ravel()[0]))
        flat, _ = self.model.predict(vector, action_masks=flat_masks(observation), deterministic=self.deterministic)
        flat = np.asarray(flat, dtype=np.int64).ravel()
        return {"intervene": int(flat[0]), "target": flat[1:-1].astype(np.int8), "strategy": int(flat[-1])}


def save_trained(model: Any, output: Path, sidecar: Mapping[str, Any]) -> Path:
    """``output/model.zip`` and its sidecar ``output/model.json``; returns the zip's path."""
    path = output / "model.zip"
    model.save(path)
    meta = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "algo": "maskable-ppo", **sidecar}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=repr) + "\n")
    return path


def load_trained(path: str | Path, deterministic: bool = True) -> tuple[TrainedSimPolicy, dict[str, Any]]:
    """The policy saved by ``save_trained`` at ``path`` (the zip) and its sidecar."""
    from sb3_contrib import MaskablePPO

    path = Path(path)
    meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    if meta.get("format") != SIDECAR_FORMAT or meta.get("version") != SIDECAR_VERSION:
        raise ValueError(f"{path.with_suffix('.json')}: not a {SIDECAR_FORMAT} v{SIDECAR_VERSION} sidecar")
    model = MaskablePPO.load(path, device="cpu")
    return TrainedSimPolicy(model, meta["feature_kwargs"], deterministic), meta


# ----- playing episodes -----------------------------------------------------------------------------------------


def play(policy: Any, env: RescueSimEnv, sample_id: str, seed: int, steps: list | None = None) -> dict[str, Any]:
    """One episode of ``policy`` from ``sample_id`` with env seed ``seed``; ``info["episode"]`` (plus the start and
    scenario). With ``steps`` given, appends per step: (scenario, n, intervene, recipients, strategy key, most
    distressed slots before the step, the recorded support when the policy is ``recorded``)."""
    if steps is not None:
        env.info_level = "full"  # the per-step records read info["chosen"]
    observation, info = env.reset(seed=seed, options={"sample_id": sample_id})
    policy.reset(seed)
    people = info["participants"]
    episode = env.episode(env.dataset.get(sample_id)) if steps is not None else None
    t = 0
    while True:
        before = env.state()["distress"] if steps is not None else None
        action = policy.act(observation, env)
        observation, _, terminated, truncated, info = env.step(action)
        if steps is not None:
            chosen = info["chosen"]
            recipients = frozenset(people.index(name) for name in chosen["target"])
            top = frozenset(np.flatnonzero(before == before.max()).tolist()) if before.size else frozenset()
            steps.append(
                (
                    episode.scenario,
                    len(people),
                    bool(chosen["intervene"]),
                    recipients,
                    chosen["strategy"],
                    top,
                    episode.recorded[t],
                )
            )
        t += 1
        if terminated or truncated:
            return {"sample_id": sample_id, **info["episode"]}


def evaluate(
    policy: Any,
    env: RescueSimEnv,
    sample_ids: Sequence[str],
    seeds: int,
    base_seed: int,
    steps: list | None = None,
    on_episode: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Every start ``seeds`` times (env seed ``episode_seed(base_seed, "SAMPLE/k")``: the same for every policy);
    ``on_episode()`` is called after each episode (a progress bar)."""
    out = []
    for sample_id in sample_ids:
        scenario = env.episode(env.dataset.get(sample_id)).scenario
        for k in range(seeds):
            seed = episode_seed(base_seed, f"{sample_id}/{k}")
            record = play(policy, env, sample_id, seed, steps)
            out.append({**record, "scenario": scenario, "seed_index": k, "seed": seed})
            if on_episode is not None:
                on_episode()
    return out


def per_start(episodes: Sequence[Mapping[str, Any]], key: str, sample_ids: Sequence[str]) -> np.ndarray:
    """The mean of ``key`` over each start's episodes, in ``sample_ids`` order."""
    values: dict[str, list[float]] = {}
    for record in episodes:
        values.setdefault(record["sample_id"], []).append(float(record[key]))
    return np.array([np.mean(values[s]) for s in sample_ids])


def summary(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float, float]:
    low, high = mean_ci(values, resamples=resamples, seed=seed) if resamples > 0 else (float("nan"),) * 2
    return float(values.mean()), float(low), float(high)


# ----- what a policy does ---------------------------------------------------------------------------------------


def action_analysis(steps: Sequence[tuple]) -> dict[str, Any]:
    """Frequencies of a policy's choices over the steps ``play`` recorded (see ``play``)."""
    n_steps = len(steps)
    on = [s for s in steps if s[2]]
    kinds: Counter[str] = Counter()
    strategies: Counter[str] = Counter()
    selective = selective_top = alone = alone_top = 0
    by_scenario: dict[str, Counter[str]] = {}
    strategies_by_scenario: dict[str, Counter[str]] = {}
    for scenario, n, _, recipients, strategy, top, _ in on:
        kind = recipient_kind(SupportAction(True, recipients), n) or "nobody"
        kind = "everyone" if kind == "group" else kind
        kinds[kind] += 1
        by_scenario.setdefault(scenario, Counter())[kind] += 1
        strategies[strategy or "invalid"] += 1
        strategies_by_scenario.setdefault(scenario, Counter())[strategy or "invalid"] += 1
        if kind in ("alone", "pair", "subgroup"):
            selective += 1
            selective_top += bool(recipients & top)
            if kind == "alone":
                alone += 1
                alone_top += bool(recipients & top)
    count = len(on)

    def share(a: int, b: int) -> float | None:
        return a / b if b else None

    out: dict[str, Any] = {
        "steps": n_steps,
        "interventions": count,
        "intervention_rate": share(count, n_steps),
        "recipients": {k: share(kinds[k], count) for k in RECIPIENT_KINDS},
        "recipients_by_scenario": {
            scenario: {k: share(c[k], sum(c.values())) for k in RECIPIENT_KINDS}
            for scenario, c in sorted(by_scenario.items())
        },
        "selective_includes_most_distressed": share(selective_top, selective),
        "alone_is_most_distressed": share(alone_top, alone),
        "strategies": {k: share(strategies[k], count) for k in (*ALL_STRATEGY_KEYS, "invalid") if strategies[k]},
        "strategies_by_scenario": {
            scenario: {k: share(c[k], sum(c.values())) for k in (*ALL_STRATEGY_KEYS, "invalid") if c[k]}
            for scenario, c in sorted(strategies_by_scenario.items())
        },
    }
    recorded = [s[6] for s in on]
    if recorded and all(r is not None for r in recorded):
        out["recorded_unknown_strategy"] = share(sum(r.intervene and r.strategy is None for r in recorded), count)
        out["recorded_unknown_recipients"] = share(sum(r.intervene and not r.recipients for r in recorded), count)
    return out


def flags(analysis: Mapping[str, Any]) -> list[str]:
    """Plain statements when a policy does one thing always."""
    found = []
    rate = analysis["intervention_rate"] or 0.0
    if rate > FLAG_ALWAYS:
        found.append(f"intervenes at {100 * rate:.1f} % of steps (> {100 * FLAG_ALWAYS:.0f} %)")
    if rate < FLAG_NEVER:
        found.append(f"intervenes at only {100 * rate:.1f} % of steps (< {100 * FLAG_NEVER:.0f} %: near 'never')")
    everyone = analysis["recipients"].get("everyone") or 0.0
    if analysis["interventions"] and everyone > FLAG_SHARE:
        found.append(f"supports everyone in {100 * everyone:.1f} % of its interventions (> {100 * FLAG_SHARE:.0f} %)")
    for key, value in analysis["strategies"].items():
        if value > FLAG_SHARE:
            found.append(f"uses {key} in {100 * value:.1f} % of its interventions (> {100 * FLAG_SHARE:.0f} %)")
    for scenario, shares in analysis.get("strategies_by_scenario", {}).items():
        key, value = max(shares.items(), key=lambda kv: kv[1])
        if value > FLAG_SHARE and analysis["strategies"].get(key, 0.0) <= FLAG_SHARE:
            found.append(
                f"uses {key} in {100 * value:.1f} % of its {scenario} interventions (> {100 * FLAG_SHARE:.0f} %)"
            )
    return found


def analysis_table(analyses: Mapping[str, Mapping[str, Any]]) -> str:
    names = list(analyses)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}"

    rows = [
        ["steps", *(str(analyses[n]["steps"]) for n in names)],
        ["intervention rate %", *(pct(analyses[n]["intervention_rate"]) for n in names)],
        *([f"  whom: {k} %", *(pct(analyses[n]["recipients"][k]) for n in names)] for k in RECIPIENT_KINDS),
        [
            "  selective incl. most distressed %",
            *(pct(analyses[n]["selective_includes_most_distressed"]) for n in names),
        ],
        ["  alone = most distressed %", *(pct(analyses[n]["alone_is_most_distressed"]) for n in names)],
    ]
    keys = [k for k in (*ALL_STRATEGY_KEYS, "invalid") if any(k in analyses[n]["strategies"] for n in names)]
    rows += [[f"  strategy {k} %", *(pct(analyses[n]["strategies"].get(k, 0.0)) for n in names)] for k in keys]
    return table(["share (of interventions unless said)", *names], rows)


# ----- the learning curve ---------------------------------------------------------------------------------------


def curve_callback(
    evaluate_now: Callable[[Any], dict[str, float]], every: int, log: Callable[..., None] = print
) -> Any:  # a stable_baselines3 BaseCallback
    from stable_baselines3.common.callbacks import BaseCallback

    class CurveCallback(BaseCallback):
        """Evaluates before training, every ``every`` steps and at the end; keeps the time it spent."""

        def __init__(self) -> None:
            super().__init__()
            self.points: list[dict[str, float]] = []
            self.eval_seconds = 0.0
            self.started = 0.0
            self.next_at = every

        def _measure(self) -> None:
            start = time.perf_counter()
            point = evaluate_now(self.model)
            self.eval_seconds += time.perf_counter() - start
            train_seconds = time.perf_counter() - self.started - self.eval_seconds
            self.points.append({"timesteps": int(self.num_timesteps), "train_seconds": train_seconds, **point})
            log(
                f"  curve: {self.num_timesteps:>8,} steps, {train_seconds:6.1f} s: held-out {point['test_mean']:.3f}, "
                f"train {point['train_mean']:.3f}"
            )

        def _on_training_start(self) -> None:
            self.started = time.perf_counter()
            self._measure()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_at:
                self._measure()
                while self.next_at <= self.num_timesteps:
                    self.next_at += every
            return True

        def _on_training_end(self) -> None:
            if self.points[-1]["timesteps"] != self.num_timesteps:
                self._measure()

    return CurveCallback()


def plot_curve(
    points: Sequence[Mapping[str, float]],
    levels: Mapping[str, float],
    path: Path,
    title: str,
    ylabel: str = "mean discounted return (γ = 0.99)",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([p["timesteps"] for p in points])
    fig, ax = plt.subplots(figsize=(8, 5))
    for side, color in (("test", "tab:blue"), ("train", "tab:orange")):
        mean = np.array([p[f"{side}_mean"] for p in points])
        ax.plot(x, mean, marker="o", color=color, label=f"PPO (deterministic), {side} starts")
        low, high = np.array([p[f"{side}_low"] for p in points]), np.array([p[f"{side}_high"] for p in points])
        if np.isfinite(low).all():
            ax.fill_between(x, low, high, color=color, alpha=0.15)
    styles = ("--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 3)))
    for i, (name, value) in enumerate(levels.items()):
        ax.axhline(
            value,
            color=f"C{(i + 2) % 10}",
            linestyle=styles[i % len(styles)],
            linewidth=1.2,
            label=f"{name} (held out)",
        )
    ax.set_xlabel("training timesteps")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----- the script -----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train_sim_ppo.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", default=str(RELEASE) if RELEASE.is_file() else "demo", help="data (JSONL) or demo")
    parser.add_argument("--output", "-o", default=str(DEFAULT_OUTPUT), help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="seeds training, the curve and the evaluation")
    train = parser.add_argument_group("training (MaskablePPO, MlpPolicy, CPU)")
    train.add_argument("--timesteps", type=int, default=200_000, help="env steps (rounded up to a rollout)")
    train.add_argument("--torch-threads", type=int, default=2, help="torch threads")
    train.add_argument("--n-envs", type=int, default=8, help="training envs (DummyVecEnv)")
    train.add_argument("--n-steps", type=int, default=256, help="rollout length per env and update")
    train.add_argument("--batch-size", type=int, default=256, help="minibatch size")
    train.add_argument("--n-epochs", type=int, default=10, help="epochs per update")
    train.add_argument("--learning-rate", type=float, default=3e-4, help="Adam learning rate")
    train.add_argument(
        "--ent-coef", type=float, default=None, help="entropy bonus (default: v1's beta, the KL identity; v0: 0)"
    )
    train.add_argument("--hash-dim", type=int, default=256, help="SimFlatObservation's bag-of-words buckets")
    env = parser.add_argument_group("environment (RescueSim-v1; --env-version 0 for RescueSim-v0)")
    env.add_argument("--env-version", type=int, choices=(0, 1), default=1, help="RescueSim-v1 or -v0")
    env.add_argument(
        "--action", choices=("discrete", "multidiscrete"), default="discrete", help="the flat id's action space"
    )
    env.add_argument("--beta", type=float, default=None, help="v1's behaviour weight (default: the env's rule)")
    env.add_argument("--ensemble", choices=("mean", "member"), default="mean", help="v1: F1 or one member per episode")
    env.add_argument("--split-seed", type=int, default=0, help="seed of the grouped train/test split")
    env.add_argument("--test-fraction", type=float, default=0.2, help="test share of the split")
    env.add_argument("--perception-noise", type=float, default=0.1, help="sd of the perceived state's noise")
    env.add_argument("--effect-scale", type=float, default=1.0, help="scale of F's action effects")
    ev = parser.add_argument_group("curve and evaluation")
    ev.add_argument("--curve-every", type=int, default=20_000, help="timesteps between curve points")
    ev.add_argument("--curve-seeds", type=int, default=2, help="seeds per start at each curve point")
    ev.add_argument("--eval-seeds", type=int, default=10, help="seeds per held-out start (K)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of starts for the 95 %% CIs")
    ev.add_argument("--quiet", action="store_true", help="print only the tables")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars (training, evaluation)")
    return parser


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _interval(mean: float, low: float, high: float, digits: int = 3) -> str:
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data != "demo" and not Path(args.data).exists():
        parser.error(f"{args.data} not found")
    for name in ("timesteps", "torch_threads", "n_envs", "n_steps", "batch_size", "n_epochs", "curve_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.curve_seeds < 1 or args.eval_seeds < 1:
        parser.error("--curve-seeds and --eval-seeds must be >= 1")
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor
    from tqdm.auto import tqdm

    started = time.perf_counter()
    # tqdm.write: a log line printed while a bar is shown goes above the bar instead of through it.
    log = (lambda *a: None) if args.quiet else (lambda *a: tqdm.write(" ".join(map(str, a)), file=sys.stderr))
    progress = not (args.quiet or args.no_progress)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.torch_threads)

    dataset: Dataset = load_dataset(args.data)
    common = {
        "data": dataset,
        "split_seed": args.split_seed,
        "test_fraction": args.test_fraction,
        "perception_noise": args.perception_noise,
        "effect_scale": args.effect_scale,
    }
    sim_class = RescueSimEnvV1 if args.env_version == 1 else RescueSimEnv
    metric = METRIC[args.env_version]
    if args.env_version == 1:
        common.update(beta=args.beta, ensemble=args.ensemble)
    train_env = sim_class(starts="train", **common)
    # One F (v1: F1 and pi_b, and the behaviour weight) and one set of session rates (fitted on the train side) for
    # every env of the run.
    if args.env_version == 1:
        common.update(dynamics=train_env.outcome_model, behaviour=train_env.behaviour, beta=train_env.beta)
    else:
        common.update(dynamics=train_env.dynamics)
    common.update(rates=train_env.rates)
    test_env = sim_class(starts="test", **common)
    curve_train_env = sim_class(starts="train", **common)
    flat_id = f"RescueSimFlat{'Discrete' if args.action == 'discrete' else ''}-v{args.env_version}"
    ent_coef = args.ent_coef if args.ent_coef is not None else (train_env.beta if args.env_version == 1 else 0.0)
    train_ids = [s.sample_id for s in train_env.samples]
    test_ids = [s.sample_id for s in test_env.samples]
    overlap = set(train_ids) & set(test_ids)
    if overlap:  # pragma: no cover - the grouped split guarantees it
        raise RuntimeError(f"train and test starts overlap: {sorted(overlap)[:3]}")
    log(f"{dataset.source}: {len(train_ids)} train / {len(test_ids)} held-out starts (split seed {args.split_seed})")

    feature_kwargs = {"hash_dim": args.hash_dim}
    hyper = {
        "n_steps": args.n_steps,
        "batch_size": args.batch_size,
        "n_epochs": args.n_epochs,
        "learning_rate": args.learning_rate,
        "ent_coef": ent_coef,
        "gamma": train_env.gamma,
    }

    def evaluate_now(model: Any) -> dict[str, float]:
        policy = TrainedSimPolicy(model, feature_kwargs, deterministic=True)
        point: dict[str, float] = {}
        for side, env, ids in (("test", test_env, test_ids), ("train", curve_train_env, train_ids)):
            episodes = evaluate(policy, env, ids, args.curve_seeds, args.seed + 1)
            mean, low, high = summary(per_start(episodes, metric, ids), min(args.bootstrap, 200), 0)
            point.update({f"{side}_mean": mean, f"{side}_low": low, f"{side}_high": high})
        return point

    set_random_seed(args.seed)
    vec = make_vec_env(
        make_sim_flat_env,
        n_envs=args.n_envs,
        seed=args.seed,
        env_kwargs={
            "starts": "train",
            "version": args.env_version,
            "action": args.action,
            **feature_kwargs,
            **common,
        },  # fmt: skip
    )
    # One monitor log for all the envs (episodes in the order they end), beside the model: the learning curve of
    # ``rescue-bench report``. make_vec_env's own per-env Monitors keep no file; VecMonitor replaces their
    # episode statistics with identical ones, so SB3's warning about it says nothing here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*already wrapped with a `Monitor`", category=UserWarning)
        vec = VecMonitor(vec, filename=str(monitor_path(output / "model.zip")))
    model = MaskablePPO("MlpPolicy", vec, seed=args.seed, device="cpu", verbose=0, **hyper)
    model.set_logger(quiet_logger())
    callback = curve_callback(evaluate_now, args.curve_every, log)
    callbacks = CallbackList([callback, progress_callback("MaskablePPO")]) if progress else callback
    log(f"training MaskablePPO for {args.timesteps:,} steps ({args.n_envs} envs, {args.torch_threads} torch threads)")
    learn_start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, callback=callbacks)
    wall = time.perf_counter() - learn_start
    close_monitor_log(vec)
    train_seconds = wall - callback.eval_seconds
    steps = int(model.num_timesteps)
    training = {
        "timesteps": steps,
        "seed": args.seed,
        "hyperparameters": hyper,
        "n_envs": args.n_envs,
        "torch_threads": args.torch_threads,
        "wall_seconds": round(wall, 2),
        "train_seconds": round(train_seconds, 2),
        "curve_seconds": round(callback.eval_seconds, 2),
        "steps_per_second": round(steps / train_seconds, 1),
        "monitor": monitor_path(output / "model.zip").name,
    }
    log(
        f"trained {steps:,} steps in {train_seconds:.1f} s without the curve ({steps / train_seconds:,.0f} steps/s), "
        f"{wall:.1f} s with it"
    )
    env_settings = {
        "split_seed": args.split_seed,
        "test_fraction": args.test_fraction,
        "perception_noise": args.perception_noise,
        "effect_scale": args.effect_scale,
        "max_participants": train_env.max_participants,
        "max_chars": train_env.max_chars,
        "mode": train_env.mode,
        "opening": train_env.opening,
        "lam": train_env.lam,
        "gamma": train_env.gamma,
        "env_version": args.env_version,
        "action": args.action,
        "env_id": flat_id,
        **({"beta": train_env.beta, "ensemble": args.ensemble} if args.env_version == 1 else {}),
    }
    data_info = {"source": dataset.source, "sha256": dataset.sha256, "samples": len(dataset)}
    path = save_trained(
        model,
        output,
        {
            "feature_kwargs": feature_kwargs,
            "env_settings": env_settings,
            "training": training,
            "data": data_info,
            "versions": versions(),
        },
    )
    log(f"saved {path} and {path.with_suffix('.json')}")

    # ----- held-out evaluation (the saved model, loaded back) -----
    trained, _ = load_trained(path, deterministic=True)
    stochastic, _ = load_trained(path, deterministic=False)
    policies: dict[str, Any] = {"ppo": trained, "ppo-stochastic": stochastic}
    for name in CONSTANT_NAMES[:1]:
        policies[name] = make_policy(name, test_env, args.seed)
    for index, key in enumerate(ALL_STRATEGY_KEYS):
        policies[always_everyone_name(key)] = AlwaysInterveneEveryone(index)
    for name in CONSTANT_NAMES[1:]:
        policies[name] = make_policy(name, test_env, args.seed)
    for name in OTHER_BASELINES + (V1_BASELINES if args.env_version == 1 else ()):
        if name == "imitation":
            policies[name] = ImitationPolicy.fit(train_env, seed=args.seed)
        else:
            policies[name] = make_policy(name, test_env, args.seed)

    episodes: dict[str, list[dict[str, Any]]] = {}
    analyses: dict[str, dict[str, Any]] = {}
    eval_start = time.perf_counter()
    total = len(policies) * len(test_ids) * args.eval_seeds
    # disable=None: a bar on a terminal, silence in logs and CI.
    with tqdm(
        total=total, desc="held-out evaluation", unit="episode", file=sys.stderr, disable=None if progress else True
    ) as bar:
        for name, policy in policies.items():
            steps_log: list[tuple] = []
            bar.set_postfix_str(name)
            tick = functools.partial(bar.update, 1)
            episodes[name] = evaluate(policy, test_env, test_ids, args.eval_seeds, args.seed, steps_log, tick)
            analyses[name] = action_analysis(steps_log)
            log(f"  {name}: {len(episodes[name])} episodes")
    eval_seconds = time.perf_counter() - eval_start

    # ----- the table -----
    # v1 also reports its reward's two terms apart: the group term per step and the mean log pi_b.
    keys = (metric, "final_max_distress") + (("per_step_group", "mean_log_pi_b") if args.env_version == 1 else ())
    starts = {}
    for name in policies:
        starts[name] = {k: per_start(episodes[name], k, test_ids) for k in keys}
    rows = []
    for name in policies:
        row: dict[str, Any] = {"policy": name, "kind": policy_kind(name), "privileged": is_privileged(name)}
        row["starts"], row["episodes"] = len(test_ids), len(episodes[name])
        for key in keys:
            label = key
            mean, low, high = summary(starts[name][key], args.bootstrap, args.seed)
            row.update({label: mean, f"{label}_low": low, f"{label}_high": high})
            diff = starts["ppo"][key] - starts[name][key]
            mean, low, high = summary(diff, args.bootstrap, args.seed)
            row.update({f"ppo_minus_{label}": mean, f"ppo_minus_{label}_low": low, f"ppo_minus_{label}_high": high})
        row["return"] = float(np.mean([e["return"] for e in episodes[name]]))
        row["length"] = float(np.mean([e["length"] for e in episodes[name]]))
        row["intervention_rate"] = analyses[name]["intervention_rate"]
        row["calm_rate"] = float(np.mean([e["calm"] for e in episodes[name]]))
        rows.append(row)
    by_name = {row["policy"]: row for row in rows}
    constants = [n for n in policies if policy_kind(n) == "constant"]
    strategy_constants = [n for n in constants if n.startswith("always-everyone[")]
    best_strategy = max(strategy_constants, key=lambda n: by_name[n][metric])
    to_beat = [*constants, *TO_BEAT_OTHERS]

    verdict: dict[str, Any] = {"best_always_everyone": best_strategy, "compared_with": to_beat}
    for name in TRAINED:
        for key, better in ((metric, 1.0), ("final_max_distress", -1.0)):
            diffs = {b: (starts[name][key] - starts[b][key]) * better for b in to_beat}
            point = {b: float(d.mean()) for b, d in diffs.items()}
            low = {b: summary(d, args.bootstrap, args.seed)[1] for b, d in diffs.items()}
            verdict[f"{name}_{key}"] = {
                "beats_all": all(v > 0 for v in point.values()),
                "loses_to": sorted(b for b, v in point.items() if v <= 0),
                "significantly_beats_all": all(v > 0 for v in low.values()),
                "not_significantly_beaten": sorted(b for b, v in low.items() if not v > 0),
            }

    header = ["policy", f"{metric.replace('_', ' ')} [95% CI]", "final max distress [95% CI]", "PPO - it: return"]
    header += ["PPO - it: distress", "interv. %", "calm %"]
    if args.env_version == 1:
        header += ["group/step [95% CI]", "mean log pi_b"]
    lines = []
    for row in rows:
        label = row["policy"] + (" (priv.)" if row["privileged"] else "")
        lines.append(
            [
                label,
                _interval(row[metric], row[f"{metric}_low"], row[f"{metric}_high"]),
                _interval(row["final_max_distress"], row["final_max_distress_low"], row["final_max_distress_high"]),
                "—"
                if row["policy"] == "ppo"
                else _interval(
                    row[f"ppo_minus_{metric}"],
                    row[f"ppo_minus_{metric}_low"],
                    row[f"ppo_minus_{metric}_high"],
                    2,
                ),
                "—"
                if row["policy"] == "ppo"
                else _interval(
                    row["ppo_minus_final_max_distress"],
                    row["ppo_minus_final_max_distress_low"],
                    row["ppo_minus_final_max_distress_high"],
                    2,
                ),
                f"{100 * (row['intervention_rate'] or 0.0):.1f}",
                f"{100 * row['calm_rate']:.1f}",
            ]
            + (
                [
                    _interval(row["per_step_group"], row["per_step_group_low"], row["per_step_group_high"]),
                    f"{row['mean_log_pi_b']:.2f}",
                ]
                if args.env_version == 1
                else []
            )
        )
    print(
        f"\nheld-out starts: {len(test_ids)} conversations x {args.eval_seeds} seeds of {dataset.source} "
        f"(sha256 {dataset.sha256[:12]}); trained {steps:,} steps in {train_seconds:.1f} s "
        f"(+{callback.eval_seconds:.1f} s of curve); 95 % intervals resample starts"
    )
    print(table(header, lines))
    print(f"best always-everyone strategy on the held-out starts: {best_strategy}")

    shown = {n: analyses[n] for n in ("ppo", "ppo-stochastic", "recorded", "imitation")}
    print("\nwhat the policies do on the held-out episodes:")
    print(analysis_table(shown))
    rec = analyses["recorded"]
    if "recorded_unknown_strategy" in rec:
        print(
            f"(recorded: {100 * rec['recorded_unknown_strategy']:.1f} % of its interventions have no known strategy "
            f"and play the scenario's first valid one, track; {100 * rec['recorded_unknown_recipients']:.1f} % have "
            "no known recipients and play everyone)"
        )
    for name in shown:
        parts = []
        for scenario, shares in analyses[name]["strategies_by_scenario"].items():
            top = sorted(shares.items(), key=lambda kv: -kv[1])[:2]
            everyone = analyses[name]["recipients_by_scenario"][scenario]["everyone"] or 0.0
            listed = ", ".join(f"{k} {100 * v:.0f} %" for k, v in top)
            parts.append(f"{scenario}: {listed}; everyone {100 * everyone:.0f} %")
        print(f"{name} by scenario (of its interventions): " + " | ".join(parts))
    trained_flags = {name: flags(analyses[name]) for name in TRAINED}
    for name, found in trained_flags.items():
        print(f"{name}: " + ("; ".join(f"FLAG: {f}" for f in found) if found else "no one-thing-always flag"))
    for name in TRAINED:
        for key, word in ((metric, metric.replace("_", " ")), ("final_max_distress", "final max distress")):
            v = verdict[f"{name}_{key}"]
            weak = v["not_significantly_beaten"]
            print(
                f"{name} beats every constant, heuristic, perceived and imitation in {word}: "
                f"{'yes' if v['beats_all'] else 'no (not ' + ', '.join(v['loses_to']) + ')'}; with a paired 95 % "
                f"CI above 0 against {len(to_beat) - len(weak)} of {len(to_beat)}"
                + (f" (not {', '.join(weak)})" if 0 < len(weak) <= 6 else "")
            )

    # ----- files -----
    levels = {n: by_name[n][metric] for n in ("never", "last-speaker", "most-vocal", "most-distressed")}
    levels = {f"always-everyone (best: {best_strategy[16:-1]})": by_name[best_strategy][metric], **levels}
    if best_strategy != always_everyone_name("track"):
        levels["always-everyone[track]"] = by_name[always_everyone_name("track")][metric]
    curve = callback.points
    _write_csv(output / "curve.csv", curve)
    plot_curve(
        curve,
        levels,
        output / "curve.png",
        f"MaskablePPO on {flat_id} ({len(train_ids)} train / {len(test_ids)} held-out starts, "
        f"{args.curve_seeds} seeds each); {steps:,} steps in {train_seconds:.0f} s",
        ylabel=f"mean {metric.replace('_', ' ')}" + (" (γ = 0.99)" if metric == "discounted_return" else ""),
    )
    _write_csv(output / "results.csv", rows)
    _write_csv(output / "episodes.csv", [{"policy": n, **e} for n, eps in episodes.items() for e in eps])
    results = {
        "format": "rescue-env/sim-ppo-results",
        "version": 1,
        "command": [sys.executable, *sys.argv] if argv is None else ["train_sim_ppo.py", *argv],
        "config": vars(args),
        "versions": versions(),
        "data": {**data_info, "train_starts": len(train_ids), "test_starts": len(test_ids)},
        "test_sample_ids": test_ids,
        "env_settings": env_settings,
        "dynamics_fitted_on": train_env.dynamics.fitted_on,
        "training": training,
        "model": str(path),
        "curve": curve,
        "table": rows,
        "actions": analyses,
        "flags": trained_flags,
        "verdict": verdict,
        "eval_seconds": round(eval_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
    }
    (output / "results.json").write_text(json.dumps(results, indent=2, default=repr) + "\n", encoding="utf-8")
    print(
        f"\nwrote {output}/results.json, results.csv, episodes.csv, curve.csv, curve.png, model.zip, model.json, "
        "model.monitor.csv"
    )
    log(f"({time.perf_counter() - started:.0f} s in all; evaluation {eval_seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
