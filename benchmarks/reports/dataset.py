"""The dataset report of ``rescue-bench report --data PATH``: the paper's Table 3 and Figures 3 and 5-9 recomputed
on a dataset, each figure's numbers beside the paper's where the paper gives them.

* Table 3 - corpus statistics per scenario (``rescue_env.data.stats.dataset_stats``);
* Figs. 6-9 (App. E.2) - relation-pattern and support-strategy label shares per scenario, over the RPP and SSP
  instance rows (App. C);
* Fig. 3 (Sec. 4.3) - the row-normalised transition matrix between consecutive relation-pattern labels, without
  self-transitions, one per scenario (the label sets differ);
* Fig. 5 (Sec. 5.3) - the gold relation-pattern distribution over ten relative-position bins.

Every figure's numbers are also written as ``figures/<name>.csv`` (label keys and display names) so that a reader
can re-plot them. The frames that the CSVs hold are the frames the figures are drawn from. :func:`paper_comparison`
gives the same comparisons as rows for the console.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from pydantic import BaseModel

from benchmarks.reports import paper
from benchmarks.reports.document import Report, new_figure
from rescue_env.data import Dataset
from rescue_env.data.domain import RelationProtocol, relation_labels, scenario_of
from rescue_env.data.schema import SCENARIOS, Sample, Scenario
from rescue_env.data.stats import (
    LabelStats,
    PositionDistribution,
    Scope,
    ScopeStats,
    TransitionStats,
    bin_label,
    dataset_stats,
    position_distribution,
)
from rescue_env.taxonomy import label_name, relation_patterns, strategies

__all__ = [
    "ComparisonRow",
    "FIGURE_NUMBERS",
    "comparison_rows",
    "dataset_report",
    "format_table_3_value",
    "label_frame",
    "label_shares_figure",
    "paper_comparison",
    "position_figure",
    "position_frame",
    "is_release",
    "transition_figure",
    "transition_frame",
    "transition_matrix",
]

LabelKind = Literal["relation_patterns", "strategies"]  # the LabelStats fields of ScopeStats
SCOPE_TITLES: dict[Scope, str] = {"couple": "Couple", "family": "Family", "all": "Both"}
KIND_TITLES: dict[LabelKind, str] = {"relation_patterns": "relation-pattern", "strategies": "support-strategy"}
# App. E.2: Figures 6-9 are (relation patterns, strategies) x (couple, family).
FIGURE_NUMBERS: dict[tuple[LabelKind, Scenario], int] = {
    ("relation_patterns", "couple"): 6,
    ("relation_patterns", "family"): 7,
    ("strategies", "couple"): 8,
    ("strategies", "family"): 9,
}
# Table 3 rows: CorpusStats field, the paper's row name, and the paper's precision.
TABLE_3_ROWS: tuple[tuple[str, str], ...] = (
    ("samples", "Samples"),
    ("total_minutes", "Total duration (min)"),
    ("turns", "Total turns"),
    ("avg_minutes", "Avg. duration / sample (min)"),
    ("avg_turns", "Avg. turns / sample"),
    ("avg_speakers", "Avg. speakers / sample"),
    ("therapist_turn_share", "Therapist turn share"),
)


class ComparisonRow(BaseModel):
    """One number of the dataset next to the paper's: both formatted at the paper's precision."""

    what: str
    scope: str
    ours: str
    paper: str
    match: bool | None = None
    """``ours == paper`` at the paper's precision (or the paper's claim holds); None where it cannot be told."""
    note: str = ""


# ----- formatting ---------------------------------------------------------------------------------------------


def format_table_3_value(field: str, value: float) -> str:
    """A Table 3 value at the paper's precision: counts as integers, total minutes 0.1, averages 0.01, the
    therapist turn share in % to 0.1."""
    if field in ("samples", "turns"):
        return f"{round(value):,d}"
    if field == "total_minutes":
        return f"{value:,.1f}"
    if field == "therapist_turn_share":
        return f"{100 * value:.1f} %"
    return f"{value:.2f}"


def _pct(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f} %"


def _wrap(text: str, width: int = 16) -> str:
    return "\n".join(textwrap.wrap(text, width, break_long_words=False)) or text


def _taxonomy(kind: LabelKind, scenario: Scenario) -> tuple[str, ...]:
    return (relation_patterns if kind == "relation_patterns" else strategies)(scenario).keys()


def label_colours(keys: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """A qualitative colour per label (tab10, tab20 beyond ten), by taxonomy position, so that one label keeps its
    colour across Figs. 5-7."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(keys) <= 10 else "tab20"]
    return {key: cmap(i % cmap.N) for i, key in enumerate(keys)}


