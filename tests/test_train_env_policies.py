"""``scripts/train_env_policies.py``: (Maskable)PPO per flat env on the train side, held-out evaluation on the test
side next to the references, learning curves; smoke-tested end to end on the demo data with a tiny budget for one
replay and one task env (files, rows, columns, finite values, PNGs, the saved models load back)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")
pytest.importorskip("matplotlib")
pd = pytest.importorskip("pandas")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_env_policies.py"
ENVS = ("RescueFlat-v0", "RescueITPFlat-v0")
PNG = b"\x89PNG\r\n\x1a\n"


def _script():
    spec = importlib.util.spec_from_file_location("train_env_policies", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    script = _script()
    output = tmp_path_factory.mktemp("env_policies")
    argv = ["--data", "demo", "--envs", ",".join(ENVS), "--output", str(output), "--timesteps", "64"]
    argv += ["--n-steps", "64", "--batch-size", "32", "--seed", "0", "--no-progress"]
    assert script.main(argv) == 0
    return script, output


def test_results_csv_rows_columns_and_values(run) -> None:
    _, output = run
    results = pd.read_csv(output / "results.csv")
    assert list(results.columns) == ["env", "kind", "policy", "role", "scope", "metric", "value"]
    assert set(results["env"]) == set(ENVS)
    assert np.isfinite(results["value"]).all()
    assert not results.duplicated(["env", "policy", "scope", "metric"]).any()
    replay = results[results["env"] == "RescueFlat-v0"]
    assert set(replay["policy"]) == {"maskable-ppo", "never", "heuristic", "majority", "cloning"}
    assert set(replay.loc[replay["role"] == "trained", "policy"]) == {"maskable-ppo"}
    pooled = replay[replay["scope"] == "all"].set_index(["policy", "metric"])["value"]
    assert pooled["never", "timing_f1"] == 0.0 and pooled["never", "intervention_rate"] == 0.0
    # Every policy plays the same test-side decision points (the demo's test side: 2 conversations).
    assert {pooled[p, "episodes"] for p in ("maskable-ppo", "never", "cloning")} == {2.0}
    assert len({pooled[p, "decisions"] for p in ("maskable-ppo", "never", "cloning")}) == 1
    for p in ("maskable-ppo", "heuristic", "cloning"):
        assert 0.0 <= pooled[p, "timing_f1"] <= 1.0
    task = results[(results["env"] == "RescueITPFlat-v0") & (results["scope"] == "all")]
    assert set(task["policy"]) == {"maskable-ppo", "majority", "heuristic"}
    itp = task.set_index(["policy", "metric"])["value"]
    assert {"precision", "recall", "f1", "accuracy", "mean_reward"} <= set(task["metric"])
    assert itp["majority", "recall"] == 1.0  # ITP's instances are balanced: the majority answers "yes"
    assert len({itp[p, "instances"] for p in ("maskable-ppo", "majority", "heuristic")}) == 1


def test_pngs_models_and_monitor_logs(run) -> None:
    from sb3_contrib import MaskablePPO

    _, output = run
    for env_id in ENVS:
        png = output / "figures" / f"{env_id}-learning-curve.png"
        assert png.read_bytes()[:8] == PNG, env_id
        model = output / env_id / "model.zip"
        assert MaskablePPO.load(model, device="cpu").num_timesteps == 64
        sidecar = json.loads((output / env_id / "model.json").read_text(encoding="utf-8"))
        assert sidecar["env_id"] == env_id and sidecar["split"]["trained_on"] == "train"
        assert sidecar["training"]["steps_per_second"] > 0
        monitor = (output / env_id / "model.monitor.csv").read_text(encoding="utf-8").splitlines()
        assert monitor[0].startswith("#") and monitor[1] == "r,l,t" and len(monitor) > 2
    training = pd.read_csv(output / "training.csv")
    assert list(training["env"]) == list(ENVS) and (training["steps_per_second"] > 0).all()
    assert (training["timesteps"] == 64).all()
    markdown = (output / "results.md").read_text(encoding="utf-8")
    assert all(f"figures/{e}-learning-curve.png" in markdown for e in ENVS)
    assert (output / "results.html").stat().st_size > 0
    config = json.loads((output / "config.json").read_text(encoding="utf-8"))
    assert config["envs"] == list(ENVS) and config["sides"] == {"train": 4, "test": 2}


def test_unknown_env_id_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script()
    assert script.main(["--envs", "RescueFlat-v0,Nope-v9", "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown env id 'Nope-v9'") and "\n" not in err
    assert not (tmp_path / "x").exists()


def test_flat_masks_are_the_wrappers_masks() -> None:
    from rescue_env.envs.wrappers import make_flat_env

    script = _script()
    env = make_flat_env()
    base = env.unwrapped
    for sample in base.samples:
        observation, _ = base.reset(options={"sample_id": sample.sample_id})
        np.testing.assert_array_equal(script.flat_masks(observation), env.action_masks())


def test_the_learning_curve_is_per_step() -> None:
    # Two envs' episodes: per step is return / length, rolled over each env's own window (2 and 1 here).
    script = _script()
    curve = pd.DataFrame(
        {
            "label": ["sim", "sim", "sim", "replay"],
            "timesteps": [10, 21, 41, 5],
            "return": [10.0, 55.0, 4.0, 2.5],  # 55: an early calm end and its bonus
            "length": [10, 11, 20, 5],
            "window": [2, 2, 2, 1],
            "rolling_mean": [10.0, 32.5, 29.5, 2.5],
        }
    )
    per_step = script.per_step_curve(curve)
    assert per_step["return_per_step"].tolist() == [1.0, 5.0, 0.2, 0.5]
    assert per_step["rolling_mean_per_step"].tolist() == pytest.approx([1.0, 3.0, 2.6, 0.5])
    assert per_step["return"].tolist() == curve["return"].tolist()  # the raw return stays in the figure's data
    axes = script.per_step_figure(per_step).axes[0]
    assert axes.get_ylabel() == "training episode return per step" and "calm" in axes.get_title()
    assert axes.lines[0].get_ydata().tolist() == [1.0, 5.0, 0.2]
