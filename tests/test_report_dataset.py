"""The dataset report (Table 3, Figs. 3 and 5-9): every figure renders on the demo data as a real PNG with a
re-plottable CSV, ``position_distribution`` by hand, and on the research-only release (skipped when absent) the
paper's numbers, transition rows that sum to 1, bins that sum to the RPP instance count and CSVs that equal the
stats they plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
from conftest import TEXT_FILE, make_row

from benchmarks.reports import paper
from benchmarks.reports.dataset import (
    FIGURE_NUMBERS,
    dataset_report,
    format_table_3_value,
    label_frame,
    paper_comparison,
    position_frame,
    transition_frame,
)
from rescue_env.data import load_dataset
from rescue_env.data.schema import Sample
from rescue_env.data.stats import bin_label, dataset_stats, position_distribution
from rescue_env.taxonomy import label_name

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = [f"fig{n}_{scenario}_{kind}" for (kind, scenario), n in FIGURE_NUMBERS.items()] + [
    f"fig{n}_{scenario}_{what}"
    for n, what in ((3, "transitions"), (5, "position"))
    for scenario in ("couple", "family")
]


def _build(dataset, output: Path, protocol: str = "paper") -> dict:
    report = dataset_report(dataset, output, protocol)
    markdown, page = report.write()
    return {
        "report": report,
        "output": output,
        "markdown": markdown.read_text(encoding="utf-8"),
        "html": page.read_text(encoding="utf-8"),
        "stats": dataset_stats(dataset, protocol),
        "positions": position_distribution(dataset, protocol),
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    return _build(load_dataset("demo"), tmp_path_factory.mktemp("demo-report"))


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    if not TEXT_FILE.is_file():
        pytest.skip(f"research-only release data not found at {TEXT_FILE} (it is never shipped with the project)")
    dataset = load_dataset(TEXT_FILE)
    return {**_build(dataset, tmp_path_factory.mktemp("release-report")), "dataset": dataset}


def _csv(built: dict, name: str) -> pd.DataFrame:
    return pd.read_csv(built["output"] / "figures" / f"{name}.csv")


# ----- the demo data --------------------------------------------------------------------------------------------


def test_every_figure_is_a_png_with_its_csv(demo: dict) -> None:
    assert sorted(p.stem for p in demo["report"].figures) == sorted(FIGURES)
    for name in FIGURES:
        png = demo["output"] / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_SIGNATURE, name
        height, width, *_ = matplotlib.image.imread(png).shape
        assert width >= 600 and height >= 300, (name, width, height)
        frame = _csv(demo, name)
        assert len(frame) > 0, name
        keys = [c for c in frame.columns if c.endswith("key")]
        assert keys and all(c.replace("key", "name") in frame.columns for c in keys), name
        for column in keys:  # display names, never the raw keys
            assert list(frame[column.replace("key", "name")]) == [label_name(k) for k in frame[column]]
        assert f"](figures/{name}.png)" in demo["markdown"], name
    assert demo["html"].count('src="data:image/png;base64,') == len(FIGURES)


def test_report_sections_and_table_3(demo: dict) -> None:
    markdown = demo["markdown"]
    for heading in ("## Table 3", "### Figure 6", "### Figure 9", "## Figure 3", "## Figure 5", "## Comparison"):
        assert heading in markdown
    couple = demo["stats"]["couple"]
    row = next(line for line in markdown.splitlines() if line.startswith("| Total turns |"))
    assert f"| {couple.turns:,} " in row or f"| **{couple.turns:,}** " in row
    assert "| 5,875 |" in row  # the paper's value beside ours
    bins = next(line for line in markdown.splitlines() if line.startswith("| All |"))
    assert f"| {demo['positions']['couple'].total():,} |" in bins


def test_demo_csvs_equal_the_stats(demo: dict) -> None:
    _check_csvs(demo)


def test_format_table_3_value() -> None:
    assert format_table_3_value("samples", 191) == "191"
    assert format_table_3_value("total_minutes", 1064.8249) == "1,064.8"
    assert format_table_3_value("avg_turns", 37.0628) == "37.06"
    assert format_table_3_value("therapist_turn_share", 0.37435) == "37.4 %"


# ----- position_distribution by hand ----------------------------------------------------------------------------


def _sample(sample_id: str, scenario: str, rows: list[dict]) -> Sample:
    return Sample.model_validate({"sample_id": sample_id, "scenario": scenario, "rows": rows})


def _tiny() -> list[Sample]:
    # Couple, 10 rows (bin = row): therapist labels at rows 1, 4, 5, 9; a client row's label and an
    # out-of-taxonomy label do not count (protocol "paper": therapist rows, relation_cycle_state).
    couple_rows = [make_row(i, "Therapist" if i % 2 else "Ana") for i in range(10)]
    for position, label in ((1, "pursue_withdraw"), (5, "pursue_withdraw"), (9, "repair_softening")):
        couple_rows[position]["relation_cycle_state"] = label
    couple_rows[4] = make_row(4, "Therapist", relation_cycle_state="attack_attack")
    couple_rows[2]["relation_cycle_state"] = "attack_attack"  # client row: not an RPP row
    couple_rows[3]["relation_cycle_state"] = "not_a_label"
    # Couple, 4 rows: row 1 -> bin 1 * 10 // 4 = 2, row 3 -> bin 7.
    short = [make_row(0, "Bo"), make_row(1, "Therapist"), make_row(2, "Cy"), make_row(3, "Therapist")]
    short[1]["relation_cycle_state"] = "pursue_withdraw"
    short[3]["relation_cycle_state"] = "attack_attack"
    # Family, 5 rows (protocol "paper": relation_pattern on any row, the first included): rows 0 and 4 -> bins 0, 8.
    family = [make_row(i, "Therapist" if i % 2 else "Joel") for i in range(5)]
    family[0]["relation_pattern"] = "cooperative_family_alliance"
    family[4]["relation_pattern"] = "cooperative_family_alliance"
    family[3]["relation_cycle_state"] = "escalation_conflict"  # not read for family under "paper"
    return [
        _sample("a/1", "couple", couple_rows),
        _sample("b/1", "couple", short),
        _sample("family_therapy/001", "family", family),
    ]


def test_position_distribution_by_hand() -> None:
    result = position_distribution(_tiny())
    couple = result["couple"]
    pw, aa, rs = (couple.labels.index(k) for k in ("pursue_withdraw", "attack_attack", "repair_softening"))
    expected = {1: {pw: 1}, 2: {pw: 1}, 4: {aa: 1}, 5: {pw: 1}, 7: {aa: 1}, 9: {rs: 1}}
    for b in range(10):
        for i in range(len(couple.labels)):
            assert couple.counts[b][i] == expected.get(b, {}).get(i, 0), (b, couple.labels[i])
    assert couple.totals() == [0, 1, 1, 0, 1, 1, 0, 1, 0, 1] and couple.total() == 6
    assert couple.proportions()[1][pw] == 1.0 and couple.proportions()[0] == [0.0] * len(couple.labels)

    family = result["family"]
    cfa = family.labels.index("cooperative_family_alliance")
    assert family.totals() == [1, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert family.counts[0][cfa] == family.counts[8][cfa] == 1
    assert result["all"].total() == 8
    assert result["all"].totals() == [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]


def test_position_distribution_follows_the_protocol() -> None:
    # "unified": therapist rows with a prior row, relation_pattern else relation_cycle_state, for family too.
    family = position_distribution(_tiny(), "unified")["family"]
    assert family.total() == 1  # row 0 has no prior row; row 4 is a client row; row 3's cycle state counts
    assert family.counts[6][family.labels.index("escalation_conflict")] == 1  # 3 * 10 // 5 = 6
    assert position_distribution(_tiny(), bins=2)["couple"].totals() == [3, 3]
    with pytest.raises(ValueError):
        position_distribution(_tiny(), bins=0)


def test_bin_labels() -> None:
    assert [bin_label(b) for b in (0, 9)] == ["0–10 %", "90–100 %"]


def test_report_of_couple_samples_only(tmp_path: Path) -> None:
    # A scenario without samples gets a sentence instead of its figures, not an error.
    built = _build(_tiny()[:2], tmp_path)
    names = {p.stem for p in built["report"].figures}
    assert names == {"fig6_couple_relation_patterns", "fig3_couple_transitions", "fig5_couple_position"}
    assert "No RPP instance in the family samples" in built["markdown"]


# ----- the release ------------------------------------------------------------------------------------------------


def test_release_transitions(release: dict) -> None:
    for scenario in ("couple", "family"):
        transitions = release["stats"][scenario].transitions
        for i, line in enumerate(transitions.row_normalised):
            assert line[i] == 0.0 and transitions.counts[i][i] == 0  # self-transitions excluded
            assert sum(line) == pytest.approx(1.0 if sum(transitions.counts[i]) else 0.0)
        frame = _csv(release, f"fig3_{scenario}_transitions")
        assert (frame.loc[frame.from_key == frame.to_key, "count"] == 0).all()
        sums = frame.groupby("from_key")["row_share"].sum()
        totals = frame.groupby("from_key")["from_total"].first()
        assert all(sums[k] == pytest.approx(1.0 if totals[k] else 0.0) for k in sums.index)


def test_release_position_bins_sum_to_the_rpp_instances(release: dict) -> None:
    positions = release["positions"]
    assert positions["couple"].total() == 1608 and positions["family"].total() == 525  # Table 6
    for scenario in ("couple", "family"):
        assert positions[scenario].total() == release["stats"][scenario].relation_patterns.total
        frame = _csv(release, f"fig5_{scenario}_position")
        assert frame["count"].sum() == positions[scenario].total()
        proportions = frame.groupby("bin")["proportion"].sum()
        assert all(p == pytest.approx(1.0) for p in proportions)


def test_release_table_3_and_label_shares_match_the_paper(release: dict) -> None:
    stats = release["stats"]
    for scope, figures in paper.TABLE_3.items():
        for field, value in figures.items():
            assert format_table_3_value(field, getattr(stats[scope], field)) == format_table_3_value(field, value)
    for kind, per_scenario in paper.LABEL_SHARES.items():
        for scenario, shares in per_scenario.items():
            for key, value in shares.items():
                assert abs(100 * getattr(stats[scenario], kind).shares[key] - value) < 0.05 + 1e-9, (scenario, key)
    for scenario, (keys, coverage) in paper.TOP_STRATEGY_COVERAGE.items():
        ours = 100 * sum(stats[scenario].strategies.shares[k] for k in keys)
        assert round(ours, 1) == coverage, scenario


def test_release_paper_comparison(release: dict) -> None:
    rows = paper_comparison(release["dataset"])
    mismatches = [(r.what, r.scope) for r in rows if not r.match]
    # The paper's couple RPP coverage (172) is STP's, not that of the 1,608 rows it counts (170 samples).
    assert mismatches == [("Table 6: RPP covered samples", "Couple")]
    assert len(rows) >= 21 + 8
    assert "| **170** | 172 |" in release["markdown"]


def test_release_csvs_equal_the_stats(release: dict) -> None:
    _check_csvs(release)


def _check_csvs(built: dict) -> None:
    """Each CSV holds the numbers its figure plots: the stats, unrounded."""
    stats, positions = built["stats"], built["positions"]
    for (kind, scenario), number in FIGURE_NUMBERS.items():
        label_stats = getattr(stats[scenario], kind)
        frame = _csv(built, f"fig{number}_{scenario}_{kind}")
        assert list(frame["share_pct"]) == sorted(frame["share_pct"], reverse=True)
        for key, count, share in zip(frame["key"], frame["count"], frame["share_pct"]):
            assert count == label_stats.counts.get(key, 0)
            assert share == pytest.approx(100 * label_stats.shares.get(key, 0.0), abs=1e-12)
        pd.testing.assert_frame_equal(frame, label_frame(label_stats, kind, scenario), check_dtype=False)
    for scenario in ("couple", "family"):
        transitions = stats[scenario].transitions
        frame = _csv(built, f"fig3_{scenario}_transitions")
        pd.testing.assert_frame_equal(frame, transition_frame(transitions), check_dtype=False)
        index = {k: i for i, k in enumerate(transitions.labels)}
        for source, target, count, share in zip(frame.from_key, frame.to_key, frame["count"], frame.row_share):
            assert count == transitions.counts[index[source]][index[target]]
            assert share == pytest.approx(transitions.row_normalised[index[source]][index[target]], abs=1e-12)
        frame = _csv(built, f"fig5_{scenario}_position")
        pd.testing.assert_frame_equal(frame, position_frame(positions[scenario]), check_dtype=False)
        distribution = positions[scenario]
        for b, key, count in zip(frame["bin"], frame["key"], frame["count"]):
            assert count == distribution.counts[b][distribution.labels.index(key)]
