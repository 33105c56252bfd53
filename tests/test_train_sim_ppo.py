"""``scripts/train_sim_ppo.py``: MaskablePPO on ``RescueSimFlatDiscrete-v1`` (and ``--env-version 0``:
``RescueSimFlat-v0``), its learning curve and the held-out table, smoke-tested on the demo data with a tiny budget
(files, rows, columns, the saved model loads back)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")
pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_sim_ppo.py"


def _script():
    spec = importlib.util.spec_from_file_location("train_sim_ppo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    script = _script()
    output = tmp_path_factory.mktemp("sim_ppo")
    argv = ["--data", "demo", "--output", str(output), "--timesteps", "128", "--n-envs", "2", "--n-steps", "32"]
    argv += ["--batch-size", "32", "--n-epochs", "1", "--torch-threads", "1", "--curve-every", "64"]
    argv += ["--curve-seeds", "1", "--eval-seeds", "1", "--bootstrap", "50", "--quiet"]
    assert script.main(argv) == 0
    return script, output


def test_files_exist(run) -> None:
    _, output = run
    for name in ("model.zip", "model.json", "results.json", "results.csv", "episodes.csv", "curve.csv", "curve.png"):
        assert (output / name).is_file() and (output / name).stat().st_size > 0, name
    assert (output / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_rows_and_columns(run) -> None:
    script, output = run
    with (output / "results.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    names = [row["policy"] for row in rows]
    strategies = [script.always_everyone_name(k) for k in script.ALL_STRATEGY_KEYS]
    expected = ["ppo", "ppo-stochastic", "never", *strategies, "last-speaker", "most-vocal", "most-distressed"]
    expected += ["random", "heuristic", "perceived", "imitation", "recorded", "group-greedy", "behaviour"]
    assert names == expected
    for column in ("per_step_return", "per_step_return_low", "per_step_return_high", "final_max_distress",
                   "final_max_distress_low", "final_max_distress_high", "ppo_minus_per_step_return", "kind",
                   "privileged", "starts", "episodes", "intervention_rate", "calm_rate", "per_step_group",
                   "mean_log_pi_b"):  # fmt: skip
        assert column in rows[0], column
    assert {row["starts"] for row in rows} == {"2"} and {row["episodes"] for row in rows} == {"2"}
    by_name = {row["policy"]: row for row in rows}
    assert float(by_name["ppo"]["ppo_minus_per_step_return"]) == 0.0
    assert {row["calm_rate"] for row in rows} == {"0.0"}  # v1 has no calm end
    assert by_name["recorded"]["privileged"] == "True" and by_name["never"]["kind"] == "constant"
    assert float(by_name["never"]["intervention_rate"]) == 0.0

    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert results["data"]["sha256"] and results["data"]["test_starts"] == 2 and results["data"]["train_starts"] == 4
    assert {"numpy", "torch", "sb3-contrib"} <= set(results["versions"])
    assert [row["policy"] for row in results["table"]] == expected
    assert results["training"]["timesteps"] >= 128 and results["training"]["train_seconds"] > 0
    for name in ("ppo", "ppo-stochastic", "recorded"):
        actions = results["actions"][name]
        assert actions["steps"] > 0 and set(actions["recipients"]) == set(script.RECIPIENT_KINDS)
    assert results["actions"]["always-everyone[track]"]["recipients"]["everyone"] == 1.0
    assert results["actions"]["always-everyone[track]"]["strategies"] == {"track": 1.0}
    assert set(results["flags"]) == {"ppo", "ppo-stochastic"}
    assert results["verdict"]["best_always_everyone"] in strategies


def test_curve_and_the_saved_model(run) -> None:
    script, output = run
    with (output / "curve.csv").open(encoding="utf-8") as handle:
        curve = list(csv.DictReader(handle))
    assert [int(p["timesteps"]) for p in curve][0] == 0 and len(curve) >= 2
    assert {"test_mean", "test_low", "test_high", "train_mean", "train_seconds"} <= set(curve[0])
    policy, meta = script.load_trained(output / "model.zip")
    assert meta["format"] == script.SIDECAR_FORMAT and meta["data"]["sha256"]
    assert meta["env_settings"]["env_id"] == "RescueSimFlatDiscrete-v1" and meta["env_settings"]["beta"] > 0
    assert meta["training"]["hyperparameters"]["ent_coef"] == meta["env_settings"]["beta"]  # the KL identity
    from rescue_env.envs.sim_v1 import RescueSimEnvV1

    env = RescueSimEnvV1(starts="test")
    observation, _ = env.reset(seed=0)
    action = policy.act(observation, env)
    assert set(action) == {"intervene", "target", "strategy"}
    assert np.asarray(observation["strategy_mask"])[action["strategy"]]  # the masks hold
    assert not np.asarray(action["target"])[np.asarray(observation["target_mask"]) == 0].any()


def test_flags() -> None:
    script = _script()
    always = {"intervention_rate": 1.0, "interventions": 10, "recipients": {"everyone": 1.0}, "strategies": {"join": 1}}
    found = script.flags(always)
    assert len(found) == 3 and any("join" in f for f in found) and any("everyone" in f for f in found)
    mixed = {"intervention_rate": 0.5, "interventions": 4, "recipients": {"everyone": 0.5}, "strategies": {"a": 0.5}}
    assert script.flags(mixed) == []
    # One strategy per scenario (join for couples, boundary for families) is a constant too.
    per_scenario = {**mixed, "strategies": {"join": 0.8, "boundary": 0.2}}
    per_scenario["strategies_by_scenario"] = {"couple": {"join": 1.0}, "family": {"boundary": 0.95, "join": 0.05}}
    found = script.flags(per_scenario)
    assert len(found) == 2 and "couple" in found[0] and "family" in found[1]


def test_version_0_keeps_its_headline(tmp_path: Path) -> None:
    script = _script()
    argv = ["--data", "demo", "--output", str(tmp_path), "--timesteps", "64", "--n-envs", "1", "--n-steps", "32"]
    argv += ["--batch-size", "32", "--n-epochs", "1", "--torch-threads", "1", "--curve-every", "64", "--env-version"]
    argv += [
        "0",
        "--action",
        "multidiscrete",
        "--curve-seeds",
        "1",
        "--eval-seeds",
        "1",
        "--bootstrap",
        "20",
        "--quiet",
    ]
    assert script.main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert "discounted_return" in results["table"][0] and "per_step_group" not in results["table"][0]
    assert results["env_settings"]["env_id"] == "RescueSimFlat-v0"
    assert "behaviour" not in [row["policy"] for row in results["table"]]


def test_frontier_draws_one_point_per_run(run, tmp_path: Path) -> None:
    _, output = run
    spec = importlib.util.spec_from_file_location("sim_v1_frontier", SCRIPT.parent / "sim_v1_frontier.py")
    frontier = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frontier)
    figure = tmp_path / "frontier.png"
    assert frontier.main([str(output / "results.json"), "-o", str(figure)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with figure.with_suffix(".csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    table = {row["policy"]: row for row in results["table"]}
    ppo = next(r for r in rows if r["policy"] == "ppo")
    assert float(ppo["divergence"]) == pytest.approx(-table["ppo"]["mean_log_pi_b"])
    assert float(ppo["beta"]) == results["env_settings"]["beta"]
    assert {r["policy"] for r in rows if r["run"] == "reference"} >= {"behaviour", "recorded", "never"}
    assert frontier.main([str(tmp_path / "missing.json")]) == 2
