"""The gold trajectories of the replays as a Minari dataset, for offline RL (the ``rl`` extra).

``export_minari`` plays every conversation of one side of the project's grouped split once, with the recorded
therapist's (gold) action at every decision point, and writes a local Minari dataset in Minari's standard format
(HDF5 storage): observations, actions, rewards, terminations, truncations and infos per episode, the episode's seed
and reset options, and metadata naming the data, its sha256, the split and the package version. Offline-RL
libraries read it with ``minari.load_dataset``::

    import os, minari
    os.environ["MINARI_DATASETS_PATH"] = "/tmp/rescue-minari"      # the ``output`` folder
    dataset = minari.load_dataset("rescue/rescue-v1-gold-v0")
    # or, without the variable: minari.MinariDataset("/tmp/rescue-minari/rescue/rescue-v1-gold-v0/data")

The dataset holds the conversations' text (the ``context`` observations): its terms of use are those of the data it
was made from (the release's are research-only). Write it outside the project (the tests and examples use ``/tmp``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rescue_env.data.loading import DEMO
from rescue_env.data.splits import METHOD, SplitConfig, split_samples

REPLAY_IDS = ("Rescue-v0", "Rescue-v1", "RescueFlat-v0", "RescueFlat-v1")
"""The replays: one episode per conversation, the gold action (``env.gold()``) at every decision point."""
SIM_IDS = ("RescueSim-v0", "RescueSimFlat-v0")
"""The closed loop: the real therapist's action played open loop (``env.recorded_action()``)."""
ENV_IDS = REPLAY_IDS + SIM_IDS
FLAT_IDS = frozenset({"RescueFlat-v0", "RescueFlat-v1", "RescueSimFlat-v0"})
"""Ids whose action is the flat ``MultiDiscrete`` [intervene, target bits..., strategy] of ``FlatAction``."""

INSTALL_HINT = "pip install 'rescue-env[rl]'"
AUTHOR = "rescue-env"
NAMESPACE = "rescue"

_ORACLE_NEEDED = "pass oracle=policies.OraclePolicy()"
_NAN = float("nan")
_COMPONENTS = ("timing", "target", "strategy", "group")


def default_dataset_id(env_id: str, split: str = "all") -> str:
    """``rescue/<env id lower>-gold-v0`` (``split="all"``), else ``rescue/<env id lower>-gold-<split>-v0``, so that
    the train and test sides can sit in one Minari folder."""
    side = "" if split == "all" else f"-{split}"
    return f"{NAMESPACE}/{env_id.lower()}-gold{side}-v0"


def require_minari():
    """The ``minari`` module with its HDF5 storage, else a one-line ``ValueError`` saying what to install."""
    try:
        import h5py  # noqa: F401  (Minari's default storage; imported lazily by Minari itself)
        import minari
    except ImportError:
        raise ValueError(f"exporting a Minari dataset needs minari and h5py: {INSTALL_HINT}") from None
    return minari


def dataset_folder(output: str | Path | None, dataset_id: str) -> Path:
    """Where ``dataset_id`` lives under the Minari root ``output`` (None: ``MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets``, Minari's own default)."""
    return _root(output) / dataset_id


def _root(output: str | Path | None) -> Path:
    if output is not None:
        return Path(output).expanduser().resolve()
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env).expanduser().resolve() if env else Path.home() / ".minari" / "datasets"


def _check_dataset_id(dataset_id: str) -> None:
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        _, _, version = parse_dataset_id(dataset_id)
    except (ValueError, TypeError):
        version = None
    if version is None or ".." in dataset_id.split("/") or dataset_id.startswith("/"):
        raise ValueError(f"dataset id {dataset_id!r} is not a Minari id: give namespace/name-vN, e.g. rescue/my-v0")


