"""``benchmarks.rollout.evaluate_policy``, the ``rescue-bench rollout`` command and ``scripts/reward_table.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_row, make_sample, write_jsonl

from benchmarks.rollout import evaluate_policy
from benchmarks.rollout_results import PolicyReport, format_report
from policies import make_policy
from rescue_env.cli import main
from rescue_env.envs.replay import RescueEnv
from rescue_env.reward import PRESETS, RewardConfig

ROOT = Path(__file__).resolve().parents[1]


def _tiny(tmp_path: Path) -> Path:
    """One couple conversation, no emotion annotated (d = 0): Ana, Ben, Therapist -> Ana with reframe, Ana, Ben.
    Decision points after rows 1 (Ben next: z* = 0), 2 (therapist next: z* = 1, A* = {Ana}, a* = reframe) and
    4 (Ben next: z* = 0)."""
    sample = make_sample("t/1", ["Ana", "Ben"])
    sample["rows"] += [
        make_row(
            2, "Therapist", support_strategy=[{"provider": "Therapist", "target": ["Ana"], "strategy_type": "reframe"}]
        ),
        make_row(3, "Ana"),
        make_row(4, "Ben"),
    ]
    return write_jsonl(tmp_path / "tiny.jsonl", [sample])


def test_always_everyone_by_hand(tmp_path: Path) -> None:
    config = RewardConfig.preset("combined", lam=1.0, kappa=0.5)
    report = evaluate_policy("always-everyone", {"data": str(_tiny(tmp_path)), "reward": config})
    scope = report.scopes["all"]
    assert (scope.episodes, scope.steps) == (1, 3)
    t = scope.timing
    assert (t.tp, t.fp, t.tn, t.fn) == (1, 2, 0, 0)
    assert t.precision == pytest.approx(1 / 3) and t.recall == 1.0
    assert t.f1 == pytest.approx(0.5) and t.accuracy == pytest.approx(1 / 3)
    # A = {Ana, Ben} against A* = {Ana}; strategy track against reframe
    assert (scope.target_steps, scope.target_exact, scope.target_jaccard) == (1, 0.0, 0.5)
    assert (scope.strategy_steps, scope.strategy_accuracy) == (1, 0.0)
    # imitation: timing 0 + (1 + 1/2 + 0) + 0; group: U = 1, no unmet need, kappa paid at each of 3 steps
    assert scope.returns_by_preset["imitation"] == pytest.approx(1.5)
    assert scope.returns_by_preset["group"] == pytest.approx(3 - 3 * 0.5)
    assert scope.returns_by_preset["combined"] == pytest.approx(3.0)
    assert report.reward == "combined" and scope.mean_return == pytest.approx(3.0)
    assert scope.mean_discounted_return == pytest.approx(0.5 + 0.99 * 2.0 + 0.99**2 * 0.5)
    assert report.scopes["family"].steps == 0 and report.scopes["family"].timing is None


def test_oracle_report_is_perfect(tmp_path: Path) -> None:
    for data in (str(_tiny(tmp_path)), "demo"):
        scope = evaluate_policy("oracle", {"data": data}).scopes["all"]
        assert scope.timing.precision == scope.timing.recall == scope.timing.f1 == scope.timing.accuracy == 1.0
        assert scope.target_exact == scope.target_jaccard == scope.strategy_accuracy == 1.0
        assert scope.invalid_steps == 0


def test_never_has_recall_zero() -> None:
    scope = evaluate_policy("never").scopes["all"]
    assert scope.timing.recall == 0.0 and scope.timing.tp == 0
    assert scope.target_steps == scope.strategy_steps == 0 and scope.target_exact is None


def test_every_conversation_once_and_deterministic() -> None:
    env = RescueEnv(sample_order="random")
    seen: list[str] = []
    steps = []

    def record(env: RescueEnv, info: dict) -> None:
        steps.append(info["sample_id"])
        if "episode" in info:
            seen.append(info["sample_id"])

    report = evaluate_policy("random", env, seed=7, on_step=record)
    assert seen == [s.sample_id for s in env.samples]
    assert report.episodes == len(env.samples)
    assert report.scopes["all"].steps == len(steps) == sum(len(env.episode(s).points) for s in env.samples)
    assert report.scopes["couple"].episodes + report.scopes["family"].episodes == report.episodes
    again = evaluate_policy(make_policy("random", env, seed=123), RescueEnv(sample_order="random"), seed=7)
    assert again.to_json() == report.to_json()
    assert evaluate_policy("random", env, seed=8).to_json() != report.to_json()


def test_episode_count_cycles_in_order() -> None:
    env = RescueEnv()
    report = evaluate_policy("never", {}, episodes=len(env.samples) + 2)
    assert report.episodes == len(env.samples) + 2
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        evaluate_policy("never", {}, episodes=0)


def test_returns_by_preset_match_per_preset_envs() -> None:
    report = evaluate_policy("heuristic", {"reward": "combined"})
    for preset in PRESETS:
        alone = evaluate_policy("heuristic", {"reward": preset})
        assert alone.reward == preset
        assert alone.scopes["all"].mean_return == pytest.approx(report.scopes["all"].returns_by_preset[preset])


def test_report_json_round_trip_and_text() -> None:
    report = evaluate_policy("majority")
    assert PolicyReport.model_validate_json(report.to_json()) == report
    text = format_report(report)
    for needle in ("timing F1 %", "target exact match %", "strategy accuracy %", "mean return [group]", "couple"):
        assert needle in text


def test_rollout_cli_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["rollout", "--policy", "heuristic", "--render", "2", "--output", str(tmp_path / "r"), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("--- demo_") == 2 and "gold:" in out
    assert "policy heuristic" in out and "timing precision %" in out and "mean return [combined]" in out
    assert main(args) == 0  # resumed: nothing is played again, so there is nothing to render
    assert "--- demo_" not in capsys.readouterr().out


def test_rollout_cli_json_parses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["rollout", "--policy", "oracle", "--reward", "imitation", "--episodes", "2", "--json", "--output"]
    assert main([*args, str(tmp_path / "j"), "--no-progress"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["policy"] == "oracle" and payload["episodes"] == 2 and payload["reward"] == "imitation"
    assert payload["scopes"]["all"]["timing"]["f1"] == 1.0


def test_rollout_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["rollout", "--policy", "never", "--episodes", "0"])
    assert exited.value.code == 2 and "--episodes: must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rollout", "--policy", "nope"])
    assert main(["rollout", "--policy", "never", "--data", "/no/such.jsonl", "--output", str(tmp_path / "x")]) == 1


def test_reward_table_script_runs_on_demo() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reward_table.py"), "--data", "demo"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "oracle" in result.stdout and "most-distressed" in result.stdout
    assert "imitation: oracle leads" in result.stdout and "combined: oracle leads" in result.stdout
    assert "no constant policy wins" in result.stdout


def test_reward_table_matches_the_env() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import reward_table
    finally:
        sys.path.pop(0)
    env = RescueEnv(sample_order="sequential")
    config = env.reward_config
    for name in ("oracle", "heuristic", "most-distressed"):
        values = reward_table.returns_table({name: reward_table.rollout(name, env)}, config.lam, config.kappa, None)
        report = evaluate_policy(name, env)
        for preset in PRESETS:
            for scope in ("couple", "family", "all"):
                assert values[name][preset][scope] == pytest.approx(report.scopes[scope].returns_by_preset[preset])


def test_shared_data_default_conditions(text_file: Path) -> None:
    """The README's claim for the default reward on the release: the oracle leads imitation and combined, and
    the group preset is won by a non-constant policy (group-greedy)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reward_table.py"), "--data", str(text_file)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "imitation: oracle leads" in result.stdout and "combined: oracle leads" in result.stdout
    assert "winner group-greedy" in result.stdout
