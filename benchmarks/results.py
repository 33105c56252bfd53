"""Results of a run: per-task metrics per scenario and pooled ("Both" = instance-weighted, as the paper), 95 %
bootstrap intervals, and the files ``results.json``, ``results.csv`` and ``results.md`` (Table 5/11 layout).

``results.json`` depends only on the config and the prediction records: no clock, no token counts (those go to
``run.json``), so an interrupted-and-resumed run reproduces it exactly.

Metrics that were not run are ``None`` ("not run"): the judge's (ER ``s_emo``/``s_er``, VP ``judge``) when no
``--judge-model`` was given, and BERTScore with ``--no-bertscore``, even when every answer failed (the tasks score
a failed answer with the metric's minimum, which would otherwise show e.g. S_ER 1.00 for a judge that never ran).
A scope without instances (e.g. Family when only couple samples were selected) shows ``—`` in the tables, and a
metric that ran without giving any value (e.g. every judge verdict failed) shows ``n/a``.
Failed answers (``failures``) and failed judge verdicts on valid answers (``judge_failures``: the call failed, or
the verdict was not a valid score) are counted per task, by kind.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks import bootstrap
from benchmarks.base import Instance, Prediction
from benchmarks.runs import atomic_write
from rescue_env.data.stats import relative_position

SCOPES = ("couple", "family", "all")
SCOPE_TITLES = {"couple": "Couple", "family": "Family", "all": "Both"}
EMPTY = "—"  # a scope without instances
NOT_RUN = "not run"
NO_VALUE = "n/a"  # the metric ran but no instance got a value (e.g. every judge verdict failed)

# Per-instance score keys that come from the judge, per generative task (None unless a judge was configured).
JUDGE_METRICS: dict[str, tuple[str, ...]] = {"er": ("s_emo", "s_er"), "vp": ("judge",)}
BERTSCORE_METRICS: tuple[str, ...] = ("bertscore",)

# The paper's Table 5/11 columns: (task, metric key, header, kind)
TABLE_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("itp", "precision", "ITP P", "percent"),
    ("itp", "recall", "ITP R", "percent"),
    ("itp", "f1", "ITP F1", "percent"),
    ("rpp", "accuracy", "RPP Acc", "percent"),
    ("stp", "recall@1", "STP R@1", "percent"),
    ("stp", "mrr", "STP MRR", "percent"),
    ("ssp", "recall@1", "SSP R@1", "percent"),
    ("ssp", "mrr", "SSP MRR", "percent"),
    ("er", "s_er", "ER S_ER", "score"),
    ("er", "bertscore", "ER BERTScore", "bertscore"),
    ("vp", "judge", "VP Judge", "score"),
    ("vp", "bertscore", "VP BERTScore", "bertscore"),
)


def _extras(record: Mapping[str, Any], judge_run: bool, rubric: str) -> dict[str, Any]:
    judge = record.get("judge")
    if judge is not None:
        from benchmarks.judge import JudgeScore

        judge = JudgeScore.model_validate(judge)
    return {"judge": judge, "judge_run": judge_run, "bertscore": record.get("bertscore"), "rubric": rubric}


def score_records(
    task: ModuleType, instances: Sequence[Instance], records: Mapping[str, Mapping[str, Any]], config: Any
) -> list[dict[str, Any]]:
    """Per-instance scores from the stored records; an instance without a record scores as a failure."""
    scores = []
    rubric = getattr(config, "vp_rubric", "likert") if task.name == "vp" else "likert"
    not_run: list[str] = []
    if getattr(task, "generative", False):
        if not getattr(config, "judge_model", None):
            not_run += JUDGE_METRICS.get(task.name, ())
        if not getattr(config, "bertscore", True):
            not_run += BERTSCORE_METRICS
    for instance in instances:
        record = records.get(instance.instance_id, {"prediction": None, "failure": "not_run"})
        prediction = Prediction(
            instance_id=instance.instance_id, value=record.get("prediction"), failure=record.get("failure")
        )
        score = task.score(instance, prediction, _extras(record, bool(config.judge_model), rubric))
        scores.append({**score, **dict.fromkeys(k for k in not_run if k in score)} if not_run else score)
    return scores


def judge_failure_kind(error: str) -> str:
    """``api_error`` (the judge call failed), ``empty``, ``malformed_json`` or ``invalid_score``."""
    if error.startswith("judge call failed"):
        return "api_error"
    if error.startswith("empty judge answer"):
        return "empty"
    if error.startswith("no JSON object"):
        return "malformed_json"
    return "invalid_score"


def judge_failures(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Failed verdicts on valid answers, by kind (a failed answer gets no judge call, so none here)."""
    kinds: dict[str, int] = {}
    for record in records:
        judge = record.get("judge")
        if record.get("failure") or not isinstance(judge, Mapping):
            continue
        error = judge.get("error")
        if judge.get("score") is None or error:
            kind = judge_failure_kind(str(error or ""))
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def bootstrap_summary(
    task: ModuleType, scores: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, tuple[float, float] | None]:
    """Percentile 95 % intervals of every headline metric, resampling instances: the r-th resample is the r-th
    ``integers(0, n, size=n)`` of ``default_rng(seed)``, each task's metrics computed over all resamples at once
    (``benchmarks.bootstrap``; the same values as ``task.summary`` on each resample)."""
    return bootstrap.intervals(task, scores, resamples, seed)


