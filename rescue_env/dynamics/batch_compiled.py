"""The native vector env's step as one loop per session, compiled with numba when it is installed (optional:
``pip install -e ".[fast]"``): an accelerator of ``rescue_env.dynamics.batch``, whose numpy functions stay the
reference (``tests/test_sim_v1_vector.py`` holds the two to each other; ``advance_loop`` also runs as plain Python).

Why: at N = 1024 the numpy step (``batch``) is ~250 array operations of 1-5 us each (most over a short first axis,
where numpy's per-call cost dominates) plus ~0.2 ms of random numbers; that stays near 1 ms a step, twice the
budget of 0.1x CartPoleVectorEnv. The same arithmetic written as one loop per session, compiled with numba when it
is installed (``compiled_advance``), does F's point, F1, pi_b, the speakers and the refreshes in a few tens of
microseconds. It is an accelerator only: ``advance_loop`` is plain Python (and slow), the numpy functions stay the
reference, and the tests hold the two to each other (``tests/test_sim_v1_vector.py``). The random numbers are drawn
by the caller, in the reference's order, so the draws do not depend on which runs. (Measured at N = 1024: ~0.2 ms,
not compute but memory: a session reads ~100 rows of (m, N) arrays whose rows are 8 KiB apart, so they share one L1
cache set and evict each other; a session-major or padded layout would be the next step.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from rescue_env.dynamics.batch import F1Batch, _kind_sizes

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

    @classmethod
    def of(cls, f1: F1Batch, slots: int) -> CompiledModels:
        col = f1._col
        return cls(
            f1.intercept.copy(), np.ascontiguousarray(f1._state_coef),
            np.ascontiguousarray(f1.table[:, [col[name] for name in COMPILED_SCALARS]]),
            tuple(np.ascontiguousarray(f1._groups[name]) for name in COMPILED_GROUPS), f1.sigma.copy(),
            f1._pair_coef.copy(), np.array([f1.e_intercept, f1.e["family"], f1.e["therapist_speaks"], f1.sigma_g]),
            (f1.e_pattern, f1.e_source_kind, f1.e_target_kind, f1.e_strategy), np.asarray(_kind_sizes(slots)),
        )  # fmt: skip


def advance_loop(
    # the state (written: the sessions' values, rows, clock and last speakers) and the episodes' constants
    distress, emotion_row, g_raw, viewpoint_row, row, last_speaker,
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
    for s in range(N):
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
        for i in range(m):
            others = 0.0
            for j in range(m):
                if j != i:
                    others = max(others, d[j])
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
            a, b = source[k, s], target[k, s]
            e = pair_coef  # ``PAIR_STATE_FEATURES``' order
            value = (e_bias + e[0] * g[k] + e[1] * g_ann[k] + e[2] * g_age[k] + e[3] * g[reverse[k, s]] + e[4] * d[a]
                     + e[5] * d[b])  # fmt: skip
            action = ((source_term if supported[a, s] else 0.0) + (e_target_kind[kind[s]] if supported[b, s] else 0.0)
                      + talk * e_scalars[2])  # fmt: skip
            g_next[k] = value + action * effect_scale
        # -- OutcomeModelV1.sample's noise, clipped
        for i in range(m):
            if sample:
                d_next[i] += sigma[h] * z[i, s]
            d_next[i] = min(max(d_next[i], 0.0), 1.0)
        for k in range(K):
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


@cache
def compiled_advance():
    """``advance_loop`` compiled with numba (cached on disk by numba), or None when numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(cache=True)(advance_loop)


__all__ = ["COMPILED_GROUPS", "COMPILED_SCALARS", "CompiledModels", "advance_loop", "compiled_advance"]
