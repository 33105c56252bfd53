"""One report, written twice: ``report.md`` (PNGs beside it, under ``figures/``) and a self-contained
``report.html`` (the same PNGs embedded as data URIs, so the file can be mailed or attached as it is).

A report is a list of blocks (headings, paragraphs, tables, figures) built in reading order; every kind of report
(``benchmarks.reports.dataset``, ``.run``, ``.compare``, ``.rollout``) builds one and calls ``write``.

Figures are ``matplotlib.figure.Figure`` objects made with :func:`new_figure`: no ``pyplot``, so no global state
and no GUI backend, whatever ``MPLBACKEND`` says (the Agg canvas renders the PNG). ``Report.figure`` checks that
no two text labels of the figure overlap, and that none is cut off at its edge, before it saves it (with the
numbers it plots as a CSV beside the PNG): a figure a reader cannot read is a bug, and the check makes it a
failing test instead of something noticed later.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.text import Text

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["OverlappingText", "Report", "clipped_texts", "new_figure", "text_overlaps"]

DPI = 110
FIGURES = "figures"


class OverlappingText(ValueError):
    """Two text labels of a figure overlap (the figure would be unreadable)."""


def new_figure(width: float = 7.0, height: float = 4.0, **kwargs: Any) -> Figure:
    """A figure with the constrained layout (titles, labels and colour bars keep clear of each other)."""
    return Figure(figsize=(width, height), layout="constrained", **kwargs)


def _text_boxes(figure: Figure) -> tuple[list[tuple[str, Any]], int, int]:
    """The rendered boxes of the visible, non-empty texts of ``figure`` (one draw), and the canvas size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    hidden = _undrawn_tick_labels(figure)
    boxes = []
    # Text artists only: a legend entry is also held by a TextArea (an offset box) that would otherwise be
    # compared with its own text and always "overlap" it.
    for artist in figure.findobj(Text):
        text = artist.get_text()
        if not text.strip() or not artist.get_visible() or id(artist) in hidden:
            continue
        box = artist.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((text, box))
    width, height = canvas.get_width_height()
    return boxes, width, height


def _overlapping(boxes: Sequence[tuple[str, Any]], tolerance: float) -> list[tuple[str, str]]:
    found = []
    for i, (text_a, a) in enumerate(boxes):
        for text_b, b in boxes[i + 1 :]:
            dx = min(a.x1, b.x1) - max(a.x0, b.x0)
            dy = min(a.y1, b.y1) - max(a.y0, b.y0)
            if dx > tolerance and dy > tolerance:
                found.append((text_a, text_b))
    return found


def _outside(boxes: Sequence[tuple[str, Any]], width: int, height: int, tolerance: float) -> list[str]:
    return [
        text
        for text, box in boxes
        if box.x0 < -tolerance or box.y0 < -tolerance or box.x1 > width + tolerance or box.y1 > height + tolerance
    ]


