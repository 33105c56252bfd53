"""`rescue-bench report RUN_DIR` (``benchmarks.reports.run``): every figure renders as a real PNG with its numbers
as a CSV, the numbers equal what results.json and predictions.jsonl say (counted here by hand, with the bins taken
from the dataset's own row counts), an old-format run gets the one-line note and the rest of the report, and a
directory that is not a finished six-task run is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from benchmarks.registry import TASK_NAMES
from benchmarks.reports import paper
from benchmarks.reports.run import SCORING_FIELDS, is_run_dir, load_run, record_bin, run_report
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from rescue_env.data import load_dataset
from rescue_env.data.stats import position_bin

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = (
    "rpp_position", "rpp_label_accuracy", "ssp_label_accuracy", "rpp_confusion_couple", "rpp_confusion_family",
    "ssp_confusion_couple", "ssp_confusion_family", "stp_target_kind", "paper_comparison",
)  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("runs") / "heuristic"
    config = EvalConfig(agent="heuristic", bertscore=False, bootstrap=100)
    Evaluation(config, directory, options=RunOptions(progress=False, command=["rescue-bench", "evaluate"])).run()
    return directory


@pytest.fixture(scope="module")
def built(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("report")
    report = run_report(run_dir, output)
    markdown, page = report.write()
    assert markdown.is_file() and page.is_file()
    return output


@pytest.fixture(scope="module")
def old_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run as one made before predictions.jsonl carried the scoring fields."""
    directory = tmp_path_factory.mktemp("old") / "heuristic"
    shutil.copytree(run_dir, directory)
    path = directory / "predictions.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    stripped = [{k: v for k, v in record.items() if k not in SCORING_FIELDS} for record in lines]
    path.write_text("".join(json.dumps(r) + "\n" for r in stripped), encoding="utf-8")
    return directory


def _records(run_dir: Path, task: str) -> list[dict]:
    lines = (run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["task"] == task]


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))


