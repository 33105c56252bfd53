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
from agents.mock import mock_responder
from benchmarks.registry import TASK_NAMES
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from rescue_env.cli import main

ITEM = re.compile(r"^### Item (\d+)$", re.M)


def run(tmp: Path, name: str, **overrides) -> dict:
    config = EvalConfig(**{"tasks": ["itp"], "bertscore": False, "bootstrap": 50, **overrides})
    return Evaluation(config, tmp / name, options=RunOptions(progress=False, command=["test"])).run()


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
        assert asked == 1 + len(  # one probe request, then one request per prompt
            {
                json.loads(line)["prompt_hash"]
                for line in (tmp_path / "llm" / "predictions.jsonl").read_text().splitlines()
            }
        )
        assert server.requests[0]["messages"] == [{"role": "user", "content": "Reply with the word OK."}]
        # Resume: nothing is asked again (not even the probe: there is nothing to ask).
        again = run(tmp_path, "llm", agent="litellm", model="openai/fake", api_base=server.base_url)
        assert server.request_count == asked
    assert results["tasks"]["itp"]["failures"] == 0 and again == results
    record = json.loads((tmp_path / "llm" / "predictions.jsonl").read_text().splitlines()[0])
    assert set(record) >= {"instance_id", "prompt_hash", "raw", "prediction", "failure"}


def test_worker_processes_and_concurrent_tasks_give_the_same_run(tmp_path: Path) -> None:
    """--workers 2 (requests sent by two worker processes) and one process write the same results and records;
    every task's requests are in flight together (the server sees more at once than one task's batches)."""
    options = {"tasks": ["itp", "rpp", "stp"], "agent": "litellm", "model": "openai/fake", "limit": 6}

    def evaluate(name: str, workers: int, base_url: str) -> tuple[dict, list[dict]]:
        config = EvalConfig(**{"bertscore": False, "bootstrap": 50, **options, "api_base": base_url})
        run_options = RunOptions(progress=False, command=["test"], workers=workers, max_connections=32)
        results = Evaluation(config, tmp_path / name, options=run_options).run()
        lines = (tmp_path / name / "predictions.jsonl").read_text().splitlines()
        return results, [json.loads(line) for line in lines]

    with FakeOpenAIServer(example_responder, latency=0.2) as server:
        one, one_records = evaluate("one", 1, server.base_url)
        itp_batches = -(-6 // 4)  # the largest task's requests: ITP's 6 instances in batches of 4
        assert server.max_in_flight > itp_batches
        two, two_records = evaluate("two", 2, server.base_url)
    assert one["tasks"] == two["tasks"] and one_records == two_records
    assert all(task["failures"] == 0 for task in one["tasks"].values())


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
        evaluation = Evaluation(config, tmp_path / "faults", options=RunOptions(progress=False, command=["test"]))
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


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]


def test_kill_half_way_then_resume_gives_the_same_results(tmp_path: Path, monkeypatch, capsys) -> None:
    # Only the killed run is a process of its own (SIGKILL); the others run in this one.
    monkeypatch.setenv("RESCUE_TEST_KEY", "sk-planted-SECRET-4242")
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
            "3",
            "--limit",
            "30",
            "--bootstrap",
            "100",
            "--no-progress",
        ]
        assert main([*common, "--output", str(tmp_path / "whole")]) == 0
        total = server.request_count
        instances = len((tmp_path / "whole" / "predictions.jsonl").read_text().splitlines())

        killed = _cli([*common, "--output", str(tmp_path / "resumed")], dict(os.environ))
        deadline = time.time() + 120
        while server.request_count < total + total // 2 and time.time() < deadline:
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        _, killed_err = killed.communicate(timeout=30)
        answered_before = len((tmp_path / "resumed" / "predictions.jsonl").read_text().splitlines())
        assert 0 < answered_before < instances

        assert main([*common, "--output", str(tmp_path / "resumed")]) == 0
    first = json.loads((tmp_path / "whole" / "results.json").read_text())
    second = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert first == second
    # The resumed run did not ask the instances answered before the kill.
    run_info = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert run_info["asked_instances"] <= instances - answered_before + 2
    # And it asked exactly what an uninterrupted run asks: the same batches (3 items), so the same prompts.
    hashes = [
        {(r["task"], r["instance_id"]): (r["prompt_hash"], r["batch_size"]) for r in _records(tmp_path / run)}
        for run in ("whole", "resumed")
    ]
    assert hashes[0] == hashes[1] and len(hashes[0]) == instances
    assert max(size for _, size in hashes[0].values()) == 3

    # No file of either run, and no output, contains the key.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "SECRET-4242" not in path.read_text(encoding="utf-8", errors="replace"), path
    printed = capsys.readouterr()
    assert "SECRET-4242" not in printed.out + printed.err + killed_err


