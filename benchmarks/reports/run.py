"""The report of one six-task run (``rescue-bench report RUN_DIR``): the paper's Table 5/11 layout with intervals,
RPP accuracy over the dialogue (Fig. 4), per-label accuracy (App. E.2), confusion matrices, the run next to the
paper's best and average LLM (Table 5), and where its errors are.

Everything is read from the run directory that ``rescue-bench evaluate`` wrote (``benchmarks.runner``):
``config.json`` (command, settings, data sha256), ``results.json`` (``benchmarks.results``) and
``predictions.jsonl``. Each figure's numbers are written next to its PNG as ``figures/<name>.csv``, so a reader
can check a bar against a number (and the tests do).

Runs scored before ``predictions.jsonl`` carried the scoring fields (``gold``, ``score``, ``correct``,
``position``) still get every section that ``results.json`` alone supports; re-running the run's own command on
its directory adds the fields without asking the model again (every instance already has an answer, so nothing
is sent, not even the probe request).

Position bins (Fig. 4) are exact integer bins, as ``rescue_env.data.stats.position_bin``: a record carries its
1-based ``row`` and ``position = row0 / rows`` (a float), so ``rows = round(row0 / position)`` recovers the
sample's row count exactly (the float quotient is within a few ulps of an integer far below 2**52), and the bin is
``row0 * 10 // rows``; ``int(position * 10)`` would put a row that lies on a bin edge in the bin below whenever
the product rounds down (e.g. 0.3 * 10 = 2.9999... for some quotients).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from benchmarks.metrics import FAILED_COLUMN, OTHER_COLUMN
from benchmarks.registry import TASK_NAMES
from benchmarks.reports import paper
from benchmarks.reports.document import Report, new_figure
from benchmarks.results import (
    SCOPE_TITLES,
    SCOPES,
    TABLE_COLUMNS,
    format_value,
    load_results,
    metric_entry,
    table_cell,
)
from rescue_env.data.domain import GROUP_SPEAKERS
from rescue_env.data.stats import POSITION_BINS, bin_label, position_bin
from rescue_env.taxonomy import label_name

__all__ = [
    "RESULTS_FORMAT",
    "SCORING_FIELDS",
    "Run",
    "interval_cell",
    "is_run_dir",
    "label_accuracy",
    "load_run",
    "position_accuracy",
    "record_bin",
    "run_label",
    "run_report",
    "top_confusions",
]

RESULTS_FORMAT = "rescue-env-results/1"
SCORING_FIELDS = ("gold", "score", "correct", "position")
LABEL_TASKS = ("rpp", "ssp")  # tasks whose results carry a LabelReport (App. E.2)
SCENARIO_SCOPES = ("couple", "family")
COLOURS = {"couple": "#1f77b4", "family": "#d62728", "all": "#333333"}
PAPER_COLOUR = "#2ca02c"
DISPLAY_COLUMNS = {OTHER_COLUMN: "out of set", FAILED_COLUMN: "failed"}
KIND_NAMES = {"individual": "one person", "group": "group label", "failed": "failed"}


# ----- reading a run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A finished ``rescue-bench evaluate`` run directory, read once."""

    directory: Path
    command: list[str]
    data: dict[str, Any]
    results: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def config(self) -> dict[str, Any]:
        """The EvalConfig dump the results were computed with."""
        return self.results.get("config", {})

    @property
    def label(self) -> str:
        return run_label(self.config)

    @property
    def scored(self) -> bool:
        """Whether every record carries the scoring fields (runs made before they existed do not)."""
        return bool(self.records) and all(all(k in r for k in SCORING_FIELDS) for r in self.records)

    def task_records(self, task: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("task") == task]

    def rerun_note(self) -> str:
        """The one line that says how to add the scoring fields to an old run."""
        command = shlex.join(self.command) if self.command else "rescue-bench evaluate ..."
        return (
            f"predictions.jsonl in {self.directory} has no per-instance scores (gold, score, correct, position; runs "
            f"made before they were added): re-running the same command (`{command}`) on this directory adds them "
            "(it re-scores without asking the model again)."
        )


def run_label(config: Mapping[str, Any]) -> str:
    """The model for an LLM run, else the built-in agent's name."""
    model = config.get("model")
    agent = str(config.get("agent") or "?")
    return str(model) if model and agent == "litellm" else agent


