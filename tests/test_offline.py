"""``rescue_env.offline.export_minari``: the gold trajectories as a Minari dataset, checked against the env itself.

Every dataset is written under pytest's tmp folder (never into the project) from the embedded demo data.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

minari = pytest.importorskip("minari", reason="minari is not installed (pip install 'rescue-env[rl]')")
pytest.importorskip("h5py", reason="h5py (Minari's HDF5 storage) is not installed (pip install 'rescue-env[rl]')")

import rescue_env  # noqa: E402,F401  (registers the env ids)
from policies.reference import OraclePolicy  # noqa: E402
from rescue_env import offline  # noqa: E402
from rescue_env.data import load_dataset  # noqa: E402
from rescue_env.data.splits import SplitConfig, split_samples  # noqa: E402
from rescue_env.offline import default_dataset_id, flatten_action  # noqa: E402

# The replays' gold actions are the oracle's: the caller passes it in (rescue_env does not import the policies).
export_minari = functools.partial(offline.export_minari, oracle=OraclePolicy())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("minari")


@pytest.fixture(scope="module")
def v1_folder(root):
    return export_minari("demo", "Rescue-v1", output=root)


def _load(monkeypatch, root, dataset_id):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return minari.load_dataset(dataset_id)


def _at(tree, t):
    """Step ``t`` of a Minari dict-of-arrays value (actions or observations)."""
    if isinstance(tree, dict):
        return {k: _at(v, t) for k, v in tree.items()}
    return tree[t]


def _replay(dataset, env_id, **env_kwargs):
    """Play every episode of ``dataset`` again in a fresh env from its stored seed and options, with the oracle
    (replays) or the recorded therapist (closed loop), and compare everything the dataset recorded."""
    env = gym.make(env_id, data="demo", **env_kwargs)
    inner = env.unwrapped
    closed_loop = hasattr(inner, "recorded_action")
    metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    for episode, meta in zip(dataset.iterate_episodes(), metadata):
        sample_id = meta["options"]["sample_id"]
        assert meta["sample_id"] == sample_id
        observation, info = env.reset(seed=int(meta["seed"]), options={"sample_id": sample_id})
        # The length from the env, not the reset info: the default info leaves it out (issue 23).
        expected_length = inner.limit if closed_loop else len(inner.episode(inner.dataset.get(sample_id)).points)
        people = info["participants"]
        if not closed_loop:
            assert len(episode) == expected_length  # one step per decision point
        assert len(episode.rewards) == len(episode.terminations) == len(episode.truncations) == len(episode)
        assert episode.observations["context"][0] == observation["context"]
        assert len(episode.observations["context"]) == len(episode) + 1
        assert len(episode.infos["invalid"]) == len(episode) + 1
        for t in range(len(episode)):
            stored = _at(episode.actions, t)
            if closed_loop:
                action = inner.recorded_action()
            else:
                action = OraclePolicy().act(observation, env)
                gold = inner.gold()
                assert int(stored["intervene"]) == int(gold["intervene"])
                if gold["strategy"] is not None:
                    assert int(stored["strategy"]) == gold["strategy"]
                if gold["recipients"] is not None:
                    everyone = len(gold["recipients"]) == len(people)
                    bits = np.flatnonzero(stored["target"]).tolist()
                    assert bits == ([len(stored["target"]) - 1] if everyone else sorted(gold["recipients"]))
                assert bool(episode.infos["gold"]["strategy_known"][t + 1]) == (gold["strategy"] is not None)
            assert int(stored["intervene"]) == int(action["intervene"])
            assert int(stored["strategy"]) == int(action["strategy"])
            np.testing.assert_array_equal(stored["target"], action["target"])
            observation, reward, terminated, truncated, info = env.step(stored)  # the stored action, as loaded
            assert episode.rewards[t] == pytest.approx(reward, abs=1e-12)
            assert bool(episode.terminations[t]) == terminated
            assert bool(episode.truncations[t]) == truncated
            assert episode.observations["context"][t + 1] == observation["context"]
        assert terminated or truncated  # the last stored step ended the episode, as the env says
        assert len(episode) <= expected_length
    env.close()


def test_replay_episodes_are_the_envs_gold(monkeypatch, root, v1_folder):
    dataset_id = "rescue/rescue-v1-gold-v0"
    assert v1_folder == root / dataset_id
    assert (v1_folder / "data" / "main_data.hdf5").is_file()
    dataset = _load(monkeypatch, root, dataset_id)
    env = gym.make("Rescue-v1", data="demo")
    assert dataset.total_episodes == len(env.unwrapped.samples)  # split "all": every playable conversation once
    assert dataset.action_space == env.action_space
    assert dataset.observation_space == env.observation_space
    ids = [m["sample_id"] for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))]
    assert ids == [s.sample_id for s in env.unwrapped.samples]
    for episode in dataset.iterate_episodes():
        assert episode.terminations[-1] and not episode.terminations[:-1].any()  # the replays terminate
        assert not episode.truncations.any()
    _replay(dataset, "Rescue-v1")


def test_metadata_names_the_data_and_the_split(monkeypatch, root, v1_folder):
    dataset = _load(monkeypatch, root, "rescue/rescue-v1-gold-v0")
    metadata = dataset.storage.metadata
    sha = load_dataset("demo").sha256
    record = metadata["rescue"]
    assert record["data"]["sha256"] == sha and sha in metadata["description"]
    assert record["data"]["path"] == "demo"
    assert record["split"]["split"] == "all" and record["split"]["seed"] == 0
    assert record["version"] == rescue_env.__version__ and record["env_id"] == "Rescue-v1"
    assert metadata["author"] == {"rescue-env"} and "gold" in metadata["algorithm_name"]
    assert metadata["requirements"] == [f"rescue-env=={rescue_env.__version__}"]
    assert dataset.recover_environment().spec.id == "Rescue-v1"
    summary = next(iter(dataset.storage.get_episode_metadata([0])))["episode"]
    assert summary["return"] == pytest.approx(float(dataset[0].rewards.sum()))


def test_train_and_test_sides_partition_the_data(monkeypatch, tmp_path):
    folders = {side: export_minari("demo", "Rescue-v0", output=tmp_path, split=side) for side in ("train", "test")}
    assert folders["train"] == tmp_path / default_dataset_id("Rescue-v0", "train") != folders["test"]
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    samples = load_dataset("demo").samples
    played = {}
    for side, folder in folders.items():
        dataset = minari.load_dataset(str(folder.relative_to(tmp_path)))
        played[side] = [m["sample_id"] for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))]
        assert played[side] == [s.sample_id for s in split_samples(samples, SplitConfig(split=side))]
        assert dataset.storage.metadata["rescue"]["split"]["split"] == side
    assert played["train"] and played["test"] and not set(played["train"]) & set(played["test"])


def test_flat_variant_stores_the_flat_action(monkeypatch, root, v1_folder):
    folder = export_minari("demo", "RescueFlat-v1", output=root)
    flat = _load(monkeypatch, root, str(folder.relative_to(root)))
    dict_ = minari.load_dataset("rescue/rescue-v1-gold-v0")
    assert isinstance(flat.action_space, gym.spaces.MultiDiscrete)
    assert isinstance(flat.observation_space, gym.spaces.Box)
    for a, b in zip(flat.iterate_episodes(), dict_.iterate_episodes()):
        expected = np.stack([flatten_action(_at(b.actions, t)) for t in range(len(b))])
        np.testing.assert_array_equal(a.actions, expected)
        np.testing.assert_allclose(a.rewards, b.rewards)  # same seeds, same outcome draws
        assert a.observations.shape == (len(a) + 1, *flat.observation_space.shape)


def test_closed_loop_records_the_therapist_open_loop(monkeypatch, tmp_path):
    folder = export_minari("demo", "RescueSim-v0", output=tmp_path, split="train")
    dataset = _load(monkeypatch, tmp_path, str(folder.relative_to(tmp_path)))
    env = gym.make("RescueSim-v0", data="demo", starts="train")
    assert dataset.total_episodes == len(env.unwrapped.samples)
    assert "recorded" in dataset.storage.metadata["algorithm_name"]
    _replay(dataset, "RescueSim-v0", starts="train")


def test_existing_output_is_refused_unless_overwrite(tmp_path):
    folder = export_minari("demo", "Rescue-v0", output=tmp_path)
    before = (folder / "data" / "metadata.json").stat().st_mtime_ns
    with pytest.raises(ValueError, match="exists and is not empty; pass overwrite=True") as error:
        export_minari("demo", "Rescue-v0", output=tmp_path)
    assert "\n" not in str(error.value)
    assert (folder / "data" / "metadata.json").stat().st_mtime_ns == before  # untouched
    assert export_minari("demo", "Rescue-v0", output=tmp_path, overwrite=True) == folder
    assert minari.MinariDataset(folder / "data").total_episodes == 6
    other = tmp_path / "rescue" / "keep-v0"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not a Minari dataset; refusing to delete it"):
        export_minari("demo", "Rescue-v0", output=tmp_path, dataset_id="rescue/keep-v0", overwrite=True)
    assert (other / "notes.txt").read_text() == "mine"
    empty = tmp_path / "rescue" / "empty-v0"
    empty.mkdir()
    assert export_minari("demo", "Rescue-v0", output=tmp_path, dataset_id="rescue/empty-v0") == empty


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_id": "CartPole-v1"}, "unknown env id 'CartPole-v1' for a Minari export; choose from Rescue-v0"),
        ({"dataset_id": "no version"}, "is not a Minari id: give namespace/name-vN"),
        ({"dataset_id": "rescue/../x-v0"}, "is not a Minari id"),
        ({"split": "dev"}, "unknown split 'dev'"),
    ],
)
def test_one_line_errors(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        export_minari("demo", output=tmp_path, **kwargs)
    assert "\n" not in str(error.value)
    assert not any(tmp_path.iterdir())  # nothing written


def test_minari_missing_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "minari", None)  # makes `import minari` raise ImportError
    with pytest.raises(ValueError, match=r"pip install 'rescue-env\[rl\]'") as error:
        export_minari("demo", output=tmp_path)
    assert "\n" not in str(error.value)


def test_minari_path_variable_is_restored(monkeypatch, tmp_path):
    monkeypatch.setenv("MINARI_DATASETS_PATH", "/nonexistent-before")
    export_minari("demo", "Rescue-v0", output=tmp_path)
    assert os.environ["MINARI_DATASETS_PATH"] == "/nonexistent-before"


def test_the_cli_exports_the_demo(tmp_path: Path, capsys) -> None:
    from rescue_env.cli import main

    code = main(["export", "minari", "--data", "demo", "--env", "Rescue-v1", "-o", str(tmp_path / "minari")])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("Minari dataset: ")
    folder = Path(out.split(": ", 1)[1].strip())
    assert (folder / "data" / "metadata.json").is_file()
    code = main(["export", "minari", "--data", "demo", "--env", "Nope-v0", "-o", str(tmp_path / "other")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Nope-v0" in err


def test_a_replay_needs_the_oracle_and_the_closed_loop_does_not(tmp_path):
    with pytest.raises(ValueError, match=r"need the oracle policy; pass oracle=policies\.OraclePolicy\(\)") as error:
        offline.export_minari("demo", "Rescue-v0", output=tmp_path)
    assert "\n" not in str(error.value) and "Rescue-v0" in str(error.value)
    assert not any(tmp_path.iterdir())  # nothing written
    env = gym.make("Rescue-v1", data="demo")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="pass oracle="):
        offline.gold_action(env)
    env.close()
    plain = offline.export_minari("demo", "RescueSim-v0", output=tmp_path / "plain", split="test")
    given = export_minari("demo", "RescueSim-v0", output=tmp_path / "given", split="test")
    episodes = zip(
        minari.MinariDataset(plain / "data").iterate_episodes(), minari.MinariDataset(given / "data").iterate_episodes()
    )
    for a, b in episodes:  # the closed loop plays the recorded therapist: the oracle plays no part
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.actions["strategy"], b.actions["strategy"])
