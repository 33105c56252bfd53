"""Every Python block of the README runs as shown, on the demo data, and prints something (a snippet that prints
nothing when pasted into a script is no help to a new user)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), re.M | re.S)


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs_and_prints(code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "the block prints nothing"


def test_the_readme_trains_with_sb3_and_reaches_the_masks_as_maskable_ppo_does() -> None:
    # A new RL user's first hour: one block that trains, holds out, and reports, on masks MaskablePPO can read.
    sb3 = [code for code in BLOCKS if "MaskablePPO(" in code]
    assert len(sb3) == 1
    needed = ("Monitor(gym.make(", 'split="train"', ".learn(", 'split="test"', 'get_wrapper_attr("action_masks")()')
    assert all(part in sb3[0] for part in needed)
    assert "evaluate_policy(" in sb3[0] and "rescue-bench rollout --policy ppo:" in sb3[0]
    # The Dict env's masks are a dict, which MaskablePPO cannot read: each mention of them must say so.
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    mentions = [m.end() for m in re.finditer(re.escape("unwrapped.action_masks()`"), text)]
    assert mentions and all("dict" in text[end : end + 60] for end in mentions)