def is_run_dir(path: str | Path) -> bool:
    """True for what looks like a ``rescue-bench evaluate`` directory, finished or not (a rollout directory, a
    dataset or a file is not one); :func:`load_run` then says what is missing."""
    directory = Path(path)
    if not directory.is_dir():
        return False
    if (directory / "predictions.jsonl").is_file():
        return True
    try:
        if (directory / "results.json").is_file():
            return load_results(directory).get("format") == RESULTS_FORMAT
        settings = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("config", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(settings, dict) and "tasks" in settings and "agent" in settings


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """``predictions.jsonl``, one record per instance (the last one wins, as ``benchmarks.runner.RunStore``)."""
    records: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill; the runner asks that instance again
        if isinstance(record, dict) and "instance_id" in record:
            records[str(record["instance_id"])] = record
    return list(records.values())


def load_run(run_dir: str | Path) -> Run:
    """Read a finished six-task run; a one-line ValueError says why a directory is not one."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory (expected a `rescue-bench evaluate` run directory)")
    what = "not a finished six-task `rescue-bench evaluate` run"
    if not (directory / "results.json").is_file():
        hint = "re-run its command to finish it" if (directory / "config.json").is_file() else "no config.json either"
        raise ValueError(f"{directory}: {what}: no results.json ({hint})")
    try:
        results = load_results(directory)
        meta = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{directory}: {what}: no config.json") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{directory}: {what}: unreadable JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(results, dict) or results.get("format") != RESULTS_FORMAT:
        found = results.get("format") if isinstance(results, dict) else type(results).__name__
        raise ValueError(f"{directory}: {what}: results.json has format {found!r}, not {RESULTS_FORMAT!r}")
    missing = [t for t in TASK_NAMES if t not in results.get("tasks", {})]
    if missing:
        raise ValueError(
            f"{directory}: {what}: results.json lacks {', '.join(missing)}; run `rescue-bench evaluate --tasks all` "
            "with the same settings in this directory (answers already there are kept)"
        )
    if not (directory / "predictions.jsonl").is_file():
        raise ValueError(f"{directory}: {what}: no predictions.jsonl")
    return Run(
        directory=directory,
        command=[str(c) for c in meta.get("command") or []],
        data=dict(meta.get("data") or {}),
        results=results,
        records=read_predictions(directory / "predictions.jsonl"),
    )


# ----- numbers behind the figures (pure) ------------------------------------------------------------------------


def interval_cell(results: Mapping[str, Any], task: str, scope: str, key: str, kind: str) -> str:
    """``value [low, high]`` in the unit of ``kind`` (``benchmarks.results.format_value``), or results.py's ``—`` /
    ``not run`` / ``n/a`` when there is no value."""
    value, ci = metric_entry(results, task, scope, key)
    text = None
    if value is not None:
        text = format_value(value, kind)
        if ci:
            text += f" [{format_value(ci[0], kind)}, {format_value(ci[1], kind)}]"
    return table_cell(results, task, scope, key, text)


def record_bin(record: Mapping[str, Any], bins: int = POSITION_BINS) -> int:
    """The relative-position bin of a scored record, exactly (see the module docstring): ``row`` is 1-based,
    ``position = row0 / rows``."""
    row0 = int(record["row"]) - 1
    position = float(record["position"])
    if row0 == 0:
        return 0
    if position <= 0:
        raise ValueError(f"{record.get('instance_id')}: position {position} for row {row0 + 1}")
    rows = round(row0 / position)
    if rows <= row0 or not math.isclose(row0 / rows, position, rel_tol=1e-12):
        raise ValueError(f"{record.get('instance_id')}: position {position} fits no row count for row {row0 + 1}")
    return position_bin(row0, rows, bins)


def position_accuracy(records: Sequence[Mapping[str, Any]], bins: int = POSITION_BINS) -> pd.DataFrame:
    """Fig. 4: accuracy per relative-position bin, per scenario and pooled (``all``), with the binomial standard
    error sqrt(p(1-p)/n) and the band p ± SE clipped to [0, 1]; a bin without instances has NaN accuracy."""
    rows = []
    binned = [(r["scenario"], record_bin(r, bins), bool(r["correct"])) for r in records]
    for scope in (*SCENARIO_SCOPES, "all"):
        for index in range(bins):
            hits = [ok for scenario, b, ok in binned if b == index and scope in ("all", scenario)]
            n, correct = len(hits), sum(hits)
            p = correct / n if n else math.nan
            se = math.sqrt(p * (1 - p) / n) if n else math.nan
            low = max(0.0, p - se) if n else math.nan
            high = min(1.0, p + se) if n else math.nan
            rows.append(
                {
                    "scope": scope,
                    "bin": index,
                    "bin_label": bin_label(index, bins),
                    "n": n,
                    "correct": correct,
                    "accuracy": p,
                    "se": se,
                    "low": low,
                    "high": high,
                }
            )
    return pd.DataFrame(rows)


def label_accuracy(results: Mapping[str, Any], task: str) -> pd.DataFrame:
    """App. E.2: per gold label and scenario, the recall (= the per-label accuracy the paper quotes) and support
    from results.json's LabelReport, with the paper's ten-model average where App. E.2 gives one (RPP only)."""
    rows = []
    for scope in SCENARIO_SCOPES:
        report = _label_report(results, task, scope)
        if report is None:
            continue
        reference = paper.RPP_LABEL_ACCURACY.get(scope, {}) if task == "rpp" else {}
        for label in report["labels"]:
            values = report["per_label"][label]
            rows.append(
                {
                    "task": task,
                    "scope": scope,
                    "label": label,
                    "label_name": label_name(label),
                    "recall": float(values["recall"]),
                    "support": int(values["support"]),
                    "correct": int(round(values["recall"] * values["support"])),
                    "paper_average": reference[label] / 100 if label in reference else math.nan,
                }
            )
    return pd.DataFrame(
        rows, columns=["task", "scope", "label", "label_name", "recall", "support", "correct", "paper_average"]
    )


def confusion_frame(results: Mapping[str, Any], task: str, scope: str) -> pd.DataFrame:
    """The gold x top-1 matrix of a LabelReport, long: one row per cell with its count and row share."""
    report = _label_report(results, task, scope)
    rows = []
    if report is not None:
        for gold, line in zip(report["labels"], report["confusion"]):
            total = sum(line)
            for predicted, count in zip(report["columns"], line):
                rows.append(
                    {
                        "task": task,
                        "scope": scope,
                        "gold": gold,
                        "gold_name": label_name(gold),
                        "predicted": predicted,
                        "predicted_name": _column_name(predicted),
                        "count": int(count),
                        "row_share": count / total if total else 0.0,
                    }
                )
    return pd.DataFrame(
        rows, columns=["task", "scope", "gold", "gold_name", "predicted", "predicted_name", "count", "row_share"]
    )


def target_kind_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """STP's gold target kind (one person / the group label) x the top-1's kind (or failed), per scope."""
    rows = []
    for scope in SCOPES:
        details = results["tasks"]["stp"]["scopes"].get(scope, {}).get("details", {})
        confusion = details.get("target_kind_confusion") or {}
        # results.json sorts its keys; show one person, then the group label, then no answer
        for gold in sorted(confusion, key=_kind_order):
            line = confusion[gold]
            total = sum(line.values())
            for predicted in sorted(line, key=_kind_order):
                count = line[predicted]
                rows.append(
                    {
                        "task": "stp",
                        "scope": scope,
                        "gold": gold,
                        "gold_name": KIND_NAMES.get(gold, gold),
                        "predicted": predicted,
                        "predicted_name": KIND_NAMES.get(predicted, predicted),
                        "count": int(count),
                        "row_share": count / total if total else 0.0,
                    }
                )
    return pd.DataFrame(
        rows, columns=["task", "scope", "gold", "gold_name", "predicted", "predicted_name", "count", "row_share"]
    )


def top_confusions(results: Mapping[str, Any], limit: int = 8) -> pd.DataFrame:
    """The most frequent wrong top-1 answers (gold -> predicted, off the diagonal, failures included) of RPP and
    SSP per scenario and of STP's target kind, most frequent first (ties: task, scenario, gold order)."""
    frames = [confusion_frame(results, t, s) for t in LABEL_TASKS for s in SCENARIO_SCOPES]
    kinds = target_kind_frame(results)
    frames.append(kinds[kinds["scope"].isin(SCENARIO_SCOPES)])
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=["task", "scope", "gold", "predicted", "count", "row_share"])
    cells = pd.concat(frames, ignore_index=True)
    wrong = cells[(cells["gold"] != cells["predicted"]) & (cells["count"] > 0)]
    wrong = wrong.assign(order=wrong["task"].map(TASK_NAMES.index))
    wrong = wrong.sort_values(["order", "count"], ascending=[True, False], kind="stable").drop(columns="order")
    return wrong.groupby("task", sort=False).head(limit).reset_index(drop=True)


