"""The verifiers bridge (``bridges/verifiers_env.py``) against the project's own runs, on the demo data with the
deterministic mock answers of the local OpenAI-compatible server: every metric of every task from the bridge's
rollouts equals ``rescue-bench evaluate --batch-size 1``'s per scope; the therapist's returns (and the whole
rollout report) equal ``rescue-bench rollout``'s for the same answers and seeds, and ``RescueSim-v1``'s a plain loop
over the gym env. Skipped without a verifiers that has the classic API (>=0.1.10,<0.4)."""

from __future__ import annotations

import contextlib
import io
import json
import signal
from pathlib import Path

import pytest

from agents.fake_server import FakeOpenAIServer
from agents.mock import mock_responder
from benchmarks.registry import TASK_NAMES
from rescue_env.cli import main

verifiers_env = pytest.importorskip("bridges.verifiers_env")
try:
    vf = verifiers_env.import_verifiers()
except ImportError as exc:  # verifiers absent, or 0.4+ (no SingleTurnEnv / MultiTurnEnv / Rubric)
    pytest.skip(str(exc), allow_module_level=True)

KEY = "RESCUE_VERIFIERS_TEST_KEY"

README = """
import os
from agents.fake_server import FakeOpenAIServer  # stands for any OpenAI-compatible server (vLLM, a provider)
from agents.mock import mock_responder
from bridges.verifiers_env import import_verifiers, load_environment

vf = import_verifiers()  # verifiers>=0.1.10,<0.4, imported next to this project's own `agents` package
itp = load_environment(task="itp", limit=12)  # a vf.SingleTurnEnv: one instance per row, scored by our rubric
therapist = load_environment(env="RescueSim-v0", episodes=2)  # a vf.MultiTurnEnv: one episode per row
os.environ.setdefault("OPENAI_API_KEY", "unused")
with FakeOpenAIServer(lambda body: mock_responder(body["messages"])) as server:
    client = vf.ClientConfig(api_base_url=server.base_url, api_key_var="OPENAI_API_KEY")
    answered = itp.evaluate_sync(client=client, model="mock", state_columns=["rescue"])
    played = therapist.evaluate_sync(client=client, model="mock", state_columns=["rescue"])
print(itp.rescue.summary(answered["outputs"])["all"]["metrics"])  # ITP's precision, recall, F1, ... (evaluate's)
print([o["reward"] for o in played["outputs"]])  # episode returns (rescue-bench rollout's)
print(therapist.rescue.report(played["outputs"]).scopes["all"].mean_return)
"""


def responder(body: dict) -> str:
    return mock_responder(body["messages"])


