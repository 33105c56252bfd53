"""Mean episode return of reference policies under each reward preset: do the presets favour a constant policy?

    python scripts/reward_table.py [--data PATH] [--lam L] [--kappa K] [--group-weight G] [--markdown]
    python scripts/reward_table.py --grid [--data PATH]

PATH defaults to ../shared/data/rescue_text.jsonl when present, else the demo data. Each policy plays every
conversation once (``benchmarks.rollout.evaluate_policy`` order). The table gives the mean return per episode under
``imitation``, ``group`` and ``combined`` (``--group-weight`` = the weight of the group objective inside
``combined``), per scenario and pooled, then checks the design conditions: the oracle leads under imitation and
combined, and no constant policy (always-everyone, never, most-distressed) wins group.

A return is linear in the per-episode sums of the components, and the group objective is
U - lambda * unmet - kappa * z, so one rollout per policy gives every (lambda, kappa, weights): ``--grid``
searches lambda, kappa / lambda and the group weight that way (``group-greedy``, whose actions depend on lambda
and kappa, is computed exactly from the annotated state: per step it earns U - min(lambda d, lambda d (1 - 1/k)
+ kappa) for the k tied most distressed at distress d).
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.rollout_results import SCOPES, table
from policies import make_policy
from rescue_env.envs.replay import RescueEnv
from rescue_env.reward import PRESETS, RewardConfig, group_objective, group_state, mean_wellbeing

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"
POLICIES = ("oracle", "heuristic", "majority", "random", "always-everyone", "never", "most-distressed", "group-greedy")
NON_CONSTANT = ("oracle", "heuristic")
CONSTANT = ("always-everyone", "never", "most-distressed")  # the constant policies of the v0 table (unchanged)
_UNMET = RewardConfig(lam=1.0, kappa=0.0, utility=lambda d, g, r: 0.0)  # group_objective = -unmet


@dataclass
class Sums:
    """Per-episode sums of the components of one policy: timing, target, strategy, U, unmet need, interventions;
    plus, per episode, the policy-independent group-greedy inputs (U, d_max, k per step)."""

    scenario: list[str] = field(default_factory=list)
    parts: list[np.ndarray] = field(default_factory=list)  # [timing, target, strategy, U, unmet, z]
    state: list[np.ndarray] = field(default_factory=list)  # per step rows [U, d_max, k]

    def scope(self, scope: str) -> np.ndarray:
        keep = [i for i, s in enumerate(self.scenario) if scope in ("all", s)]
        return np.array([self.parts[i] for i in keep]).reshape(-1, 6)


def rollout(name: str, env: RescueEnv, seed: int = 0) -> Sums:
    policy = make_policy(name, env, seed)
    env.info_level = "full"  # the table reads every step's info["chosen"] and info["components"]
    sums = Sums()
    for index, sample in enumerate(env.samples):
        observation, info = env.reset(seed=seed if index == 0 else None, options={"sample_id": sample.sample_id})
        policy.reset(seed=seed if index == 0 else None)
        people = info["participants"]
        total, states, terminated = np.zeros(6), [], False
        while not terminated:
            state = env.state()
            distress = state["distress"]
            utility = mean_wellbeing(distress, state["viewpoints"], state["pattern"])
            tied = int(np.sum(distress == distress.max())) if distress.size else 1
            states.append([utility, float(distress.max()) if distress.size else 0.0, tied])
            observation, _, terminated, _, info = env.step(policy.act(observation, env))
            z = bool(info["chosen"]["intervene"])
            recipients = frozenset(people.index(p) for p in info["chosen"]["target"])
            unmet = -group_objective(group_state(distress, _UNMET), z, recipients, _UNMET)
            c = info["components"]
            total += [c["timing"], c["target"] or 0.0, c["strategy"] or 0.0, utility, unmet, float(z)]
        sums.scenario.append(info["scenario"])
        sums.parts.append(total)
        sums.state.append(np.array(states))
    return sums


def weights(preset: str, group_weight: float | None) -> np.ndarray:
    config = RewardConfig.preset(preset)
    g = config.group if group_weight is None or preset != "combined" else group_weight
    return np.array([config.timing, config.target, config.strategy, g])


def mean_return(parts: np.ndarray, preset: str, lam: float, kappa: float, group_weight: float | None) -> float:
    if parts.size == 0:
        return float("nan")
    w = weights(preset, group_weight)
    group = parts[:, 3] - lam * parts[:, 4] - kappa * parts[:, 5]
    return float(np.mean(parts[:, :3] @ w[:3] + w[3] * group))


def greedy_group(sums: Sums, scope: str, lam: float, kappa: float) -> float:
    """group-greedy's exact mean group return per episode at (lambda, kappa)."""
    values = []
    for scenario, steps in zip(sums.scenario, sums.state):
        if scope in ("all", scenario):
            u, d, k = steps[:, 0], steps[:, 1], steps[:, 2]
            values.append(float(np.sum(u - np.minimum(lam * d, lam * d * (1 - 1 / k) + kappa))))
    return float(np.mean(values)) if values else float("nan")