def paper_comparison(results: Mapping[str, Any], scope: str = "all") -> pd.DataFrame:
    """Table 5 next to the run: per headline column, the run's value and interval, the paper's best model and
    value and the ten models' average (``paper.best_and_average``), all in results.json's units."""
    table = paper.table_11()
    reference = paper.best_and_average(scope)
    models = [m for m in table if m != "Average"]
    different = paper.incomparable(results.get("config", {}))
    rows = []
    for task, key, header, kind in TABLE_COLUMNS:
        value, ci = metric_entry(results, task, scope, key)
        best, average = reference[(task, key)]
        best_model = next(m for m in models if table[m][scope][(task, key)] == best)
        rows.append(
            {
                "task": task,
                "metric": key,
                "header": header,
                "kind": kind,
                "value": value,
                "ci95_low": ci[0] if ci else None,
                "ci95_high": ci[1] if ci else None,
                "paper_best": best,
                "paper_best_model": best_model,
                "paper_average": average,
                # scored otherwise than the paper (another BERTScore model, another judge): drawn hatched
                "comparable": (task, key) not in different,
                "not_comparable_because": different.get((task, key), ""),
            }
        )
    return pd.DataFrame(rows)


def _kind_order(kind: str) -> int:
    order = list(KIND_NAMES)
    return order.index(kind) if kind in order else len(order)


def _label_report(results: Mapping[str, Any], task: str, scope: str) -> dict[str, Any] | None:
    scopes = results["tasks"].get(task, {}).get("scopes", {})
    return (scopes.get(scope, {}).get("details") or {}).get("labels")


def _column_name(column: str) -> str:
    return DISPLAY_COLUMNS.get(column, label_name(column))


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


# ----- figures (each returns a Figure; the numbers come from the frames above) ----------------------------------


def key(ax: Any, entries: Sequence[tuple[str, str]], fontsize: float = 9) -> None:
    """A legend of coloured squares right of ``ax`` (outside it, so that it hides no data)."""
    handles = [Patch(color=colour, label=text) for text, colour in entries]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=fontsize)


