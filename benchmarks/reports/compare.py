"""The report of several runs (``rescue-bench report runs/a runs/b ...``): one comparison table (metrics x runs,
best in bold) and chart, and paired bootstrap tests on the instances the runs share.

The paired test (:func:`paired_bootstrap`) resamples instance positions with replacement, the same draw for both
runs, recomputes each task's headline metrics (``task.summary``) on both resamples and reports the difference
b − a: its point value on the common instances, the 95 % percentile interval of the resampled differences and a
two-sided p-value, 2 × the smaller share of resampled differences ≤ 0 and ≥ 0, floored at 1/resamples (a
bootstrap of R draws cannot tell p below 1/R). Instances are resampled one by one, as the runner's own intervals
(``benchmarks.results.bootstrap_summary``); rows of one conversation are not independent, so both are somewhat
narrow.

The draws are those of the runner's intervals (``benchmarks.bootstrap``, one implementation for both): the same
resample positions for both runs, every metric computed over all resamples at once from the tasks'
``summary_draws``, bit-identical to ``task.summary`` on each resample (a metric without a vectorised form falls
back to calling ``task.summary`` per resample; the test suite checks the two give the same draws). Speed figures:
``scripts/bench_scoring.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from numpy.typing import NDArray

from benchmarks import bootstrap
from benchmarks.registry import TASK_NAMES, get_task
from benchmarks.reports.document import Report, new_figure
from benchmarks.reports.run import Run, key, load_run
from benchmarks.results import SCOPE_TITLES, SCOPES, TABLE_COLUMNS, format_value, metric_unit
from benchmarks.results import table_cell as _missing

__all__ = [
    "PairedResult",
    "compare_report",
    "comparison_frame",
    "paired_bootstrap",
    "paired_frame",
    "run_labels",
]

LOWER_IS_BETTER = frozenset({"intensity_mae"})  # every other headline metric: higher is better
MAX_ALL_PAIRS = 4  # up to this many runs every pair is tested, beyond it each run against the first
KINDS = {"fraction": "percent", "bertscore_f1": "bertscore"}  # results unit -> results.format_value kind (else score)
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True)
class PairedResult:
    """One metric of a paired bootstrap: ``difference = b - a`` on the common instances, its 95 % percentile
    interval ``ci95`` and two-sided ``p_value`` over the ``resamples`` draws that gave both runs a value."""

    metric: str
    a: float
    b: float
    difference: float
    ci95: tuple[float, float] | None
    p_value: float | None
    instances: int
    resamples: int


# ----- the paired bootstrap (pure) --------------------------------------------------------------------------------


def paired_bootstrap(
    task_name: str,
    scores_a: Sequence[Mapping[str, Any]],
    scores_b: Sequence[Mapping[str, Any]],
    resamples: int = 1000,
    seed: int = 0,
    *,
    vectorised: bool = True,
) -> dict[str, PairedResult]:
    """Paired bootstrap of every headline metric of ``task_name`` (``task.summary``) between two runs whose score
    lists are aligned (entry i of both is the same instance). Metrics without a value in either run (not run) are
    left out. Deterministic given ``seed``; ``vectorised=False`` calls ``task.summary`` on every resample."""
    if len(scores_a) != len(scores_b):
        raise ValueError(f"{task_name}: the score lists differ in length ({len(scores_a)} vs {len(scores_b)})")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    task = get_task(task_name)
    n = len(scores_a)
    if n == 0:
        return {}
    point_a, point_b = task.summary(list(scores_a)), task.summary(list(scores_b))
    metrics = [m for m in point_a if point_a[m] is not None and point_b.get(m) is not None]
    draws_a, draws_b = bootstrap.task_draws(task, [scores_a, scores_b], metrics, resamples, seed, vectorised=vectorised)
    out = {}
    for metric in metrics:
        difference = draws_b[metric] - draws_a[metric]
        out[metric] = _paired_result(metric, point_a[metric], point_b[metric], difference, n, resamples)
    return out


def _paired_result(metric: str, a: float, b: float, draws: NDArray[np.float64], n: int, resamples: int) -> PairedResult:
    draws = draws[~np.isnan(draws)]  # a resample where either run has no value (e.g. nothing judged in it)
    if draws.size == 0:
        return PairedResult(metric, float(a), float(b), float(b) - float(a), None, None, n, 0)
    low, high = np.quantile(draws, [0.025, 0.975])
    smaller = min(float(np.mean(draws <= 0)), float(np.mean(draws >= 0)))
    p_value = min(1.0, max(2.0 * smaller, 1.0 / resamples))
    return PairedResult(
        metric, float(a), float(b), float(b) - float(a), (float(low), float(high)), p_value, n, int(draws.size)
    )


# ----- tables (pure) ------------------------------------------------------------------------------------------------


def run_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's agent or model (``run.label``); runs that share one get their directory name after it, and the
    whole path if that is not enough."""
    first = [r.label for r in runs]
    named = [f"{x} ({r.directory.name})" if first.count(x) > 1 else x for x, r in zip(first, runs)]
    return [f"{x} ({r.directory})" if named.count(y) > 1 else y for x, y, r in zip(first, named, runs)]


