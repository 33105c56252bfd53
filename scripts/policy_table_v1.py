"""The ``Rescue-v1`` table of policies on held-out conversations (issue 8): F and the trained policy are fitted on
the train side of the project's grouped split, every policy is played on the test side, each preset's mean
return per episode with a 95 % bootstrap interval over episodes.

    python scripts/policy_table_v1.py --data ../shared/data/rescue_text.jsonl [--outcome sample] [--effect-scale 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.rollout import evaluate_policy, subset
from policies import AlwaysInterveneEveryone
from policies.fitted import FittedQPolicy
from rescue_env.data import load_dataset
from rescue_env.data.splits import SplitConfig, split_samples
from rescue_env.dynamics.fitting import fit_on_split
from rescue_env.envs.replay_v1 import RescueEnvV1
from rescue_env.reward import PRESETS
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

CONSTANTS = ("never", "always-everyone", "last-speaker", "most-vocal")
POLICIES = (*CONSTANTS, "heuristic", "fitted-q", "oracle", "group-greedy")
PRIVILEGED = ("oracle", "group-greedy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data", default="../shared/data/rescue_text.jsonl", help="data (JSONL), or demo")
    parser.add_argument("--seed", type=int, default=0, help="split and evaluation seed")
    parser.add_argument("--outcome", choices=("sample", "mean"), default="sample", help="F's draws or its mean")
    parser.add_argument("--effect-scale", type=float, default=1.0, help="scale of what an action changes in F")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95 %% intervals")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    args = parser.parse_args(argv)
    if args.data != "demo" and not Path(args.data).exists():
        parser.exit(2, f"error: {args.data} not found\n")
    started = time.perf_counter()
    dataset = load_dataset(args.data)
    split = SplitConfig(split="train", seed=args.seed)
    train = split_samples(dataset.samples, split)
    test = split_samples(dataset.samples, split.model_copy(update={"split": "test"}))
    model = fit_on_split(dataset, split)
    print(
        f"F fitted on {len(train)} train conversations ({model.fitted_on['distress_transitions']} distress "
        f"transitions); evaluating on {len(test)} held-out conversations",
        file=sys.stderr,
    )
    results: dict[str, dict[str, dict]] = {}
    for preset in PRESETS:
        common = dict(
            reward=preset,
            dynamics=model,
            outcome=args.outcome,
            effect_scale=args.effect_scale,
            sample_order="sequential",
        )
        trained = FittedQPolicy.fit(RescueEnvV1(subset(dataset, train), **common))
        env = RescueEnvV1(subset(dataset, test), **common)
        results[preset] = {}
        for name in POLICIES:
            policy = trained if name == "fitted-q" else name
            report = evaluate_policy(policy, env, seed=args.seed, bootstrap=args.bootstrap).scopes["all"]
            low, high = report.ci95[f"return_{preset}"] or (None, None)
            results[preset][name] = {
                "return": report.returns_by_preset[preset],
                "low": low,
                "high": high,
                "timing_f1": report.timing.f1,
                "timing_accuracy": report.timing.accuracy,
            }
        results[preset]["constant-strategy"] = {}
        for strategy in ALL_STRATEGY_KEYS:
            policy = AlwaysInterveneEveryone(ALL_STRATEGY_KEYS.index(strategy))
            report = evaluate_policy(policy, env, seed=args.seed).scopes["all"]
            results[preset]["constant-strategy"][strategy] = report.returns_by_preset[preset]
    print("| policy | " + " | ".join(PRESETS) + " | timing F1 |")
    print("|---|" + "---:|" * len(PRESETS) + "---:|")
    for name in POLICIES:
        cells = [
            f"{results[p][name]['return']:.2f} [{results[p][name]['low']:.2f}, {results[p][name]['high']:.2f}]"
            for p in PRESETS
        ]
        label = f"{name} (privileged)" if name in PRIVILEGED else name
        print(f"| {label} | " + " | ".join(cells) + f" | {100 * results['combined'][name]['timing_f1']:.1f} |")
    print(
        "\nThe best constant policy 'always support everyone with strategy s', over s (the constants above use track):"
    )
    for preset in PRESETS:
        best = max(results[preset]["constant-strategy"].items(), key=lambda kv: kv[1])
        print(f"{preset}: {best[0]} {best[1]:.2f}")
    for preset in PRESETS:
        plain = {n: results[preset][n]["return"] for n in POLICIES if n not in PRIVILEGED}
        winner = max(plain, key=plain.get)
        best_constant = max(CONSTANTS, key=lambda n: plain[n])
        beats = all(plain["fitted-q"] > plain[n] for n in (*CONSTANTS, "heuristic"))
        print(
            f"{preset}: best observation-only policy {winner}; best constant {best_constant}; "
            f"fitted-q beats every constant and the heuristic: {'yes' if beats else 'no'}"
        )
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "fitted_on": model.fitted_on, "results": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
