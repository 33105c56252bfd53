r"""``RescueSim-v1``'s step on a batch of sessions: F1, the behaviour prior :math:`\pi_b` and the closed loop's
speaker and refreshes, on arrays of N sessions padded to m participant slots (the native vector env,
``rescue_env.envs.sim_v1_vector``).

Both models are linear in their features (App. B's F, Eq. 12-13, and F1: ridge regressions; :math:`\pi_b`'s three
factors: logistic regressions), so a batched step needs no feature matrix: each head is its bias plus one
coefficient times each varying feature, every constant feature of an episode (scenario, relation pattern) folded
into the bias, as ``kernel.EpisodeKernel`` does for one session of ``RescueSim-v0``. Every term is a few array
operations over all sessions at once.

The single-session code stays the reference: ``OutcomeModelV1.raw`` (F1), ``BehaviourModel.log_prob``
(:math:`\pi_b`), ``simulation.settle`` (speaker, refreshes, row clock) and ``state.objective`` (Eq. 14). What is
computed here equals it to rounding (the same terms summed in another order: about 1e-16 apart), and exactly
where no sum is involved (the next speaker, the refreshes, the perceived readings). ``tests/test_sim_v1_vector.py``
checks both against the reference on random states and actions.

Layout: the session is the **last** axis, so that a sum or a max over participants adds a few contiguous rows
(numpy reduces a short trailing axis slowly): per participant ``(m, N)``, per session ``(N,)``. A session's
participants are slots ``0 .. n-1`` of m; absent slots hold 0 (values) and -1 (rows). F moves only the viewpoints
a session has (it never creates one), so G is kept as K **pair slots** ``(K, N)``: slot k is the viewpoint of
participant ``source[k]`` about ``target[k]``, K the most viewpoints of an episode (one or two on the data, of
n x n cells); unused slots are masked. "No last speaker" is -1; a strategy index is into ``ALL_STRATEGY_KEYS``, -1
for none (a choice outside the scenario's taxonomy).

Speed (issue 27: the native env at N = 1024 against 0.1x ``CartPoleVectorEnv``): a step is a few hundred array
operations of 1-5 us each, so the code counts them. Per-episode constants are tabled once (``Fixed.offered``:
pi_b's choices as a 0/1 mask) and copied at a reset by flat indices (``Placement``); the state is written in place
(its fields stay views of one array per dtype); the stacked features (``Point.state``) make each linear head one
product; short first axes are walked by row operations (``others_max``, ``next_speakers``).
``rescue_env.dynamics.batch_compiled`` is the same step as one loop per session, compiled by numba when it is
installed (optional; the functions here stay the reference, tested against it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import Protocol

import numpy as np

from rescue_env.dynamics import behaviour as pib
from rescue_env.dynamics.behaviour import BehaviourModel, LogitHead
from rescue_env.dynamics.outcome import DISTRESS_FEATURES, KINDS, PAIR_FEATURES, PATTERNS, _age_feature
from rescue_env.dynamics.outcome_v1 import BLOCKS, OutcomeModelV1, block_names
from rescue_env.dynamics.simulation import EpisodeDynamics, SimState
from rescue_env.dynamics.state import StateConfig, age_weight
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

# ----- the state of N sessions ---------------------------------------------------------------------------------


class Placement:
    """Where a reset copies columns ``index`` of (R, S) tables (one column per episode) into columns ``rows`` of
    (R, N) arrays, as flat indices, for every R up to ``most``: found once per reset and shared by every table.
    (numpy's ``a[:, rows] = b[:, index]`` walks the strided columns one element at a time, several times slower
    than a scatter by flat indices.)"""

    def __init__(self, rows: np.ndarray, index: np.ndarray, sessions: int, episodes: int, most: int) -> None:
        r = np.arange(most)[:, None]
        self.to, self.of = r * sessions + rows, r * episodes + index

    def copy(self, out: np.ndarray, table: np.ndarray) -> None:
        """``out[:, rows] = table[:, index]`` (both C-contiguous and 2-D)."""
        count = out.shape[0]
        out.ravel()[self.to[:count]] = table.ravel()[self.of[:count]]


class ColumnCopier(Protocol):
    """What ``Arrays.assign`` copies a reset's columns with: ``Placement`` or a compiled equivalent
    (``batch_compiled.ColumnCopy``)."""

    def copy(self, out: np.ndarray, table: np.ndarray) -> None: ...


@dataclass
class Arrays:
    """A dataclass of arrays whose last axis is the session (or the episode, for tables). ``packed`` puts the
    fields of one dtype in one array (the fields are views of it), so that ``assign`` is one copy per dtype: a
    reset sets every constant of a session at once."""

    def assign(self, rows: np.ndarray, source: Arrays, index: np.ndarray, place: ColumnCopier | None = None) -> None:
        """``self.x[..., rows] = source.x[..., index]`` for every field (sessions set to the starts of episodes);
        ``place``: the ``Placement`` (or ``ColumnCopier``) of (rows, index), for packed arrays of at most its rows."""
        mine, theirs = self.__dict__.get("_packs"), source.__dict__.get("_packs")
        if mine is not None and theirs is not None and mine.keys() == theirs.keys():
            for dtype, pack in mine.items():
                if place is not None:
                    place.copy(pack, theirs[dtype])
                else:
                    pack[:, rows] = theirs[dtype][:, index]
            return
        for f in fields(self):
            getattr(self, f.name)[..., rows] = getattr(source, f.name)[..., index]

    def pack_rows(self) -> int:
        """The most rows of one pack (``Placement``'s ``most``); 0 unpacked."""
        return max((pack.shape[0] for pack in self.__dict__.get("_packs", {}).values()), default=0)

    def packed(self, sessions: int | None = None):
        """A copy (``sessions``: zeros for that many sessions) whose fields are views of one array per dtype."""
        names = [f.name for f in fields(self)]
        like = {name: getattr(self, name) for name in names}
        count = sessions if sessions is not None else next(iter(like.values())).shape[-1]
        packs: dict[np.dtype, np.ndarray] = {}
        rows: dict[np.dtype, int] = {}
        for value in like.values():
            rows[value.dtype] = rows.get(value.dtype, 0) + int(np.prod(value.shape[:-1], dtype=np.int64))
        for dtype, total in rows.items():
            packs[dtype] = np.zeros((total, count), dtype=dtype)
        out, start = {}, dict.fromkeys(rows, 0)
        for name, value in like.items():
            size = int(np.prod(value.shape[:-1], dtype=np.int64))
            view = packs[value.dtype][start[value.dtype] : start[value.dtype] + size].reshape(*value.shape[:-1], count)
            if sessions is None:
                view[...] = value
            out[name] = view
            start[value.dtype] += size
        result = type(self)(**out)
        result.__dict__["_packs"] = packs
        return result

    @classmethod
    def zeros_like(cls, table: Arrays, sessions: int) -> Arrays:
        """Arrays shaped as ``table``'s with ``sessions`` on the last axis (zeros), packed if ``table`` is."""
        if "_packs" in table.__dict__:
            return table.packed(sessions)
        out = {}
        for f in fields(table):
            like = getattr(table, f.name)
            out[f.name] = np.zeros((*like.shape[:-1], sessions), dtype=like.dtype)
        return cls(**out)


@dataclass
class Sessions(Arrays):
    """What moves: ``SimState``'s latest values, the rows they were set at (-1 = never), the row clock and the
    last client speaker (-1 = none)."""

    distress_raw: np.ndarray  # (m, N) float64
    emotion_row: np.ndarray  # (m, N) int64
    g_raw: np.ndarray  # (K, N) float64, per pair slot
    viewpoint_row: np.ndarray  # (K, N) int64
    row: np.ndarray  # (N,) int64
    last_speaker: np.ndarray  # (N,) int64


@dataclass
class Fixed(Arrays):
    """What an episode keeps fixed (``SimEpisode``, ``EpisodeDynamics``), per session."""

    n: np.ndarray  # (N,) int64 participants
    present: np.ndarray  # (m, N) bool
    pair: np.ndarray  # (K, N) bool: the slot holds one of the session's viewpoints
    source: np.ndarray  # (K, N) int64: whose viewpoint (0 in unused slots)
    target: np.ndarray  # (K, N) int64: about whom
    reverse: np.ndarray  # (K, N) int64: the slot of target's viewpoint about source, K for none
    family: np.ndarray  # (N,) float64
    pattern: np.ndarray  # (N,) int64 index into PATTERNS, -1 = none
    weights: np.ndarray  # (m, N) the opening's speaking weights (0 in absent slots)
    p_emotion: np.ndarray  # (m, N) P(refreshed) per participant (0 in absent slots)
    p_pair: np.ndarray  # (K, N) P(refreshed) per pair slot
    valid: np.ndarray  # (len(ALL_STRATEGY_KEYS), N) bool: the scenario's strategies
    per_person: np.ndarray  # (N,) 1 / n
    per_other: np.ndarray  # (N,) 1 / (n - 1), 0 alone
    per_pair: np.ndarray  # (N,) 1 / (n (n - 1)), 0 alone
    valid_count: np.ndarray  # (N,) float64 how many strategies are valid (at least one)
    speaker_cdf: np.ndarray  # (m, N) the speaking weights' cumulative shares (``next_speakers`` without a reply)
    # flat indices of this session's column (``reindex``): source and target into (m, N), reverse into (K, N) with
    # one appended 0 for none
    source_at: np.ndarray  # (K, N)
    target_at: np.ndarray  # (K, N)
    reverse_at: np.ndarray  # (K, N)
    # pi_b's choices (``BehaviourBatch``): what the episode offers, as a 0/1 mask over the kinds (``behaviour.KINDS``:
    # "last" 1 here, the last speaker decides; everyone; another participant, n > 1; a subset, n > 2) then the
    # strategies (``valid``); how many of those kinds; ``n * 2 * len(KINDS)``, where n's rows of ``kind_sizes`` start
    offered: np.ndarray  # (len(KINDS) + len(ALL_STRATEGY_KEYS), N) float64
    kinds_offered: np.ndarray  # (N,) float64
    kind_base: np.ndarray  # (N,) int64

    def reindex(self) -> None:
        """The flat indices of every column (after ``assign``: a table's are its episodes'). All of them at once:
        a few whole-array operations cost less than the same on the columns reset (fancy indexing both ways)."""
        K, N = self.pair.shape
        columns = np.arange(N)
        np.add(self.source * N, columns, out=self.source_at)
        np.add(self.target * N, columns, out=self.target_at)
        self.reverse_at[...] = np.where(self.reverse < K, self.reverse * N + columns, K * N)


def pair_slots(viewpoint_row: np.ndarray) -> list[tuple[int, int]]:
    """The (source, target) of a session's viewpoints (``viewpoint_row >= 0``), row-major: its pair slots."""
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(viewpoint_row >= 0))]