@pytest.fixture(scope="module", autouse=True)
def keep_signal_handlers():
    """verifiers' Environment installs SIGINT/SIGTERM handlers when built: the other tests keep the defaults."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(responder) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY, "unused")
        yield vf.ClientConfig(api_base_url=server.base_url, api_key_var=KEY)


def play(environment, client) -> list[dict]:
    results = environment.evaluate_sync(client=client, model="fake", num_examples=-1, state_columns=["rescue"])
    return list(results["outputs"])


@pytest.fixture(scope="module")
def evaluated(server, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("evaluate") / "run"
    args = ["evaluate", "--tasks", "all", "--batch-size", "1", "--model", "openai/fake", "--api-base",
            server.base_url, "--bootstrap", "0", "--no-progress", "--output", str(out)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_every_task_metric_equals_evaluate_per_scope(task: str, evaluated: dict, client) -> None:
    environment = verifiers_env.load_environment(task=task)
    assert isinstance(environment, vf.SingleTurnEnv)
    outputs = play(environment, client)
    bridge = environment.rescue.summary(outputs)
    theirs = evaluated["tasks"][task]
    assert len(outputs) == theirs["instances"] == bridge["all"]["instances"]
    for scope in ("couple", "family", "all"):
        assert bridge[scope]["instances"] == theirs["scopes"][scope]["instances"], scope
        expected = {k: v["value"] for k, v in theirs["scopes"][scope]["metrics"].items()}
        assert set(bridge[scope]["metrics"]) == set(expected)
        for key, value in expected.items():
            got = bridge[scope]["metrics"][key]
            if value is None or key != "bertscore":
                assert got == value, (task, scope, key)
            else:  # BERTScore of one pair at a time vs the runner's one batch: float rounding only
                assert got == pytest.approx(value, rel=1e-6, abs=1e-6), (task, scope, key)
    # The reward is the documented per-instance number: its mean is a headline metric where one exists.
    rewards = [o["reward"] for o in outputs]
    headline = {"itp": "accuracy", "rpp": "mrr", "stp": "mrr", "ssp": "mrr", "vp": "target_match"}.get(task)
    if headline:
        assert sum(rewards) / len(rewards) == pytest.approx(theirs["scopes"]["all"]["metrics"][headline]["value"])
    else:  # ER: the intensity score on 0-1
        s_int = theirs["scopes"]["all"]["metrics"]["s_int"]["value"]
        assert sum(rewards) / len(rewards) == pytest.approx((s_int - 1) / 4)


def test_rows_carry_no_gold_and_failures_score_wrong() -> None:
    bridge = verifiers_env.TaskBridge("rpp", limit=6)
    rows = bridge.rows()
    assert [r["prompt"] for r in rows] == [bridge.messages(i) for i in bridge.instances]
    for row, instance in zip(rows, bridge.instances):
        assert row["answer"] == "" and set(row["info"]) == {"instance_id", "scenario"}
        assert str(instance.gold["pattern"]) not in json.dumps(row["info"])
    rubric = bridge.rubric(vf)
    main_reward = rubric.funcs[0]
    for text in (None, "", "not json", '{"answers": [{"id": "7", "ranking": ["x"]}]}'):
        state: dict = {}
        assert main_reward(completion=[{"role": "assistant", "content": text}], info=rows[0]["info"], state=state) == 0
        assert state["rescue"]["failure"] is not None
    state = {}
    answer = json.dumps({"answers": [{"id": "1", **bridge.task.oracle_answer(bridge.instances[0])}]})
    assert main_reward(completion=[{"role": "assistant", "content": answer}], info=rows[0]["info"], state=state) == 1
    assert state["rescue"]["score"]["rank"] == 1


@pytest.mark.parametrize("env_id", ["Rescue-v0", "Rescue-v1", "RescueSim-v0", "RescueSim-v1"])
def test_therapist_returns_equal_rollout(env_id: str, server, client, tmp_path: Path) -> None:
    environment = verifiers_env.load_environment(env=env_id)
    assert isinstance(environment, vf.MultiTurnEnv)
    outputs = play(environment, client)
    out = tmp_path / "rollout"
    args = ["rollout", "--env", env_id, "--model", "openai/fake", "--api-base", server.base_url, "--bootstrap", "0",
            "--no-progress", "--output", str(out)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
    steps = [json.loads(line) for line in (out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()]
    theirs = {s["sample_id"]: s["episode_end"]["return"] for s in steps if s["terminated"]}
    mine = {o["rescue"]["sample_id"]: o["reward"] for o in outputs}
    assert mine == theirs and len(mine) == 6
    for output in outputs:  # the rubric's metrics are the episode's own numbers
        end = output["rescue"]["steps"][-1]["episode_end"]
        assert output["metrics"]["discounted_return"] == end["discounted_return"]
        assert output["metrics"]["failed_steps"] == 0
        assert len(output["rescue"]["steps"]) == end["length"]
    keys = ("sample_id", "step", "row", "chosen", "gold", "components", "reward", "raw", "failure", "prompt_hash")
    by_episode = {o["rescue"]["sample_id"]: o["rescue"]["steps"] for o in outputs}
    assert [{k: s[k] for k in keys} for sid in theirs for s in by_episode[sid]] == [
        {k: s[k] for k in keys} for s in steps
    ]
    rolled = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert environment.rescue.report(outputs).model_dump()["scopes"] == rolled["scopes"]


def test_rescuesim_v1_returns_equal_the_env_loop(client) -> None:
    import gymnasium as gym

    from agents.therapist import parse_decision, therapist_messages
    from benchmarks.rollout import episode_seed

    environment = verifiers_env.load_environment(env="RescueSim-v1")
    outputs = play(environment, client)
    expected = {}
    for output in outputs:
        sample_id = output["rescue"]["sample_id"]
        env = gym.make("RescueSim-v1", starts="all", info_level="full").unwrapped
        observation, _ = env.reset(seed=episode_seed(0, sample_id), options={"sample_id": sample_id})
        total, done = 0.0, False
        while not done:
            action = parse_decision(mock_responder(therapist_messages(observation)), observation).action
            observation, reward, terminated, truncated, info = env.step(action)
            total, done = total + reward, terminated or truncated
        expected[sample_id] = info["episode"]["return"]
        assert total == pytest.approx(expected[sample_id])
    assert {o["rescue"]["sample_id"]: o["reward"] for o in outputs} == expected


def test_an_unfinished_episode_is_played_out_with_the_fallback() -> None:
    bridge = verifiers_env.TherapistBridge("Rescue-v0", episodes=1)
    episode = bridge.start(bridge.samples[0].sample_id)
    episode.answer('{"intervene": true, "targets": ["everyone"], "strategy": "not_a_key"}')
    episode.finish()
    record = episode.summary()
    assert record["steps"][0]["failure"] == "invalid_strategy"
    assert all(s["failure"] == "api_error" and not s["chosen"]["intervene"] for s in record["steps"][1:])
    assert record["return"] == record["steps"][-1]["episode_end"]["return"]


def test_readme_snippet_runs_as_written(capsys) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"```py\n{README.strip()}\n```" in readme  # the README carries exactly this block
    exec(compile(README, "README", "exec"), {})
    printed = capsys.readouterr().out
    assert "f1" in printed and "precision" in printed and printed.strip().count("\n") >= 2
