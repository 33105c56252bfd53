"""Can this judge be trusted? Its ER/VP scores against human ratings (paper App. F, Table 12), for any judge.

The paper validated its LLM judge on 200 human-rated items (100 ER + 100 VP, four annotators of 50 each): 159
exact matches (79.5 %), 35 off by one, 6 off by two, none further, MAE 0.235. ``rescue-bench judge`` lets a user
do the same for the judge of their own runs:

* ``judge export RUN [RUN ...] -o sheet.csv`` (:func:`export_sheet`) writes a blind rating sheet: a stratified,
  seeded sample of N valid ER/VP answers per task (spread over the runs and scenarios in proportion), each with
  an opaque ``item_id``, the prediction and the reference (the gold annotation), the scale, and one empty column
  per rater. No model name, no run, no judge score: the raters must not know what the judge said.
* ``judge agree RUN [RUN ...] --human sheet.csv`` (:func:`agreement_report`) reads the filled sheet and compares
  the judge with each rater, with the raters' mean, and each rater with each other (the inter-rater ceiling: a
  judge cannot be expected to agree with a person better than people agree with each other), per task and pooled.

Per comparison: Table 12's layout (items, exact, off by 1, 2, 3+, MAE) and the within-one rate, then what the
field now asks for besides raw agreement, which rewards a judge that always says the most common score:
quadratic-weighted Cohen's kappa (scikit-learn), Krippendorff's alpha at the ordinal level (``krippendorff``) and
Spearman's rho (scipy), each with a 95 % percentile interval from a seeded bootstrap that resamples items.

Item ids are ``TASK-`` + 12 hex digits of sha256(the run's answer settings, the instance id): stable when the
run's judge or BERTScore settings change (``EvalConfig.answer_keys``), distinct for two runs of the same
instances, and they say nothing about the model. Bad input (a missing column, ids that are in none of the runs,
a score that is not a number or lies outside the item's scale, runs without judge scores) raises
:class:`AgreementError` with one line.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ValidationError

from benchmarks.bootstrap import percentile_interval
from benchmarks.judge import AUTHORS_RANGE, LIKERT_RANGE
from benchmarks.metrics import resample_indices

__all__ = [
    "PAPER_TABLE_12",
    "Agreement",
    "AgreementError",
    "AgreementReport",
    "Item",
    "Ratings",
    "agreement",
    "agreement_report",
    "allocate",
    "export_sheet",
    "format_report",
    "gap_counts",
    "load_items",
    "ordinal_alpha",
    "quadratic_kappa",
    "read_sheet",
    "sample_items",
    "spearman",
]

TASKS = ("er", "vp")  # the judged tasks
ID_COLUMN = "item_id"
SHEET_COLUMNS = (ID_COLUMN, "task", "scale", "prediction", "reference")
RATER_PREFIX = "human"
GAP_BINS = ("0", "1", "2", "3+")
METRICS = ("exact", "within_one", "mae", "kappa", "alpha", "rho")
DEFAULT_PER_TASK = 100  # App. F: 100 items per task
PAPER_TABLE_12 = {"items": 200, "gaps": {"0": 159, "1": 35, "2": 6, "3+": 0}, "exact": 0.795, "mae": 0.235}
"""Table 12's total row: the paper's GPT-5.4 judge against four annotators (50 items each, ER and VP)."""

Array = NDArray[np.float64]


class AgreementError(ValueError):
    """Bad input to ``judge export`` / ``judge agree``, said in one line."""


# ---------------------------------------------------------------------------------------------------------------
# The runs' items


@dataclass(frozen=True)
class Item:
    """One judged answer: what a rater sees (prediction, reference, scale) and what the judge said."""

    item_id: str
    task: str
    scenario: str
    run: str  # a digest of the run's answer settings (the sample's strata; whatever path the run is given by)
    prediction: str
    reference: str
    judge: float | None  # None: no valid verdict (not judged, or the judge failed)
    scale: tuple[int, int]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def item_id(task: str, answer_keys: Mapping[str, Any], instance_id: str) -> str:
    """The opaque id of an answer: ``TASK-`` + 12 hex digits of sha256(answer settings, instance id)."""
    return f"{task}-{_digest(json.dumps(answer_keys, sort_keys=True, default=str) + chr(10) + instance_id)}"


def _viewpoints(items: Any) -> str:
    """VP's list of viewpoints, one line each: ``- [source ->] target: viewpoint (attitude)``."""
    lines = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        source = str(item.get("source") or "").strip()
        who = f"{source} -> " if source else ""
        attitude = str(item.get("attitude") or "").strip()
        tail = f" ({attitude})" if attitude else ""
        target, view = str(item.get("target") or "").strip(), str(item.get("viewpoint") or "").strip()
        lines.append(f"- {who}{target}: {view}{tail}")
    return "\n".join(lines) if lines else "(none)"


