"""Environment speed: every Rescue id next to Gymnasium's ``CartPole-v1``, measured in one run.

    python scripts/bench_env.py [--data PATH|demo] [--steps 20000] [--repeat 3] [--vector 4] [--ids ...]
                                [--native 1024 256] [--native-steps 100]
                                [--baseline /tmp/baseline | --no-baseline] [--profile ID] [--json]

--data defaults to ../shared/data/rescue_text.jsonl (the release) when present, else the embedded demo. Every id
(``Rescue-v0``, ``RescueFlat-v0``, ``Rescue-v1``, ``RescueFlat-v1``, ``RescueSim-v0``, ``RescueSimFlat-v0`` and
the reference ``CartPole-v1``) is built with ``gym.make`` or ``gym.make_vec(..., vectorization_mode="sync")`` with
--vector sub-envs, so that the default wrappers cost the same. Printed per id:

- ``single``: env-steps/s of one env, actions drawn before the clock starts (sampling a ``Dict`` action is
  gymnasium's cost, not the env's), best of --repeat runs of --steps steps after every conversation was played
  once and a warm-up run (the steady state: the first pass is timed apart, below);
- ``vec``: the same under ``make_vec`` (--steps env-steps = --steps / --vector vector steps);
- ``vec+sample``: ``make_vec`` with ``action_space.sample()`` in the timed loop (what a naive loop sees);
- each figure's ratio to CartPole's same figure, timed in turn with it in the same process (so that a change of
  the machine's load hits both; targets: single >= 0.8x, vec >= 0.5x);
- ``first pass``: in a fresh process, seconds to play every conversation (every start of the sim) once, right
  after ``gym.make`` (the per-conversation precomputation is in it; target <= 1 s), and the seconds of
  ``gym.make`` itself (data loading, F's fit) beside it;
- the old figures: the same measurements run in a subprocess against --baseline (an unchanged copy of the
  code, e.g. /tmp/baseline), printed beside the new ones (``old``), each with its own CartPole reference;
- ``native vector``: ``RescueSim-v1``'s native vector env (``gym.make_vec(..., vectorization_mode=
  "vector_entry_point")``, with its ``text`` observation and with ``text=False``) against Gymnasium's own
  ``CartPoleVectorEnv`` at the same ``num_envs`` (--native, 0 to skip), both timed in turn in one process, best of
  --repeat runs of --native-steps vector steps after a warm-up run of as many (target >= 0.1x); with numba
  installed (the env's compiled step), the numpy step (``compiled=False``) and the compiled loop on two threads
  (``threads=2``, on a machine with two cores or more) beside it. ``--ids CartPole-v1`` measures
  only the reference in the table above, e.g. for the native figure alone.

--profile ID prints a cProfile of ID's single-env loop (own time of the top functions) after the table.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"
IDS = ("Rescue-v0", "RescueFlat-v0", "Rescue-v1", "RescueFlat-v1", "RescueSim-v0", "RescueSimFlat-v0")
REFERENCE = "CartPole-v1"
TARGETS = {"single": 0.8, "vec": 0.5}
NATIVE_TARGET = 0.1
NATIVE_ID = "RescueSim-v1"
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter  # --clock: the process's CPU time is steadier than wall time on a loaded machine


def _make(env_id: str, data: str, vector: int = 0):
    import gymnasium as gym

    import rescue_env  # noqa: F401  (registers the ids)

    kwargs = {} if env_id == REFERENCE else {"data": data}
    if vector:
        return gym.make_vec(env_id, num_envs=vector, vectorization_mode="sync", **kwargs)
    return gym.make(env_id, **kwargs)


def _run(env, actions: list | None, steps: int, vector: bool) -> float:
    """Seconds for ``steps`` steps: of ``actions`` in turn, or with ``action_space.sample()`` when None."""
    step, sample = env.step, env.action_space.sample
    start = clock()
    if actions is None:
        for _ in range(steps):
            _, _, terminated, truncated, _ = step(sample())
            if not vector and (terminated or truncated):
                env.reset()
    else:
        for action in actions:
            _, _, terminated, truncated, _ = step(action)
            if not vector and (terminated or truncated):
                env.reset()  # a vector env resets its sub-envs itself (next-step autoreset)
    return clock() - start


def _visit_every_conversation(env) -> None:
    """Play every conversation once in every (sub-)env, so that the figures are the steady state's: the first
    pass over the data (the per-conversation precomputation, the flat features) is timed on its own."""
    for sub in getattr(env, "envs", [env]):
        sub.action_space.seed(0)
        for sample in getattr(sub.unwrapped, "samples", []):
            sub.reset(options={"sample_id": sample.sample_id})
            done = False
            while not done:
                _, _, terminated, truncated, _ = sub.step(sub.action_space.sample())
                done = terminated or truncated


def _prepared(env_id: str, data: str, steps: int, vector: int, presampled: bool):
    env = _make(env_id, data, vector)
    _visit_every_conversation(env)
    env.reset(seed=0)
    env.action_space.seed(0)
    loop_steps = max(1, steps // max(vector, 1))
    actions = [env.action_space.sample() for _ in range(loop_steps)] if presampled else None
    _run(env, actions, loop_steps, bool(vector))  # warm-up: imports, precomputation, feature caches
    return env, actions, loop_steps


def steps_per_second(
    env_id: str, data: str, steps: int, repeat: int, vector: int, presampled: bool
) -> tuple[float, float]:
    """(env-steps/s of ``env_id``, of CartPole-v1), each the best of ``repeat`` runs after a warm-up run; the two
    are timed in turn, so that a change in the machine's load hits both (the ratio is what is compared)."""
    env, actions, loop_steps = _prepared(env_id, data, steps, vector, presampled)
    reference, reference_actions, _ = _prepared(REFERENCE, data, steps, vector, presampled)
    best = best_reference = float("inf")
    for _ in range(repeat):
        best_reference = min(best_reference, _run(reference, reference_actions, loop_steps, bool(vector)))
        best = min(best, _run(env, actions, loop_steps, bool(vector)))
    env.close()
    reference.close()
    scale = loop_steps * max(vector, 1)
    return scale / best, scale / best_reference


