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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from functools import cache

import numpy as np

from rescue_env.dynamics import behaviour as pib
from rescue_env.dynamics.behaviour import BehaviourModel, LogitHead
from rescue_env.dynamics.outcome import DISTRESS_FEATURES, KINDS, PAIR_FEATURES, PATTERNS, _age_feature
from rescue_env.dynamics.outcome_v1 import BLOCKS, OutcomeModelV1, block_names
from rescue_env.dynamics.simulation import EpisodeDynamics, SimState
from rescue_env.dynamics.state import StateConfig, age_weight
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

# ----- the state of N sessions ---------------------------------------------------------------------------------


@dataclass
class Arrays:
    """A dataclass of arrays whose last axis is the session (or the episode, for tables). ``packed`` puts the
    fields of one dtype in one array (the fields are views of it), so that ``assign`` is one copy per dtype: a
    reset sets every constant of a session at once."""

    def assign(self, rows: np.ndarray, source: Arrays, index: np.ndarray) -> None:
        """``self.x[..., rows] = source.x[..., index]`` for every field (sessions set to the starts of episodes)."""
        mine, theirs = self.__dict__.get("_packs"), source.__dict__.get("_packs")
        if mine is not None and theirs is not None and mine.keys() == theirs.keys():
            for dtype, pack in mine.items():
                pack[:, rows] = theirs[dtype][:, index]
            return
        for f in fields(self):
            getattr(self, f.name)[..., rows] = getattr(source, f.name)[..., index]

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

    def reindex(self, rows: np.ndarray) -> None:
        """The flat indices of ``rows`` for their columns (after ``assign``: a table's are its episodes')."""
        K, N = self.pair.shape
        self.source_at[:, rows] = self.source[:, rows] * N + rows
        self.target_at[:, rows] = self.target[:, rows] * N + rows
        reverse = self.reverse[:, rows]
        self.reverse_at[:, rows] = np.where(reverse < K, reverse * N + rows, K * N)


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
    # simulation._cdf's sums and divisions (numpy's cumsum adds in the same order; absent slots add 0)
    f.speaker_cdf[:] = np.cumsum(f.weights, axis=0) / f.weights.sum(axis=0)
    f.reindex(np.arange(N))
    return s, f


@dataclass(frozen=True)
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
    kind = _kinds(recipients.shape[0])[n, np.where(speaks, count, 0)]
    return Supports(speaks, recipients & speaks, kind, strategy)


@dataclass(frozen=True)
class Recent:
    """F1's ``History`` of each session: the share of the last ``HISTORY`` decisions at which the therapist spoke,
    and per participant the share at which they were supported."""

    speaks: np.ndarray  # (N,)
    supported: np.ndarray  # (m, N)


# ----- F's state features of a point (outcome.point_state) ------------------------------------------------------


@dataclass(frozen=True)
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


class Ages:
    """An annotation's weight (``state.age_weight``) and F's age feature (``outcome._age_feature``) by its age in
    rows, tabulated once (the same values: each computed by those functions), the last entry for "never set"
    (weight 0, feature 1). Ages are whole rows, at most ``oldest``."""

    def __init__(self, config: StateConfig, oldest: int) -> None:
        age = np.append(np.arange(oldest + 1, dtype=np.float64), np.inf)
        self.table = np.stack([age_weight(age, config.decay_after, config.half_life), np.isfinite(age) * 1.0,
                               _age_feature(age)])  # fmt: skip
        self.never = oldest + 1

    def aged(self, raw: np.ndarray, set_row: np.ndarray, row: np.ndarray):
        """(aged value, annotated, age feature), as ``Snapshot.aged`` then ``point_state``."""
        weight, annotated, feature = np.take(self.table, np.where(set_row < 0, self.never, row - set_row), axis=1)
        return raw * weight, annotated, feature


