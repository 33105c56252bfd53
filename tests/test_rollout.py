"""`rescue-bench rollout` and its run directory (benchmarks/rollout.py, benchmarks/rollout_results.py): built-in
policies and the LLM therapist write the same outputs; the offline mock model; a real OpenAI-compatible server on
127.0.0.1 for concurrency, kill -9 and resume, faults and key hygiene; the failure cases with their exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_tasks_common import _scrub_annotations

from agents.client import LLMClient, ModelConfig
from agents.fake_server import FakeOpenAIServer, Fault
from agents.mock import mock_responder
from agents.therapist import is_therapist_prompt
from benchmarks.rollout import Rollout, RolloutConfig, TrajectoryStore, episode_seed
from benchmarks.rollout_results import STAT_COLUMNS, bootstrap_intervals, metrics_from_sums
from benchmarks.runs import RunOptions
from rescue_env.cli import main
from rescue_env.data import Dataset, load_dataset
from rescue_env.envs.replay import RescueEnv

FILES = ("config.json", "trajectories.jsonl", "results.json", "results.csv", "results.md", "run.json")

QUIET = RunOptions(progress=False)


def responder(body: dict) -> str:
    return mock_responder(body["messages"])


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def decision_points(sample_ids: list[str] | None = None) -> int:
    env = RescueEnv()
    return sum(len(env.episode(s).points) for s in env.samples if sample_ids is None or s.sample_id in sample_ids)


# ----------------------------------------------------------------------------------------------------------------
# pure pieces


def test_metrics_from_sums_by_hand() -> None:
    sums = np.zeros(len(STAT_COLUMNS))
    values = dict(
        steps=10,
        gold_steps=10,
        intervention_steps=4,
        final_max_distress=0.8,
        tp=3,
        fp=1,
        tn=4,
        fn=2,
        target_steps=2,
        target_exact=1,
        target_jaccard=1.5,
        strategy_steps=2,
        strategy_correct=1,
        failed_steps=1,
        **{"return": 6.0},
    )
    for key, value in values.items():
        sums[STAT_COLUMNS.index(key)] = value
    m = metrics_from_sums(sums, 2.0)
    assert m["timing_precision"] == pytest.approx(0.75) and m["timing_recall"] == pytest.approx(0.6)
    assert m["timing_f1"] == pytest.approx(2 * 0.75 * 0.6 / 1.35) and m["timing_accuracy"] == pytest.approx(0.7)
    assert m["target_exact"] == 0.5 and m["target_jaccard"] == 0.75 and m["strategy_accuracy"] == 0.5
    assert m["failure_rate"] == pytest.approx(0.1) and m["mean_return"] == 3.0
    assert m["intervention_rate"] == pytest.approx(0.4) and m["mean_final_max_distress"] == pytest.approx(0.4)
    empty = metrics_from_sums(np.zeros(len(STAT_COLUMNS)), 0.0)
    assert empty["timing_precision"] == 0.0 and np.isnan(empty["target_exact"]) and np.isnan(empty["mean_return"])


def test_bootstrap_over_episodes() -> None:
    stats = np.zeros((2, len(STAT_COLUMNS)))
    stats[:, STAT_COLUMNS.index("return")] = [1.0, 3.0]
    intervals = bootstrap_intervals(stats, 500, seed=0)
    low, high = intervals["mean_return"]
    assert low == pytest.approx(1.0) and high == pytest.approx(3.0)  # resamples of {1, 3}: means 1, 2, 3
    assert intervals["target_exact"] is None  # nothing to measure in any resample
    assert bootstrap_intervals(stats, 500, seed=0) == intervals
    assert bootstrap_intervals(stats, 0, seed=0)["mean_return"] is None


def test_episode_seed_depends_on_seed_and_episode_only() -> None:
    assert episode_seed(0, "a/1") == episode_seed(0, "a/1")
    assert len({episode_seed(0, "a/1"), episode_seed(1, "a/1"), episode_seed(0, "a/2")}) == 3


def test_config_rules() -> None:
    with pytest.raises(ValueError, match="either --policy NAME or --model"):
        RolloutConfig()
    with pytest.raises(ValueError, match="either --policy NAME or --model"):
        RolloutConfig(policy="never", model="mock")
    with pytest.raises(ValueError, match="outside the evaluated split"):
        RolloutConfig(model="mock", few_shot=2)
    with pytest.raises(ValueError, match="options of the LLM therapist"):
        RolloutConfig(policy="heuristic", history=True)
    with pytest.raises(ValueError) as pasted:
        RolloutConfig(model="mock", api_key_env="sk-live-abcdef-123456")
    assert "sk-live-abcdef-123456" not in str(pasted.value)


# ----------------------------------------------------------------------------------------------------------------
# built-in policies and the mock model


@pytest.mark.parametrize("agent", [["--policy", "heuristic"], ["--policy", "oracle"], ["--model", "mock"]])
def test_every_agent_writes_the_same_run_directory(tmp_path: Path, capsys, agent: list[str]) -> None:
    out = tmp_path / "run"
    assert main(["rollout", *agent, "--output", str(out), "--no-progress", "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "timing F1 %" in printed and "mean return [group]" in printed
    for name in FILES:
        assert (out / name).is_file(), name
    steps = lines(out / "trajectories.jsonl")
    assert len(steps) == decision_points()
    assert {"sample_id", "row", "chosen", "gold", "components", "reward", "raw", "failure", "prompt_hash"} <= set(
        steps[0]
    )
    results = json.loads((out / "results.json").read_text())
    assert results["episodes"] == 6 and results["scopes"]["all"]["steps"] == len(steps)
    assert results["scopes"]["all"]["failed_steps"] == 0
    frame = pd.read_csv(out / "results.csv")
    assert set(frame["scope"]) == {"couple", "family", "all"} and "timing_f1" in set(frame["metric"])
    assert len(pd.read_json(out / "trajectories.jsonl", lines=True)) == len(steps)
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["sha256"] and config["versions"]["python"] and config["split"]["config"]["split"] == "all"
    if agent[0] == "--model":
        assert all(s["prompt_hash"] and s["raw"] for s in steps)
    else:
        assert all(s["raw"] is None for s in steps)
    if agent[1] == "oracle":
        assert results["scopes"]["all"]["timing"]["f1"] == 1.0


def test_mock_run_resumes_with_zero_calls(tmp_path: Path, capsys) -> None:
    args = [
        "rollout",
        "--model",
        "mock",
        "--split",
        "test",
        "--history",
        "--output",
        str(tmp_path / "m"),
        "--no-progress",
    ]
    assert main(args) == 0
    first = (tmp_path / "m" / "results.json").read_text()
    calls = json.loads((tmp_path / "m" / "run.json").read_text())["usage"]["calls"]
    test_ids = json.loads((tmp_path / "m" / "config.json").read_text())["episodes"]
    assert calls == decision_points(test_ids) and 0 < len(test_ids) < 6
    assert main(args) == 0
    again = json.loads((tmp_path / "m" / "run.json").read_text())
    assert again["usage"]["calls"] == 0 and again["episodes_resumed"] == len(test_ids)
    assert (tmp_path / "m" / "results.json").read_text() == first
    capsys.readouterr()


def test_split_and_episodes_select_the_conversations(tmp_path: Path) -> None:
    dataset = load_dataset()
    train = Rollout(RolloutConfig(policy="never", split="train"), tmp_path / "a", dataset=dataset, options=QUIET)
    test = Rollout(RolloutConfig(policy="never", split="test"), tmp_path / "b", dataset=dataset, options=QUIET)
    train_ids, test_ids = {s.sample_id for s in train.samples}, {s.sample_id for s in test.samples}
    assert train_ids and test_ids and not train_ids & test_ids and len(train_ids | test_ids) == 6
    assert {s.sample_id for s in test.outside} == train_ids
    two = Rollout(RolloutConfig(policy="never", episodes=2), tmp_path / "c", dataset=dataset, options=QUIET)
    assert sorted(s.scenario for s in two.samples) == ["couple", "family"]  # stratified, not the first two


def test_majority_is_fitted_outside_the_evaluated_split(tmp_path: Path, monkeypatch) -> None:
    import policies

    fitted_on: list[list[str]] = []
    real = policies.make_policy

    def spy(name, env, seed=0):
        fitted_on.append([s.sample_id for s in env.samples])
        return real(name, env, seed)

    monkeypatch.setattr(policies, "make_policy", spy)
    rollout = Rollout(RolloutConfig(policy="majority", split="test"), tmp_path / "m", options=QUIET)
    rollout.run()
    assert fitted_on == [[s.sample_id for s in rollout.outside]]
    assert not set(fitted_on[0]) & {s.sample_id for s in rollout.samples}


def test_rollout_prompts_read_no_annotation(tmp_path: Path) -> None:
    """Every prompt of a rollout (with the history option) is unchanged when every annotation is rewritten."""
    dataset = load_dataset()
    scrubbed = Dataset([_scrub_annotations(s) for s in dataset], dataset.source, dataset.sha256, dataset.report)
    seen: dict[str, list[str]] = {"original": [], "scrubbed": []}
    hashes = {}
    for name, data in (("original", dataset), ("scrubbed", scrubbed)):

        def model(messages: list[dict], name: str = name) -> str:
            seen[name].append(json.dumps(messages))
            return mock_responder(messages)

        client = LLMClient(ModelConfig(model="openai/recorder"), mock_response=model)
        config = RolloutConfig(model="openai/recorder", history=True, bootstrap=0)
        Rollout(config, tmp_path / name, dataset=data, options=QUIET, client=client).run()
        hashes[name] = [s["prompt_hash"] for s in lines(tmp_path / name / "trajectories.jsonl")]
    assert len(hashes["original"]) == decision_points() and hashes["original"] == hashes["scrubbed"]
    assert sorted(seen["original"]) == sorted(seen["scrubbed"])
    assert not any("CHANGED" in prompt for prompt in seen["scrubbed"])


def test_few_shot_examples_never_come_from_the_evaluated_split(tmp_path: Path) -> None:
    prompts: list[str] = []

    def model(messages: list[dict]) -> str:
        prompts.append(messages[-1]["content"])
        return mock_responder(messages)

    client = LLMClient(ModelConfig(model="openai/recorder"), mock_response=model)
    config = RolloutConfig(model="openai/recorder", split="test", few_shot=2, bootstrap=0)
    rollout = Rollout(config, tmp_path / "f", options=QUIET, client=client)
    rollout.run()
    assert prompts and all("Decisions real therapists made in other sessions" in p for p in prompts)
    evaluated = {row.dialogue_cleaned for s in rollout.samples for row in s.rows}
    outside = {row.dialogue_cleaned for s in rollout.outside for row in s.rows}
    examples = [p.partition("Decisions real therapists made")[2].partition("## Conversation")[0] for p in prompts]
    assert any(text in examples[0] for text in outside)
    assert not any(text in block for block in examples for text in evaluated)
    assert json.loads((tmp_path / "f" / "config.json").read_text())["config"]["few_shot"] == 2


def test_other_settings_in_the_same_directory_are_refused(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "r")
    assert main(["rollout", "--policy", "never", "--output", out, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["rollout", "--policy", "never", "--reward", "group", "--output", out, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds a rollout with other settings (reward: 'combined' -> 'group')" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give either --policy NAME or --model"),
        (["--policy", "never", "--model", "mock"], "give either --policy NAME or --model"),
        (["--model", "mock", "--few-shot", "2"], "--few-shot takes its examples from conversations outside"),
        (["--policy", "ppo:/no/such/model.zip"], "error:"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    assert main(["rollout", *args, "--output", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x" / "config.json").exists()


def test_nothing_to_evaluate_exits_2(tmp_path: Path, capsys) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("no/such/sample\n")
    assert main(["rollout", "--policy", "never", "--sample-ids", str(ids), "--output", str(tmp_path / "x")]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_pasted_key_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "rollout",
                "--model",
                "openai/x",
                "--api-key-env",
                "sk-proj-abc-123456789",
                "--output",
                str(tmp_path / "k"),
            ]
        )
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "sk-proj-abc-123456789" not in err and "NAME of an environment variable" in err
    assert not (tmp_path / "k").exists()


def test_unset_key_variable_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("RESCUE_UNSET_KEY", raising=False)
    code = main(
        [
            "rollout",
            "--model",
            "openai/gpt-4o-mini",
            "--api-key-env",
            "RESCUE_UNSET_KEY",
            "--output",
            str(tmp_path / "k"),
            "--no-progress",
        ]
    )
    assert code == 2 and "RESCUE_UNSET_KEY" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


def test_dead_api_base_stops_at_once(tmp_path: Path, capsys) -> None:
    started = time.perf_counter()
    code = main(
        [
            "rollout",
            "--model",
            "openai/fake",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "--output",
            str(tmp_path / "d"),
            "--no-progress",
        ]
    )
    assert code == 2 and time.perf_counter() - started < 30
    err = capsys.readouterr().err
    assert "cannot connect" in err and "--api-base" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


# ----------------------------------------------------------------------------------------------------------------
# a real HTTP server on 127.0.0.1


def test_local_server_faults_are_counted_and_the_exit_code_says_so(tmp_path: Path, capsys) -> None:
    therapist_requests = []

    def faults(index: int, body: dict) -> Fault | None:
        if not is_therapist_prompt(body["messages"]):
            return None  # the probe
        therapist_requests.append(index)
        n = len(therapist_requests)
        plan = {1: Fault("429"), 2: Fault("500"), 3: Fault("truncated"), 5: Fault("garbage"), 6: Fault("timeout"),
                8: Fault("503")}  # fmt: skip
        return plan.get(n)

    with FakeOpenAIServer(responder, faults=faults) as server:
        args = [
            "rollout",
            "--model",
            "openai/fake",
            "--api-base",
            server.base_url,
            "--split",
            "test",
            "--max-retries",
            "2",
            "--timeout",
            "1",
            "--output",
            str(tmp_path / "f"),
            "--no-progress",
            "--bootstrap",
            "0",
        ]
        assert main(args) == 1
        captured = capsys.readouterr()
        usage = json.loads((tmp_path / "f" / "run.json").read_text())["usage"]
        assert main([*args, "--allow-failures"]) == 0  # the same run, its failure accepted: resumed, exit 0
        assert "decisions failed" not in capsys.readouterr().err
        assert json.loads((tmp_path / "f" / "run.json").read_text())["usage"]["calls"] == 0
    results = json.loads((tmp_path / "f" / "results.json").read_text())
    assert results["scopes"]["all"]["failures"] == {"malformed_json": 1}  # the garbage; the rest was retried away
    assert "1 of" in captured.err and "--allow-failures" in captured.err
    steps = lines(tmp_path / "f" / "trajectories.jsonl")
    bad = [s for s in steps if s["failure"]]
    assert len(bad) == 1 and bad[0]["chosen"]["intervene"] is False and bad[0]["raw"]
    assert usage["retries"] == 5 and usage["calls"] == len(steps)  # 429, 500, cut body, timeout, 503
    with FakeOpenAIServer(responder) as server:  # another server (another port) is another setting: refused
        args[args.index("--api-base") + 1] = server.base_url
        assert main([*args, "--allow-failures"]) == 2  # the api_base is a setting: another server is refused
    assert "api_base" in capsys.readouterr().err


def test_budget_stops_the_run_and_prints_the_error_once(tmp_path: Path, capsys) -> None:
    def faults(index: int, body: dict) -> Fault | None:
        return Fault("500", message="backend exploded") if is_therapist_prompt(body["messages"]) else None

    with FakeOpenAIServer(responder, faults=faults) as server:
        args = [
            "rollout",
            "--model",
            "openai/fake",
            "--api-base",
            server.base_url,
            "--max-retries",
            "0",
            "--max-connections",
            "2",
            "--max-failures",
            "3",
            "--output",
            str(tmp_path / "b"),
            "--no-progress",
        ]
        assert main(args) == 1
    err = capsys.readouterr().err
    assert "stopped: 4 failed model calls, more than the 3 allowed by --max-failures 3" in err
    assert "re-run the same command to resume" in err
    assert sum("warning: model call failed" in line for line in err.splitlines()) == 1
    assert "4x " in err or "x InternalServerError" in err


def test_concurrency_kill_resume_and_key_hygiene(tmp_path: Path, monkeypatch, capsys) -> None:
    """Episodes run concurrently up to --max-connections; a run killed with SIGKILL and resumed writes the same
    results.json as an uninterrupted one and asks only what it had not finished; no file holds the key. Only the
    killed run is a process of its own (SIGKILL); the others run in this one (no second litellm import)."""
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def slow(body: dict) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return responder(body)

    monkeypatch.setenv("RESCUE_TEST_KEY", "sk-planted-SECRET-5151")
    with FakeOpenAIServer(slow, latency=0.02, expected_api_key="sk-planted-SECRET-5151") as server:
        common = [
            "rollout",
            "--model",
            "openai/fake",
            "--api-base",
            server.base_url,
            "--api-key-env",
            "RESCUE_TEST_KEY",
            "--history",
            "--max-connections",
            "3",
            "--bootstrap",
            "200",
            "--no-progress",
        ]

        def cli(out: str) -> int:
            return main([*common, "--output", str(tmp_path / out)])

        assert cli("whole") == 0
        total = server.request_count
        assert state["peak"] == 3

        killed = subprocess.Popen(
            [sys.executable, "-m", "rescue_env.cli", *common, "--output", str(tmp_path / "resumed")],
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 120
        while server.request_count < total + total // 2 and time.time() < deadline:
            time.sleep(0.02)
        killed.send_signal(signal.SIGKILL)
        _, killed_err = killed.communicate(timeout=30)
        kept = TrajectoryStore(tmp_path / "resumed").episodes
        assert 0 < len(kept) < 6

        assert cli("resumed") == 0
    first = json.loads((tmp_path / "whole" / "results.json").read_text())
    second = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert first == second
    run_info = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert run_info["episodes_resumed"] == len(kept) and run_info["episodes_played"] == 6 - len(kept)
    before = server.request_count
    assert cli("resumed") == 0  # everything on disk: not even the probe is sent (the server is closed, too)
    assert server.request_count == before
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "SECRET-5151" not in path.read_text(encoding="utf-8", errors="replace"), path
    printed = capsys.readouterr()
    assert "SECRET-5151" not in printed.out + printed.err + killed_err


@pytest.mark.parametrize(
    ("server_options", "extra", "needle"),
    [
        ({"expected_api_key": "sk-right-key-9999"}, ["--api-key-env", "RESCUE_WRONG_KEY"], "refused the credentials"),
        ({"known_models": ["other"]}, [], "unknown model 'openai/fake'"),
    ],
)
def test_refused_key_and_unknown_model_exit_2(tmp_path: Path, capsys, monkeypatch, server_options, extra, needle):
    monkeypatch.setenv("RESCUE_WRONG_KEY", "sk-wrong-key-1234")
    with FakeOpenAIServer(responder, **server_options) as server:
        code = main(["rollout", "--model", "openai/fake", "--api-base", server.base_url, *extra, "--output",
                     str(tmp_path / "x"), "--no-progress"])  # fmt: skip
        assert server.request_count == 1  # the probe, and nothing after it
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert "sk-wrong-key-1234" not in err and not (tmp_path / "x").exists()


def test_an_empty_scope_shows_a_dash(tmp_path: Path, capsys) -> None:
    ids = tmp_path / "couples.txt"
    ids.write_text("".join(s.sample_id + "\n" for s in load_dataset() if s.scenario == "couple"))
    args = ["rollout", "--policy", "heuristic", "--sample-ids", str(ids), "--output", str(tmp_path / "c")]
    assert main([*args, "--no-progress"]) == 0
    family = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("timing F1 %"))
    assert family.split()[-2] == "—"  # couple, family, all: the family column has nothing to measure
    results_md = (tmp_path / "c" / "results.md").read_text()
    assert "| target exact match % |" in results_md and "| — |" in results_md


# ----------------------------------------------------------------------------------------------------------------
# the closed loop, RescueSim-v0


def test_closed_loop_config_rules() -> None:
    with pytest.raises(ValueError, match="Eq. 14"):
        RolloutConfig(policy="never", env_id="RescueSim-v0", reward="group")
    with pytest.raises(ValueError, match="whole opening"):
        RolloutConfig(policy="never", env_id="RescueSim-v0", context_size=3)
    with pytest.raises(ValueError, match="--participants llm"):
        RolloutConfig(model="mock", participants="llm")  # the replay has no simulated participants
    with pytest.raises(ValueError, match="--participants llm"):
        RolloutConfig(policy="never", env_id="RescueSim-v0", participants="llm")  # personas need a model
    with pytest.raises(ValueError, match="participants must be one of"):
        RolloutConfig(model="mock", env_id="RescueSim-v0", participants="robots")


def test_closed_loop_rollout_with_the_mock_model(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sim"
    args = ["rollout", "--env", "RescueSim-v0", "--model", "mock", "--output", str(out), "--no-progress"]
    assert main([*args, "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "final max distress" in printed and "mean return (eq14)" in printed
    steps = lines(out / "trajectories.jsonl")
    assert steps and all(s["gold"] is None and s["row"] is None and s["prompt_hash"] for s in steps)
    assert all(set(s["state"]["distress"]) and s["speaker"] for s in steps)
    results = json.loads((out / "results.json").read_text())
    scope = results["scopes"]["all"]
    assert scope["timing"] is None and scope["target_steps"] == 0  # nothing to imitate in a closed loop
    assert scope["mean_final_max_distress"] is not None and 0 <= scope["intervention_rate"] <= 1
    assert results["reward"] == "eq14" and results["episodes"] == 6
    ends = [s["episode_end"] for s in steps if s["terminated"]]
    assert len(ends) == 6
    assert scope["mean_return"] == pytest.approx(sum(e["return"] for e in ends) / 6)
    frame = pd.read_csv(out / "results.csv")
    assert {"intervention_rate", "mean_final_max_distress"} <= set(frame["metric"])
    assert not (out / "transcripts").exists()
    assert main(args) == 0  # resumed: nothing played again
    assert json.loads((out / "run.json").read_text())["usage"]["calls"] == 0
    capsys.readouterr()


def test_rescuesim_v1_rollout_equals_a_loop_over_gym_make(tmp_path: Path, capsys) -> None:
    # One fit per run on the whole data's train side: an episode's env over one conversation keeps the full
    # data's F1, behaviour prior and beta, so each return equals gym.make's env over all the conversations.
    import gymnasium as gym

    from policies import make_policy

    out = tmp_path / "sim-v1"
    args = ["rollout", "--env", "RescueSim-v1", "--policy", "heuristic", "--output", str(out), "--no-progress"]
    assert main([*args, "--bootstrap", "0"]) == 0
    assert "mean return (eq14+prior)" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    steps = lines(out / "trajectories.jsonl")
    theirs = {s["sample_id"]: s["episode_end"]["return"] for s in steps if s["terminated"]}
    env = gym.make("RescueSim-v1", starts="all", info_level="full").unwrapped
    assert results["reward"] == "eq14+prior" and results["reward_config"]["beta"] == pytest.approx(env.beta)
    policy = make_policy("heuristic", env, 0)
    mine = {}
    for sample in env.samples:
        seed = episode_seed(0, sample.sample_id)
        observation, _ = env.reset(seed=seed, options={"sample_id": sample.sample_id})
        policy.reset(seed=seed)
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(policy.act(observation, env))
            done = terminated or truncated
        mine[sample.sample_id] = info["episode"]["return"]
    assert mine == pytest.approx(theirs) and len(mine) == results["episodes"] == 6
    with pytest.raises(ValueError, match="--participants llm"):
        RolloutConfig(model="mock", env_id="RescueSim-v1", participants="llm")  # the personas' view is v0's


def test_llm_personas_play_against_the_local_server(tmp_path: Path, capsys) -> None:
    out = tmp_path / "personas"
    with FakeOpenAIServer(responder) as server:
        args = ["rollout", "--env", "RescueSim-v0", "--model", "openai/fake", "--api-base", server.base_url,
                "--participants", "llm", "--split", "test", "--output", str(out), "--no-progress"]  # fmt: skip
        assert main(args) == 0
        requests = server.request_count
    capsys.readouterr()
    steps = lines(out / "trajectories.jsonl")
    transcripts = sorted((out / "transcripts").glob("*.jsonl"))
    episodes = {s["sample_id"] for s in steps}
    assert len(transcripts) == len(episodes) > 0
    records = [r for path in transcripts for r in lines(path)]
    assert len(records) == len(steps)  # one client turn per step
    spoken = [r for r in records if r["words"]]
    assert spoken and all(r["speaker"] for r in spoken)
    # The therapist's decisions and the personas' turns are all asked: sent to the server (plus the probe), or
    # answered by the run's cache when the same prompt came up twice (how often depends on the episodes' timing).
    run = json.loads((out / "run.json").read_text())
    usage = run["usage"]
    assert usage["calls"] + usage["cache_hits"] == len(steps) + len(spoken)
    assert requests == usage["calls"] + usage["probe_calls"]
    assert run["persona_failures"] == {} and run["failed_calls"] == {}
    # Words are text only: the returns equal those of the same run without personas (same seeds, same F).
    plain = tmp_path / "plain"
    with FakeOpenAIServer(responder) as server:
        args = ["rollout", "--env", "RescueSim-v0", "--model", "openai/fake", "--api-base", server.base_url,
                "--split", "test", "--output", str(plain), "--no-progress"]  # fmt: skip
        assert main(args) == 0
    capsys.readouterr()
    returns = [json.loads((d / "results.json").read_text())["scopes"]["all"]["mean_return"] for d in (out, plain)]
    assert returns[0] == pytest.approx(returns[1])