def stack(
    states: Sequence[SimState],
    dynamics: Sequence[EpisodeDynamics] | None = None,
    valid: Sequence[Iterable[int]] | None = None,
    slots: int | None = None,
) -> tuple[Sessions, Fixed]:
    """N ``SimState``s (one column each) in this module's layout, with their episodes' refresh probabilities
    (``dynamics``; 0 without) and valid strategies (``valid``, indices; all without); ``slots`` = m (default:
    the most participants)."""
    N = len(states)
    m = slots or max(state.n for state in states)
    pairs = [pair_slots(state.viewpoint_row) for state in states]
    K = max(1, max(len(p) for p in pairs))
    s = Sessions(
        np.zeros((m, N)), np.full((m, N), -1), np.zeros((K, N)), np.full((K, N), -1),
        np.zeros(N, dtype=np.int64), np.full(N, -1),
    )  # fmt: skip
    f = Fixed(
        np.zeros(N, dtype=np.int64), np.zeros((m, N), dtype=bool), np.zeros((K, N), dtype=bool),
        np.zeros((K, N), dtype=np.int64), np.zeros((K, N), dtype=np.int64), np.full((K, N), K),
        np.zeros(N), np.full(N, -1), np.zeros((m, N)), np.zeros((m, N)), np.zeros((K, N)),
        np.ones((len(ALL_STRATEGY_KEYS), N), dtype=bool), np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(N),
        np.ones((m, N)),
        np.zeros((K, N), dtype=np.int64), np.zeros((K, N), dtype=np.int64), np.zeros((K, N), dtype=np.int64),
        np.zeros((len(pib.KINDS) + len(ALL_STRATEGY_KEYS), N)), np.zeros(N), np.zeros(N, dtype=np.int64),
    )  # fmt: skip
    for k, (state, slots_k) in enumerate(zip(states, pairs)):
        n = state.n
        s.distress_raw[:n, k], s.emotion_row[:n, k] = state.distress_raw, state.emotion_row
        s.row[k] = state.row
        s.last_speaker[k] = -1 if state.last_speaker is None else state.last_speaker
        f.n[k] = n
        f.present[:n, k] = True
        for slot, (i, j) in enumerate(slots_k):
            s.g_raw[slot, k], s.viewpoint_row[slot, k] = state.g_raw[i, j], state.viewpoint_row[i, j]
            f.pair[slot, k], f.source[slot, k], f.target[slot, k] = True, i, j
            f.reverse[slot, k] = slots_k.index((j, i)) if (j, i) in slots_k else K
            if dynamics is not None:
                f.p_pair[slot, k] = dynamics[k].p_pair[i, j]
        f.family[k] = float(state.family)
        f.pattern[k] = PATTERNS.index(state.pattern) if state.pattern in PATTERNS else -1
        f.weights[:n, k] = state.weights
        if dynamics is not None:
            f.p_emotion[:n, k] = dynamics[k].p_emotion
        if valid is not None:
            f.valid[:, k] = False
            f.valid[sorted(valid[k]), k] = True
        f.per_person[k] = 1.0 / n
        f.per_other[k] = 1.0 / (n - 1) if n > 1 else 0.0
        f.per_pair[k] = 1.0 / (n * (n - 1)) if n > 1 else 0.0
    f.valid_count[:] = np.maximum(f.valid.sum(axis=0), 1)
    kinds = np.stack([np.ones(N, dtype=bool), f.n >= 1, f.n > 1, f.n > 2])  # pib.KINDS: last, everyone, other, subset
    f.offered[:] = np.vstack([kinds, f.valid])
    f.kinds_offered[:] = kinds[1:].sum(axis=0)
    f.kind_base[:] = f.n * 2 * len(pib.KINDS)
    # simulation._cdf's sums and divisions (numpy's cumsum adds in the same order; absent slots add 0)
    f.speaker_cdf[:] = np.cumsum(f.weights, axis=0) / f.weights.sum(axis=0)
    f.reindex()
    return s, f


