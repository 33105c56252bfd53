"""The run directory shared by ``rescue-bench evaluate`` (``benchmarks.runner``) and ``rescue-bench rollout``
(``benchmarks.rollout``): its ``config.json``, the rule that a directory only ever holds one setting, atomic
writes, the progress bar and the prompt hash that records a request without its text."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from rescue_env.data import Dataset

__all__ = ["Progress", "atomic_write", "check_same_settings", "prompt_hash", "versions", "write_config"]


class Resumable(Protocol):
    """A run's settings model: ``result_keys()`` are the settings a resumed run must share."""

    def result_keys(self) -> dict[str, Any]: ...

    def model_dump(self) -> dict[str, Any]: ...


def prompt_hash(messages: Sequence[Mapping[str, str]]) -> str:
    """16 hex digits identifying a request's messages (records keep this, never the prompt text)."""
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("rescue-env", "pydantic", "numpy", "gymnasium", "litellm", "openai", "bert-score", "torch",
                    "transformers", "stable-baselines3"):  # fmt: skip
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

    def __init__(self, total: int, enabled: bool, unit: str = "inst", initial: int = 0) -> None:
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
            self._bar.set_postfix(failures=self.failures, tokens=self.tokens, cost=f"${self.cost:.4f}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
