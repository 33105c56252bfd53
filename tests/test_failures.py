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


# litellm's timeout text (llms/openai/openai.py appends the configured timeout and the elapsed time).
TIMEOUT = (
    "Timeout: APITimeoutError - Request timed out. Error_str: Request timed out. - timeout value=10.0, "
    "time taken={} seconds LiteLLM Retried: {} times, LiteLLM Max Retries: 4"
)


def test_tally_groups_errors_that_differ_only_in_elapsed_time() -> None:
    stream = io.StringIO()
    tally = ErrorTally(stream=stream)
    tally.add(TIMEOUT.format("10.03", 4))
    tally.add(TIMEOUT.format("10.41", 4))
    assert tally.summary() == [f"2x {TIMEOUT.format('10.03', 4)}"]  # the first full message is the one shown
    assert stream.getvalue().count("model call failed") == 1


def test_tally_keeps_different_causes_apart() -> None:
    tally = ErrorTally(stream=io.StringIO())
    tally.add(TIMEOUT.format("10.03", 4))
    tally.add("RateLimitError: Error code: 429 - Rate limit reached (request id: req_8f2a1c9e0b). Used 9876")
    tally.add(TIMEOUT.format("12.5", 2))
    tally.add("RateLimitError: Error code: 429 - Rate limit reached (request id: req_77c0d1e2ff). Used 9990")
    tally.add("InternalServerError: Error code: 500 - boom")
    tally.add("InternalServerError: Error code: 503 - boom")  # another status code: another cause
    assert [line.split(" ", 1)[0] for line in tally.summary()] == ["2x", "2x", "1x", "1x"]
    assert tally.total == 6 and len(tally.counts) == 4


def test_tally_groups_texts_cut_at_the_length_limit() -> None:
    """The client cuts long texts: a longer elapsed time moves the cut, the cause is the same."""
    tally = ErrorTally(stream=io.StringIO())
    for elapsed in ("9.5", "10.03", "120.41", "0.7"):
        for retries in (1, 12):
            text = TIMEOUT.format(elapsed, retries) + " and more detail" * 30
            tally.add(text[:297] + "...")  # as agents.client._short_error cuts it
    assert tally.total == 8 and len(tally.counts) == 1


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (
            "RateLimitError: Used 199500, Requested 1200. Please try again in 210ms.",
            "RateLimitError: Used 199880, Requested 1350. Please try again in 1.5s.",
            True,
        ),
        ("BadRequestError: request_id=abc123XYZ bad input", "BadRequestError: request_id=zz98 bad input", True),
        ("APIError: at 2025-01-02T10:11:12.345Z failed", "APIError: at 2025-03-04T00:00:01Z failed", True),
        ("APIConnectionError: http://10.0.0.5:8000/v1", "APIConnectionError: http://10.0.0.6:8000/v1", False),
        ("APIStatusError: Error code: 400 - bad", "APIStatusError: Error code: 422 - bad", False),
    ],
)
def test_error_key_strips_what_varies_per_call_only(first: str, second: str, same: bool) -> None:
    from benchmarks.failures import error_key

    assert (error_key(first) == error_key(second)) is same