@dataclass
class Supports:
    """A batch of decoded actions as F1 and pi_b read them (``outcome.support_action``): ``speaks`` = an
    intervention with recipients; otherwise the step is F's "keep listening"."""

    speaks: np.ndarray  # (N,) bool
    supported: np.ndarray  # (m, N) bool, only where speaks
    kind: np.ndarray  # (N,) int64 index into outcome.KINDS (alone, pair, subgroup, group), -1 where not speaks
    strategy: np.ndarray  # (N,) int64 index into ALL_STRATEGY_KEYS, -1 = none (outside the taxonomy)


@cache
def _kinds(most: int) -> np.ndarray:
    """``outcome.recipient_kind`` by (participants, recipients): everyone = group (3), one = alone (0), two = pair
    (1), else subgroup (2); none: -1."""
    table = np.full((most + 1, most + 1), -1, dtype=np.int64)
    for n in range(1, most + 1):
        for count in range(1, n + 1):
            table[n, count] = 3 if count >= n else 0 if count == 1 else 1 if count == 2 else 2
    table.flags.writeable = False
    return table


def supports(intervene: np.ndarray, recipients: np.ndarray, strategy: np.ndarray, n: np.ndarray) -> Supports:
    """``outcome.support_action`` of N decoded actions (``recipients`` (m, N) bool, within the participants)."""
    count = recipients.sum(axis=0)
    speaks = intervene & (count > 0)
    kinds = _kinds(recipients.shape[0])
    kind = kinds.ravel()[n * kinds.shape[1] + count * speaks]
    return Supports(speaks, recipients & speaks, kind, strategy)