def _check_folder(folder: Path, overwrite: bool) -> None:
    """Refuse an existing, non-empty dataset folder unless ``overwrite``, and then only a Minari dataset's."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output {folder} exists and is not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    if not overwrite:
        raise ValueError(f"output {folder} exists and is not empty; pass overwrite=True or choose another output")
    if not (folder / "data" / "metadata.json").is_file():
        raise ValueError(f"output {folder} is not a Minari dataset; refusing to delete it (remove it yourself)")


def _clear_folder(folder: Path) -> None:
    """Remove what ``_check_folder`` allowed: Minari creates the folder itself and refuses one that exists."""
    if folder.is_dir():
        if any(folder.iterdir()):
            shutil.rmtree(folder)
        else:
            folder.rmdir()


@contextlib.contextmanager
def _datasets_path(root: Path) -> Iterator[None]:
    """``MINARI_DATASETS_PATH`` set to ``root`` for the duration (Minari resolves every id through it)."""
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def _jsonable(value: Any) -> Any:
    """``value`` as JSON (non-JSON leaves as their ``repr``), for the metadata's record of the env's arguments."""
    return json.loads(json.dumps(value, default=repr))


# ----- actions ----------------------------------------------------------------------------------------------


class GoldPolicy(Protocol):
    """What plays the gold action of a replay: ``act(observation, env)`` (``policies.OraclePolicy()``)."""

    def act(self, observation: dict, env: Any) -> dict: ...


def gold_action(env: Any, observation: Any = None, oracle: GoldPolicy | None = None) -> dict[str, Any]:
    """The ``Dict`` action the dataset records at the current step of ``env`` (any wrappers): on a replay the
    ``oracle``'s (``policies.OraclePolicy()``: the real therapist's z*, A*, a*; where A* is unknown everyone, where
    a* is unknown the scenario's first strategy, as on listening steps); on ``RescueSim-v0`` ``recorded_action()``
    (no oracle needed). The oracle is passed in: this layer does not import the policies."""
    inner = getattr(env, "unwrapped", env)
    if hasattr(inner, "recorded_action"):
        return inner.recorded_action()
    if oracle is None:
        raise ValueError(f"{_ORACLE_NEEDED} to play a replay's gold actions")
    if not (isinstance(observation, Mapping) and "target_mask" in observation):
        # A flat observation: the oracle only reads the masks, which the env gives as they are observed.
        masks = inner.action_masks()
        target = masks["target"].astype(np.int8)
        observation = {"target_mask": target, "strategy_mask": masks["strategy"].astype(np.int8)}
        observation["participants"] = target[:-1]
    return oracle.act(observation, inner)


def flatten_action(action: Mapping[str, Any]) -> np.ndarray:
    """A ``Dict`` action as ``FlatAction``'s ``MultiDiscrete`` vector [intervene, target bits..., strategy]."""
    target = np.asarray(action["target"], dtype=np.int64).ravel()
    return np.concatenate([[int(action["intervene"])], target, [int(action["strategy"])]]).astype(np.int64)


# ----- infos ------------------------------------------------------------------------------------------------


def _replay_info(info: Mapping[str, Any] | None, gold: Mapping[str, Any] | None) -> dict[str, Any]:
    """One fixed-shape info entry of a replay (Minari stores infos as arrays: every entry has the same keys)."""
    if info is None:  # the reset entry
        return {
            "decision": -1,
            "row": -1,
            "components": dict.fromkeys(_COMPONENTS, _NAN),
            "gold": {"intervene": -1, "target_known": False, "strategy_known": False},
            "invalid": 0,
        }
    parts = info["components"]
    return {
        "decision": int(info["decision"]),
        "row": int(info["row"]),
        "components": {k: _NAN if parts.get(k) is None else float(parts[k]) for k in _COMPONENTS},
        "gold": {
            "intervene": int(bool(gold["intervene"])),
            "target_known": gold["recipients"] is not None,
            "strategy_known": gold["strategy"] is not None,
        },
        "invalid": len(info.get("invalid", ())),
    }


def _sim_info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """One fixed-shape info entry of ``RescueSim-v0``."""
    if info is None:
        return {"step": -1, "max_distress": _NAN, "tension": _NAN, "calm_bonus": 0.0, "invalid": 0}
    distress = list(info["state"]["distress"].values())
    return {
        "step": int(info["step"]),
        "max_distress": float(max(distress)) if distress else 0.0,
        "tension": float(info["state"]["tension"]),
        "calm_bonus": float(info.get("calm_bonus", 0.0)),
        "invalid": len(info.get("invalid", ())),
    }


def _stack(entries: list[Any]) -> Any:
    """A list of same-shaped nested dicts as one nested dict of lists (Minari's buffer layout)."""
    if isinstance(entries[0], Mapping):
        return {key: _stack([e[key] for e in entries]) for key in entries[0]}
    return entries