def point(s: Sessions, f: Fixed, ages: Ages) -> Point:
    """F's inputs, as ``SimState.point`` computes them: values aged by the rows since they were set, the others'
    distress (the largest and the mean), i's outgoing and incoming viewpoints' negativity (sums / (n - 1))."""
    m, N = s.distress_raw.shape
    d, annotated, age = ages.aged(s.distress_raw, s.emotion_row, s.row)
    g, pair_annotated, pair_age = ages.aged(s.g_raw, s.viewpoint_row, s.row)  # unused slots: never set, so 0
    scale = f.per_other
    # the largest of the others: the top value; for the slot holding it, the second (or the top again if tied)
    masked = np.where(f.present, d, -np.inf)
    top = masked.max(axis=0)
    at_top = masked == top
    second = np.where(at_top.sum(axis=0) > 1, top, np.where(at_top, -np.inf, masked).max(axis=0))
    others_max = np.where(f.n > 1, np.where(at_top, second, top), 0.0)
    source, target, reverse = f.source_at, f.target_at, f.reverse_at
    return Point(
        d=d,
        annotated=annotated,
        age=age,
        others_max=others_max,
        others_mean=(d.sum(axis=0) - d) * scale,
        out_negative=per_participant(g, source, m) * scale,  # sums over the viewpoints i has / of i
        in_negative=per_participant(g, target, m) * scale,
        last=(np.arange(m)[:, None] == s.last_speaker) * 1.0,
        g=g,
        pair_annotated=pair_annotated,
        pair_age=pair_age,
        g_reverse=np.append(g, 0.0)[reverse],
        d_source=d.ravel()[source],
        d_target=d.ravel()[target],
    )


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
        if self.uses("recent_speaks"):  # the saturation block's one column that does not depend on the action
            bias = bias + c("recent_speaks") * h.speaks
        state = (
            bias
            + c("d") * p.d
            + c("annotated") * p.annotated
            + c("age") * p.age
            + c("d_others_max") * p.others_max
            + c("d_others_mean") * p.others_mean
            + c("out_negative") * p.out_negative
            + c("in_negative") * p.in_negative
            + c("last_speaker") * p.last
        )
        action = self.effect(p, f, a, h, heads)
        return state + action if effect_scale == 1.0 else state + effect_scale * action

    def effect(self, p: Point, f: Fixed, a: Supports, h: Recent, heads: Heads) -> np.ndarray:
        """(m, N): F1(x, a) - F1(x, a0), the action's terms of the distress head: F's main effects (speaking,
        the recipient kind, the strategy, recipient x d, someone else supported), then the kept blocks."""
        c = lambda name: self.c(name, heads)  # noqa: E731
        speaks = a.speaks * 1.0
        supported = a.supported * 1.0
        other = speaks - supported  # someone else is supported (``other_supported``)
        own = self.pick("kind", a.kind, heads) + self.pick("strategy", a.strategy, heads) + c("recipient_x_d") * p.d
        if self.uses(*_GROUPS["strategy_x_d"]):
            own = own + self.pick("strategy_x_d", a.strategy, heads) * p.d
        if self.uses(*_GROUPS["kind_x_family"]):
            own = own + self.pick("kind_x_family", a.kind, heads) * f.family
        if self.uses(*_GROUPS["strategy_x_last"]):
            own = own + self.pick("strategy_x_last", a.strategy, heads) * p.last
        if self.uses("supported_x_recent_supported"):
            own = own + c("supported_x_recent_supported") * h.supported
        speaking = speaks * c("therapist_speaks")
        if self.uses("speaks_x_recent_speaks"):
            speaking = speaking + speaks * c("speaks_x_recent_speaks") * h.speaks
        out = supported * own + speaking + other * c("other_supported")
        if self.uses("other_supported_x_d"):
            out = out + other * c("other_supported_x_d") * p.d
        if self.uses("speaks_x_d"):
            out = out + speaks * c("speaks_x_d") * p.d
        return out

    def viewpoint(self, p: Point, f: Fixed, a: Supports, effect_scale: float = 1.0) -> np.ndarray:
        """(K, N): the next negativity of each pair slot's viewpoint, unclipped (F's viewpoint head)."""
        e = self.e
        bias = self.e_intercept + e["family"] * f.family + self.e_pattern[f.pattern]
        state = (
            bias
            + e["g"] * p.g
            + e["annotated"] * p.pair_annotated
            + e["age"] * p.pair_age
            + e["g_reverse"] * p.g_reverse
            + e["d_source"] * p.d_source
            + e["d_target"] * p.d_target
        )
        source = self.e_source_kind[a.kind] + self.e_strategy[np.where(a.kind >= 0, a.strategy, -1)]
        supported = a.supported.ravel()
        action = (
            a.speaks * e["therapist_speaks"]
            + supported[f.source_at] * source
            + supported[f.target_at] * self.e_target_kind[a.kind]
        )
        return state + action if effect_scale == 1.0 else state + effect_scale * action

    def spread(self, p: Point, f: Fixed, a: Supports, h: Recent) -> np.ndarray:
        """(N,): the largest over participants of the ensemble's standard deviation of the action's effect on next
        distress (``OutcomeModelV1.effect_spread`` then ``.max(initial=0)``); 0 without members."""
        if not self.members:
            return np.zeros(a.speaks.size)
        effects = np.stack([self.effect(p, f, a, h, k + 1) for k in range(self.members)])
        return np.where(f.present, effects.std(axis=0), 0.0).max(axis=0, initial=0.0)