@dataclass
class Recent:
    """F1's ``History`` of each session: the share of the last ``HISTORY`` decisions at which the therapist spoke,
    and per participant the share at which they were supported."""

    speaks: np.ndarray  # (N,)
    supported: np.ndarray  # (m, N)


# ----- F's state features of a point (outcome.point_state) ------------------------------------------------------


@dataclass
class Point:
    """``outcome.point_state``'s varying features, per participant (m, N) and per pair slot (K, N)."""

    d: np.ndarray  # aged distress
    annotated: np.ndarray
    age: np.ndarray
    others_max: np.ndarray
    others_mean: np.ndarray
    out_negative: np.ndarray
    in_negative: np.ndarray
    last: np.ndarray  # 1 where the participant spoke last
    g: np.ndarray  # aged G, per pair slot
    pair_annotated: np.ndarray
    pair_age: np.ndarray
    g_reverse: np.ndarray  # the aged value of the reverse viewpoint (0 without one)
    d_source: np.ndarray  # aged distress of the viewpoint's source and target
    d_target: np.ndarray
    # the same, stacked (the fields above are views of these): F1's distress head reads ``state`` with one product,
    # F's viewpoint head ``pair_state``
    state: np.ndarray  # (len(STATE_FEATURES), m, N)
    pair_state: np.ndarray  # (len(PAIR_STATE_FEATURES), K, N)


STATE_FEATURES = ("d", "annotated", "age", "d_others_max", "d_others_mean", "out_negative", "in_negative",
                  "last_speaker")  # fmt: skip
"""F's state features of a participant (``DISTRESS_FEATURES``' names), in ``Point.state``'s order."""
PAIR_STATE_FEATURES = ("g", "annotated", "age", "g_reverse", "d_source", "d_target")
"""F's state features of a viewpoint (``PAIR_FEATURES``' names), in ``Point.pair_state``'s order."""


class Ages:
    """An annotation's weight (``state.age_weight``) and F's age feature (``outcome._age_feature``) by its age in
    rows, tabulated once (the same values: each computed by those functions), the last entry for "never set"
    (weight 0, feature 1). Ages are whole rows, at most ``oldest``."""

    def __init__(self, config: StateConfig, oldest: int) -> None:
        age = np.append(np.arange(oldest + 1, dtype=np.float64), np.inf)
        self.table = np.stack([age_weight(age, config.decay_after, config.half_life), np.isfinite(age) * 1.0,
                               _age_feature(age)])  # fmt: skip
        self.never = oldest + 1

    def aged(self, raw: np.ndarray, set_row: np.ndarray, row: np.ndarray, out: np.ndarray) -> None:
        """(aged value, annotated, age feature) into ``out`` (3, ...), as ``Snapshot.aged`` then ``point_state``."""
        np.take(self.table, np.where(set_row < 0, self.never, row - set_row), axis=1, out=out)
        out[0] *= raw


def point(s: Sessions, f: Fixed, ages: Ages) -> Point:
    """F's inputs, as ``SimState.point`` computes them: values aged by the rows since they were set, the others'
    distress (the largest and the mean), i's outgoing and incoming viewpoints' negativity (sums / (n - 1))."""
    m, N = s.distress_raw.shape
    x = np.empty((len(STATE_FEATURES), m, N))
    y = np.empty((len(PAIR_STATE_FEATURES), s.g_raw.shape[0], N))
    ages.aged(s.distress_raw, s.emotion_row, s.row, out=x[:3])
    ages.aged(s.g_raw, s.viewpoint_row, s.row, out=y[:3])  # unused slots: never set, so 0
    d, g, scale = x[0], y[0], f.per_other
    others_max(d, out=x[3])
    np.multiply(d.sum(axis=0) - d, scale, out=x[4])
    np.multiply(per_participant(g, f.source_at, m), scale, out=x[5])  # sums over the viewpoints i has / of i
    np.multiply(per_participant(g, f.target_at, m), scale, out=x[6])
    np.equal(np.arange(m)[:, None], s.last_speaker, out=x[7], casting="unsafe")
    y[3] = np.append(g, 0.0)[f.reverse_at]
    y[4], y[5] = d.ravel()[f.source_at], d.ravel()[f.target_at]
    return Point(*x, *y, state=x, pair_state=y)


