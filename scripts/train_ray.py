"""Train RLlib PPO (Ray's new API stack) on a flat id or a PettingZoo view, or sweep seeds x an env coefficient with
Ray Tune, and write the results where pandas reads them (``bridges.ray_train``).

    python scripts/train_ray.py train --target RescueFlatDiscrete-v0 --iterations 20 --seed 0 --output runs/ray/flat
    python scripts/train_ray.py train --target multiparty --iterations 20 --output runs/ray/multiparty
    python scripts/train_ray.py train --target sim_multiparty --participants learned --output runs/ray/sim_mp
    python scripts/train_ray.py sweep --target RescueSimFlatDiscrete-v1 --seeds 0 1 2 --values 0.005 0.0186 0.05 \\
        --iterations 20 --output runs/ray/beta-sweep

``train`` runs ``--iterations`` PPO iterations in this process (the env runners: ``--num-env-runners`` Ray actors,
0 = sample here); ``sweep`` runs one ``tune.Tuner`` trial per (seed, value of ``--coefficient``, default
``beta``: ``RescueSim-v1``'s behaviour weight), each an Algorithm actor. Both write OUTPUT/results.csv (one row per
trial and iteration: seed, value, the return, every numeric metric, the data's sha256) and OUTPUT/results.json
(the settings, the package versions, the data's source and sha256, the same rows); ``sweep`` leaves Tune's own
files (per trial ``progress.csv`` and ``result.json``) under ``--storage-path`` (default OUTPUT/tune).

Flat ids get their action mask in the observation and a PPO module that applies it (``--no-mask``: PPO's default
module on the bare ``Box``). On a view, the therapist learns; the participants keep a fixed policy (always speak)
unless ``--participants learned`` (their actions change no reward in either view: ``bridges.ray_train``).

Ray: without ``--address`` or ``RAY_ADDRESS``, a local Ray of ``--num-cpus`` CPUs (no dashboard); with either, the
running cluster (``ray start --head`` then ``RAY_ADDRESS=...``, or ``ray job submit --working-dir . -- python
scripts/train_ray.py ...``, which sets ``RAY_ADDRESS`` itself).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``bridges`` is a top-level folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))


def _value(text: str) -> Any:
    """A command-line value: JSON when it parses (numbers, true, null, lists), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def env_arguments(pairs: list[str], data: str | None) -> dict[str, Any]:
    """``--env-arg KEY=VALUE`` pairs (values as JSON where they parse) and ``--data`` as the envs' ``data``: a path
    that exists here is made absolute, since Ray's workers do not start in this directory."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-arg needs KEY=VALUE, got {pair!r}")
        kwargs[key] = _value(value)
    if data is not None:
        path = Path(data)
        kwargs["data"] = str(path.resolve()) if data != "demo" and path.exists() else data
    return kwargs


def _entropy(text: str | None) -> Any:
    from bridges.ray_train import TIED

    if text is None or text == TIED:
        return None if text is None else TIED
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--entropy-coeff takes a number or {TIED!r}, got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--target", default="RescueFlatDiscrete-v0",
        help="a flat id (RescueFlat-v0, RescueFlatDiscrete-v0, RescueSimFlatDiscrete-v1, ...) or a view "
        "(multiparty, sim_multiparty)",
    )  # fmt: skip
    common.add_argument("--output", required=True, help="folder for results.csv and results.json")
    common.add_argument("--iterations", type=int, default=1, help="PPO training iterations (per trial)")
    common.add_argument("--data", default=None, help="the envs' data: a release JSONL, or demo (the envs' default)")
    common.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="an env argument")
    common.add_argument("--no-mask", action="store_true", help="flat ids: no action mask (PPO's default module)")
    common.add_argument("--participants", choices=("fixed", "learned"), default="fixed", help="views: who else learns")
    common.add_argument("--batch-size", type=int, default=None, help="train_batch_size_per_learner (default 512)")
    common.add_argument("--minibatch-size", type=int, default=None, help="default 128")
    common.add_argument("--epochs", type=int, default=None, help="num_epochs (default 4)")
    common.add_argument("--lr", type=float, default=None, help="default 3e-4")
    common.add_argument(
        "--entropy-coeff", type=_entropy, default=None,
        help="PPO's entropy bonus: a number, or tied (= beta; the default where the env has a beta, else 0)",
    )  # fmt: skip
    common.add_argument("--hidden", type=int, nargs="+", default=None, help="hidden layer sizes (default 64 64)")
    common.add_argument("--num-env-runners", type=int, default=0, help="sampling actors per algorithm (0: in-process)")
    common.add_argument("--envs-per-runner", type=int, default=1, help="envs per env runner")
    common.add_argument("--address", default=None, help="a running Ray cluster (default: RAY_ADDRESS, else local)")
    common.add_argument("--num-cpus", type=int, default=2, help="CPUs of a local Ray")

    train = sub.add_parser("train", parents=[common], help="train one PPO run here")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--checkpoint", action="store_true", help="save the algorithm under OUTPUT/checkpoint")

    sweep = sub.add_parser("sweep", parents=[common], help="a Tune grid over seeds x values of --coefficient")
    sweep.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    sweep.add_argument("--coefficient", default="beta", help="the env argument swept (default beta, RescueSim-v1's)")
    sweep.add_argument("--values", type=float, nargs="+", required=True, help="its values")
    sweep.add_argument("--storage-path", default=None, help="Tune's files (default OUTPUT/tune; shared on a cluster)")
    sweep.add_argument("--name", default=None, help="the Tune experiment's name (default: target, coefficient, time)")
    sweep.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: as CPUs allow)")
    return p


def config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    training = {
        key: value
        for key, value in (
            ("train_batch_size_per_learner", args.batch_size),
            ("minibatch_size", args.minibatch_size),
            ("num_epochs", args.epochs),
            ("lr", args.lr),
        )
        if value is not None
    }
    return {
        "masked": not args.no_mask,
        "participants": args.participants,
        "entropy_coeff": args.entropy_coeff,
        "training": training,
        "model": {} if args.hidden is None else {"fcnet_hiddens": list(args.hidden)},
        "num_env_runners": args.num_env_runners,
        "num_envs_per_env_runner": args.envs_per_runner,
    }


def headline(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        who = f"seed {row.get('seed')}" + (f", {row['coefficient']} {row['value']:g}" if row.get("coefficient") else "")
        ret = row.get("return_mean")
        ret_text = "-" if ret is None or ret != ret else f"{ret:+.3f}"
        lines.append(
            f"  {who:28s} iteration {row.get('training_iteration')}: therapist return {ret_text} over "
            f"{row.get('env_runners/num_episodes', 0)} episodes, {row.get('num_env_steps_sampled_lifetime', 0):.0f} "
            f"env steps{'' if row.get('status', 'ok') == 'ok' else ' [' + str(row.get('error')) + ']'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import ray

    from bridges import ray_train as rt

    try:
        rt.check_target(args.target)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.iterations < 1:
        print("error: --iterations must be >= 1", file=sys.stderr)
        return 2
    env_kwargs = env_arguments(args.env_arg, args.data)
    kwargs = config_kwargs(args)
    output = Path(args.output)
    started = not ray.is_initialized()
    rt.init_ray(address=args.address, num_cpus=args.num_cpus)
    start = time.perf_counter()
    try:
        if args.command == "train":
            about = rt.probe(args.target, env_kwargs)
            config = rt.ppo_config(args.target, seed=args.seed, env_kwargs=env_kwargs, **kwargs)
            checkpoint = output / "checkpoint" if args.checkpoint else None
            results = rt.train(config, args.iterations, checkpoint=checkpoint)
            rows = [{**rt.flatten(r), "seed": args.seed, "status": "ok"} for r in results]
            settings = {"seed": args.seed, "checkpoint": None if checkpoint is None else str(checkpoint)}
        else:
            # The data and the spaces do not depend on the coefficient: probed once, at its first value.
            about = rt.probe(args.target, {**env_kwargs, args.coefficient: args.values[0]})
            storage = args.storage_path or str(output / "tune")
            rows, grid = rt.sweep(
                args.target, args.seeds, args.values, coefficient=args.coefficient, iterations=args.iterations,
                storage_path=storage, name=args.name, max_concurrent_trials=args.max_concurrent,
                env_kwargs=env_kwargs, **kwargs,
            )  # fmt: skip
            settings = {
                "seeds": args.seeds, "coefficient": args.coefficient, "values": args.values,
                "storage_path": storage, "experiment": Path(grid.experiment_path).name,
            }  # fmt: skip
        for row in rows:
            row["return_mean"] = rt.therapist_return(row, args.target)
        settings.update(
            command=args.command, target=args.target, iterations=args.iterations, env_kwargs=env_kwargs,
            **kwargs,
            train_defaults=rt.TRAIN_DEFAULTS, model_defaults=rt.MODEL_DEFAULTS,
            action_space=about["action_space"], env_beta=about["beta"], seconds=round(time.perf_counter() - start, 2),
        )  # fmt: skip
        paths = rt.write_results(output, rows, kind=args.command, target=args.target, settings=settings,
                                 data=about["data"])  # fmt: skip
    finally:
        if started:
            ray.shutdown()
    print(f"{args.command} {args.target}: {len(rows)} row(s) in {time.perf_counter() - start:.1f} s")
    print(headline(rows))
    print(f"wrote {paths['csv']} and {paths['json']}")
    failed = [row for row in rows if row.get("status", "ok") != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
