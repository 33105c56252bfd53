"""The Ray bridge (``bridges/ray_train.py``, ``scripts/train_ray.py``): the masked observations and the flat
multi-party view without Ray running, then, on a local Ray of 2 CPUs with a tiny budget, one PPO iteration on a
flat id (twice with seed 0, once with seed 1), one on the PettingZoo view (twice with seed 0) and a 2 x 2 Tune
sweep over seeds x ``beta`` with one iteration per trial, through the script's ``main``.

Skipped, with the reason, where Ray RLlib / Tune or torch is not installed (``pip install "ray[rllib,tune]"``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

ROOT = Path(__file__).resolve().parents[1]

# find_spec of a top-level name imports nothing: collecting this file costs nothing where ray is absent.
_MISSING = [name for name in ("ray", "torch") if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"the Ray bridge needs {' and '.join(_MISSING)}: pip install 'ray[rllib,tune]' torch",
    ),
    # The v0 ids' own deprecation notice, and RLlib re-registering its env wrapper at every algorithm it builds.
    pytest.mark.filterwarnings("ignore:.*is out of date:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*Overriding environment rllib-:UserWarning"),
]

TINY = ["--batch-size", "64", "--minibatch-size", "32", "--epochs", "1", "--hidden", "16"]
"""One iteration = one batch of 64 env steps (two or three demo episodes), one pass of two minibatches."""
SEEDED = (
    "return_mean",
    "env_runners/episode_len_mean",
    "env_runners/num_episodes",
    "num_env_steps_sampled_lifetime",
)
"""First-iteration metrics that the seed fixes: what was sampled (the same weights, env draws and actions)."""


@pytest.fixture(scope="module")
def ray_train():
    """``bridges.ray_train`` (the repository root on ``sys.path``: ``bridges`` is not an installed package)."""
    pytest.importorskip("ray.rllib", reason="the Ray bridge needs Ray RLlib: pip install 'ray[rllib,tune]'")
    pytest.importorskip("ray.tune", reason="the Ray bridge needs Ray Tune: pip install 'ray[rllib,tune]'")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bridges import ray_train

    return ray_train


@pytest.fixture(scope="module")
def script(ray_train):
    spec = importlib.util.spec_from_file_location("train_ray_script", ROOT / "scripts" / "train_ray.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def local_ray(ray_train):
    import ray

    if ray.is_initialized():  # pragma: no cover - another test's Ray: use it, leave it
        yield ray
        return
    ray_train.init_ray(num_cpus=2)  # ray.init(num_cpus=2, include_dashboard=False), bridges on the workers' path
    yield ray
    ray.shutdown()


def _readme_ray_lines() -> list[str]:
    """The README's ``python scripts/train_ray.py ...`` lines (continuations joined), from its bash blocks."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", readme, re.M | re.S)
    lines = [" ".join(line.split()) for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line.startswith("python scripts/train_ray.py ")]


README_RAY_LINES = _readme_ray_lines()


def test_every_readme_ray_line_is_a_valid_command(script, ray_train):
    # The real runs take minutes, so the tests parse them (the check line runs below): options, target, data.
    assert len(README_RAY_LINES) == 4
    for line in README_RAY_LINES:
        args = script.parser().parse_args(shlex.split(line)[2:])
        ray_train.check_target(args.target)
        assert args.iterations >= 1 and args.output.startswith("runs/ray/")


# ----- without Ray running ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["RescueFlatDiscrete-v0", "RescueFlat-v0", "RescueSimFlatDiscrete-v1"])
def test_masked_observation_carries_the_action_masks(ray_train, env_id):
    env = ray_train.make_flat({"env_id": env_id, "env_kwargs": {}})
    observation, _ = env.reset(seed=0)
    space = env.observation_space
    assert set(space.spaces) == {ray_train.OBS_KEY, ray_train.MASK_KEY}
    assert space[ray_train.MASK_KEY].shape == (ray_train.mask_size(env.action_space),)
    rng = np.random.default_rng(0)
    done, steps = False, 0
    while not done:  # to the end: the final observation keeps the last mask (the replays refuse a mask then)
        assert space.contains(observation)
        mask = env.get_wrapper_attr("action_masks")()
        np.testing.assert_array_equal(observation[ray_train.MASK_KEY], mask.astype(np.float32))
        if isinstance(env.action_space, spaces.Discrete):
            action = int(rng.choice(np.flatnonzero(mask)))
        else:  # MultiDiscrete: masked choices are accepted (and counted) by FlatAction
            action = env.action_space.sample()
        observation, _, terminated, truncated, _ = env.step(action)
        done, steps = terminated or truncated, steps + 1
    assert steps > 1 and space.contains(observation)
    env.close()