def position_figure(frame: pd.DataFrame) -> Figure:
    """Fig. 4: accuracy lines with ±SE bands per scenario and pooled, the instances per bin below."""
    fig = new_figure(9.0, 5.6)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.3])
    x = np.arange(int(frame["bin"].max()) + 1)
    names = {"couple": "Couple", "family": "Family", "all": "Both (pooled)"}
    for scope in (*SCENARIO_SCOPES, "all"):
        part = frame[frame["scope"] == scope].sort_values("bin")
        if part["n"].sum() == 0:
            continue
        style = {"linewidth": 2.4, "linestyle": "-"} if scope == "all" else {"linewidth": 1.5, "linestyle": "--"}
        top.plot(x, 100 * part["accuracy"], marker="o", color=COLOURS[scope], label=names[scope], **style)
        top.fill_between(x, 100 * part["low"], 100 * part["high"], color=COLOURS[scope], alpha=0.15, linewidth=0)
    top.set_ylim(0, 100)
    top.set_ylabel("RPP accuracy (%)")
    top.set_title("RPP accuracy over the dialogue (bands: ± 1 standard error)")
    top.grid(axis="y", alpha=0.3)
    key(top, [(names[s], COLOURS[s]) for s in (*SCENARIO_SCOPES, "all") if (frame[frame["scope"] == s]["n"]).sum()])
    bottom_value = np.zeros(len(x))
    for scope in SCENARIO_SCOPES:
        counts = frame[frame["scope"] == scope].sort_values("bin")["n"].to_numpy()
        bottom.bar(x, counts, bottom=bottom_value, color=COLOURS[scope], alpha=0.7, label=SCOPE_TITLES[scope])
        bottom_value = bottom_value + counts
    for i, total in enumerate(bottom_value):
        bottom.text(i, total, f"{int(total)}", ha="center", va="bottom", fontsize=8)
    # ticks only up to the tallest bar, well below the panel's top, so none meets the top panel's "0"
    tallest = max(1.0, float(bottom_value.max()))
    bottom.set_ylim(0, tallest * 1.4)
    bottom.set_yticks([t for t in MaxNLocator(nbins=3, integer=True).tick_values(0, tallest) if t <= tallest])
    bottom.set_ylabel("instances")
    key(bottom, [(SCOPE_TITLES[s], COLOURS[s]) for s in SCENARIO_SCOPES])
    labels = frame[frame["scope"] == "all"].sort_values("bin")["bin_label"].tolist()
    bottom.set_xticks(x, labels, fontsize=8)
    bottom.set_xlabel("relative position of the target row in its conversation")
    return fig


def label_accuracy_figure(frame: pd.DataFrame, task: str) -> Figure:
    """Per-label accuracy (recall of each gold label), one panel per scenario, the paper's average marked."""
    scopes = [s for s in SCENARIO_SCOPES if (frame["scope"] == s).any()]
    counts = [int((frame["scope"] == s).sum()) for s in scopes]
    fig = new_figure(8.0, 1.3 + 0.32 * sum(counts) + 0.6 * len(scopes))
    axes = fig.subplots(len(scopes), 1, height_ratios=counts, squeeze=False)[:, 0]
    marked = False
    for ax, scope in zip(axes, scopes):
        part = frame[frame["scope"] == scope].reset_index(drop=True)
        y = np.arange(len(part))
        ax.barh(y, 100 * part["recall"], color=COLOURS[scope], alpha=0.8, height=0.7)
        for i, row in part.iterrows():
            text = f"{100 * row['recall']:.0f} %" if row["support"] else "no instance"
            # a column of numbers right of 100 %, where no bar or marker can hide one
            ax.text(103, i, text, va="center", fontsize=8, color=COLOURS[scope])
        with_paper = part[part["paper_average"].notna()]
        if not with_paper.empty:
            ax.scatter(100 * with_paper["paper_average"], with_paper.index, marker="D", color="black", s=28, zorder=3)
            marked = True
        names = [f"{row['label_name']} (n={row['support']})" for _, row in part.iterrows()]
        ax.set_yticks(y, names, fontsize=9)
        ax.invert_yaxis()
        ax.set_xlim(0, 118)
        ax.set_xticks(range(0, 101, 20))
        ax.set_title(f"{SCOPE_TITLES[scope]}", fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("accuracy on instances with this gold label (= recall, %)")
    what = "relation pattern" if task == "rpp" else "support strategy"
    fig.suptitle(f"{task.upper()}: accuracy per gold {what}")
    if marked:
        axes[0].set_title("◆ paper: mean of its 10 models (App. E.2)", fontsize=9, loc="right")
    return fig


def confusion_figure(frame: pd.DataFrame, title: str) -> Figure:
    """Gold rows x predicted columns; colour = row share, counts written in the non-zero cells."""
    golds = list(dict.fromkeys(frame["gold"]))
    columns = list(dict.fromkeys(frame["predicted"]))
    counts = frame.pivot(index="gold", columns="predicted", values="count").loc[golds, columns].to_numpy()
    shares = frame.pivot(index="gold", columns="predicted", values="row_share").loc[golds, columns].to_numpy()
    gold_names = dict(zip(frame["gold"], frame["gold_name"]))
    column_names = dict(zip(frame["predicted"], frame["predicted_name"]))
    width = 3.2 + 0.55 * len(columns)
    height = 2.4 + 0.42 * len(golds)
    fig = new_figure(width, height)
    ax = fig.subplots()
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    for i in range(len(golds)):
        for j in range(len(columns)):
            if counts[i, j]:
                colour = "white" if shares[i, j] > 0.6 else "black"
                ax.text(j, i, str(int(counts[i, j])), ha="center", va="center", fontsize=8, color=colour)
    supports = counts.sum(axis=1)
    ax.set_yticks(range(len(golds)), [f"{gold_names[g]} (n={int(n)})" for g, n in zip(golds, supports)], fontsize=8)
    # Vertical: the overlap check compares axis-aligned boxes, which 45-degree labels of this length always share.
    ax.set_xticks(range(len(columns)), [column_names[c] for c in columns], fontsize=8, rotation=90)
    ax.set_xlabel("top-1 prediction")
    ax.set_ylabel("gold")
    ax.set_title(title, fontsize=10)
    colour_bar = fig.colorbar(image, ax=ax, shrink=0.8)
    colour_bar.set_label("share of the gold row", fontsize=8)
    return fig


def target_kind_figure(frame: pd.DataFrame) -> Figure:
    """STP: gold target kind x top-1 kind, one panel per scope."""
    scopes = [s for s in SCOPES if (frame["scope"] == s).any()]
    fig = new_figure(3.0 * len(scopes) + 1.6, 3.0)
    axes = fig.subplots(1, len(scopes), squeeze=False)[0]
    image = None
    for k, (ax, scope) in enumerate(zip(axes, scopes)):
        part = frame[frame["scope"] == scope]
        golds = list(dict.fromkeys(part["gold"]))
        columns = list(dict.fromkeys(part["predicted"]))
        counts = part.pivot(index="gold", columns="predicted", values="count").loc[golds, columns].to_numpy()
        shares = part.pivot(index="gold", columns="predicted", values="row_share").loc[golds, columns].to_numpy()
        image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        for i in range(len(golds)):
            for j in range(len(columns)):
                colour = "white" if shares[i, j] > 0.6 else "black"
                ax.text(j, i, str(int(counts[i, j])), ha="center", va="center", fontsize=9, color=colour)
        ax.set_xticks(range(len(columns)), [KIND_NAMES.get(c, c) for c in columns], fontsize=8)
        ax.set_yticks(range(len(golds)), [KIND_NAMES.get(g, g) for g in golds] if k == 0 else [], fontsize=8)
        ax.set_title(SCOPE_TITLES[scope], fontsize=10)
        ax.set_xlabel("top-1 kind", fontsize=8)
    axes[0].set_ylabel("gold kind")
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8).set_label("share of the gold row", fontsize=8)
    fig.suptitle("STP: whom the top-1 names, by kind of gold target")
    return fig


