"""Train a stable-baselines3 policy on ``RescueFlat-v0``, save it, and evaluate it next to reference policies.

    python scripts/train_sb3.py --algo ppo --timesteps 20000 --data demo --reward combined --seed 0 \\
        --output runs/ppo-demo.zip
    python scripts/train_sb3.py --algo a2c --data ../shared/data/rescue_text.jsonl --timesteps 50000 --hash-dim 128
    python scripts/train_sb3.py --data ../shared/data/rescue_text.jsonl --timesteps 50000 --holdout 0.2

Trains ``MlpPolicy`` (``policies.sb3.train``: CPU, seeded, --torch-threads threads) on conversations drawn at random
from --data, and writes OUTPUT (the model), its sidecar OUTPUT.json (algorithm, feature and env settings,
provenance), which ``rescue-bench rollout --policy ALGO:OUTPUT`` reads, and the training's monitor log
OUTPUT.monitor.csv (``OUTPUT`` without ``.zip``; SB3's ``Monitor``: return, length and time of every training
episode), from which ``rescue-bench report`` draws the learning curve of a rollout of that model. On a terminal,
training and the evaluation show progress bars with their ETA (``--no-progress``: none; logs and CI get none).

Then every conversation of --eval-data (default: --data, i.e. the training conversations: an in-sample figure;
--holdout F instead keeps the test side of the project's grouped split, a share F of each scenario's conversations
with no couple or family on both sides, out of training and evaluates on it) is played once, in dataset order, by
the trained policy and by --baselines (default random and heuristic), under the same reward and observation
settings, with ``benchmarks.rollout.evaluate_policy``. The script prints one table per scope (pooled, couple,
family): timing P/R/F1 and accuracy, target exact match and Jaccard, strategy accuracy, invalid steps and the mean
return under the env's reward and under every preset.
Nothing guarantees that the trained policy beats the heuristic.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from benchmarks.rollout import evaluate_policy
from benchmarks.rollout_results import SCOPES, PolicyReport, table
from policies import POLICIES, make_policy
from policies.sb3 import (
    ALGO_DEFAULTS,
    ALGORITHMS,
    FEATURE_DEFAULTS,
    SB3Policy,
    fit,
    model_path,
    monitor_path,
    sidecar_path,
)
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.splits import assign
from rescue_env.envs.replay import RescueEnv
from rescue_env.rendering import MODES
from rescue_env.reward import PRESETS


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def comparison(reports: dict[str, PolicyReport], scope: str) -> str:
    """One scope of several reports: a row per metric, a column per policy."""
    scopes = {name: report.scopes[scope] for name, report in reports.items()}
    first = next(iter(reports.values()))

    def timing(key: str) -> list[str]:
        return [_pct(getattr(s.timing, key)) if s.timing else "-" for s in scopes.values()]

    rows = [
        ["episodes", *(str(s.episodes) for s in scopes.values())],
        ["decision points", *(str(s.steps) for s in scopes.values())],
        ["timing precision %", *timing("precision")],
        ["timing recall %", *timing("recall")],
        ["timing F1 %", *timing("f1")],
        ["timing accuracy %", *timing("accuracy")],
        ["target steps", *(str(s.target_steps) for s in scopes.values())],
        ["target exact match %", *(_pct(s.target_exact) for s in scopes.values())],
        ["target mean Jaccard", *(_num(s.target_jaccard) for s in scopes.values())],
        ["strategy steps", *(str(s.strategy_steps) for s in scopes.values())],
        ["strategy accuracy %", *(_pct(s.strategy_accuracy) for s in scopes.values())],
        ["steps with invalid bits", *(str(s.invalid_steps) for s in scopes.values())],
        [f"mean return ({first.reward})", *(_num(s.mean_return) for s in scopes.values())],
        ["mean discounted return", *(_num(s.mean_discounted_return) for s in scopes.values())],
        *([f"mean return [{p}]", *(_num(s.returns_by_preset[p]) for s in scopes.values())] for p in PRESETS),
    ]
    return table([f"{scope}: metric", *reports], rows)


def holdout_split(dataset: Dataset, fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(training ids, held-out ids): the project's grouped split (``rescue_env.data.splits``) with test share
    ``fraction``, so that no couple or family is on both sides; both in dataset order."""
    sides = assign(dataset, seed=seed, test_fraction=fraction)
    return [i for i in dataset.sample_ids if sides[i] == "train"], [i for i in dataset.sample_ids if sides[i] == "test"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train_sb3.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    train = parser.add_argument_group("training")
    train.add_argument("--algo", choices=list(ALGORITHMS), default="ppo", help="algorithm (default: ppo)")
    train.add_argument("--timesteps", type=int, default=20_000, metavar="N", help="env steps (default 20000)")
    train.add_argument("--seed", type=int, default=0, help="seeds training and evaluation (default 0)")
    train.add_argument("--n-steps", type=int, default=None, metavar="N", help="rollout length per update")
    train.add_argument("--learning-rate", type=float, default=None, metavar="LR", help="(default: SB3's)")
    train.add_argument("--ent-coef", type=float, default=None, metavar="C", help="entropy bonus (default: SB3's)")
    train.add_argument("--torch-threads", type=int, default=1, metavar="N", help="torch threads (default 1)")
    train.add_argument("--verbose", action="store_true", help="print SB3's training log")
    train.add_argument("--no-progress", action="store_true", help="no progress bars (training, evaluation)")
    env = parser.add_argument_group("environment")
    env.add_argument("--data", default="demo", metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    env.add_argument("--reward", choices=list(PRESETS), default="combined", help="reward preset (default: combined)")
    env.add_argument("--mode", choices=list(MODES), default="dialogue", help="evidence shown (default: dialogue)")
    env.add_argument("--context-size", type=int, default=8, metavar="N", help="rows of context (-1 = all; default 8)")
    features = parser.add_argument_group("features (FlatObservation; recorded in the sidecar)")
    features.add_argument("--hash-dim", type=int, default=FEATURE_DEFAULTS["hash_dim"], metavar="N")
    features.add_argument("--last-row-weight", type=float, default=FEATURE_DEFAULTS["last_row_weight"], metavar="W")
    features.add_argument("--turn-window", type=int, default=FEATURE_DEFAULTS["turn_window"], metavar="N")
    features.add_argument("--embeddings", action="store_true", help="add the MiniLM embedding of the last row")
    out = parser.add_argument_group("output and evaluation")
    out.add_argument("--output", "-o", default=None, metavar="FILE", help="model zip (default: runs/ALGO-seedSEED.zip)")
    held = out.add_mutually_exclusive_group()
    held.add_argument("--eval-data", default=None, metavar="PATH", help="evaluation data (default: --data)")
    held.add_argument(
        "--holdout", type=float, default=None, metavar="F", help="train on 1-F of --data, evaluate on the rest"
    )
    out.add_argument(
        "--episodes", type=int, default=None, metavar="N", help="evaluation episodes (default: every conversation once)"
    )
    out.add_argument(
        "--baselines", default="random,heuristic", metavar="NAMES", help="comma-separated (default: random,heuristic)"
    )
    out.add_argument("--json", default=None, metavar="FILE", help="also write the reports as one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    baselines = [n.strip() for n in args.baselines.split(",") if n.strip()]
    unknown = [n for n in baselines if n not in POLICIES]
    if unknown:
        parser.error(f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    if args.timesteps < 1 or (args.episodes is not None and args.episodes < 1):
        parser.error("--timesteps and --episodes must be >= 1")
    if args.holdout is not None and not 0 < args.holdout < 1:
        parser.error("--holdout must lie strictly between 0 and 1")

    observation = {"mode": args.mode, "context_size": args.context_size}
    feature_kwargs = {
        "hash_dim": args.hash_dim,
        "last_row_weight": args.last_row_weight,
        "turn_window": args.turn_window,
        "embeddings": args.embeddings,
    }
    algo_kwargs = dict(ALGO_DEFAULTS[args.algo])
    for key in ("n_steps", "learning_rate", "ent_coef"):
        if getattr(args, key) is not None:
            algo_kwargs[key] = getattr(args, key)
    dataset = load_dataset(args.data)
    held_out: list[str] = []
    if args.holdout is not None:
        kept, held_out = holdout_split(dataset, args.holdout, args.seed)
        eval_data = load_dataset(args.data, sample_ids=held_out)
        dataset = load_dataset(args.data, sample_ids=kept)
    else:
        eval_data = dataset if args.eval_data is None else load_dataset(args.eval_data)
    output = model_path(args.output or f"runs/{args.algo}-seed{args.seed}.zip")

    start = time.perf_counter()
    policy = fit(
        args.algo,
        args.timesteps,
        args.seed,
        env_kwargs={"data": dataset, "reward": args.reward, **observation},
        feature_kwargs=feature_kwargs,
        algo_kwargs=algo_kwargs,
        torch_threads=args.torch_threads,
        verbose=int(args.verbose),
        monitor=monitor_path(output),
        progress=not args.no_progress,
    )
    seconds = time.perf_counter() - start
    if held_out:
        policy.training["held_out_sample_ids"] = held_out
    path = policy.save(output)
    steps = policy.training["timesteps"]
    print(
        f"trained {args.algo.upper()} on {dataset.source} ({len(dataset)} conversations, {args.reward}) for "
        f"{steps:,} steps in {seconds:.1f} s ({steps / seconds:,.0f} steps/s; {args.torch_threads} torch "
        f"thread(s), seed {args.seed})"
    )
    print(f"saved {path} and {sidecar_path(path)}; replay: rescue-bench rollout --policy {args.algo}:{path}")
    print(f"training episodes (SB3 monitor log, the learning curve of rescue-bench report): {monitor_path(path)}")

    env = RescueEnv(eval_data, reward=args.reward, sample_order="sequential", **observation)
    trained = SB3Policy.load(path, env=env)  # the saved model, as rollout plays it
    per_policy = args.episodes if args.episodes is not None else len(env.samples)
    reports: dict[str, PolicyReport] = {}
    # disable=None: a bar on a terminal, silence in logs and CI (and none with --no-progress).
    disable = True if args.no_progress else None
    total = (1 + len(baselines)) * per_policy
    with tqdm(total=total, desc="evaluation", unit="episode", file=sys.stderr, disable=disable) as bar:

        def count(_env: RescueEnv, info: dict) -> None:
            if "episode" in info:  # the last step of an episode
                bar.update(1)

        reports[trained.name] = evaluate_policy(trained, env, episodes=args.episodes, seed=args.seed, on_step=count)
        for name in baselines:
            player = make_policy(name, env, args.seed)
            reports[name] = evaluate_policy(player, env, episodes=args.episodes, seed=args.seed, on_step=count)
    first = reports[trained.name]
    config = first.reward_config
    if held_out:
        sample = f"held out: {len(held_out)} conversations never trained on"
    elif args.eval_data is None:
        sample = "in-sample: the training conversations"
    else:
        sample = "separate evaluation data"
    print(
        f"\nevaluation on {first.data} ({first.episodes} episodes, {sample}, seed {args.seed}); reward {first.reward}: "
        f"lam={config['lam']:g}, kappa={config['kappa']:g}, gamma={config['gamma']:g}"
    )
    for scope in ("all", *(s for s in SCOPES if s != "all")):
        if first.scopes[scope].episodes:
            print()
            print(comparison(reports, scope))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        payload = {name: report.model_dump() for name, report in reports.items()}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"\nreports: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