def _episode_metadata(reset_info: Mapping[str, Any], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The per-episode attributes beside Minari's ``id``/``seed``/``options``/``total_steps``: the conversation,
    and the env's ``info["episode"]`` (nested keys joined by ``/``, which Minari's HDF5 storage reads back nested)."""
    meta: dict[str, Any] = {
        "sample_id": str(reset_info["sample_id"]),
        "scenario": str(reset_info["scenario"]),
        "participants": [str(p) for p in reset_info["participants"]],
    }

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                add(f"{prefix}/{key}", item)
        elif isinstance(value, bool | int | float | np.integer | np.floating | np.bool_):
            meta[prefix] = value.item() if isinstance(value, np.generic) else value

    add("episode", dict(summary or {}))
    return meta


# ----- playing ----------------------------------------------------------------------------------------------


def _play(env: Any, sample_id: str, seed: int, flat: bool, closed_loop: bool, oracle: GoldPolicy | None):
    """One episode with the gold actions: (Minari ``EpisodeBuffer`` fields, episode metadata)."""
    inner = env.unwrapped
    observation, reset_info = env.reset(seed=seed, options={"sample_id": sample_id})
    limit = int(reset_info["steps"] if closed_loop else reset_info["decision_points"])
    observations, actions, rewards, terminations, truncations = [observation], [], [], [], []
    infos = [_sim_info(None) if closed_loop else _replay_info(None, None)]
    summary = None
    for _ in range(limit):
        gold = None if closed_loop else inner.gold()
        action = gold_action(env, observation, oracle)
        observation, reward, terminated, truncated, info = env.step(flatten_action(action) if flat else action)
        observations.append(observation)
        actions.append(flatten_action(action) if flat else action)
        rewards.append(float(reward))
        terminations.append(bool(terminated))
        truncations.append(bool(truncated))
        infos.append(_sim_info(info) if closed_loop else _replay_info(info, gold))
        if terminated or truncated:
            summary = info.get("episode")
            break
    else:
        raise RuntimeError(f"{sample_id}: the episode did not end after its {limit} steps")
    fields = {
        "seed": seed,
        "options": {"sample_id": sample_id},
        "observations": _stack(observations),
        "actions": _stack(actions) if not flat else actions,
        "rewards": rewards,
        "terminations": terminations,
        "truncations": truncations,
        "infos": _stack(infos),
    }
    return fields, _episode_metadata(reset_info, summary)


def _make_env(env_id: str, data: str, split: str, seed: int, test_fraction: float, env_kwargs: dict[str, Any]):
    import gymnasium as gym

    import rescue_env  # noqa: F401  (registers the ids)

    kwargs = dict(env_kwargs)
    if env_id in SIM_IDS:
        for name in ("starts", "split_seed"):
            if name in kwargs:
                raise ValueError(f"{env_id}: give split= and seed= instead of {name}=")
        kwargs.update(starts=split, split_seed=seed, test_fraction=test_fraction)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # gymnasium's "Rescue-v0 is out of date": chosen here
        env = gym.make(env_id, data=data, **kwargs)
    env.unwrapped.info_level = "full"  # the stored infos read the step's components, gold and state
    return env, kwargs


def export_minari(
    data: str | Path = DEMO,
    env_id: str = "Rescue-v1",
    output: str | Path | None = None,
    dataset_id: str | None = None,
    split: str = "all",
    seed: int = 0,
    *,
    test_fraction: float = 0.2,
    overwrite: bool = False,
    oracle: GoldPolicy | None = None,
    **env_kwargs: Any,
) -> Path:
    """Write the gold trajectories of ``env_id`` on ``data`` as a local Minari dataset; return its folder.

    Every conversation on the ``split`` side (``train``, ``test`` or ``all``) of the project's grouped split
    (``rescue_env.data.splits``, ``seed``, ``test_fraction``) is played once, in dataset order, with
    ``reset(seed=seed + i, options={"sample_id": ...})`` for the i-th episode (stored as Minari's episode ``seed``
    and ``options``, so each episode can be replayed). The action at every decision point is the recorded
    therapist's: on the replays (``Rescue-v0``, ``Rescue-v1``) ``env.gold()`` as ``policies.OraclePolicy`` plays
    it (z*, A*, a*; where the next row is the therapist's but A* or a* is unknown, and on listening steps, the
    oracle's fill-ins: everyone, the scenario's first strategy); on ``RescueSim-v0`` ``env.recorded_action()``, the
    real therapist's course of support played open loop. The env itself is built with ``gym.make(env_id,
    data=data, **env_kwargs)`` on the whole data (so that ``Rescue-v1``'s outcome model is the one fitted on the
    train side, as in the benchmark); for ``RescueSim-v0`` ``split``/``seed``/``test_fraction`` become its
    ``starts``/``split_seed``/``test_fraction``. Rewards, terminations and truncations are what the env returned.

    The dataset is Minari's standard format (HDF5): per episode N actions, rewards, terminations, truncations and
    N + 1 observations (the reset's first); the env's own spaces: the ``Dict`` action (``intervene``, ``target``
    bits, ``strategy``) and ``Dict`` observation (``context`` text ...) of ``Rescue-v0``/``Rescue-v1``/
    ``RescueSim-v0``, or, for the flat ids ``RescueFlat-v0``/``RescueFlat-v1``/``RescueSimFlat-v0``, the
    ``Box`` observation and ``MultiDiscrete`` action [intervene, target bits..., strategy] that most offline-RL
    libraries need. ``infos`` has N + 1 entries (the reset's first, with -1 / NaN / False placeholders) of fixed
    keys: on the replays ``decision``, ``row``, ``components/{timing,target,strategy,group}`` (NaN = not scored),
    ``gold/{intervene,target_known,strategy_known}`` (whether A* and a* were known, i.e. not the oracle's fill-in)
    and ``invalid`` (masked choices); on the closed loop ``step``, ``max_distress``, ``tension``, ``calm_bonus``,
    ``invalid``. Each episode's metadata (``dataset.storage.get_episode_metadata([i])``) names its ``sample_id``,
    ``scenario``, ``participants`` and the env's ``info["episode"]`` summary. The dataset metadata has Minari's
    ``author``, ``algorithm_name``, ``description``, ``requirements`` and the env spec (``recover_environment``),
    and ``rescue``: the data path and source, its sha256, the split config and method, the sample ids played,
    the env id and arguments, and the rescue-env version.

    Args:
        data: the release JSONL, a directory of per-sample JSON files, or ``"demo"``.
        env_id: ``Rescue-v1`` (default), ``Rescue-v0``, ``RescueFlat-v0``, ``RescueFlat-v1``, ``RescueSim-v0`` or
            ``RescueSimFlat-v0``.
        output: the Minari root folder: the dataset goes to ``output / dataset_id`` (default:
            ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``). Point ``MINARI_DATASETS_PATH`` at it to load.
        dataset_id: ``namespace/name-vN``; default ``rescue/<env id lower>-gold-v0`` (``-gold-<split>-v0`` for
            ``split`` train or test).
        split, seed, test_fraction: the side of the grouped split to play, and the seed of the split and of the
            episodes' resets.
        overwrite: replace an existing dataset at ``output / dataset_id`` (only a Minari dataset is removed).
        oracle: what plays the replays' gold action, ``policies.OraclePolicy()`` (``rescue-bench export minari``
            passes it); needed for the replay ids, unused by the closed loop. Passed in because this layer does not
            import the policies.
        **env_kwargs: more arguments of the env (``reward``, ``mode``, ``context_size``, ``dynamics``, ...).

    Returns:
        The dataset's folder, ``output / dataset_id`` (Minari's data under ``data/``).

    Raises:
        ValueError (one line): an unknown env id, a malformed dataset id, an existing non-empty dataset folder
        without ``overwrite``, a replay id without ``oracle``, Minari not installed (``pip install
        'rescue-env[rl]'``), a bad split, no conversation on the chosen side. ``rescue_env.data.DataError`` for
        unreadable data.

    >>> import os, minari                                          # doctest: +SKIP
    >>> from policies import OraclePolicy
    >>> folder = export_minari("demo", "Rescue-v1", output="/tmp/rescue-minari", oracle=OraclePolicy())
    >>> os.environ["MINARI_DATASETS_PATH"] = "/tmp/rescue-minari"
    >>> dataset = minari.load_dataset("rescue/rescue-v1-gold-v0")
    """
    if env_id not in ENV_IDS:
        raise ValueError(f"unknown env id {env_id!r} for a Minari export; choose from {', '.join(ENV_IDS)}")
    config = SplitConfig(split=split, seed=seed, test_fraction=test_fraction)  # one-line ValueErrors
    minari = require_minari()
    dataset_id = dataset_id or default_dataset_id(env_id, config.split)
    _check_dataset_id(dataset_id)
    root = _root(output)
    folder = root / dataset_id
    _check_folder(folder, overwrite)  # early; an old dataset is removed only once the env is built
    if oracle is None and env_id in REPLAY_IDS:
        raise ValueError(f"{env_id}: the gold actions of a replay need the oracle policy; {_ORACLE_NEEDED}")

    data_arg = DEMO if str(data) == DEMO else str(Path(data).expanduser().resolve())
    env, used_kwargs = _make_env(env_id, data_arg, config.split, config.seed, config.test_fraction, env_kwargs)
    try:
        inner = env.unwrapped
        closed_loop = env_id in SIM_IDS
        if closed_loop:
            played = [s.sample_id for s in inner.samples]  # the env's starts: already that side
        else:
            side = {s.sample_id for s in split_samples(inner.dataset.samples, config)}
            played = [s.sample_id for s in inner.samples if s.sample_id in side]
        if not played:
            raise ValueError(f"{inner.dataset.source}: no playable conversation on the {config.split} side")
        record = {
            "package": "rescue-env",
            "version": _package_version(),
            "env_id": env_id,
            "env_kwargs": _jsonable(used_kwargs),
            "action_format": "flat MultiDiscrete" if env_id in FLAT_IDS else "Dict",
            "data": {
                "path": data_arg,
                "source": inner.dataset.source,
                "sha256": inner.dataset.sha256,
                "samples": len(inner.dataset),
            },
            "split": {**config.model_dump(mode="json"), "method": METHOD},
            "episodes": len(played),
            "sample_ids": played,
            "episode_seeds": f"seed + i for the i-th episode, from seed={config.seed}",
            "policy": _policy_text(closed_loop),
        }
        _check_folder(folder, overwrite)
        _clear_folder(folder)
        with _datasets_path(root), warnings.catch_warnings():
            # Minari warns for every optional field left out (author e-mail, code permalink, eval env).
            warnings.filterwarnings("ignore", category=UserWarning, module=r"minari(\.|$)")
            try:
                _write(minari, env, dataset_id, played, config.seed, env_id, closed_loop, record, oracle)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
    finally:
        env.close()
    return folder


def _write(minari, env, dataset_id, played, seed, env_id, closed_loop, record, oracle):
    from minari.data_collector import EpisodeBuffer

    flat = env_id in FLAT_IDS
    dataset = minari.create_dataset_from_buffers(
        dataset_id,
        [],
        env=env,
        algorithm_name="recorded therapist (open loop)" if closed_loop else "gold (recorded therapist, OraclePolicy)",
        author=AUTHOR,
        description=_description(record),
        requirements=[f"rescue-env=={record['version']}"],
        data_format="hdf5",
    )
    metadatas = []
    for index, sample_id in enumerate(played):
        fields, meta = _play(env, sample_id, seed + index, flat, closed_loop, oracle)
        dataset.update_dataset_from_buffer([EpisodeBuffer(id=index, **fields)])
        metadatas.append(meta)
    dataset.storage.update_episode_metadata(metadatas, range(len(played)))
    dataset.storage.update_metadata({"rescue": record})


def _policy_text(closed_loop: bool) -> str:
    if closed_loop:
        return "env.recorded_action(): what the real therapist did at the source's matching decision point"
    return (
        "env.gold() as policies.OraclePolicy plays it: z*, A*, a*; everyone where A* is unknown and the scenario's "
        "first strategy where a* is unknown (listening steps included); infos gold/target_known, strategy_known"
    )


def _description(record: Mapping[str, Any]) -> str:
    data, split = record["data"], record["split"]
    return (
        f"RESCUE-Bench {record['env_id']}: {record['episodes']} conversations ({split['split']} side of the grouped "
        f"split, seed {split['seed']}, test fraction {split['test_fraction']}) played once with the recorded "
        f"therapist's actions. Data {data['source']} (sha256 {data['sha256']}); rescue-env {record['version']}. "
        "It holds the conversations' text: its terms of use are those of the data."
    )


def _package_version() -> str:
    from rescue_env import __version__

    return __version__


__all__ = [
    "ENV_IDS",
    "FLAT_IDS",
    "GoldPolicy",
    "REPLAY_IDS",
    "SIM_IDS",
    "dataset_folder",
    "default_dataset_id",
    "export_minari",
    "flatten_action",
    "gold_action",
    "require_minari",
]