def text_overlaps(figure: Figure, tolerance: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of ``figure`` whose rendered boxes overlap by more than ``tolerance``
    pixels each way: tick labels, axis labels, titles, legend entries, annotations, cell values."""
    boxes, _, _ = _text_boxes(figure)
    return _overlapping(boxes, tolerance)


def clipped_texts(figure: Figure, tolerance: float = 1.0) -> list[str]:
    """The visible texts of ``figure`` that stick out of it, so the PNG cuts them off (e.g. a legend too wide)."""
    boxes, width, height = _text_boxes(figure)
    return _outside(boxes, width, height, tolerance)


def _undrawn_tick_labels(figure: Figure) -> set[int]:
    """Tick labels outside their axis' view limits: matplotlib keeps them as visible texts but never draws them."""
    hidden: set[int] = set()
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            margin = 1e-9 * max(1.0, abs(high - low))
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not low - margin <= tick.get_loc() <= high + margin:
                    hidden.update({id(tick.label1), id(tick.label2)})
    return hidden


@dataclass
class _Block:
    kind: str  # heading | paragraph | table | figure | code
    text: str = ""
    level: int = 2
    header: Sequence[str] = ()
    rows: Sequence[Sequence[str]] = ()
    path: str = ""
    png: bytes = b""


@dataclass
class Report:
    """Blocks in reading order, written by :meth:`write` to ``output/report.md``, ``output/report.html`` and
    ``output/figures/*.png``."""

    title: str
    output: Path
    blocks: list[_Block] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.output = Path(self.output)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(_Block("heading", text=text, level=level))

    def paragraph(self, text: str) -> None:
        """Markdown with ``**bold**`` and ```code``` only (the HTML writer renders just those)."""
        self.blocks.append(_Block("paragraph", text=text))

    def code(self, text: str) -> None:
        self.blocks.append(_Block("code", text=text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Cells are shown as given (``**x**`` is bold); numbers should already be formatted."""
        self.blocks.append(_Block("table", header=list(header), rows=[[str(c) for c in r] for r in rows]))

    def figure(
        self, figure: Figure, name: str, caption: str, data: pd.DataFrame | None = None, check_text: bool = True
    ) -> Path:
        """Save ``figure`` as ``figures/<name>.png`` (and ``data``, the numbers it plots, as ``figures/<name>.csv``)
        and add it with its caption. :class:`OverlappingText` if two of its labels overlap or one is cut off at
        its edge (``check_text=False`` skips both checks)."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"figure name {name!r}: letters, digits, '_', '-' and '.' only")
        if check_text:
            boxes, width, height = _text_boxes(figure)
            overlaps = _overlapping(boxes, 1.0)
            if overlaps:
                a, b = overlaps[0]
                raise OverlappingText(f"figure {name}: {len(overlaps)} overlapping labels, e.g. {a!r} and {b!r}")
            cut = _outside(boxes, width, height, 1.0)
            if cut:
                raise OverlappingText(f"figure {name}: {len(cut)} label(s) cut off at its edge, e.g. {cut[0]!r}")
        path = self.output / FIGURES / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=DPI)
        if data is not None:
            data.to_csv(path.with_suffix(".csv"), index=False)
        self.figures.append(path)
        self.blocks.append(_Block("figure", text=caption, path=f"{FIGURES}/{name}.png", png=path.read_bytes()))
        return path

    # ----- writers ------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        parts = [f"# {self.title}", ""]
        for block in self.blocks:
            if block.kind == "heading":
                parts += ["#" * block.level + " " + block.text, ""]
            elif block.kind == "paragraph":
                parts += [block.text, ""]
            elif block.kind == "code":
                parts += ["```", block.text, "```", ""]
            elif block.kind == "table":
                parts.append("| " + " | ".join(_md_cell(c) for c in block.header) + " |")
                parts.append("|" + "|".join("---" for _ in block.header) + "|")
                parts += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
                parts.append("")
            elif block.kind == "figure":
                parts += [f"![{block.text}]({block.path})", "", f"*{block.text}*", ""]
        return "\n".join(parts)

    def html(self) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for block in self.blocks:
            if block.kind == "heading":
                level = min(max(block.level, 2), 6)
                body.append(f"<h{level}>{_inline(block.text)}</h{level}>")
            elif block.kind == "paragraph":
                body.append(f"<p>{_inline(block.text)}</p>")
            elif block.kind == "code":
                body.append(f"<pre>{html.escape(block.text)}</pre>")
            elif block.kind == "table":
                head = "".join(f"<th>{_inline(c)}</th>" for c in block.header)
                rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in block.rows)
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif block.kind == "figure":
                data = base64.b64encode(block.png).decode("ascii")
                caption = _inline(block.text)
                body.append(
                    f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(block.text)}">'
                    f"<figcaption>{caption}</figcaption></figure>"
                )
        return _PAGE.format(title=html.escape(self.title), body="\n".join(body))

    def write(self) -> tuple[Path, Path]:
        """Write ``report.md`` and ``report.html``; their paths."""
        self.output.mkdir(parents=True, exist_ok=True)
        markdown = self.output / "report.md"
        page = self.output / "report.html"
        markdown.write_text(self.markdown(), encoding="utf-8")
        page.write_text(self.html(), encoding="utf-8")
        return markdown, page


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    escaped = html.escape(str(text))
    escaped = _CODE.sub(r"<code>\1</code>", escaped)
    return _BOLD.sub(r"<b>\1</b>", escaped)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
thead {{ background: #f2f2f2; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }}
figcaption {{ font-size: 0.9em; color: #555; }}
pre {{ background: #f6f6f6; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; }}
code {{ background: #f2f2f2; padding: 0 0.2em; }}
</style></head>
<body>
{body}
</body></html>
"""
