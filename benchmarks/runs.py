"""The run directory shared by ``rescue-bench evaluate`` (``benchmarks.runner``) and ``rescue-bench rollout``
(``benchmarks.rollout``): how a run calls its models (``RunOptions``, ``ModelRun``), its ``config.json``, the rule
that a directory only ever holds one setting, atomic writes, the progress bar and the prompt hash that records a
request without its text."""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from agents.messages import prompt_hash  # re-exported: the agents record their requests by it too
from benchmarks.failures import DEFAULT_BUDGET, ErrorTally, FailureBudget
from rescue_env.data import Dataset

__all__ = [
    "ModelRun",
    "Progress",
    "RunOptions",
    "atomic_write",
    "check_same_settings",
    "prompt_hash",
    "versions",
    "write_config",
]


@dataclass(frozen=True)
class RunOptions:
    """How a run calls its models and shows progress. None of it changes results, so none of it is a result key:
    a resumed run may change any of these. ``command`` is what ``config.json`` records (default ``sys.argv``);
    ``cache_dir`` defaults to ``OUTPUT/cache``; ``max_failures`` is the failure budget (``"20%"``, ``"0"``, a
    ``FailureBudget``); ``tally`` collects the errors of failed calls (a fresh one by default)."""

    command: Sequence[str] | None = None
    max_connections: int = 8
    workers: int = 1
    """Processes that send the model requests (``agents.client.LLMClient``'s ``workers``): litellm's CPU per
    request limits one process, so several connections' worth of answers per second may need more than one."""
    cache_dir: str | Path | None = None
    progress: bool = True
    timeout: float = 120.0
    max_retries: int = 4
    backoff_base: float = 1.0
    max_failures: FailureBudget | str = DEFAULT_BUDGET
    tally: ErrorTally | None = None
    write_prompts: bool = False
    """Save every request's exact messages to ``OUTPUT/prompts/<prompt hash>.json`` (``save_prompt``)."""


class ModelRun:
    """What an evaluation and a rollout share: the run directory ``output`` and the ``RunOptions``, unpacked."""

    def __init__(self, output: str | Path, options: RunOptions | None = None) -> None:
        options = options or RunOptions()
        self.output = Path(output)
        self.command = list(options.command) if options.command is not None else list(sys.argv)
        self.max_connections = options.max_connections
        self.workers = options.workers
        self.cache_dir = Path(options.cache_dir) if options.cache_dir else self.output / "cache"
        self.progress_enabled = options.progress
        self.timeout = float(options.timeout)
        self.max_retries = int(options.max_retries)
        self.backoff_base = float(options.backoff_base)
        budget = options.max_failures
        self.budget = budget if isinstance(budget, FailureBudget) else FailureBudget.parse(budget)
        self.tally = options.tally if options.tally is not None else ErrorTally()
        self.write_prompts = options.write_prompts

    def save_prompt(self, messages: Sequence[Mapping[str, str]], role: str, **about: Any) -> str:
        """The prompt hash of ``messages``; with ``write_prompts``, the messages also go to
        ``prompts/<hash>.json`` with who they were sent to (``role``: agent, judge, ...) and ``about`` (task,
        instance ids), so that a user can read exactly what a model saw (a file per distinct request)."""
        hashed = prompt_hash(messages)
        if self.write_prompts:
            folder = self.output / "prompts"
            folder.mkdir(parents=True, exist_ok=True)
            payload = {"prompt_hash": hashed, "role": role, **about, "messages": list(messages)}
            atomic_write(folder / f"{hashed}.json", json.dumps(payload, indent=2, ensure_ascii=False))
        return hashed


class Resumable(Protocol):
    """A run's settings model: ``result_keys()`` are the settings a resumed run must share."""

    def result_keys(self) -> dict[str, Any]: ...

    def model_dump(self) -> dict[str, Any]: ...


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("rescue-env", "pydantic", "numpy", "gymnasium", "pettingzoo", "litellm", "openai", "bert-score",
                    "torch", "transformers", "stable-baselines3", "sb3-contrib", "scikit-learn", "matplotlib",
                    "pandas"):  # fmt: skip
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def atomic_write(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def check_same_settings(
    output: Path,
    config: Resumable,
    dataset: Dataset,
    what: str = "run",
    *,
    changeable: Collection[str] = (),
    changeable_note: str = "",
) -> dict[str, tuple[Any, Any]]:
    """Refuse (ValueError, one line listing the differences and the way round) a directory whose ``config.json``
    holds other settings or other data, unless every difference is one of ``changeable`` (settings that a stored
    run may change in place: evaluate's judge and BERTScore, ``benchmarks.runner.SCORING_SETTINGS``); returns
    those differences, ``{name: (stored, new)}`` ({} for none, or no ``config.json``). Writes nothing.

    The refusal names the way round: another ``--output`` with the stored run's response cache as ``--cache-dir``
    (recorded in ``config.json``; by default ``OUTPUT/cache``), so that no request it already sent is paid again."""
    stored_path = output / "config.json"
    if not stored_path.exists():
        return {}
    stored = json.loads(stored_path.read_text(encoding="utf-8"))
    previous = type(config).model_validate(stored["config"]).result_keys()  # type: ignore[attr-defined]
    differences = {k: (previous.get(k), v) for k, v in config.result_keys().items() if previous.get(k) != v}
    if stored.get("data", {}).get("sha256") != dataset.sha256:
        differences["data sha256"] = (stored.get("data", {}).get("sha256"), dataset.sha256)
    if differences and not set(differences) <= set(changeable):
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in differences.items())
        cache = Path(stored.get("cache_dir") or output / "cache")
        reuse = f" (with --cache-dir {cache}, no request it sent is sent again)" if cache.is_dir() else ""
        raise ValueError(
            f"{output} holds a {what} with other settings ({shown}). {changeable_note}"
            f"Use another --output{reuse}, or delete it."
        )
    return differences