_UNIT_PANELS = (
    ("percent", "ITP–SSP (%)", 100.0, (0.0, 100.0)),
    ("score", "judge score (1–5)", 1.0, (0.0, 5.0)),
    ("bertscore", "BERTScore F1", 1.0, (0.0, 1.0)),
)
_BARS = (
    ("value", "this run (95 % CI)", "#1f77b4"),
    ("paper_best", "paper: best of 10 LLMs", PAPER_COLOUR),
    ("paper_average", "paper: their average", "#98df8a"),
)
# The run's bar of a column scored otherwise than the paper's: grey and hatched, so that no one reads it as a gap.
_INCOMPARABLE = {"facecolor": "#d9d9d9", "edgecolor": "#1f77b4", "hatch": "///", "linewidth": 0.8}
_INCOMPARABLE_KEY = "this run, not comparable (below)"


def _is_comparable(row: pd.Series) -> bool:
    """A frame row's ``comparable`` (frames from before that column existed: comparable)."""
    flag = row.get("comparable", True)
    return True if flag is None or pd.isna(flag) else bool(flag)


def paper_figure(frame: pd.DataFrame, label: str, demo: bool = False) -> Figure:
    """Small multiples by unit (the columns' units differ): per Table 5 column, this run with its interval, the
    paper's best model and the ten models' average, Both scope. The run's bar of a column that was scored
    otherwise than the paper's (``comparable`` False: another BERTScore model, another judge) is grey and hatched,
    and a note under the panels says why; ``demo`` says in the title that the run is on the demo data."""
    sizes = [int((frame["kind"] == kind).sum()) for kind, *_ in _UNIT_PANELS]
    fig = new_figure(11.0, 4.4)
    axes = fig.subplots(1, len(_UNIT_PANELS), width_ratios=[max(n, 1) + 0.6 for n in sizes])
    width = 0.26
    hatched = False
    for ax, (kind, title, scale, limits) in zip(axes, _UNIT_PANELS):
        part = frame[frame["kind"] == kind].reset_index(drop=True)
        for k, (column, _, colour) in enumerate(_BARS):
            x = np.arange(len(part)) + (k - 1) * width
            for i, row in part.iterrows():
                value = row[column]
                if value is None or pd.isna(value):
                    ax.text(x[i], limits[1] * 0.03, "not run", rotation=90, ha="center", va="bottom", fontsize=7)
                    continue
                if column == "value" and not _is_comparable(row):
                    ax.bar(x[i], scale * value, width=width, **_INCOMPARABLE)
                    hatched = True
                else:
                    ax.bar(x[i], scale * value, width=width, color=colour)
                if column == "value" and row["ci95_low"] is not None and not pd.isna(row["ci95_low"]):
                    low, high = scale * row["ci95_low"], scale * row["ci95_high"]
                    ax.errorbar(
                        x[i],
                        scale * value,
                        yerr=[[scale * value - low], [high - scale * value]],
                        color="black",
                        capsize=2.5,
                        linewidth=1,
                    )
        names = [
            row["header"].replace(" ", "\n", 1) + (" †" if row["task"] == "itp" else "") for _, row in part.iterrows()
        ]
        ax.set_xticks(np.arange(len(part)), names, fontsize=8)
        ax.set_ylim(*limits)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    entries = [Patch(color=colour, label=text) for _, text, colour in _BARS]
    if hatched:
        entries.insert(1, Patch(label=_INCOMPARABLE_KEY, **_INCOMPARABLE))
        reasons = dict.fromkeys(r for r in frame.get("not_comparable_because", pd.Series(dtype=str)) if r)
        fig.supxlabel("Hatched: scored otherwise than the paper, not comparable — " + "; ".join(reasons), fontsize=8)
    axes[-1].legend(handles=entries, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    data = " on the demo data" if demo else ""
    fig.suptitle(f"{label}{data} (Both) next to the paper's best and average LLM (Table 5); † see the ITP note")
    return fig


# ----- the report -------------------------------------------------------------------------------------------------


def run_report(run_dir: Path, output: Path) -> Report:
    """Build the report of the run in ``run_dir``; figures and their CSVs are written to ``output/figures`` now,
    ``report.md`` / ``report.html`` by the returned report's ``write()``. ValueError (one line) for a directory
    that is not a finished six-task run."""
    run = load_run(run_dir)
    report = Report(f"RESCUE-Bench run: {run.label}", Path(output))
    _overview(report, run)
    _table_section(report, run)
    _position_section(report, run)
    _label_section(report, run)
    _confusion_section(report, run)
    _paper_section(report, run)
    _error_section(report, run)
    return report


def _overview(report: Report, run: Run) -> None:
    config = run.config
    data = run.data
    sha = str(data.get("sha256") or "?")
    report.paragraph(
        f"Run directory `{run.directory}`: agent `{config.get('agent')}`"
        + (f", model `{config['model']}`" if config.get("model") else "")
        + f", mode `{config.get('mode')}`, RPP protocol `{config.get('protocol')}`, judge "
        f"`{config.get('judge_model') or 'not run'}`, BERTScore "
        f"`{config.get('bertscore_model') if config.get('bertscore', True) else 'not run'}`, seed {config.get('seed')},"
        f" {config.get('bootstrap')} bootstrap resamples. Data `{data.get('source', config.get('data'))}` "
        f"({data.get('samples', '?')} samples, sha256 `{sha[:12]}`)."
    )
    if run.command:
        report.paragraph(f"Command: `{shlex.join(run.command)}`")
    if _on_demo(run):
        report.paragraph(
            "**Demo data**: the six synthetic conversations shipped with the package; the numbers show what the "
            "report looks like, they say nothing next to the paper's."
        )
    if not run.scored:
        report.paragraph(run.rerun_note() + " Skipped here: Fig. 4 and the example instances of the error analysis.")


def _on_demo(run: Run) -> bool:
    """Whether the run was made on the embedded demo data (``--data demo`` or the packaged file)."""
    return str(run.config.get("data")) == "demo" or str(run.data.get("source", "")).endswith("rescue_demo.jsonl")


def _table_section(report: Report, run: Run) -> None:
    results = run.results
    report.heading("Table 5/11 layout, with 95 % intervals")
    report.paragraph(
        "Classification metrics in %, judge scores on 1–5, BERTScore F1 raw; each cell is the value and its "
        "95 % percentile-bootstrap interval over instances. Both = pooled over instances. — = no instance in that "
        "scope; not run = the metric was not computed (no judge, or `--no-bertscore`); n/a = run, but no value."
    )
    header = ["Scenario", *(c[2] for c in TABLE_COLUMNS)]
    rows = [
        [SCOPE_TITLES[s], *(interval_cell(results, t, s, k, kind) for t, k, _, kind in TABLE_COLUMNS)] for s in SCOPES
    ]
    report.table(header, rows)
    report.heading("Instances and failures per task", level=3)
    rows = []
    for name in TASK_NAMES:
        task = results["tasks"][name]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(task.get("failure_kinds", {}).items())) or "—"
        judge = task.get("judge_failures", 0)
        judge_kinds = ", ".join(f"{k} {v}" for k, v in sorted(task.get("judge_failure_kinds", {}).items()))
        scopes = task["scopes"]
        rows.append(
            [
                name.upper(),
                task["instances"],
                scopes["couple"]["instances"],
                scopes["family"]["instances"],
                task["failures"],
                kinds,
                f"{judge}" + (f" ({judge_kinds})" if judge_kinds else ""),
                task.get("normalised_labels", 0),
            ]
        )
    report.table(
        ["Task", "Instances", "Couple", "Family", "Failed answers", "By kind", "Judge failures", "Normalised labels"],
        rows,
    )
    report.paragraph("A failed answer is scored wrong and stays in every denominator; a judge failure is not scored.")


