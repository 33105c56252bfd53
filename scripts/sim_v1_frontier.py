"""The beta frontier of ``RescueSim-v1``: the group term against the divergence from the therapist, one point per
trained policy (beta, seed), as RLHF papers draw reward against KL.

    python scripts/train_sim_ppo.py --seed 0 --output runs/sim_v1/seed0            # the default beta, seeds 0..2
    python scripts/train_sim_ppo.py --seed 0 --beta B --output runs/sim_v1/beta_B   # a sweep, one run per beta
    python scripts/sim_v1_frontier.py runs/sim_v1/*/results.json -o runs/sim_v1/frontier.png

Each ``results.json`` of ``scripts/train_sim_ppo.py`` (v1) gives, on its held-out starts: PPO's (deterministic)
per-step group term and its mean log pi_b. The divergence is the cross-entropy to pi_b along the policy's own
episodes, -E[log pi_b(a | s)] in nats: for a deterministic policy it is its KL(pi || pi_b); a stochastic policy's
KL is its cross-entropy minus its entropy. Reference points (the cloned therapist, the recorded therapist, never,
the best always-everyone constant) come from the first file. Writes the figure and a CSV beside it, and prints the
table.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

REFERENCES = ("behaviour", "recorded", "never")


def points(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """(trained points, reference points) from the results files."""
    trained, references = [], []
    for k, path in enumerate(paths):
        results = json.loads(path.read_text(encoding="utf-8"))
        settings = results.get("env_settings", {})
        if settings.get("env_version") != 1:
            raise ValueError(f"{path}: not a RescueSim-v1 run of scripts/train_sim_ppo.py")
        rows = {row["policy"]: row for row in results["table"]}
        for name in ("ppo", "ppo-stochastic"):
            row = rows[name]
            trained.append(
                {
                    "run": path.parent.name,
                    "policy": name,
                    "beta": settings["beta"],
                    "seed": results["config"]["seed"],
                    "timesteps": results["training"]["timesteps"],
                    "per_step_group": row["per_step_group"],
                    "per_step_group_low": row["per_step_group_low"],
                    "per_step_group_high": row["per_step_group_high"],
                    "divergence": -row["mean_log_pi_b"],
                    "intervention_rate": row["intervention_rate"],
                }
            )
        if k == 0:
            best = results["verdict"]["best_always_everyone"]
            for name in (*REFERENCES, best):
                row = rows[name]
                references.append(
                    {"policy": name, "per_step_group": row["per_step_group"], "divergence": -row["mean_log_pi_b"]}
                )
    return trained, references


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim_v1_frontier.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results.json files of train_sim_ppo.py (RescueSim-v1)")
    parser.add_argument("--output", "-o", default="runs/sim_v1/frontier.png", help="the figure (a CSV beside it)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.results]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        trained, references = points(paths)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    betas = sorted({p["beta"] for p in trained})
    cmap = plt.get_cmap("viridis", max(2, len(betas)))
    for p in trained:
        color = cmap(betas.index(p["beta"]))
        marker = "o" if p["policy"] == "ppo" else "^"
        ax.errorbar(
            p["divergence"],
            p["per_step_group"],
            yerr=[[p["per_step_group"] - p["per_step_group_low"]], [p["per_step_group_high"] - p["per_step_group"]]],
            fmt=marker,
            color=color,
            capsize=2,
            alpha=0.85,
        )
    for beta in betas:
        ax.plot([], [], "o", color=cmap(betas.index(beta)), label=f"PPO, beta = {beta:.3g}")
    ax.plot([], [], "^", color="grey", label="PPO sampling (stochastic)")
    for i, ref in enumerate(references):
        ax.scatter(ref["divergence"], ref["per_step_group"], marker="s", color=f"C{i + 1}", zorder=3)
        ax.annotate(ref["policy"], (ref["divergence"], ref["per_step_group"]), fontsize=8, xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("divergence from the therapist: -mean log pi_b(a|s) on the policy's episodes (nats)")
    ax.set_ylabel("group term per step (held-out starts, 95 % CI)")
    ax.set_title("RescueSim-v1: group term against divergence from the therapist, per beta and seed", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(output, dpi=130)
    plt.close(fig)
    rows = trained + [{"run": "reference", **r} for r in references]
    with output.with_suffix(".csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=sorted({k for r in rows for k in r}))
        writer.writeheader()
        writer.writerows(rows)
    print("policy            beta    seed  group/step [95% CI]           divergence  intervenes")
    for p in sorted(trained, key=lambda p: (p["beta"], p["seed"], p["policy"])):
        print(
            f"{p['policy']:16s} {p['beta']:7.4f} {p['seed']:5d}  {p['per_step_group']:+.3f} "
            f"[{p['per_step_group_low']:+.3f}, {p['per_step_group_high']:+.3f}]   {p['divergence']:8.2f}"
            f"  {100 * (p['intervention_rate'] or 0):5.1f} %"
        )
    for r in references:
        print(f"{r['policy']:24s} (reference)  {r['per_step_group']:+.3f}   divergence {r['divergence']:.2f}")
    print(f"wrote {output} and {output.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