def write_config(
    output: Path, command: Sequence[str], config: Resumable, dataset: Dataset, seed: int, **extra: Any
) -> None:
    """``config.json``: the command, the settings, package versions, the data's source and sha256, the seed."""
    output.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": list(command),
        "config": config.model_dump(),
        "versions": versions(),
        "data": {
            "source": dataset.source,
            "sha256": dataset.sha256,
            "samples": len(dataset),
            "skipped_samples": dataset.report.samples_skipped,
        },
        "seed": seed,
        **extra,
    }
    atomic_write(output / "config.json", json.dumps(payload, indent=2))


PROGRESS_INTERVAL_ENV = "RESCUE_PROGRESS_INTERVAL"
"""Seconds between the plain progress lines printed when stderr is not a terminal (0 = none)."""
DEFAULT_PROGRESS_INTERVAL = 10.0


def progress_interval() -> float:
    """``RESCUE_PROGRESS_INTERVAL`` in seconds (default 10; 0 or less = no plain lines); an unreadable value is
    the default, with one warning line: progress must never stop a run."""
    raw = os.environ.get(PROGRESS_INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_PROGRESS_INTERVAL
    try:
        return float(raw)
    except ValueError:
        print(f"warning: {PROGRESS_INTERVAL_ENV}={raw!r} is not a number of seconds; using 10", file=sys.stderr)
        return DEFAULT_PROGRESS_INTERVAL


def _duration(seconds: float) -> str:
    """``75`` -> ``1m15s``, ``3725`` -> ``1h02m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Progress of a run on stderr, with failures, tokens and cost: a tqdm bar on a terminal; elsewhere (nohup,
    a pipe, CI) a plain line every ``interval`` seconds (``RESCUE_PROGRESS_INTERVAL``, default 10) and, after
    any, one at the end, since a bar there would print nothing until the end or fill a log with carriage
    returns. Silent when disabled (``--no-progress``). Tokens are integers with thousands separators, never
    ``2e+5`` (tqdm's short form of a large int)."""

    def __init__(
        self,
        total: int,
        enabled: bool,
        unit: str = "inst",
        initial: int = 0,
        usage: bool = True,
        *,
        interval: float | None = None,
        stream: Any = None,
    ) -> None:
        self.usage = usage  # tokens and cost in the postfix (a built-in agent or policy calls no model)
        self.failures = 0
        self.tokens = 0
        self.cost = 0.0
        self.total, self.done, self.unit = total, initial, unit
        self._initial = initial
        self._phase = ""
        self._bar = None
        self._stream = stream if stream is not None else sys.stderr
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._lines = 0
        if not (enabled and total):
            return
        if _is_terminal(self._stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total, initial=initial, unit=unit, dynamic_ncols=True, file=self._stream, mininterval=0.25
            )
            return
        seconds = progress_interval() if interval is None else interval
        if seconds > 0:
            # A thread, not a check in update(): a long phase without updates (BERTScore, the judge) still shows.
            self._ticker = threading.Thread(target=self._tick, args=(seconds,), name="progress", daemon=True)
            self._ticker.start()

    def _tick(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self._print_line()

    def line(self) -> str:
        """The plain progress line: phase, done/total, rate, failures, tokens and cost, ETA."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        done_here = self.done - self._initial
        rate = done_here / elapsed
        share = 100 * self.done / self.total if self.total else 100.0
        parts = [f"{self.done:,}/{self.total:,} {self.unit} ({share:.0f} %)", f"{rate:.2f} {self.unit}/s"]
        parts.append(f"{self.failures:,} failed")
        if self.usage:
            parts += [f"tokens {self.tokens:,}", f"cost ${self.cost:.4f}"]
        left = self.total - self.done
        if left <= 0:
            parts.append(f"elapsed {_duration(elapsed)}")
        else:
            parts.append(f"ETA {_duration(left / rate)}" if rate > 0 else "ETA ?")
        phase = f" {self._phase}" if self._phase else ""
        return f"progress{phase}: " + ", ".join(parts)

    def _print_line(self) -> None:
        try:
            print(self.line(), file=self._stream, flush=True)
            self._lines += 1
        except (OSError, ValueError):  # a closed pipe or stream: progress must never stop the run
            self._stop.set()

    def describe(self, text: str) -> None:
        self._phase = text
        if self._bar is not None:
            self._bar.set_description(text)

    def update(self, done: int, failures: int, tokens: int, cost: float) -> None:
        self.done += done
        self.failures += failures
        self.tokens += tokens
        self.cost += cost
        if self._bar is not None:
            self._bar.update(done)
            if self.usage:
                # strings: tqdm writes a large int in short scientific form (200000 -> 2e+5)
                self._bar.set_postfix(failures=self.failures, tokens=f"{self.tokens:,}", cost=f"${self.cost:.4f}")
            else:
                self._bar.set_postfix(failures=self.failures)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            if self._lines:  # a run that printed progress ends with where it got to; a short one stays quiet
                self._print_line()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False
