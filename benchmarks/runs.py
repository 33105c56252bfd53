"""The run directory shared by ``rescue-bench evaluate`` (``benchmarks.runner``) and ``rescue-bench rollout``
(``benchmarks.rollout``): how a run calls its models (``RunOptions``, ``ModelRun``), its ``config.json``, the rule
that a directory only ever holds one setting, atomic writes, the progress bar and the prompt hash that records a
request without its text."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
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


def check_same_settings(output: Path, config: Resumable, dataset: Dataset, what: str = "run") -> None:
    """Refuse (ValueError, one line listing the differences) a directory whose ``config.json`` holds other
    settings or other data; writes nothing."""
    stored_path = output / "config.json"
    if not stored_path.exists():
        return
    stored = json.loads(stored_path.read_text(encoding="utf-8"))
    previous = type(config).model_validate(stored["config"]).result_keys()  # type: ignore[attr-defined]
    differences = {k: (previous.get(k), v) for k, v in config.result_keys().items() if previous.get(k) != v}
    if stored.get("data", {}).get("sha256") != dataset.sha256:
        differences["data sha256"] = (stored.get("data", {}).get("sha256"), dataset.sha256)
    if differences:
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in differences.items())
        raise ValueError(f"{output} holds a {what} with other settings ({shown}). Use another --output, or delete it.")


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


class Progress:
    """A tqdm bar with failures, tokens and cost in its postfix (silent when disabled, and in logs and CI)."""

    def __init__(self, total: int, enabled: bool, unit: str = "inst", initial: int = 0, usage: bool = True) -> None:
        self.usage = usage  # tokens and cost in the postfix (a built-in agent or policy calls no model)
        self.failures = 0
        self.tokens = 0
        self.cost = 0.0
        self._bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            # disable=None: a bar on a terminal, silence in logs and CI.
            self._bar = tqdm(
                total=total,
                initial=initial,
                unit=unit,
                dynamic_ncols=True,
                file=sys.stderr,
                disable=None,
                mininterval=0.25,
            )

    def describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description(text)

    def update(self, done: int, failures: int, tokens: int, cost: float) -> None:
        self.failures += failures
        self.tokens += tokens
        self.cost += cost
        if self._bar is not None:
            self._bar.update(done)
            if self.usage:
                self._bar.set_postfix(failures=self.failures, tokens=self.tokens, cost=f"${self.cost:.4f}")
            else:
                self._bar.set_postfix(failures=self.failures)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
