"""A property test of the loader: random corruptions of the demo file never raise a traceback. Each bad sample
becomes one problem line naming the file and the line, and the good samples still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescue_env.data import DataError, load_dataset
from rescue_env.data.loading import demo_path

LINES = demo_path().read_text(encoding="utf-8").splitlines()
ROW_FIELDS = sorted(json.loads(LINES[0])["rows"][0])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@st.composite
def corruptions(draw) -> tuple[int, bytes]:
    """(line index, the corrupted line) for one of several kinds of damage."""
    index = draw(st.integers(0, len(LINES) - 1))
    line = LINES[index]
    kind = draw(st.sampled_from(["truncate", "bytes", "value", "drop", "rows", "wrap"]))
    if kind == "truncate":
        return index, line[: draw(st.integers(0, len(line) - 1))].encode()
    if kind == "bytes":
        at = draw(st.integers(0, len(line)))
        return index, line[:at].encode() + draw(st.binary(min_size=1, max_size=6)) + line[at:].encode()
    record = json.loads(line)
    if kind == "wrap":
        return index, json.dumps([record] if draw(st.booleans()) else "text").encode()
    if kind == "rows":
        record["rows"] = draw(json_values)
        return index, json.dumps(record).encode()
    row = draw(st.integers(0, len(record["rows"]) - 1))
    field = draw(st.sampled_from(ROW_FIELDS))
    if kind == "drop":
        record["rows"][row].pop(field, None)
    else:
        record["rows"][row][field] = draw(json_values)
    return index, json.dumps(record).encode()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(corruptions(), min_size=1, max_size=3))
def test_random_corruptions_give_one_problem_line_each(tmp_path_factory: pytest.TempPathFactory, damage) -> None:
    lines = [line.encode() for line in LINES]
    for index, corrupted in damage:
        lines[index] = corrupted
    path = Path(tmp_path_factory.mktemp("fuzz")) / "d.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        dataset = load_dataset(path)
    except DataError as exc:  # e.g. nothing valid left: one clear message, still no traceback
        assert str(exc).strip() and all(line.startswith("d.jsonl") for line in str(exc).splitlines())
        return
    report = dataset.report
    assert report.samples_loaded + report.samples_skipped == report.samples_read
    assert len(report.problems) == report.samples_skipped
    for problem in report.problems:
        text = str(problem)
        assert "\n" not in text and text.startswith(f"d.jsonl:{problem.line}")
    untouched = {LINES[i] for i in range(len(LINES))} - {LINES[i] for i, _ in damage}
    assert report.samples_loaded >= len(untouched)
