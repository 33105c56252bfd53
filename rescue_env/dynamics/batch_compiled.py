"""The native vector env's step as loops over its sessions, compiled with numba when it is installed (optional:
``pip install -e ".[fast]"``): an accelerator of ``rescue_env.dynamics.batch``, whose numpy functions stay the
reference (``tests/test_sim_v1_vector.py`` holds the two to each other, and runs these loops as plain Python too).

Why: at N = 1024 the numpy step is a few hundred array operations of 1-5 us each (most over a short first axis,
where numpy's per-call cost dominates), about 1 ms a step against the 0.7 ms of 0.1x ``CartPoleVectorEnv``. Each
stage written as one loop per session does the same arithmetic in tens of microseconds: the decoding and pi_b's
features (``prepare_loop``), F's point, F1, pi_b, the speakers and the refreshes (``advance_loop``; on several
threads, ``advance_threads``), the counts and rewards (``record_loop``), the perception (``observe_cells``) and a
reset's copies (``place_columns``). pi_b's weights stay one numpy product and one vectorised exp between them (a
scalar exp per class and session costs more).

The random numbers are drawn in the numpy step's order and layout (``draw_step``, ``draw_cells``) with numba's
``np.random.Generator``, which gives numpy's numbers bit for bit (tested), normals twice as fast; handing the
generator to numba costs ~8 us a call, so a step makes two. The perception works session-major: a (W + 1, N) array
at N = 1024 has its rows 8 KiB apart, which share one L1 cache set, and a loop over the sessions that reads ~20 of
them per session was twice as slow.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from rescue_env.dynamics.batch import F1Batch, _kind_sizes, _kinds

COMPILED_SCALARS = ("family", "recent_speaks", "recipient_x_d", "supported_x_recent_supported", "therapist_speaks",
                    "speaks_x_recent_speaks", "other_supported", "other_supported_x_d", "speaks_x_d")  # fmt: skip
"""F1's coefficients of one column each that ``advance_loop`` reads (``CompiledModels.scalars``' columns)."""
COMPILED_GROUPS = ("pattern", "kind", "strategy", "strategy_x_d", "kind_x_family", "strategy_x_last")
"""F1's one-hot groups that ``advance_loop`` reads, each with a trailing 0 for "none" (``F1Batch._groups``)."""


@dataclass
class CompiledModels:
    """F1 and F's viewpoint head as the arrays ``advance_loop`` reads (every term, 0 where a head lacks it)."""

    intercept: np.ndarray  # (H,)
    state: np.ndarray  # (H, len(STATE_FEATURES))
    scalars: np.ndarray  # (H, len(COMPILED_SCALARS))
    groups: tuple[np.ndarray, ...]  # COMPILED_GROUPS, each (H, members + 1)
    sigma: np.ndarray  # (H,)
    pair: np.ndarray  # (len(PAIR_STATE_FEATURES),)
    e_scalars: np.ndarray  # (intercept, family, therapist_speaks, sigma)
    e_groups: tuple[np.ndarray, ...]  # pattern, source kind, target kind, source strategy (trailing 0)
    kind_sizes: np.ndarray  # ``_kind_sizes``
    kinds: np.ndarray  # ``_kinds``: the recipient kind by (participants, recipients)

    @classmethod
    def of(cls, f1: F1Batch, slots: int) -> CompiledModels:
        col = f1._col
        return cls(
            f1.intercept.copy(), np.ascontiguousarray(f1._state_coef),
            np.ascontiguousarray(f1.table[:, [col[name] for name in COMPILED_SCALARS]]),
            tuple(np.ascontiguousarray(f1._groups[name]) for name in COMPILED_GROUPS), f1.sigma.copy(),
            f1._pair_coef.copy(), np.array([f1.e_intercept, f1.e["family"], f1.e["therapist_speaks"], f1.sigma_g]),
            (f1.e_pattern, f1.e_source_kind, f1.e_target_kind, f1.e_strategy), np.asarray(_kind_sizes(slots)),
            _kinds(slots),
        )  # fmt: skip


