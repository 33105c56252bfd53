"""How many failed model calls a run tolerates, and how failures are reported: once per distinct error, counted.

- :class:`FailureBudget` is ``--max-failures``: ``N`` (an absolute number of failed requests) or ``P%`` (a share
  of the requests planned in this invocation, rounded down). ``0`` stops at the first failure.
- :class:`ErrorTally` collects the errors of failed calls (after the client's retries): the first occurrence of
  each distinct error is printed to stderr once, repeats are only counted; :meth:`ErrorTally.summary` gives
  ``"37x <error>"`` lines for the end of the run, and :meth:`ErrorTally.check` raises
  :class:`FailureBudgetExceeded` once more calls failed than the budget allows.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from typing import TextIO

from pydantic import BaseModel, ConfigDict

__all__ = ["FailureBudget", "FailureBudgetExceeded", "ErrorTally", "DEFAULT_BUDGET"]

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


class ErrorTally:
    """Errors of failed calls: each distinct one printed once (to ``stream``, default stderr), all counted."""

    def __init__(self, stream: TextIO | None = None, prefix: str = "warning: model call failed") -> None:
        self.counts: Counter[str] = Counter()
        self._stream = stream
        self._prefix = prefix

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, error: str) -> None:
        error = " ".join(str(error).split()) or "unknown error"
        if error not in self.counts:
            print(f"{self._prefix}: {error} (repeats are counted, not printed)", file=self._stream or sys.stderr)
        self.counts[error] += 1

    def summary(self) -> list[str]:
        """``"37x <error>"`` lines, most frequent first (ties: first seen first)."""
        return [f"{n}x {error}" for error, n in self.counts.most_common()]

    def check(self, budget_limit: int) -> None:
        """Raise :class:`FailureBudgetExceeded` when more calls failed than ``budget_limit``."""
        if self.total > budget_limit:
            raise FailureBudgetExceeded(self.total, budget_limit)
