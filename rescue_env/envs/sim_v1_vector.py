r"""``RescueSim-v1`` natively vectorised: N closed-loop sessions stepped together with array operations
(``gym.make_vec("RescueSim-v1", num_envs=N, vectorization_mode="vector_entry_point")``). See
``RescueSimVectorEnvV1`` for the specification."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rescue_env.dynamics.batch import (
    Ages,
    Arrays,
    BehaviourBatch,
    ColumnCopier,
    F1Batch,
    Fixed,
    Placement,
    Recent,
    Sessions,
    Supports,
    behaviour_features,
    next_speakers,
    objective,
    perceive,
    point,
    settle,
    stack,
    supports,
)
from rescue_env.dynamics.batch_compiled import ColumnCopy, CompiledModels, Kernels, compiled_kernels
from rescue_env.dynamics.behaviour import SINCE_CAP, UNIFORM_MIX
from rescue_env.dynamics.outcome_v1 import HISTORY
from rescue_env.dynamics.simulation import describe_participant
from rescue_env.envs.replay import check_reset_options
from rescue_env.envs.sim import TEXT_CHARS, SimEpisode
from rescue_env.envs.sim_v1 import RescueSimEnvV1
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
TEXT_CACHE = 1 << 18
"""Most ``text`` observations kept by their readings (a few bytes of key each; cleared when full)."""


def autoreset_mode_of(value: str | AutoresetMode) -> AutoresetMode:
    """``NEXT_STEP`` or ``SAME_STEP`` from the enum, its value (``"NextStep"``) or its name in any case
    (``"same_step"``)."""
    if isinstance(value, str):
        spelled = value.replace("_", "").lower()
        value = next((m for m in AutoresetMode if m.value.lower() == spelled), value)
    if value not in AUTORESET_MODES:
        raise ValueError(f"autoreset_mode must be AutoresetMode.NEXT_STEP or SAME_STEP, got {value!r}")
    return AutoresetMode(value)


class RescueSimVectorEnvV1(VectorEnv):
    r"""
    ## Description

    ``num_envs`` sessions of ``RescueSim-v1`` (``RescueSimEnvV1``: its docstring is the specification of each
    session) stepped at once: F1's draw, the behaviour prior, the next speakers, the refreshes, Eq. 14 and the
    perceived state are each a few array operations over all sessions (``rescue_env.dynamics.batch``: F1 and
    :math:`\pi_b` are linear in their features, App. B / Eq. 12-14, so a step is batched products). Dynamics,
    rewards, episode ends and spaces are ``RescueSim-v1``'s, so the id is the same: ``gym.make_vec("RescueSim-v1",
    num_envs=N, vectorization_mode="vector_entry_point")``.

    ## Spaces

    ``single_observation_space`` and ``single_action_space`` are ``RescueSim-v1``'s; ``observation_space`` and
    ``action_space`` are their ``batch_space``: ``Box`` and ``MultiBinary`` keys gain a leading axis of
    ``num_envs``, ``Discrete`` keys become ``MultiDiscrete``, ``Text`` keys a ``Tuple`` of ``num_envs`` strings.
    ``text=False`` leaves the ``text`` key out (of both): it is the one part of a step done in Python per session
    (each text is looked up by its readings, and built from cached sentences for a new one), and learners that
    read arrays have no use for it.

    ## Autoreset

    ``metadata["autoreset_mode"]`` is Gymnasium 1.x's default ``AutoresetMode.NEXT_STEP``: the step after a
    session's episode ends resets that session, ignores its action, and returns the first observation of its next
    episode with reward 0 and ``terminated = truncated = False``; that session's info is ``reset``'s
    (``sample_id``, ``scenario``, ``participants``, ``member``). ``autoreset_mode=AutoresetMode.SAME_STEP`` (or
    ``"same_step"``) resets in the step that ends the episode: the final observation and info go to
    ``info["final_obs"]`` (an object array of per-session ``dict``s) and ``info["final_info"]``, as SB3's
    ``VecEnv`` needs them (``policies.sb3_vec``). Infos follow ``SyncVectorEnv``'s layout: one array per key with
    the ``_key`` mask of the sessions that have it, ``episode`` (the summary of ``RescueSim-v1``) nested likewise.

    ## Random numbers

    One generator for all sessions (``np_random``, seeded by ``reset(seed=...)`` as ``RescueSim-v1``'s is). A
    step draws, with one call each and in this order: F1's normals (n + n x n per session: distress, then G
    row-major, as ``OutcomeModelV1.sample``), the reply draws of the sessions whose therapist supports someone, one
    speaker draw per session, the refreshes' uniforms (n + n x n per session), the conversations of the sessions
    being reset, the perception's normals (n + n x n per session), then the ensemble members of the sessions reset.
    Within a call the sessions take turns cell by cell (cell j of every session, then cell j + 1). With one session
    this is ``RescueSim-v1``'s order, so ``num_envs=1`` draws the same numbers as ``gym.make_vec("RescueSim-v1",
    num_envs=1, vectorization_mode="sync")`` (i.e. ``RescueSim-v1`` reset with the same seed) and plays the same
    episodes. With more sessions, the dynamics' numbers are drawn for every session, also those being reset at
    that step (theirs are not used), unless none steps.

    **What is not bit-identical**: F1's and :math:`\pi_b`'s linear predictors here sum the same terms in another
    order than ``OutcomeModelV1.raw``'s and ``LogitHead``'s matrix products (each episode's constant features
    folded into a bias), so the rewards, the ``info`` values and the simulated state agree with ``RescueSim-v1`` to
    about 1e-15, not to the bit. Everything discrete -- the conversations, speakers, refreshes, ensemble members
    and episode ends -- and the observations (readings in tenths, and their words) are the same (tested at
    ``num_envs=1`` on every option and on the release; for N sessions, the distribution of a fixed and of a random
    policy's per-step returns against N single envs, with controls that a different beta or F1 fails the test).

    ## Arguments

    ``num_envs``; ``autoreset_mode`` (``NEXT_STEP`` default, ``SAME_STEP``; or ``"next_step"``, ``"same_step"``);
    ``text`` (True: the ``text`` observation, as ``RescueSim-v1``); ``compiled`` (None: the step -- the decoding,
    the draws, F's point, F1, pi_b, the speakers, the refreshes, the counts -- and the perception by the loops of
    ``batch_compiled`` compiled with numba when numba is installed, else numpy; True: numba required; False: numpy;
    never with ``penalty``, whose ensemble spread is numpy's; the two agree to about 1e-15, the draws and the
    observations are the same); ``threads`` (default 1: F1 and pi_b's loop on ``threads`` blocks of sessions at
    once, with numba's thread pool; compiled only; the results are one thread's bit for bit); every argument of
    ``RescueSimEnvV1`` except ``render_mode`` (not rendered) and ``info_level="full"`` (its details are per
    session: use ``vectorization_mode="sync"``).
    ``reset(options={"sample_id": ID})`` starts every session from conversation ID, ``{"sample_id": [ID, ...]}``
    (``num_envs`` of them) each from its own.

    >>> import gymnasium as gym, rescue_env
    >>> envs = gym.make_vec("RescueSim-v1", num_envs=8, vectorization_mode="vector_entry_point")
    >>> observations, infos = envs.reset(seed=0)
    >>> observations["distress"].shape, len(observations["text"])
    ((8, 6), 8)

    ## Speed

    ``scripts/bench_env.py --native 1024 256`` times a step against Gymnasium's ``CartPoleVectorEnv`` (target 0.1x
    its env-steps/s). At N = 1024 on the release a compiled step is about 0.7 ms: ~0.12 ms of random numbers (n +
    n x n normals twice and uniforms once per session: the single env's contract, drawn by numba's ``Generator``,
    the same numbers as numpy's), ~0.15-0.2 ms of F1 and pi_b's loop (``threads=2`` halves it), ~0.1 ms of the
    other loops, ~0.03 ms of pi_b's weights (one product and one vectorised exp), and the Python around them: the
    resets (about N / 18 sessions a step), the infos and the observation's dict. ``text=True`` adds the words,
    looked up per session in Python.

    ## Version History

    * v1, native vector env (issue 27): the sessions of ``RescueSim-v1`` (``RescueSimEnvV1``), batched; what a
      session observes, is rewarded and how its episodes end do not change, so the id stays ``RescueSim-v1``.
    * ``compiled`` (issue 27): the step compiled with numba when it is installed (``rescue-env[fast]``): the same
      draws in the same order, the same observations, rewards within about 1e-15 of the numpy step (tested), so
      the id and the RNG contract stay. Later the decoding, the draws, the counts, the perception and a reset's
      copies too, and ``threads``: the same numbers again (tested), so the id stays.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        text: bool = True,
        compiled: bool | None = None,
        threads: int = 1,
        **kwargs: Any,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        mode = autoreset_mode_of(autoreset_mode)
        if kwargs.get("render_mode") is not None:
            raise ValueError("the native vector env does not render: use vectorization_mode='sync' to render")
        if kwargs.get("info_level", "basic") != "basic":
            raise ValueError("info_level='full' is per session: use vectorization_mode='sync' for its details")
        self.env = RescueSimEnvV1(**kwargs)  # every argument checked, F1, pi_b and beta built (cached per process)
        self.num_envs = int(num_envs)
        self.autoreset_mode = mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.text = bool(text)
        single = self.env.observation_space
        if not self.text:
            single = spaces.Dict({k: v for k, v in single.spaces.items() if k != "text"})
        self.single_observation_space = single
        self.single_action_space = self.env.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.f1 = F1Batch(self.env.outcome_model)
        self.pi_b = BehaviourBatch(self.env.behaviour)
        # the compiled step (``batch_compiled.advance_loop``): with numba, unless asked not to; not with the uncertainty
        # penalty (its ensemble spread is the numpy path's)
        kernels = compiled_kernels() if compiled is not False else None
        if compiled and kernels is None:
            raise ValueError("compiled=True needs numba (pip install -e '.[fast]'); compiled=None uses it if installed")
        if isinstance(threads, bool) or not isinstance(threads, int | np.integer) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        self.threads = int(threads)
        self._build_tables()
        self._allocate()
        self._use_kernels(kernels if not self.env.penalty else None)
        if self.threads > 1 and not self.compiled:
            raise ValueError("threads > 1 runs the compiled step: it needs numba and compiled=None or True, no penalty")

    # ----- the episodes, as tables (one row per start) ----------------------------------------------------------

    def _build_tables(self) -> None:
        env = self.env
        episodes: list[SimEpisode] = [env.episode(sample) for sample in env.samples]
        self.episodes = episodes
        S, P = len(episodes), env.max_participants
        self._sessions0, self._fixed0 = stack(
            [e.start for e in episodes], [e.dynamics for e in episodes], [e.valid_strategies for e in episodes]
        )  # the starts, one column per episode (``batch``'s layout: the session is the last axis)
        t, f = self._sessions0, self._fixed0
        m, K = f.present.shape[0], f.pair.shape[0]
        self.slots, self.pair_slots, self.width = m, K, m + m * m
        # packed (``Arrays.packed``): a reset copies each table's columns with one copy per dtype
        self._cells0 = _cells_table(f, self.width, P).packed()
        self._fixed0 = f = f.packed()
        self._sessions0 = t = t.packed()
        limits = [len(e.rows) if env.max_steps is None else min(len(e.rows), env.max_steps) for e in episodes]
        limit = np.array(limits, dtype=np.int64)
        self._counters0 = Counters.start(np.array([e.scenario_index for e in episodes], dtype=np.int64), limit, m)
        tables = (self._cells0, self._fixed0, self._sessions0, self._counters0)
        self._pack_rows = max(table.pack_rows() for table in tables)
        # an age is at most the latest row clock: the opening's end plus two rows per step
        self.ages = Ages(env.dynamics.state, int((t.row + 2 * limit).max()) + 1)
        # what a session observes that its episode fixes (copied per session at a reset)
        masks = {
            "participants": np.array([e.present for e in episodes], dtype=np.int8).reshape(S, P),
            "target_mask": np.array([e.target_mask for e in episodes], dtype=np.int8).reshape(S, P + 1),
            "strategy_mask": np.array([e.strategy_mask for e in episodes], dtype=np.int8),
        }
        self._masks0 = np.hstack(list(masks.values()))  # one row per episode, the three masks side by side
        ends = np.cumsum([mask.shape[1] for mask in masks.values()])
        self._mask_columns = {key: slice(end - mask.shape[1], end) for (key, mask), end in zip(masks.items(), ends)}
        self._contexts0 = np.array([e.context for e in episodes], dtype=object)
        self._sample_ids = np.array([e.sample_id for e in episodes], dtype=object)
        self._participants = [tuple(e.participants) for e in episodes]
        self._scenarios = np.array([e.scenario for e in episodes], dtype=object)
        self._index = {e.sample_id: k for k, e in enumerate(episodes)}
        # The text observation is looked up by (episode, readings): an int code per session when it fits in 63 bits
        # (the readings' digits: a distress reading in 11 tenths, a stance in 3 bands), else the digits' bytes.
        self._text_code = max(np.log2(S) + n * np.log2(11) + n * (n - 1) * np.log2(3) for n in f.n) < 62
        self._texts: dict[Any, str] = {}
        self._sentences: dict[int, str] = {}

    def _use_kernels(self, kernels: Kernels | None) -> None:
        """Steps and observations by ``kernels`` (``batch_compiled``: compiled, or its plain Python in the tests);
        None: the numpy step."""
        self._kernels = kernels
        self.compiled = kernels is not None
        if kernels is None:
            self._reindex()
        else:
            self._models = CompiledModels.of(self.f1, self.slots)
            N = self.num_envs
            self._numbers = np.empty((2, self.width + 1, N))  # F1's normals, the refreshes' uniforms
            self._replies, self._speaker_uniform = np.empty(N, dtype=bool), np.empty(N)
            m = self.slots
            # the decoded action, F1's Recent and pi_b's features (``prepare_loop``)
            self._scratch = (np.empty(N, dtype=bool), np.empty((m, N), dtype=bool), np.empty(N, dtype=np.int64),
                             np.empty(N, dtype=np.int64), np.empty(N), np.empty((m, N)), np.empty((9, N)))  # fmt: skip

    def _reindex(self) -> None:
        self._f.reindex()
        self._c.reindex()

    def _allocate(self) -> None:
        N, m = self.num_envs, self.slots
        self._s = Sessions.zeros_like(self._sessions0, N)
        self._f = Fixed.zeros_like(self._fixed0, N)
        self._f.n[:] = 1  # read as one participant until the first reset
        self._c = Cells.zeros_like(self._cells0, N)
        self._columns = np.arange(N)
        self._masks = np.zeros((N, self._masks0.shape[1]), dtype=np.int8)
        self._observed = {key: self._masks[:, columns] for key, columns in self._mask_columns.items()}  # views
        self._k = k = Counters.zeros_like(self._counters0, N)
        k.limit[:], k.counts[2] = 1, SINCE_CAP
        self._scenario, self._episode, self._limit = k.scenario, k.episode, k.limit
        self._counts, self._sums = k.counts, k.sums
        self._steps, self._interventions, self._since = self._counts
        self._return, self._discounted, self._group_sum, self._log_pi_sum = self._sums
        self._ring_speaks, self._ring_supported = k.ring_speaks, k.ring_supported
        # the flat index of participant i of session s in a (m, N) array (the rings' rows are such arrays)
        self._slot_at = np.arange(m)[:, None] * N + self._columns
        self._heads: int | np.ndarray = np.zeros(N, dtype=np.int64) if self.env.ensemble == "member" else 0
        self._member = np.full(N, -1, dtype=np.int64)
        self._contexts = np.full(N, "", dtype=object)
        self._used: Layout | None = None  # the cells' ``Layout``, per set of episodes
        self._autoreset = np.zeros(N, dtype=bool)
        self._started = False

    # ----- random numbers in the single env's layout ------------------------------------------------------------

    def _layout(self, rows: np.ndarray | None = None) -> Layout:
        """``Layout`` of every session's cells (``rows``: of those), found once per set of episodes (``_start``
        forgets it)."""
        if rows is not None:
            return Layout.of(self._c.used[:, rows], self._c.stance_to[:, rows], self.env.max_participants)
        if self._used is None:
            self._used = Layout.of(self._c.used, self._c.stance_to, self.env.max_participants)
        return self._used

    def _draw(self, normal: bool, rows: np.ndarray | None = None) -> np.ndarray:
        """(W + 1, k): one call of n + n x n numbers per session (``rows``: of those), as ``RescueSimEnvV1`` draws
        them for F1's noise, the refreshes and the perception (distress of slots 0 .. n-1, then G row-major), put in
        cell-major order: cell j of session s at ``[j, s]`` (unused cells 0), and a last row of zeros (``Cells``'
        "none"). The cells are filled in row-major order (cell j of every session, then cell j + 1), so with one
        session the numbers are the single env's, in its order; with more, the sessions take turns cell by cell."""
        layout = self._layout(rows)
        draw = self.np_random.standard_normal if normal else self.np_random.random
        out = np.zeros((self.width + 1, self.num_envs if rows is None else rows.size))
        out.ravel()[layout.used] = draw(layout.count)
        return out

    def _pairs_of(self, numbers: np.ndarray) -> np.ndarray:
        """(K, N): the numbers of each pair slot's cell."""
        return numbers.ravel()[self._c.pair_at]

    # ----- gymnasium API ----------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise ValueError(f"seed must be one int (the sessions share one generator) or None, got {seed!r}")
        super().reset(seed=None if seed is None else int(seed))
        options = check_reset_options(options)
        rows = np.arange(self.num_envs)
        self._start(rows, self._chosen_starts(rows, options.get("sample_id")))
        self._autoreset[:] = False
        self._started = True
        observation = self._observe()
        self._draw_members(rows)
        return self._in_space_order(observation), self._reset_info(rows)

    def step(self, actions: Mapping[str, Any]):
        if not self._started:
            raise RuntimeError("call reset() first")
        intervene, bits, strategy = self._check(actions)
        N = self.num_envs
        resetting = self._autoreset.copy()
        stepping = ~resetting
        rewards = np.zeros(N)
        truncated = np.zeros(N, dtype=bool)
        info: dict[str, Any] = {}
        if stepping.any():
            rewards, terms = self._advance(intervene, bits, strategy)
            rewards = np.where(stepping, rewards, 0.0)
            truncated = stepping & (self._steps >= self._limit)
            info = self._step_info(stepping, truncated, terms)
        if resetting.any():
            rows = np.flatnonzero(resetting)
            self._start(rows, self._chosen_starts(rows, None))
        observation = self._observe()
        if resetting.any():
            self._draw_members(rows)
            info.update(self._reset_info(rows))  # a reset's keys are never a step's
        if self.autoreset_mode == AutoresetMode.SAME_STEP and truncated.any():
            observation, info = self._reset_same_step(observation, info, truncated)
            self._autoreset[:] = False
        else:
            self._autoreset = truncated
        return self._in_space_order(observation), rewards, np.zeros(N, dtype=bool), truncated, info

    def _in_space_order(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The batch's keys in the space's order (``SyncVectorEnv``'s); a session's ``final_obs`` keeps the
        single env's order."""
        return {key: observation[key] for key in self.single_observation_space.spaces}

    def close_extras(self, **kwargs: Any) -> None:
        env = getattr(self, "env", None)  # None when the constructor refused its arguments
        if env is not None:
            env.close()

    # ----- one step ---------------------------------------------------------------------------------------------

    def _check(self, actions: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batched ``Dict`` action as arrays, each checked against the space (one-line ``ValueError``s)."""
        N, P = self.num_envs, self.env.max_participants
        if not isinstance(actions, Mapping) or set(actions) != {"intervene", "target", "strategy"}:
            keys = sorted(map(str, actions)) if isinstance(actions, Mapping) else type(actions).__name__
            raise ValueError(f"actions must be a dict with exactly intervene, target and strategy, got {keys}")
        out = []
        for key, shape, high in (("intervene", (N,), 2), ("target", (N, P + 1), 2),
                                 ("strategy", (N,), len(ALL_STRATEGY_KEYS))):  # fmt: skip
            value = np.asarray(actions[key])
            if value.shape != shape or value.dtype.kind not in "iub":
                raise ValueError(f"actions[{key!r}] must be integers of shape {shape}, got {value.dtype} {value.shape}")
            value = value.astype(np.int64)
            # one pass for both bounds: a negative value, read unsigned, is above any bound
            if value.size and value.view(np.uint64).max() >= high:
                raise ValueError(f"actions[{key!r}] outside [0, {high}): {value.min()} .. {value.max()}")
            out.append(value)
        intervene, bits, strategy = out
        return intervene.astype(bool), bits.astype(bool), strategy

    def _advance(self, intervene: np.ndarray, bits: np.ndarray, strategy: np.ndarray):
        """Every session one step on (``RescueSimEnvV1.step``): the reward and the step's info terms."""
        if self._kernels is not None:
            return self._advance_compiled(intervene, bits, strategy)
        env, f = self.env, self._f
        m, P = self.slots, env.max_participants
        columns = self._columns
        # decode (``replay.decode_action``): the group bit = everyone; bits of absent slots ignored and counted; a
        # strategy outside the scenario's taxonomy is none (-1), counted
        absent = (bits[:, :P] & (self._observed["participants"] == 0)).any(axis=1)
        recipients = np.where(bits[:, P], f.present, bits[:, :m].T & f.present)
        valid = f.valid[strategy, columns]
        a: Supports = supports(intervene, recipients, np.where(valid, strategy, -1), f.n)
        h = Recent(self._ring_speaks.sum(axis=0) / HISTORY, self._ring_supported.sum(axis=0) / HISTORY)
        log_pi, group, uncertainty = self._dynamics(intervene, a, h)
        # the therapist's last decisions (F1's History, pi_b's features), at each session's place in the rings
        slot = self._steps % HISTORY
        self._ring_speaks.ravel()[slot * self.num_envs + columns] = a.speaks
        self._ring_supported.ravel()[slot * (m * self.num_envs) + self._slot_at] = a.supported
        self._since[...] = np.where(a.speaks, 0, np.minimum(self._since + 1, SINCE_CAP))
        discount = env.gamma ** self._steps.astype(np.float64)
        self._steps += 1
        self._interventions += intervene
        group -= env.kappa * intervene
        reward = group + env.beta * log_pi
        if env.penalty:
            reward -= env.penalty * uncertainty
        self._return += reward
        self._discounted += reward * discount
        self._group_sum += group
        self._log_pi_sum += log_pi
        n_invalid = absent.astype(np.int64) + ~valid
        return reward, {"n_invalid": n_invalid, "group": group, "log_pi_b": log_pi}

    def _dynamics(self, intervene: np.ndarray, a: Supports, h: Recent):
        """(log pi_b, Eq. 14, F1's uncertainty) of the step, the sessions moved on (F1's draw, the next speakers,
        the refreshes): the reference, in numpy (``rescue_env.dynamics.batch``)."""
        env, s, f = self.env, self._s, self._f
        m = self.slots
        # the behaviour prior and F1 read the state before the step
        log_pi = self.pi_b.log_prob(behaviour_features(s, f, h.speaks, self._since), s, f, a)
        p = point(s, f, self.ages)
        d_next = self.f1.distress(p, f, a, h, self._heads, env.effect_scale)
        g_next = self.f1.viewpoint(p, f, a, env.effect_scale)
        uncertainty = self.f1.spread(p, f, a, h) if env.penalty else 0.0
        rng = self.np_random
        if env.outcome == "sample":  # OutcomeModelV1.sample: the heads' residual sd, n then n x n normals
            z = self._draw(normal=True)
            d_next += self.f1.sigma[self._heads] * z[:m]
            g_next += self.f1.sigma_g * self._pairs_of(z)
        np.clip(d_next, 0.0, 1.0, out=d_next)
        np.clip(g_next, 0.0, 1.0, out=g_next)
        replies = np.zeros(self.num_envs, dtype=bool)
        replies[a.speaks] = rng.random(int(a.speaks.sum())) < env.rates.reply_recipient
        speaker = next_speakers(f, a.supported, replies, rng.random(self.num_envs))
        u = self._draw(normal=False)
        settle(s, f, d_next, g_next, a.speaks, intervene, speaker, u[:m], self._pairs_of(u))
        group = objective(s.distress_raw, s.g_raw, f, env.dynamics.state.tension_weight, env.lam)
        return log_pi, group, uncertainty

    def _advance_compiled(self, intervene: np.ndarray, bits: np.ndarray, strategy: np.ndarray):
        """``_advance`` by the compiled loops (``batch_compiled.Kernels``, one call each): the same decoding, the
        same draws in the same order, pi_b's weights by the same numpy product; no uncertainty (the penalty's spread
        is the numpy path's)."""
        env, s, f, models, kernels, N = self.env, self._s, self._f, self._models, self._kernels, self.num_envs
        speaks, supported, kind, chosen, recent_speaks, recent_supported, x = self._scratch
        invalid, log_pi, group, reward = np.empty(N, dtype=np.int64), np.empty(N), np.empty(N), np.empty(N)
        kernels.prepare(
            intervene, bits, strategy, f.n, f.present, f.valid, self._observed["participants"], models.kinds,
            self._ring_speaks, self._ring_supported, s.distress_raw, s.g_raw, s.last_speaker, f.per_person,
            f.per_pair, f.family, self._since, SINCE_CAP,
            speaks, supported, kind, chosen, invalid, recent_speaks, recent_supported, x,
        )  # fmt: skip
        weights = self.pi_b.weights(x)  # one vectorised exp (``advance_loop``'s docstring)
        z, u = self._numbers
        replies, speaker_uniform = self._replies, self._speaker_uniform
        sample = env.outcome == "sample"
        kernels.draws(self.np_random, self._c.cells, speaks, env.rates.reply_recipient, sample, z, replies,
                      speaker_uniform, u)  # fmt: skip
        heads = self._heads if isinstance(self._heads, np.ndarray) else np.full(N, self._heads, dtype=np.int64)
        if self.threads == 1:
            advance = functools.partial(kernels.advance, 0, N)  # sessions 0 .. N - 1
        else:
            advance = functools.partial(kernels.advance_threads, self.threads)
        advance(
            s.distress_raw, s.emotion_row, s.g_raw, s.viewpoint_row, s.row, s.last_speaker,
            f.n, f.source, f.target, f.reverse, f.family, f.pattern, f.weights, f.p_emotion, f.p_pair,
            f.per_person, f.per_other, f.per_pair, f.valid_count, f.speaker_cdf, f.offered, f.kinds_offered,
            f.kind_base, self._c.pair_cell,
            intervene, speaks, supported, kind, chosen, recent_speaks, recent_supported, weights, heads,
            self.ages.table, self.ages.never, z, replies, speaker_uniform, u, sample,
            float(env.effect_scale), float(env.dynamics.state.tension_weight), float(env.lam),
            models.intercept, models.state, models.scalars, *models.groups, models.sigma, models.pair,
            models.e_scalars, *models.e_groups, models.kind_sizes, UNIFORM_MIX, log_pi, group,
        )  # fmt: skip
        kernels.record(
            intervene, speaks, supported, log_pi, group, self._ring_speaks, self._ring_supported, self._since,
            SINCE_CAP, self._steps, self._interventions, self._sums, float(env.gamma), float(env.kappa),
            float(env.beta), reward,
        )  # fmt: skip
        return reward, {"n_invalid": invalid, "group": group, "log_pi_b": log_pi}

    def _present_slots(self) -> np.ndarray:
        return self._observed["participants"] == 1

    # ----- starts -----------------------------------------------------------------------------------------------

    def _chosen_starts(self, rows: np.ndarray, sample_id: Any) -> np.ndarray:
        """The episode of each row: drawn with ``np_random`` (as ``RescueSimEnv.reset``), or asked for."""
        if sample_id is None:
            return self.np_random.integers(len(self.episodes), size=rows.size)
        ids = [sample_id] * rows.size if isinstance(sample_id, str) else list(sample_id)
        if len(ids) != rows.size:
            raise ValueError(f"options['sample_id'] needs one id or {rows.size} of them, got {len(ids)}")
        missing = sorted({i for i in ids if i not in self._index})
        if missing:
            raise ValueError(f"sample(s) {', '.join(map(str, missing))} are not starts of this env "
                             f"(starts={self.env.starts})")  # fmt: skip
        return np.array([self._index[i] for i in ids], dtype=np.int64)

    def _start(self, rows: np.ndarray, index: np.ndarray) -> None:
        if self._kernels is not None:
            place: ColumnCopier = ColumnCopy(self._kernels.place, rows, index)
        else:
            place = Placement(rows, index, self.num_envs, len(self.episodes), self._pack_rows)
        self._s.assign(rows, self._sessions0, index, place)
        self._f.assign(rows, self._fixed0, index, place)
        self._c.assign(rows, self._cells0, index, place)
        self._k.assign(rows, self._counters0, index, place)
        if self._kernels is None:  # the flat indices that only the numpy step reads
            self._reindex()
        self._masks[rows] = self._masks0[index]
        self._contexts[rows] = self._contexts0[index]
        self._used = None  # the participants per session changed

    def _draw_members(self, rows: np.ndarray) -> None:
        """``RescueSimEnvV1.reset``: one ensemble member per new episode (after the first observation's draws)."""
        members = self.f1.members
        if self.env.ensemble == "member" and members:
            self._member[rows] = self.np_random.integers(members, size=rows.size)
            self._heads[rows] = self._member[rows] + 1

    # ----- observations and infos -------------------------------------------------------------------------------

    def _observe(self, rows: np.ndarray | None = None) -> dict[str, Any]:
        """The observation of every session (``rows``: of those only), perceived as ``RescueSimEnv._observation``
        does: the n + n x n latest values (G 0 without a viewpoint) plus noise, clipped, in tenths, the diagonal
        0; absent slots 0. Computed on the draw's cells."""
        s, f = self._s, self._f
        select = slice(None) if rows is None else rows
        k = self.num_envs if rows is None else rows.size
        m, P = self.slots, self.env.max_participants
        readings, distress, stance = self._perceive(rows)
        episode = self._episode[select]
        last = s.last_speaker[select]
        observation: dict[str, Any] = {
            "context": tuple(self._contexts[select].tolist()),
        }
        if self.text:
            seen_d = np.where(f.present[:, select], readings[:m], 0.0)  # (m, k) in float64, as the single env's
            observation["text"] = self._words(episode, readings, seen_d, select)
        elapsed = np.empty((k, 2), dtype=np.float32)
        elapsed[:, 0], elapsed[:, 1] = self._steps[select], self._interventions[select]
        masks = self._masks[select].copy()  # one copy; the three keys are views of it
        columns = self._mask_columns
        observation.update(
            distress=distress,
            stance=stance,
            elapsed=elapsed,
            scenario=self._scenario[select].copy(),
            participants=masks[:, columns["participants"]],
            last_speaker=np.where(last < 0, P + 2, last),
            target_mask=masks[:, columns["target_mask"]],
            strategy_mask=masks[:, columns["strategy_mask"]],
        )
        return observation

    def _perceive(self, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The perceived cells (W + 1, k) of every session (``rows``: of those) and the observation's ``distress``
        (k, P) and ``stance`` (k, P, P)."""
        s, f, c = self._s, self._f, self._c
        select = slice(None) if rows is None else rows
        k = self.num_envs if rows is None else rows.size
        m, P = self.slots, self.env.max_participants
        noise = self.env.perception_noise
        if self._kernels is not None:  # the same draws and readings, one call
            readings = np.empty((k, self.width + 1))  # session-major: see ``observe_cells``
            distress, stance = np.empty((k, P), dtype=np.float32), np.empty((k, P, P), dtype=np.float32)
            self._kernels.observe(self.np_random, float(noise), c.cells[select], f.n[select], s.distress_raw[:, select],
                                  s.g_raw[:, select], c.pair_cell[:, select], readings, distress, stance)  # fmt: skip
            return readings.T, distress, stance
        # the cells' values: distress in cells 0 .. n-1 (absent slots hold 0), each viewpoint in its cell (unused
        # slots write their 0 into the row of zeros), else 0
        values = np.zeros((self.width + 1, k))
        values[:m] = s.distress_raw[:, select]
        if rows is None:
            values.ravel()[c.pair_at] = s.g_raw
        else:
            values[c.pair_cell[:, rows], np.arange(k)] = s.g_raw[:, rows]
        readings = perceive(values, noise, self._draw(normal=True, rows=rows) if noise > 0 else None)
        distress = np.zeros((k, P), dtype=np.float32)
        distress[:, :m] = np.where(f.present[:, select], readings[:m], 0.0).T
        # each stance cell's reading to its place (i's view of j); the diagonal and absent slots stay 0
        layout = self._layout(rows)
        stance = np.zeros((k, P, P), dtype=np.float32)
        stance.ravel()[layout.stance_to] = readings.ravel()[layout.stance_from]
        return readings, distress, stance

    def _words(self, episode: np.ndarray, readings: np.ndarray, seen_d: np.ndarray, select: Any) -> tuple[str, ...]:
        """``describe_levels`` of each session's readings, looked up by (episode, readings): the words depend on
        a distress reading's tenth and a stance's band only (three: ``simulation.STANCE_WORDS``), so keys recur; a
        new key's text is built from its participants' sentences (``describe_participant``), each looked up by
        (episode, slot, the participant's readings). ``readings``: the (W + 1, k) perceived cells."""
        c = self._c
        tenths = np.rint(readings[:-1] * 10.0).astype(np.int64)
        digits = np.where(c.is_level[:, select], tenths, (tenths >= 4) * 1 + (tenths >= 7))  # < .35, < .65, else
        if self._text_code:
            keys = ((digits * c.place[:, select]).sum(axis=0) + episode * c.span[select]).tolist()
        else:
            keys = [(e, row.tobytes()) for e, row in zip(episode.tolist(), (digits * (c.place[:, select] > 0)).T)]
        cache = self._texts
        get = cache.get
        texts = [get(key) for key in keys]
        missing = [k for k, found in enumerate(texts) if found is None]
        if missing:
            if len(cache) >= TEXT_CACHE:
                cache.clear()
            if len(self._sentences) >= TEXT_CACHE:
                self._sentences.clear()
            # the sentences' keys of the new texts' sessions only (a few per step once the common ones are cached)
            m, at = self.slots, np.array(missing)
            # (k', m, m): i's view of j (the cell of zeros for the diagonal and absent slots)
            cells = c.cell_map[..., select][..., at].transpose(2, 0, 1)
            new_g = readings.ravel()[cells * readings.shape[1] + at[:, None, None]]
            new_d, new_episode = seen_d[:, at], episode[at]
            levels = np.rint(new_d * 10.0).astype(np.int64)
            bands = np.rint(new_g * 10.0).astype(np.int64)
            bands = (bands >= 4) * 1 + (bands >= 7)
            rows_code = (bands @ 3 ** np.arange(m)).T  # (m, k): i's stances
            person = (((new_episode * m + np.arange(m)[:, None]) * 11 + levels) * 3**m + rows_code).T.tolist()
            for j, k in enumerate(missing):
                texts[k] = cache[keys[k]] = self._text_of(int(new_episode[j]), person[j], new_d[:, j], new_g[j])
        return tuple(texts)

    def _text_of(self, episode: int, person: list[int], seen_d: np.ndarray, seen_g: np.ndarray) -> str:
        """``describe_levels`` of one session's readings from its participants' sentences (``person``: their keys)."""
        e = self.episodes[episode]
        n = len(e.participants)
        sentences, parts = self._sentences, []
        for i in range(n):
            sentence = sentences.get(person[i])
            if sentence is None:
                sentence = sentences[person[i]] = describe_participant(
                    e.names, i, float(seen_d[i]), seen_g[i, :n].tolist()
                )
            parts.append(sentence)
        return " ".join(parts)[:TEXT_CHARS]

    def _step_info(self, stepping: np.ndarray, truncated: np.ndarray, terms: dict[str, np.ndarray]) -> dict:
        info: dict[str, Any] = {"step": self._steps - 1, "_step": stepping.copy()}
        for key, value in terms.items():
            info[key], info[f"_{key}"] = value, stepping.copy()
        if truncated.any():
            steps = np.maximum(self._steps, 1)
            d = np.where(self._f.present, self._s.distress_raw, -np.inf).max(axis=0)
            summary = {
                "return": self._return.copy(),
                "discounted_return": self._discounted.copy(),
                "length": self._steps.copy(),
                "per_step_return": self._return / steps,
                "group_return": self._group_sum.copy(),
                "per_step_group": self._group_sum / steps,
                "mean_log_pi_b": self._log_pi_sum / steps,
                "final_max_distress": d,
                "intervention_rate": self._interventions / steps,
                "calm": np.zeros(self.num_envs, dtype=bool),
            }
            episode: dict[str, Any] = {}
            for key, value in summary.items():
                episode[key], episode[f"_{key}"] = value, truncated.copy()
            info["episode"], info["_episode"] = episode, truncated.copy()
        return info

    def _reset_info(self, rows: np.ndarray) -> dict[str, Any]:
        """``RescueSimEnvV1.reset``'s info of ``rows`` as full-length arrays (their mask is the caller's)."""
        N = self.num_envs
        index = self._episode[rows]
        sample_id, scenario, participants = (np.empty(N, dtype=object) for _ in range(3))  # None-filled
        sample_id[rows], scenario[rows] = self._sample_ids[index], self._scenarios[index]
        names = self._participants
        for row, k in zip(rows.tolist(), index.tolist()):
            participants[row] = list(names[k])
        if self.env.ensemble == "member" and self.f1.members:
            member = np.zeros(N, dtype=np.int64)
            member[rows] = self._member[rows]
        else:
            member = np.full(N, None, dtype=object)
        mask = np.zeros(N, dtype=bool)
        mask[rows] = True
        info: dict[str, Any] = {}
        for key, value in (("sample_id", sample_id), ("scenario", scenario), ("participants", participants),
                           ("member", member)):  # fmt: skip
            info[key], info[f"_{key}"] = value, mask.copy()
        return info

    def _reset_same_step(self, observation: dict, info: dict, done: np.ndarray) -> tuple[dict, dict]:
        """``SAME_STEP``: the final observations and infos of the ``done`` sessions into ``final_obs`` and
        ``final_info``, then those sessions reset now (their observation is the next episode's first)."""
        rows = np.flatnonzero(done)
        N = self.num_envs
        final_obs = np.full(N, None, dtype=object)
        for row in rows.tolist():
            final_obs[row] = {key: _item(value[row]) for key, value in observation.items()}
        final_info = {key: (value.copy() if isinstance(value, np.ndarray) else value) for key, value in info.items()}
        # the step keys stay for the sessions that go on; the sessions reset get reset's keys (SyncVectorEnv)
        for key in [k for k in info if k.startswith("_")]:
            info[key] = info[key] & ~done
            if not info[key].any():  # only the sessions reset had it
                del info[key], info[key[1:]]
        self._start(rows, self._chosen_starts(rows, None))
        fresh = self._observe(rows)
        for key, value in fresh.items():
            if isinstance(value, tuple):
                merged = list(observation[key])
                for row, item in zip(rows.tolist(), value):
                    merged[row] = item
                observation[key] = tuple(merged)
            else:
                observation[key][rows] = value
        self._draw_members(rows)
        info["final_obs"], info["_final_obs"] = final_obs, done.copy()
        info["final_info"], info["_final_info"] = final_info, done.copy()
        info.update(self._reset_info(rows))
        return observation, info

    # ----- privileged accessors ---------------------------------------------------------------------------------

    def state(self) -> dict[str, np.ndarray]:
        """The true simulated state of every session (``RescueSimEnv.state`` per session, stacked): distress
        (N, max_participants) and G (N, max_participants, max_participants), latest values, 0 in absent slots and
        where there is no viewpoint; the row clock (N,)."""
        N, P, f = self.num_envs, self.env.max_participants, self._f
        distress = np.zeros((N, P))
        distress[:, : self.slots] = self._s.distress_raw.T
        g = np.zeros((N, P, P))
        sessions = np.broadcast_to(np.arange(N), f.pair.shape)
        g[sessions[f.pair], f.source[f.pair], f.target[f.pair]] = self._s.g_raw[f.pair]
        return {"distress": distress, "g": g, "row": self._s.row.copy()}

    def sample_ids(self) -> list[str]:
        """The conversation each session plays."""
        return self._sample_ids[self._episode].tolist()

    def last_speaker_slots(self) -> np.ndarray:
        """(N,): each session's last client speaker's slot, -1 for none (``RescueSimEnv.last_speaker_slot``)."""
        return self._s.last_speaker.copy()


@dataclass
class Counters(Arrays):
    """What a reset sets per session besides the dynamics (``Sessions``, ``Fixed``), packed so that it is one copy
    per dtype from a table of the episodes' starts: the episode, its scenario and step limit; steps, interventions
    and decision points since the therapist last spoke (``SINCE_CAP`` at a reset); the return, discounted return,
    Eq. 14's and log pi_b's sums; the rings of the therapist's last ``HISTORY`` decisions (F1's History)."""

    episode: np.ndarray  # (N,) int64 index into the env's episodes
    scenario: np.ndarray  # (N,) int64
    limit: np.ndarray  # (N,) int64 steps before the truncation
    counts: np.ndarray  # (3, N) int64 steps, interventions, since the therapist spoke
    sums: np.ndarray  # (4, N) float64
    ring_speaks: np.ndarray  # (HISTORY, N) bool
    ring_supported: np.ndarray  # (HISTORY, m, N) bool

    @classmethod
    def start(cls, scenario: np.ndarray, limit: np.ndarray, slots: int) -> Counters:
        """The table of the episodes' starts (one column each), packed."""
        S = scenario.size
        counts = np.zeros((3, S), dtype=np.int64)
        counts[2] = SINCE_CAP
        table = cls(np.arange(S), scenario, limit, counts, np.zeros((4, S)), np.zeros((HISTORY, S), dtype=bool),
                    np.zeros((HISTORY, slots, S), dtype=bool))  # fmt: skip
        return table.packed()


@dataclass
class Cells(Arrays):
    """Where a session's n + n x n numbers of a draw (``_draw``: distress of slots 0 .. n-1, then G row-major)
    are used, per session: its pair slots' cells, each (i, j)'s cell for the stance observation, and the place
    value of each reading in the key of its ``text``."""

    cells: np.ndarray  # (N,) n + n x n
    used: np.ndarray  # (W, N) bool: the cells of the draw (the first n + n x n)
    pair_cell: np.ndarray  # (K, N) the cell of each pair slot (W, the row of zeros, where unused)
    cell_map: np.ndarray  # (m, m, N) the cell of i's view of j, W (a cell of zeros) for i == j or absent slots
    stance_to: np.ndarray  # (W, N) int64 where a cell's reading goes in the (P, P) stance: i * P + j, -1 for none
    is_level: np.ndarray  # (W, N) bool: a distress cell
    place: np.ndarray  # (W, N) int64 place value in the text key (0: the diagonal and unused cells)
    span: np.ndarray  # (N,) int64 the place of the episode in the key: the most keys of an episode
    pair_at: np.ndarray  # (K, N) flat index of the pair cell in a (W + 1, N) draw (``reindex``)

    def reindex(self) -> None:
        """The flat indices of every column (after ``assign``; as ``Fixed.reindex``)."""
        np.add(self.pair_cell * self.cells.size, np.arange(self.cells.size), out=self.pair_at)


@dataclass(frozen=True)
class Layout:
    """Where a step's cells go, for a set of sessions (``Cells.used`` and ``Cells.stance_to`` of k sessions, (W, k)):
    the flat indices of the used cells in cell-major order (``_draw`` fills them in turn) and their count; the flat
    indices of the stance cells and the flat places of their readings in a (k, P, P) stance."""

    used: np.ndarray
    count: int
    stance_from: np.ndarray
    stance_to: np.ndarray

    @classmethod
    def of(cls, used: np.ndarray, stance_to: np.ndarray, most: int) -> Layout:
        stance_from = np.flatnonzero(stance_to >= 0)
        to = stance_to.ravel()[stance_from] + stance_from % used.shape[1] * (most * most)
        return cls(np.flatnonzero(used), int(np.count_nonzero(used)), stance_from, to)


def _cells_table(f: Fixed, width: int, most: int) -> Cells:
    """``Cells`` of every episode (``f``: the episodes' ``Fixed``, one column each; ``most``: P)."""
    m, S = f.present.shape
    n = f.n
    table = Cells(
        n + n * n, np.arange(width)[:, None] < n + n * n, np.where(f.pair, n + f.source * n + f.target, width),
        np.full((m, m, S), width), np.full((width, S), -1),
        np.arange(width)[:, None] < n, np.zeros((width, S), dtype=np.int64), np.zeros(S, dtype=np.int64),
        np.zeros(f.pair.shape, dtype=np.int64),
    )  # fmt: skip
    for k, count in enumerate(n.tolist()):
        for i in range(count):
            for j in range(count):
                if i != j:
                    table.cell_map[i, j, k] = count + i * count + j
                    table.stance_to[count + i * count + j, k] = i * most + j
        # digits: a distress reading in 11 tenths, a stance in 3 bands, the diagonal none
        bases = [11] * count + [1 if i == j else 3 for i in range(count) for j in range(count)]
        places = np.cumprod(np.array(bases[::-1], dtype=np.int64))[::-1]
        table.place[: len(bases), k] = np.append(places[1:], 1) * (np.array(bases) > 1)
        table.span[k] = places[0]
    table.span[:] = table.span.max()  # one place for the episode in every key: keys of two episodes never meet
    return table


def _item(value: Any) -> Any:
    """One session's part of a batched observation, as the single env gives it (a copy; a Python int for a
    ``Discrete`` key)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return value.item() if isinstance(value, np.generic) else value


__all__ = ["AUTORESET_MODES", "RescueSimVectorEnvV1", "autoreset_mode_of"]
