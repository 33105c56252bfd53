"""benchmarks/failures.py: the --max-failures budget and the once-per-distinct-error tally."""

from __future__ import annotations

import io

import pytest

from benchmarks.failures import ErrorTally, FailureBudget, FailureBudgetExceeded


@pytest.mark.parametrize(
    ("text", "planned", "allowed", "spec"),
    [
        ("20%", 100, 20, "20%"),
        ("20%", 9, 1, "20%"),  # floor(1.8)
        ("20%", 4, 0, "20%"),
        ("20%", 0, 0, "20%"),
        ("100%", 37, 37, "100%"),
        ("0%", 50, 0, "0%"),
        ("12.5%", 8, 1, "12.5%"),
        ("0", 1000, 0, "0"),
        ("15", 3, 15, "15"),
        (" 7 ", 1, 7, "7"),
    ],
)
def test_budget_parse_and_limit(text: str, planned: int, allowed: int, spec: str) -> None:
    budget = FailureBudget.parse(text)
    assert budget.limit(planned) == allowed
    assert budget.spec == spec and str(budget) == spec


@pytest.mark.parametrize("text", ["-1", "abc", "120%", "1.5", "", "%", "20%%", "-5%", "1e3"])
def test_budget_rejects_anything_else_with_one_line(text: str) -> None:
    with pytest.raises(ValueError) as info:
        FailureBudget.parse(text)
    assert "\n" not in str(info.value) and "--max-failures" in str(info.value)


def test_tally_prints_each_distinct_error_once_and_counts_all() -> None:
    stream = io.StringIO()
    tally = ErrorTally(stream=stream)
    for _ in range(37):
        tally.add("InternalServerError: boom")
    tally.add("Timeout: slow")
    tally.add("Timeout:   slow\n")  # same error once whitespace is normalised
    lines = stream.getvalue().splitlines()
    assert lines == [
        "warning: model call failed: InternalServerError: boom (repeats are counted, not printed)",
        "warning: model call failed: Timeout: slow (repeats are counted, not printed)",
    ]
    assert tally.total == 39 and tally.counts["Timeout: slow"] == 2
    assert tally.summary() == ["37x InternalServerError: boom", "2x Timeout: slow"]


def test_tally_defaults_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    tally = ErrorTally()
    tally.add("x")
    tally.add("x")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("model call failed: x") == 1


def test_tally_check_raises_past_the_limit() -> None:
    tally = ErrorTally(stream=io.StringIO())
    tally.check(0)  # nothing failed yet
    tally.add("a")
    tally.check(1)  # at the limit is still fine
    tally.add("b")
    with pytest.raises(FailureBudgetExceeded) as info:
        tally.check(1)
    assert (info.value.failures, info.value.limit) == (2, 1)
    assert "more than the 1 allowed" in str(info.value)