def others_max(d: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = the largest ``d[j]``, j != i, over the (m, N) slots: the larger of the running maxima before i
    and after i (row operations over the short first axis; a max is exact, so it is the same value). Values are
    >= 0 and absent slots hold 0, so absent participants change nothing, and alone it is 0."""
    m = d.shape[0]
    after = np.zeros_like(d)  # after[i] = max(d[i + 1:]), 0 for the last
    for i in range(m - 2, -1, -1):
        np.maximum(after[i + 1], d[i + 1], out=after[i])
    out[0] = after[0]
    before = d[0]
    for i in range(1, m):
        np.maximum(before, after[i], out=out[i])
        if i < m - 1:
            before = np.maximum(before, d[i])


def per_participant(values: np.ndarray, flat_slot: np.ndarray, m: int) -> np.ndarray:
    """(m, N): the sum of the pair slots' ``values`` (K, N; 0 in unused slots) by participant (``flat_slot``: the
    participant's flat index slot x N + session)."""
    N = values.shape[1]
    return np.bincount(flat_slot.ravel(), weights=values.ravel(), minlength=m * N).reshape(m, N)


# ----- F1 ------------------------------------------------------------------------------------------------------

FEATURES = tuple(DISTRESS_FEATURES + block_names(list(BLOCKS)))
"""Every distress feature F1 can have: F's, then each candidate block's columns."""
HANDLED_BLOCKS = (
    "strategy_x_distress",
    "kind_x_family",
    "left_out_x_distress",
    "saturation",
    "strategy_x_last_speaker",
    "speaks_x_distress",
)
"""The blocks whose terms ``F1Batch.effect`` computes (each folded); a new block in ``outcome_v1.BLOCKS`` needs
its term there too (tested)."""
_GROUPS = {
    "kind": tuple(f"recipient_{k}" for k in KINDS),
    "strategy": tuple(f"strategy={s}" for s in ALL_STRATEGY_KEYS),
    "pattern": tuple(f"pattern={p}" for p in PATTERNS),
    "strategy_x_d": BLOCKS["strategy_x_distress"][0],
    "kind_x_family": BLOCKS["kind_x_family"][0],
    "strategy_x_last": BLOCKS["strategy_x_last_speaker"][0],
}
"""One-hot feature groups: a session reads the coefficient of the member it has (``F1Batch.pick``)."""

Heads = int | np.ndarray
"""Which distress head each session reads: one for all (0 = the fit on every training group, k + 1 = ensemble
member k), or one per session ((N,) int)."""


class F1Batch:
    """``OutcomeModelV1.raw`` for N sessions, folded: the distress head (or each session's ensemble member) and F's
    viewpoint head; ``effect_spread`` likewise."""

    def __init__(self, model: OutcomeModelV1) -> None:
        unknown = sorted(set(model.blocks) - set(HANDLED_BLOCKS))
        if unknown:
            raise NotImplementedError(f"F1Batch has no folded term for block(s) {', '.join(unknown)}")
        heads = [model.distress, *model.members]
        col = {name: k for k, name in enumerate(FEATURES)}
        self.table = np.zeros((len(heads), len(FEATURES)))
        for h, head in enumerate(heads):
            missing = sorted(set(head.features) - set(col))
            if missing:
                raise ValueError(f"F1 head with unknown feature(s) {', '.join(missing)}")
            self.table[h, [col[name] for name in head.features]] = head.coef
        self.intercept = np.array([head.intercept for head in heads])
        self.sigma = np.array([head.sigma for head in heads])
        self.members = len(model.members)
        self._col = col
        # A group's coefficients per head with a trailing 0: index -1 (none) picks 0.
        self._groups = {
            name: np.hstack([self.table[:, [col[f] for f in names]], np.zeros((len(heads), 1))])
            for name, names in _GROUPS.items()
        }
        self._used = {name for name in FEATURES if np.any(self.table[:, col[name]] != 0.0)}
        vp = model.base.viewpoint
        self.e = dict(zip(vp.features, vp.coef))
        missing = sorted(set(PAIR_FEATURES) - set(self.e))
        if missing:
            raise ValueError(f"F's viewpoint head lacks feature(s) {', '.join(missing)}")
        self.e_intercept, self.sigma_g = vp.intercept, vp.sigma
        tail = lambda names: np.array([self.e[n] for n in names] + [0.0])  # noqa: E731
        self.e_pattern = tail([f"pattern={p}" for p in PATTERNS])
        self.e_source_kind = tail([f"source_{k}" for k in KINDS])
        self.e_target_kind = tail([f"target_{k}" for k in KINDS])
        self.e_strategy = tail([f"source_strategy={s}" for s in ALL_STRATEGY_KEYS])
        # the state terms as products (``Point.state``, ``Point.pair_state``): per head, then F's viewpoint head
        self._state_coef = self.table[:, [col[name] for name in STATE_FEATURES]]
        self._pair_coef = np.array([self.e[name] for name in PAIR_STATE_FEATURES])
        # which optional terms some head has (the others are skipped), asked once
        self._has = {group: self.uses(*names) for group, names in _GROUPS.items()}
        self._has.update((name, self.uses(name)) for name in FEATURES)

    # --- coefficients per session ---

    def c(self, name: str, heads: Heads) -> float | np.ndarray:
        """The coefficient of feature ``name``: a float (one head for all) or (N,) (a head per session)."""
        column = self.table[:, self._col[name]]
        return float(column[heads]) if isinstance(heads, int) else column[heads]

    def pick(self, group: str, which: np.ndarray, heads: Heads) -> np.ndarray:
        """(N,): the coefficient of member ``which`` (-1 = none: 0) of one-hot ``group``, per session."""
        table = self._groups[group]
        return table[heads][which] if isinstance(heads, int) else table[heads, which]

    def uses(self, *names: str) -> bool:
        """Whether any head has a nonzero coefficient on one of ``names`` (terms without one are skipped)."""
        return any(name in self._used for name in names)

    # --- the heads ---

    def distress(
        self, p: Point, f: Fixed, a: Supports, h: Recent, heads: Heads, effect_scale: float = 1.0
    ) -> np.ndarray:
        """(m, N): the next distress, unclipped: F1(x, a0) + scale (F1(x, a) - F1(x, a0)), a0 = keeping listening
        (``OutcomeModelV1.raw``)."""
        c = lambda name: self.c(name, heads)  # noqa: E731
        bias = self.intercept[heads] + c("family") * f.family + self.pick("pattern", f.pattern, heads)
        if self._has["recent_speaks"]:  # the saturation block's one column that does not depend on the action
            bias = bias + c("recent_speaks") * h.speaks
        # F's state terms (``STATE_FEATURES``): one product for one head, else each session's coefficients
        x = p.state
        if isinstance(heads, int):
            state = (self._state_coef[heads] @ x.reshape(x.shape[0], -1)).reshape(x.shape[1:])
        else:
            state = (self._state_coef[heads].T[:, None, :] * x).sum(axis=0)
        state += bias
        action = self.effect(p, f, a, h, heads)
        if effect_scale != 1.0:
            action *= effect_scale
        state += action
        return state

    def effect(self, p: Point, f: Fixed, a: Supports, h: Recent, heads: Heads) -> np.ndarray:
        """(m, N): F1(x, a) - F1(x, a0), the action's terms of the distress head: F's main effects (speaking,
        the recipient kind, the strategy, recipient x d, someone else supported), then the kept blocks."""
        c = lambda name: self.c(name, heads)  # noqa: E731
        has = self._has
        speaks = a.speaks * 1.0
        supported = a.supported * 1.0
        other = speaks - supported  # someone else is supported (``other_supported``)
        own = self.pick("kind", a.kind, heads) + self.pick("strategy", a.strategy, heads) + c("recipient_x_d") * p.d
        if has["strategy_x_d"]:
            own += self.pick("strategy_x_d", a.strategy, heads) * p.d
        if has["kind_x_family"]:
            own += self.pick("kind_x_family", a.kind, heads) * f.family
        if has["strategy_x_last"]:
            own += self.pick("strategy_x_last", a.strategy, heads) * p.last
        if has["supported_x_recent_supported"]:
            own += c("supported_x_recent_supported") * h.supported
        speaking = c("therapist_speaks")
        if has["speaks_x_recent_speaks"]:
            speaking = speaking + c("speaks_x_recent_speaks") * h.speaks
        out = supported * own
        out += speaks * speaking
        out += other * c("other_supported")
        if has["other_supported_x_d"]:
            out += other * c("other_supported_x_d") * p.d
        if has["speaks_x_d"]:
            out += speaks * c("speaks_x_d") * p.d
        return out

    def viewpoint(self, p: Point, f: Fixed, a: Supports, effect_scale: float = 1.0) -> np.ndarray:
        """(K, N): the next negativity of each pair slot's viewpoint, unclipped (F's viewpoint head)."""
        y = p.pair_state
        state = (self._pair_coef @ y.reshape(y.shape[0], -1)).reshape(y.shape[1:])  # ``PAIR_STATE_FEATURES``
        state += self.e_intercept + self.e["family"] * f.family + self.e_pattern[f.pattern]
        source = self.e_source_kind[a.kind] + self.e_strategy[np.where(a.kind >= 0, a.strategy, -1)]
        supported = a.supported.ravel()
        action = supported[f.source_at] * source
        action += supported[f.target_at] * self.e_target_kind[a.kind]
        action += a.speaks * self.e["therapist_speaks"]
        if effect_scale != 1.0:
            action *= effect_scale
        state += action
        return state

    def spread(self, p: Point, f: Fixed, a: Supports, h: Recent) -> np.ndarray:
        """(N,): the largest over participants of the ensemble's standard deviation of the action's effect on next
        distress (``OutcomeModelV1.effect_spread`` then ``.max(initial=0)``); 0 without members."""
        if not self.members:
            return np.zeros(a.speaks.size)
        effects = np.stack([self.effect(p, f, a, h, k + 1) for k in range(self.members)])
        return np.where(f.present, effects.std(axis=0), 0.0).max(axis=0, initial=0.0)


# ----- pi_b --------------------------------------------------------------------------------------------------------

EXP_SAFE = 700.0
"""The largest logit (in absolute value) that ``np.exp`` takes without overflow, nor underflow to 0."""


class LogitBatch:
    """``LogitHead.probabilities`` of N feature columns, as (len(vocabulary), N) (0 for classes the head lacks).

    The head is written over the whole vocabulary: one row of coefficients per class, in the vocabulary's order.
    scikit-learn's binary form (one logit for ``classes[1]``) is the softmax of (0, logit); a one-class head is the
    softmax of one row of zeros; a class the head lacks has the logit -inf (weight 0). So every head is one softmax
    and the three heads of :math:`\\pi_b` are one product (``BehaviourBatch``)."""

    def __init__(self, head: LogitHead, vocabulary: tuple[str, ...]) -> None:
        outside = sorted(set(head.classes) - set(vocabulary))
        if outside:
            raise ValueError(f"classes {outside} outside {vocabulary}")
        rows = [vocabulary.index(c) for c in head.classes]
        coef = np.atleast_2d(np.asarray(head.coef, dtype=np.float64))
        intercept = np.asarray(head.intercept, dtype=np.float64).ravel()
        if len(rows) == 2 and coef.shape[0] == 1:  # scikit-learn's one-logit form: classes[0] has logit 0
            coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.append(0.0, intercept)
        elif len(rows) == 1:
            coef, intercept = np.zeros((1, coef.shape[1])), np.zeros(1)
        self.features = coef.shape[1]
        self.coef = np.zeros((len(vocabulary), self.features))
        self.intercept = np.full(len(vocabulary), -np.inf)
        self.coef[rows], self.intercept[rows] = coef, intercept
        self.size = len(vocabulary)

    def weights_of(self, logits: np.ndarray) -> np.ndarray:
        """(len(vocabulary), N): the probabilities up to a factor per column (what a share among some classes
        needs) from the head's logits, 0 for classes the head lacks. In place: ``logits`` is overwritten."""
        logits -= logits.max(axis=0)  # the softmax's shift: no overflow (the head has at least one finite row)
        return np.exp(logits, out=logits)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        weights = self.weights_of(self.coef @ x + self.intercept[:, None])
        return weights / weights.sum(axis=0)


def behaviour_features(s: Sessions, f: Fixed, recent_speaks: np.ndarray, since_spoke: np.ndarray) -> np.ndarray:
    """(9, N): ``behaviour.features`` of each session's latest values, last speaker and past decisions
    (``recent_speaks`` = ``Recent.speaks``; ``since_spoke`` = decision points since the therapist last spoke)."""
    d, g, last = s.distress_raw, s.g_raw, s.last_speaker
    N = d.shape[1]
    # Every value is in [0, 1] and absent slots and unused pair slots hold 0, so the largest over the slots is the
    # largest over the participants (over the ordered pairs i != j: those without a viewpoint are 0), and the sums
    # over the slots are the sums over them.
    x = np.empty((9, N))
    d.max(axis=0, out=x[0])
    np.multiply(d.sum(axis=0), f.per_person, out=x[1])
    x[2] = np.where(last >= 0, d.ravel()[np.maximum(last, 0) * N + np.arange(N)], 0.0)
    np.multiply(g.sum(axis=0), f.per_pair, out=x[3])
    np.multiply(g.max(axis=0), f.n > 1, out=x[4])
    x[5], x[6], x[7] = f.family, f.n / 6.0, recent_speaks
    np.divide(np.minimum(since_spoke, pib.SINCE_CAP), pib.SINCE_CAP, out=x[8])
    return x


class BehaviourBatch:
    """``BehaviourModel.log_prob`` of N actions in N states: the three heads' logits in one product, one softmax
    shift per head, one ``exp``; the choices a session offers (the kinds its participants allow, its scenario's
    strategies: ``Fixed.offered``) are a 0/1 mask on the weights, so a share among them is one sum."""

    def __init__(self, model: BehaviourModel) -> None:
        self.speaks = LogitBatch(model.speaks, ("0", "1"))
        self.kind = LogitBatch(model.kind, pib.KINDS)
        self.strategy = LogitBatch(model.strategy, ALL_STRATEGY_KEYS)
        heads = (self.speaks, self.kind, self.strategy)
        self._coef = np.vstack([h.coef for h in heads])
        self._intercept = np.concatenate([h.intercept for h in heads])[:, None]
        ends = np.cumsum([h.size for h in heads])
        self._spans = [slice(end - h.size, end) for h, end in zip(heads, ends)]
        # Every feature of ``behaviour.features`` is in [0, 1], so a logit is within |intercept| + sum |coef| of 0.
        # Below ``EXP_SAFE`` exp neither overflows nor vanishes, and the softmax's shift by the largest logit, which
        # cancels in every share, is skipped (the same shares, to rounding).
        finite = np.isfinite(self._intercept[:, 0])
        reach = np.abs(self._intercept[finite, 0]) + np.abs(self._coef[finite]).sum(axis=1)
        self._shift = bool(reach.max(initial=0.0) >= EXP_SAFE)
        self._choices = slice(self.speaks.size, None)  # the kind then the strategy rows: ``Fixed.offered``'s
        self._kind0, self._strategy0 = int(ends[0]), int(ends[1])  # their first rows

    def weights(self, x: np.ndarray) -> np.ndarray:
        """(2 + len(KINDS) + len(ALL_STRATEGY_KEYS), N): each head's probabilities up to a factor per session
        (``LogitBatch.weights_of``), ``x`` = ``behaviour_features`` of the states."""
        w = self._coef @ x
        w += self._intercept
        if self._shift:
            for span, head in zip(self._spans, (self.speaks, self.kind, self.strategy)):
                head.weights_of(w[span])
        else:
            np.exp(w, out=w)
        return w

    def log_prob(self, x: np.ndarray, s: Sessions, f: Fixed, a: Supports) -> np.ndarray:
        """(N,): log pi_b(a | s), ``x`` = ``behaviour_features`` of the states (module ``behaviour``: keep
        listening, or speak x the recipient kind / its number of sets x the strategy)."""
        mix = pib.UNIFORM_MIX
        w = self.weights(x)
        p_speak = (1 - mix) * w[1] / (w[0] + w[1]) + mix / 2
        listen = np.log(1.0 - p_speak)
        if not a.speaks.any():
            return listen
        n, last = f.n, s.last_speaker
        N = n.size
        columns = np.arange(N)
        w[self._choices] *= f.offered
        supported = a.supported
        count = supported.sum(axis=0)
        has_last = (last >= 0) & (last < n) & (n > 1)
        to_last = supported.ravel()[np.maximum(last, 0) * N + columns] & has_last
        # behaviour.recipient_kind (KINDS: last, everyone, other, subset) and kind_sizes: the last speaker (when
        # there is one and others), everyone, one of the others, a subset of two or more short of everyone
        kind = np.where(count >= n, 1, np.where(count == 1, np.where(to_last, 0, 2), 3))
        size = _kind_sizes(supported.shape[0])[f.kind_base + has_last * len(pib.KINDS) + kind]
        k0 = self._kind0
        w[k0] *= has_last  # "last" is offered when there is a last speaker (``Fixed.offered`` has the rest)
        total = w[k0 : self._strategy0].sum(axis=0)
        chosen = w.ravel()[(k0 + kind) * N + columns]
        p_kind = _share(chosen, total, f.kinds_offered + has_last) / np.maximum(size, 1)
        k = f.valid_count
        chosen = w.ravel()[(self._strategy0 + np.maximum(a.strategy, 0)) * N + columns]
        p_strategy = _share(chosen, w[self._strategy0 :].sum(axis=0), k)
        p_strategy = np.where(a.strategy >= 0, p_strategy, 1.0 / k)  # unknown or out of the taxonomy: uniform
        with np.errstate(divide="ignore"):
            speak = np.log(p_speak * p_kind * p_strategy)
        return np.where(a.speaks, speak, listen)


@cache
def _kind_sizes(most: int) -> np.ndarray:
    """``behaviour.kind_sizes`` flat, at ``(n * 2 + has a last speaker) * 4 + kind`` (``behaviour.KINDS`` order;
    ``Fixed.kind_base`` = n * 2 * 4)."""
    table = np.array(
        [[pib.kind_sizes(n, 0 if last else None)[k] if n else 0 for k in pib.KINDS] for n in range(most + 1)
         for last in (0, 1)]
    ).ravel()  # fmt: skip
    table.flags.writeable = False
    return table


def _share(chosen: np.ndarray, total: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``BehaviourModel._restricted``'s share of the chosen class: its weight over the allowed classes' (the
    weights are the probabilities up to a factor per session, which cancels), mixed with the uniform over the k
    allowed; the uniform where they carry no mass (there the unmixed share is 1 / k too)."""
    mix = pib.UNIFORM_MIX
    inverse = 1.0 / k
    share = np.divide(chosen, total, out=inverse.copy(), where=total > 0)
    share *= 1 - mix
    share += mix * inverse
    return share


# ----- Eq. 14 and the loop's draws -----------------------------------------------------------------------------


def objective(d: np.ndarray, g: np.ndarray, f: Fixed, tension_weight: float, lam: float) -> np.ndarray:
    """(N,): ``state.objective`` of the latest values: U(s, G) - lambda max_i d_i, U = mean(1 - d) - w T(G)."""
    # absent slots and unused pair slots hold 0 and every value is in [0, 1]: sums and the max over the slots
    return 1.0 - d.sum(axis=0) * f.per_person - tension_weight * g.sum(axis=0) * f.per_pair - lam * d.max(axis=0)


def next_speakers(f: Fixed, supported: np.ndarray, replies: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """(N,): ``simulation.next_speaker`` given its draws: where ``replies``, a recipient by speaking weight, else
    anyone. The cumulative shares are the same sums in the same order (zeros in the slots left out), so the index
    ``bisect_right`` finds is the same."""
    cdf = f.speaker_cdf
    if replies.any():
        weights = np.where(replies & ~supported, 0.0, f.weights)
        for i in range(1, weights.shape[0]):  # ``np.cumsum`` over the short first axis, as fast row adds
            weights[i] += weights[i - 1]
        cdf = np.where(replies, weights / weights[-1], cdf)
    return (cdf <= uniform).sum(axis=0)


def settle(
    s: Sessions,
    f: Fixed,
    d_next: np.ndarray,
    g_next: np.ndarray,
    speaks: np.ndarray,
    intervene: np.ndarray,
    speaker: np.ndarray,
    fresh_uniform: np.ndarray,
    pair_uniform: np.ndarray,
) -> None:
    """``simulation.settle`` in place, given its draws: a participant's value is F's where refreshed (uniform below
    ``p_emotion``; a viewpoint's below ``p_pair``), set at the step's row; the clock moves by the rows the step
    took (1, plus 1 when the therapist spoke, also to no one: ``RescueSimEnvV1.step``). The arrays of ``s`` are
    written, not replaced (they may be views of one packed array: ``Arrays.packed``)."""
    row = s.row + 1 + speaks
    # absent slots and unused pair slots have probability 0, and a uniform is never below 0: never refreshed
    fresh = fresh_uniform < f.p_emotion
    fresh_pairs = pair_uniform < f.p_pair
    s.distress_raw[...] = np.where(fresh, d_next, s.distress_raw)
    s.emotion_row[...] = np.where(fresh, row, s.emotion_row)
    s.g_raw[...] = np.where(fresh_pairs, g_next, s.g_raw)
    s.viewpoint_row[...] = np.where(fresh_pairs, row, s.viewpoint_row)
    s.row[...] = row + (intervene & ~speaks)
    s.last_speaker[...] = speaker


def perceive(x: np.ndarray, noise: float, z: np.ndarray | None) -> np.ndarray:
    """``simulation.perceive_lists`` of values ``x`` given its normals ``z``: plus noise, clipped to [0, 1], in
    tenths (``rint(10 x) / 10``: Python's ``round`` is the same half-to-even)."""
    x = x + noise * z if noise > 0 and z is not None else x.copy()
    np.clip(x, 0.0, 1.0, out=x)
    x *= 10.0
    np.rint(x, out=x)
    x /= 10.0
    return x


__all__ = [
    "Ages",
    "Arrays",
    "ColumnCopier",
    "Placement",
    "BehaviourBatch",
    "F1Batch",
    "FEATURES",
    "Fixed",
    "HANDLED_BLOCKS",
    "LogitBatch",
    "Point",
    "Recent",
    "Sessions",
    "Supports",
    "behaviour_features",
    "next_speakers",
    "objective",
    "others_max",
    "pair_slots",
    "per_participant",
    "perceive",
    "point",
    "settle",
    "stack",
    "supports",
]
