"""``scripts/train_sim_ppo.py``: MaskablePPO on ``RescueSimFlat-v0``, its learning curve and the held-out table,
smoke-tested on the demo data with a tiny budget (files, rows, columns, the saved model loads back)."""

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
    expected += ["random", "heuristic", "perceived", "imitation", "recorded", "group-greedy"]
    assert names == expected
    for column in ("discounted_return", "discounted_return_low", "discounted_return_high", "final_max_distress",
                   "final_max_distress_low", "final_max_distress_high", "ppo_minus_discounted_return", "kind",
                   "privileged", "starts", "episodes", "intervention_rate", "calm_rate"):  # fmt: skip
        assert column in rows[0], column
    assert {row["starts"] for row in rows} == {"2"} and {row["episodes"] for row in rows} == {"2"}
    by_name = {row["policy"]: row for row in rows}
    assert float(by_name["ppo"]["ppo_minus_discounted_return"]) == 0.0
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
    from rescue_env.envs.sim import RescueSimEnv

    env = RescueSimEnv(starts="test")
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
