"""``benchmarks.reports.rollout``: the report of rollout run directories (Rescue-v0, Rescue-v1, RescueSim-v0) and the
learning curve of a trained policy, on runs made here on the demo data. Files exist, the PNGs are PNGs, every
figure's CSV loads with pandas and holds the numbers the run's own files give; the one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from benchmarks.reports.rollout import (  # noqa: E402
    find_monitor,
    is_rollout_dir,
    is_training_output,
    learning_curve_report,
    load_run,
    monitor_files,
    rollout_report,
)
from benchmarks.rollout import Rollout, RolloutConfig  # noqa: E402
from benchmarks.runs import RunOptions  # noqa: E402
from rescue_env.data import load_dataset  # noqa: E402
from rescue_env.taxonomy import label_name  # noqa: E402

QUIET = RunOptions(progress=False)
PNG = b"\x89PNG\r\n\x1a\n"


def _rollout(directory: Path, **settings) -> Path:
    Rollout(RolloutConfig(bootstrap=200, **settings), directory, options=QUIET).run()
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One rollout per env on the demo data (a second or so each)."""
    root = tmp_path_factory.mktemp("rollouts")
    return {
        "v0": _rollout(root / "v0", policy="heuristic"),
        "v1": _rollout(root / "v1", policy="heuristic", env_id="Rescue-v1"),
        "sim": _rollout(root / "sim", policy="perceived", env_id="RescueSim-v0"),
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real, tiny PPO training (128 steps) that leaves its monitor log, and a rollout of it (two episodes)."""
    pytest.importorskip("stable_baselines3")
    from policies.sb3 import train

    root = tmp_path_factory.mktemp("trained")
    model = train(
        "ppo",
        timesteps=128,
        seed=0,
        feature_kwargs={"hash_dim": 16},
        algo_kwargs={"n_steps": 64, "batch_size": 64, "n_epochs": 1},
        save_to=root / "models" / "ppo-tiny.zip",
    )
    return model, _rollout(root / "ppo-run", policy=f"ppo:{model}", episodes=2)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def check_written(report, output: Path) -> dict[str, pd.DataFrame]:
    """report.md and report.html written, every figure a readable PNG with its CSV; the CSVs by figure name."""
    markdown, page = report.write()
    assert markdown == output / "report.md" and page == output / "report.html"
    html = page.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(report.figures) > 0
    frames = {}
    for png in report.figures:
        assert png.read_bytes()[:8] == PNG
        image = imread(png)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert f"figures/{png.name}" in markdown.read_text(encoding="utf-8")
        frames[png.stem] = pd.read_csv(png.with_suffix(".csv"))
        assert not frames[png.stem].empty
    return frames


# ----------------------------------------------------------------------------------------------------------------
# one run, then several


def test_one_run_report_agrees_with_the_run(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = rollout_report([runs["v0"]], out)
    frames = check_written(report, out)
    assert set(frames) == {"episode_returns", "reward_components", "component_evolution", "episode_steps"}
    results = json.loads((runs["v0"] / "results.json").read_text())
    steps = lines(runs["v0"] / "trajectories.jsonl")

    returns = frames["episode_returns"]
    for scope in ("couple", "family", "all"):
        part = returns[returns["scope"] == scope]
        stored = results["scopes"][scope]
        assert len(part) == stored["episodes"]
        assert part["return"].mean() == pytest.approx(stored["mean_return"])
        assert part["scope_mean_return"].iloc[0] == pytest.approx(stored["mean_return"])
        assert [part["ci95_low"].iloc[0], part["ci95_high"].iloc[0]] == pytest.approx(stored["ci95"]["mean_return"])
    markdown = (out / "report.md").read_text(encoding="utf-8")
    low, high = results["scopes"]["all"]["ci95"]["mean_return"]
    assert f"{results['scopes']['all']['mean_return']:.3f} [{low:.3f}, {high:.3f}] (n=6)" in markdown

    components = frames["reward_components"].set_index("component")
    for name in ("timing", "target", "strategy", "group"):
        values = [s["components"][name] for s in steps]
        scored = [v for v in values if v is not None]
        assert components.loc[name, "steps"] == len(steps) and components.loc[name, "scored_steps"] == len(scored)
        assert components.loc[name, "mean_per_step"] == pytest.approx(sum(scored) / len(steps))
        assert components.loc[name, "mean_scored"] == pytest.approx(np.mean(scored))
    mean_reward = np.mean([s["reward"] for s in steps])
    assert components.loc["reward", "mean_per_step"] == pytest.approx(mean_reward)
    weighted = sum(
        components.loc[n, "weight"] * components.loc[n, "mean_per_step"]
        for n in ("timing", "target", "strategy", "group")
    )
    assert weighted == pytest.approx(mean_reward)  # the reward is the weighted sum of its components

    evolution = frames["component_evolution"]
    assert set(evolution["component"]) == {"timing", "group", "reward"}  # scored at every step, and the reward
    for _, part in evolution.groupby("component"):
        assert part["steps"].sum() == len(steps) and len(part) == 10
    assert "heuristic · Rescue-v0: not a trained policy, so no learning curve." in markdown


def test_three_envs_side_by_side(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "three"
    report = rollout_report([runs["v0"], runs["v1"], runs["sim"]], out)
    frames = check_written(report, out)
    assert {f"episode_steps_{i}" for i in (1, 2, 3)} <= set(frames)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    for label in ("heuristic · Rescue-v0", "heuristic · Rescue-v1", "perceived · RescueSim-v0"):
        assert f"### {label}" in markdown and label in set(frames["episode_returns"]["label"])
    assert "rewarded differently" in markdown
    assert (
        "(the opening)" in markdown and " spoke; max distress " in markdown and "RescueSim-v0 has no gold" in markdown
    )

    # The closed loop's parts of Eq. 14 add up to its step reward, step by step and on average.
    sim = frames["reward_components"][frames["reward_components"]["run"] == 3].set_index("component")
    assert set(sim.index) == {"wellbeing", "distress", "tension", "reward"}  # kappa = 0: no cost term
    parts = sim.loc[["wellbeing", "distress", "tension"], "mean_per_step"].sum()
    assert parts == pytest.approx(sim.loc["reward", "mean_per_step"])
    steps = lines(runs["sim"] / "trajectories.jsonl")
    distress = [max(s["state"]["distress"].values()) for s in steps]
    assert sim.loc["distress", "mean_per_step"] == pytest.approx(-np.mean(distress))
    episode = frames["episode_steps_3"]
    columns = ["component_wellbeing", "component_distress", "component_tension"]
    assert np.allclose(episode[columns].sum(axis=1), episode["reward"])
    v1 = frames["reward_components"][frames["reward_components"]["run"] == 2].set_index("component")
    assert v1.loc["target", "weight"] == 0.0 and v1.loc["timing", "weight"] == 1.0  # Rescue-v1's combined preset


# ----------------------------------------------------------------------------------------------------------------
# learning curves


def test_learning_curve_of_a_trained_policy_and_a_missing_log(trained: tuple[Path, Path], tmp_path: Path) -> None:
    model, run = trained
    monitor = model.with_suffix(".monitor.csv")
    assert (
        monitor.is_file() and json.loads(model.with_suffix(".json").read_text())["training"]["monitor"] == monitor.name
    )
    # The same run again, playing a copy of the model (and its sidecar) without the monitor log beside it.
    moved = tmp_path / "elsewhere" / "ppo-tiny.zip"
    moved.parent.mkdir()
    shutil.copy(model, moved)
    shutil.copy(model.with_suffix(".json"), moved.with_suffix(".json"))
    copy = tmp_path / "ppo-run-copy"
    shutil.copytree(run, copy)
    config = json.loads((copy / "config.json").read_text())
    config["config"]["policy"] = f"ppo:{moved}"
    (copy / "config.json").write_text(json.dumps(config))
    assert find_monitor(load_run(run))[0] == monitor and find_monitor(load_run(copy))[0] is None

    out = tmp_path / "curve"
    report = rollout_report([run, copy], out)
    frames = check_written(report, out)
    curve = frames["learning_curve"]
    logged = pd.read_csv(monitor, skiprows=1)
    assert len(curve) == len(logged) > 0 and set(curve["label"]) == {"ppo (ppo-tiny.zip) · Rescue-v0 [ppo-run]"}
    assert curve["timesteps"].iloc[-1] == logged["l"].sum() <= 128
    assert curve["return"].tolist() == pytest.approx(logged.sort_values("t", kind="stable")["r"].tolist())
    window = int(curve["window"].iloc[0])
    assert curve["rolling_mean"].tolist() == pytest.approx(
        curve["return"].rolling(window, min_periods=1).mean().tolist()
    )
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert (
        f"ppo (ppo-tiny.zip) · Rescue-v0 [ppo-run-copy]: no monitor log beside the model (expected "
        f"{moved.with_suffix('.monitor.csv')}), so no learning curve." in markdown
    )

    # The training output on its own: the monitor log, the model beside it, their directory.
    assert monitor_files(model) == monitor_files(model.parent) == monitor_files(monitor) == [monitor]
    assert all(is_training_output(source) for source in (monitor, model, model.parent))
    assert not is_training_output(run) and is_rollout_dir(run)
    alone = learning_curve_report(model.parent, tmp_path / "alone")
    assert check_written(alone, alone.output)["learning_curve"]["return"].tolist() == curve["return"].tolist()
    assert "| models/ppo-tiny | ppo | rescue_demo.jsonl | combined | 128 | 0 |" in alone.markdown()


# ----------------------------------------------------------------------------------------------------------------
# one episode step by step


def test_step_by_step_view_of_a_chosen_episode(runs: dict[str, Path], tmp_path: Path) -> None:
    steps = lines(runs["v0"] / "trajectories.jsonl")
    sample_id = steps[-1]["sample_id"]  # the last of the plan, not the default
    episode = [s for s in steps if s["sample_id"] == sample_id]
    out = tmp_path / "episode"
    report = rollout_report([runs["v0"]], out, episode=sample_id)
    frames = check_written(report, out)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert f"## One episode step by step: `{sample_id}`" in markdown
    table = frames["episode_steps"]
    assert table["step"].tolist() == list(range(len(episode)))
    assert table["cumulative_return"].iloc[-1] == pytest.approx(episode[-1]["episode_end"]["return"])
    assert table["gold_intervene"].tolist() == [s["gold"]["intervene"] for s in episode]
    sample = load_dataset("demo").get(sample_id)
    row = episode[3]["row"]  # 1-based: the current row is rows[row - 1]
    assert f"r{sample.rows[row - 1].row_index} {sample.rows[row - 1].primary_speaker}:" in markdown
    assert sample.rows[row - 1].dialogue_cleaned.split()[0] in markdown
    strategies = {s["gold"]["strategy"] for s in episode if s["gold"]["intervene"] and s["gold"]["strategy"]}
    assert any(f"· {label_name(key)}" in markdown for key in strategies)

    # Data that changed since the run: no text, and the report says why.
    copy = tmp_path / "changed"
    shutil.copytree(runs["v0"], copy)
    config = json.loads((copy / "config.json").read_text())
    config["data"]["sha256"] = "0" * 64
    (copy / "config.json").write_text(json.dumps(config))
    changed = rollout_report([copy], tmp_path / "changed-report", episode=sample_id)
    text = changed.markdown()
    assert "has changed since the run" in text and sample.rows[row - 1].dialogue_cleaned not in text


def test_closed_loop_episode_reads_its_transcript_when_there_is_one(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "sim"
    shutil.copytree(runs["sim"], copy)
    first = lines(copy / "trajectories.jsonl")[0]["sample_id"]
    (copy / "transcripts").mkdir()
    said = {"sample_id": first, "step": 0, "row": 9, "speaker": "Maya", "silent": False, "words": "Okay, I hear you."}
    (copy / "transcripts" / (first.replace("/", "__") + ".jsonl")).write_text(json.dumps(said) + "\n")
    text = rollout_report([copy], tmp_path / "with-transcript").markdown()
    assert "r9 Maya: Okay, I hear you." in text and "simulated transcript" in text


# ----------------------------------------------------------------------------------------------------------------
# errors, one line each


def test_errors_are_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    def message(exc: pytest.ExceptionInfo) -> str:
        text = str(exc.value)
        assert "\n" not in text
        return text

    with pytest.raises(ValueError) as unknown:
        rollout_report([runs["v0"]], tmp_path / "x", episode="no/such")
    first = lines(runs["v0"] / "trajectories.jsonl")[0]["sample_id"]
    assert "'no/such' is not in the rollout; valid ids: " in message(unknown) and first in message(unknown)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not is_rollout_dir(empty) and not is_training_output(empty)
    with pytest.raises(ValueError) as not_a_run:
        rollout_report([empty], tmp_path / "x")
    assert "not a rollout run directory (no config.json and trajectories.jsonl" in message(not_a_run)
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs["v0"], unfinished)
    (unfinished / "results.json").unlink()
    with pytest.raises(ValueError) as no_results:
        rollout_report([unfinished], tmp_path / "x")
    assert "unfinished rollout (6 of 6 episodes on disk, no results.json)" in message(no_results)
    cut = tmp_path / "cut"
    shutil.copytree(runs["v0"], cut)
    kept = (cut / "trajectories.jsonl").read_text().splitlines()[:-3]  # the last episode lost its end
    (cut / "trajectories.jsonl").write_text("\n".join(kept) + "\n")
    with pytest.raises(ValueError) as partial:
        rollout_report([cut], tmp_path / "x")
    assert "unfinished rollout (5 of 6 episodes on disk)" in message(partial)
    with pytest.raises(ValueError) as twice:
        rollout_report([runs["v0"], runs["v0"]], tmp_path / "x")
    assert "given twice" in message(twice)
    with pytest.raises(ValueError) as no_log:
        learning_curve_report(empty, tmp_path / "x")
    assert "no *.monitor.csv here" in message(no_log)
