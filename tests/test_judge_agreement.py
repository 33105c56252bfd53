"""``rescue-bench judge export`` / ``judge agree`` (issue 26 item 1): the judge against human ratings, as in the
paper's App. F (Table 12), for any judge. The statistics are checked on tiny sheets computed by hand and on
Krippendorff's published example; the commands on a sheet rebuilt from Table 12's counts (a synthetic run: the
paper gives only the gaps, so the scores around them are made up here) and on a mock-model run of the demo data."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.judge_agreement import (
    AgreementError,
    _kappa_draws,
    _rho_draws,
    agreement,
    allocate,
    gap_counts,
    item_id,
    ordinal_alpha,
    quadratic_kappa,
    read_sheet,
    spearman,
)
from benchmarks.runner import EvalConfig
from rescue_env.cli import main

# ----------------------------------------------------------------------------------------------------------------
# the statistics, by hand


def test_a_tiny_sheet_by_hand() -> None:
    # judge (1, 2, 1) vs rater (1, 2, 2).
    # kappa_q = 1 - mean((x-y)^2) / (var x + var y + (mean x - mean y)^2) = 1 - (1/3) / (2/9 + 2/9 + 1/9) = 0.4.
    # alpha (ordinal): coincidences o_11 = 2, o_22 = 2, o_12 = o_21 = 1; n_1 = n_2 = 3, n = 6; delta_12^2 =
    #   (n_1 + n_2 - (n_1 + n_2) / 2)^2 = 9; alpha = 1 - (n - 1) * sum o delta^2 / sum n_c n_k delta^2
    #   = 1 - 5 * 18 / 162 = 4/9.
    # rho: ranks (1.5, 3, 1.5) and (1, 2.5, 2.5): covariance 0.75 / sqrt(1.5 * 1.5) = 0.5.
    x, y = [1, 2, 1], [1, 2, 2]
    assert gap_counts(x, y) == {"0": 2, "1": 1, "2": 0, "3+": 0}
    assert quadratic_kappa(x, y, 1, 5) == pytest.approx(0.4)
    assert ordinal_alpha([x, y]) == pytest.approx(4 / 9)
    assert spearman(x, y) == pytest.approx(0.5)
    figures = agreement(x, y, 1, 5, resamples=0)
    assert figures["items"] == 3 and figures["exact"] == pytest.approx(2 / 3)
    assert figures["within_one"] == 1.0 and figures["mae"] == pytest.approx(1 / 3)
    assert figures["ci95"] == dict.fromkeys(figures["ci95"])  # no resample, no interval


def test_a_rater_one_point_higher_everywhere() -> None:
    # Spearman sees a perfect order (1.0); kappa counts the offset: 1 - 1 / (2/3 + 2/3 + 1) = 4/7; no item exact.
    x, y = [1, 2, 3], [2, 3, 4]
    assert spearman(x, y) == pytest.approx(1.0)
    assert quadratic_kappa(x, y, 1, 5) == pytest.approx(4 / 7)
    assert gap_counts(x, y) == {"0": 0, "1": 3, "2": 0, "3+": 0}
    assert gap_counts([1, 1, 1, 1], [1, 3, 4, 5]) == {"0": 1, "1": 0, "2": 1, "3+": 2}


def test_a_constant_judge_has_no_chance_corrected_agreement() -> None:
    # Always 3: raw agreement can look fine (every gap <= 1), kappa is 0 and rho undefined.
    x, y = [3, 3, 3, 3], [2, 3, 4, 3]
    assert agreement(x, y, 1, 5, resamples=0)["within_one"] == 1.0
    assert quadratic_kappa(x, y, 1, 5) == pytest.approx(0.0)
    assert math.isnan(spearman(x, y))
    assert math.isnan(quadratic_kappa([3, 3], [3, 3], 1, 5)) and math.isnan(ordinal_alpha([[3, 3], [3, 3]]))


def test_the_mean_of_two_raters_on_the_half_point_grid() -> None:
    # judge (1, 3) vs mean (1.5, 4): 1 - 0.625 / (1 + 1.5625 + 0.5625) = 0.8 (scikit-learn on the 1/2 grid).
    assert quadratic_kappa([1, 3], [1.5, 4], 1, 5, resolution=2) == pytest.approx(0.8)
    assert quadratic_kappa([1, 3], [1.5, 4], 1, 5, resolution=2520) == pytest.approx(0.8)  # 10 raters: closed form
    # alpha (ordinal) sees only the order of the values present: the half point is one more value between 1 and 2
    assert ordinal_alpha([[1, 3], [1.5, 4]]) == pytest.approx(ordinal_alpha([[1, 3], [2, 4]]))
    assert gap_counts([1, 3, 3], [1.5, 4, 5.5]) == {"0": 0, "1": 2, "2": 0, "3+": 1}


def test_krippendorffs_published_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers x 12 units, ordinal 0.815.
    n = math.nan
    units = [(1, 1, n, 1), (2, 2, 3, 2), (3, 3, 3, 3), (3, 3, 3, 3), (2, 2, 2, 2), (1, 2, 3, 4), (4, 4, 4, 4),
             (1, 1, 2, 1), (2, 2, 2, 2), (n, 5, 5, 5), (n, n, 1, 1), (n, n, 3, n)]  # fmt: skip
    assert ordinal_alpha(np.array(units).T) == pytest.approx(0.8154, abs=1e-4)


def test_the_bootstrap_draws_equal_the_libraries_on_every_resample() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(1, 6, 40).astype(float)
    y = np.clip(x + rng.integers(-2, 3, 40), 1, 5).astype(float)
    index = rng.integers(0, 40, size=(25, 40))
    kappas, rhos = _kappa_draws(x, y, index), _rho_draws(x, y, index)
    for row, kappa, rho in zip(index, kappas, rhos):
        assert kappa == pytest.approx(quadratic_kappa(x[row], y[row], 1, 5), abs=1e-12)
        assert rho == pytest.approx(spearman(x[row], y[row]), abs=1e-12)


def test_intervals_are_seeded_and_hold_the_point() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(1, 6, 60)
    y = np.clip(x + rng.integers(-1, 2, 60), 1, 5)
    first, again = agreement(x, y, 1, 5, resamples=200, seed=5), agreement(x, y, 1, 5, resamples=200, seed=5)
    assert first == again
    assert first != agreement(x, y, 1, 5, resamples=200, seed=6)
    for key in ("exact", "mae", "kappa", "alpha", "rho"):
        low, high = first["ci95"][key]
        assert low <= first[key] <= high, key


def test_allocate_by_largest_remainder() -> None:
    assert allocate({"couple": 8, "family": 2}, 5) == {"couple": 4, "family": 1}
    assert allocate({"couple": 8, "family": 2}, 3) == {"couple": 2, "family": 1}  # 2.4 + 0.6: the family's remainder
    assert allocate({"a": 3, "b": 3}, 3) == {"a": 2, "b": 1}  # a tie goes to the first
    assert allocate({"a": 3, "b": 1}, 10) == {"a": 3, "b": 1}


# ----------------------------------------------------------------------------------------------------------------
# Table 12, rebuilt from its counts

ANNOTATORS = [  # (column, task, exact, off by 1, off by 2): App. F, Table 12, 50 items each
    ("human_1", "vp", 39, 10, 1),
    ("human_2", "vp", 42, 8, 0),
    ("human_3", "er", 38, 9, 3),
    ("human_4", "er", 40, 8, 2),
]


def _synthetic_run(run: Path, judged: list[tuple[str, float | None]]) -> EvalConfig:
    """A finished evaluate run directory whose ER/VP answers got the given judge scores (made-up texts)."""
    config = EvalConfig(tasks=["er", "vp"], agent="litellm", model="synthetic", judge_model="synthetic-judge")
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"command": ["test"], "config": config.model_dump()}))
    records = []
    for k, (task, score) in enumerate(judged):
        value = {"emotion": f"feeling {k}"} if task == "er" else {"viewpoints": [{"target": "B", "viewpoint": f"v{k}"}]}
        verdict = {"score": score, "error": None} if score is not None else {"score": None, "error": "bad verdict"}
        records.append({
            "task": task, "instance_id": f"{task}:s{k // 10}:r{k}", "scenario": "couple" if k % 5 else "family",
            "prediction": value, "failure": None, "judge": verdict, "gold": value, "score": {"rubric": "likert"},
        })  # fmt: skip
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return config


def _table_12_sheet(tmp_path: Path) -> tuple[Path, Path]:
    """200 items, each rated by one of four annotators with Table 12's gaps; the judge's scores cycle over 1-5."""
    rng = np.random.default_rng(12)
    judged, ratings = [], []
    for column, task, exact, one, two in ANNOTATORS:
        gaps = rng.permutation([0] * exact + [1] * one + [2] * two)
        for k, gap in enumerate(gaps):
            judge = float(len(judged) % 5 + 1)
            sign = 1 if k % 2 == 0 else -1
            human = judge + sign * gap if 1 <= judge + sign * gap <= 5 else judge - sign * gap
            judged.append((task, judge))
            ratings.append((column, human))
    run = tmp_path / "run"
    config = _synthetic_run(run, judged)
    sheet = tmp_path / "sheet.csv"
    assert main(["judge", "export", str(run), "-o", str(sheet), "--raters", "4", "--per-task", "100"]) == 0
    by_id = {
        item_id(task, config.answer_keys(), f"{task}:s{k // 10}:r{k}"): rating
        for k, ((task, _), rating) in enumerate(zip(judged, ratings))
    }
    with sheet.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 200
    for row in rows:
        column, human = by_id[row["item_id"]]
        row[column] = str(int(human))
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run, sheet


def test_table_12_counts_give_the_papers_figures(tmp_path: Path, capsys) -> None:
    run, sheet = _table_12_sheet(tmp_path)
    capsys.readouterr()
    assert main(["judge", "agree", str(run), "--human", str(sheet), "--json", "--bootstrap", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {(r["comparison"], r["task"]): r for r in report["rows"]}
    total = rows[("judge vs human mean", "all")]  # one rating per item: the mean is that rating
    assert total["items"] == 200 and total["gaps"] == {"0": 159, "1": 35, "2": 6, "3+": 0}
    assert total["exact"] == pytest.approx(0.795) and total["mae"] == pytest.approx(0.235)
    assert total["within_one"] == pytest.approx(0.97)
    # the per-task figures of App. F's text: VP 81 exact of 100, MAE 0.20; ER 78 of 100, MAE 0.27
    assert rows[("judge vs human mean", "vp")]["gaps"]["0"] == 81 and rows[("judge vs human mean", "vp")]["mae"] == 0.2
    assert rows[("judge vs human mean", "er")]["gaps"]["0"] == 78
    assert rows[("judge vs human mean", "er")]["mae"] == pytest.approx(0.27)
    # and each annotator's row of Table 12 (MAE 0.24, 0.16, 0.30, 0.24)
    for (column, task, exact, one, two), mae in zip(ANNOTATORS, (0.24, 0.16, 0.30, 0.24)):
        row = rows[(f"judge vs {column}", task)]
        assert (row["items"], row["gaps"]) == (50, {"0": exact, "1": one, "2": two, "3+": 0})
        assert row["mae"] == pytest.approx(mae)
        assert (f"judge vs {column}", "all") not in rows  # one task each: no pooled row
    assert not any(r["kind"] == "human-human" for r in report["rows"])  # no item rated twice: no ceiling
    for key in ("kappa", "alpha", "rho"):
        low, high = total["ci95"][key]
        assert 0.8 < low <= total[key] <= high <= 1.0, key
    assert report["paper"]["exact"] == 0.795 and report["judges"] == ["synthetic-judge"]

    # the same as tables: Table 12's layout, then the chance-corrected figures
    assert main(["judge", "agree", str(run), "--human", str(sheet), "--bootstrap", "50"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("judge vs human mean") and "ER+VP" in x)
    assert line.split()[4:10] == ["ER+VP", "200", "159", "35", "6", "0"] and "79.5 [" in line and "0.235 [" in line
    assert "kappa (quadratic)" in text and "alpha (ordinal)" in text and "rho (Spearman)" in text


# ----------------------------------------------------------------------------------------------------------------
# a mock-model run of the demo data, end to end


def _evaluate(tmp_path: Path, *extra: str) -> Path:
    run = tmp_path / "mock"
    args = ["evaluate", "--model", "mock", "--tasks", "er,vp", "--no-bertscore", "--bootstrap", "0", "--no-progress"]
    assert main([*args, *extra, "--output", str(run)]) == 0
    return run


def _fill(sheet: Path, filled: Path, scores: dict[str, list[str]]) -> None:
    with sheet.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for column, values in scores.items():
        for row, value in zip(rows, values):
            row[column] = value
    with filled.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_export_is_blind_stratified_and_seeded(tmp_path: Path, capsys) -> None:
    run = _evaluate(tmp_path, "--judge-model", "mock")
    first, again, other = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for path, seed in ((first, "0"), (again, "0"), (other, "1")):
        assert main(["judge", "export", str(run), "-o", str(path), "--per-task", "10", "--seed", seed]) == 0
    out = capsys.readouterr().out
    assert "10 items" not in out and "20 items: ER 10, VP 10" in out and "judge agree" in out
    assert first.read_bytes() == again.read_bytes() and first.read_bytes() != other.read_bytes()
    with first.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["item_id", "task", "scale", "prediction", "reference", "human"]
    assert [r["task"] for r in rows] == ["er"] * 10 + ["vp"] * 10
    assert all(r["human"] == "" and r["scale"] == "1-5" and r["prediction"] and r["reference"] for r in rows)
    text = first.read_text(encoding="utf-8")
    assert "mock" not in text and "judge" not in text and ":r" not in text  # no model, no verdict, no instance id
    # stratified: the demo's families are on the sheet in proportion (allocate), not left to chance
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    keys = EvalConfig.model_validate(json.loads((run / "config.json").read_text())["config"]).answer_keys()
    scenario = {item_id(r["task"], keys, r["instance_id"]): r["scenario"] for r in records}
    for task in ("er", "vp"):
        pool = [r["scenario"] for r in records if r["task"] == task and not r["failure"]]
        expected = allocate({s: pool.count(s) for s in sorted(set(pool))}, 10)
        shown = [scenario[r["item_id"]] for r in rows if r["task"] == task]
        assert {s: shown.count(s) for s in expected} == expected
    # an existing sheet (it may hold ratings) is not overwritten without --force
    assert main(["judge", "export", str(run), "-o", str(first)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["judge", "export", str(run), "-o", str(first), "--force"]) == 0


def test_two_raters_on_a_run_whose_judge_came_later(tmp_path: Path, capsys) -> None:
    run = _evaluate(tmp_path)  # no judge yet: a sheet can be rated before the judge is chosen
    sheet, filled = tmp_path / "sheet.csv", tmp_path / "filled.csv"
    assert main(["judge", "export", str(run), "-o", str(sheet), "--per-task", "8", "--raters", "2"]) == 0
    _fill(sheet, filled, {"human_1": ["2", "3", "4", "3"] * 4, "human_2": ["2", "4", "4", ""] * 4})
    capsys.readouterr()
    assert main(["judge", "agree", str(run), "--human", str(filled)]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no judge scores" in err and "--judge-model" in err and len(err.splitlines()) == 1

    _evaluate(tmp_path, "--judge-model", "mock")  # item 2: the judge added to the same run; the ids do not change
    capsys.readouterr()
    table = tmp_path / "rows.csv"
    assert main(["judge", "agree", str(run), "--human", str(filled), "--bootstrap", "50", "--csv", str(table)]) == 0
    out = capsys.readouterr().out
    for name in ("judge vs human_1", "judge vs human_2", "judge vs human mean", "human_1 vs human_2"):
        assert name in out
    import pandas as pd

    frame = pd.read_csv(table)
    ceiling = frame[(frame.comparison == "human_1 vs human_2") & (frame.task == "all")].iloc[0]
    assert ceiling["items"] == 12 and ceiling["diff_0"] == 8 and ceiling["diff_1"] == 4  # the 4 blanks left out
    judge_1 = frame[(frame.comparison == "judge vs human_1") & (frame.task == "all")].iloc[0]
    assert judge_1["items"] == 16 and judge_1["exact"] == 0.5 and judge_1["kappa"] == pytest.approx(0.0)  # mock: 3s
    assert math.isnan(judge_1["rho"])  # a constant judge has no rank order
    assert {"kappa_low", "kappa_high", "alpha", "rho_low"} <= set(frame.columns)
    assert main(["judge", "agree", str(run), "--human", str(filled), "--json", "--bootstrap", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["raters"] == ["human_1", "human_2"] and report["rated_items"] == 16


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda rows: [{k if k != "item_id" else "id": v for k, v in r.items()} for r in rows], "no column 'item_id'"),
        (lambda rows: [{k if k != "human" else "score": v for k, v in r.items()} for r in rows], "no rater column"),
        (lambda rows: [{**r, "human": "four"} for r in rows], "'four' is not a whole-number score"),
        (lambda rows: [{**r, "human": "3.5"} for r in rows], "'3.5' is not a whole-number score"),
        (lambda rows: [{**r, "human": "7"} for r in rows], "outside its scale 1-5"),
        (lambda rows: [{**r, "human": ""} for r in rows], "holds no rating yet"),
        (lambda rows: [{**rows[0], "item_id": "er-000000000000", "human": "3"}], "in none of the runs"),
        (lambda rows: [{**rows[0], "human": "3"}, {**rows[0], "human": "3"}], "appears twice"),
    ],
)
def test_bad_sheets_are_one_line_errors(tmp_path: Path, capsys, edit, message) -> None:
    run = _evaluate(tmp_path, "--judge-model", "mock")
    sheet = tmp_path / "sheet.csv"
    assert main(["judge", "export", str(run), "-o", str(sheet), "--per-task", "3"]) == 0
    with sheet.open(encoding="utf-8", newline="") as handle:
        rows = edit([{**r, "human": "3"} for r in csv.DictReader(handle)])
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert main(["judge", "agree", str(run), "--human", str(sheet), "--bootstrap", "0"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in captured.err + captured.out


def test_bad_runs_and_options_are_one_line_errors(tmp_path: Path, capsys) -> None:
    run = _evaluate(tmp_path, "--judge-model", "mock")
    sheet = tmp_path / "sheet.csv"
    assert main(["judge", "export", str(run), "-o", str(sheet), "--per-task", "2"]) == 0
    cases = [
        (["judge", "agree", str(tmp_path / "nowhere"), "--human", str(sheet)], "no config.json"),
        (["judge", "agree", str(run), "--human", str(tmp_path / "missing.csv")], "no such file"),
        (["judge", "agree", str(run), "--human", str(sheet), "--raters", "human,human_9"], "no column 'human_9'"),
        (["judge", "export", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.csv")], "no config.json"),
    ]
    (tmp_path / "itp").mkdir()
    assert main(["evaluate", "--tasks", "itp", "--agent", "heuristic", "--bootstrap", "0", "--no-progress",
                 "--output", str(tmp_path / "itp")]) == 0  # fmt: skip
    cases.append((["judge", "export", str(tmp_path / "itp"), "-o", str(tmp_path / "y.csv")], "no scored ER or VP"))
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_read_sheet_takes_the_human_columns_and_skips_blanks(tmp_path: Path) -> None:
    sheet = tmp_path / "s.csv"
    sheet.write_text("item_id,task,notes,human_a,Human_b\ner-1,er,x,3,\nvp-2,vp,y,4.0,5\n", encoding="utf-8")
    ratings = read_sheet(sheet)
    assert ratings.raters == ("human_a", "Human_b") and ratings.item_ids == ("er-1", "vp-2")
    assert ratings.scores == {"human_a": {"er-1": 3.0, "vp-2": 4.0}, "Human_b": {"vp-2": 5.0}}
    with pytest.raises(AgreementError, match="no column 'notez'"):
        read_sheet(sheet, ["notez"])


def test_judge_help_reads_well(capsys) -> None:
    for argv in (["judge", "--help"], ["judge", "export", "--help"], ["judge", "agree", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Table 12" in text and "export" in text and "agree" in text and "%%" not in text
    assert "--per-task N" in text and "(default: 100)" in text and "--human FILE" in text
    assert "Krippendorff" in text and "--judge-model MODEL" in text