def test_key_never_leaks_from_errors(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RESCUE_TEST_KEY", "sk-planted-SECRET-777")

    def faults(index: int, body: dict) -> Fault | None:  # the probe (request 0) passes, then every call fails
        return None if index == 0 else Fault("500", echo_auth=True)

    with FakeOpenAIServer(example_responder, faults=faults) as server:
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
        options = RunOptions(progress=False, command=["test"], backoff_base=0.001, max_failures="100%")
        evaluation = Evaluation(config, tmp_path / "errors", options=options)
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


# ----------------------------------------------------------------------------------------------------------------
# set-up errors, the failure budget and exit codes (rescue_env.cli.main, as a user runs it)


def _evaluate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", "--no-progress", "--bootstrap", "0", "--no-bertscore", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unset_key_variable_stops_before_anything_is_written(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("RESCUE_TEST_UNSET_KEY", raising=False)
    out_dir = tmp_path / "run"
    code, out, err = _evaluate(
        capsys, "--model", "openai/gpt-4o-mini", "--api-key-env", "RESCUE_TEST_UNSET_KEY", "--output", str(out_dir)
    )
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and "RESCUE_TEST_UNSET_KEY" in line and "not set" in line
    assert not out_dir.exists()
    # the judge's key variable is checked the same way
    code, _, err = _evaluate(
        capsys, "--agent", "oracle", "--tasks", "er", "--judge-model", "openai/gpt-4o",
        "--judge-api-key-env", "RESCUE_TEST_UNSET_KEY", "--output", str(out_dir),
    )  # fmt: skip
    assert code == 2 and "judge" in err and "--judge-api-key-env" in err and not out_dir.exists()


def test_pasted_key_is_refused_at_parse_time_and_never_echoed(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "run"
    for option in ("--api-key-env", "--judge-api-key-env"):
        with pytest.raises(SystemExit) as info:
            main(["evaluate", "--model", "openai/x", option, "sk-abc-123-PASTEDKEY", "--output", str(out_dir)])
        assert info.value.code == 2
        captured = capsys.readouterr()
        assert "PASTEDKEY" not in captured.out + captured.err
        assert f"argument {option}: expected the NAME of an environment variable" in captured.err
    assert not out_dir.exists()


def test_dead_api_base_stops_within_seconds(tmp_path: Path, capsys) -> None:
    started = time.monotonic()
    code, out, err = _evaluate(
        capsys, "--model", "openai/fake", "--api-base", f"http://127.0.0.1:{_closed_port()}/v1",
        "--output", str(tmp_path / "run"),
    )  # fmt: skip
    assert time.monotonic() - started < 15
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: cannot connect to openai/fake") and "--api-base" in line
    assert not (tmp_path / "run").exists()


def test_refused_key_and_unknown_model_stop_with_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RESCUE_TEST_KEY", "sk-wrong-SECRET-5150")
    with FakeOpenAIServer(example_responder, expected_api_key="sk-right", known_models=["fake"]) as server:
        common = ["--api-base", server.base_url, "--api-key-env", "RESCUE_TEST_KEY", "--max-retries", "1"]
        code, _, err = _evaluate(capsys, "--model", "openai/fake", *common, "--output", str(tmp_path / "a"))
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "refused the credentials" in err and "--api-key-env" in err and "SECRET-5150" not in err
        monkeypatch.setenv("RESCUE_TEST_KEY", "sk-right")
        code, _, err = _evaluate(capsys, "--model", "openai/gpt-9", *common, "--output", str(tmp_path / "b"))
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "unknown model 'openai/gpt-9'" in err and "--model" in err
        assert server.request_count == 2  # one probe each, nothing else
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_failure_budget_stops_the_run_then_the_same_command_resumes(tmp_path: Path, capsys) -> None:
    healthy = {"value": False}

    def faults(index: int, body: dict) -> Fault | None:  # the probe passes, then every call fails ...
        return None if index == 0 or healthy["value"] else Fault("500")

    out_dir = tmp_path / "run"
    with FakeOpenAIServer(example_responder, faults=faults) as server:
        command = [
            "--model", "openai/fake", "--api-base", server.base_url, "--tasks", "itp", "--batch-size", "1",
            "--limit", "10", "--max-retries", "0", "--max-connections", "1", "--output", str(out_dir),
        ]  # fmt: skip
        code, out, err = _evaluate(capsys, *command)
        assert code == 1 and out == ""
        lines = err.strip().splitlines()
        # 10 planned requests, 20% -> 2 allowed: the 3rd failure stops the run; the error is printed once, counted
        assert lines[0].startswith("warning: model call failed: InternalServerError: ")
        assert lines[0].endswith("(repeats are counted, not printed)") and "(injected fault)" in lines[0]
        assert lines[1] == "3 model call(s) failed after retries:"
        assert lines[2].startswith("  3x InternalServerError: ") and "(injected fault)" in lines[2]
        assert len(lines) == 4 and lines[3].startswith("error: stopped: 3 failed model calls, more than the 2")
        assert "--max-failures 20% (of 10 planned requests)" in lines[3] and "re-run the same command" in lines[3]
        # the probe and 3 calls, and at most the one call that the 3rd's freed connection had let go before its
        # failure was counted: the run did stop
        assert server.request_count in (4, 5)
        assert (out_dir / "config.json").is_file() and not (out_dir / "results.json").exists()
        run_info = json.loads((out_dir / "run.json").read_text())
        assert run_info["stopped_at_failure_budget"] and run_info["failed_calls"] == 3

        healthy["value"] = True  # ... until the cause is fixed: the same command resumes and finishes
        code, out, err = _evaluate(capsys, *command)
    assert code == 0, err
    assert err == "" and "| Both |" in out
    results = json.loads((out_dir / "results.json").read_text())
    assert results["tasks"]["itp"]["failures"] == 0 and results["tasks"]["itp"]["instances"] == 10


def test_failed_answers_exit_1_unless_allowed(tmp_path: Path, capsys) -> None:
    with FakeOpenAIServer(lambda body: "I cannot help with that") as server:
        command = [
            "--model", "openai/fake", "--api-base", server.base_url, "--tasks", "itp", "--limit", "4",
            "--output", str(tmp_path / "run"),
        ]  # fmt: skip
        code, out, err = _evaluate(capsys, *command)
        assert code == 1
        assert "failed answers (scored wrong): {'itp': {'malformed_json': 4}}" in out
        assert err.strip().splitlines()[-1] == ("error: 4 of 4 instances failed; pass --allow-failures to accept them")
        code, out, err = _evaluate(capsys, *command, "--allow-failures")  # resumes: a malformed answer is final
        assert code == 0 and err == "" and "malformed_json" in out


@pytest.mark.parametrize("selection", ["limit", "sample-ids"])
def test_nothing_to_evaluate_is_exit_2(tmp_path: Path, capsys, selection: str) -> None:
    if selection == "limit":
        args = ["--limit", "0"]
    else:
        ids = tmp_path / "ids.txt"
        ids.write_text("no-such-sample\n")
        args = ["--sample-ids", str(ids)]
    code, out, err = _evaluate(capsys, "--agent", "oracle", *args, "--output", str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("error: nothing to evaluate: 0 ")
    assert not (tmp_path / "run").exists()


def test_an_empty_scope_shows_a_dash(tmp_path: Path, capsys) -> None:
    from rescue_env.data import load_dataset

    couples = [s.sample_id for s in load_dataset("demo") if s.scenario == "couple"]
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(couples) + "\n")
    code, out, err = _evaluate(
        capsys, "--agent", "oracle", "--tasks", "itp,er", "--sample-ids", str(ids), "--output", str(tmp_path / "run")
    )
    assert code == 0, err
    family = next(line for line in out.splitlines() if line.startswith("| Family |"))
    assert family == "| Family | — | — | — | — | — |"
    couple = next(line for line in out.splitlines() if line.startswith("| Couple |"))
    assert "100.00" in couple and "not run" in couple  # no judge, no BERTScore: not run, not 0.00 or 1.00
    markdown = (tmp_path / "run" / "results.md").read_text()
    assert "| Family | — | — | — | — | — |" in markdown and "| f1 (%) | 100.00 | — | 100.00 |" in markdown


def test_no_judge_is_not_run_even_when_every_answer_failed(tmp_path: Path, capsys) -> None:
    # The issue's table showed ER S_ER and VP Judge 1.00 (the failures' minimum) although no judge ran.
    with FakeOpenAIServer(faults=lambda i, body: None if i == 0 else Fault("500")) as server:
        code, out, err = _evaluate(
            capsys, "--model", "openai/fake", "--api-base", server.base_url, "--tasks", "er,vp", "--limit", "2",
            "--max-retries", "0", "--max-failures", "100%", "--output", str(tmp_path / "run"),
        )  # fmt: skip
    assert code == 1 and "re-run the same command to ask the API failures again" in err
    both = next(line for line in out.splitlines() if line.startswith("| Both |"))
    assert both == "| Both | not run | not run | not run | not run |"
    assert "failed answers (scored wrong): {'er': {'api_error': 2}, 'vp': {'api_error': 2}}" in out


def test_judge_failures_are_counted_and_shown(tmp_path: Path, capsys) -> None:
    with FakeOpenAIServer(lambda body: "I would rather not say") as judge:
        command = [
            "--model", "mock", "--judge-model", "openai/judge", "--judge-api-base", judge.base_url, "--tasks", "er",
            "--limit", "3", "--output", str(tmp_path / "run"),
        ]  # fmt: skip
        code, out, err = _evaluate(capsys, *command)
    assert code == 1
    assert "failed judge verdicts (not scored): {'er': {'malformed_json': 3}}" in out
    assert err.strip().splitlines()[-1] == "error: 3 judge verdict(s) failed; pass --allow-failures to accept them"
    both = next(line for line in out.splitlines() if line.startswith("| Both |"))
    assert both.startswith("| Both | n/a |")  # the judge ran, but no verdict was valid: not "not run", not 1.00
    markdown = (tmp_path / "run" / "results.md").read_text()
    assert "3 judge failures (not scored): {'malformed_json': 3}" in markdown
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["tasks"]["er"]["judge_failures"] == 3


def test_mock_model_runs_every_task_offline(tmp_path: Path, capsys) -> None:
    code, out, err = _evaluate(
        capsys, "--model", "mock", "--judge-model", "mock", "--tasks", "all", "--output", str(tmp_path / "mock")
    )
    assert code == 0, err
    assert err == ""
    both = next(line for line in out.splitlines() if line.startswith("| Both |"))
    assert "not run" not in both.split("|")[9] and "—" not in both  # ER S_ER judged by the mock judge
    results = json.loads((tmp_path / "mock" / "results.json").read_text())
    assert all(task["failures"] == 0 and task["judge_failures"] == 0 for task in results["tasks"].values())
    usage = json.loads((tmp_path / "mock" / "run.json").read_text())["usage"]
    assert usage["agent"]["calls"] > 0 and usage["agent"]["probe_calls"] == 0


def test_help_documents_the_failure_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "planned in this invocation" in text and "default: 20%" in text
    assert "--timeout S" in text and "(default: 120.0)" in text and "--max-retries N" in text
    assert "--allow-failures" in text and "'mock'" in text
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--max-failures", "120%"])
    assert info.value.code == 2 and "at most 100%" in capsys.readouterr().err


def test_a_resume_asks_the_batches_of_the_uninterrupted_plan(tmp_path: Path, capsys) -> None:
    # Every task, batches of 3: an interrupted run misses some batches of the plan (here every other one, the
    # pattern an API failure or a kill leaves). Its resume must ask those batches as planned -- the same prompts --
    # not new batches of whatever is left. (Re-batching the left-over instances fails this test.)
    import shutil

    with FakeOpenAIServer(lambda body: mock_responder(body["messages"])) as server:
        common = ["--tasks", "all", "--model", "openai/fake", "--api-base", server.base_url, "--batch-size", "3",
                  "--judge-model", "openai/fake", "--judge-api-base", server.base_url]  # fmt: skip
        whole, resumed = tmp_path / "whole", tmp_path / "resumed"
        code, _, err = _evaluate(capsys, *common, "--output", str(whole), "--cache-dir", str(tmp_path / "c1"))
        assert code == 0, err
        shutil.copytree(whole, resumed)
        records = _records(whole)
        by_batch: dict[tuple[str, str], list[dict]] = {}
        for record in records:
            by_batch.setdefault((record["task"], record["prompt_hash"]), []).append(record)
        kept = [r for k, (key, batch) in enumerate(sorted(by_batch.items())) if k % 2 == 0 for r in batch]
        assert len(kept) < len(records)
        (resumed / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        code, _, err = _evaluate(capsys, *common, "--output", str(resumed), "--cache-dir", str(tmp_path / "c2"))
        assert code == 0, err
    hashes = [{(r["task"], r["instance_id"]): r["prompt_hash"] for r in _records(run)} for run in (whole, resumed)]
    assert hashes[0] == hashes[1]
    assert {r["task"] for r in records} == {"itp", "rpp", "stp", "ssp", "er", "vp"}


def test_changing_only_tasks_keeps_every_answer(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert _evaluate(capsys, "--tasks", "itp", "--agent", "heuristic", "--output", str(out))[0] == 0
    itp = {r["instance_id"]: r for r in _records(out)}
    assert _evaluate(capsys, "--tasks", "rpp", "--agent", "heuristic", "--output", str(out))[0] == 0
    records = _records(out)
    assert {r["task"] for r in records} == {"itp", "rpp"}
    assert {r["instance_id"]: r for r in records if r["task"] == "itp"} == itp  # the earlier task's answers, intact
    assert _evaluate(capsys, "--tasks", "itp,rpp", "--agent", "heuristic", "--output", str(out))[0] == 0
    assert len(_records(out)) == len(records)  # nothing asked twice, nothing dropped