def _metric_order(results: Mapping[str, Any], task: str) -> list[str]:
    """Table 5's columns of the task first, then its other headline metrics (results.json sorts its keys)."""
    first = [k for t, k, _, _ in TABLE_COLUMNS if t == task]
    metrics = results["tasks"][task]["scopes"]["all"]["metrics"]
    return [*first, *(k for k in metrics if k not in first)]


def comparison_frame(runs: Sequence[Run], labels: Sequence[str]) -> pd.DataFrame:
    """Every headline metric of every task, scope and run (results.json's values, fractions as stored): the
    rows of ``comparison.csv``, which leaves out the two helper columns ``instances`` and ``missing`` (the table's
    text for a value that is missing)."""
    rows = []
    for task in TASK_NAMES:
        for metric in _metric_order(runs[0].results, task):
            for scope in SCOPES:
                for run, label in zip(runs, labels):
                    entry = run.results["tasks"][task]["scopes"].get(scope, {}).get("metrics", {}).get(metric, {})
                    ci = entry.get("ci95")
                    rows.append(
                        {
                            "task": task,
                            "metric": metric,
                            "scope": SCOPE_TITLES[scope],
                            "run": label,
                            "value": entry.get("value"),
                            "ci95_low": ci[0] if ci else None,
                            "ci95_high": ci[1] if ci else None,
                            "unit": metric_unit(task, metric, run.config),
                            "instances": run.results["tasks"][task]["scopes"].get(scope, {}).get("instances"),
                            # why a value is missing, in results.py's words: an empty scope, not run, or n/a
                            "missing": _missing(run.results, task, scope, metric, None),
                        }
                    )
    return pd.DataFrame(rows)


def _kind(unit: str) -> str:
    return KINDS.get(unit, "score")


def _best(values: Sequence[float | None], metric: str) -> set[int]:
    """Indices of the best value (ties all count); none when fewer than two runs have a value."""
    present = [(i, v) for i, v in enumerate(values) if v is not None and not pd.isna(v)]
    if len(present) < 2:
        return set()
    pick = min if metric in LOWER_IS_BETTER else max
    best = pick(v for _, v in present)
    return {i for i, v in present if math.isclose(v, best, rel_tol=0, abs_tol=1e-12)}


def _cell(row: pd.Series, with_interval: bool = True) -> str:
    if row["value"] is None or pd.isna(row["value"]):
        return str(row["missing"])
    kind = _kind(row["unit"])
    text = format_value(row["value"], kind)
    if with_interval and row["ci95_low"] is not None and not pd.isna(row["ci95_low"]):
        text += f" [{format_value(row['ci95_low'], kind)}, {format_value(row['ci95_high'], kind)}]"
    return text


OTHER_INSTANCES = "§"  # marks a task whose runs cover different instances: no best is bolded there