# ----- frames (the numbers each figure plots; written as its CSV) ---------------------------------------------


def label_frame(stats: LabelStats, kind: LabelKind, scenario: Scenario) -> pd.DataFrame:
    """Figs. 6-9: one row per label of the scenario's closed set (unused labels at 0), sorted by share (ties in
    taxonomy order): key, name, count, share_pct, paper_share_pct (NaN where the paper gives none)."""
    keys = list(_taxonomy(kind, scenario)) + [k for k in stats.counts if k not in _taxonomy(kind, scenario)]
    given = paper.LABEL_SHARES.get(kind, {}).get(scenario, {})
    frame = pd.DataFrame(
        {
            "key": keys,
            "name": [label_name(k) for k in keys],
            "count": [stats.counts.get(k, 0) for k in keys],
            "share_pct": [100 * stats.shares.get(k, 0.0) for k in keys],
            "paper_share_pct": [given.get(k, np.nan) for k in keys],
        }
    )
    return frame.sort_values("share_pct", ascending=False, kind="stable").reset_index(drop=True)


def transition_frame(transitions: TransitionStats) -> pd.DataFrame:
    """Fig. 3, long format: from/to key and name, the count, the row's outgoing total and the row share."""
    records = []
    for i, source in enumerate(transitions.labels):
        outgoing = sum(transitions.counts[i])
        for j, target in enumerate(transitions.labels):
            records.append(
                {
                    "from_key": source,
                    "from_name": label_name(source),
                    "to_key": target,
                    "to_name": label_name(target),
                    "count": transitions.counts[i][j],
                    "from_total": outgoing,
                    "row_share": transitions.row_normalised[i][j],
                }
            )
    return pd.DataFrame.from_records(records)


def position_frame(distribution: PositionDistribution) -> pd.DataFrame:
    """Fig. 5, long format: bin (0-based), bin_label, key, name, count, bin_total, proportion."""
    proportions = distribution.proportions()
    records = [
        {
            "bin": b,
            "bin_label": bin_label(b, distribution.bins),
            "key": key,
            "name": label_name(key),
            "count": distribution.counts[b][i],
            "bin_total": sum(distribution.counts[b]),
            "proportion": proportions[b][i],
        }
        for b in range(distribution.bins)
        for i, key in enumerate(distribution.labels)
    ]
    return pd.DataFrame.from_records(records)


# ----- figures --------------------------------------------------------------------------------------------------


