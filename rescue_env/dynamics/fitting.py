"""F for a dataset: fitted on a side of the project's grouped split, cached by data hash.

``Rescue-v1`` calls ``outcome_model_for(dataset, "train")`` when no model is given: the first call fits F on the
train side of the grouped split (seconds) and writes it under ``cache_dir()``; later calls read it. Nothing fitted
on the release ships with the project.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rescue_env.data import Dataset
from rescue_env.data.splits import SplitConfig, group_of, split_samples
from rescue_env.dynamics.behaviour import BehaviourModel, fit_behaviour_model
from rescue_env.dynamics.outcome import FORMAT_VERSION, OutcomeModel, fit_outcome_model
from rescue_env.dynamics.outcome_v1 import FORMAT_VERSION as FORMAT_VERSION_V1
from rescue_env.dynamics.outcome_v1 import OutcomeModelV1, fit_outcome_model_v1
from rescue_env.dynamics.state import StateConfig


def cache_home() -> Path:
    """The project's cache folder: ``$RESCUE_ENV_CACHE``, else ``$XDG_CACHE_HOME/rescue-env``, else
    ``~/.cache/rescue-env``."""
    root = os.environ.get("RESCUE_ENV_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rescue-env"


def cache_dir() -> Path:
    """Where fitted outcome models are cached: ``cache_home() / "dynamics"``."""
    return cache_home() / "dynamics"


def fit_on_split(
    dataset: Dataset, split: SplitConfig, state: StateConfig | None = None, horizon: int = 5
) -> OutcomeModel:
    """F fitted on ``split``'s side of ``dataset`` (``split="all"``: every conversation)."""
    samples = split_samples(dataset.samples, split)
    if not samples:
        raise ValueError(f"the {split.split} side of {dataset.source} is empty: nothing to fit the outcome model on")
    return fit_outcome_model(
        samples,
        group_of(dataset.samples),
        state=state,
        horizon=horizon,
        fitted_on={
            "source": dataset.source,
            "sha256": dataset.sha256,
            "split": split.model_dump(mode="json"),
        },
    )


def _cache_key(prefix: str, dataset: Dataset, split: SplitConfig, state: StateConfig) -> str:
    """A cache file's name: what was fitted (``prefix``: model kind and format), on which data, side and state."""
    text = f"{prefix}|{dataset.sha256}|{split.model_dump_json()}|{state.model_dump_json()}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _cached(path: Path, load, fit, cache: bool):
    """``load(path)`` when a readable cache entry is there, else ``fit()``, written atomically (best effort)."""
    if cache and path.exists():
        try:
            return load(path)
        except ValueError:
            pass  # a stale or damaged cache entry is refitted
    model = fit()
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(model.model_dump_json(indent=1) + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass  # a read-only home still gets a working env, only without the cache
    return model


def closed_loop_models_for(
    dataset: Dataset,
    side: str = "train",
    *,
    seed: int = 0,
    test_fraction: float = 0.2,
    state: StateConfig | None = None,
    cache: bool = True,
) -> tuple[OutcomeModelV1, BehaviourModel]:
    """F1 and the therapist's behaviour model of ``RescueSim-v1``, fitted on ``side`` of the grouped split (F1's
    blocks chosen there by its own rule), from the cache when there."""
    if side not in ("train", "all"):
        raise ValueError(f"dynamics must be 'train' or 'all', got {side!r}")
    state = state or StateConfig()
    split = SplitConfig(split=side, seed=seed, test_fraction=test_fraction)
    samples = split_samples(dataset.samples, split)
    if not samples:
        raise ValueError(f"the {side} side of {dataset.source} is empty: nothing to fit the closed loop on")
    groups = group_of(dataset.samples)
    about = {"source": dataset.source, "sha256": dataset.sha256, "split": split.model_dump(mode="json")}
    key = _cache_key(f"v1|{FORMAT_VERSION_V1}", dataset, split, state)
    outcome = _cached(
        cache_dir() / f"{key}.f1.json",
        lambda p: OutcomeModelV1.model_validate_json(p.read_text(encoding="utf-8")),
        lambda: fit_outcome_model_v1(
            samples,
            groups,
            state=state,
            seed=seed,
            base=outcome_model_for(dataset, side, seed=seed, test_fraction=test_fraction, state=state, cache=cache),
            fitted_on=about,
        ),
        cache,
    )
    behaviour = _cached(
        cache_dir() / f"{key}.behaviour.json",
        lambda p: BehaviourModel.model_validate_json(p.read_text(encoding="utf-8")),
        lambda: fit_behaviour_model(samples, groups, state, fitted_on=about),
        cache,
    )
    return outcome, behaviour


def outcome_model_for(
    dataset: Dataset,
    side: str = "train",
    *,
    seed: int = 0,
    test_fraction: float = 0.2,
    state: StateConfig | None = None,
    cache: bool = True,
) -> OutcomeModel:
    """F fitted on ``side`` (``train`` or ``all``) of ``dataset``'s grouped split, from the cache when there."""
    if side not in ("train", "all"):
        raise ValueError(f"dynamics must be 'train', 'all', a path or an OutcomeModel, got {side!r}")
    state = state or StateConfig()
    split = SplitConfig(split=side, seed=seed, test_fraction=test_fraction)
    key = _cache_key(str(FORMAT_VERSION), dataset, split, state)
    return _cached(cache_dir() / f"{key}.json", OutcomeModel.load, lambda: fit_on_split(dataset, split, state), cache)