def unequal_instances(runs: Sequence[Run], labels: Sequence[str]) -> dict[str, str]:
    """The tasks whose runs did not all score the same instances (other data, another ``--limit`` or
    ``--sample-ids``, a run cut short), each with why in a few words: a "best" across them would compare scores
    on different questions, so the tables bold none there."""
    out = {}
    other_data = different_data(runs) is not None
    for task in TASK_NAMES:
        ids = [frozenset(str(r.get("instance_id")) for r in run.task_records(task)) for run in runs]
        if other_data:
            out[task] = "runs on different data"
        elif any(i != ids[0] for i in ids[1:]):
            counts = ", ".join(f"{label} {len(i):,}" for label, i in zip(labels, ids))
            same_size = len({len(i) for i in ids}) == 1
            out[task] = f"{'as many but not the same' if same_size else 'different'} instances ({counts})"
    return out


def _bolded(cells: Sequence[str], best: set[int]) -> list[str]:
    return [f"**{c}**" if i in best else c for i, c in enumerate(cells)]


def comparison_rows(
    frame: pd.DataFrame, labels: Sequence[str], scope: str = "Both", unequal: Mapping[str, str] | None = None
) -> list[list[str]]:
    """Task | metric | one cell per run (value [interval]), the best per metric in bold, except for the tasks of
    ``unequal`` (runs on different instances: marked with ``OTHER_INSTANCES``, nothing bolded)."""
    unequal = unequal or {}
    rows = []
    part = frame[frame["scope"] == scope]
    for (task, metric), group in part.groupby(["task", "metric"], sort=False):
        group = group.set_index("run").loc[list(labels)]
        best = set() if task in unequal else _best(list(group["value"]), metric)
        cells = _bolded([_cell(row) for _, row in group.iterrows()], best)
        arrow = " (lower is better)" if metric in LOWER_IS_BETTER else ""
        name = task.upper() + (f" {OTHER_INSTANCES}" if task in unequal else "")
        rows.append([name, metric + arrow, *cells])
    return rows


def scenario_rows(
    frame: pd.DataFrame, labels: Sequence[str], unequal: Mapping[str, str] | None = None
) -> list[list[str]]:
    """Table 11's layout: one row per scope x run, Table 5's columns, the best per column and scope in bold
    (none in a column of a task of ``unequal``)."""
    unequal = unequal or {}
    rows = []
    for scope in SCOPES:
        title = SCOPE_TITLES[scope]
        part = frame[frame["scope"] == title].set_index(["task", "metric", "run"])
        columns = []
        for task, metric, _, _ in TABLE_COLUMNS:
            cells = [part.loc[(task, metric, label)] for label in labels]
            best = set() if task in unequal else _best([c["value"] for c in cells], metric)
            columns.append(_bolded([_cell(c, False) for c in cells], best))
        for i, label in enumerate(labels):
            rows.append([title, label, *(column[i] for column in columns)])
    return rows


def _header(header: str, task: str, unequal: Mapping[str, str]) -> str:
    return header + (f" {OTHER_INSTANCES}" if task in unequal else "")


def run_pairs(count: int) -> list[tuple[int, int]]:
    """Every pair for 2-4 runs, each run against the first beyond that."""
    if count <= MAX_ALL_PAIRS:
        return list(combinations(range(count), 2))
    return [(0, j) for j in range(1, count)]


def different_data(runs: Sequence[Run]) -> str | None:
    """Why the runs cannot be paired (they were run on different data), or None."""
    first = runs[0]
    for run in runs[1:]:
        a, b = first.data.get("sha256"), run.data.get("sha256")
        if a != b:
            return (
                f"{first.directory} and {run.directory} are runs on different data (sha256 {str(a)[:12]} vs "
                f"{str(b)[:12]}): no paired test, and the table compares scores on different instances"
            )
    return None