def render(task: str, value: Mapping[str, Any]) -> str:
    """What the judge compared (benchmarks/er.py, vp.py ``judge_request``): ER's emotion text (intensity is scored
    without the judge), VP's viewpoints."""
    if task == "er":
        return str(value.get("emotion") or "").strip()
    return _viewpoints(value.get("viewpoints"))


def _scale(task: str, record: Mapping[str, Any], rubric: str) -> tuple[int, int]:
    rubric = str((record.get("score") or {}).get("rubric") or rubric) if task == "vp" else "likert"
    return AUTHORS_RANGE if rubric == "authors" else LIKERT_RANGE


def _judge_score(record: Mapping[str, Any], scale: tuple[int, int]) -> float | None:
    verdict = record.get("judge")
    if not isinstance(verdict, Mapping) or verdict.get("error"):
        return None
    value = verdict.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if scale[0] <= value <= scale[1] else None


def _run_records(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config_path, predictions = run / "config.json", run / "predictions.jsonl"
    if not config_path.is_file():
        raise AgreementError(f"{run} is not a rescue-bench evaluate run directory (no config.json)")
    if not predictions.is_file() and (run / "trajectories.jsonl").is_file():
        raise AgreementError(f"{run} is a rollout, not an evaluate run: its ER/VP answers are what a judge scores")
    if not predictions.is_file():
        raise AgreementError(f"{run} holds no answers yet (no predictions.jsonl)")
    try:
        stored = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AgreementError(f"{run}/config.json cannot be read: {exc}") from None
    records = []
    for line in predictions.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return stored, records


def load_items(runs: Sequence[Path]) -> list[Item]:
    """Every valid, scored ER/VP answer of the runs (a failed answer gets no judge call and the rubric's minimum,
    so it has nothing to validate), with its judge score if any; the last record of an instance wins."""
    from benchmarks.runner import EvalConfig

    items: dict[str, Item] = {}
    for run in runs:
        stored, records = _run_records(run)
        try:
            config = EvalConfig.model_validate(stored.get("config") or {})
        except ValidationError:
            raise AgreementError(f"{run} is not a rescue-bench evaluate run (its config.json is another's)") from None
        keys = config.answer_keys()
        run_key = _digest(json.dumps(keys, sort_keys=True, default=str))
        latest = {r.get("instance_id"): r for r in records if r.get("task") in TASKS and r.get("instance_id")}
        for instance, record in latest.items():
            if record.get("failure") or not isinstance(record.get("prediction"), Mapping):
                continue
            if not isinstance(record.get("gold"), Mapping):
                continue  # not scored yet (a stopped run): re-running its command scores it
            task = str(record["task"])
            scale = _scale(task, record, config.vp_rubric)
            key = item_id(task, keys, str(instance))
            items[key] = Item(
                item_id=key,
                task=task,
                scenario=str(record.get("scenario") or ""),
                run=run_key,
                prediction=render(task, record["prediction"]),
                reference=render(task, record["gold"]),
                judge=_judge_score(record, scale),
                scale=scale,
            )
    return list(items.values())


def judge_models(runs: Sequence[Path]) -> list[str | None]:
    """Each run's judge model (config.json), for the report's header."""
    return [(_run_records(run)[0].get("config") or {}).get("judge_model") for run in runs]


# ---------------------------------------------------------------------------------------------------------------
# The blind sheet


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """``n`` items shared between strata in proportion to their ``sizes`` (largest remainder, ties to the order of
    ``sizes``); every stratum whole when ``n`` covers them all."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    exact = {key: n * size / total for key, size in sizes.items()}
    parts = {key: int(value) for key, value in exact.items()}
    for key in sorted(exact, key=lambda k: -(exact[k] - parts[k]))[: n - sum(parts.values())]:
        parts[key] += 1
    return parts


def sample_items(items: Sequence[Item], per_task: int, seed: int) -> list[Item]:
    """Up to ``per_task`` items of each task, stratified by (run, scenario) in proportion (the paper sampled "from
    the outputs of all evaluated models", App. F), drawn at random within each stratum and shown in a random order
    within the task; the same for the same items and seed, whatever the order the runs were read in."""
    rng = np.random.default_rng(seed)
    chosen: list[Item] = []
    for task in TASKS:
        strata: dict[str, list[Item]] = {}
        for item in sorted((i for i in items if i.task == task), key=lambda i: (i.run, i.scenario, i.item_id)):
            strata.setdefault(f"{item.run}\n{item.scenario}", []).append(item)
        quota = allocate({key: len(group) for key, group in strata.items()}, per_task)
        picked = [
            group[k] for key, group in strata.items() for k in sorted(rng.choice(len(group), quota[key], replace=False))
        ]
        chosen += [picked[k] for k in rng.permutation(len(picked))]
    return chosen


def rater_columns(raters: int) -> list[str]:
    """``human`` for one rater, ``human_1`` .. ``human_K`` for several."""
    return [RATER_PREFIX] if raters == 1 else [f"{RATER_PREFIX}_{k}" for k in range(1, raters + 1)]


def export_sheet(
    runs: Sequence[Path], output: Path, *, per_task: int = DEFAULT_PER_TASK, seed: int = 0, raters: int = 1,
    overwrite: bool = False,
) -> list[Item]:  # fmt: skip
    """Write the blind rating sheet (CSV: ``SHEET_COLUMNS`` and one empty column per rater); returns its items."""
    if output.is_dir():
        raise AgreementError(f"{output} is a directory: give a file name for the sheet")
    if output.exists() and not overwrite:
        raise AgreementError(f"{output} exists (it may hold ratings already): give another -o, or pass --force")
    items = load_items(runs)
    if not items:
        raise AgreementError(f"{', '.join(map(str, runs))}: no scored ER or VP answer to rate (run evaluate on er,vp)")
    chosen = sample_items(items, per_task, seed)
    output.parent.mkdir(parents=True, exist_ok=True)
    columns = rater_columns(raters)
    with output.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([*SHEET_COLUMNS, *columns])
        for item in chosen:
            low, high = item.scale
            writer.writerow([item.item_id, item.task, f"{low}-{high}", item.prediction, item.reference, *[""] * raters])
    return chosen


# ---------------------------------------------------------------------------------------------------------------
# The filled sheet


@dataclass(frozen=True)
class Ratings:
    """A filled sheet: each rater's scores by item id (an empty cell: that rater did not rate the item)."""

    path: str
    raters: tuple[str, ...]
    item_ids: tuple[str, ...]
    scores: Mapping[str, Mapping[str, float]]


def read_sheet(path: Path, raters: Sequence[str] | None = None) -> Ratings:
    """The rater columns (``raters``, or every column named ``human*``) of a sheet; one-line errors."""
    import pandas as pd

    if not path.is_file():
        raise AgreementError(f"{path}: no such file")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise AgreementError(f"{path} is not a readable CSV file: {' '.join(str(exc).split())}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    if ID_COLUMN not in frame.columns:
        shown = ", ".join(frame.columns[:8]) or "none"
        raise AgreementError(f"{path} has no column {ID_COLUMN!r} (columns: {shown}): rate the sheet of judge export")
    names = list(raters) if raters else [c for c in frame.columns if c.lower().startswith(RATER_PREFIX)]
    if not names:
        raise AgreementError(
            f"{path} has no rater column: name each rater's column {RATER_PREFIX}, {RATER_PREFIX}_1, "
            f"{RATER_PREFIX}_2, ... (or pass --raters COLUMN,...)"
        )
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise AgreementError(f"{path} has no column {missing[0]!r} (columns: {', '.join(frame.columns)})")
    ids = [str(v).strip() for v in frame[ID_COLUMN]]
    seen: set[str] = set()
    for line, key in enumerate(ids, start=2):
        if not key:
            raise AgreementError(f"{path} line {line}: empty {ID_COLUMN}")
        if key in seen:
            raise AgreementError(f"{path} line {line}: {ID_COLUMN} {key} appears twice")
        seen.add(key)
    scores: dict[str, dict[str, float]] = {}
    for name in names:
        column: dict[str, float] = {}
        for line, (key, cell) in enumerate(zip(ids, frame[name]), start=2):
            text = str(cell).strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or not value.is_integer():
                raise AgreementError(f"{path} line {line} ({key}): {name} = {text!r} is not a whole-number score")
            column[key] = value
        scores[name] = column
    if not any(scores.values()):
        raise AgreementError(f"{path} holds no rating yet: fill {', '.join(names)} with each item's score")
    return Ratings(path=str(path), raters=tuple(names), item_ids=tuple(ids), scores=scores)


# ---------------------------------------------------------------------------------------------------------------
# The statistics (pure functions of paired scores)


def gap_counts(x: Sequence[float], y: Sequence[float]) -> dict[str, int]:
    """Table 12's columns: how many pairs differ by 0, 1, 2 and 3 or more points. A gap between two whole numbers
    (1 for one that is not, e.g. against a mean of raters: 0.5 counts as 1, 1.5 as 2, 2.5 as 3+)."""
    gaps = np.abs(np.asarray(x, float) - np.asarray(y, float))
    return {
        "0": int(np.sum(gaps == 0)),
        "1": int(np.sum((gaps > 0) & (gaps <= 1))),
        "2": int(np.sum((gaps > 1) & (gaps <= 2))),
        "3+": int(np.sum(gaps > 2)),
    }


def _codes(values: Sequence[float], resolution: int) -> NDArray[np.int64]:
    """Scores as integers on a grid of ``1 / resolution`` points (a mean of k whole-number ratings lies on the
    1/k grid): categories that the libraries compare exactly, equally spaced as the scores are."""
    return np.rint(np.asarray(values, float) * resolution).astype(np.int64)


MAX_KAPPA_LABELS = 1000  # scikit-learn builds a labels x labels matrix; past this, the closed form (same value)


def quadratic_kappa(x: Sequence[float], y: Sequence[float], low: int, high: int, resolution: int = 1) -> float:
    """Cohen's kappa with quadratic weights (scikit-learn) over the whole scale ``low..high`` in steps of
    ``1 / resolution``: every category is passed, so weights follow the scores' distances even where a score is
    never used (NaN when undefined, e.g. both raters constant)."""
    from sklearn.metrics import cohen_kappa_score

    labels = list(range(low * resolution, high * resolution + 1))
    if len(labels) > MAX_KAPPA_LABELS:  # a mean over many raters: a fine grid
        a, b = np.asarray(x, float), np.asarray(y, float)
        return float(_kappa_draws(a, b, np.arange(len(a))[None, :])[0])
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(_codes(x, resolution), _codes(y, resolution), labels=labels, weights="quadratic")
    return float(value)


def ordinal_alpha(ratings: Sequence[Sequence[float]]) -> float:
    """Krippendorff's alpha, ordinal level (``krippendorff``): ``ratings`` is raters x items, NaN where a rater did
    not rate an item; NaN when undefined (no item rated twice, or a single value used). The ordinal distance of
    two values counts how often the values between them are used, so values nobody used change nothing: the
    domain is the values present (a mean of raters' scores, 3.5, is one more value in order)."""
    try:
        import krippendorff
    except ImportError:  # pragma: no cover - a dependency of the project
        raise AgreementError("Krippendorff's alpha needs the krippendorff package: pip install krippendorff") from None

    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")
        try:
            value = krippendorff.alpha(reliability_data=np.asarray(ratings, float), level_of_measurement="ordinal")
        except ValueError:  # no unit rated by two coders, or one value only
            return math.nan
    return float(value)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (scipy; ties get average ranks); NaN when a side is constant."""
    from scipy.stats import spearmanr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(x, y).statistic) if len(x) > 1 else math.nan


# Bootstrap draws. kappa and rho are computed in closed form for a whole block of resamples at once (the library
# calls cost ~1 ms each, 1000 resamples x every comparison x task); tests check both forms give the same numbers.
# Quadratic kappa = 1 - mean((x - y)^2) / (var x + var y + (mean x - mean y)^2): the expected disagreement under
# independent marginals, sum_ij (i - j)^2 r_i c_j / n^2, is the mean of (x_a - y_b)^2 over all pairs a, b.


def _kappa_draws(x: Array, y: Array, index: NDArray[np.int64]) -> Array:
    xs, ys = x[index], y[index]
    observed = np.mean((xs - ys) ** 2, axis=1)
    expected = xs.var(axis=1) + ys.var(axis=1) + (xs.mean(axis=1) - ys.mean(axis=1)) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(expected > 0, 1.0 - observed / np.where(expected > 0, expected, 1.0), np.nan)


def _rho_draws(x: Array, y: Array, index: NDArray[np.int64]) -> Array:
    from scipy.stats import rankdata

    rx, ry = rankdata(x[index], axis=1), rankdata(y[index], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    scale = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale > 0, (rx * ry).sum(axis=1) / np.where(scale > 0, scale, 1.0), np.nan)


def _draws(x: Array, y: Array, resamples: int, seed: int) -> dict[str, Array]:
    """Every metric on ``resamples`` bootstrap resamples of the items (``resample_indices``: seeded, reproducible)."""
    out: dict[str, list[Array]] = {k: [] for k in METRICS}
    gaps = np.abs(x - y)
    for index in resample_indices(len(x), resamples, seed):
        drawn = gaps[index]
        out["exact"].append(np.mean(drawn == 0, axis=1))
        out["within_one"].append(np.mean(drawn <= 1, axis=1))
        out["mae"].append(drawn.mean(axis=1))
        out["kappa"].append(_kappa_draws(x, y, index))
        out["rho"].append(_rho_draws(x, y, index))
        out["alpha"].append(np.array([ordinal_alpha([x[row], y[row]]) for row in index]))
    return {k: np.concatenate(v) if v else np.array([]) for k, v in out.items()}


def _number(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def agreement(
    x: Sequence[float], y: Sequence[float], low: int, high: int, *, resolution: int = 1, resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Table 12's figures and the chance-corrected ones for paired scores ``x`` (e.g. the judge) and ``y`` (a
    rater) on the scale ``low..high``: items, gaps, exact and within-one rates, MAE, quadratic kappa, ordinal
    alpha, Spearman rho (None where undefined), and their 95 % bootstrap intervals (``ci95``)."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    gaps = np.abs(a - b)
    point = {
        "exact": float(np.mean(gaps == 0)),
        "within_one": float(np.mean(gaps <= 1)),
        "mae": float(np.mean(gaps)),
        "kappa": quadratic_kappa(a, b, low, high, resolution),
        "alpha": ordinal_alpha([a, b]),
        "rho": spearman(a, b),
    }
    intervals: dict[str, tuple[float, float] | None] = dict.fromkeys(METRICS)
    if resamples > 0 and len(a) > 1:
        draws = _draws(a, b, resamples, seed)
        intervals = {k: percentile_interval(draws[k]) for k in METRICS}
    return {
        "items": len(a),
        "gaps": gap_counts(a, b),
        **{k: _number(v) for k, v in point.items()},
        "ci95": {k: intervals[k] if point[k] == point[k] else None for k in METRICS},
    }


# ---------------------------------------------------------------------------------------------------------------
# The report


class Agreement(BaseModel):
    """One row: a comparison on one task (or pooled, ``all``)."""

    comparison: str  # "judge vs human_1", "judge vs human mean", "human_1 vs human_2"
    kind: Literal["judge-human", "judge-human-mean", "human-human"]
    task: str  # er, vp, all
    items: int
    gaps: dict[str, int]
    exact: float
    within_one: float
    mae: float
    kappa: float | None
    alpha: float | None
    rho: float | None
    ci95: dict[str, tuple[float, float] | None]


class AgreementReport(BaseModel):
    runs: list[str]
    judges: list[str | None]
    sheet: str
    raters: list[str]
    sheet_items: int
    rated_items: int
    without_judge_score: int  # rated items whose answer has no valid judge verdict: not in the judge rows
    resamples: int
    seed: int
    rows: list[Agreement]
    paper: dict[str, Any] = PAPER_TABLE_12

    def frame(self):
        """The rows as a flat pandas DataFrame (one column per figure and interval bound): ``--csv``."""
        import pandas as pd

        flat = []
        for row in self.rows:
            entry: dict[str, Any] = {k: getattr(row, k) for k in ("comparison", "kind", "task", "items")}
            entry.update({f"diff_{k}": v for k, v in row.gaps.items()})
            for metric in METRICS:
                interval = row.ci95.get(metric)
                entry[metric] = getattr(row, metric)
                entry[f"{metric}_low"], entry[f"{metric}_high"] = interval if interval else (None, None)
            flat.append(entry)
        return pd.DataFrame(flat)


def _scopes(items: Sequence[Item]) -> Iterator[tuple[str, list[Item]]]:
    tasks = [t for t in TASKS if any(i.task == t for i in items)]
    for task in tasks:
        yield task, [i for i in items if i.task == task]
    if len(tasks) > 1:
        yield "all", list(items)


def _rows(
    comparison: str, kind: str, items: Sequence[Item], left: Mapping[str, float], right: Mapping[str, float],
    resolution: int, resamples: int, seed: int,
) -> list[Agreement]:  # fmt: skip
    paired = [i for i in items if i.item_id in left and i.item_id in right]
    rows = []
    for task, scoped in _scopes(paired):
        low, high = min(i.scale[0] for i in scoped), max(i.scale[1] for i in scoped)
        figures = agreement(
            [left[i.item_id] for i in scoped], [right[i.item_id] for i in scoped], low, high,
            resolution=resolution, resamples=resamples, seed=seed,
        )  # fmt: skip
        rows.append(Agreement(comparison=comparison, kind=kind, task=task, **figures))  # type: ignore[arg-type]
    return rows


def _no_judge_scores(runs: Sequence[Path]) -> AgreementError:
    shown = runs[0] if len(runs) == 1 else f"{runs[0]} (and {len(runs) - 1} more)"
    return AgreementError(
        f"{shown} has no judge scores: re-run its rescue-bench evaluate command with --judge-model MODEL on the same "
        f"--output (its answers are kept; only the judge is asked), then judge agree again"
    )


def agreement_report(
    runs: Sequence[Path], sheet: Path, *, raters: Sequence[str] | None = None, resamples: int = 1000, seed: int = 0
) -> AgreementReport:
    """The judge against each rater, against the raters' mean, and each rater against each other (the ceiling),
    per task and pooled (see the module docstring)."""
    items = {i.item_id: i for i in load_items(runs)}
    ratings = read_sheet(sheet, raters)
    unknown = [key for key in ratings.item_ids if key not in items]
    if unknown:
        raise AgreementError(
            f"{len(unknown)} item id(s) of {sheet} are in none of the runs (e.g. {unknown[0]}): give the run "
            f"directories that judge export read"
        )
    if not any(item.judge is not None for item in items.values()):
        raise _no_judge_scores(runs)
    for name, scores in ratings.scores.items():
        for key, value in scores.items():
            low, high = items[key].scale
            if not low <= value <= high:
                raise AgreementError(
                    f"{sheet}: {name} gives {key} {value:g}, outside its scale {low}-{high} ({items[key].task.upper()})"
                )
    rated = [items[key] for key in ratings.item_ids if any(key in s for s in ratings.scores.values())]
    judge = {i.item_id: i.judge for i in rated if i.judge is not None}
    if not judge:
        raise AgreementError(f"no rated item of {sheet} has a judge score (every one of them failed or was not judged)")
    rows: list[Agreement] = []
    for name in ratings.raters:
        rows += _rows(f"judge vs {name}", "judge-human", rated, judge, ratings.scores[name], 1, resamples, seed)
    if len(ratings.raters) > 1:
        mean = {}
        for item in rated:
            given = [s[item.item_id] for s in ratings.scores.values() if item.item_id in s]
            mean[item.item_id] = sum(given) / len(given)
        # A mean of m whole numbers lies on the 1/m grid, and so all on the 1/lcm grid of the m present: kappa's
        # categories (equally spaced, as scikit-learn's quadratic weights assume) are that grid's points.
        resolution = math.lcm(*{sum(item.item_id in s for s in ratings.scores.values()) for item in rated})
        rows += _rows("judge vs human mean", "judge-human-mean", rated, judge, mean, resolution, resamples, seed)
        for k, first in enumerate(ratings.raters):
            for second in ratings.raters[k + 1 :]:
                rows += _rows(
                    f"{first} vs {second}", "human-human", rated, ratings.scores[first], ratings.scores[second], 1,
                    resamples, seed,
                )  # fmt: skip
    return AgreementReport(
        runs=[str(r) for r in runs],
        judges=judge_models(runs),
        sheet=str(sheet),
        raters=list(ratings.raters),
        sheet_items=len(ratings.item_ids),
        rated_items=len(rated),
        without_judge_score=len(rated) - len(judge),
        resamples=resamples,
        seed=seed,
        rows=rows,
    )


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _with_interval(value: float | None, interval: tuple[float, float] | None, fmt: str, scale: float = 1.0) -> str:
    if value is None:
        return "n/a"

    def shown(number: float) -> str:
        return format(round(scale * number, 9) + 0.0, fmt)  # + 0.0: no "-0.000" for a rounding error below zero

    return f"{shown(value)} [{shown(interval[0])}, {shown(interval[1])}]" if interval else shown(value)


def _task(task: str) -> str:
    return "ER+VP" if task == "all" else task.upper()


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def format_report(report: AgreementReport) -> str:
    """Table 12's layout, then the chance-corrected figures, then the paper's row to compare with."""
    judges = ", ".join(sorted({str(j) for j in report.judges}))
    ci = f"95% intervals: {report.resamples} bootstrap resamples of items, seed {report.seed}"
    lines = [
        "Judge agreement with human ratings (paper App. F, Table 12)",
        f"runs: {', '.join(report.runs)} (judge: {judges}); sheet: {report.sheet} ({report.rated_items} of "
        f"{report.sheet_items} items rated; raters: {', '.join(report.raters)})",
        ci if report.resamples else "no bootstrap intervals (--bootstrap 0)",
    ]
    if report.without_judge_score:
        lines.append(f"{report.without_judge_score} rated item(s) without a valid judge score: not in the judge rows")
    pct = lambda row, key: _with_interval(getattr(row, key), row.ci95.get(key), ".1f", 100)  # noqa: E731
    table = [
        [row.comparison, _task(row.task), str(row.items), *(str(row.gaps[k]) for k in GAP_BINS),
         pct(row, "exact"), pct(row, "within_one"), _with_interval(row.mae, row.ci95.get("mae"), ".3f")]
        for row in report.rows
    ]  # fmt: skip
    header = ["Comparison", "Task", "Items", "Exact", "Diff=1", "Diff=2", "Diff>=3", "Exact %", "Within 1 %", "MAE"]
    lines += ["", *_table(header, table)]
    chance = [
        [row.comparison, _task(row.task), str(row.items),
         *(_with_interval(getattr(row, k), row.ci95.get(k), ".3f") for k in ("kappa", "alpha", "rho"))]
        for row in report.rows
    ]  # fmt: skip
    lines += [
        "",
        "Chance-corrected: Cohen's kappa (quadratic weights), Krippendorff's alpha (ordinal), Spearman's rho",
        *_table(["Comparison", "Task", "Items", "kappa (quadratic)", "alpha (ordinal)", "rho (Spearman)"], chance),
    ]
    paper = PAPER_TABLE_12
    lines += [
        "",
        f"paper (Table 12: GPT-5.4 judge vs 4 annotators): {paper['items']} items, {paper['gaps']['0']} exact, "
        f"{paper['gaps']['1']} off by 1, {paper['gaps']['2']} off by 2, none further; exact "
        f"{_percent(paper['exact'])}%, MAE {paper['mae']:.3f}",
    ]
    if any(row.kind == "human-human" for row in report.rows):
        lines.append("human vs human rows are the ceiling: a judge is not expected to agree with a rater better")
    return "\n".join(lines)
