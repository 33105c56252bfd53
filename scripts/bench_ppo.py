"""How fast SB3 learns on the flat ids: MaskablePPO on the compact ``Discrete`` ids and on the ``MultiDiscrete`` ones,
next to plain PPO on ``CartPole-v1``, in one run on one machine, so the ratios hold whatever the machine.

    python scripts/bench_ppo.py                                    # 4096 steps each, 3 rounds: ~3 minutes
    python scripts/bench_ppo.py --timesteps 8192 --envs RescueFlatDiscrete-v0,RescueFlat-v0 --native 0

For each id: the env is built and the model initialised untimed, then ``learn(--timesteps)`` is timed (rollouts and
updates: what a training run costs), and so is stepping the same env alone with random valid actions (what the env
itself costs), so the rest is the learner's. Every learner has the same hyperparameters (``MlpPolicy``, --n-steps,
--batch-size, SB3's other defaults), CPU, seed 0 and --torch-threads threads (1 by default: the networks are small,
and more threads than free cores slow torch down many times over). The load average before and after is printed:
a busy machine lowers every figure, and the ratios to CartPole less so. --repeats rounds go through every id in
turn (so a burst of load falls on all of them) and each id keeps its best round, as ``timeit`` does: the noise
of a shared machine only ever slows a run down.

``--native N`` (default 8; 0 skips) adds the closed loop natively vectorised: MaskablePPO on
``policies.sb3_vec.RescueSimSB3VecEnv(N, observation="flat", action="discrete")`` (``RescueSimFlatDiscrete-v1``'s
observation and action, N sessions stepped at once by ``RescueSim-v1``'s vector env), next to PPO on ``CartPole-v1``
under SB3's ``DummyVecEnv`` of N copies; both with ``n_steps`` = --n-steps / N, so that a rollout has as many steps
as the single-env rows'.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_ENVS = ("RescueFlatDiscrete-v1", "RescueFlat-v1", "RescueSimFlatDiscrete-v1", "RescueSimFlat-v1")
NATIVE = "RescueSimSB3VecEnv"
"""The row of ``--native``: ``RescueSim-v1``'s native vector env through the SB3 adapter (flat, discrete)."""
REFERENCE = "CartPole-v1"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"


def masked(env: Any) -> bool:
    try:
        env.get_wrapper_attr("action_masks")
    except AttributeError:
        return False
    return True