def common_scores(a: Run, b: Run, task: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], int, int]:
    """The aligned score lists of the instances both runs scored (in run a's order), their ids, and how many
    only a / only b scored; ValueError when a common instance has a different gold in the two runs."""
    scored_a = {r["instance_id"]: r for r in a.task_records(task) if r.get("score") is not None}
    scored_b = {r["instance_id"]: r for r in b.task_records(task) if r.get("score") is not None}
    ids = [i for i in scored_a if i in scored_b]
    for instance in ids:
        if scored_a[instance].get("gold") != scored_b[instance].get("gold"):
            raise ValueError(
                f"{instance} has another gold in {a.directory} than in {b.directory}: not the same instances "
                "(different data or task settings)"
            )
    only_a, only_b = len(scored_a) - len(ids), len(scored_b) - len(ids)
    return [scored_a[i]["score"] for i in ids], [scored_b[i]["score"] for i in ids], ids, only_a, only_b


def paired_frame(
    runs: Sequence[Run], labels: Sequence[str], resamples: int = 1000, seed: int = 0
) -> tuple[pd.DataFrame, list[str]]:
    """The rows of ``paired.csv`` (each pair of :func:`run_pairs`, each task and headline metric) and one line per
    pair saying how many instances were common and how many only in one run (or why the pair was skipped)."""
    rows, notes = [], []
    why_not = different_data(runs)
    for i, j in [] if why_not else run_pairs(len(runs)):
        a, b = runs[i], runs[j]
        skipped = [r for r in (a, b) if not r.scored]
        if skipped:
            notes.append(f"{labels[j]} vs {labels[i]}: skipped. " + " ".join(r.rerun_note() for r in skipped))
            continue
        counts = []
        for task in TASK_NAMES:
            scores_a, scores_b, _, only_a, only_b = common_scores(a, b, task)
            counts.append(f"{task.upper()} {len(scores_a)} common, {only_a} only in a, {only_b} only in b")
            for metric, result in paired_bootstrap(task, scores_a, scores_b, resamples, seed).items():
                rows.append(
                    {
                        "run_a": labels[i],
                        "run_b": labels[j],
                        "task": task,
                        "metric": metric,
                        "a": result.a,
                        "b": result.b,
                        "difference": result.difference,
                        "ci95_low": result.ci95[0] if result.ci95 else None,
                        "ci95_high": result.ci95[1] if result.ci95 else None,
                        "p_value": result.p_value,
                        "instances": result.instances,
                        "only_a": only_a,
                        "only_b": only_b,
                        "resamples": result.resamples,
                        "seed": seed,
                        "unit": metric_unit(task, metric, a.config),
                    }
                )
        notes.append(f"**{labels[j]}** (b) vs **{labels[i]}** (a): " + "; ".join(counts) + ".")
    if why_not:
        notes.append(f"No paired test: {why_not}.")
    columns = [
        "run_a",
        "run_b",
        "task",
        "metric",
        "a",
        "b",
        "difference",
        "ci95_low",
        "ci95_high",
        "p_value",
        "instances",
        "only_a",
        "only_b",
        "resamples",
        "seed",
        "unit",
    ]
    return pd.DataFrame(rows, columns=columns), notes


# ----- the chart --------------------------------------------------------------------------------------------------

_UNIT_PANELS = (
    ("percent", "ITP–SSP (%)", 100.0, 100.0),
    ("score", "judge score", 1.0, 5.0),
    ("bertscore", "BERTScore F1", 1.0, 1.0),
)


