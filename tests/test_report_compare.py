"""`rescue-bench report runs/a runs/b ...` (``benchmarks.reports.compare``): the comparison table bolds the best
run, the paired bootstrap gives the known answers on hand-built scores (identical runs; right everywhere against
wrong everywhere), its vectorised draws equal ``task.summary`` per resample, runs on different data are tabled
but not paired, and everything is deterministic given the seed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.registry import TASK_NAMES
from benchmarks.reports.compare import (
    common_scores,
    compare_report,
    comparison_frame,
    comparison_rows,
    paired_bootstrap,
    run_labels,
)
from benchmarks.reports.run import SCORING_FIELDS, load_run
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions

AGENTS = ("oracle", "random", "heuristic")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for agent in AGENTS:
        config = EvalConfig(agent=agent, bertscore=False, bootstrap=100)
        Evaluation(config, base / agent, options=RunOptions(progress=False, command=["test"])).run()
        out[agent] = base / agent
    return out


@pytest.fixture(scope="module")
def built(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("compare")
    compare_report([runs[a] for a in AGENTS], output, seed=0, resamples=200).write()
    return output


def _ranked(gold: str, rank: int, scenario: str = "couple") -> dict:
    """A ranking task's score dict with the gold at ``rank`` (0 = missed)."""
    others = ["attack_attack", "withdraw_withdraw", "constructive_alignment"]
    ranking = others[:3] if rank == 0 else [*others[: rank - 1], gold, *others[rank - 1 :]][:3]
    return {
        "scenario": scenario,
        "gold": gold,
        "ranking": ranking,
        "top1": ranking[0],
        "rank": rank,
        "failure": None,
        "normalised": False,
    }


