"""Does ``RescueSim-v0`` reproduce how real sessions go? The course of mean distress over relative position, observed
on held-out conversations and simulated from their openings under the recorded therapist's own actions.

    python scripts/sim_calibration.py [--data PATH|demo] [--seeds 20] [--bins 10] [--tolerance 0.05] \\
        [--output runs/sim_calibration]

F and the session rates are fitted on the train side of the project's grouped split (seed --split-seed); every
conversation of the test side with a decision point after the opening is a start. For each start:

- **observed**: at each of its decision points from the end of the opening on (the sim's steps), the mean over
  participants of their latest annotated distress (not aged: the quantity the sim's state holds);
- **simulated**: --seeds episodes of the sim from its opening, every step playing the real therapist's recorded
  action at the matching decision point (``policies.RecordedTherapist``), without early termination
  (``calm_threshold=0``), recording the same mean before each step's action; also, for context, under
  "never intervene".

Each course is averaged within --bins bins of relative position (step / steps), per conversation first (seeds
averaged), then over conversations, with a 95 % bootstrap interval over conversations. The verdict: the mean gap
|simulated - observed| over bins against --tolerance (0.05: a twentieth of the distress scale, below the observed
intervals' half-width of about 0.06 with 35 held-out conversations), the largest gap, and the bins where the
simulated mean lies inside the observed interval. Writes ``calibration.png``, ``calibration.csv`` (one row per
course and bin) and ``calibration.json`` (config, versions, data hash, fitted rates, verdict) under --output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"


def bin_means(values: Sequence[float], bins: int) -> np.ndarray:
    """The mean of ``values`` (one per step of an episode) within each of ``bins`` equal bins of relative position
    step / len(values); NaN for a bin that no step falls in."""
    values = np.asarray(values, dtype=float)
    steps = values.size
    index = np.minimum(bins - 1, (bins * np.arange(steps)) // max(steps, 1))
    sums = np.bincount(index, weights=values, minlength=bins)
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def course_summary(per_conversation: np.ndarray, resamples: int, seed: int) -> list[dict[str, float]]:
    """Per bin: the mean over conversations (rows of ``per_conversation``, NaN = no step in that bin) and its 95 %
    bootstrap interval over conversations."""
    from benchmarks.metrics import mean_ci

    out = []
    for column in per_conversation.T:
        present = column[~np.isnan(column)]
        low, high = mean_ci(present, resamples=resamples, seed=seed) if present.size else (np.nan, np.nan)
        out.append({"mean": float(present.mean()) if present.size else np.nan, "low": low, "high": high,
                    "conversations": int(present.size)})  # fmt: skip
    return out


def simulated_course(env, sample_id: str, policy, seeds: Sequence[int]) -> list[list[float]]:
    """For each seed, the mean distress before each step's action of one episode of ``env`` played by ``policy``."""
    courses = []
    for seed in seeds:
        observation, _ = env.reset(seed=seed, options={"sample_id": sample_id})
        policy.reset(seed=seed)
        course, done = [], False
        while not done:
            course.append(float(env.state()["distress"].mean()))
            observation, _, terminated, truncated, _ = env.step(policy.act(observation, env))
            done = terminated or truncated
        courses.append(course)
    return courses


