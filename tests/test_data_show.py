"""`rescue-bench data show SAMPLE_ID` (``rescue_env.data.show``): every row with its annotations as text and as
JSON, one-line errors with close ids for an unknown id; and `rollout --render`'s words for a gold action the
release left unannotated and for a chosen strategy that is a filler (issue 26, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_row, write_jsonl

from rescue_env.cli import main
from rescue_env.data import load_dataset
from rescue_env.data.show import close_ids, relation_label, sample_record, sample_text
from rescue_env.envs.replay import RescueEnv, _describe_chosen, _describe_gold

DEMO_ID = "demo_maya_and_jordan/001"


def test_text_shows_every_row_with_its_annotations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", DEMO_ID]) == 0
    out = capsys.readouterr().out
    sample = load_dataset("demo").get(DEMO_ID)
    lines = out.splitlines()
    assert lines[0].startswith(f"{DEMO_ID}: couple, participants Maya, Jordan; {len(sample.rows)} rows")
    assert lines[1].split() == ["row", "time", "speaker", "to", "relation", "support", "(target:", "strategy)"]
    numbered = [line for line in lines[2:] if line[:3].strip().isdigit()]
    assert [int(line.split()[0]) for line in numbered] == list(range(1, len(sample.rows) + 1))
    for position, row in enumerate(sample.rows):
        line = numbered[position]
        assert row.primary_speaker in line and relation_label(row) in line
        for item in row.support_strategy:
            assert item.strategy_type in line
        for emotion in row.internal_emotion:
            assert f"{emotion.person} ({emotion.intensity:g}/10)" in out
    assert "0:00.0-0:11.3" in numbered[0]  # start-end times as minutes:seconds
    assert "pursue_withdraw (cycle)" in out  # a label from relation_cycle_state is marked as such
    assert "viewpoint Maya -> Jordan:" in out


def test_json_keeps_every_field_as_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", DEMO_ID, "--json", "--data", "demo"]) == 0
    payload = json.loads(capsys.readouterr().out)
    sample = load_dataset("demo").get(DEMO_ID)
    assert payload == sample_record(sample)
    assert payload["scenario"] == "couple" and len(payload["rows"]) == len(sample.rows)
    first = payload["rows"][0]
    assert set(first) == {
        "row", "start_time", "end_time", "speaker", "target", "text", "emotions", "viewpoints", "relation_pattern",
        "relation_cycle_state", "support",
    }  # fmt: skip
    third = payload["rows"][2]
    assert third["relation_pattern"] == sample.rows[2].relation_pattern
    assert third["emotions"][0] == {
        "person": "Maya",
        "emotion": sample.rows[2].internal_emotion[0].emotion_description,
        "intensity": sample.rows[2].internal_emotion[0].intensity,
    }


def test_unknown_id_is_one_line_with_close_ids() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rescue_env.cli", "data", "show", "demo_maya"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: no sample 'demo_maya' in the demo data; close: demo_maya_and_jordan/001\n"
    ids = load_dataset("demo").sample_ids
    assert close_ids("demo_family/001", ids)[0] == "demo_family/001_the_okafors"
    assert close_ids("demo_maya_and_jordn/001", ids) == ["demo_maya_and_jordan/001"]  # a typo: difflib
    assert close_ids("demo_family/003", ids) == ["demo_family/001_the_okafors", "demo_family/002_the_lindqvists"]


def test_nothing_close_lists_a_few_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", "zzz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "6 sample ids, e.g. demo_maya_and_jordan/001" in err


def test_a_file_and_the_no_clear_pattern_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [make_row(0, "Ana"), make_row(1, "Therapist", relation_pattern=""), make_row(2, "Ben")]
    path = write_jsonl(tmp_path / "d.jsonl", [{"sample_id": "s/1", "scenario": "family", "rows": rows}])
    assert main(["data", "show", "s/1", "--data", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("s/1: family, participants Ana, Ben; 3 rows") and str(path) in out.splitlines()[0]
    therapist = next(line for line in out.splitlines() if line.startswith("  2 "))
    assert "no clear pattern" in therapist  # "" = annotators found none, not a missing label


def test_the_release_when_present(text_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = load_dataset(text_file)
    sample = dataset[0]
    assert main(["data", "show", sample.sample_id, "--data", str(text_file), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == len(sample.rows)
    assert sample_text(sample).count("\n") >= len(sample.rows) + 2


def test_render_says_what_an_unannotated_gold_means(tmp_path: Path) -> None:
    rows = [make_row(0, "Ana"), make_row(1, "Ben"), make_row(2, "Therapist"), make_row(3, "Ana")]
    rows[2]["target"] = ["Ana"]
    path = write_jsonl(tmp_path / "d.jsonl", [{"sample_id": "s/1", "scenario": "couple", "rows": rows}])
    env = RescueEnv(load_dataset(path), render_mode="ansi", sample_order="sequential")
    env.reset(seed=0)
    keep = {"intervene": 0, "target": [0] * 7, "strategy": 0}
    env.step(keep)
    assert "gold:   keep listening (the therapist did not speak next)" in env.render()
    env.step({"intervene": 1, "target": [1, 0, 0, 0, 0, 0, 0], "strategy": 0})
    text = env.render()
    assert "? with ?" not in text and "(the therapist spoke next; no target or strategy annotated)" in text
    assert "with track (no strategy annotated for the therapist here: not scored)" in text


def test_gold_and_chosen_words() -> None:
    gold = {"intervene": True, "target": ["Ana"], "strategy": None}
    assert _describe_gold(gold) == "intervene -> Ana, no strategy annotated"
    assert _describe_gold({**gold, "strategy": "reframe"}) == "intervene -> Ana with reframe"
    assert (
        _describe_gold({**gold, "target": None, "strategy": "reframe"})
        == "intervene (no target annotated) with reframe"
    )
    chosen = {"intervene": True, "target": ["Ana", "Ben"], "strategy": "track"}
    assert _describe_chosen(chosen, {**gold, "strategy": "reframe"}) == "intervene -> Ana, Ben with track"
    assert _describe_chosen(chosen, gold).endswith("(no strategy annotated for the therapist here: not scored)")
    assert _describe_chosen({**chosen, "intervene": False}, gold) == "keep listening"


def test_rollout_render_has_a_legend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["rollout", "--policy", "oracle", "--render", "2", "--no-progress", "--output", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0
    legend = out.splitlines()[0]
    assert legend.startswith("--render: the first 2 decisions, one per row after which the therapist could speak")
    assert "rows between decisions are not shown" in legend and "gold = what the real therapist" in legend