def label_shares_figure(frame: pd.DataFrame, title: str, colours: dict[str, tuple[float, ...]]) -> Figure:
    """Figs. 6-9: horizontal bars of ``frame.share_pct`` (largest on top), each written with its share and count;
    the paper's share, where given, as a black diamond."""
    n = len(frame)
    figure = new_figure(8.5, 1.6 + 0.42 * n)
    ax = figure.add_subplot()
    y = np.arange(n)
    ax.barh(y, frame["share_pct"], color=[colours.get(k, "grey") for k in frame["key"]], height=0.7)
    ax.set_yticks(y, frame["name"])
    ax.invert_yaxis()
    top = max(float(frame["share_pct"].max()), float(np.nan_to_num(frame["paper_share_pct"]).max()), 1.0)
    for position, (share, count) in enumerate(zip(frame["share_pct"], frame["count"])):
        # A column right of the axes, so that no bar or diamond ever hides a number.
        transform = ax.get_yaxis_transform()  # x in axes fractions, y in data
        ax.text(1.02, position, f"{share:.1f} % (n = {count:,})", va="center", fontsize=9, transform=transform)
    has_paper = frame["paper_share_pct"].notna()
    if has_paper.any():
        ax.plot(frame["paper_share_pct"][has_paper], y[has_paper.to_numpy()], "kD", markersize=6)
    ax.set_xlim(0, top * 1.08)
    key = "; \u25c6 = the paper's share (App. E.2)" if has_paper.any() else ""
    ax.set_xlabel(f"share of instances (%){key}")
    ax.set_ylabel("label")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return figure


NO_DATA_COLOUR = "0.82"  # a row without transitions: grey, not the white of a 0 share
NO_DATA_TEXT = "no data: no transition out of this pattern"


def transition_matrix(transitions: TransitionStats) -> np.ma.MaskedArray:
    """Fig. 3's matrix as drawn: the row shares, with every row that has no outgoing transition masked (a share
    of nothing is unknown, not 0: drawing it as 0 would read as "never followed by anything")."""
    n = len(transitions.labels)
    matrix = np.array(transitions.row_normalised, dtype=float).reshape(n, n)
    empty = np.array([sum(line) == 0 for line in transitions.counts], dtype=bool).reshape(n, 1)
    return np.ma.masked_array(matrix, mask=np.repeat(empty, n, axis=1))


def transition_figure(transitions: TransitionStats, title: str) -> Figure:
    """Fig. 3: heat map of the row-normalised matrix (from on y, to on x), values in the cells, the diagonal (self
    transitions, excluded) marked with a dash, each row's number of outgoing transitions beside its name; a row
    with none is grey and says "no data" (:func:`transition_matrix`)."""
    labels = transitions.labels
    n = len(labels)
    matrix = transition_matrix(transitions)
    figure = new_figure(3.2 + 1.15 * n, 2.6 + 0.95 * n)
    ax = figure.add_subplot()
    colours = colormaps["Blues"].with_extremes(bad=NO_DATA_COLOUR)
    image = ax.imshow(matrix, cmap=colours, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(n):
        if matrix.mask[i].all():
            ax.text((n - 1) / 2, i, NO_DATA_TEXT, ha="center", va="center", fontsize=9, color="0.25")
            continue
        for j in range(n):
            if i == j:
                ax.text(j, i, "–", ha="center", va="center", color="0.5", fontsize=10)
                continue
            value = matrix[i, j]
            # An empty cell is written "0" in grey so that the cells holding transitions stand out.
            text, colour = (f"{value:.2f}", "white" if value > 0.55 else "k") if value else ("0", "0.6")
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color=colour)
    outgoing = [sum(line) for line in transitions.counts]
    ax.set_xticks(range(n), [_wrap(label_name(k), 14) for k in labels], rotation=90)
    ax.set_yticks(range(n), [f"{label_name(k)} (n = {c:,})" for k, c in zip(labels, outgoing)])
    ax.set_xlabel("to (next, different, relation pattern)")
    ax.set_ylabel("from (n = transitions out of it)")
    ax.set_title(title)
    colour_bar = figure.colorbar(image, ax=ax, fraction=0.05)
    colour_bar.set_label("share of the row's transitions")
    return figure