def test_flat_replay_view_is_the_flat_id_for_the_therapist(ray_train):
    """The replay view's therapist sees, may take and earns exactly what ``RescueFlatDiscrete-v0`` shows."""
    from rescue_env.envs.multiparty import THERAPIST
    from rescue_env.envs.multiparty_v1 import parallel_env

    flat = ray_train.make_flat({"env_id": "RescueFlatDiscrete-v0"})
    view = ray_train.FlatMultiPartyView(parallel_env())
    a, _ = flat.reset(seed=3)
    b, _ = view.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(200):
        np.testing.assert_array_equal(a[ray_train.OBS_KEY], b[THERAPIST][ray_train.OBS_KEY])
        np.testing.assert_array_equal(a[ray_train.MASK_KEY], b[THERAPIST][ray_train.MASK_KEY])
        action = int(rng.choice(np.flatnonzero(a[ray_train.MASK_KEY])))
        a, reward, terminated, truncated, _ = flat.step(action)
        b, rewards, terminations, _, infos = view.step({THERAPIST: action})
        assert rewards[THERAPIST] == reward and infos[THERAPIST]["masked_choice"] is False
        if terminated or truncated:
            assert all(terminations.values()) and not view.agents
            break
    else:  # pragma: no cover
        pytest.fail("the replay did not end")


@pytest.mark.parametrize("view_name", ["multiparty", "sim_multiparty"])
def test_multi_agent_env_knows_every_possible_agent(ray_train, view_name):
    env = ray_train.make_view({"view": view_name, "env_kwargs": {"hash_dim": 32}})
    view = env.par_env.view
    assert env.possible_agents == view.possible_agents and len(env.possible_agents) == 7
    assert set(env.observation_spaces) == set(env.action_spaces) == set(env.possible_agents)
    for seed in range(4):
        observations, _ = env.reset(seed=seed)
        assert env.agents == view.agents and set(observations) == set(view.agents)
        for agent, observation in observations.items():
            assert env.get_observation_space(agent).contains(observation), agent
    assert ray_train.agent_to_module("therapist") == "therapist"
    assert ray_train.agent_to_module("participant_5") == "participant"


def test_targets_that_rllib_cannot_take_are_refused(ray_train):
    with pytest.raises(ValueError, match="observes text"):
        ray_train.check_target("Rescue-v0")
    with pytest.raises(ValueError, match="unknown target"):
        ray_train.check_target("NoSuchEnv-v9")
    ray_train.check_target("RescueSimFlatDiscrete-v1")
    ray_train.check_target("multiparty")


# ----- on a local Ray -----------------------------------------------------------------------------------------------


def _results(folder: Path):
    import pandas as pd

    csv, payload = folder / "results.csv", folder / "results.json"
    assert csv.is_file() and payload.is_file(), f"no results in {folder}"
    frame = pd.read_csv(csv)
    meta = json.loads(payload.read_text())
    assert len(meta["rows"]) == len(frame)
    return frame, meta


def _same(a, b, columns=SEEDED) -> None:
    for column in columns:
        assert a[column] == pytest.approx(b[column], rel=1e-6, abs=1e-9), column