def sample_rate(env_id: str, data: str, steps: int, vector: int) -> float:
    """``action_space.sample()`` calls/s (times the sub-envs under ``make_vec``: actions per second)."""
    env = _make(env_id, data, vector)
    env.action_space.seed(0)
    n = max(1, steps // max(vector, 1))
    start = time.perf_counter()
    for _ in range(n):
        env.action_space.sample()
    rate = n * max(vector, 1) / (time.perf_counter() - start)
    env.close()
    return rate


def first_pass(env_id: str, data: str) -> dict[str, float]:
    """In this (fresh) process: seconds of ``gym.make`` and of playing every conversation once after it."""
    start = time.perf_counter()
    env = _make(env_id, data)
    built = time.perf_counter() - start
    env.action_space.seed(0)
    pool = [env.action_space.sample() for _ in range(1024)]
    samples = env.unwrapped.samples
    steps, start = 0, time.perf_counter()
    for sample in samples:
        env.reset(seed=steps, options={"sample_id": sample.sample_id})
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(pool[steps % len(pool)])
            steps += 1
            done = terminated or truncated
    return {"make_s": built, "pass_s": time.perf_counter() - start, "episodes": len(samples), "steps": steps}


def measure(ids: list[str], data: str, steps: int, repeat: int, vector: int) -> dict[str, dict[str, float]]:
    """Per id: each figure and CartPole-v1's same figure timed beside it (``<figure>_reference``)."""
    figures: dict[str, dict[str, float]] = {}
    for env_id in [REFERENCE, *ids]:
        row: dict[str, float] = {"single_sample_s": sample_rate(env_id, data, steps, 0)}
        modes = [("single", 0, True)] + ([("vec", vector, True), ("vec+sample", vector, False)] if vector else [])
        for key, n, presampled in modes:
            row[key], row[f"{key}_reference"] = steps_per_second(env_id, data, steps, repeat, n, presampled)
        figures[env_id] = row
    return figures


def _native(env_id: str, data: str, num_envs: int, **kwargs):
    import gymnasium as gym

    import rescue_env  # noqa: F401  (registers the ids)

    if env_id != REFERENCE:
        kwargs["data"] = data
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


def _run_native(env, actions: list) -> float:
    step = env.step
    start = clock()
    for action in actions:
        step(action)  # a native vector env resets its sessions itself (next-step autoreset)
    return clock() - start


def measure_native(data: str, sizes: list[int], steps: int, repeat: int) -> dict[str, dict[str, float]]:
    """Per ``num_envs``: env-steps/s of RescueSim-v1's native vector env (with and without ``text``) and of
    CartPole-v1's ``CartPoleVectorEnv``, timed in turn (best of ``repeat`` after a warm-up run each)."""
    figures: dict[str, dict[str, float]] = {}
    for num_envs in sizes:
        envs = {
            "reference": _native(REFERENCE, data, num_envs),
            "text": _native(NATIVE_ID, data, num_envs),
            "no_text": _native(NATIVE_ID, data, num_envs, text=False),
        }
        if getattr(envs["no_text"].unwrapped, "compiled", False):  # numba installed: the numpy step beside it
            envs["no_text_numpy"] = _native(NATIVE_ID, data, num_envs, text=False, compiled=False)
            if (os.cpu_count() or 1) > 1:  # and the compiled loop on two threads
                envs["no_text_threads"] = _native(NATIVE_ID, data, num_envs, text=False, threads=2)
        actions = {}
        for key, env in envs.items():
            env.reset(seed=0)
            env.action_space.seed(0)
            actions[key] = [env.action_space.sample() for _ in range(steps)]
            _run_native(env, actions[key])  # warm-up: the precomputation, the words of the readings seen
        best = dict.fromkeys(envs, float("inf"))
        for _ in range(repeat):
            for key, env in envs.items():
                best[key] = min(best[key], _run_native(env, actions[key]))
        for env in envs.values():
            env.close()
        figures[str(num_envs)] = {key: steps * num_envs / seconds for key, seconds in best.items()}
    return figures


def _worker(args: argparse.Namespace) -> int:
    if args.native_worker:
        print(json.dumps(measure_native(args.data, args.native, args.native_steps, args.repeat)))
    elif args.first_pass:
        print(json.dumps(first_pass(args.first_pass, args.data)))
    else:
        print(json.dumps(measure(args.ids, args.data, args.steps, args.repeat, args.vector)))
    return 0


def _subprocess(root: Path | None, argv: list[str]) -> dict:
    """This script's worker in a fresh interpreter, importing ``rescue_env`` from ``root`` (None: this tree)."""
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = str(root)
    cwd = "/" if root is not None else str(Path(__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def profile(env_id: str, data: str, steps: int) -> None:
    env = _make(env_id, data)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    _run(env, actions, steps, False)
    profiler = cProfile.Profile()
    profiler.enable()
    _run(env, actions, steps, False)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(entry[2] for entry in stats.stats.values())
    print(f"cProfile of {steps:,} {env_id} steps (pre-drawn actions): top functions by own time")
    for (filename, line, name), entry in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:15]:
        print(f"  {entry[2] / total:6.1%}  {entry[1]:>9,} calls  {Path(filename).name}:{line}({name})")


def _ratio(figures: dict, env_id: str, key: str) -> float | None:
    """The figure over CartPole's, timed beside it."""
    reference = figures.get(env_id, {}).get(f"{key}_reference")
    value = figures.get(env_id, {}).get(key)
    return value / reference if value and reference else None


def _cell(figures: dict | None, env_id: str, key: str) -> str:
    if not figures or "error" in figures or key not in figures.get(env_id, {}):
        return f"{'-':>17}"
    ratio = _ratio(figures, env_id, key)
    return f"{figures[env_id][key]:9,.0f} ({ratio:5.2f}x)" if ratio is not None else f"{figures[env_id][key]:17,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DEFAULT) if DEFAULT.is_file() else "demo")
    parser.add_argument("--steps", type=int, default=20_000, help="env-steps per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per figure (the best is kept)")
    parser.add_argument("--vector", type=int, default=4, help="sub-envs under make_vec (0: skip)")
    parser.add_argument(
        "--ids",
        nargs="+",
        default=list(IDS),
        choices=(*IDS, REFERENCE),
        help=f"ids to measure ({REFERENCE} alone: only the reference, e.g. for the native figure)",
    )
    baseline = Path("/tmp/baseline")
    parser.add_argument("--baseline", type=Path, default=baseline if baseline.is_dir() else None)
    parser.add_argument("--no-baseline", dest="baseline", action="store_const", const=None)
    parser.add_argument("--no-first-pass", dest="first_pass_figures", action="store_false")
    parser.add_argument("--profile", choices=(*IDS, REFERENCE))
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="steps/s in wall or CPU time")
    parser.add_argument("--native", type=int, nargs="+", default=[1024, 256],
                        help="num_envs of the native vector figure (0: skip)")  # fmt: skip
    parser.add_argument("--native-steps", type=int, default=100, help="vector steps per native measurement")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--native-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first-pass", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeat < 1 or args.vector < 0 or args.native_steps < 1:
        parser.error("--steps, --repeat and --native-steps must be >= 1, --vector >= 0")
    args.native = [n for n in args.native if n > 0]
    args.ids = [i for i in args.ids if i != REFERENCE]  # the reference is always measured
    global clock
    clock = CLOCKS[args.clock]
    if args.worker:
        return _worker(args)
    if args.data != "demo" and not Path(args.data).exists():
        parser.exit(2, f"error: {args.data} not found\n")

    common = ["--data", args.data, "--steps", str(args.steps), "--repeat", str(args.repeat)]
    common += ["--vector", str(args.vector), "--clock", args.clock, "--ids", *(args.ids or [REFERENCE])]
    roots = {"new": None} | ({"old": args.baseline} if args.baseline else {})
    figures = {label: _subprocess(root, common) for label, root in roots.items()}
    native: dict = {}
    if args.native:
        sizes = [str(n) for n in args.native]
        worker = ["--native-worker", "--data", args.data, "--repeat", str(args.repeat), "--clock", args.clock]
        native = _subprocess(None, [*worker, "--native-steps", str(args.native_steps), "--native", *sizes])
    passes: dict[str, dict[str, dict]] = {label: {} for label in roots}
    if args.first_pass_figures:
        for label, root in roots.items():
            for env_id in args.ids:
                passes[label][env_id] = _subprocess(root, ["--data", args.data, "--first-pass", env_id])
    if args.json:
        print(json.dumps({"data": args.data, "steps": args.steps, "figures": figures, "first_pass": passes,
                          "native": native}))  # fmt: skip
        return 0

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"data: {args.data}; {args.steps:,} env-steps per figure, best of {args.repeat}; make_vec x{args.vector} "
        f"(sync); {args.clock} clock; load average {load:.2f} on {os.cpu_count()} cores; old = "
        f"{args.baseline or 'not measured'}"
    )
    print("env-steps/s (ratio to CartPole-v1's same figure, timed in turn with it in the same process)")
    keys = ["single"] + (["vec", "vec+sample"] if args.vector else [])
    header = f"  {'':<18}" + "".join(f"{k + ' ' + label:>19}" for k in keys for label in roots)
    print(header)
    for env_id in [REFERENCE, *args.ids]:
        cells = "".join(f"  {_cell(figures[label], env_id, key)}" for key in keys for label in roots)
        print(f"  {env_id:<18}{cells}")
    new = figures["new"]
    if "error" in new:
        print(f"  new: {new['error']}")
    for label in roots:
        if "error" in figures[label]:
            print(f"  {label}: {figures[label]['error']}")
    print("action_space.sample() calls/s, single env (gymnasium's cost, outside the timed steps above)")
    for env_id in [REFERENCE, *args.ids]:
        if env_id in new:
            print(f"  {env_id:<18} {new[env_id]['single_sample_s']:12,.0f}/s")
    if args.first_pass_figures:
        print("first pass in a fresh process: every conversation (sim: every start) played once after gym.make")
        for env_id in args.ids:
            parts = []
            for label in roots:
                f = passes[label].get(env_id, {})
                if "pass_s" in f:
                    parts.append(
                        f"{label} {f['pass_s']:6.2f} s ({f['steps']:,} steps, {f['episodes']} episodes; "
                        f"gym.make {f['make_s']:.2f} s)"
                    )
                else:
                    parts.append(f"{label} {f.get('error', '-')}")
            print(f"  {env_id:<18} " + "   ".join(parts))
    verdicts = []
    for env_id in args.ids:
        for key, target in TARGETS.items():
            ratio = _ratio(new, env_id, key) if "error" not in new else None
            if key in keys and ratio is not None:
                verdicts.append(f"{env_id} {key} {ratio:.2f}x {'met' if ratio >= target else 'NOT met'}")
    if verdicts:
        print(f"targets (single >= {TARGETS['single']}x, vec >= {TARGETS['vec']}x): " + "; ".join(verdicts))
    if args.first_pass_figures:
        slow = [i for i in args.ids if passes["new"].get(i, {}).get("pass_s", 0.0) > 1.0]
        print(f"first pass <= 1 s: {'met' if not slow else 'NOT met for ' + ', '.join(slow)}")
    if args.native:
        _print_native(native, args)
    if args.profile:
        profile(args.profile, args.data, min(args.steps, 20_000))
    return 0