def position_figure(distribution: PositionDistribution, title: str, colours: dict[str, tuple[float, ...]]) -> Figure:
    """Fig. 5: stacked bars of each label's proportion per relative-position bin, the bin's instance count under
    its name, the legend outside the axes (taxonomy order, top to bottom as stacked)."""
    proportions = np.array(distribution.proportions(), dtype=float).reshape(distribution.bins, len(distribution.labels))
    figure = new_figure(12.5, 5.8)
    ax, key_ax = figure.subplots(1, 2, width_ratios=[4.0, 1.0])
    x = np.arange(distribution.bins)
    bottom = np.zeros(distribution.bins)
    for i, key in enumerate(distribution.labels):
        ax.bar(x, proportions[:, i], bottom=bottom, color=colours[key], width=0.8, edgecolor="white", linewidth=0.5)
        bottom += proportions[:, i]
    ticks = [f"{bin_label(b, distribution.bins)}\nn = {t:,}" for b, t in enumerate(distribution.totals())]
    ax.set_xticks(x, ticks, fontsize=8.5)
    ax.set_ylim(0, 1)
    ax.set_xlabel("relative position in the dialogue (bin; n = gold instances in the bin)")
    ax.set_ylabel("proportion of gold relation patterns")
    ax.set_title(title)
    _colour_key(key_ax, [(colours[k], label_name(k)) for k in reversed(distribution.labels)], "pattern (top to bottom)")
    return figure


def _colour_key(ax: Axes, entries: Sequence[tuple[tuple[float, ...], str]], title: str) -> None:
    """A legend drawn in its own axes beside the plot (so it never covers a bar): a swatch and a name per entry.

    Not ``Axes.legend``: ``document.text_overlaps`` sees a legend entry's text twice (the ``Text`` and the
    ``TextArea`` holding it) and refuses every legend as overlapping itself."""
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(len(entries) + 0.5, -1.2)
    ax.text(0.0, -0.6, title, fontsize=9.5, fontweight="bold", va="center")
    for position, (colour, name) in enumerate(entries):
        ax.add_patch(Rectangle((0.0, position - 0.35), 0.12, 0.7, facecolor=colour, edgecolor="white"))
        ax.text(0.17, position, _wrap(name, 24), fontsize=9, va="center")


# ----- comparisons with the paper -----------------------------------------------------------------------------


def _covered(samples: Sequence[Sample], scenario: Scenario, protocol: RelationProtocol) -> int:
    return sum(1 for s in samples if scenario_of(s) == scenario and relation_labels(s, protocol))


def _table_3_rows(stats: dict[Scope, ScopeStats]) -> list[ComparisonRow]:
    rows = []
    for scope, title in SCOPE_TITLES.items():
        for field, name in TABLE_3_ROWS:
            ours = format_table_3_value(field, getattr(stats[scope], field))
            theirs = format_table_3_value(field, paper.TABLE_3[scope][field])
            rows.append(
                ComparisonRow(what=f"Table 3: {name}", scope=title, ours=ours, paper=theirs, match=ours == theirs)
            )
    return rows


def _share(stats: LabelStats, keys: Sequence[str]) -> float:
    return 100 * sum(stats.shares.get(k, 0.0) for k in keys)


def _names(keys: Sequence[str]) -> str:
    return ", ".join(label_name(k) for k in keys)


def _top(stats: LabelStats, k: int) -> list[str]:
    return [key for key, _ in sorted(stats.counts.items(), key=lambda item: -item[1])[:k]]