def prepare_loop(
    intervene, bits, strategy, n, present, valid, participants, kinds, ring_speaks, ring_supported,
    distress, g_raw, last_speaker, per_person, per_pair, family, since, since_cap,
    speaks, supported, kind, chosen, invalid, recent_speaks, recent_supported, x,
):  # fmt: skip
    """What a step reads before F1 and pi_b, per session, as ``RescueSimVectorEnvV1._advance`` computes it in numpy:
    the decoded action (``replay.decode_action`` and ``batch.supports``: ``speaks``, ``supported`` (m, N), ``kind``,
    the ``chosen`` strategy, -1 outside the scenario's taxonomy, and the ``invalid`` choices counted), F1's
    ``Recent`` (the rings' shares) and ``batch.behaviour_features`` ``x`` (9, N); the arrays after ``since_cap`` are
    written. ``bits``: (N, P + 1), the group bit last; ``participants``: (N, P), the observation's mask."""
    m, N = distress.shape
    P, H, K = participants.shape[1], ring_speaks.shape[0], g_raw.shape[0]
    for s in range(N):
        ns = n[s]
        # the group bit = everyone; bits of absent slots ignored and counted; a strategy outside the taxonomy: none
        stray = 0
        for i in range(P):
            if bits[s, i] and participants[s, i] == 0:
                stray = 1
        ok = valid[strategy[s], s]
        chosen[s] = strategy[s] if ok else -1
        invalid[s] = stray + (0 if ok else 1)
        count = 0
        for i in range(m):  # the recipients, kept only if the therapist speaks
            supported[i, s] = present[i, s] and (bits[s, P] or bits[s, i])
            count += supported[i, s]
        talk = intervene[s] and count > 0
        speaks[s] = talk
        kind[s] = kinds[ns, count if talk else 0]
        if not talk:
            for i in range(m):
                supported[i, s] = False
        # the shares of the last H decisions
        total = 0
        for t in range(H):
            total += ring_speaks[t, s]
        recent_speaks[s] = total / H
        for i in range(m):
            total = 0
            for t in range(H):
                total += ring_supported[t, i, s]
            recent_supported[i, s] = total / H
        # pi_b's features: absent slots and unused pair slots hold 0 (``behaviour_features``)
        top, total_d = 0.0, 0.0
        for i in range(m):
            top = max(top, distress[i, s])
            total_d += distress[i, s]
        top_g, total_g = 0.0, 0.0
        for k in range(K):
            top_g = max(top_g, g_raw[k, s])
            total_g += g_raw[k, s]
        last = last_speaker[s]
        x[0, s], x[1, s] = top, total_d * per_person[s]
        x[2, s] = distress[last, s] if last >= 0 else 0.0
        x[3, s], x[4, s] = total_g * per_pair[s], top_g * (1.0 if ns > 1 else 0.0)
        x[5, s], x[6, s], x[7, s] = family[s], ns / 6.0, recent_speaks[s]
        x[8, s] = min(since[s], since_cap) / since_cap


def record_loop(
    intervene, speaks, supported, log_pi, group, ring_speaks, ring_supported, since, since_cap, steps, interventions,
    sums, gamma, kappa, beta, reward,
):  # fmt: skip
    """After F1's step, per session, as ``RescueSimVectorEnvV1._advance`` computes it in numpy: the therapist's
    decision into the rings (at the session's step modulo their length), the decisions since it last spoke, the
    counts, Eq. 14 less kappa per intervention (``group``, written) and the ``reward`` with beta log pi_b, summed into
    ``sums`` (return, discounted return, group, log pi_b: ``_sums``' rows)."""
    H, m, N = ring_supported.shape
    for s in range(N):
        slot = steps[s] % H
        ring_speaks[slot, s] = speaks[s]
        for i in range(m):
            ring_supported[slot, i, s] = supported[i, s]
        since[s] = 0 if speaks[s] else min(since[s] + 1, since_cap)
        discount = gamma ** float(steps[s])
        steps[s] += 1
        interventions[s] += 1 if intervene[s] else 0
        group[s] -= kappa * (1.0 if intervene[s] else 0.0)
        reward[s] = group[s] + beta * log_pi[s]
        sums[0, s] += reward[s]
        sums[1, s] += reward[s] * discount
        sums[2, s] += group[s]
        sums[3, s] += log_pi[s]


