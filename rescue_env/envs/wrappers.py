"""Wrappers that turn ``Rescue-v0`` into what an off-the-shelf learner (SB3's ``MlpPolicy``) takes: a flat ``Box``
observation and a ``MultiDiscrete`` action (``FlatAction``) or one ``Discrete`` action (``DiscreteSupportAction``).
MiniGrid's ``FlatObsWrapper`` is the model: the env stays one class with a rich observation, and the
learner-facing encoding lives here (``RescueFlat-v0`` = ``make_flat_env``, ``RescueFlatDiscrete-v0`` =
``make_flat_env(action="discrete")``).

Every feature is a function of the observation alone (the ``context`` text and the small fields beside it): never
of ``info``, ``env.gold()`` or ``env.state()``, which carry the annotations and the real therapist's choice.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.data.domain import SpeakerClass, speaker_class
from rescue_env.embeddings import EMBEDDING_DIM, MiniLM, check_embeddings_available
from rescue_env.envs.replay import RescueEnv, SharedCache, integer_value
from rescue_env.rendering import ParsedRow, header_slots, split_context
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

_TOKEN = re.compile(r"[a-z0-9']+")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A dict that forgets its least recently used entries beyond ``maxsize`` (``maxsize`` <= 0: unbounded)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = self.misses = 0

    def get_or_compute(self, key: K, compute: Callable[..., V], *args: Any) -> V:
        """The cached value of ``key``, else ``compute(key, *args)`` (stored)."""
        data = self._data
        value = data.get(key)
        if value is not None:
            self.hits += 1
            data.move_to_end(key)
            return value
        self.misses += 1
        value = compute(key, *args)
        data[key] = value
        if 0 < self.maxsize < len(data):
            data.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self.hits = self.misses = 0


def stable_bucket(term: str, hash_dim: int) -> int:
    """The hashing-trick bucket of ``term``: CRC-32, so it is the same in every process (``hash()`` is salted
    per process by PYTHONHASHSEED, which would make a trained policy's features meaningless elsewhere)."""
    return zlib.crc32(term.encode("utf-8")) % hash_dim


def term_counts(text: str, hash_dim: int) -> np.ndarray:
    """Hashed unigram + bigram counts of the lower-cased tokens ``[a-z0-9']+`` of ``text``."""
    tokens = _TOKEN.findall(text.lower())
    if not tokens:
        return np.zeros(hash_dim, dtype=np.float32)
    crc = zlib.crc32
    buckets = [crc(t.encode()) % hash_dim for t in tokens]
    # Bigrams are hashed as "a b": a space never occurs inside a token, so no bigram collides with a unigram key.
    buckets += [crc(f"{a} {b}".encode()) % hash_dim for a, b in zip(tokens, tokens[1:])]
    return np.bincount(buckets, minlength=hash_dim).astype(np.float32)


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The ``Dict`` observation of ``Rescue-v0`` as one ``Box(float32)`` vector, in this order:

    - ``bow``: hashed bag of words of the context rows (not the header): unigrams and bigrams of the lower-cased
      tokens ``[a-z0-9']+`` hashed (CRC-32) into ``hash_dim`` buckets, the last row's counts times
      ``last_row_weight``, log1p, L2-normalised; in [0, 1].
    - ``speaker_share``: share of the last ``turn_window`` rows spoken by each slot, the therapist, the group and
      anyone else (``max_participants + 3``), from the row lines of the context.
    - ``last_row``: the last row addresses the therapist / the group / a participant; it ends with ``?``; the
      length of the current run of client rows / ``turn_window`` (clipped to 1).
    - ``last_speaker`` one-hot, ``scenario`` one-hot, ``position`` (v0) or ``elapsed`` (v1: log1p(rows) / log1p(1000),
      log1p(minutes) / log1p(120)), ``participants``, ``target_mask``, ``strategy_mask``, from the observation.
    - with ``embeddings=True``: the MiniLM sentence embedding (384, in [-1, 1]) of the last row's words.

    A replayed conversation shows the same observations every episode, so the vector is cached (LRU, ``cache_size``
    entries) per observation, time values included (``time_in_key``; the sim writes its clock in at every step),
    and shared by the wrappers of a process per observation without its time values; the context features
    have their own cache keyed by the context text, and so do row blocks, since consecutive contexts share all
    rows but one. The caches hold only functions of observed values, so they never change what a policy sees.
    With a replay directly under the wrapper (``RescueFlat-v0``, ``RescueFlat-v1``), a step does not even build
    the ``Dict`` (``RescueEnv.advance``): each point's vector is kept per episode from its first visit.
    """

    def __init__(
        self,
        env: gym.Env,
        hash_dim: int = 256,
        last_row_weight: float = 2.0,
        turn_window: int = 8,
        embeddings: bool = False,
        cache_size: int = 16384,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            hash_dim=hash_dim,
            last_row_weight=last_row_weight,
            turn_window=turn_window,
            embeddings=embeddings,
            cache_size=cache_size,
        )
        gym.ObservationWrapper.__init__(self, env)
        if hash_dim < 1 or turn_window < 1 or last_row_weight < 0:
            raise ValueError("hash_dim and turn_window must be >= 1 and last_row_weight >= 0")
        if embeddings:
            check_embeddings_available()
        source = env.observation_space
        if not isinstance(source, spaces.Dict) or "context" not in source.spaces:
            raise TypeError(f"FlatObservation wraps Rescue-v0's Dict observation, got {source}")
        self.hash_dim, self.last_row_weight, self.turn_window = hash_dim, float(last_row_weight), turn_window
        self.embeddings = embeddings
        self.n_slots = int(source["participants"].n)
        self.n_speakers = int(source["last_speaker"].n)  # slots, therapist, group, other
        self.n_scenarios = int(source["scenario"].n)
        self.n_strategies = int(source["strategy_mask"].n)
        # Rescue-v0 observes ``position`` (progress in [0, 1]); Rescue-v1 ``elapsed`` (rows, minutes), scaled here.
        self.time_key = "position" if "position" in source.spaces else "elapsed"

        sizes = {
            "bow": hash_dim,
            "speaker_share": self.n_speakers,
            "last_row": 5,
            "last_speaker": self.n_speakers,
            "scenario": self.n_scenarios,
            self.time_key: 2,
            "participants": self.n_slots,
            "target_mask": self.n_slots + 1,
            "strategy_mask": self.n_strategies,
        }
        if embeddings:
            sizes["embedding"] = EMBEDDING_DIM
        sizes.update(self.extra_sizes())
        self.feature_slices: dict[str, slice] = {}
        start = 0
        for name, size in sizes.items():
            self.feature_slices[name] = slice(start, start + size)
            start += size
        low = np.zeros(start, dtype=np.float32)
        if embeddings:
            low[self.feature_slices["embedding"]] = -1.0
        self.observation_space = spaces.Box(low, np.ones(start, dtype=np.float32), dtype=np.float32)
        self._low, self._high = low, self.observation_space.high

        self._speaker_eye = np.eye(self.n_speakers, dtype=np.float32)
        self._scenario_eye = np.eye(self.n_scenarios, dtype=np.float32)
        self._contexts: LRUCache[str, np.ndarray] = LRUCache(cache_size)
        self._rows: LRUCache[str, tuple[ParsedRow, np.ndarray]] = LRUCache(4 * cache_size)
        self._embeddings: LRUCache[str, np.ndarray] = LRUCache(cache_size)
        self._points: LRUCache[tuple, np.ndarray] = LRUCache(cache_size)
        self._by_episode: dict[int, tuple[Any, list[np.ndarray | None]]] = {}
        self._vectors: list[np.ndarray | None] | None = None
        self._last_speaker: int | None = None
        self._position = self.feature_slices[self.time_key].start
        self._log_time = self.time_key == "elapsed"
        self._has_extra = type(self).extra_features is not FlatObservation.extra_features  # skip the hook's call
        # What a point's vector depends on besides its key: wrappers with the same settings (the sub-envs of a
        # vector env) share the vectors they computed (``_SHARED_POINTS``); each keeps its own LRU and counts.
        sizes_ = (start, self.n_slots, self.n_speakers, self.n_scenarios, self.n_strategies, self.time_key)
        self._settings = (type(self), hash_dim, float(last_row_weight), turn_window, embeddings, sizes_)

    # ----- the replays' fast path ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        features = self.observation(observation)
        self._vectors = vectors = self._episode_vectors()
        if vectors is not None and vectors[0] is None:
            vectors[0] = features.copy()
            vectors[0].flags.writeable = False
        return features, info

    def step(self, action: Any):
        # A replay directly under this wrapper shows the same observation at every visit of a decision point, so
        # its vector is kept per (episode, point) and a step skips the ``Dict`` (``RescueEnv.advance``): the
        # vector is still ``observation()`` of that ``Dict``, computed at the first visit (tested equal).
        vectors, env = self._vectors, self.env
        if vectors is None or env._full_info:  # the details of ``info_level="full"`` are v1's ``step``'s
            observation, reward, terminated, truncated, info = env.step(action)
            return self.observation(observation), reward, terminated, truncated, info
        reward, terminated, info = env.advance(action)
        point = env.observed_point()
        vector = vectors[point]
        if vector is None:
            vector = vectors[point] = self.observation(env.current_observation())
            vector.flags.writeable = False
        return vector.copy(), reward, terminated, False, info

    def _episode_vectors(self) -> list[np.ndarray | None] | None:
        """The vectors of the current episode's points, when a replay is directly under this wrapper (else None).
        Kept by the episode object's identity, with the object itself, so a recycled id never matches."""
        env = self.env
        if not isinstance(env, RescueEnv):
            return None
        episode = env._episode
        entry = self._by_episode.get(id(episode))
        if entry is None or entry[0] is not episode:
            if len(self._by_episode) >= self._points.maxsize > 0:
                self._by_episode.clear()
            entry = self._by_episode[id(episode)] = (episode, [None] * len(episode.points))
        return entry[1]

    def last_speaker_slot(self) -> int | None:
        """The participant slot of the last observation's ``last_speaker`` (None: the therapist, the group, someone
        else, or no observation yet), for ``DiscreteSupportAction``'s "the last speaker": the observation's own
        field, read back, since the flat vector hides it among the features. On the fast path no ``Dict`` is
        built, and the replay answers from the point it shows."""
        if self._vectors is not None:
            return self.env.last_speaker_slot()
        slot = self._last_speaker
        return slot if slot is not None and slot < self.n_slots else None

    @property
    def feature_names(self) -> list[str]:
        """One name per feature index (``bow[17]``, ``speaker_share[therapist]``, ...)."""
        speakers = [f"slot{i}" for i in range(self.n_slots)] + ["therapist", "group", "other"]
        labels = {
            "speaker_share": speakers,
            "last_speaker": speakers,
            "last_row": ["to_therapist", "to_group", "to_participant", "question", "client_run"],
            "position": ["row", "decision"],
            "elapsed": [name for name, _ in self.elapsed_scales],
            "target_mask": [f"slot{i}" for i in range(self.n_slots)] + ["group"],
        }
        names = []
        for name, part in self.feature_slices.items():
            size = part.stop - part.start
            names += [f"{name}[{label}]" for label in labels.get(name, range(size))]
        return names

    def cache_info(self) -> dict[str, dict[str, int]]:
        """Size, hits and misses of each cache (decision points, contexts, row blocks, embeddings)."""
        caches = {
            "points": self._points,
            "contexts": self._contexts,
            "rows": self._rows,
            "embeddings": self._embeddings,
        }
        return {name: {"size": len(c), "hits": c.hits, "misses": c.misses} for name, c in caches.items()}

    # ----- features -----------------------------------------------------------------------------------------

    def _row(self, block: str) -> tuple[ParsedRow, np.ndarray]:
        parsed = ParsedRow(block)
        return parsed, term_counts(parsed.body, self.hash_dim)

    def _slot(self, name: str, slots: dict[str, int]) -> int:
        # Same order as the env's last_speaker: therapist / group pseudo-speakers first, then named slots.
        kind = speaker_class(name)
        if kind is SpeakerClass.THERAPIST:
            return self.n_slots
        if kind is SpeakerClass.GROUP:
            return self.n_slots + 1
        return slots.get(name, self.n_slots + 2)

    def context_features(self, context: str) -> np.ndarray:
        """The features of the ``context`` text alone (bow, speaker_share, last_row[, embedding]), cached."""
        return self._contexts.get_or_compute(context, self._compute_context)

    def _compute_context(self, context: str) -> np.ndarray:
        header, blocks = split_context(context)
        rows = [self._rows.get_or_compute(b, self._row) for b in blocks]
        counts = np.zeros(self.hash_dim, dtype=np.float32)
        for _, row_counts in rows[:-1]:
            counts += row_counts
        if rows:
            counts += self.last_row_weight * rows[-1][1]
        bow = np.log1p(counts)
        norm = float(np.linalg.norm(bow))
        if norm > 0:
            bow /= norm

        slots = header_slots(header, self.n_slots)
        turns = [p for p, _ in rows if p.is_row]
        share = np.zeros(self.n_speakers, dtype=np.float32)
        recent = turns[-self.turn_window :]
        for parsed in recent:
            share[self._slot(parsed.speaker, slots)] += 1.0
        if recent:
            share /= len(recent)
        last_row = np.zeros(5, dtype=np.float32)
        if turns:
            last = turns[-1]
            kinds = [self._slot(a, slots) for a in last.addressees]
            last_row[0] = any(k == self.n_slots for k in kinds)
            last_row[1] = any(k == self.n_slots + 1 for k in kinds)
            last_row[2] = any(k < self.n_slots for k in kinds)
            last_row[3] = last.words.rstrip().endswith("?")
            run = 0
            for parsed in reversed(turns):
                if speaker_class(parsed.speaker) is not SpeakerClass.CLIENT:
                    break
                run += 1
            last_row[4] = min(1.0, run / self.turn_window)
        parts = [bow, share, last_row]
        if self.embeddings:
            text = turns[-1].words if turns else ""
            parts.append(self._embeddings.get_or_compute(text, lambda t: MiniLM.get().encode([t])[0]))
        features = np.concatenate(parts).astype(np.float32)
        features.flags.writeable = False  # shared by every observation of this context
        return features

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        # Everything is the same at every visit of a decision point: cache the vector per observation, so that a
        # step is a look-up and a copy. The masks and slots follow from the context's header, the scenario and the
        # participants, so those make the key, with the time values (a replay shows each decision point at one
        # time) unless ``time_in_key`` is off (the sim's clock differs at every step: it is written in per step).
        self._last_speaker = last_speaker = int(observation["last_speaker"])  # for ``last_speaker_slot``
        time = observation[self.time_key]
        times = time.tolist() if type(time) is np.ndarray and time.ndim == 1 else np.ravel(time).tolist()
        participants = observation["participants"]
        if type(participants) is not np.ndarray:
            participants = np.asarray(participants)
        point = (
            observation["context"],
            last_speaker,
            int(observation["scenario"]),
            participants.tobytes(),
        )
        key = (*point, *times) if self.time_in_key else point
        # ``LRUCache.get_or_compute`` inlined: this runs at every step.
        points = self._points
        features = points._data.get(key)
        if features is None:
            features = points.get_or_compute(key, self._keyed_point, point, times, observation)
        else:
            points.hits += 1
            points._data.move_to_end(key)
        features = features.copy() if self.time_in_key else self._with_time(features, times)
        if not self._has_extra:
            return features
        extra = self.extra_features(observation)
        return features if extra is None else np.concatenate([features, extra])

    def _keyed_point(self, key: tuple, point: tuple, times: list[float], observation: dict[str, Any]) -> np.ndarray:
        features = self._shared_point(point, observation)
        if not self.time_in_key:
            return features
        features = self._with_time(features, times)
        features.flags.writeable = False
        return features

    def _with_time(self, features: np.ndarray, times: list[float]) -> np.ndarray:
        """A copy of ``features`` with the two time values written in (scaled for ``elapsed``)."""
        features = features.copy()
        first, second = times
        if self._log_time:
            (_, first_cap), (_, second_cap) = self.elapsed_scales
            first, second = _log_scaled(first, first_cap), _log_scaled(second, second_cap)
        start = self._position
        # Clipped into the Box whatever the input (the env already clips; NaN would become 0).
        features[start] = min(1.0, max(0.0, first)) if first == first else 0.0
        features[start + 1] = min(1.0, max(0.0, second)) if second == second else 0.0
        return features

    # ----- hooks for envs whose observation has more than Rescue-v0's fields --------------------------------

    time_in_key = True
    """Cache whole vectors per (point, time values); False: per point, the time written in at every step."""

    elapsed_scales: tuple[tuple[str, float], tuple[str, float]] = (("rows", 1000.0), ("minutes", 120.0))
    """Names and caps of the two ``elapsed`` values (log1p(value) / log1p(cap), clipped to 1)."""

    def extra_sizes(self) -> dict[str, int]:
        """Feature blocks after the standard ones (each in [0, 1]): name -> size."""
        return {}

    def extra_features(self, observation: dict[str, Any]) -> np.ndarray | None:
        """The values of ``extra_sizes``' blocks for ``observation`` (None: there are none)."""
        return None

    def _shared_point(self, key: tuple[str, int, int, bytes], observation: dict[str, Any]) -> np.ndarray:
        shared_key = (self._settings, key)
        features = _SHARED_POINTS.get(shared_key)
        if features is None:
            features = _SHARED_POINTS.put(shared_key, self._compute_point(key, observation))
        return features

    def _compute_point(self, key: tuple[str, int, int, bytes], observation: dict[str, Any]) -> np.ndarray:
        context_text, last_speaker, scenario, _ = key
        context = self.context_features(context_text)
        bow_turns = self.feature_slices["last_speaker"].start
        pieces = [
            context[:bow_turns],
            self._speaker_eye[last_speaker],
            self._scenario_eye[scenario],
            np.zeros(2, dtype=np.float32),  # position, written per step
            np.asarray(observation["participants"], dtype=np.float32).ravel(),
            np.asarray(observation["target_mask"], dtype=np.float32).ravel(),
            np.asarray(observation["strategy_mask"], dtype=np.float32).ravel(),
        ]
        if self.embeddings:
            pieces.append(context[bow_turns:])
        features = np.concatenate(pieces)
        size = features.size  # the standard blocks; ``extra_features`` are appended per step
        features = np.clip(features, self._low[:size], self._high[:size]).astype(np.float32)
        features.flags.writeable = False
        return features


_SHARED_POINTS = SharedCache(maxsize=65536)
"""Read-only point vectors by (wrapper settings, point key), shared by the wrappers of a process."""


def _log_scaled(value: float, cap: float) -> float:
    """``_log_scale``, remembered per value (elapsed rows and minutes recur at every visit of a decision point)."""
    key = (value, cap)
    scaled = _LOG_SCALED.get(key)
    if scaled is None:
        scaled = _log_scale(value, cap)
        if len(_LOG_SCALED) < 65536:
            _LOG_SCALED[key] = scaled
    return scaled


_LOG_SCALED: dict[tuple[float, float], float] = {}


def _log_scale(value: float, cap: float) -> float:
    """log1p(value) / log1p(cap): elapsed rows and minutes in [0, 1] without knowing the conversation's length."""
    if value != value or value <= 0:  # NaN or negative
        return 0.0
    return float(np.log1p(value) / np.log1p(cap))


class FlatAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """``MultiDiscrete([2] + [2] * (max_participants + 1) + [n_strategies])`` -> the ``Dict`` action of
    ``Rescue-v0``: intervene, one bit per target slot (the last = the whole group), strategy."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        source = env.action_space
        if not isinstance(source, spaces.Dict) or set(source.spaces) != {"intervene", "target", "strategy"}:
            raise TypeError(f"FlatAction wraps Rescue-v0's Dict action, got {source}")
        self.n_target = int(np.prod(source["target"].shape))
        self.n_strategies = int(source["strategy"].n)
        self.action_space = spaces.MultiDiscrete([2] + [2] * self.n_target + [self.n_strategies])
        self.nvec = self.action_space.nvec.tolist()
        # Decoded actions by value: at most 2 ** (n_target + 1) * n_strategies of them.
        self._decoded: dict[tuple[np.dtype, bytes], tuple[int, np.ndarray, int]] = {}
        self._shape = self.action_space.shape

    def action(self, action: Any) -> dict[str, Any]:
        # Checked, never cast: int64 of 0.5 is 0 and of a 5 in a binary slot a "yes", both outside the space.
        raw = action if type(action) is np.ndarray else np.asarray(action)
        dtype = raw.dtype
        if dtype.kind not in "iub":
            raise ValueError(f"action must be integers of {self.action_space}, got {action!r}")
        if raw.shape != self._shape:
            raise ValueError(f"expected an action of shape {self.action_space.shape}, got {np.shape(action)}")
        # Keyed by the raw bytes and their type (cheaper than a tuple of Python ints; the shape is checked above).
        key = (dtype, raw.tobytes())
        decoded = self._decoded.get(key)
        if decoded is None:
            decoded = self._decoded[key] = self._decode(tuple(raw.tolist()))
        intervene, target, strategy = decoded
        # A fresh dict each step; the target bits are shared but read-only (the env only reads them).
        return {"intervene": intervene, "target": target, "strategy": strategy}

    def _decode(self, flat: tuple[int, ...]) -> tuple[int, np.ndarray, int]:
        for i, (value, bound) in enumerate(zip(flat, self.nvec)):
            if not 0 <= value < bound:
                raise ValueError(f"action[{i}]={value} is outside {self.action_space} (0 <= value < {bound})")
        target = np.array(flat[1 : 1 + self.n_target], dtype=np.int8)
        target.flags.writeable = False
        return int(flat[0]), target, int(flat[-1])

    def action_masks(self) -> np.ndarray:
        """Valid choices per sub-action, concatenated (the format of sb3-contrib's ``MaskablePPO`` for
        ``MultiDiscrete``): a masked target slot may only be 0; masked strategies are invalid."""
        masks = self.env.get_wrapper_attr("action_masks")()
        return flat_action_masks(masks["target"], masks["strategy"])


def flat_action_masks(target: np.ndarray, strategy: np.ndarray) -> np.ndarray:
    """``FlatAction.action_masks`` from the two masks of the observation (``target_mask``, ``strategy_mask``)."""
    pairs = [[True, bool(valid)] for valid in np.asarray(target).tolist()]
    return np.array([True, True, *(b for pair in pairs for b in pair), *np.asarray(strategy).tolist()], dtype=bool)


def discrete_action_masks(target: np.ndarray, strategy: np.ndarray, last_speaker: int | None) -> np.ndarray:
    """``DiscreteSupportAction.action_masks`` from the observation's ``target_mask`` and ``strategy_mask`` and the
    last speaker's slot (None: not a participant): keep listening, then (last speaker, everyone, each slot) x
    strategy."""
    target, strategy = np.asarray(target).astype(bool), np.asarray(strategy).astype(bool)
    speaker = last_speaker is not None and bool(target[last_speaker])
    targets = np.array([speaker, bool(target[-1]), *target[:-1].tolist()], dtype=bool)
    return np.concatenate([[True], np.outer(targets, strategy).ravel()])


class DiscreteSupportAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """One ``Discrete`` action in place of the support ``Dict`` action (``intervene``, ``target``, ``strategy``) of
    any Rescue env, replay or closed loop, for learners that are quicker on one categorical than on
    ``FlatAction``'s nine (SB3's PPO spends most of a step's time outside the env on those):

    - ``0``: keep listening (one action: the strategy means nothing without an intervention);
    - ``1 + k * n_strategies + s``: intervene with strategy ``s`` (``ALL_STRATEGY_KEYS``) on target ``k``:
      ``k = 0`` the last speaker (the observation's ``last_speaker``, when that is a participant), ``k = 1``
      everyone (the group bit), ``k = 2 + i`` participant slot ``i``.

    So ``1 + (max_participants + 2) * 11`` actions (89 with 6 slots). Subgroups short of everyone are left out:
    one person or everyone is the target of 1,611 of the release's 1,637 supports (98 %); ``FlatAction``
    (``RescueFlat-v0``) reaches any subset. ``action_masks()`` is one bool per action, what sb3-contrib's
    ``MaskablePPO`` takes for a ``Discrete`` space: keep listening always; "last speaker" only when the last
    speaker is a participant; a slot only when present; a strategy only in the scenario's taxonomy. A masked action
    is still accepted (as the ``Dict`` envs accept masked choices): an absent slot is sent as its bit, which the env
    ignores and counts; "last speaker" without one is an intervention on no one, counted here in
    ``info["n_invalid"]``.

    The last speaker is asked of the env below (``last_speaker_slot()``: ``FlatObservation`` reads it back from the
    observation it encoded, the replays from the point they show), so the action means nothing the observation
    does not show.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        source = env.action_space
        if not isinstance(source, spaces.Dict) or set(source.spaces) != {"intervene", "target", "strategy"}:
            raise TypeError(f"DiscreteSupportAction wraps the Rescue envs' Dict action, got {source}")
        try:
            self._last_speaker_of = env.get_wrapper_attr("last_speaker_slot")
        except AttributeError:
            raise TypeError(
                "DiscreteSupportAction needs last_speaker_slot() below it (a FlatObservation, or a Rescue replay)"
            ) from None
        self.n_slots = int(np.prod(source["target"].shape)) - 1
        self.n_strategies = int(source["strategy"].n)
        self.n_targets = self.n_slots + 2  # last speaker, everyone, each slot
        self.action_space = spaces.Discrete(1 + self.n_targets * self.n_strategies)
        self._n = int(self.action_space.n)
        bits = np.eye(self.n_slots + 1, dtype=np.int8)  # row i: slot i; the last row: the group bit
        bits.flags.writeable = False
        self._bits = list(bits)
        self._nobody = np.zeros(self.n_slots + 1, dtype=np.int8)
        self._nobody.flags.writeable = False
        self._no_last_speaker = False
        self._masks: dict[tuple[bytes, bytes, int | None], np.ndarray] = {}

    def action(self, action: Any) -> dict[str, Any]:
        index = integer_value(action)
        if index is None or not 0 <= index < self._n:
            raise ValueError(f"action={action!r} is outside {self.action_space}: give an integer in [0, {self._n})")
        self._no_last_speaker = False
        if index == 0:
            # Strategy 0 (track) is in both taxonomies, so keeping listening is never counted as a masked choice.
            return {"intervene": 0, "target": self._nobody, "strategy": 0}
        k, strategy = divmod(index - 1, self.n_strategies)
        if k == 0:
            slot = self._last_speaker_of()
            if slot is None:
                self._no_last_speaker = True
                target = self._nobody
            else:
                target = self._bits[slot]
        else:
            target = self._bits[self.n_slots if k == 1 else k - 2]
        return {"intervene": 1, "target": target, "strategy": strategy}

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(self.action(action))
        if self._no_last_speaker:
            # The env sees an intervention on no one, which it does not count; this wrapper's masked choice was it.
            info["n_invalid"] = info.get("n_invalid", 0) + 1
            if "invalid" in info:
                info["invalid"] = [*info["invalid"], "target: no last speaker to support"]
        return observation, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """One bool per action (keep listening, then target-major x strategy), for ``MaskablePPO``."""
        masks = self.env.get_wrapper_attr("action_masks")()
        target, strategy = masks["target"], masks["strategy"]
        slot = self._last_speaker_of()
        key = (target.tobytes(), strategy.tobytes(), slot)
        mask = self._masks.get(key)
        if mask is None:
            mask = discrete_action_masks(target, strategy, slot)
            mask.flags.writeable = False
            self._masks[key] = mask  # a few patterns per scenario x participants x last speaker
        return mask.copy()

    def describe(self, index: int) -> str:
        """``index`` in words: "keep listening", "last speaker, track", "everyone, join", "slot 1, reframe"."""
        if index == 0:
            return "keep listening"
        k, strategy = divmod(index - 1, self.n_strategies)
        whom = "last speaker" if k == 0 else "everyone" if k == 1 else f"slot {k - 2}"
        return f"{whom}, {ALL_STRATEGY_KEYS[strategy]}"


class SimFlatObservation(FlatObservation):
    """``FlatObservation`` of ``RescueSim-v0``: the opening's context features, ``elapsed`` as (steps, therapist
    turns), then the perceived ``distress`` (``max_participants``) and ``stance`` (``max_participants``
    squared, row-major: i's view of j at i * max_participants + j), both already in [0, 1]."""

    elapsed_scales = (("steps", 200.0), ("interventions", 200.0))
    time_in_key = False  # the clock and the perceived state change at every step of the sim

    def extra_sizes(self) -> dict[str, int]:
        return {"distress": self.n_slots, "stance": self.n_slots * self.n_slots}

    def extra_features(self, observation: dict[str, Any]) -> np.ndarray:
        distress = np.asarray(observation["distress"], dtype=np.float32).ravel()
        stance = np.asarray(observation["stance"], dtype=np.float32).ravel()
        return np.clip(np.concatenate([distress, stance]), 0.0, 1.0)


ACTIONS: dict[str, type[gym.ActionWrapper]] = {"multidiscrete": FlatAction, "discrete": DiscreteSupportAction}
"""The flat ids' ``action`` argument: ``FlatAction`` (``RescueFlat-*``) or ``DiscreteSupportAction``
(``RescueFlatDiscrete-*``, ``RescueSimFlatDiscrete-*``)."""


def _action_wrapper(action: str) -> type[gym.ActionWrapper]:
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    return ACTIONS[action]


def make_flat_env(
    hash_dim: int = 256,
    embeddings: bool = False,
    last_row_weight: float = 2.0,
    turn_window: int = 8,
    cache_size: int = 16384,
    version: int = 0,
    action: str = "multidiscrete",
    **env_kwargs: Any,
) -> gym.Env:
    """``RescueFlat-v0`` (``version=0``: ``RescueEnv(**env_kwargs)``) or ``RescueFlat-v1`` (``version=1``:
    ``RescueEnvV1``, ``elapsed`` in place of ``position``, log-scaled) with ``FlatObservation`` and ``FlatAction``
    (``action="discrete"``: ``DiscreteSupportAction``, the ``RescueFlatDiscrete`` ids); ``action_masks()`` (through
    ``env.get_wrapper_attr`` once ``gym.make`` has wrapped it) works with sb3-contrib's ``MaskablePPO``."""
    from rescue_env.envs.replay import RescueEnv
    from rescue_env.envs.replay_v1 import RescueEnvV1

    classes = {0: RescueEnv, 1: RescueEnvV1}
    if version not in classes:
        raise ValueError(f"version must be 0 or 1, got {version!r}")
    wrapper = _action_wrapper(action)
    features = dict(hash_dim=hash_dim, last_row_weight=last_row_weight, turn_window=turn_window, cache_size=cache_size)
    return wrapper(FlatObservation(classes[version](**env_kwargs), embeddings=embeddings, **features))


def make_sim_flat_env(
    hash_dim: int = 256,
    embeddings: bool = False,
    last_row_weight: float = 2.0,
    turn_window: int = 8,
    cache_size: int = 16384,
    action: str = "multidiscrete",
    version: int = 0,
    **env_kwargs: Any,
) -> gym.Env:
    """``RescueSimFlat-v0`` (``version=0``: ``RescueSimEnv(**env_kwargs)``) or ``RescueSimFlat-v1`` (``version=1``:
    ``RescueSimEnvV1``) with ``SimFlatObservation`` and ``FlatAction`` (``action="discrete"``:
    ``DiscreteSupportAction``, ``RescueSimFlatDiscrete-v0/-v1``); ``action_masks()`` works with sb3-contrib's
    ``MaskablePPO``. ``split`` (in ``env_kwargs``) is the sim's ``starts`` under the name every env id takes."""
    from rescue_env.envs.sim import RescueSimEnv
    from rescue_env.envs.sim_v1 import RescueSimEnvV1

    classes = {0: RescueSimEnv, 1: RescueSimEnvV1}
    if version not in classes:
        raise ValueError(f"version must be 0 or 1, got {version!r}")
    wrapper = _action_wrapper(action)
    features = dict(hash_dim=hash_dim, last_row_weight=last_row_weight, turn_window=turn_window, cache_size=cache_size)
    return wrapper(SimFlatObservation(classes[version](**env_kwargs), embeddings=embeddings, **features))


__all__ = [
    "ACTIONS",
    "EMBEDDING_DIM",
    "DiscreteSupportAction",
    "FlatAction",
    "FlatObservation",
    "LRUCache",
    "SimFlatObservation",
    "check_embeddings_available",
    "discrete_action_masks",
    "flat_action_masks",
    "make_flat_env",
    "make_sim_flat_env",
    "stable_bucket",
    "term_counts",
]