def returns_table(
    results: dict[str, Sums], lam: float, kappa: float, group_weight: float | None
) -> dict[str, dict[str, dict[str, float]]]:
    """policy -> preset -> scope -> mean return per episode."""
    return {
        name: {
            preset: {scope: mean_return(sums.scope(scope), preset, lam, kappa, group_weight) for scope in SCOPES}
            for preset in PRESETS
        }
        for name, sums in results.items()
    }


def checks(values: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """The design conditions per scope, with their margins (mean return per episode)."""
    lines = []
    for scope in SCOPES:
        if any(np.isnan(v["imitation"][scope]) for v in values.values()):
            continue
        for preset in ("imitation", "combined"):
            others = max((v[preset][scope], n) for n, v in values.items() if n != "oracle")
            margin = values["oracle"][preset][scope] - others[0]
            verdict = "leads" if margin > 0 else "does NOT lead"
            lines.append(f"[{scope}] {preset}: oracle {verdict} by {margin:+.3f} (next: {others[1]})")
        best_constant = max((values[n]["group"][scope], n) for n in CONSTANT if n in values)
        winner = max((v["group"][scope], n) for n, v in values.items())
        verdict = "a constant policy wins" if winner[1] in CONSTANT else "no constant policy wins"
        lines.append(
            f"[{scope}] group: winner {winner[1]} {winner[0]:.3f}, best constant {best_constant[1]} "
            f"{best_constant[0]:.3f} ({verdict})"
        )
        for name in NON_CONSTANT:
            if name in values:
                margin = values[name]["group"][scope] - best_constant[0]
                lines.append(f"[{scope}] group: {name} - best constant = {margin:+.3f}")
    return lines


def format_table(values: dict[str, dict[str, dict[str, float]]], markdown: bool) -> str:
    header = ["policy", *(f"{p} {s}" for p in PRESETS for s in SCOPES)]
    rows = [[name, *(f"{v[p][s]:.3f}" for p in PRESETS for s in SCOPES)] for name, v in values.items()]
    if not markdown:
        return table(header, rows)
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def grid(results: dict[str, Sums], lams, ratios, group_weights) -> str:
    rows = []
    for lam, ratio, g in itertools.product(lams, ratios, group_weights):
        kappa = round(lam * ratio, 4)
        values = returns_table(results, lam, kappa, g)
        for name, sums in results.items():
            if name == "group-greedy":  # its actions depend on lambda and kappa: exact value, not the rollout's
                values[name]["group"]["all"] = greedy_group(sums, "all", lam, kappa)
        best_constant = max((values[n]["group"]["all"], n) for n in CONSTANT)
        combined_next = max(v["combined"]["all"] for n, v in values.items() if n not in ("oracle", "group-greedy"))
        best_plain = max(values[n]["group"]["all"] for n in NON_CONSTANT)
        rows.append(
            [
                f"{lam:g}",
                f"{kappa:g}",
                f"{g:g}",
                f"{values['oracle']['combined']['all'] - combined_next:+.2f}",
                best_constant[1],
                f"{values['group-greedy']['group']['all'] - best_constant[0]:+.3f}",
                f"{best_plain - best_constant[0]:+.3f}",
            ]
        )
    header = ["lam", "kappa", "g", "combined lead", "best constant", "greedy margin", "oracle/heuristic margin"]
    note = (
        "combined lead: oracle - the best other policy but group-greedy under combined; best constant: under group;"
        "\nmargins: group return minus the best constant's (group-greedy; the better of oracle and heuristic)"
    )
    return table(header, rows) + "\n" + note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = RewardConfig()
    parser.add_argument("--data", default=None, help="release JSONL, directory or 'demo' (default: shared data)")
    parser.add_argument("--lam", type=float, default=default.lam, help=f"lambda (default {default.lam:g})")
    parser.add_argument("--kappa", type=float, default=default.kappa, help=f"kappa (default {default.kappa:g})")
    parser.add_argument(
        "--group-weight", type=float, default=None, help="weight of the group objective inside combined"
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated registry names")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--grid", action="store_true", help="search lambda, kappa/lambda and the group weight")
    args = parser.parse_args()
    data = args.data or (str(DEFAULT) if DEFAULT.is_file() else "demo")
    env = RescueEnv(data, reward=RewardConfig(lam=args.lam, kappa=args.kappa), sample_order="sequential")
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    if args.grid:
        names = list(dict.fromkeys([*POLICIES, *names]))
    results = {name: rollout(name, env) for name in names}
    print(f"data: {env.dataset.source} ({len(env.samples)} conversations); mean return per episode")
    if args.grid:
        print(grid(results, (0.5, 1.0, 2.0), np.round(np.arange(0.3, 0.901, 0.05), 2), (0.5, 1.0)))
        return
    values = returns_table(results, args.lam, args.kappa, args.group_weight)
    g = weights("combined", args.group_weight)[3]
    print(f"lam={args.lam:g} kappa={args.kappa:g} combined group weight={g:g}")
    print(format_table(values, args.markdown))
    if all(n in values for n in (*CONSTANT, "oracle")):
        print("\n".join(checks(values)))


if __name__ == "__main__":
    main()