def comparison_figure(frame: pd.DataFrame, labels: Sequence[str]) -> Figure | None:
    """Grouped bars per Table 5 column (one bar per run, its 95 % interval as the error bar), one panel per unit;
    a panel where no run has a value is left out. None when nothing has a value."""
    both = frame[frame["scope"] == "Both"].set_index(["task", "metric", "run"])
    panels = []
    for kind, title, scale, top in _UNIT_PANELS:
        columns = [(t, k, h) for t, k, h, c in TABLE_COLUMNS if c == kind]
        columns = [c for c in columns if any(not pd.isna(both.loc[(c[0], c[1], r), "value"]) for r in labels)]
        if columns:
            highest = max(float(both.loc[(t, k, r), "ci95_high"] or 0) for t, k, _ in columns for r in labels)
            panels.append((title, scale, max(top, scale * highest), columns))  # VP's 0-6 rubric goes past 5
    if not panels:
        return None
    bars = sum(len(p[3]) for p in panels) * max(1.0, len(labels) / 3)
    fig = new_figure(min(16.0, 3.0 + 0.7 * bars), 4.4)
    axes = fig.subplots(1, len(panels), width_ratios=[len(p[3]) + 0.5 for p in panels], squeeze=False)[0]
    width = 0.8 / len(labels)
    for ax, (title, scale, top, columns) in zip(axes, panels):
        for r, label in enumerate(labels):
            x = np.arange(len(columns)) + (r - (len(labels) - 1) / 2) * width
            for i, (task, metric, _) in enumerate(columns):
                row = both.loc[(task, metric, label)]
                if pd.isna(row["value"]):
                    continue  # not run for this run: the caption says so
                value = scale * row["value"]
                ax.bar(x[i], value, width=width, color=RUN_COLOURS[r % len(RUN_COLOURS)])
                if not pd.isna(row["ci95_low"]):
                    error = [[value - scale * row["ci95_low"]], [scale * row["ci95_high"] - value]]
                    ax.errorbar(x[i], value, yerr=error, color="black", capsize=2, linewidth=0.9)
        names = [h.replace(" ", "\n", 1) for _, _, h in columns]
        ax.set_xticks(np.arange(len(columns)), names, fontsize=8)
        ax.set_ylim(0, top * 1.04)  # a little room above 100 % for a bar and its interval
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    key(axes[-1], [(label, RUN_COLOURS[r % len(RUN_COLOURS)]) for r, label in enumerate(labels)], fontsize=8)
    fig.suptitle("Table 5 columns per run (Both), 95 % bootstrap intervals")
    return fig


# ----- the report -------------------------------------------------------------------------------------------------


def compare_report(run_dirs: Sequence[Path], output: Path, seed: int = 0, resamples: int = 1000) -> Report:
    """Build the comparison of the runs in ``run_dirs``; ``comparison.csv``, ``paired.csv`` and the chart are
    written to ``output`` now, ``report.md`` / ``report.html`` by the returned report's ``write()``. ValueError
    (one line) for fewer than two runs, a directory given twice or a directory that is not a finished six-task run.
    Runs on different data are compared in the table, with a warning, but not paired."""
    if len(run_dirs) < 2:
        raise ValueError(f"a comparison needs at least two run directories, got {len(run_dirs)}")
    resolved = [Path(d).resolve() for d in run_dirs]
    twice = next((d for k, d in enumerate(resolved) if d in resolved[:k]), None)
    if twice is not None:
        raise ValueError(f"{twice} is given twice")
    runs = [load_run(d) for d in run_dirs]
    labels = run_labels(runs)
    output = Path(output)
    report = Report(f"RESCUE-Bench: {len(runs)} runs compared", output)
    _runs_section(report, runs, labels)
    why_not = different_data(runs)
    if why_not:
        report.paragraph(f"**Not the same data.** {why_not}.")
    frame = comparison_frame(runs, labels)
    output.mkdir(parents=True, exist_ok=True)
    frame.drop(columns=["instances", "missing"]).to_csv(output / "comparison.csv", index=False)
    _table_section(report, frame, labels, unequal_instances(runs, labels))
    _paired_section(report, runs, labels, resamples, seed)
    return report


def _runs_section(report: Report, runs: Sequence[Run], labels: Sequence[str]) -> None:
    report.heading("Runs")
    rows = []
    for run, label in zip(runs, labels):
        config = run.config
        rows.append(
            [
                label,
                f"`{run.directory}`",
                config.get("agent"),
                config.get("model") or "—",
                config.get("mode"),
                config.get("judge_model") or "not run",
                config.get("bertscore_model") if config.get("bertscore", True) else "not run",
                sum(run.results["tasks"][t]["instances"] for t in TASK_NAMES),
                sum(run.results["tasks"][t]["failures"] for t in TASK_NAMES),
            ]
        )
    report.table(["Run", "Directory", "Agent", "Model", "Mode", "Judge", "BERTScore", "Instances", "Failed"], rows)
    sha = str(runs[0].data.get("sha256") or "?")
    report.paragraph(
        f"All on the same data: `{runs[0].data.get('source', runs[0].config.get('data'))}` (sha256 `{sha[:12]}`)."
    )