def test_every_figure_is_a_png_with_its_csv(built: Path) -> None:
    for name in FIGURES:
        png = built / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_SIGNATURE, name
        image = imread(png)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200, name
        assert float(np.asarray(image).std()) > 0.01, f"{name} is blank"
        assert not pd.read_csv(built / "figures" / f"{name}.csv").empty, name
    page = (built / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == len(FIGURES)
    markdown = (built / "report.md").read_text(encoding="utf-8")
    assert paper.ITP_NOTE in markdown and "pools the predictions of ten models" in markdown
    assert "pd.read_json" in markdown and "predictions.jsonl" in markdown


def test_position_bins_count_every_rpp_instance_and_match_a_hand_count(run_dir: Path, built: Path) -> None:
    frame = pd.read_csv(built / "figures" / "rpp_position.csv")
    results = _results(run_dir)["tasks"]["rpp"]["scopes"]
    for scope in ("couple", "family", "all"):
        assert frame[frame["scope"] == scope]["n"].sum() == results[scope]["instances"]
    # Bins by hand, from the dataset's own row counts (not from the position field the report reads).
    rows = {s.sample_id: len(s.rows) for s in load_dataset("demo")}
    hand = np.zeros((10, 2), dtype=int)  # per bin: instances, correct
    for record in _records(run_dir, "rpp"):
        b = position_bin(record["row"] - 1, rows[record["sample_id"]])
        hand[b] += (1, int(record["score"]["rank"] == 1))
    pooled = frame[frame["scope"] == "all"].sort_values("bin")
    assert pooled["n"].tolist() == hand[:, 0].tolist()
    assert pooled["correct"].tolist() == hand[:, 1].tolist()
    busiest = int(np.argmax(hand[:, 0]))
    row = pooled.iloc[busiest]
    assert row["accuracy"] == pytest.approx(hand[busiest, 1] / hand[busiest, 0])
    p, n = row["accuracy"], row["n"]
    assert row["se"] == pytest.approx(np.sqrt(p * (1 - p) / n))


def test_record_bin_is_exact_on_every_record_and_on_bin_edges(run_dir: Path) -> None:
    rows = {s.sample_id: len(s.rows) for s in load_dataset("demo")}
    for task in TASK_NAMES:
        for record in _records(run_dir, task):
            assert record_bin(record) == position_bin(record["row"] - 1, rows[record["sample_id"]])
    for total in range(1, 301):
        for row0 in range(total):
            assert record_bin({"row": row0 + 1, "position": row0 / total}) == row0 * 10 // total


def test_label_accuracy_and_confusions_equal_results_json(run_dir: Path, built: Path) -> None:
    results = _results(run_dir)["tasks"]
    for task in ("rpp", "ssp"):
        frame = pd.read_csv(built / "figures" / f"{task}_label_accuracy.csv")
        for scope in ("couple", "family"):
            report = results[task]["scopes"][scope]["details"]["labels"]
            part = frame[frame["scope"] == scope].set_index("label")
            for label in report["labels"]:
                assert part.loc[label, "recall"] == pytest.approx(report["per_label"][label]["recall"])
                assert part.loc[label, "support"] == report["per_label"][label]["support"]
            confusion = pd.read_csv(built / "figures" / f"{task}_confusion_{scope}.csv")
            matrix = confusion.pivot(index="gold", columns="predicted", values="count")
            assert matrix.loc[report["labels"], report["columns"]].to_numpy().tolist() == report["confusion"]
    marked = pd.read_csv(built / "figures" / "rpp_label_accuracy.csv").dropna(subset=["paper_average"])
    for row in marked.itertuples():
        assert row.paper_average == pytest.approx(paper.RPP_LABEL_ACCURACY[row.scope][row.label] / 100)
    kinds = pd.read_csv(built / "figures" / "stp_target_kind.csv")
    both = kinds[kinds["scope"] == "all"].set_index(["gold", "predicted"])["count"]
    for gold, line in results["stp"]["scopes"]["all"]["details"]["target_kind_confusion"].items():
        for predicted, count in line.items():
            assert both.loc[(gold, predicted)] == count


def test_paper_comparison_numbers(run_dir: Path, built: Path) -> None:
    frame = pd.read_csv(built / "figures" / "paper_comparison.csv")
    reference = paper.best_and_average("all")
    results = _results(run_dir)["tasks"]
    for row in frame.itertuples():
        assert (row.paper_best, row.paper_average) == pytest.approx(reference[(row.task, row.metric)])
        value = results[row.task]["scopes"]["all"]["metrics"][row.metric]["value"]
        assert (pd.isna(row.value) and value is None) or row.value == pytest.approx(value)
    markdown = (built / "report.md").read_text(encoding="utf-8")
    assert "| Both |" in markdown and "not run" in markdown  # the Table 5 layout, judge and BERTScore not run


def test_old_format_run_gets_one_note_and_the_rest(old_run: Path, tmp_path: Path) -> None:
    assert not load_run(old_run).scored
    report = run_report(old_run, tmp_path / "report")
    markdown, _ = report.write()
    text = markdown.read_text(encoding="utf-8")
    notes = [line for line in text.splitlines() if "re-running the same command" in line]
    assert len(notes) == 1 and "without asking the model again" in notes[0]
    names = {p.stem for p in (tmp_path / "report" / "figures").glob("*.png")}
    assert names == set(FIGURES) - {"rpp_position"}


def test_not_a_finished_six_task_run_is_refused_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(run_dir, partial)
    results = _results(partial)
    results["tasks"] = {k: v for k, v in results["tasks"].items() if k in ("rpp", "ssp")}
    (partial / "results.json").write_text(json.dumps(results), encoding="utf-8")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(run_dir / "config.json", unfinished / "config.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    for directory, words in ((partial, "lacks itp"), (unfinished, "no results.json"), (empty, "no results.json")):
        with pytest.raises(ValueError, match=words) as caught:
            run_report(directory, tmp_path / "out")
        assert "\n" not in str(caught.value)
    assert is_run_dir(run_dir) and is_run_dir(unfinished) and not is_run_dir(empty)
    assert not is_run_dir(run_dir / "results.json")
    rollout = tmp_path / "rollout"
    rollout.mkdir()
    (rollout / "config.json").write_text(json.dumps({"config": {"policy": "random", "env_id": "Rescue-v0"}}))
    assert not is_run_dir(rollout)
