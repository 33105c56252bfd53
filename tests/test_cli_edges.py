"""Input from which no sample can be read (issue 23): every command that reads data stops with the same one line,
"0 samples could be read from PATH: ...", and exit 1 (a data problem), instead of an all-zero table (data stats,
tasks count) or a set-up error (evaluate, rollout). Valid samples that a filter leaves out stay evaluate's 2."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rescue_env.cli import main


def _binary(path: Path) -> str:
    path.write_bytes(random.Random(23).randbytes(4096))  # random bytes, a few of them newlines
    return "problems, the first: d.jsonl:1: not valid UTF-8"


def _all_invalid(path: Path) -> str:
    path.write_text('{"sample_id": "s/1"}\n[1, 2]\nnot json\n', encoding="utf-8")
    return "3 problems, the first: d.jsonl:1 sample s/1: rows: Field required"


def _empty(path: Path) -> str:
    path.write_bytes(b"")
    return "the file is empty"


INPUTS = {"binary": _binary, "all-invalid": _all_invalid, "empty": _empty}

COMMANDS = {
    "data stats": lambda data, out: ["data", "stats", data],
    "data stats --json": lambda data, out: ["data", "stats", "--data", data, "--json"],
    "data validate": lambda data, out: ["data", "validate", data],
    "tasks count": lambda data, out: ["tasks", "count", data, "--json"],
    "evaluate": lambda data, out: ["evaluate", "--data", data, "--agent", "heuristic", "-o", out, "--no-progress"],
    "evaluate --dry-run": lambda data, out: ["evaluate", "--data", data, "--model", "mock", "-o", out, "--dry-run"],
    "rollout": lambda data, out: ["rollout", "--data", data, "--policy", "heuristic", "-o", out, "--no-progress"],
    "report --data": lambda data, out: ["report", "--data", data, "-o", out],
    "dynamics fit": lambda data, out: ["dynamics", "fit", data, "-o", str(Path(out) / "f.json")],
    "compare": lambda data, out: ["compare", "--data", data, "-o", out],
}


@pytest.mark.parametrize("kind", list(INPUTS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_readable_sample_is_one_line_and_exit_1(tmp_path: Path, capsys, command: str, kind: str) -> None:
    data = tmp_path / "d.jsonl"
    reason = INPUTS[kind](data)
    out = tmp_path / "out"
    assert main(COMMANDS[command](str(data), str(out))) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no table of zeros, no JSON of zeros
    lines = captured.err.strip().splitlines()
    if command != "data validate":
        assert len(lines) == 1, lines
    # data validate lists every problem first (that is its job), then ends on the same line.
    assert lines[-1].startswith(f"error: 0 samples could be read from {data}: ")
    assert reason in lines[-1]
    assert not out.exists()  # nothing written


def test_validate_lists_every_problem_before_the_line(tmp_path: Path, capsys) -> None:
    data = tmp_path / "d.jsonl"
    _all_invalid(data)
    assert main(["data", "validate", str(data)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[1].split()[0] for line in lines[:3]] == ["1", "2", "3"]  # d.jsonl:1 ... d.jsonl:3
    assert lines[3] == "skipped 3 bad sample(s) of 3" and lines[4].startswith("error: 0 samples could be read")


def test_valid_samples_with_nothing_to_evaluate_stay_exit_2(tmp_path: Path, capsys) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("no/such/sample\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["evaluate", "--sample-ids", str(ids), "--agent", "heuristic", "-o", str(out), "--no-progress"]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err and not out.exists()