# ----- pi_b --------------------------------------------------------------------------------------------------------


class LogitBatch:
    """``LogitHead.probabilities`` of N feature columns, as (len(vocabulary), N) (0 for classes the head lacks)."""

    def __init__(self, head: LogitHead, vocabulary: tuple[str, ...]) -> None:
        outside = sorted(set(head.classes) - set(vocabulary))
        if outside:
            raise ValueError(f"classes {outside} outside {vocabulary}")
        self.rows = np.array([vocabulary.index(c) for c in head.classes], dtype=np.int64)
        self.coef = np.asarray(head.coef, dtype=np.float64)
        self.intercept = np.asarray(head.intercept, dtype=np.float64)[:, None]
        self.size = len(vocabulary)
        self.binary = len(head.classes) == 2 and self.coef.shape[0] == 1  # scikit-learn's one-logit form
        self.complete = self.rows.tolist() == list(range(self.size))

    def weights(self, x: np.ndarray) -> np.ndarray:
        """(len(vocabulary), N): the probabilities up to a factor per column (what a share among some classes
        needs), 0 for classes the head lacks."""
        return self.weights_of(self.coef @ x + self.intercept)

    def weights_of(self, logits: np.ndarray) -> np.ndarray:
        """``weights`` from the head's logits."""
        if self.binary or self.rows.size == 1:
            out = np.zeros((self.size, logits.shape[1]))
            if self.rows.size == 1:
                out[self.rows[0]] = 1.0
            else:
                p = 1.0 / (1.0 + np.exp(-logits[0]))
                out[self.rows[0]], out[self.rows[1]] = 1 - p, p
            return out
        weights = np.exp(logits - logits.max(axis=0))
        if self.complete:
            return weights
        out = np.zeros((self.size, logits.shape[1]))
        out[self.rows] = weights
        return out

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros((self.size, x.shape[1]))
        if self.rows.size == 1:
            out[self.rows[0]] = 1.0
            return out
        logits = self.coef @ x + self.intercept
        if self.binary:
            p = 1.0 / (1.0 + np.exp(-logits[0]))
            out[self.rows[0]], out[self.rows[1]] = 1 - p, p
            return out
        weights = np.exp(logits - logits.max(axis=0))
        out[self.rows] = weights / weights.sum(axis=0)
        return out


def behaviour_features(s: Sessions, f: Fixed, recent_speaks: np.ndarray, since_spoke: np.ndarray) -> np.ndarray:
    """(9, N): ``behaviour.features`` of each session's latest values, last speaker and past decisions
    (``recent_speaks`` = ``Recent.speaks``; ``since_spoke`` = decision points since the therapist last spoke)."""
    d, g, last = s.distress_raw, s.g_raw, s.last_speaker
    # Every value is in [0, 1] and absent slots and unused pair slots hold 0, so the largest over the slots is the
    # largest over the participants (over the ordered pairs i != j: those without a viewpoint are 0), and the sums
    # over the slots are the sums over them.
    return np.stack(
        [
            d.max(axis=0),
            d.sum(axis=0) * f.per_person,
            np.where(last >= 0, d.ravel()[np.maximum(last, 0) * d.shape[1] + np.arange(d.shape[1])], 0.0),
            g.sum(axis=0) * f.per_pair,
            g.max(axis=0) * (f.n > 1),
            f.family,
            f.n / 6.0,
            recent_speaks,
            np.minimum(since_spoke, pib.SINCE_CAP) / pib.SINCE_CAP,
        ]
    )


