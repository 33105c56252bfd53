"""``RescueSim-v0`` speed next to Gymnasium's ``CartPole-v1``, measured in one run.

    python scripts/bench_sim.py [--data PATH|demo] [--steps 20000] [--repeat 3] [--vector 4] [--json]

--data defaults to ../shared/data/rescue_text.jsonl (the release) when present, else the embedded demo. Every id is
built with ``gym.make`` (so the default wrappers cost the same) or ``gym.make_vec(..., vectorization_mode="sync")``
with --vector sub-envs. Actions are drawn before the clock starts (sampling a ``Dict`` action is gymnasium's cost,
not the env's); the rate of ``action_space.sample()`` itself is printed beside. Each figure is the best of
--repeat runs of --steps steps after a warm-up of --steps steps. The target of the closed-loop issue is a ratio
>= 1 (as many steps/s as CartPole); the script says whether it is met.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import rescue_env  # noqa: F401  (registers the ids)

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"
IDS = ("CartPole-v1", "RescueSim-v0", "RescueSimFlat-v0")


def _make(env_id: str, data: str, vector: int = 0):
    kwargs = {} if env_id == "CartPole-v1" else {"data": data}
    if vector:
        return gym.make_vec(env_id, num_envs=vector, vectorization_mode="sync", **kwargs)
    return gym.make(env_id, **kwargs)


def _run(env, actions: list) -> float:
    vector = isinstance(env, gym.vector.VectorEnv)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if not vector and (terminated or truncated):
            env.reset()  # a vector env resets its sub-envs itself
    return time.perf_counter() - start


def steps_per_second(env_id: str, data: str, steps: int, repeat: int, vector: int = 0) -> tuple[float, float]:
    """(env steps/s, action_space.sample() calls/s)."""
    env = _make(env_id, data, vector)
    env.reset(seed=0)
    env.action_space.seed(0)
    start = time.perf_counter()
    actions = [env.action_space.sample() for _ in range(steps)]
    sampling = steps / (time.perf_counter() - start)
    _run(env, actions)  # warm-up: imports, per-conversation precompute, feature caches
    best = min(_run(env, actions) for _ in range(repeat))
    env.close()
    return steps * max(vector, 1) / best, sampling * max(vector, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data", default=str(DEFAULT) if DEFAULT.is_file() else "demo", help="data, or demo")
    parser.add_argument("--steps", type=int, default=20_000, help="steps per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per figure (the best is kept)")
    parser.add_argument("--vector", type=int, default=4, help="sub-envs of the make_vec measurement (0: skip)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeat < 1 or args.vector < 0:
        parser.error("--steps and --repeat must be >= 1, --vector >= 0")
    if args.data != "demo" and not Path(args.data).exists():
        parser.exit(2, f"error: {args.data} not found\n")
    figures: dict[str, dict[str, float]] = {}
    for vector in (0, args.vector) if args.vector else (0,):
        for env_id in IDS:
            rate, sampling = steps_per_second(env_id, args.data, args.steps, args.repeat, vector)
            figures[f"{env_id}{f' x{vector} (make_vec sync)' if vector else ''}"] = {
                "steps_per_s": rate,
                "sample_per_s": sampling,
            }
    for key, figure in figures.items():
        reference = figures["CartPole-v1" + key.removeprefix(key.split(" ")[0])]
        figure["ratio_to_cartpole"] = figure["steps_per_s"] / reference["steps_per_s"]
    verdict = bool(np.all([f["ratio_to_cartpole"] >= 1.0 for k, f in figures.items() if "RescueSim" in k]))
    if args.json:
        print(json.dumps({"data": args.data, "steps": args.steps, "figures": figures, "target_met": verdict}))
        return 0
    print(f"data: {args.data}; {args.steps:,} steps per measurement, best of {args.repeat}; actions drawn beforehand")
    for key, figure in figures.items():
        print(
            f"  {key:<36} {figure['steps_per_s']:12,.0f} env-steps/s  ({figure['ratio_to_cartpole']:.3f}x CartPole)"
            f"   action_space.sample(): {figure['sample_per_s']:10,.0f}/s"
        )
    print(f"target: RescueSim at least as fast as CartPole (ratio >= 1): {'met' if verdict else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
