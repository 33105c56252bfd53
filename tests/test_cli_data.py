"""`rescue-bench data ...`: exit codes, messages without tracebacks, JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_row, make_sample, write_jsonl

from rescue_env.cli import main


def test_validate_demo_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "validate"]) == 0
    out = capsys.readouterr().out
    assert "rescue_demo.jsonl" in out and "0 problem(s)" in out


def test_validate_reports_every_problem_and_exits_one(tmp_path: Path, capsys) -> None:
    bad = make_sample("s/2", ["Ana"])
    bad["rows"][0]["internal_emotion"] = [{"person": "Ana", "intensity": "high"}]
    path = write_jsonl(tmp_path / "d.jsonl", [make_sample("s/1", ["Ana"]), bad, {"sample_id": "s/3", "rows": 1}])
    assert main(["data", "validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert "d.jsonl:2 sample s/2 row 1: internal_emotion[0].intensity: 'high' is not a number" in captured.err
    assert "d.jsonl:3 sample s/3: rows: Input should be a valid list (got 1)" in captured.err
    assert "skipped 2 bad sample(s) of 3" in captured.err
    assert "1 valid sample(s)" in captured.out


def test_strict_stops_at_first_problem_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"sample_id": "s/1", "rows": [{"primary_speaker": "Ana"}]}\n{"sample_id": "s/2", "rows": [', encoding="utf-8"
    )
    result = subprocess.run(
        [sys.executable, "-m", "rescue_env.cli", "data", "validate", str(path), "--strict"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: d.jsonl:2: invalid JSON (truncated line?)")
    assert "Traceback" not in result.stderr + result.stdout


def test_missing_path_is_a_clean_error(capsys) -> None:
    assert main(["data", "stats", "/no/such/file.jsonl"]) == 1
    assert capsys.readouterr().err == "error: /no/such/file.jsonl: no such file or directory\n"


def test_stats_json_has_the_documented_keys(capsys) -> None:
    assert main(["data", "stats", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    for scope in ("couple", "family", "all"):
        for key in (
            "samples",
            "turns",
            "total_minutes",
            "avg_minutes",
            "avg_turns",
            "avg_speakers",
            "therapist_turn_share",
        ):
            assert key in payload[scope]
        assert 0.0 < payload[scope]["therapist_turn_share"] < 1.0
    assert payload["all"]["samples"] == payload["couple"]["samples"] + payload["family"]["samples"]
    assert len(payload["source"]["sha256"]) == 64


def test_stats_text_and_filters(tmp_path: Path, capsys) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("demo_maya_and_jordan/001\n")
    assert main(["data", "stats", "--sample-ids", str(ids), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all"]["samples"] == 1
    assert main(["data", "stats", "demo", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "Dataset statistics (paper Table 3)" in out and "Relation transitions - couple" in out


def test_stats_json_on_the_release_matches_table_3(text_file: Path, capsys) -> None:
    assert main(["data", "stats", "--data", str(text_file), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["all"]["samples"] == 191 and payload["all"]["turns"] == 7079
    assert round(payload["all"]["total_minutes"], 1) == 1064.8
    assert round(100 * payload["family"]["therapist_turn_share"], 1) == 47.1


def test_synth_writes_a_loadable_file(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    assert main(["data", "synth", "7", "--output", str(out), "--seed", "1"]) == 0
    assert main(["data", "validate", str(out)]) == 0
    assert "7 valid sample(s)" in capsys.readouterr().out


def test_help_reads_like_a_harness() -> None:
    result = subprocess.run([sys.executable, "-m", "rescue_env.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "data" in result.stdout and "COMMAND" in result.stdout


@pytest.mark.parametrize(
    "command", [["rollout", "--policy", "never"], ["evaluate", "--agent", "heuristic", "--tasks", "itp"]]
)
def test_runs_print_the_skipped_samples_first_reasons(tmp_path: Path, capsys, command: list[str]) -> None:
    good = make_sample("ok/1", ["Ana", "Ben", "Therapist", "Ana", "Ben"])
    bad = [
        make_sample(
            f"bad/{k}", ["Ana"], rows=[make_row(0, "Ana", internal_emotion=[{"person": "Ana", "intensity": 11 + k}])]
        )
        for k in range(7)
    ]
    path = write_jsonl(tmp_path / "d.jsonl", [good, *bad])
    main([*command, "--data", str(path), "--output", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert "d.jsonl:2 sample bad/0 row 1: internal_emotion[0].intensity: must be between 0 and 10, got 11" in err
    assert "bad/4" in err and "bad/5" not in err
    assert "... and 2 more problem(s): rescue-bench data validate lists them all" in err
    assert "skipped 7 bad sample(s) of 8" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["evaluate", "--limit", "-5"], "argument --limit: must be >= 0, got '-5'"),
        (["evaluate", "--context-size", "-5"], "argument --context-size: must be >= -1, got '-5'"),
        (["evaluate", "--batch-size", "0"], "argument --batch-size: must be >= 1, got '0'"),
        (["evaluate", "--bootstrap", "-1"], "argument --bootstrap: must be >= 0, got '-1'"),
        (["evaluate", "--temperature", "nan"], "argument --temperature: must be a finite number in [0, 2], got 'nan'"),
        (["evaluate", "--timeout", "inf"], "argument --timeout: must be a finite number > 0, got 'inf'"),
        (["evaluate", "--max-connections", "0"], "argument --max-connections: must be >= 1, got '0'"),
        (["evaluate", "--max-tokens", "0"], "argument --max-tokens: must be >= 1, got '0'"),
        (["rollout", "--policy", "never", "--context-size", "-5"], "argument --context-size: must be >= 1"),
        (["rollout", "--policy", "never", "--test-fraction", "1"], "must be a finite number in (0, 1), got '1'"),
        (["rollout", "--policy", "never", "--temperature", "-1"], "must be a finite number in [0, 2], got '-1'"),
        (["dynamics", "fit", "--horizon", "0"], "argument --horizon: must be >= 1, got '0'"),
        (["data", "validate", "--limit", "-1"], "argument --limit: must be >= 0, got '-1'"),
    ],
)
def test_numeric_settings_are_checked_before_anything_runs(
    tmp_path: Path, capsys, args: list[str], needle: str
) -> None:
    output = tmp_path / "never-written"
    extra = ["--output", str(output)] if args[0] in ("evaluate", "rollout") else []
    with pytest.raises(SystemExit) as exit_:
        main([*args, *extra])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not output.exists()