def score_plan(
    config: Any, plan: Sequence[tuple[ModuleType, Sequence[Instance]]], records: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Per-instance scores of every task of the plan, in instance order (``score_records`` per task)."""
    return {task.name: score_records(task, instances, records, config) for task, instances in plan}


def correct(score: Mapping[str, Any]) -> bool | None:
    """Whether a classification answer is right: ITP's label equals the gold, a ranking's top 1 is the gold (a
    failure is wrong); None for ER and VP, which have graded scores instead."""
    if "rank" in score:
        return score["rank"] == 1
    if "pred" in score:
        return score["pred"] is not None and score["pred"] == score["gold"]
    return None


def scored_record(record: Mapping[str, Any], instance: Instance, score: Mapping[str, Any], rows: int) -> dict:
    """A prediction record with what only scoring may add (after the model was asked, so no gold reaches a prompt):
    the gold, the per-instance score, ``correct`` and ``position``, the target row's relative position in its
    sample (Fig. 4: ``row / rows``, 0-based row)."""
    return {
        **record,
        "gold": _jsonable(instance.gold),
        "score": _jsonable(dict(score)),
        "correct": correct(score),
        "position": relative_position(instance.row, rows),
    }


def build_results(
    config: Any,
    plan: Sequence[tuple[ModuleType, Sequence[Instance]]],
    records: Mapping[str, Mapping[str, Any]],
    scores: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """``results.json`` from the records (``scores``: the ``score_plan`` of the same records, if already made)."""
    scores = score_plan(config, plan, records) if scores is None else scores
    tasks: dict[str, Any] = {}
    for task, instances in plan:
        task_scores = scores[task.name]
        task_records = [records.get(i.instance_id, {}) for i in instances]
        failures: dict[str, int] = {}
        for record in task_records:
            reason = record.get("failure")
            if reason:
                kind = str(reason).split(":")[0]
                failures[kind] = failures.get(kind, 0) + 1
        scopes = {}
        for scope in SCOPES:
            chosen = [k for k, i in enumerate(instances) if scope == "all" or i.scenario == scope]
            subset = [task_scores[k] for k in chosen]
            summary = task.summary(subset)
            intervals = bootstrap_summary(task, subset, config.bootstrap, config.seed)
            scopes[scope] = {
                "instances": len(subset),
                "samples": len({instances[k].sample_id for k in chosen}),
                "metrics": {key: {"value": value, "ci95": intervals.get(key)} for key, value in summary.items()},
                "details": task.details([instances[k] for k in chosen], subset),
            }
        judged = judge_failures(task_records) if config.judge_model else {}
        tasks[task.name] = {
            "title": task.title,
            "instances": len(instances),
            "failures": sum(failures.values()),
            "failure_kinds": failures,
            "judge_failures": sum(judged.values()),
            "judge_failure_kinds": judged,
            "normalised_labels": sum(bool(r.get("normalised")) for r in task_records),
            "judge": "not run" if getattr(task, "generative", False) and not config.judge_model else None,
            "scopes": scopes,
        }
    return {"format": "rescue-env-results/1", "config": config.model_dump(), "tasks": _jsonable(tasks)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(float(value)) else float(value)
    if hasattr(value, "model_dump"):
        return _jsonable(value.model_dump())
    return value


def _was_run(config: Mapping[str, Any], task: str, key: str) -> bool:
    """False for a judge metric without --judge-model and for BERTScore with --no-bertscore."""
    if key in JUDGE_METRICS.get(task, ()) and not config.get("judge_model"):
        return False
    return not (key in BERTSCORE_METRICS and task in JUDGE_METRICS and not config.get("bertscore", True))


def table_cell(results: Mapping[str, Any], task: str, scope: str, key: str, text: str | None) -> str:
    """``text`` (a formatted value), or why there is none: an empty scope, a metric not run, no value."""
    if _scope_size(results, task, scope) == 0:
        return EMPTY
    if text is not None:
        return text
    return NO_VALUE if _was_run(results.get("config", {}), task, key) else NOT_RUN


def format_value(value: float | None, kind: str) -> str:
    if value is None:
        return NOT_RUN
    if kind == "percent":
        return f"{100 * value:.2f}"
    if kind == "bertscore":
        return f"{value:.4f}"
    return f"{value:.2f}"


def _scope_size(results: Mapping[str, Any], task: str, scope: str) -> int | None:
    entry = results["tasks"].get(task, {}).get("scopes", {}).get(scope)
    return None if entry is None else int(entry.get("instances", 0))


def metric_entry(results: Mapping[str, Any], task: str, scope: str, key: str) -> tuple[float | None, Any]:
    entry = results["tasks"].get(task, {}).get("scopes", {}).get(scope, {}).get("metrics", {}).get(key)
    if entry is None:
        return None, None
    return entry["value"], entry["ci95"]


def results_table(results: Mapping[str, Any]) -> str:
    """The paper's Table 5/11 layout: one row per scenario and pooled, one column per headline metric."""
    columns = [c for c in TABLE_COLUMNS if c[0] in results["tasks"]]
    header = "| Scenario | " + " | ".join(c[2] for c in columns) + " |"
    lines = [header, "|---|" + "---:|" * len(columns)]
    for scope in SCOPES:
        cells = []
        for task, key, _, kind in columns:
            value, _ = metric_entry(results, task, scope, key)
            cells.append(table_cell(results, task, scope, key, None if value is None else format_value(value, kind)))
        lines.append(f"| {SCOPE_TITLES[scope]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_markdown(results: Mapping[str, Any]) -> str:
    config = results["config"]
    parts = [
        "# RESCUE-Bench results",
        "",
        f"Agent `{config['agent']}`"
        + (f", model `{config['model']}`" if config.get("model") else "")
        + f", mode `{config['mode']}`, judge `{config.get('judge_model') or 'not run'}`, data `{config['data']}`.",
        "Classification metrics in %, judge scores on 1-5 (VP authors' rubric: 0-6), BERTScore F1 raw, here and in "
        "the per-task tables below (each metric's unit in brackets; results.json and results.csv hold fractions). "
        f"Both = pooled over instances; {EMPTY} = no instance in that scope; {NO_VALUE} = run, but no valid value "
        "(e.g. every judge verdict failed).",
        "",
        results_table(results),
    ]
    for name, task in results["tasks"].items():
        parts += ["", f"## {name.upper()} - {task['title']}", ""]
        judge_line = ""
        if task.get("judge_failures"):
            judge_line = f", {task['judge_failures']} judge failures (not scored): {task['judge_failure_kinds']}"
        parts.append(
            f"{task['instances']} instances, {task['failures']} failed answers (scored wrong)"
            + (f": {task['failure_kinds']}" if task["failures"] else "")
            + judge_line
            + f", {task['normalised_labels']} labels matched after normalisation."
        )
        metrics = list(next(iter(task["scopes"].values()))["metrics"])
        parts += [
            "",
            "| Metric | " + " | ".join(SCOPE_TITLES[s] for s in SCOPES) + " |",
            "|---|" + "---:|" * len(SCOPES),
        ]
        for key in metrics:
            unit = metric_unit(name, key, config)
            cells = []
            for scope in SCOPES:
                entry = task["scopes"][scope]["metrics"][key]
                if entry["value"] is None:
                    text = None
                elif entry["ci95"] is None:
                    text = _in_unit(entry["value"], unit)
                else:
                    low, high = entry["ci95"]
                    text = f"{_in_unit(entry['value'], unit)} [{_in_unit(low, unit)}, {_in_unit(high, unit)}]"
                cells.append(table_cell(results, name, scope, key, text))
            parts.append(f"| {key} ({UNIT_LABELS[unit]}) | " + " | ".join(cells) + " |")
        parts.append("")
        parts.append(
            "n = "
            + ", ".join(
                f"{SCOPE_TITLES[s]} {task['scopes'][s]['instances']} ({task['scopes'][s]['samples']} samples)"
                for s in SCOPES
            )
        )
    return "\n".join(parts) + "\n"


# How results.md labels each ``metric_unit``; fractions are shown in % there, like the headline table.
UNIT_LABELS = {
    "fraction": "%",
    "score_1_5": "1–5",
    "score_0_6": "0–6",
    "bertscore_f1": "F1, 0–1",
    "intensity_points": "points, 0–10",
}


def _in_unit(value: float, unit: str) -> str:
    """A per-task table's number: a fraction in % (2 decimals, as the headline table), BERTScore to 4 decimals,
    a score or an intensity error to 2."""
    if unit == "fraction":
        return f"{100 * value:.2f}"
    return f"{value:.4f}" if unit == "bertscore_f1" else f"{value:.2f}"


CSV_COLUMNS = (
    "task", "scope", "metric", "label", "value", "ci95_low", "ci95_high", "unit", "instances", "samples", "failures",
)  # fmt: skip


def metric_unit(task: str, metric: str, config: Mapping[str, Any]) -> str:
    """The unit of a results value: ``fraction`` (0-1: every rate, recall, F1, MRR), ``score_1_5`` (the judge and
    ER's intensity score, Eq. 5), ``score_0_6`` (VP under the authors' rubric), ``bertscore_f1`` (raw F1, 0-1) or
    ``intensity_points`` (ER's mean absolute intensity error on the 0-10 scale)."""
    if metric == "bertscore":
        return "bertscore_f1"
    if metric == "intensity_mae":
        return "intensity_points"
    if task == "vp" and metric == "judge":
        return "score_0_6" if config.get("vp_rubric") == "authors" else "score_1_5"
    if task == "er" and metric in ("s_emo", "s_int", "s_er"):
        return "score_1_5"
    return "fraction"


def results_csv(results: Mapping[str, Any]) -> str:
    """One row per task x scope (``Couple``, ``Family``, ``Both``, as the tables) x metric, then the per-label rows
    of the label reports (RPP, SSP: each label's precision, recall, F1 and support); ``label`` is empty on the
    headline rows. Every value is in the unit of its ``unit`` column (``metric_unit``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    config = results.get("config", {})
    for name, task in results["tasks"].items():
        for scope, entry in task["scopes"].items():
            counts = [entry["instances"], entry["samples"], task["failures"]]
            for key, metric in entry["metrics"].items():
                low, high = metric["ci95"] if metric["ci95"] else ("", "")
                value = "" if metric["value"] is None else metric["value"]
                unit = metric_unit(name, key, config)
                writer.writerow([name, SCOPE_TITLES[scope], key, "", value, low, high, unit, *counts])
            report = entry.get("details", {}).get("labels")
            for label, values in (report or {}).get("per_label", {}).items():
                for key in ("precision", "recall", "f1", "support"):
                    unit = "count" if key == "support" else "fraction"
                    writer.writerow([name, SCOPE_TITLES[scope], key, label, values[key], "", "", unit, *counts])
    return buffer.getvalue()


def write_results(directory: Path, results: Mapping[str, Any], run_info: Mapping[str, Any] | None = None) -> None:
    atomic_write(directory / "results.json", json.dumps(results, indent=2, sort_keys=True))
    atomic_write(directory / "results.csv", results_csv(results))
    atomic_write(directory / "results.md", results_markdown(results))
    if run_info is not None:
        atomic_write(directory / "run.json", json.dumps(run_info, indent=2, sort_keys=True))


def load_results(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    return json.loads(file.read_text(encoding="utf-8"))