def _label_rows(
    stats: dict[Scope, ScopeStats], samples: Sequence[Sample], protocol: RelationProtocol
) -> list[ComparisonRow]:
    rows: list[ComparisonRow] = []
    note = "" if protocol == "paper" else f"protocol {protocol!r}: the paper's relation figures are protocol 'paper'"
    for kind, per_scenario in paper.LABEL_INSTANCES.items():
        task = "RPP" if kind == "relation_patterns" else "SSP"
        for scenario, (instances, covered) in per_scenario.items():
            label_stats: LabelStats = getattr(stats[scenario], kind)
            kind_note = note if kind == "relation_patterns" else ""
            rows.append(
                ComparisonRow(
                    what=f"Table 6: {task} instances ({KIND_TITLES[kind]} labels)",
                    scope=SCOPE_TITLES[scenario],
                    ours=f"{label_stats.total:,}",
                    paper=f"{instances:,}",
                    match=label_stats.total == instances,
                    note=kind_note,
                )
            )
            if kind == "relation_patterns":
                ours = _covered(samples, scenario, protocol)
                rows.append(
                    ComparisonRow(
                        what="Table 6: RPP covered samples",
                        scope=SCOPE_TITLES[scenario],
                        ours=str(ours),
                        paper=str(covered),
                        match=ours == covered,
                        note=kind_note
                        or (
                            "the paper's couple figure is STP's coverage (shared/data/README.md)"
                            if scenario == "couple" and ours != covered
                            else ""
                        ),
                    )
                )
    for kind, per_scenario in paper.LABEL_SHARES.items():
        for scenario, shares in per_scenario.items():
            for key, value in shares.items():
                ours_text, paper_text = _pct(_share(getattr(stats[scenario], kind), [key])), _pct(value)
                rows.append(
                    ComparisonRow(
                        what=f"Fig. {FIGURE_NUMBERS[(kind, scenario)]}: share of {label_name(key)}",
                        scope=SCOPE_TITLES[scenario],
                        ours=ours_text,
                        paper=paper_text,
                        match=ours_text == paper_text,
                        note=note if kind == "relation_patterns" else "",
                    )
                )
    for scenario, (keys, coverage) in paper.TOP_STRATEGY_COVERAGE.items():
        strategy_stats = stats[scenario].strategies
        ours_text, paper_text = _pct(_share(strategy_stats, keys)), _pct(coverage)
        figure = FIGURE_NUMBERS[("strategies", scenario)]
        rows.append(
            ComparisonRow(
                what=f"Fig. {figure}: share of {_names(keys)} together",
                scope=SCOPE_TITLES[scenario],
                ours=ours_text,
                paper=paper_text,
                match=ours_text == paper_text,
            )
        )
        top = _top(strategy_stats, len(keys))
        rows.append(
            ComparisonRow(
                what=f"Fig. {figure}: the {len(keys)} most frequent strategies",
                scope=SCOPE_TITLES[scenario],
                ours=_names(top),
                paper=_names(keys),
                match=set(top) == set(keys),
            )
        )
    for scenario, keys in paper.TOP_RELATIONS.items():
        top = _top(stats[scenario].relation_patterns, len(keys))
        rows.append(
            ComparisonRow(
                what=f"Fig. {FIGURE_NUMBERS[('relation_patterns', scenario)]}: top relation patterns, in order",
                scope=SCOPE_TITLES[scenario],
                ours=_names(top),
                paper=_names(keys),
                match=top == list(keys),
                note=note,
            )
        )
    for scenario, (keys, limit) in paper.RAREST_RELATIONS.items():
        together = _share(stats[scenario].relation_patterns, keys)
        rows.append(
            ComparisonRow(
                what=f"App. E.2: share of {_names(keys)} together",
                scope=SCOPE_TITLES[scenario],
                ours=_pct(together, 2),
                paper=f"< {limit:g} %",
                match=together < limit,
                note=note,
            )
        )
    for scenario, count in paper.RELATIONS_UNDER_10.items():
        under = sum(1 for share in stats[scenario].relation_patterns.shares.values() if share < 0.10)
        rows.append(
            ComparisonRow(
                what="App. E.2: relation patterns under 10 %",
                scope=SCOPE_TITLES[scenario],
                ours=str(under),
                paper=str(count),
                match=under == count,
                note=note,
            )
        )
    return rows