def _position_section(report: Report, run: Run) -> None:
    report.heading("RPP accuracy over the dialogue (Fig. 4)")
    records = run.task_records("rpp")
    if not run.scored:
        report.paragraph("Skipped: it needs the per-instance `correct` and `position` (see the note at the top).")
        return
    if not records:
        report.paragraph("No RPP instance in this run.")
        return
    frame = position_accuracy(records)
    pooled = frame[frame["scope"] == "all"]
    report.figure(
        position_figure(frame),
        "rpp_position",
        f"RPP accuracy of {run.label} per tenth of the conversation (position of the target row: row / rows), per "
        f"scenario and pooled, with ± 1 standard error sqrt(p(1-p)/n); bars: instances per bin "
        f"({int(pooled['n'].sum())} in all). The paper's Figure 4 pools the predictions of ten models; this is one "
        "run. Numbers: figures/rpp_position.csv.",
        data=frame,
    )
    shown = pooled[pooled["n"] > 0]
    if not shown.empty:
        best, worst = shown.loc[shown["accuracy"].idxmax()], shown.loc[shown["accuracy"].idxmin()]
        report.paragraph(
            f"Pooled, accuracy is highest at {best['bin_label']} ({_percent(best['accuracy'])}, n = {best['n']}) and "
            f"lowest at {worst['bin_label']} ({_percent(worst['accuracy'])}, n = {worst['n']}); with {shown['n'].min()}"
            f" to {shown['n'].max()} instances per bin, differences within a standard error or two are noise."
        )