def _table_section(report: Report, frame: pd.DataFrame, labels: Sequence[str], unequal: Mapping[str, str]) -> None:
    report.heading("Comparison (Both = pooled over instances)")
    report.paragraph(
        "Every headline metric of every task: value and 95 % percentile-bootstrap interval (classification metrics "
        "in %, judge scores on their scale, BERTScore F1 raw); the best value per metric in **bold** (higher is "
        "better, except the intensity error) where every run scored the same instances. All values, per scenario "
        "too: `comparison.csv` (fractions as results.json stores them; `pd.read_csv`)."
    )
    report.table(["Task", "Metric", *labels], comparison_rows(frame, labels, unequal=unequal))
    if unequal:
        report.paragraph(
            f"{OTHER_INSTANCES} **No best in bold**: these runs scored different instances, so their values answer "
            "different questions — "
            + "; ".join(f"{task.upper()}: {why}" for task, why in unequal.items())
            + ". Compare them on common instances in the paired tests below."
        )
    figure = comparison_figure(frame, labels)
    if figure is not None:
        shown = frame[frame["scope"] == "Both"]
        missing = sorted(
            {h for t, k, h, _ in TABLE_COLUMNS if shown[(shown.task == t) & (shown.metric == k)]["value"].isna().all()}
        )
        report.figure(
            figure,
            "comparison",
            "Table 5's columns per run, pooled over scenarios, with 95 % bootstrap intervals; one panel per unit; "
            "a missing bar is a metric that run did not compute (see the table)"
            + (f"; not run in any run (no panel entry): {', '.join(missing)}" if missing else "")
            + ".",
        )
    report.heading("Per scenario (Table 11 layout)", level=3)
    header = ["Scenario", "Run", *(_header(c[2], c[0], unequal) for c in TABLE_COLUMNS)]
    report.table(header, scenario_rows(frame, labels, unequal))


def _paired_section(report: Report, runs: Sequence[Run], labels: Sequence[str], resamples: int, seed: int) -> None:
    report.heading("Paired bootstrap tests")
    paired, notes = paired_frame(runs, labels, resamples, seed)
    paired.to_csv(report.output / "paired.csv", index=False)
    pairs = "every pair of runs" if len(runs) <= MAX_ALL_PAIRS else "each run against the first"
    report.paragraph(
        f"For {pairs}, on the instances both scored: {resamples} resamples of those instances (seed {seed}), the "
        "same draw for both runs; the headline metrics recomputed on each; the difference b − a with its 95 % "
        "percentile interval and a two-sided p-value (2 × the smaller share of resampled differences ≤ 0 or ≥ 0, "
        f"at least 1/{resamples}). Differences of % metrics in percentage points. No correction for the many tests: "
        "at p < 0.05 about one in twenty differences that are not real will look real. All rows: `paired.csv`."
    )
    for note in notes:
        report.paragraph(note)
    for (run_a, run_b), group in paired.groupby(["run_a", "run_b"], sort=False):
        report.heading(f"{run_b} − {run_a}", level=3)
        rows = []
        for row in group.itertuples():
            kind = _kind(row.unit)
            low, high = format_value(row.ci95_low, kind), format_value(row.ci95_high, kind)
            interval = "" if pd.isna(row.ci95_low) else f" [{low}, {high}]"
            p_value = "—" if pd.isna(row.p_value) else f"{row.p_value:.3g}"
            rows.append(
                [
                    row.task.upper(),
                    row.metric,
                    format_value(row.a, kind),
                    format_value(row.b, kind),
                    format_value(row.difference, kind) + interval,
                    p_value,
                    row.instances,
                ]
            )
        report.table(["Task", "Metric", "a", "b", "b − a [95 % CI]", "p", "n"], rows)