class BehaviourBatch:
    """``BehaviourModel.log_prob`` of N actions in N states (the three heads' logits in one product)."""

    def __init__(self, model: BehaviourModel) -> None:
        self.speaks = LogitBatch(model.speaks, ("0", "1"))
        self.kind = LogitBatch(model.kind, pib.KINDS)
        self.strategy = LogitBatch(model.strategy, ALL_STRATEGY_KEYS)
        heads = (self.speaks, self.kind, self.strategy)
        self._coef = np.vstack([h.coef for h in heads])
        self._intercept = np.vstack([h.intercept for h in heads])
        ends = np.cumsum([h.coef.shape[0] for h in heads])
        self._spans = [slice(end - h.coef.shape[0], end) for h, end in zip(heads, ends)]

    def log_prob(self, x: np.ndarray, s: Sessions, f: Fixed, a: Supports) -> np.ndarray:
        """(N,): log pi_b(a | s), ``x`` = ``behaviour_features`` of the states (module ``behaviour``: keep
        listening, or speak x the recipient kind / its number of sets x the strategy)."""
        mix = pib.UNIFORM_MIX
        logits = self._coef @ x + self._intercept
        speaks, kind_w, strategy_w = (h.weights_of(logits[span]) for h, span in
                                      zip((self.speaks, self.kind, self.strategy), self._spans))  # fmt: skip
        p_speak = (1 - mix) * speaks[1] / speaks.sum(axis=0) + mix / 2
        listen = np.log(1.0 - p_speak)
        if not a.speaks.any():
            return listen
        n, last = f.n, s.last_speaker
        N = n.size
        columns = np.arange(N)
        count = a.supported.sum(axis=0)
        to_last = a.supported.ravel()[np.maximum(last, 0) * N + columns] & (last >= 0)
        # behaviour.recipient_kind (KINDS: last, everyone, other, subset) and kind_sizes: the last speaker (when
        # there is one and others), everyone, one of the others, a subset of two or more short of everyone
        kind = np.where(count >= n, 1, np.where(count == 1, np.where(to_last, 0, 2), 3))
        has_last = (last >= 0) & (last < n) & (n > 1)
        many, subsets = n > 1, n > 2
        size = _kind_sizes(a.supported.shape[0])[(n * 2 + has_last) * len(pib.KINDS) + kind]
        offered = 1 + has_last + many + subsets
        total = kind_w[1] + kind_w[0] * has_last + kind_w[2] * many + kind_w[3] * subsets
        chosen = kind_w.ravel()[kind * N + columns]
        p_kind = _share(chosen, total, offered) / np.maximum(size, 1)
        k = f.valid_count
        chosen = strategy_w.ravel()[np.maximum(a.strategy, 0) * N + columns]
        p_strategy = _share(chosen, (strategy_w * f.valid).sum(axis=0), k)
        p_strategy = np.where(a.strategy >= 0, p_strategy, 1.0 / k)  # unknown or out of the taxonomy: uniform
        with np.errstate(divide="ignore"):
            speak = np.log(p_speak) + np.log(p_kind) + np.log(p_strategy)
        return np.where(a.speaks, speak, listen)


@cache
def _kind_sizes(most: int) -> np.ndarray:
    """``behaviour.kind_sizes`` flat, at ``(n * 2 + has a last speaker) * 4 + kind`` (``behaviour.KINDS`` order)."""
    table = np.array(
        [[pib.kind_sizes(n, 0 if last else None)[k] if n else 0 for k in pib.KINDS] for n in range(most + 1)
         for last in (0, 1)]
    ).ravel()  # fmt: skip
    table.flags.writeable = False
    return table


def _share(chosen: np.ndarray, total: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``BehaviourModel._restricted``'s share of the chosen class: its weight over the allowed classes' (the
    weights are the probabilities up to a factor per session, which cancels), mixed with the uniform over the k
    allowed; the uniform where they carry no mass."""
    mix = pib.UNIFORM_MIX
    share = (1 - mix) * chosen / np.where(total > 0, total, 1.0) + mix / k
    return np.where(total > 0, share, 1.0 / k)


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
        weights = np.cumsum(np.where(replies & ~supported, 0.0, f.weights), axis=0)
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
    took (1, plus 1 when the therapist spoke, also to no one: ``RescueSimEnvV1.step``)."""
    row = s.row + 1 + speaks
    fresh = f.present & (fresh_uniform < f.p_emotion)
    fresh_pairs = f.pair & (pair_uniform < f.p_pair)
    s.distress_raw = np.where(fresh, d_next, s.distress_raw)
    s.emotion_row = np.where(fresh, row, s.emotion_row)
    s.g_raw = np.where(fresh_pairs, g_next, s.g_raw)
    s.viewpoint_row = np.where(fresh_pairs, row, s.viewpoint_row)
    s.row = row + (intervene & ~speaks)
    s.last_speaker = speaker


def perceive(x: np.ndarray, noise: float, z: np.ndarray | None) -> np.ndarray:
    """``simulation.perceive_lists`` of values ``x`` given its normals ``z``: plus noise, clipped to [0, 1], in
    tenths (``rint(10 x) / 10``: Python's ``round`` is the same half-to-even)."""
    if noise > 0 and z is not None:
        x = x + noise * z
    return np.rint(np.clip(x, 0.0, 1.0) * 10.0) / 10.0


__all__ = [
    "Ages",
    "Arrays",
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
    "pair_slots",
    "per_participant",
    "perceive",
    "point",
    "settle",
    "stack",
    "supports",
]
