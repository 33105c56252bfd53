"""``rescue-bench compare``: the trained solvers and the built-in agents next to the paper's LLMs (Tables 5 and 11).

Runs (as ``rescue-bench evaluate`` run directories under ``OUTPUT``, so ``rescue-bench report`` reads each):
every trained solver cross-fitted by family with seeds 0-4 (``--seeds``; the seed deals the folds), and the
built-in baselines once. Writes ``comparison.md`` and ``comparison.csv``: per solver, scope (Couple, Family,
Both) and metric (ITP P/R/F1, RPP accuracy, STP R@1/MRR, SSP R@1/MRR, ER S_int / intensity error / BERTScore),
the mean over seeds with its min-max, the 95 % bootstrap interval of the first seed's run, and the paper's best
and average LLM beside them (not for ER: see ``NOT_IN_PAPER``). With
``leaky=True`` it also runs the two wrong protocols of ``benchmarks.solvers.crossfit`` (families grouped by
number; instances dealt at random) once, to show what they would report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.reports import paper
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from benchmarks.solvers.models import TASKS
from rescue_env.data import Dataset

__all__ = ["COLUMNS", "compare_solvers"]

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("itp", "precision", "ITP P"),
    ("itp", "recall", "ITP R"),
    ("itp", "f1", "ITP F1"),
    ("rpp", "accuracy", "RPP Acc"),
    ("stp", "recall@1", "STP R@1"),
    ("stp", "mrr", "STP MRR"),
    ("ssp", "recall@1", "SSP R@1"),
    ("ssp", "mrr", "SSP MRR"),
    ("er", "s_int", "ER S_int"),
    ("er", "intensity_mae", "ER MAE"),
    ("er", "bertscore", "ER BERT"),
)
RAW = frozenset({"s_int", "intensity_mae", "bertscore"})
"""Metrics shown as they are (S_int 1-5, intensity error 0-10, BERTScore F1 0-1); the others are shares, in %."""
NOT_IN_PAPER = frozenset({("er", "s_int"), ("er", "intensity_mae"), ("er", "bertscore")})
"""Columns without a paper figure to put beside them: Table 5 gives no S_int or MAE, and its ER BERTScore is on
another encoder than ours (MiniLM), so the numbers are not comparable."""
SCOPES = {"couple": "Couple", "family": "Family", "all": "Both"}


def _run(dataset: Dataset, data: str, output: Path, agent: str, seed: int, bootstrap: int, **extra: Any) -> dict:
    # BERTScore for ER only (the tasks hold no other generation task): the trained solvers' phrases are scored.
    config = EvalConfig(
        data=data, tasks=list(TASKS), agent=agent, bertscore=True, bootstrap=bootstrap, seed=seed, **extra
    )
    return Evaluation(config, output, dataset=dataset, options=RunOptions(progress=False, command=["compare"])).run()


def _rows(name: str, runs: Sequence[dict], seconds: float) -> list[dict[str, Any]]:
    rows = []
    for scope in SCOPES:
        for task, metric, header in COLUMNS:
            values = [r["tasks"][task]["scopes"][scope]["metrics"][metric]["value"] for r in runs]
            interval = runs[0]["tasks"][task]["scopes"][scope]["metrics"][metric]["ci95"] or (None, None)
            known = [v for v in values if v is not None]
            rows.append(
                {
                    "solver": name,
                    "scope": SCOPES[scope],
                    "task": task,
                    "metric": metric,
                    "column": header,
                    "mean": sum(known) / len(known) if known else None,
                    "min": min(known) if known else None,
                    "max": max(known) if known else None,
                    "ci95_low": interval[0],
                    "ci95_high": interval[1],
                    "seeds": len(runs),
                    "seconds": round(seconds, 1),
                }
            )
    return rows


def _paper_rows() -> list[dict[str, Any]]:
    table = paper.table_11()
    models = [m for m in table if m != "Average"]
    rows = []
    for scope in SCOPES:
        for task, metric, header in COLUMNS:
            if (task, metric) in NOT_IN_PAPER:
                continue
            best = max(table[m][scope][(task, metric)] for m in models)
            for name, value in (
                ("paper: best LLM", best),
                ("paper: LLM average", table["Average"][scope][(task, metric)]),
            ):
                rows.append(
                    {"solver": name, "scope": SCOPES[scope], "task": task, "metric": metric, "column": header,
                     "mean": value, "min": None, "max": None, "ci95_low": None, "ci95_high": None, "seeds": None,
                     "seconds": None}
                )  # fmt: skip
    return rows


def compare_solvers(
    dataset: Dataset,
    data: str,
    output: Path,
    *,
    solvers: Sequence[str] = ("linear", "minilm"),
    baselines: Sequence[str] = ("majority", "heuristic"),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    folds: int = 5,
    bootstrap: int = 1000,
    leaky: bool = False,
    log: Any = print,
) -> pd.DataFrame:
    """Run everything (see the module docstring) and write ``comparison.csv`` / ``comparison.md``; the frame."""
    output = Path(output)
    rows: list[dict[str, Any]] = []
    for name in baselines:
        started = time.perf_counter()
        result = _run(dataset, data, output / name, name, seeds[0], bootstrap)
        rows += _rows(name, [result], time.perf_counter() - started)
        log(f"{name}: done in {time.perf_counter() - started:.0f} s")
    for solver in solvers:
        started = time.perf_counter()
        runs = []
        for seed in seeds:
            runs.append(
                _run(dataset, data, output / f"trained-{solver}" / f"seed-{seed}", f"trained:{solver}", seed,
                     bootstrap, crossfit_folds=folds)
            )  # fmt: skip
            log(f"trained:{solver} seed {seed}: done ({time.perf_counter() - started:.0f} s so far)")
        rows += _rows(f"trained:{solver}", runs, time.perf_counter() - started)
        if leaky:
            for grouping, label in (("number", "families by number"), ("instance", "random by instance")):
                started = time.perf_counter()
                result = _run(
                    dataset, data, output / f"trained-{solver}-leaky-{grouping}", f"trained:{solver}", seeds[0],
                    bootstrap, crossfit_folds=folds, crossfit_grouping=grouping,
                )  # fmt: skip
                rows += _rows(f"trained:{solver} (LEAKY: {label})", [result], time.perf_counter() - started)
                log(f"trained:{solver}, leaky protocol {grouping}: done")
    frame = pd.DataFrame(rows + _paper_rows())
    output.mkdir(parents=True, exist_ok=True)
    frame.to_csv(output / "comparison.csv", index=False)
    (output / "comparison.md").write_text(comparison_markdown(frame, seeds, folds), encoding="utf-8")
    return frame


def _cell(row: pd.Series) -> str:
    if row["mean"] is None or pd.isna(row["mean"]):
        return "—"
    if row["metric"] in RAW:
        digits = 4 if row["metric"] == "bertscore" else 2
        text = f"{row['mean']:.{digits}f}"
        if row["seeds"] and row["seeds"] > 1:
            text += f" ({row['min']:.{digits}f}–{row['max']:.{digits}f})"
        return text
    text = f"{100 * row['mean']:.2f}"
    if row["seeds"] and row["seeds"] > 1:
        text += f" ({100 * row['min']:.1f}–{100 * row['max']:.1f})"
    return text


def comparison_markdown(frame: pd.DataFrame, seeds: Sequence[int], folds: int) -> str:
    parts = [
        "# Trained solvers and built-in agents next to the paper's LLMs",
        "",
        f"Trained solvers: grouped {folds}-fold cross-fitting by family (every instance predicted by a model that "
        f"never saw its couple or family), mean over seeds {', '.join(map(str, seeds))} with the min-max in "
        "brackets; 95 % bootstrap intervals of the first seed in comparison.csv. Values in %, except ER's: S_int "
        "(1-5, max(1, 5 - |error|)), the intensity's mean absolute error (0-10) and BERTScore F1 on MiniLM (no paper "
        "figure beside them: the paper's ER BERTScore is on another encoder). The paper's rows are "
        "its Table 11 (Both = Table 5): its best model per column and the ten models' average. ITP (†): the "
        "paper's ITP prompts contained the answer, so its ITP figures are not a leak-free reference.",
    ]
    for scope in SCOPES.values():
        part = frame[frame["scope"] == scope]
        headers = [c[2] + (" †" if c[0] == "itp" else "") for c in COLUMNS]
        parts += ["", f"## {scope}", "", "| Solver | " + " | ".join(headers) + " |", "|---|" + "---:|" * len(COLUMNS)]
        for solver, rows in part.groupby("solver", sort=False):
            cells = {r["column"]: _cell(r) for _, r in rows.iterrows()}
            parts.append(f"| {solver} | " + " | ".join(cells.get(c[2], "—") for c in COLUMNS) + " |")
    seconds = frame.dropna(subset=["seconds"]).groupby("solver", sort=False)["seconds"].first()
    parts += ["", "Wall time per solver (all its seeds, every task): "
              + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) + "."]  # fmt: skip
    return "\n".join(parts) + "\n"
