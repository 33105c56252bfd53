"""MiniLM sentence embeddings of solver texts, cached on disk keyed by the text's hash (``$RESCUE_ENV_CACHE/
embeddings``, else ``~/.cache/rescue-env/embeddings``): cross-fitting five seeds embeds each text once."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rescue_env.dynamics.fitting import cache_home
from rescue_env.embeddings import EMBEDDING_DIM, MiniLM

__all__ = ["embed"]


def cache_root() -> Path:
    return cache_home() / "embeddings" / "all-minilm-l6-v2"


def _path(text: str) -> Path:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return cache_root() / digest[:2] / f"{digest}.npy"


def embed(texts: Sequence[str]) -> np.ndarray:
    """``(len(texts), 384)`` L2-normalised MiniLM embeddings; cached ones are read, the rest encoded and stored."""
    out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
    missing: dict[str, list[int]] = {}
    for k, text in enumerate(texts):
        path = _path(text)
        if path.is_file():
            out[k] = np.load(path)
        else:
            missing.setdefault(text, []).append(k)
    if missing:
        vectors = MiniLM.get().encode(list(missing))
        for (text, rows), vector in zip(missing.items(), vectors):
            out[rows] = vector
            path = _path(text)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(temporary, vector.astype(np.float32))
            os.replace(temporary, path)
    return out
