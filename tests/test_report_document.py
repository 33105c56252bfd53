"""The report writer every report shares (benchmarks/reports/document.py): Markdown with PNGs beside it, a
self-contained HTML page, and the refusal of a figure whose labels overlap."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from matplotlib.image import imread

from benchmarks.reports.document import OverlappingText, Report, new_figure, text_overlaps


def _bars(width: float, labels: list[str]):
    figure = new_figure(width, 3)
    axes = figure.add_subplot()
    axes.bar(range(len(labels)), range(len(labels)), label="count")
    axes.set_xticks(range(len(labels)), labels)
    axes.set_title("title")
    axes.legend()
    return figure


def test_overlapping_tick_labels_are_found_and_legends_are_not() -> None:
    cramped = _bars(2, [f"a long label {i}" for i in range(8)])
    assert ("a long label 0", "a long label 1") in text_overlaps(cramped)
    assert text_overlaps(_bars(8, ["one", "two", "three"])) == []  # the legend's text is not compared with itself


def test_a_report_is_written_as_markdown_and_self_contained_html(tmp_path: Path) -> None:
    report = Report("A title", tmp_path / "out")
    report.heading("Section")
    report.paragraph("Some **bold** and `code` <escaped>.")
    report.table(["metric", "value"], [["a|b", "**1.00**"], ["c", 2]])
    path = report.figure(_bars(8, ["one", "two", "three"]), "bars", "A caption")
    markdown, page = report.write()
    assert path == tmp_path / "out" / "figures" / "bars.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and imread(path).shape[0] > 100
    text = markdown.read_text()
    assert "# A title" in text and "![A caption](figures/bars.png)" in text and "| a\\|b | **1.00** |" in text
    html = page.read_text()
    assert "<b>bold</b>" in html and "<code>code</code>" in html and "&lt;escaped&gt;" in html
    assert "<td><b>1.00</b></td>" in html
    embedded = html.split('src="data:image/png;base64,')[1].split('"')[0]
    assert base64.b64decode(embedded) == path.read_bytes()


def test_a_figure_with_overlapping_labels_is_refused(tmp_path: Path) -> None:
    report = Report("T", tmp_path)
    with pytest.raises(OverlappingText, match="overlapping labels"):
        report.figure(_bars(2, [f"a long label {i}" for i in range(8)]), "cramped", "caption")
    assert not (tmp_path / "figures" / "cramped.png").exists()
    with pytest.raises(ValueError, match="letters, digits"):
        report.figure(_bars(8, ["a"]), "../escape", "caption")


def test_a_label_cut_off_at_the_edge_is_refused_and_data_goes_beside_the_png(tmp_path: Path) -> None:
    import pandas as pd

    from benchmarks.reports.document import clipped_texts

    figure = new_figure(4, 3)
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1])
    figure.text(0.9, 0.5, "a note that runs off the right edge")
    assert clipped_texts(figure) == ["a note that runs off the right edge"]
    report = Report("T", tmp_path)
    with pytest.raises(OverlappingText, match="cut off"):
        report.figure(figure, "clipped", "caption")
    report.figure(_bars(8, ["a", "b"]), "bars", "caption", data=pd.DataFrame({"x": [1, 2]}))
    assert pd.read_csv(tmp_path / "figures" / "bars.csv").x.tolist() == [1, 2]