def env_steps_per_second(env: Any, steps: int, seed: int) -> float:
    """Steps/s of the env alone, random valid actions (masked where the env masks), resets included."""
    rng = np.random.default_rng(seed)
    masks_of = env.get_wrapper_attr("action_masks") if masked(env) else None
    discrete = env.action_space.shape == ()
    env.action_space.seed(seed)
    env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        masks = masks_of() if masks_of is not None else None  # what MaskablePPO asks of the env at every step
        valid = masks is not None and discrete
        action = int(rng.choice(np.flatnonzero(masks))) if valid else env.action_space.sample()
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def learner_steps_per_second(env_id: str, args: argparse.Namespace) -> tuple[str, float, float]:
    """(algorithm, learn steps/s, env-alone steps/s) on ``env_id``."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    from policies.sb3 import quiet_logger

    env = gym.make(env_id)
    if masked(env):
        from sb3_contrib import MaskablePPO

        algo, cls = "MaskablePPO", MaskablePPO
    else:
        algo, cls = "PPO", PPO
    set_random_seed(args.seed)
    model = cls("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.batch_size, seed=args.seed, device="cpu")
    model.set_logger(quiet_logger())
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    learn = model.num_timesteps / (time.perf_counter() - start)
    alone = env_steps_per_second(gym.make(env_id), args.timesteps, args.seed)
    return algo, learn, alone


def native_steps_per_second(num_envs: int, args: argparse.Namespace) -> tuple[tuple, tuple]:
    """(algorithm, learn steps/s, env-alone steps/s) of MaskablePPO on the native vector env's SB3 adapter and of
    PPO on ``CartPole-v1`` under ``DummyVecEnv``, both with ``num_envs`` envs and a rollout of --n-steps steps."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import set_random_seed

    from policies.sb3 import quiet_logger
    from policies.sb3_vec import RescueSimSB3VecEnv

    n_steps = max(1, args.n_steps // num_envs)
    out = []
    for cls, make in (
        (PPO, lambda: make_vec_env(REFERENCE, n_envs=num_envs, seed=args.seed)),
        (MaskablePPO, lambda: RescueSimSB3VecEnv(num_envs, observation="flat", action="discrete")),
    ):
        set_random_seed(args.seed)
        venv = make()
        model = cls("MlpPolicy", venv, n_steps=n_steps, batch_size=args.batch_size, seed=args.seed, device="cpu")
        model.set_logger(quiet_logger())
        start = time.perf_counter()
        model.learn(total_timesteps=args.timesteps)
        learn = model.num_timesteps / (time.perf_counter() - start)
        alone = vec_steps_per_second(make(), args.timesteps, args.seed, masked=cls is MaskablePPO)
        out.append((cls.__name__, learn, alone))
    return out[0], out[1]


def vec_steps_per_second(venv: Any, steps: int, seed: int, masked: bool) -> float:
    """Env-steps/s of an SB3 ``VecEnv`` alone, random actions (``masked``: valid ones, by its ``action_masks``)."""
    rng = np.random.default_rng(seed)
    venv.seed(seed)
    venv.reset()
    masks_of = (lambda: np.asarray(venv.env_method("action_masks"))) if masked else None
    n = venv.num_envs
    start = time.perf_counter()
    for _ in range(max(1, steps // n)):
        if masks_of is not None:
            actions = np.array([rng.choice(np.flatnonzero(row)) for row in masks_of()])
        else:
            actions = np.array([venv.action_space.sample() for _ in range(n)])
        venv.step(actions)
    return max(1, steps // n) * n / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(DEFAULT_ENVS), help="comma-separated ids (CartPole-v1 is added)")
    parser.add_argument("--timesteps", type=int, default=4096, help="learn steps per id (a multiple of --n-steps)")
    parser.add_argument("--n-steps", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every id; each keeps its best")
    parser.add_argument("--native", type=int, default=8, help="envs of the native vector row (0: skip)")
    args = parser.parse_args(argv)
    if args.timesteps < args.n_steps or args.n_steps < 1 or args.batch_size < 1 or args.torch_threads < 1:
        parser.error("--timesteps must be >= --n-steps >= 1, and --batch-size and --torch-threads >= 1")
    if args.repeats < 1 or args.native < 0:
        parser.error("--repeats must be >= 1 and --native >= 0")

    import torch

    import benchmarks  # noqa: F401  (the task ids too, should --envs name one)
    import rescue_env  # noqa: F401  (registers the ids)

    torch.set_num_threads(args.torch_threads)
    warnings.filterwarnings("ignore", message=".*is out of date.*")  # v0 stays on purpose, for reproducibility
    ids = [REFERENCE, *(e for e in args.envs.split(",") if e and e != REFERENCE)]
    print(
        f"{args.timesteps:,} steps per id, n_steps={args.n_steps}, batch_size={args.batch_size}, "
        f"{args.torch_threads} torch thread(s), seed {args.seed}; before: {load()}"
    )
    best: dict[str, tuple[str, float, float]] = {}
    for round_ in range(1, args.repeats + 1):
        measured = [(env_id, learner_steps_per_second(env_id, args)) for env_id in ids]
        if args.native:
            keys = (f"{REFERENCE} x{args.native}", f"{NATIVE} x{args.native}")
            measured += zip(keys, native_steps_per_second(args.native, args))
        for key, (algo, learn, alone) in measured:
            before = best.get(key, (algo, 0.0, 0.0))
            best[key] = (algo, max(learn, before[1]), max(alone, before[2]))
            print(f"  round {round_}, {key}: {algo} {learn:,.0f} steps/s (env alone {alone:,.0f})", file=sys.stderr)
    rows = [(env_id, *best[env_id]) for env_id in best]
    reference = rows[0][2]
    print(f"best of {args.repeats} round(s); the native rows' ratio is to CartPole under DummyVecEnv of as many envs:")
    print(f"{'env':<26} {'learner':<12} {'learn steps/s':>13} {'x CartPole':>10} {'env alone':>10} {'in the env':>10}")
    for env_id, algo, learn, alone in rows:
        # The share of a learning step spent stepping the env: 1/alone of the 1/learn seconds each step costs.
        share = learn / alone
        ratio = learn / (best[f"{REFERENCE} x{args.native}"][1] if env_id.startswith(NATIVE) else reference)
        target = "  (target >= 0.5x)" if "Discrete" in env_id or env_id.startswith(NATIVE) else ""
        print(f"{env_id:<26} {algo:<12} {learn:>13,.0f} {ratio:>9.2f}x {alone:>10,.0f} {share:>9.0%}{target}")
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