def _transition_rows(transitions: TransitionStats, protocol: RelationProtocol) -> list[ComparisonRow]:
    """Sec. 4.3's reading of Fig. 3 (couple), checked on the couple matrix."""
    note = "" if protocol == "paper" else f"protocol {protocol!r}"
    index = {k: i for i, k in enumerate(transitions.labels)}
    matrix = transitions.row_normalised
    rows = []
    attractor, sources = paper.TRANSITION_ATTRACTOR
    for source in sources:
        line = matrix[index[source]]
        share = line[index[attractor]]
        # "Frequently reappears" (Sec. 4.3) is read as: among the two most frequent next patterns of the row.
        rank = 1 + sum(1 for other in line if other > share)
        rows.append(
            ComparisonRow(
                what=f"Sec. 4.3 / Fig. 3: {label_name(attractor)} after {label_name(source)} (share, rank)",
                scope="Couple",
                ours=f"{share:.2f} (rank {rank} of {len(line) - 1})" if sum(line) else "no transition",
                paper="frequent (top 2)",
                match=bool(sum(line)) and rank <= 2,
                note=note,
            )
        )
    negatives, via, direct = paper.TRANSITION_VIA_REPAIR
    for source in negatives:
        line = matrix[index[source]]
        rows.append(
            ComparisonRow(
                what=f"Sec. 4.3 / Fig. 3: after {label_name(source)}, {label_name(via)} vs {label_name(direct)}",
                scope="Couple",
                ours=f"{line[index[via]]:.2f} vs {line[index[direct]]:.2f}",
                paper=f"{label_name(via)} more often",
                match=line[index[via]] > line[index[direct]],
                note=note,
            )
        )
    return rows


def comparison_rows(
    stats: dict[Scope, ScopeStats], samples: Sequence[Sample], protocol: RelationProtocol = "paper"
) -> list[ComparisonRow]:
    """Every number of ``stats`` that the paper gives (Tables 3 and 6, App. E.2, Sec. 4.3), next to the paper's."""
    rows = _table_3_rows(stats) + _label_rows(stats, samples, protocol)
    if set(paper.TRANSITION_ATTRACTOR[1]) | {paper.TRANSITION_ATTRACTOR[0]} <= set(stats["couple"].transitions.labels):
        rows += _transition_rows(stats["couple"].transitions, protocol)
    return rows


def is_release(dataset: Dataset | Sequence[Sample]) -> bool:
    """Whether ``dataset`` looks like the paper's release: Table 3's samples per scenario and turns. Only there
    are the paper's figures expected back (the demo, a subset or a synthetic set differ by design)."""
    samples = list(dataset)
    counts = {scenario: sum(1 for s in samples if scenario_of(s) == scenario) for scenario in SCENARIOS}
    turns = sum(len(s.rows) for s in samples)
    table = paper.TABLE_3
    return all(counts[s] == table[s]["samples"] for s in SCENARIOS) and turns == table["all"]["turns"]


def paper_comparison(dataset: Dataset | Sequence[Sample], protocol: RelationProtocol = "paper") -> list[ComparisonRow]:
    """The dataset's numbers next to the paper's, one row each (what the CLI prints)."""
    samples = list(dataset)
    return comparison_rows(dataset_stats(samples, protocol), samples, protocol)


# ----- the report ---------------------------------------------------------------------------------------------


def _bold_unless(ok: bool | None, text: str) -> str:
    return text if ok in (True, None) else f"**{text}**"


def _table_3(report: Report, stats: dict[Scope, ScopeStats]) -> None:
    report.heading("Table 3: corpus statistics")
    header = ["Statistic"]
    for title in SCOPE_TITLES.values():
        header += [title, f"{title} (paper)"]
    rows = []
    for field, name in TABLE_3_ROWS:
        row = [name]
        for scope in SCOPE_TITLES:
            ours = format_table_3_value(field, getattr(stats[scope], field))
            theirs = format_table_3_value(field, paper.TABLE_3[scope][field])
            row += [_bold_unless(ours == theirs, ours), theirs]
        rows.append(row)
    report.table(header, rows)
    report.paragraph(
        "Minutes are the last row's `end_time` of each sample; speakers are the distinct `primary_speaker` values "
        "(therapist and group pseudo-speakers included), as in the paper. Values that differ from the paper's at "
        "the paper's precision are **bold**."
    )