def _print_native(native: dict, args: argparse.Namespace) -> None:
    print(
        f"native vector env: gym.make_vec(..., vectorization_mode='vector_entry_point'), env-steps/s, best of "
        f"{args.repeat} x {args.native_steps} vector steps, {NATIVE_ID} and CartPoleVectorEnv timed in turn"
    )
    if "error" in native:
        print(f"  {native['error']}")
        return
    labels = {"text": "", "no_text": " text=False", "no_text_numpy": " text=False compiled=False",
              "no_text_threads": " text=False threads=2"}  # fmt: skip
    keys = [key for key in labels if any(key in row for row in native.values())]
    width = max(len(NATIVE_ID + labels[k]) for k in keys) + 2
    print(f"  {'num_envs':>8} {'CartPole-v1':>24}" + "".join(f"{NATIVE_ID + labels[k]:>{width}}" for k in keys))
    print(f"  {'':>8} {'env-steps/s (ms/step)':>24}" + f"{'env-steps/s (ms/step, ratio)':>{width}}" * len(keys))
    verdicts = []
    for num_envs, row in native.items():
        ms = {key: 1000.0 * int(num_envs) / rate for key, rate in row.items()}  # per vector step
        cells = [f"{row['reference']:14,.0f} ({ms['reference']:6.3f})"]
        for key in keys:
            ratio = row[key] / row["reference"]
            cells.append(f"{row[key]:12,.0f} ({ms[key]:6.3f}, {ratio:5.3f}x)")
            verdicts.append(f"N={num_envs}{labels[key]} {ratio:.3f}x {'met' if ratio >= NATIVE_TARGET else 'NOT met'}")
        print(f"  {num_envs:>8} {cells[0]:>24}" + "".join(f"{cell:>{width}}" for cell in cells[1:]))
    print(f"native target (>= {NATIVE_TARGET}x CartPoleVectorEnv): " + "; ".join(verdicts))


if __name__ == "__main__":
    raise SystemExit(main())