def plot(path: Path, summaries: dict[str, list[dict[str, float]]], bins: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    centres = (np.arange(bins) + 0.5) / bins
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {
        "observed": ("black", "o-"),
        "recorded actions": ("tab:blue", "s-"),
        "never intervene": ("tab:gray", "^--"),
    }
    for name, summary in summaries.items():
        colour, style = styles.get(name, ("tab:red", ".-"))
        mean = np.array([s["mean"] for s in summary])
        low, high = np.array([s["low"] for s in summary]), np.array([s["high"] for s in summary])
        label = "observed (held-out conversations)" if name == "observed" else f"simulated: {name}"
        ax.plot(centres, mean, style, color=colour, label=label)
        if name != "never intervene":  # context only: its band would hide the two that are compared
            ax.fill_between(centres, low, high, color=colour, alpha=0.15)
    ax.set_xlabel("relative position in the conversation (from the end of the opening)")
    ax.set_ylabel("mean distress over participants")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data", default=str(DEFAULT_DATA) if DEFAULT_DATA.exists() else "demo",
                        help="data (JSONL), or demo")  # fmt: skip
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the grouped train/test split")
    parser.add_argument("--test-fraction", type=float, default=0.2, help="share of each scenario's groups held out")
    parser.add_argument("--seeds", type=int, default=20, help="simulated episodes per start")
    parser.add_argument("--bins", type=int, default=10, help="bins of relative position")
    parser.add_argument(
        "--tolerance", type=float, default=0.05, help="acceptable mean |simulated - observed| over bins"
    )
    parser.add_argument("--opening", type=int, default=8, help="rows of the opening")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95 %% intervals")
    parser.add_argument("--output", default="runs/sim_calibration", help="directory for the PNG, CSV and JSON")
    args = parser.parse_args(argv)
    for name in ("seeds", "bins", "opening", "bootstrap"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if not 0 < args.test_fraction < 1 or args.tolerance <= 0:
        parser.error("--test-fraction must be in (0, 1) and --tolerance > 0")
    if args.data != "demo" and not Path(args.data).exists():
        parser.exit(2, f"error: {args.data} not found\n")

    from tqdm.auto import tqdm

    from benchmarks.runs import versions
    from policies import NeverIntervene, RecordedTherapist
    from rescue_env.data import load_dataset
    from rescue_env.dynamics.state import snapshots
    from rescue_env.envs.sim import RescueSimEnv

    started = time.perf_counter()
    dataset = load_dataset(args.data)
    env = RescueSimEnv(
        dataset,
        starts="test",
        split_seed=args.split_seed,
        test_fraction=args.test_fraction,
        opening=args.opening,
        calm_threshold=0.0,
    )
    print(f"{len(env.samples)} held-out starts; rates {env.rates.model_dump()}", file=sys.stderr)
    policies = {"recorded actions": RecordedTherapist(), "never intervene": NeverIntervene()}
    observed, simulated = [], {name: [] for name in policies}
    for index, sample in enumerate(tqdm(env.samples, desc="starts", unit="start", disable=None)):
        episode = env.episode(sample)
        snaps = snapshots(sample, episode.participants, env.dynamics.state)
        observed.append(bin_means([snaps[row].distress_raw.mean() for row in episode.rows], args.bins))
        seeds = [1000 * index + k for k in range(args.seeds)]
        for name, policy in policies.items():
            courses = simulated_course(env, sample.sample_id, policy, seeds)
            with warnings.catch_warnings():  # a short episode leaves some bins empty: NaN, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                simulated[name].append(np.nanmean([bin_means(c, args.bins) for c in courses], axis=0))

    summaries = {"observed": course_summary(np.asarray(observed), args.bootstrap, args.split_seed)}
    for name, rows in simulated.items():
        summaries[name] = course_summary(np.asarray(rows), args.bootstrap, args.split_seed)
    gaps = [s["mean"] - o["mean"] for s, o in zip(summaries["recorded actions"], summaries["observed"])]
    inside = [o["low"] <= s["mean"] <= o["high"] for s, o in zip(summaries["recorded actions"], summaries["observed"])]
    largest, mean_abs = float(np.nanmax(np.abs(gaps))), float(np.nanmean(np.abs(gaps)))
    verdict = {
        "mean_abs_gap": mean_abs,
        "largest_gap": largest,
        "mean_gap": float(np.nanmean(gaps)),
        "tolerance": args.tolerance,
        "within_tolerance": bool(mean_abs <= args.tolerance),
        "bins_inside_observed_ci": int(sum(inside)),
        "bins": args.bins,
    }

    print("| bin | observed [95 % CI] | simulated, recorded actions [95 % CI] | gap | never intervene |")
    print("|---|---|---|---:|---|")
    for b in range(args.bins):
        o, s, n = summaries["observed"][b], summaries["recorded actions"][b], summaries["never intervene"][b]
        print(
            f"| {b / args.bins:.1f}-{(b + 1) / args.bins:.1f} | {o['mean']:.3f} [{o['low']:.3f}, {o['high']:.3f}] | "
            f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | {gaps[b]:+.3f} | {n['mean']:.3f} |"
        )
    print(
        f"mean |gap| {mean_abs:.3f}: {'within' if verdict['within_tolerance'] else 'OUTSIDE'} the tolerance "
        f"{args.tolerance}; largest gap {largest:.3f}; mean gap {verdict['mean_gap']:+.3f}; the simulated mean lies "
        f"inside the observed 95 % interval in {verdict['bins_inside_observed_ci']} of {args.bins} bins"
    )

    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    title = f"RescueSim-v0 calibration: {len(env.samples)} held-out starts of {Path(dataset.source).name}"
    plot(output / "calibration.png", summaries, args.bins, title)
    lines = ["course,bin,start,end,mean,low,high,conversations"]
    for name, summary in summaries.items():
        for b, s in enumerate(summary):
            lines.append(
                f"{name},{b},{b / args.bins},{(b + 1) / args.bins},{s['mean']},{s['low']},{s['high']},"
                f"{s['conversations']}"
            )
    (output / "calibration.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    record = {
        "config": vars(args),
        "versions": versions(),
        "data": {"source": dataset.source, "sha256": dataset.sha256},
        "dynamics": env.dynamics.fitted_on,
        "rates": env.rates.model_dump(),
        "starts": len(env.samples),
        "verdict": verdict,
        "courses": summaries,
    }
    (output / "calibration.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {output}/calibration.png, .csv, .json ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