def _label_section(
    report: Report, stats: dict[Scope, ScopeStats], kind: LabelKind, scenario: Scenario, protocol: RelationProtocol
) -> None:
    number = FIGURE_NUMBERS[(kind, scenario)]
    label_stats: LabelStats = getattr(stats[scenario], kind)
    what = KIND_TITLES[kind]
    task = "RPP" if kind == "relation_patterns" else "SSP"
    report.heading(f"Figure {number}: {what} labels, {scenario}", level=3)
    if not label_stats.total:
        report.paragraph(f"No {task} instance in the {scenario} samples: nothing to plot.")
        return
    frame = label_frame(label_stats, kind, scenario)
    name = f"fig{number}_{scenario}_{kind}"
    title = f"Fig. {number}: {what} labels, {scenario} ({label_stats.total:,} {task} instances)"
    figure = label_shares_figure(frame, title, label_colours(_taxonomy(kind, scenario)))
    rule = (
        f"the RPP rows of protocol `{protocol}`"
        if kind == "relation_patterns"
        else "therapist rows with an in-taxonomy first strategy and a resolvable target (the SSP rows, App. C)"
    )
    report.figure(
        figure,
        name,
        f"Share of each {what} label over {rule}, {scenario} samples; the count is in brackets. Numbers: "
        f"`figures/{name}.csv`.",
        data=frame,
    )
    rows = [
        [
            name_,
            f"{count:,}",
            _pct(share),
            "" if np.isnan(theirs) else _pct(theirs),
        ]
        for name_, count, share, theirs in zip(
            frame["name"], frame["count"], frame["share_pct"], frame["paper_share_pct"]
        )
    ]
    report.table(["Label", "Count", "Share", "Paper (App. E.2)"], rows)


def _transition_section(report: Report, stats: dict[Scope, ScopeStats], protocol: RelationProtocol) -> None:
    report.heading("Figure 3: relation-pattern transitions")
    report.paragraph(
        "Transitions between consecutive gold relation-pattern labels of a sample (its RPP rows in row order, "
        f"protocol `{protocol}`), self-transitions (a label followed by itself) dropped, each row normalised to 1. "
        "The paper's Figure 3 is the couple matrix (Sec. 4.3); the family labels differ, so they get their own."
    )
    for scenario in SCENARIOS:
        transitions = stats[scenario].transitions
        outgoing = [sum(line) for line in transitions.counts]
        if not sum(outgoing):
            report.paragraph(f"No relation-pattern transition in the {scenario} samples: nothing to plot.")
            continue
        name = f"fig3_{scenario}_transitions"
        title = f"Fig. 3: relation-pattern transitions, {scenario} (row-normalised, self-transitions excluded)"
        silent = [label_name(k) for k, c in zip(transitions.labels, outgoing) if not c]
        zero_rows = " A label with no outgoing transition has a grey row marked no data" + (
            f": {', '.join(silent)}." if silent else " (none here)."
        )
        report.figure(
            transition_figure(transitions, title),
            name,
            f"Row-normalised transition matrix, {scenario}: the share of transitions out of the row's pattern (y, "
            f"from) into the column's (x, to); n = transitions out of the row ({sum(outgoing):,} in all). The "
            f"diagonal is excluded (dash).{zero_rows} Numbers: `figures/{name}.csv`.",
            data=transition_frame(transitions),
        )