def _label_section(report: Report, run: Run) -> None:
    report.heading("Per-label accuracy (App. E.2)")
    report.paragraph(
        "The accuracy on the instances of each gold label is that label's recall (results.json's per-label "
        "report); n = the label's instances in this run. App. E.2 quotes per-label RPP accuracy averaged over its "
        "ten models (black diamonds where it gives one); it gives none for SSP."
    )
    for task in LABEL_TASKS:
        frame = label_accuracy(run.results, task)
        if frame.empty:
            report.paragraph(f"{task.upper()}: no instance.")
            continue
        shown = frame[frame["support"] > 0].reset_index(drop=True)
        absent = frame[frame["support"] == 0]
        if shown.empty:
            report.paragraph(f"{task.upper()}: no instance.")
            continue
        report.figure(
            label_accuracy_figure(shown, task),
            f"{task}_label_accuracy",
            f"{task.upper()} accuracy of {run.label} per gold label and scenario"
            + (" (black diamonds: the paper's ten-model mean, App. E.2)" if task == "rpp" else "")
            + f". Numbers: figures/{task}_label_accuracy.csv.",
            data=frame,
        )
        if not absent.empty:
            names = ", ".join(f"{r.label_name} ({r.scope})" for r in absent.itertuples())
            report.paragraph(f"{task.upper()} labels without an instance in this run (not drawn): {names}.")


def _confusion_section(report: Report, run: Run) -> None:
    report.heading("Confusion matrices")
    report.paragraph(
        "Rows: gold label (its instances in brackets); columns: the top-1 answer, then `out of set` (a label "
        "outside the scenario's set) and `failed` (no valid answer). Colour: share of the row; numbers: counts "
        "(blank = 0)."
    )
    for task in LABEL_TASKS:
        for scope in SCENARIO_SCOPES:
            frame = confusion_frame(run.results, task, scope)
            if frame.empty:
                continue
            name = f"{task}_confusion_{scope}"
            what = "relation pattern" if task == "rpp" else "support strategy"
            report.figure(
                confusion_figure(frame, f"{task.upper()} {SCOPE_TITLES[scope].lower()}: gold {what} x top-1"),
                name,
                f"{task.upper()}, {SCOPE_TITLES[scope].lower()} sessions, {run.label}: gold x top-1 {what}, "
                f"row-normalised. Numbers: figures/{name}.csv.",
                data=frame,
            )
    kinds = target_kind_frame(run.results)
    if not kinds.empty:
        wrong = run.results["tasks"]["stp"]["scopes"]["all"].get("details", {}).get("wrong_individual")
        report.figure(
            target_kind_figure(kinds),
            "stp_target_kind",
            f"STP, {run.label}: the gold target's kind (one person, or the group label Couple/Family) x the kind "
            "of the top-1 answer, per scope, row-normalised. Numbers: figures/stp_target_kind.csv.",
            data=kinds,
        )
        if wrong is not None:
            report.paragraph(f"STP: {wrong} answers (pooled) named one person where the gold is another person.")