def test_comparison_table_bolds_the_best(runs: dict[str, Path], built: Path) -> None:
    loaded = [load_run(runs[a]) for a in AGENTS]
    labels = run_labels(loaded)
    assert labels == list(AGENTS)
    rows = {(r[0], r[1]): r[2:] for r in comparison_rows(comparison_frame(loaded, labels), labels)}
    oracle, random, heuristic = rows[("RPP", "accuracy")]
    assert oracle.startswith("**100.00") and not random.startswith("**") and not heuristic.startswith("**")
    assert rows[("ER", "intensity_mae (lower is better)")][0].startswith("**0.00")
    assert all(not c.startswith("**") for c in rows[("VP", "judge")])  # not run anywhere: nothing is best
    frame = pd.read_csv(built / "comparison.csv")
    assert {"task", "metric", "run", "value", "ci95_low", "ci95_high", "unit"} <= set(frame.columns)
    both = frame[(frame.scope == "Both") & (frame.task == "rpp") & (frame.metric == "accuracy")]
    results = json.loads((runs["random"] / "results.json").read_text())
    assert both.set_index("run").loc["random", "value"] == pytest.approx(
        results["tasks"]["rpp"]["scopes"]["all"]["metrics"]["accuracy"]["value"]
    )
    assert (built / "figures" / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    paired = pd.read_csv(built / "paired.csv")
    assert set(zip(paired.run_a, paired.run_b)) == {
        ("oracle", "random"),
        ("oracle", "heuristic"),
        ("random", "heuristic"),
    }
    markdown = (built / "report.md").read_text(encoding="utf-8")
    assert "**100.00 [100.00, 100.00]**" in markdown and "common, 0 only in a, 0 only in b" in markdown


def test_identical_runs_differ_by_nothing() -> None:
    scores = [_ranked("pursue_withdraw", r) for r in (1, 0, 2, 3, 1, 0, 1)]
    for metric, result in paired_bootstrap("rpp", scores, list(scores), resamples=300, seed=3).items():
        assert result.difference == 0 and result.ci95 == (0.0, 0.0) and result.p_value == 1.0, metric
    itp = [{"gold": bool(i % 2), "pred": bool(i % 3)} for i in range(12)]
    for result in paired_bootstrap("itp", itp, itp, resamples=300, seed=3).values():
        assert result.difference == 0 and result.ci95 == (0.0, 0.0) and result.p_value == 1.0


def test_right_everywhere_against_wrong_everywhere() -> None:
    wrong = [_ranked("pursue_withdraw", 0) for _ in range(40)]
    right = [_ranked("pursue_withdraw", 1) for _ in range(40)]
    result = paired_bootstrap("stp", wrong, right, resamples=500, seed=0)["recall@1"]
    assert (result.a, result.b, result.difference) == (0.0, 1.0, 1.0)
    assert result.ci95 == (1.0, 1.0) and result.p_value == 1 / 500
    gold = [bool(i % 2) for i in range(30)]
    itp_wrong = [{"gold": g, "pred": not g} for g in gold]
    itp_right = [{"gold": g, "pred": g} for g in gold]
    accuracy = paired_bootstrap("itp", itp_wrong, itp_right, resamples=250, seed=1)["accuracy"]
    assert accuracy.difference == 1.0 and accuracy.p_value == 1 / 250
    reverse = paired_bootstrap("itp", itp_right, itp_wrong, resamples=250, seed=1)["accuracy"]
    assert reverse.difference == -1.0 and reverse.p_value == 1 / 250


def _generative(task: str, rng: np.random.Generator, n: int) -> list[dict]:
    """ER / VP score dicts mixing failed answers, judged and unjudged ones, judge failures and BERTScore gaps."""
    scores = []
    for _ in range(n):
        failed = rng.random() < 0.2
        judged = not failed and rng.random() < 0.7
        value = None if not judged or rng.random() < 0.15 else float(rng.integers(1, 6))
        bert = None if failed or rng.random() < 0.3 else float(rng.random())
        if task == "er":
            s_int = int(rng.integers(1, 6))
            scores.append(
                {
                    "failed": failed,
                    "judged": judged,
                    "s_int": s_int,
                    "s_emo": value,
                    "bertscore": bert,
                    "s_er": None if value is None else (value + s_int) / 2,
                    "abs_error": int(rng.integers(0, 8)),
                    "failure": "empty" if failed else None,
                }
            )
        else:
            scores.append(
                {
                    "failed": failed,
                    "judged": judged,
                    "judge": value,
                    "bertscore": bert,
                    "target_match": float(rng.random() < 0.5),
                    "failure": "empty" if failed else None,
                }
            )
    return scores


def test_vectorised_draws_equal_task_summary_per_resample(runs: dict[str, Path]) -> None:
    heuristic, random = load_run(runs["heuristic"]), load_run(runs["random"])
    cases = [(t, *common_scores(heuristic, random, t)[:2]) for t in TASK_NAMES]
    rng = np.random.default_rng(7)
    cases += [(t, _generative(t, rng, 25), _generative(t, rng, 25)) for t in ("er", "vp")]
    cases.append(
        (
            "rpp",
            *(
                [
                    _ranked(g, int(r), s)
                    for g, r, s in zip(
                        ["pursue_withdraw", "repair_softening"] * 10, rng.integers(0, 4, 20), ["couple", "family"] * 10
                    )
                ]
                for _ in range(2)
            ),
        )
    )
    for task, scores_a, scores_b in cases:
        fast = paired_bootstrap(task, scores_a, scores_b, resamples=60, seed=5)
        slow = paired_bootstrap(task, scores_a, scores_b, resamples=60, seed=5, vectorised=False)
        assert fast.keys() == slow.keys() and fast, task
        for metric in fast:
            a, b = fast[metric], slow[metric]
            assert a.difference == b.difference, (task, metric)  # bit-identical draws (benchmarks.bootstrap)
            assert a.ci95 == b.ci95, (task, metric)
            assert (a.p_value, a.resamples) == (b.p_value, b.resamples), (task, metric)


def test_deterministic_given_the_seed(runs: dict[str, Path], built: Path, tmp_path: Path) -> None:
    heuristic, random = load_run(runs["heuristic"]), load_run(runs["random"])
    a, b, *_ = common_scores(heuristic, random, "rpp")
    assert paired_bootstrap("rpp", a, b, 200, seed=1) == paired_bootstrap("rpp", a, b, 200, seed=1)
    assert paired_bootstrap("rpp", a, b, 200, seed=1) != paired_bootstrap("rpp", a, b, 200, seed=2)
    compare_report([runs[x] for x in AGENTS], tmp_path / "again", seed=0, resamples=200)
    assert (tmp_path / "again" / "paired.csv").read_bytes() == (built / "paired.csv").read_bytes()


def test_runs_on_different_data_are_tabled_but_not_paired(runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(runs["random"], other)
    meta = json.loads((other / "config.json").read_text())
    meta["data"]["sha256"] = "0" * 64
    (other / "config.json").write_text(json.dumps(meta))
    report = compare_report([runs["oracle"], other], tmp_path / "out", resamples=20)
    assert len(pd.read_csv(tmp_path / "out" / "comparison.csv")) > 0
    assert pd.read_csv(tmp_path / "out" / "paired.csv").empty
    text = report.markdown()
    assert "**Not the same data.**" in text and "No paired test" in text


def test_non_runs_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    for dirs, words in (
        ([runs["oracle"]], "at least two"),
        ([runs["oracle"], runs["oracle"]], "given twice"),
        ([runs["oracle"], tmp_path], "not a finished six-task"),
    ):
        with pytest.raises(ValueError, match=words) as caught:
            compare_report(dirs, tmp_path / "out", resamples=20)
        assert "\n" not in str(caught.value)


def test_common_instances_and_old_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    fewer = tmp_path / "fewer"
    shutil.copytree(runs["heuristic"], fewer)
    path = fewer / "predictions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    dropped = [r["instance_id"] for r in records if r["task"] == "rpp"][:5]
    path.write_text("".join(json.dumps(r) + "\n" for r in records if r["instance_id"] not in dropped))
    old = tmp_path / "old"
    shutil.copytree(runs["random"], old)
    records = [json.loads(line) for line in (old / "predictions.jsonl").read_text().splitlines()]
    stripped = [{k: v for k, v in r.items() if k not in SCORING_FIELDS} for r in records]
    (old / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    report = compare_report([runs["heuristic"], fewer, old], tmp_path / "out", resamples=50)
    paired = pd.read_csv(tmp_path / "out" / "paired.csv")
    rpp = paired[(paired.task == "rpp") & (paired.run_b == "heuristic (fewer)")]
    results = json.loads((runs["heuristic"] / "results.json").read_text())
    assert set(rpp.only_a) == {5} and set(rpp.only_b) == {0}
    assert set(rpp.instances) == {results["tasks"]["rpp"]["instances"] - 5}
    assert set(zip(paired.run_a, paired.run_b)) == {("heuristic (heuristic)", "heuristic (fewer)")}
    markdown = report.markdown()
    assert f"RPP {results['tasks']['rpp']['instances'] - 5} common, 5 only in a, 0 only in b" in markdown
    assert markdown.count("skipped.") == 2 and "re-running the same command" in markdown