def test_ppo_and_tune_sweep_on_local_ray(script, ray_train, local_ray, tmp_path, capsys, monkeypatch):
    from rescue_env.data import load_dataset

    demo = load_dataset("demo").sha256

    # 1. A flat id: one iteration, twice with seed 0 and once with seed 1.
    runs = {}
    for name, seed in (("flat0", 0), ("flat0_again", 0), ("flat1", 1)):
        out = tmp_path / name
        argv = ["train", "--target", "RescueFlatDiscrete-v0", "--seed", str(seed), "--output", str(out), *TINY]
        assert script.main(argv) == 0
        frame, meta = _results(out)
        assert len(frame) == 1 and frame.loc[0, "training_iteration"] == 1 and frame.loc[0, "status"] == "ok"
        runs[name] = frame.iloc[0]
    assert meta["data"]["sha256"] == demo and frame.loc[0, "data_sha256"] == demo
    assert {"rescue-env", "ray", "torch", "gymnasium", "pettingzoo"} <= set(meta["versions"])
    assert meta["settings"]["target"] == "RescueFlatDiscrete-v0" and meta["settings"]["masked"] is True
    # The seed fixes the sampling and the update: same seed -> the same first iteration, loss included.
    _same(runs["flat0"], runs["flat0_again"], SEEDED + ("learners/default_policy/policy_loss",))
    different = [c for c in SEEDED + ("learners/default_policy/policy_loss",) if runs["flat0"][c] != runs["flat1"][c]]
    assert different, "seed 1 sampled exactly what seed 0 did"
    # The masked module: the entropy of a uniform choice among the valid actions is below log(89).
    assert runs["flat0"]["learners/default_policy/entropy"] < np.log(89) - 0.1
    assert runs["flat0"]["env_runners/rescue/return"] == pytest.approx(runs["flat0"]["return_mean"])

    # 2. The PettingZoo replay view: the therapist learns, the participants keep their fixed policy.
    views = []
    for name in ("view0", "view0_again"):
        out = tmp_path / name
        assert script.main(["train", "--target", "multiparty", "--seed", "0", "--output", str(out), *TINY]) == 0
        frame, meta = _results(out)
        views.append(frame.iloc[0])
    row = views[0]
    assert "learners/therapist/policy_loss" in row and "learners/participant/policy_loss" not in row
    assert row["return_mean"] == pytest.approx(row["env_runners/agent_episode_returns_mean/therapist"])
    assert row["env_runners/module_episode_returns_mean/participant"] > 0  # well-being 1 - d, summed
    assert meta["settings"]["participants"] == "fixed"
    _same(views[0], views[1], SEEDED + ("learners/therapist/policy_loss",))

    # 3. A Tune sweep: seeds {0, 1} x beta {0.01, 0.05} on RescueSim-v1, one iteration per trial: the README's
    # check line, as written (its relative --output lands in this test's folder).
    [check] = [line for line in README_RAY_LINES if "runs/ray/check" in line]
    argv = shlex.split(check)[2:]
    assert argv[argv.index("--output") + 1] == "runs/ray/check"
    monkeypatch.chdir(tmp_path)
    assert script.main(argv) == 0
    out = tmp_path / "runs" / "ray" / "check"
    frame, meta = _results(out)
    assert len(frame) == 4 and set(frame["status"]) == {"ok"}
    assert set(zip(frame["seed"], frame["value"])) == set(itertools.product([0, 1], [0.01, 0.05]))
    assert set(frame["coefficient"]) == {"beta"} and set(frame["data_sha256"]) == {demo}
    # entropy_coeff is tied to each trial's own beta (the KL identity of RescueSim-v1).
    np.testing.assert_allclose(frame["learners/default_policy/curr_entropy_coeff"], frame["value"])
    # Tune's own per-trial files are there too.
    assert len(list((out / "tune").glob("*/*/progress.csv"))) == 4
    # Seeds are honoured across trial processes: beta changes the reward only, so within a seed both trials
    # sampled the same trajectories (same intervention rate and log pi_b); the two seeds sampled different ones.
    sampled = [f"env_runners/rescue/{key}" for key in ("intervention_rate", "mean_log_pi_b", "group_return")]
    by_seed = {seed: group[sampled].to_numpy() for seed, group in frame.groupby("seed")}
    for seed, values in by_seed.items():
        np.testing.assert_allclose(values[0], values[1], rtol=1e-9, err_msg=f"seed {seed}")
    assert not np.allclose(by_seed[0][0], by_seed[1][0])
    assert "wrote" in capsys.readouterr().out