def advance_loop(
    # the sessions stepped (``begin`` .. ``end`` - 1); the state (written: the sessions' values, rows, clock and last
    # speakers) and the episodes' constants
    begin, end, distress, emotion_row, g_raw, viewpoint_row, row, last_speaker,
    n, source, target, reverse, family, pattern, weights, p_emotion, p_pair, per_person, per_other,
    per_pair, valid_count, speaker_cdf, offered, kinds_offered, kind_base, pair_cell,
    # the step: the decoded action, the therapist's recent decisions, the heads, the draws
    intervene, speaks, supported, kind, strategy, recent_speaks, recent_supported, w, heads, ages, never,
    z, replies, speaker_uniform, u, sample, effect_scale, tension_weight, lam,
    # the models (``CompiledModels``' fields, spread out), pi_b's UNIFORM_MIX, and the outputs
    intercept, state_coef, scalars, pattern_c, kind_c, strategy_c, strategy_x_d_c, kind_x_family_c, strategy_x_last_c,
    sigma, pair_coef, e_scalars, e_pattern, e_source_kind, e_target_kind, e_strategy, kind_sizes, mix, log_pi, group,
):  # fmt: skip
    """One step of every session, as ``BehaviourBatch.log_prob`` (from its heads' weights ``w``, computed by
    ``BehaviourBatch.weights``: one vectorised exp beats a scalar one per class and session), ``point`` +
    ``F1Batch.distress`` / ``viewpoint`` (+ the residual noise, clipped), ``next_speakers``, ``settle`` and
    ``objective`` compute it (the same terms; sums in loop order), one session at a time. ``log_pi`` and ``group``
    (N,) are written."""
    m, N = distress.shape
    K = g_raw.shape[0]
    d = np.empty(m)
    d_ann = np.empty(m)
    d_age = np.empty(m)
    g = np.empty(K + 1)  # and a 0 for "no reverse viewpoint"
    g_ann = np.empty(K)
    g_age = np.empty(K)
    out_negative = np.empty(m)
    in_negative = np.empty(m)
    d_next = np.empty(m)
    g_next = np.empty(K)
    cdf = np.empty(m)
    for s in range(begin, end):
        h = heads[s]
        clock, last, ns = row[s], last_speaker[s], n[s]
        # -- log pi_b(a | s) from its heads' weights (``BehaviourBatch.log_prob``)
        p_speak = (1 - mix) * w[1, s] / (w[0, s] + w[1, s]) + mix / 2
        if not speaks[s]:
            log_pi[s] = np.log(1.0 - p_speak)
        else:
            count = 0
            for i in range(m):
                count += supported[i, s]
            has_last = last >= 0 and last < ns and ns > 1
            to_last = supported[max(last, 0), s] and has_last
            chosen_kind = 1 if count >= ns else ((0 if to_last else 2) if count == 1 else 3)
            size = kind_sizes[kind_base[s] + (4 if has_last else 0) + chosen_kind]
            offers_last = 1.0 if has_last else 0.0  # "last" is offered when there is a last speaker
            total = 0.0
            for r in range(4):
                total += w[2 + r, s] * offered[r, s] * (offers_last if r == 0 else 1.0)
            chosen = w[2 + chosen_kind, s] * offered[chosen_kind, s] * (offers_last if chosen_kind == 0 else 1.0)
            inverse = 1.0 / (kinds_offered[s] + offers_last)
            share = chosen / total if total > 0 else inverse
            p_kind = (share * (1 - mix) + mix * inverse) / max(size, 1)
            inverse = 1.0 / valid_count[s]
            p_strategy = inverse
            if strategy[s] >= 0:
                total = 0.0
                for r in range(4, offered.shape[0]):
                    total += w[2 + r, s] * offered[r, s]
                chosen = w[6 + strategy[s], s] * offered[4 + strategy[s], s]
                share = chosen / total if total > 0 else inverse
                p_strategy = share * (1 - mix) + mix * inverse
            log_pi[s] = np.log(p_speak * p_kind * p_strategy)
        # -- F's point (``point``): the values aged by the rows since they were set
        for i in range(m):
            age = never if emotion_row[i, s] < 0 else clock - emotion_row[i, s]
            d[i], d_ann[i], d_age[i] = distress[i, s] * ages[0, age], ages[1, age], ages[2, age]
        for k in range(K):
            age = never if viewpoint_row[k, s] < 0 else clock - viewpoint_row[k, s]
            g[k], g_ann[k], g_age[k] = g_raw[k, s] * ages[0, age], ages[1, age], ages[2, age]
        g[K] = 0.0
        aged_sum = 0.0
        for i in range(m):
            aged_sum += d[i]
            out_negative[i], in_negative[i] = 0.0, 0.0
        for k in range(K):  # the viewpoints i has, and those of i (``per_participant``)
            out_negative[source[k, s]] += g[k]
            in_negative[target[k, s]] += g[k]
        # -- F1's distress head (``F1Batch.distress`` and ``effect``)
        c = scalars[h]
        bias = intercept[h] + c[0] * family[s] + pattern_c[h, pattern[s]] + c[1] * recent_speaks[s]
        talk = 1.0 if speaks[s] else 0.0
        own0 = kind_c[h, kind[s]] + strategy_c[h, strategy[s]]
        b = state_coef[h]  # ``STATE_FEATURES``' order
        top, second, first = 0.0, 0.0, -1  # the largest aged distress (its slot) and the next: the others' largest
        for i in range(m):
            if d[i] > top:
                top, second, first = d[i], top, i
            elif d[i] > second:
                second = d[i]
        for i in range(m):
            if p_emotion[i, s] <= 0:  # never refreshed (absent slots): its next value is never read
                continue
            others = second if i == first else top
            spoke = 1.0 if i == last else 0.0
            value = (bias + b[0] * d[i] + b[1] * d_ann[i] + b[2] * d_age[i] + b[3] * others
                     + b[4] * ((aged_sum - d[i]) * per_other[s]) + b[5] * (out_negative[i] * per_other[s])
                     + b[6] * (in_negative[i] * per_other[s]) + b[7] * spoke)  # fmt: skip
            support = 1.0 if supported[i, s] else 0.0
            other = talk - support
            own = (own0 + c[2] * d[i] + strategy_x_d_c[h, strategy[s]] * d[i] + kind_x_family_c[h, kind[s]] * family[s]
                   + strategy_x_last_c[h, strategy[s]] * spoke + c[3] * recent_supported[i, s])  # fmt: skip
            effect = (support * own + talk * (c[4] + c[5] * recent_speaks[s]) + other * c[6] + other * c[7] * d[i]
                      + talk * c[8] * d[i])  # fmt: skip
            d_next[i] = value + effect * effect_scale
        # -- F's viewpoint head (``F1Batch.viewpoint``)
        e_bias = e_scalars[0] + e_scalars[1] * family[s] + e_pattern[pattern[s]]
        source_term = e_source_kind[kind[s]] + e_strategy[strategy[s] if kind[s] >= 0 else -1]
        for k in range(K):
            if p_pair[k, s] <= 0:  # never refreshed (unused pair slots)
                continue
            a, b = source[k, s], target[k, s]
            e = pair_coef  # ``PAIR_STATE_FEATURES``' order
            value = (e_bias + e[0] * g[k] + e[1] * g_ann[k] + e[2] * g_age[k] + e[3] * g[reverse[k, s]] + e[4] * d[a]
                     + e[5] * d[b])  # fmt: skip
            action = ((source_term if supported[a, s] else 0.0) + (e_target_kind[kind[s]] if supported[b, s] else 0.0)
                      + talk * e_scalars[2])  # fmt: skip
            g_next[k] = value + action * effect_scale
        # -- OutcomeModelV1.sample's noise, clipped
        for i in range(m):
            if p_emotion[i, s] <= 0:
                continue
            if sample:
                d_next[i] += sigma[h] * z[i, s]
            d_next[i] = min(max(d_next[i], 0.0), 1.0)
        for k in range(K):
            if p_pair[k, s] <= 0:
                continue
            if sample:
                g_next[k] += e_scalars[3] * z[pair_cell[k, s], s]
            g_next[k] = min(max(g_next[k], 0.0), 1.0)
        # -- the next speaker (``next_speakers``)
        if replies[s]:
            running = 0.0
            for i in range(m):
                running += weights[i, s] if supported[i, s] else 0.0
                cdf[i] = running
            for i in range(m):
                cdf[i] = cdf[i] / running
        else:
            for i in range(m):
                cdf[i] = speaker_cdf[i, s]
        speaker = 0
        for i in range(m):
            if cdf[i] <= speaker_uniform[s]:
                speaker += 1
        # -- the refreshes and the clock (``settle``), then Eq. 14 (``objective``)
        moved = clock + 1 + (1 if speaks[s] else 0)
        d_sum, d_max, g_sum = 0.0, 0.0, 0.0
        for i in range(m):
            if u[i, s] < p_emotion[i, s]:
                distress[i, s], emotion_row[i, s] = d_next[i], moved
            d_sum += distress[i, s]
            d_max = max(d_max, distress[i, s])
        for k in range(K):
            if u[pair_cell[k, s], s] < p_pair[k, s]:
                g_raw[k, s], viewpoint_row[k, s] = g_next[k], moved
            g_sum += g_raw[k, s]
        row[s] = moved + (1 if intervene[s] and not speaks[s] else 0)
        last_speaker[s] = speaker
        group[s] = 1.0 - d_sum * per_person[s] - tension_weight * g_sum * per_pair[s] - lam * d_max