def _position_section(report: Report, positions: dict[Scope, PositionDistribution], protocol: RelationProtocol) -> None:
    report.heading("Figure 5: gold relation patterns by relative position")
    report.paragraph(
        f"Each RPP instance (protocol `{protocol}`) falls in the bin of its row: row position × 10 // the sample's "
        "rows, 0-10 % ... 90-100 % of the dialogue (Figs. 4-5). Bars show each label's proportion within the bin."
    )
    for scenario in SCENARIOS:
        distribution = positions[scenario]
        if not distribution.total():
            report.paragraph(f"No RPP instance in the {scenario} samples: nothing to plot.")
            continue
        name = f"fig5_{scenario}_position"
        title = f"Fig. 5: gold relation-pattern distribution by relative position, {scenario}"
        colours = label_colours(relation_patterns(scenario).keys())
        report.figure(
            position_figure(distribution, title, colours),
            name,
            f"Proportion of each gold relation pattern per relative-position bin, {scenario} "
            f"({distribution.total():,} instances; n under each bin). Numbers: `figures/{name}.csv`.",
            data=position_frame(distribution),
        )
    header = ["Bin", *(SCOPE_TITLES[s] for s in SCENARIOS), "Both"]
    bins = positions["all"].bins
    totals = {scope: positions[scope].totals() for scope in ("couple", "family", "all")}
    rows = [
        [bin_label(b, bins), *(f"{totals[s][b]:,}" for s in SCENARIOS), f"{totals['all'][b]:,}"] for b in range(bins)
    ]
    rows.append(["All", *(f"{positions[s].total():,}" for s in SCENARIOS), f"{positions['all'].total():,}"])
    report.paragraph("Instances per bin:")
    report.table(header, rows)


def _comparison_section(report: Report, rows: Sequence[ComparisonRow]) -> None:
    report.heading("Comparison with the paper")
    matched = sum(1 for r in rows if r.match)
    report.paragraph(
        f"{matched} of {len(rows)} figures match the paper at its precision (mismatches in **bold**). The paper's "
        "figures are those of its release; a different dataset (the shipped demo is synthetic) is not expected to "
        "match."
    )
    mark = {True: "yes", False: "**no**", None: ""}
    report.table(
        ["What", "Scope", "Ours", "Paper", "Match", "Note"],
        [[r.what, r.scope, _bold_unless(r.match, r.ours), r.paper, mark[r.match], r.note] for r in rows],
    )


def dataset_report(dataset: Dataset, output: Path, protocol: RelationProtocol = "paper") -> Report:
    """Build the dataset report (Table 3, Figs. 3 and 5-9, the paper comparison) into ``output``; figures and their
    CSVs are written to ``output/figures`` now, ``report.md``/``report.html`` by the caller's ``.write()``."""
    samples = list(dataset)
    stats = dataset_stats(samples, protocol)
    positions = position_distribution(samples, protocol)
    report = Report("RESCUE-Bench dataset report", Path(output))
    source = getattr(dataset, "source", "samples")
    digest = getattr(dataset, "sha256", "")
    counts = ", ".join(f"{stats[s].samples} {s}" for s in SCENARIOS)
    report.paragraph(
        f"Data: `{source}`" + (f" (sha256 `{digest[:16]}`)" if digest else "") + f": {len(samples)} samples "
        f"({counts}). Relation labels: protocol `{protocol}` (`rescue_env.data.domain.relation_labels`)."
    )
    _table_3(report, stats)
    report.heading("Figures 6-9: label distributions")
    for kind in ("relation_patterns", "strategies"):
        for scenario in SCENARIOS:
            _label_section(report, stats, kind, scenario, protocol)
    report.heading("Most frequent strategies together", level=3)
    coverage_rows = []
    for scenario, (keys, coverage) in paper.TOP_STRATEGY_COVERAGE.items():
        coverage_rows.append(
            [SCOPE_TITLES[scenario], _names(keys), _pct(_share(stats[scenario].strategies, keys)), _pct(coverage)]
        )
    report.table(["Scope", "Strategies", "Share together", "Paper (App. E.2)"], coverage_rows)
    _transition_section(report, stats, protocol)
    _position_section(report, positions, protocol)
    _comparison_section(report, comparison_rows(stats, samples, protocol))
    return report