def _paper_section(report: Report, run: Run) -> None:
    report.heading("Next to the paper (Table 5)")
    frame = paper_comparison(run.results)
    notes = [paper.ITP_NOTE, *_scoring_notes(run.config)]
    hatched = not frame[~frame["comparable"] & frame["value"].notna()].empty
    report.figure(
        paper_figure(frame, run.label, demo=_on_demo(run)),
        "paper_comparison",
        f"{run.label}, Both scope, one panel per unit, one group of bars per Table 5 column: this run with its 95 % "
        "interval, the best of the paper's ten LLMs (per column) and their average. † "
        + paper.ITP_NOTE
        + (
            " Grey hatched bars: columns this run scored otherwise than the paper (the note under the table says "
            "how); their height is not comparable with the paper's bars."
            if hatched
            else ""
        )
        + " Numbers: figures/paper_comparison.csv.",
        data=frame,
    )
    rows = []
    for row in frame.itertuples():
        kind = row.kind
        run_text = interval_cell(run.results, row.task, "all", row.metric, kind)
        missing = row.value is None or pd.isna(row.value)
        difference = "" if missing else format_value(row.value - row.paper_average, kind)
        if not missing and not row.comparable:
            difference = "not comparable ‡"
        marker = " †" if row.task == "itp" else ""
        rows.append(
            [
                row.header + marker,
                run_text,
                f"{format_value(row.paper_best, kind)} ({row.paper_best_model})",
                format_value(row.paper_average, kind),
                difference,
            ]
        )
    report.table(["Column", "This run [95 % CI]", "Paper best (model)", "Paper average", "Run − average"], rows)
    report.paragraph(" ".join(f"{'† ' if i == 0 else ''}{n}" for i, n in enumerate(notes)))


def _scoring_notes(config: Mapping[str, Any]) -> list[str]:
    """One sentence per way this run's BERTScore or judge differs from the paper's (the ‡ of the table)."""
    different = paper.incomparable(config)
    notes = []
    if any(column in different for column in paper.BERTSCORE_COLUMNS):
        notes.append(
            f"‡ BERTScore here uses `{config.get('bertscore_model')}`, not the paper's DistilBERT "
            f"(`{paper.PAPER_BERTSCORE}`, layer 5): its values are on another scale and not comparable with the "
            "paper's BERTScore columns (hatched in the figure)."
        )
    if ("er", "s_er") in different:  # the judge is not the paper's (both judge columns)
        notes.append(
            f"‡ The judge here is `{config.get('judge_model')}`, not the paper's {paper.PAPER_JUDGE}, and the judge "
            "prompt is ours: its scores are not comparable with the paper's judge columns (hatched in the figure)."
        )
    if config.get("judge_model") and config.get("vp_rubric") == "authors":
        notes.append("‡ VP Judge uses the authors' 0-6 rubric here, the paper's column a 1-5 scale.")
    return notes


def _error_section(report: Report, run: Run) -> None:
    report.heading("Error analysis")
    confusions = top_confusions(run.results)
    examples = _examples(run) if run.scored else {}
    if confusions.empty:
        report.paragraph("No wrong top-1 answer in RPP, SSP or STP.")
    else:
        report.paragraph(
            "The most frequent wrong top-1 answers, per task (RPP and SSP by label, STP by kind of target), with "
            "their share of the gold label's instances" + (" and up to three instance ids." if examples else ".")
        )
        rows = []
        for row in confusions.itertuples():
            ids = examples.get((row.task, row.scope, row.gold, row.predicted), [])
            rows.append(
                [
                    row.task.upper(),
                    SCOPE_TITLES[row.scope],
                    row.gold_name,
                    row.predicted_name,
                    row.count,
                    _percent(row.row_share),
                    ", ".join(f"`{i}`" for i in ids[:3]),
                ]
            )
        report.table(["Task", "Scenario", "Gold", "Predicted", "Count", "Share of gold", "Examples"], rows)
    failed = {t: run.results["tasks"][t]["failures"] for t in TASK_NAMES if run.results["tasks"][t]["failures"]}
    if failed:
        report.paragraph(
            "Failed answers (scored wrong): " + ", ".join(f"{t.upper()} {n}" for t, n in failed.items()) + "."
        )
    path = run.directory / "predictions.jsonl"
    report.paragraph(
        f"Every instance is one line of `{path}`: the prompt hash, the raw answer, the parsed prediction, the "
        "failure reason"
        + (", the gold, the per-instance score, `correct` and `position`" if run.scored else "")
        + ". With pandas:"
    )
    report.code(
        "import pandas as pd\n"
        f'df = pd.read_json("{path}", lines=True)\n'
        "wrong = df[(df.task == 'rpp') & (df.correct == 0)]  # RPP misses (correct: 1.0 / 0.0, NaN for ER and VP)\n"
        'wrong[["instance_id", "row", "position", "gold", "prediction", "raw"]]'
    )


def _examples(run: Run) -> dict[tuple[str, str, str, str], list[str]]:
    """Instance ids per (task, scenario, gold, predicted column) of the wrong top-1 answers (scored records)."""
    out: dict[tuple[str, str, str, str], list[str]] = {}
    for task in (*LABEL_TASKS, "stp"):
        for record in run.task_records(task):
            score = record.get("score") or {}
            gold, top1, scenario = score.get("gold"), score.get("top1"), record.get("scenario")
            if task == "stp":
                key = (task, scenario, _kind(gold), _kind(top1))
            else:
                report = _label_report(run.results, task, scenario) or {"labels": []}
                column = FAILED_COLUMN if top1 is None else top1 if top1 in report["labels"] else OTHER_COLUMN
                key = (task, scenario, gold, column)
            if key[2] != key[3]:
                out.setdefault(key, []).append(str(record["instance_id"]))
    return out


def _kind(label: str | None) -> str:
    """STP's kind of a target (``benchmarks.stp``): one person, the group label, or no answer."""
    if label is None:
        return "failed"
    return "group" if label in GROUP_SPEAKERS else "individual"