prange = range  # numba's ``prange`` where ``advance_threads`` is compiled (``compiled_kernels``)


def advance_threads(threads, *args):
    """``advance_loop`` on ``threads`` blocks of sessions at once (numba's ``prange``, compiled with
    ``parallel=True``; ``args``: its arguments after ``begin, end``). A session is computed by one block alone, in
    the same order, so the results are the single thread's, bit for bit."""
    N = args[0].shape[1]
    for t in prange(threads):
        advance_loop(t * N // threads, (t + 1) * N // threads, *args)


def draw_cells(rng, cells, normal, out):
    """``RescueSimVectorEnvV1._draw`` into ``out`` (W + 1, k): one number per used cell (cell j < ``cells[s]``),
    cell j of every session, then cell j + 1; the unused cells and the last row 0. Normals or uniforms."""
    W, k = out.shape[0] - 1, out.shape[1]
    for j in range(W):
        for s in range(k):
            if j < cells[s]:
                out[j, s] = rng.standard_normal() if normal else rng.random()
            else:
                out[j, s] = 0.0
    for s in range(k):
        out[W, s] = 0.0


def draw_step(rng, cells, speaks, reply_rate, sample, z, replies, speaker_uniform, u):
    """A step's draws in ``RescueSimVectorEnvV1``'s order (its "Random numbers"), written into the arrays: F1's
    normals ``z`` when ``sample``, one reply draw per session whose therapist supports someone (``replies``: below
    ``reply_rate``), one speaker uniform per session, the refreshes' uniforms ``u``. One call, so that the generator
    is handed to numba once a step (passing it costs ~8 us)."""
    if sample:
        draw_cells(rng, cells, True, z)
    for s in range(speaks.shape[0]):
        replies[s] = rng.random() < reply_rate if speaks[s] else False
    for s in range(speaks.shape[0]):
        speaker_uniform[s] = rng.random()
    draw_cells(rng, cells, False, u)


def observe_cells(rng, noise, cells, n, distress_raw, g_raw, pair_cell, readings, distress, stance):
    """``RescueSimVectorEnvV1._observe``'s perception, written into ``readings`` (k, W + 1), one row per session:
    its cells' values (distress in cells 0 .. n-1, each viewpoint in its pair slot's cell, else 0) plus ``noise``
    times the cells' normals (drawn here as ``draw_cells`` draws them, when ``noise`` > 0), clipped, in tenths
    (``batch.perceive``); ``distress`` (k, P): the n participants' distress readings; ``stance`` (k, P, P): i's
    view of j at [s, i, j], 0 on the diagonal. Both float32, written whole (0 elsewhere). Session-major, unlike
    the state: a session's cells are one cache line or three, where (W + 1, k) rows 8 KiB apart at k = 1024 share
    one L1 set and evict each other (measured: 1.9x slower)."""
    k, W = readings.shape[0], readings.shape[1] - 1
    if noise > 0:
        draw_cells(rng, cells, True, readings.T)
    K = pair_cell.shape[0]
    pair_normals = np.zeros(K)
    for s in range(k):
        ns, used = n[s], cells[s]
        cell = readings[s]  # the normals, then the readings
        for slot in range(K):  # a viewpoint's cell reads its value, not 0 (unused slots' cells are W: the last)
            pair_normals[slot] = cell[pair_cell[slot, s]] if noise > 0 else 0.0
        for c in range(used):
            x = distress_raw[c, s] if c < ns else 0.0
            cell[c] = _tenths(x + noise * cell[c] if noise > 0 else x)
        for slot in range(K):
            c = pair_cell[slot, s]
            if c < W:
                x = g_raw[slot, s]
                cell[c] = _tenths(x + noise * pair_normals[slot] if noise > 0 else x)
        for c in range(used, W + 1):  # the unused cells' readings are 0
            cell[c] = 0.0
        distress[s] = 0.0
        stance[s] = 0.0
        for i in range(ns):
            distress[s, i] = cell[i]
            for j in range(ns):
                if i != j:
                    stance[s, i, j] = cell[ns + i * ns + j]


def place_columns(out, table, rows, index):
    """``out[:, rows] = table[:, index]`` (2-D): ``batch.Placement.copy`` without its flat indices."""
    for r in range(out.shape[0]):
        for k in range(rows.shape[0]):
            out[r, rows[k]] = table[r, index[k]]


class ColumnCopy:
    """``batch.Placement`` (what ``Arrays.assign`` copies a reset's columns with) by a compiled ``place_columns``."""

    def __init__(self, place: Callable, rows: np.ndarray, index: np.ndarray) -> None:
        self._place, self.rows, self.index = place, rows, index

    def copy(self, out: np.ndarray, table: np.ndarray) -> None:
        self._place(out, table, self.rows, self.index)


def _tenths(x):
    """``batch.perceive``'s reading of a value plus its noise: clipped to [0, 1], in tenths."""
    return np.rint(min(max(x, 0.0), 1.0) * 10.0) / 10.0


@dataclass(frozen=True)
class Kernels:
    """The native vector env's compiled pieces, in the order a step calls them: the decoding (``prepare_loop``),
    the draws (``draw_step``), F1 and pi_b (``advance_loop``, or ``advance_threads`` on several threads), the
    counts and rewards (``record_loop``), a reset's copies (``place_columns``) and the perception
    (``observe_cells``). ``python()`` gives the plain Python functions (what numba compiles; the tests run them),
    ``compiled_kernels()`` the compiled ones."""

    prepare: Callable
    draws: Callable
    advance: Callable
    advance_threads: Callable
    record: Callable
    observe: Callable
    place: Callable

    @classmethod
    def python(cls) -> Kernels:
        return cls(prepare_loop, draw_step, advance_loop, advance_threads, record_loop, observe_cells, place_columns)


@cache
def compiled_kernels() -> Kernels | None:
    """``Kernels`` compiled with numba (cached on disk by numba), or None when numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    jit = numba.njit(cache=True)
    draw = jit(draw_cells)
    observe = _jitted(jit, observe_cells, draw_cells=draw, _tenths=jit(_tenths))
    advance = jit(advance_loop)
    # compiled at its first call (threads > 1 only): numba's thread pool starts then
    threads = _jitted(numba.njit(cache=True, parallel=True), advance_threads, advance_loop=advance, prange=numba.prange)
    return Kernels(jit(prepare_loop), _jitted(jit, draw_step, draw_cells=draw), advance, threads, jit(record_loop),
                   observe, jit(place_columns))  # fmt: skip


def _jitted(jit: Callable, function: Callable, **helpers: Callable) -> Callable:
    """``function`` compiled with the compiled ``helpers`` it calls: numba types a called global when it compiles,
    so the global must be a compiled function there (the module's own stay plain Python, for ``Kernels.python``)."""
    scope = {**function.__globals__, **helpers}
    return jit(types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__))


__all__ = [
    "COMPILED_GROUPS",
    "COMPILED_SCALARS",
    "ColumnCopy",
    "CompiledModels",
    "Kernels",
    "advance_loop",
    "advance_threads",
    "compiled_kernels",
    "draw_cells",
    "draw_step",
    "observe_cells",
    "place_columns",
    "prepare_loop",
    "record_loop",
]
