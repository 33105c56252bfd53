"""``benchmarks.runs.Progress`` off a terminal (nohup, a pipe, CI): plain lines every few seconds on stderr with
done/total, rate, failures and ETA, tokens as integers with separators; on a terminal the tqdm bar, with no
scientific notation in its postfix (issue 26, items 6 and 7)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import runner
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import PROGRESS_INTERVAL_ENV, Progress, RunOptions, progress_interval

LINE = re.compile(
    r"^progress RPP: (\d+)/10 inst \(\d+ %\), [\d.]+ inst/s, (\d+) failed, tokens ([\d,]+), cost \$[\d.]+, "
    r"(ETA (\d+s|\?)|elapsed \d+s)$"
)


class _Pipe(io.StringIO):
    """A stream that, like a pipe or a log file, is not a terminal."""

    def isatty(self) -> bool:
        return False


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_off_a_terminal() -> None:
    stream = _Pipe()
    progress = Progress(10, enabled=True, interval=0.05, stream=stream)
    progress.describe("RPP")
    progress.update(3, 1, 200_000, 0.25)
    time.sleep(0.3)
    progress.update(7, 0, 5, 0.0)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3, lines
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    assert matches[0].group(1) == "3" and matches[0].group(2) == "1" and matches[0].group(3) == "200,000"
    assert matches[0].group(4).startswith("ETA")
    last = matches[-1]
    assert (last.group(1), last.group(3)) == ("10", "200,005") and last.group(4).startswith("elapsed")
    assert "e+" not in stream.getvalue()


def test_a_short_run_stays_quiet_and_disabled_is_silent() -> None:
    stream = _Pipe()
    progress = Progress(10, enabled=True, interval=30, stream=stream)
    progress.update(10, 0, 0, 0.0)
    progress.close()
    assert stream.getvalue() == ""  # nothing before the first interval: no line at the end either
    stream = _Pipe()
    progress = Progress(10, enabled=False, interval=0.01, stream=stream)
    progress.update(10, 0, 0, 0.0)
    time.sleep(0.05)
    progress.close()
    assert stream.getvalue() == ""


def test_usage_off_leaves_tokens_and_cost_out() -> None:
    progress = Progress(4, enabled=True, unit="episode", usage=False, interval=1000, stream=_Pipe())
    progress.update(1, 0, 0, 0.0)
    line = progress.line()
    progress.close()
    assert line.startswith("progress: 1/4 episode (25 %)") and "tokens" not in line and "cost" not in line


def test_terminal_gets_the_bar_with_integer_tokens() -> None:
    stream = _Terminal()
    progress = Progress(10, enabled=True, stream=stream)
    progress.update(2, 0, 200_000, 0.5)
    assert progress._bar is not None and progress._ticker is None
    assert progress._bar.postfix and "tokens=200,000" in progress._bar.postfix
    progress.close()
    assert "2e+5" not in stream.getvalue() and "200,000" in stream.getvalue()


def test_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(PROGRESS_INTERVAL_ENV, raising=False)
    assert progress_interval() == 10
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "2.5")
    assert progress_interval() == 2.5
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "soon")
    assert progress_interval() == 10
    assert capsys.readouterr().err.count("\n") == 1


def test_a_piped_evaluate_prints_progress_lines(tmp_path: Path) -> None:
    env = {**os.environ, PROGRESS_INTERVAL_ENV: "0.05"}
    # ER's BERTScore (MiniLM, loaded in the run) keeps the bar open well past a few intervals
    command = [
        sys.executable, "-m", "rescue_env.cli", "evaluate", "--agent", "heuristic", "--tasks", "rpp,er",
        "--output", str(tmp_path / "run"),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("progress")]
    assert lines, result.stderr
    assert re.match(r"^progress [A-Z ,a-zA-Z]+: \d+/\d+ inst \(\d+ %\), [\d.]+ inst/s, 0 failed, ", lines[-1])
    assert "\r" not in result.stderr  # no bar: a log gets lines, not carriage returns


def test_no_judge_phase_without_a_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phases: list[str] = []

    class Recording(Progress):
        def describe(self, text: str) -> None:
            phases.append(text)
            super().describe(text)

    monkeypatch.setattr(runner, "Progress", Recording)
    config = EvalConfig(tasks=["er"], agent="heuristic", bertscore=False, bootstrap=0, limit=3)
    Evaluation(config, tmp_path / "run", options=RunOptions(progress=False)).run()
    assert phases and not any("judge" in p or "BERTScore" in p for p in phases), phases
