"""LLM-therapist rollout speed against the ideal, measured in one run.

A rollout of N episodes with C connections against the local OpenAI-compatible server (its own process, fixed
latency L per request) is timed end to end (``Rollout.run``: probe, every decision, results files). Decisions
inside an episode are sequential, so the ideal is sum over episodes of (steps x L) / C; the script prints the
measured wall time next to it and the ratio, and the other lower bound (the longest episode, steps x L), which
no schedule can beat.

    python scripts/bench_rollout.py [--data PATH] [--episodes 40] [--connections 16] [--latency 0.2]

--data defaults to ../shared/data/rescue_text.jsonl when present, else the demo data (6 conversations: the
episode count is then capped at 6).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from agents.fake_server import server_process
from benchmarks.rollout import Rollout, RolloutConfig
from benchmarks.runs import RunOptions
from rescue_env.data import load_dataset

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(RELEASE) if RELEASE.is_file() else "demo")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)

    dataset = load_dataset(args.data)
    directory = Path(tempfile.mkdtemp(prefix="rescue-rollout-bench-"))
    try:
        with server_process(args.latency) as base_url:
            config = RolloutConfig(
                data=args.data, model="openai/fake", api_base=base_url, episodes=args.episodes, bootstrap=1000
            )
            rollout = Rollout(
                config,
                directory / "run",
                dataset=dataset,
                options=RunOptions(max_connections=args.connections, progress=False),
            )
            steps = [len(rollout.env.decision_rows(s)) for s in rollout.samples]
            started = time.perf_counter()
            results = rollout.run()
            wall = time.perf_counter() - started
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ideal = sum(steps) * args.latency / args.connections
    longest = max(steps) * args.latency
    figures = {
        "data": dataset.source,
        "episodes": len(steps),
        "decisions": sum(steps),
        "connections": args.connections,
        "latency_s": args.latency,
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "ratio_to_ideal": round(wall / ideal, 3),
        "longest_episode_s": round(longest, 2),
        "failed_decisions": results["scopes"]["all"]["failed_steps"],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"{figures['episodes']} episodes, {figures['decisions']} decisions, {args.connections} connections, "
            f"{args.latency * 1000:.0f} ms latency ({dataset.source})\n"
            f"  rollout wall time   {wall:8.2f} s\n"
            f"  ideal               {ideal:8.2f} s   (sum of steps x latency / connections)\n"
            f"  ratio               {wall / ideal:8.2f} x ideal\n"
            f"  longest episode     {longest:8.2f} s   (a lower bound too: its steps are sequential)\n"
            f"  failed decisions    {figures['failed_decisions']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
