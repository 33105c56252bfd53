"""`rescue-bench evaluate` end to end: built-in agents, a real OpenAI-compatible server on 127.0.0.1 answering
through litellm, injected faults, resume after a kill, and no API key in any output."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.fake_server import FakeOpenAIServer, Fault, example_responder
from benchmarks.registry import TASK_NAMES
from benchmarks.runner import EvalConfig, Evaluation
from rescue_env.cli import main

ITEM = re.compile(r"^### Item (\d+)$", re.M)


def run(tmp: Path, name: str, **overrides) -> dict:
    config = EvalConfig(**{"tasks": ["itp"], "bertscore": False, "bootstrap": 50, **overrides})
    return Evaluation(config, tmp / name, progress=False, command=["test"]).run()


def test_oracle_scores_perfectly_on_every_task(tmp_path: Path) -> None:
    results = run(tmp_path, "oracle", tasks=list(TASK_NAMES), agent="oracle", bertscore=False)
    for name in ("itp", "rpp", "stp", "ssp"):
        metrics = results["tasks"][name]["scopes"]["all"]["metrics"]
        headline = metrics["f1"] if name == "itp" else metrics.get("accuracy", metrics.get("recall@1"))
        assert headline["value"] == 1.0, name
        assert results["tasks"][name]["failures"] == 0
    assert results["tasks"]["er"]["scopes"]["all"]["metrics"]["s_int"]["value"] == 5.0
    assert results["tasks"]["er"]["judge"] == "not run"
    assert results["tasks"]["er"]["scopes"]["all"]["metrics"]["s_emo"]["value"] is None


@pytest.mark.parametrize("agent", ["random", "majority", "heuristic"])
def test_baselines_run_every_task_without_failures(tmp_path: Path, agent: str) -> None:
    results = run(tmp_path, agent, tasks=list(TASK_NAMES), agent=agent)
    assert all(task["failures"] == 0 for task in results["tasks"].values()), agent
    for file in ("config.json", "predictions.jsonl", "results.json", "results.csv", "results.md", "run.json"):
        assert (tmp_path / agent / file).is_file()


def test_random_agent_is_seeded(tmp_path: Path) -> None:
    first = run(tmp_path, "a", agent="random", seed=3)
    again = run(tmp_path, "b", agent="random", seed=3)
    other = run(tmp_path, "c", agent="random", seed=4)
    assert first["tasks"] == again["tasks"]
    assert first["tasks"] != other["tasks"]


def test_litellm_agent_through_a_local_server(tmp_path: Path) -> None:
    with FakeOpenAIServer(example_responder) as server:
        results = run(tmp_path, "llm", agent="litellm", model="openai/fake", api_base=server.base_url)
        asked = server.request_count
        assert asked == len(
            {
                json.loads(line)["prompt_hash"]
                for line in (tmp_path / "llm" / "predictions.jsonl").read_text().splitlines()
            }
        )
        # Resume: nothing is asked again.
        again = run(tmp_path, "llm", agent="litellm", model="openai/fake", api_base=server.base_url)
        assert server.request_count == asked
    assert results["tasks"]["itp"]["failures"] == 0 and again == results
    record = json.loads((tmp_path / "llm" / "predictions.jsonl").read_text().splitlines()[0])
    assert set(record) >= {"instance_id", "prompt_hash", "raw", "prediction", "failure"}


def test_faults_are_survived_and_counted(tmp_path: Path) -> None:
    def faults(index: int, body: dict) -> Fault | None:
        plan = {
            0: Fault("429"),
            1: Fault("500"),
            2: Fault("timeout", seconds=3),
            3: Fault("truncated"),
            5: Fault("garbage"),
            9: Fault("503"),
        }
        return plan.get(index)

    def wrong_ids(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if "Maya" in prompt and len(ITEM.findall(prompt)) > 1:
            return json.dumps({"answers": [{"id": "99", "should_speak": "yes"}]})  # ids that match nothing
        if "Ngozi" in prompt:
            return example_responder(body)[:25]  # the model's JSON itself cut off
        return example_responder(body)

    with FakeOpenAIServer(wrong_ids, faults=faults) as server:
        config = EvalConfig(
            tasks=["itp"], agent="litellm", model="openai/fake", api_base=server.base_url, bertscore=False, bootstrap=0
        )
        evaluation = Evaluation(config, tmp_path / "faults", progress=False, command=["test"])
        client = evaluation._client_for(judge=False)
        client.config = client.config.model_copy(update={"timeout": 1.0})
        client.backoff_base = 0.01
        results = evaluation.run()
    itp = results["tasks"]["itp"]
    assert itp["instances"] == results["tasks"]["itp"]["scopes"]["all"]["instances"]
    # Transient faults were retried away; the garbage answer and the wrong ids are failures, scored wrong.
    assert itp["failure_kinds"].get("malformed_json", 0) >= 1
    assert itp["failure_kinds"].get("missing_item", 0) >= 1
    cut = [json.loads(r) for r in (tmp_path / "faults" / "predictions.jsonl").read_text().splitlines()]
    cut = [r for r in cut if r["raw"] and r["raw"].startswith('{"answers"') and not r["raw"].endswith("}")]
    assert cut and all(r["failure"] == "malformed_json" and r["prediction"] is None for r in cut)
    assert "api_error" not in itp["failure_kinds"]
    records = [json.loads(x) for x in (tmp_path / "faults" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == itp["instances"]
    assert sum(r["failure"] is not None for r in records) == itp["failures"]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rescue_env.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_half_way_then_resume_gives_the_same_results(tmp_path: Path) -> None:
    env = {**os.environ, "RESCUE_TEST_KEY": "sk-planted-SECRET-4242"}
    with FakeOpenAIServer(example_responder, latency=0.1, expected_api_key="sk-planted-SECRET-4242") as server:
        common = [
            "evaluate",
            "--tasks",
            "itp,rpp",
            "--model",
            "openai/fake",
            "--api-base",
            server.base_url,
            "--api-key-env",
            "RESCUE_TEST_KEY",
            "--max-connections",
            "2",
            "--batch-size",
            "1",
            "--limit",
            "30",
            "--bootstrap",
            "100",
            "--no-progress",
        ]
        whole = _cli([*common, "--output", str(tmp_path / "whole")], env)
        out, err = whole.communicate(timeout=300)
        assert whole.returncode == 0, err
        total = server.request_count

        killed = _cli([*common, "--output", str(tmp_path / "resumed")], env)
        deadline = time.time() + 120
        while server.request_count < total + total // 2 and time.time() < deadline:
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        answered_before = len((tmp_path / "resumed" / "predictions.jsonl").read_text().splitlines())
        assert 0 < answered_before < total

        resumed = _cli([*common, "--output", str(tmp_path / "resumed")], env)
        out2, err2 = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, err2
    first = json.loads((tmp_path / "whole" / "results.json").read_text())
    second = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert first == second
    # The resumed run did not ask the instances answered before the kill (cache aside: a fresh process).
    run_info = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert run_info["asked_instances"] <= total - answered_before + 2

    # No file of either run, and no output, contains the key.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "SECRET-4242" not in path.read_text(encoding="utf-8", errors="replace"), path
    assert "SECRET-4242" not in out + err + out2 + err2


def test_key_never_leaks_from_errors(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RESCUE_TEST_KEY", "sk-planted-SECRET-777")
    with FakeOpenAIServer(example_responder, faults=lambda i, b: Fault("500", echo_auth=True)) as server:
        config = EvalConfig(
            tasks=["itp"],
            agent="litellm",
            model="openai/fake",
            api_base=server.base_url,
            api_key_env="RESCUE_TEST_KEY",
            bertscore=False,
            bootstrap=0,
            limit=4,
        )
        evaluation = Evaluation(config, tmp_path / "errors", progress=False, command=["test"])
        evaluation._client_for(judge=False).backoff_base = 0.001
        results = evaluation.run()
    assert results["tasks"]["itp"]["failure_kinds"] == {"api_error": 4}
    texts = [p.read_text(errors="replace") for p in (tmp_path / "errors").rglob("*") if p.is_file()]
    assert any("api_error" in t for t in texts)
    assert not any("SECRET-777" in t for t in texts)
    captured = capsys.readouterr()
    assert "SECRET-777" not in captured.out + captured.err


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    run(tmp_path, "r", agent="heuristic")
    with pytest.raises(ValueError, match="holds a run with other settings.*mode"):
        run(tmp_path, "r", agent="heuristic", mode="audio")


def test_cli_evaluate_prints_the_table(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "evaluate",
            "--tasks",
            "itp,stp",
            "--agent",
            "oracle",
            "--no-bertscore",
            "--bootstrap",
            "20",
            "--no-progress",
            "--output",
            str(tmp_path / "cli"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "| Both | 100.00 | 100.00 | 100.00 | 100.00 | 100.00 |" in out
    assert main(["evaluate", "--tasks", "nope", "--output", str(tmp_path / "x")]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err


def _model_and_judge(body: dict) -> str:
    """Answers prompts like a model and judge prompts like a judge (4/5; authors' rubric 2 + 3)."""
    if "expert rater" in body["messages"][0]["content"]:
        if "source_target_score" in body["messages"][-1]["content"]:
            return '{"source_target_score": 2, "viewpoint_score": 3, "reason": "close"}'
        return '```json\n{"score": 4, "reason": "close"}\n```'
    return example_responder(body)


@pytest.mark.parametrize("rubric", ["likert", "authors"])
def test_judge_phase_scores_er_and_vp(tmp_path: Path, rubric: str) -> None:
    with FakeOpenAIServer(_model_and_judge) as server:
        results = run(
            tmp_path,
            "judged",
            tasks=["er", "vp"],
            agent="litellm",
            model="openai/fake",
            api_base=server.base_url,
            judge_model="openai/judge",
            vp_rubric=rubric,
        )
        judge_calls = sum("expert rater" in r["messages"][0]["content"] for r in server.requests)
    er = results["tasks"]["er"]["scopes"]["all"]["metrics"]
    valid = results["tasks"]["er"]["instances"] - results["tasks"]["er"]["failures"]
    assert judge_calls >= valid > 0
    assert results["tasks"]["er"]["failures"] == 0 and results["tasks"]["vp"]["failures"] == 0
    assert er["s_emo"]["value"] == 4.0
    assert er["s_er"]["value"] == pytest.approx((er["s_emo"]["value"] + er["s_int"]["value"]) / 2)
    vp = results["tasks"]["vp"]
    expected = 5.0 if rubric == "authors" else 4.0
    assert vp["scopes"]["all"]["metrics"]["judge"]["value"] == expected
    assert results["tasks"]["er"]["judge"] is None  # the judge ran
