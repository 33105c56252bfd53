"""``rescue-bench report``: figures, ``report.md`` and a self-contained ``report.html`` for what a user has.

- a dataset (``--data PATH``): ``benchmarks.reports.dataset`` (Table 3, Figs. 3 and 5-9, next to the paper's);
- one six-task run directory: ``benchmarks.reports.run`` (Table 5/11 layout, Fig. 4, per-label accuracy,
  confusion matrices, the run next to the paper's LLMs);
- several six-task runs: ``benchmarks.reports.compare`` (one table and chart, paired bootstrap tests);
- one or more rollout directories: ``benchmarks.reports.rollout`` (returns, reward components, learning curve,
  one episode step by step);
- a training output (an SB3 monitor log, a model with its log beside it, or a directory of logs, as
  ``scripts/train_sb3.py`` and ``scripts/train_sim_ppo.py`` write them): its learning curve.

``build_report`` decides which from what it is given; the writers share ``benchmarks.reports.document``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.reports.document import Report

__all__ = ["Built", "ReportError", "build_report", "comparison_lines", "kind_of"]


class ReportError(ValueError):
    """What was given cannot be reported on (one line)."""


@dataclass
class Built:
    """A report ready to ``write`` and the lines to print on the console (e.g. numbers next to the paper's)."""

    report: Report
    console: list[str] = field(default_factory=list)


def kind_of(path: Path) -> str:
    """``run`` (a six-task run directory), ``rollout``, ``training`` (a training output: an SB3 monitor log, a
    model with its log beside it, or a directory of logs), or a ReportError saying what ``path`` is not."""
    from benchmarks.reports.rollout import is_rollout_dir, is_training_output
    from benchmarks.reports.run import is_run_dir

    if path.exists() and not is_rollout_dir(path) and is_training_output(path):
        return "training"
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (give a run directory of rescue-bench evaluate or rollout)")
    if is_rollout_dir(path):
        return "rollout"
    if is_run_dir(path):
        return "run"
    raise ReportError(
        f"{path}: no finished run here (expected results.json and predictions.jsonl of rescue-bench evaluate, "
        "or trajectories.jsonl of rescue-bench rollout)"
    )


def build_report(
    runs: Sequence[Path],
    *,
    data: str | None = None,
    output: Path | None = None,
    protocol: str = "paper",
    episode: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
    verbose: bool = False,
) -> Built:
    """The report of a dataset (``data``) or of run directories (``runs``); ``output`` defaults to
    ``RUN_DIR/report`` for one run, ``reports/compare`` or ``reports/rollouts`` for several and
    ``reports/data-NAME`` for a dataset. A dataset's console lines list every number next to the paper's for the
    release (or with ``verbose``), else one line of how many agree."""
    if data is not None and runs:
        raise ReportError("give either --data PATH (a dataset report) or run directories, not both")
    if data is not None:
        from benchmarks.reports.dataset import dataset_report, is_release, paper_comparison
        from rescue_env.data import load_dataset

        dataset = load_dataset(data)
        if len(dataset) == 0:
            raise ReportError(f"{data}: 0 samples loaded; nothing to report")
        name = Path(data).stem if data != "demo" else "demo"
        target = output or Path("reports") / f"data-{name}"
        report = dataset_report(dataset, target, protocol=protocol)  # type: ignore[arg-type]
        rows = paper_comparison(dataset, protocol=protocol)  # type: ignore[arg-type]
        what = "demo data" if data == "demo" else f"{Path(data).name} (not the release: Table 3's counts differ)"
        return Built(report, comparison_lines(rows, what, listed=verbose or is_release(dataset)))
    if not runs:
        raise ReportError("nothing to report: give run directories, or --data PATH for a dataset")
    kinds = {path: kind_of(path) for path in runs}
    if len(set(kinds.values())) > 1:
        raise ReportError("give either six-task runs or rollouts, not both: " + ", ".join(map(str, runs)))
    kind = next(iter(kinds.values()))
    if kind == "training":
        from benchmarks.reports.rollout import learning_curve_report

        if len(runs) > 1:
            raise ReportError("give one training output at a time (a monitor log, a model, or its directory)")
        folder = runs[0] if runs[0].is_dir() else runs[0].parent
        return Built(learning_curve_report(runs[0], output or folder / "report"))
    if kind == "rollout":
        from benchmarks.reports.rollout import rollout_report

        target = output or (runs[0] / "report" if len(runs) == 1 else Path("reports") / "rollouts")
        return Built(rollout_report(list(runs), target, episode=episode))
    if episode is not None:
        raise ReportError("--episode is for rollout runs")
    if len(runs) == 1:
        from benchmarks.reports.run import run_report

        return Built(run_report(runs[0], output or runs[0] / "report"))
    from benchmarks.reports.compare import compare_report

    if len({path.resolve() for path in runs}) < len(runs):
        raise ReportError("the same run directory was given twice")
    target = output or Path("reports") / "compare"
    return Built(compare_report(list(runs), target, seed=seed, resamples=resamples))


def comparison_lines(rows: Sequence[Any], what: str, listed: bool) -> list[str]:
    """The dataset report's numbers next to the paper's for the console. ``listed`` (the release, or
    ``--verbose``): one per line, marked ``=`` (the same at the paper's precision, or the paper's claim holds),
    ``x`` (not) or ``?`` (cannot be told), then the count. Otherwise one line: other data is not expected to
    match, and a list of dozens of "x" lines would only bury the report's path."""
    matched = sum(row.match is True for row in rows)
    told = sum(row.match is not None for row in rows)
    if not listed:
        return [f"{what}: not expected to match the paper; {matched} of {told} agree (--verbose lists them)"]
    marks = {True: "=", False: "x", None: "?"}
    lines = ["this data next to the paper (= same, x differs, ? cannot be told):"]
    lines += [f"  {marks[row.match]} {row.what} ({row.scope}): {row.ours} | paper {row.paper}" for row in rows]
    lines.append(f"{matched} of {told} match")
    return lines
