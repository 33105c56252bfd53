"""The ``rescue-bench`` command line.

    rescue-bench data validate [PATH] [--strict]
    rescue-bench data stats [PATH] [--json]
    rescue-bench data synth N --output FILE

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
    return parser


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
