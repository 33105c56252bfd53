"""Set-up errors and interruptions of `rescue-bench evaluate` / `rollout`: one line, the right exit code, nothing
written that a later run would trip over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.fake_server import FakeOpenAIServer
from agents.mock import mock_responder
from rescue_env.cli import main

RUNS = (["evaluate", "--agent", "heuristic", "--tasks", "itp"], ["rollout", "--policy", "never"])


@pytest.mark.parametrize("command", RUNS)
def test_output_that_is_a_file_or_under_a_file_is_one_line(tmp_path: Path, capsys, command: list[str]) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for output, needle in (
        (blocker, f"--output {blocker} is a file: give a directory"),
        (blocker / "sub", f"--output {blocker / 'sub'}: {blocker} is a file, so no directory can be made under it"),
    ):
        assert main([*command, "--output", str(output), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {needle}") and "\n" not in err
    assert blocker.read_text() == "x"


def test_unavailable_bertscore_model_stops_before_any_request(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ["evaluate", "--agent", "heuristic", "--tasks", "er", "--bertscore-model", "no-such-model", "--output"]
    assert main([*args, str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --bertscore-model: BERTScore model 'no-such-model' is not available offline")
    assert "\n" not in err and not out.exists()


@pytest.mark.parametrize(("command", "unit"), [("evaluate", "instances answered"), ("rollout", "episodes finished")])
def test_ctrl_c_is_one_line_and_the_run_resumes(tmp_path: Path, capsys, command: str, unit: str) -> None:
    with FakeOpenAIServer(lambda body: mock_responder(body["messages"]), latency=0.05) as server:
        model = ["--model", "openai/fake", "--api-base", server.base_url, "--max-connections", "2"]
        args = [
            sys.executable,
            "-m",
            "rescue_env.cli",
            command,
            *model,
            "--output",
            str(tmp_path / "run"),
            "--no-progress",
        ]
        if command == "evaluate":
            args += ["--tasks", "itp", "--batch-size", "1"]
        # A test run started in the background (``pytest ... &``) ignores SIGINT, and a child inherits that: the
        # child gets the default handler back, as a command typed in a terminal has.
        running = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
        )
        deadline = time.time() + 60
        while server.request_count < 8 and time.time() < deadline:
            time.sleep(0.02)
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=60)
        assert running.returncode == 130
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err
        assert lines[0].startswith("interrupted; ") and lines[0].endswith(f"{unit}; re-run the same command to resume")
        assert main(args[3:]) == 0, capsys.readouterr().err  # the resume runs in this process: no second start-up
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    if command == "rollout":  # the episodes finished before the interrupt (maybe none yet) are kept, the rest played
        assert run["episodes_resumed"] + run["episodes_played"] == run["episodes_planned"] > 0, run
    else:  # the instances answered before the interrupt were not asked again
        answered = len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines())
        assert 0 < run["asked_instances"] < answered
