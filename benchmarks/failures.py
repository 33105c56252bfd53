"""How many failed model calls a run tolerates, and how failures are reported: once per distinct error, counted.

- :class:`FailureBudget` is ``--max-failures``: ``N`` (an absolute number of failed requests) or ``P%`` (a share
  of the requests planned in this invocation, rounded down). ``0`` stops at the first failure.
- :class:`ErrorTally` collects the errors of failed calls (after the client's retries), grouped by cause (elapsed
  times, request ids and other per-call numbers do not count): the first occurrence of each is printed to stderr
  once, repeats are only counted; :meth:`ErrorTally.summary` gives ``"37x <error>"`` lines for the end of the
  run, and :meth:`ErrorTally.check` raises :class:`FailureBudgetExceeded` once more calls failed than the budget
  allows.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from typing import TextIO

from pydantic import BaseModel, ConfigDict

__all__ = ["FailureBudget", "FailureBudgetExceeded", "ErrorTally", "DEFAULT_BUDGET", "error_key"]

DEFAULT_BUDGET = "20%"
_SPEC = re.compile(r"^(\d+(?:\.\d+)?)(%?)$")


class FailureBudget(BaseModel):
    """``--max-failures``: ``count`` failed requests, or ``percent`` % of the planned ones (exactly one is set)."""

    model_config = ConfigDict(frozen=True)

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> FailureBudget:
        """``"20%"``, ``"100%"``, ``"0"``, ``"15"``; anything else (``-1``, ``abc``, ``120%``, ``1.5``): ValueError."""
        match = _SPEC.match(str(text).strip())
        if match is None:
            raise ValueError(f"--max-failures must be N (a count >= 0) or P% (0-100%), got {text!r}")
        number, percent = match.groups()
        if percent:
            value = float(number)
            if value > 100:
                raise ValueError(f"--max-failures percentage must be at most 100%, got {text!r}")
            return cls(percent=value)
        if "." in number:
            raise ValueError(f"--max-failures count must be a whole number, got {text!r}")
        return cls(count=int(number))

    @property
    def spec(self) -> str:
        """The budget as written on the command line (``"20%"``, ``"15"``)."""
        if self.percent is not None:
            return f"{self.percent:g}%"
        return str(self.count if self.count is not None else 0)

    def limit(self, planned: int) -> int:
        """Failed requests allowed when ``planned`` requests are planned (``P%``: floor(P/100 x planned))."""
        if self.percent is not None:
            return math.floor(self.percent * max(0, planned) / 100 + 1e-9)
        return int(self.count or 0)

    def __str__(self) -> str:
        return self.spec


class FailureBudgetExceeded(Exception):
    """More model calls failed than ``--max-failures`` allows: the run stops (what it has is kept)."""

    def __init__(self, failures: int, limit: int) -> None:
        super().__init__(f"{failures} failed model calls, more than the {limit} allowed by --max-failures")
        self.failures = failures
        self.limit = limit


# What varies from one call to the next in the error texts of litellm, openai and httpx although the cause is the
# same: litellm's "timeout value=10.0, time taken=10.03 seconds", "LiteLLM Retried: 2 times", request and
# completion ids, timestamps, "Please try again in 1.2s", token counts ("Used 9876", "resulted in 9321 tokens").
# Replaced in the grouping key only; the message shown is the first one seen, in full. Integers of up to three
# digits are kept (HTTP status codes, small settings: they tell causes apart), and so are dotted addresses.
_VARYING: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?:req|chatcmpl|cmpl|resp|msg|run|trace)[-_][A-Za-z0-9_-]+"), "<id>"),
    (re.compile(r"(request[ _-]?id\W{0,3})[A-Za-z0-9_-]+", re.I), r"\1<id>"),
    (re.compile(r"\b[0-9a-f]{16,}\b", re.I), "<id>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|secs?|seconds?)\b", re.I), "<n>s"),
    (re.compile(r"(retried:?\s*)\d+", re.I), r"\1<n>"),
    (re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])|\d{4,}"), "<n>"),  # (not in an address: 10.0.0.5 stays)
)


_CUT_KEY = 200
"""Characters of a cut text's key (``agents.client`` cuts error texts at 300): well before the cut, which a longer
or shorter varying number earlier in the text moves."""


def error_key(error: str) -> str:
    """The cause of an error text, for grouping: the text without what varies per call (``_VARYING``); of a text
    cut at the client's length limit (ending in "..."), only the first ``_CUT_KEY`` characters, so that two texts
    of one cause cut at different places still agree."""
    cut = error.endswith("...")
    key = error[:-3] if cut else error
    for pattern, replacement in _VARYING:
        key = pattern.sub(replacement, key)
    return key[:_CUT_KEY] + "..." if cut else key


class ErrorTally:
    """Errors of failed calls, grouped by cause (:func:`error_key`): each cause printed once (to ``stream``,
    default stderr), with the first full message seen; all counted. ``counts`` maps that message to the count."""

    def __init__(self, stream: TextIO | None = None, prefix: str = "warning: model call failed") -> None:
        self.counts: Counter[str] = Counter()
        self._shown: dict[str, str] = {}  # cause key -> the message shown for it (its first occurrence)
        self._stream = stream
        self._prefix = prefix

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, error: str) -> None:
        error = " ".join(str(error).split()) or "unknown error"
        key = error_key(error)
        if key not in self._shown:
            self._shown[key] = error
            print(f"{self._prefix}: {error} (repeats are counted, not printed)", file=self._stream or sys.stderr)
        self.counts[self._shown[key]] += 1

    def summary(self) -> list[str]:
        """``"37x <error>"`` lines, most frequent first (ties: first seen first)."""
        return [f"{n}x {error}" for error, n in self.counts.most_common()]

    def check(self, budget_limit: int) -> None:
        """Raise :class:`FailureBudgetExceeded` when more calls failed than ``budget_limit``."""
        if self.total > budget_limit:
            raise FailureBudgetExceeded(self.total, budget_limit)
