"""``policies.sb3``: a stable-baselines3 model trained on ``RescueFlat-v0`` played as a ``Policy`` of ``Rescue-v0``
(save / load with the sidecar, valid actions, determinism, evaluation, ``rollout --policy ppo:PATH``, the script)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from benchmarks.rollout import evaluate_policy  # noqa: E402
from policies import TRAINED, Policy, is_policy_name, make_policy  # noqa: E402
from policies.sb3 import ALGORITHMS, FEATURE_DEFAULTS, SB3Policy, fit, sidecar_path, train  # noqa: E402
from rescue_env.cli import main  # noqa: E402
from rescue_env.envs.replay import RescueEnv  # noqa: E402
from rescue_env.envs.wrappers import make_flat_env  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_sb3.py"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[SB3Policy, Path]:
    """PPO, 512 steps (one rollout) on the demo data with hash_dim=64: in memory, and saved (``.zip`` added)."""
    policy = fit("ppo", timesteps=512, seed=0, feature_kwargs={"hash_dim": 64})
    return policy, policy.save(tmp_path_factory.mktemp("sb3") / "ppo-demo")


def test_save_writes_the_model_and_its_sidecar(trained: tuple[SB3Policy, Path]) -> None:
    _, path = trained
    assert path.name == "ppo-demo.zip" and path.is_file()
    meta = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    assert sidecar_path(path).name == "ppo-demo.json"
    assert meta["algo"] == "ppo" and meta["feature_kwargs"] == {**FEATURE_DEFAULTS, "hash_dim": 64}
    assert meta["env_settings"] == {
        "mode": "dialogue",
        "context_size": 8,
        "max_chars": 4096,
        "max_participants": 6,
        "decide_after_therapist": False,
    }
    assert meta["training"]["timesteps"] == 512 and meta["training"]["seed"] == 0
    assert meta["training"]["reward"] == "combined" and meta["training"]["data"].endswith("rescue_demo.jsonl")


def test_sidecar_restores_the_feature_settings(trained: tuple[SB3Policy, Path], tmp_path: Path) -> None:
    _, path = trained
    loaded = SB3Policy.load(path, env=RescueEnv())
    assert loaded.algo == "ppo" and loaded.feature_kwargs["hash_dim"] == 64
    assert loaded.flat_observation.hash_dim == 64
    assert loaded.flat_observation.observation_space.shape == loaded.model.observation_space.shape
    # The sidecar, not a default, decides: edited to hash_dim=128 the model no longer fits its features.
    shutil.copy(path, tmp_path / "edited.zip")
    meta = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    meta["feature_kwargs"]["hash_dim"] = 128
    sidecar_path(tmp_path / "edited.zip").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(ValueError, match="reads .* features"):
        SB3Policy.load(tmp_path / "edited.zip", env=RescueEnv())
    (tmp_path / "edited.json").unlink()
    # Without its sidecar the defaults (hash_dim=256) are assumed, and a model of 64 buckets says so in one line.
    nvec = r"\[2, 2, 2, 2, 2, 2, 2, 2, 11\]"
    expected = rf"reads 115 features and acts on {nvec}, the env gives 307 and {nvec} \(no sidecar: the default "
    with pytest.raises(ValueError, match=expected + r"features were assumed\)$"):
        SB3Policy.load(tmp_path / "edited.zip", env=RescueEnv())
    with pytest.raises(FileNotFoundError, match="no trained model"):
        SB3Policy.load(tmp_path / "missing.zip")


def test_actions_are_valid_and_match_the_in_memory_model(trained: tuple[SB3Policy, Path]) -> None:
    memory, path = trained
    loaded = SB3Policy.load(path)
    env = RescueEnv(sample_order="sequential")
    flat = make_flat_env(hash_dim=64, sample_order="sequential")  # the training stack, stepped alongside
    family = next(s.sample_id for s in env.samples if s.sample_id.startswith("demo_family"))
    observation, _ = env.reset(seed=0, options={"sample_id": family})
    vector, _ = flat.reset(seed=0, options={"sample_id": family})
    loaded.reset(seed=0)
    terminated, actions = False, []
    while not terminated:
        action = loaded.act(observation, env)
        np.testing.assert_array_equal(loaded.encode(observation), vector)  # the features of training
        expected, _ = memory.model.predict(vector, deterministic=True)
        np.testing.assert_array_equal(loaded.model.predict(vector, deterministic=True)[0], expected)
        reference = memory.act(observation, env)
        assert action["intervene"] == reference["intervene"] and action["strategy"] == reference["strategy"]
        np.testing.assert_array_equal(action["target"], reference["target"])
        assert env.action_space.contains(action), action
        target = np.asarray(action["target"])
        assert target.any() and not (target & (1 - observation["target_mask"])).any()
        assert observation["strategy_mask"][action["strategy"]]
        actions.append((action["intervene"], tuple(target), action["strategy"]))
        observation, _, terminated, _, info = env.step(action)
        vector, *_ = flat.step(flat.action_space.sample())  # the replay does not depend on the action
        assert info["n_invalid"] == 0
    assert len(actions) == 32


@pytest.mark.parametrize(
    ("flat", "target", "strategy"),
    [
        ([1, 1, 1, 1, 1, 1, 1, 1, 10], [0, 0, 0, 0, 0, 0, 1], 0),  # every bit and boundary: the group, track
        ([1, 0, 0, 0, 0, 1, 0, 0, 10], [0, 0, 0, 0, 0, 0, 1], 0),  # only an absent slot: nobody left -> the group
        ([1, 0, 1, 0, 1, 0, 0, 0, 3], [0, 1, 0, 0, 0, 0, 0], 3),  # a present and an absent slot: the present one
        ([0, 1, 1, 0, 0, 0, 0, 0, 9], [0, 0, 0, 0, 0, 0, 1], 9),  # both partners = everyone
    ],
)
def test_masked_choices_are_repaired(
    trained: tuple[SB3Policy, Path], monkeypatch: pytest.MonkeyPatch, flat: list[int], target: list[int], strategy: int
) -> None:
    _, path = trained
    env = RescueEnv(sample_order="sequential")  # the first conversation is a couple: slots 0, 1; no boundary
    observation, _ = env.reset(seed=0)
    policy = SB3Policy.load(path, env=env)
    monkeypatch.setattr(policy.model, "predict", lambda vector, deterministic: (np.array(flat), None))
    action = policy.act(observation, env)
    assert action["intervene"] == flat[0] and action["strategy"] == strategy
    assert action["target"].tolist() == target
    assert env.step(action)[-1]["n_invalid"] == 0


def test_env_must_match_the_training_settings(trained: tuple[SB3Policy, Path]) -> None:
    _, path = trained
    with pytest.raises(ValueError, match="max_participants=6, the env has 8"):
        SB3Policy.load(path, env=RescueEnv(max_participants=8))
    with pytest.warns(UserWarning, match=r"context_size=4 \(trained with 8\)"):
        SB3Policy.load(path, env=RescueEnv(context_size=4))
    with pytest.raises(ValueError, match="holds a ppo model, not a2c"):
        SB3Policy.load(path, algo="a2c")


def test_evaluate_policy_and_the_registry(trained: tuple[SB3Policy, Path]) -> None:
    _, path = trained
    assert TRAINED == tuple(ALGORITHMS) == ("ppo", "a2c")
    assert is_policy_name(f"ppo:{path}") and is_policy_name("a2c:x.zip") and is_policy_name("heuristic")
    assert not is_policy_name("sac:x.zip") and not is_policy_name("ppo:") and not is_policy_name("ppo")
    report = evaluate_policy(SB3Policy.load(path), {"data": "demo"})
    assert report.policy == f"ppo:{path}" and report.episodes == 6
    assert all(scope.invalid_steps == 0 for scope in report.scopes.values())
    assert report.scopes["all"].steps == 158
    env = RescueEnv(sample_order="sequential")
    policy = make_policy(f"ppo:{path}", env)
    assert isinstance(policy, Policy) and isinstance(policy, SB3Policy)
    by_name = evaluate_policy(f"ppo:{path}", env)
    assert by_name.model_dump()["scopes"] == report.model_dump()["scopes"]


def test_rollout_cli_loads_a_trained_model(
    trained: tuple[SB3Policy, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = trained
    out_dir = ["--no-progress", "--output"]
    assert main(["rollout", "--policy", f"ppo:{path}", *out_dir, str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"policy ppo:{path} on ") and "timing F1 %" in out and "mean return [group]" in out
    assert "strategy accuracy %" in out and "target mean Jaccard" in out
    one = ["--episodes", "1", "--json", *out_dir, str(tmp_path / "b")]
    assert main(["rollout", "--policy", f"ppo:{path.with_suffix('')}", *one]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 1
    assert main(["rollout", "--policy", f"a2c:{path}", *out_dir, str(tmp_path / "c")]) == 2
    assert "holds a ppo model, not a2c" in capsys.readouterr().err
    assert main(["rollout", "--policy", f"ppo:{tmp_path / 'missing.zip'}", *out_dir, str(tmp_path / "d")]) == 2
    assert "no trained model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["rollout", "--policy", "sac:model.zip"])
    assert exit_info.value.code == 2 and "unknown policy 'sac:model.zip'" in capsys.readouterr().err


def test_train_is_deterministic_given_the_seed(trained: tuple[SB3Policy, Path], tmp_path: Path) -> None:
    import torch

    memory, _ = trained
    path = train("ppo", timesteps=512, seed=0, feature_kwargs={"hash_dim": 64}, save_to=tmp_path / "again.zip")
    assert path == tmp_path / "again.zip" and sidecar_path(path).is_file()
    again = SB3Policy.load(path).model.policy.state_dict()
    first = memory.model.policy.state_dict()
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_a2c_trains_saves_and_plays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "temp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where SB3's default logger would make its folder
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    path = train("a2c", timesteps=200, seed=1, feature_kwargs={"hash_dim": 32}, save_to=tmp_path / "a2c.zip")
    assert list(scratch.glob("SB3-*")) == []  # quiet_logger: no SB3-<date> folder left behind
    env = RescueEnv(sample_order="sequential")
    policy = make_policy(f"a2c:{path}", env)
    assert policy.name == f"a2c:{path}" and policy.feature_kwargs["hash_dim"] == 32
    report = evaluate_policy(policy, env, episodes=2)
    assert report.episodes == 2 and report.scopes["all"].invalid_steps == 0
    with pytest.raises(ValueError, match="unknown algorithm 'dqn'"):
        train("dqn", timesteps=10, save_to=tmp_path / "dqn.zip")
    with pytest.raises(ValueError, match="unknown feature setting"):
        fit("ppo", timesteps=10, feature_kwargs={"hash_size": 8})


def test_train_script_trains_saves_and_compares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("train_sb3", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    output, reports = tmp_path / "ppo.zip", tmp_path / "reports.json"
    args = ["--timesteps", "256", "--n-steps", "256", "--hash-dim", "32", "--holdout", "0.3", "--seed", "0"]
    assert script.main([*args, "--output", str(output), "--json", str(reports)]) == 0
    out = capsys.readouterr().out
    assert f"saved {output} and {tmp_path / 'ppo.json'}" in out and "held out: 2 conversations" in out
    for line in ("all: metric", "couple: metric", "family: metric", "timing F1 %", "mean return [imitation]"):
        assert line in out
    header = next(line for line in out.splitlines() if line.startswith("all: metric"))
    assert header.split()[2:] == [f"ppo:{output}", "random", "heuristic"]
    meta = json.loads((tmp_path / "ppo.json").read_text(encoding="utf-8"))
    held = meta["training"]["held_out_sample_ids"]
    assert len(held) == 2 and sorted(h.startswith("demo_family/") for h in held) == [False, True]
    assert json.loads(reports.read_text(encoding="utf-8"))["random"]["episodes"] == 2
    with pytest.raises(SystemExit):
        script.main(["--baselines", "nope"])


def test_a_model_saved_by_sb3_itself_plays_with_one_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stable_baselines3 import PPO

    from policies.sb3 import quiet_logger

    model = PPO("MlpPolicy", make_flat_env(), n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.set_logger(quiet_logger())
    model.learn(total_timesteps=64).save(tmp_path / "plain.zip")  # SB3's own save: no sidecar
    run = ["--episodes", "1", "--no-progress", "--output", str(tmp_path / "run")]
    assert main(["rollout", "--policy", f"ppo:{tmp_path / 'plain.zip'}", *run]) == 0
    err = capsys.readouterr().err
    note = "note: plain.json (the feature settings' sidecar) is missing beside plain.zip; playing it with the flat "
    assert err.count(note) == 1 and "hash_dim=256" in err


def test_a_model_without_sidecar_on_other_features_says_so(
    trained: tuple[SB3Policy, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = trained  # hash_dim=64
    shutil.copy(path, tmp_path / "bare.zip")
    assert main(["rollout", "--policy", f"ppo:{tmp_path / 'bare.zip'}", "--output", str(tmp_path / "run")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ppo:") and last.endswith("(no sidecar: the default features were assumed)")


def test_a_maskable_discrete_model_plays_the_dict_env_as_it_trained(tmp_path: Path) -> None:
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from policies.sb3 import quiet_logger
    from rescue_env.envs.wrappers import DiscreteSupportAction

    flat = gym.make("RescueFlatDiscrete-v0", sample_order="sequential")
    model = MaskablePPO("MlpPolicy", flat, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.set_logger(quiet_logger())
    model.learn(total_timesteps=64).save(tmp_path / "masked.zip")
    env = RescueEnv(sample_order="sequential")
    policy = make_policy(f"ppo:{tmp_path / 'masked.zip'}", env)  # PPO.load cannot rebuild a maskable policy
    assert type(policy.model).__name__ == "MaskablePPO" and isinstance(policy.flat_action, DiscreteSupportAction)
    family = "demo_family/001_the_okafors"
    observation, _ = env.reset(seed=0, options={"sample_id": family})
    vector, _ = flat.reset(seed=0, options={"sample_id": family})
    terminated, steps = False, 0
    while not terminated:
        masks = flat.get_wrapper_attr("action_masks")()
        np.testing.assert_array_equal(policy.encode(observation), vector)
        np.testing.assert_array_equal(policy.action_masks(observation), masks)  # the masks of training
        index, _ = model.predict(vector, action_masks=masks, deterministic=True)
        expected = flat.get_wrapper_attr("action")(index)
        action = policy.act(observation, env)
        assert (action["intervene"], action["strategy"]) == (expected["intervene"], expected["strategy"]) or not (
            expected["intervene"]  # keeping listening: the strategy and target mean nothing
        )
        if expected["intervene"]:
            np.testing.assert_array_equal(action["target"], expected["target"])
        observation, _, terminated, _, info = env.step(action)
        vector, *_ = flat.step(index)
        assert info["n_invalid"] == 0
        steps += 1
    assert steps == 32
