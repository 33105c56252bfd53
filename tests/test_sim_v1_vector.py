"""The native vector env of ``RescueSim-v1`` (issue 27): the batched F1, pi_b and loop against the single-session
reference, one session against ``RescueSim-v1`` itself, the return distributions of N sessions against N single
envs (with negative controls), Gymnasium's autoreset semantics, and SB3's ``VecEnv`` adapter."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import rescue_env  # noqa: F401  (registers the ids)
from rescue_env.dynamics import batch as B
from rescue_env.dynamics import batch_compiled as BC
from rescue_env.dynamics.behaviour import features as behaviour_features
from rescue_env.dynamics.outcome import DISTRESS_FEATURES, PATTERNS, SupportAction, support_action
from rescue_env.dynamics.outcome_v1 import BLOCKS, History, OutcomeModelV1, block_names
from rescue_env.dynamics.simulation import SessionRates, SimState, next_speaker
from rescue_env.dynamics.state import objective
from rescue_env.envs.sim_v1 import RescueSimEnvV1
from rescue_env.envs.sim_v1_vector import RescueSimVectorEnvV1
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


@pytest.fixture(scope="module")
def single() -> RescueSimEnvV1:
    return RescueSimEnvV1(data="demo")


def _vec(num_envs: int, **kwargs) -> RescueSimVectorEnvV1:
    return gym.make_vec("RescueSim-v1", num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


# ----- the id ---------------------------------------------------------------------------------------------------


def test_the_id_has_a_vector_entry_point_with_the_single_spaces(single: RescueSimEnvV1) -> None:
    envs = _vec(3)
    assert isinstance(envs, RescueSimVectorEnvV1) and isinstance(envs, VectorEnv)
    assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert envs.single_observation_space == single.observation_space
    assert envs.single_action_space == single.action_space
    assert envs.observation_space == batch_space(single.observation_space, 3)
    assert envs.action_space == batch_space(single.action_space, 3)
    observation, info = envs.reset(seed=0)
    assert envs.observation_space.contains(observation)
    assert set(info) == {"sample_id", "_sample_id", "scenario", "_scenario", "participants", "_participants",
                         "member", "_member"}  # fmt: skip
    envs.action_space.seed(0)
    for _ in range(40):
        observation, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(observation)
        assert reward.shape == terminated.shape == truncated.shape == (3,) and not terminated.any()
    no_text = _vec(2, text=False)
    assert "text" not in no_text.single_observation_space.spaces
    assert "text" not in no_text.reset(seed=0)[0]


# ----- one session is RescueSim-v1 ----------------------------------------------------------------------------


def _trace(mode: str, seed: int, steps: int, **kwargs) -> list[tuple]:
    vector_kwargs = {}
    if mode == "sync" and "autoreset_mode" in kwargs:
        vector_kwargs = {"vector_kwargs": {"autoreset_mode": kwargs.pop("autoreset_mode")}}
    envs = gym.make_vec("RescueSim-v1", num_envs=1, vectorization_mode=mode, **kwargs, **vector_kwargs)
    out = [envs.reset(seed=seed)]
    envs.action_space.seed(seed + 1000)
    out += [envs.step(envs.action_space.sample()) for _ in range(steps)]
    envs.close()
    return out


def _same_observation(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        if isinstance(a[key], tuple):
            assert a[key] == b[key], key
        else:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def _close_info(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            _close_info(x, y)
        elif key == "final_obs":
            for one, two in zip(x, y):
                assert (one is None) == (two is None)
                if one is not None:
                    _same_observation(
                        {k: np.asarray(v) if not isinstance(v, str) else (v,) for k, v in one.items()},
                        {k: np.asarray(v) if not isinstance(v, str) else (v,) for k, v in two.items()},
                    )
        elif x.dtype == object:
            assert list(x) == list(y), key
        else:
            assert x.dtype == y.dtype, key
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-12, err_msg=key)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ensemble": "member", "split": "test"},
        {"outcome": "mean", "perception_noise": 0.0},
        {"penalty": 0.5, "effect_scale": 0.5, "kappa": 0.1, "max_steps": 7, "ensemble": "member"},
        {"autoreset_mode": AutoresetMode.SAME_STEP},
    ],
    ids=["default", "member-test", "mean-noiseless", "penalty-scale-kappa", "same-step"],
)
def test_one_session_plays_as_rescuesim_v1(kwargs: dict) -> None:
    # num_envs=1 draws RescueSim-v1's numbers in its order: the same conversations, speakers, refreshes and
    # readings (observations equal to the bit, words included), over episode ends; rewards and infos to 1e-12
    # (F1's and pi_b's sums run in another order).
    for seed in range(3):
        sync = _trace("sync", seed, 90, **dict(kwargs))
        native = _trace("vector_entry_point", seed, 90, **dict(kwargs))
        ends = 0
        for a, b in zip(sync, native):
            _same_observation(a[0], b[0])
            if len(a) == 5:
                np.testing.assert_allclose(a[1], b[1], rtol=0, atol=1e-12)
                assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])
                ends += int(a[3][0])
            _close_info(a[-1], b[-1])
        assert ends >= 2  # the trace crosses episode ends (and the autoresets after them)


def test_one_session_plays_as_rescuesim_v1_on_the_release(text_file) -> None:
    release = str(text_file)  # skipped, with the reason, when the research-only release is absent
    for a, b in zip(_trace("sync", 0, 60, data=release), _trace("vector_entry_point", 0, 60, data=release)):
        _same_observation(a[0], b[0])
        _close_info(a[-1], b[-1])


# ----- the batched parts against the single-session reference -------------------------------------------------


def _random_state(rng: np.random.Generator, n: int) -> SimState:
    row = int(rng.integers(8, 40))
    emotion_row = np.where(rng.random(n) < 0.8, rng.integers(0, row + 1, n), -1)
    viewpoint_row = np.where(rng.random((n, n)) < 0.4, rng.integers(0, row + 1, (n, n)), -1)
    np.fill_diagonal(viewpoint_row, -1)
    distress = np.where(emotion_row >= 0, rng.random(n), 0.0)
    g = np.where(viewpoint_row >= 0, rng.random((n, n)), 0.0)
    last = int(rng.integers(-1, n))
    pattern = [PATTERNS[1], None][int(rng.integers(2))]
    weights = rng.integers(1, 6, n) * 1.0
    family = bool(rng.random() < 0.5)
    return SimState(distress, emotion_row, g, viewpoint_row, row, None if last < 0 else last, family, pattern, weights)


def _random_action(rng: np.random.Generator, n: int) -> tuple[bool, frozenset[int], int]:
    recipients = frozenset(int(i) for i in np.flatnonzero(rng.random(n) < 0.5))
    strategy = int(rng.integers(-1, len(ALL_STRATEGY_KEYS)))
    return bool(rng.random() < 0.7), recipients, strategy


def _batch_actions(actions: list[tuple[bool, frozenset[int], int]], f: B.Fixed) -> B.Supports:
    m, N = f.present.shape
    recipients = np.zeros((m, N), dtype=bool)
    for k, (_, r, _) in enumerate(actions):
        recipients[sorted(r), k] = True
    intervene = np.array([a[0] for a in actions])
    return B.supports(intervene, recipients, np.array([a[2] for a in actions]), f.n)


def _history(rng: np.random.Generator, n: int) -> list[SupportAction]:
    return [support_action(*_random_action(rng, n)) for _ in range(int(rng.integers(0, 7)))]


def _recent(pasts: list[list[SupportAction]], m: int) -> B.Recent:
    speaks = np.array([History.of(p, m).speaks for p in pasts])
    supported = np.stack([History.of(p, m).supported for p in pasts], axis=1)
    return B.Recent(speaks, supported)


def _every_block_model(model: OutcomeModelV1, rng: np.random.Generator) -> OutcomeModelV1:
    """F1 with every candidate block and random coefficients (every folded term exercised), two members."""
    features = DISTRESS_FEATURES + block_names(list(BLOCKS))
    head = lambda: model.distress.model_copy(  # noqa: E731
        update={"features": features, "coef": rng.normal(0, 0.3, len(features)).tolist(), "intercept": 0.1}
    )
    data = model.model_dump()
    data.update(blocks=list(BLOCKS), distress=head().model_dump(), members=[head().model_dump() for _ in range(2)])
    return OutcomeModelV1.model_validate(data)


def test_every_candidate_block_has_a_batched_term() -> None:
    assert set(B.HANDLED_BLOCKS) == set(BLOCKS)


@pytest.mark.parametrize("which", ["fitted", "every block"])
def test_batched_f1_is_f1(single: RescueSimEnvV1, which: str) -> None:
    rng = np.random.default_rng(3)
    model = single.outcome_model if which == "fitted" else _every_block_model(single.outcome_model, rng)
    f1 = B.F1Batch(model)
    states = [_random_state(rng, n) for n in rng.integers(1, 5, 60)]
    actions = [_random_action(rng, s.n) for s in states]
    pasts = [_history(rng, s.n) for s in states]
    s, f = B.stack(states)
    m = f.present.shape[0]
    a, h = _batch_actions(actions, f), _recent(pasts, m)
    p = B.point(s, f, B.Ages(model.state, 200))
    members = len(model.members)
    heads = rng.integers(0, members + 1, len(states))
    for scale in (1.0, 0.4):
        d_all = {k: f1.distress(p, f, a, h, k, scale) for k in range(members + 1)}
        d_each = f1.distress(p, f, a, h, heads, scale)
        g = f1.viewpoint(p, f, a, scale)
        for k, (state, action, past) in enumerate(zip(states, actions, pasts)):
            n, support = state.n, support_action(*action)
            point = state.point(model.state)
            for head in range(members + 1):
                member = None if head == 0 else head - 1
                d_ref, g_ref = model.raw(point, support, History.of(past, n), member, scale)
                np.testing.assert_allclose(d_all[head][:n, k], d_ref, rtol=0, atol=1e-12)
                if head == heads[k]:
                    np.testing.assert_allclose(d_each[:n, k], d_ref, rtol=0, atol=1e-12)
            for slot in range(f.pair.shape[0]):
                if f.pair[slot, k]:
                    assert g[slot, k] == pytest.approx(g_ref[f.source[slot, k], f.target[slot, k]], abs=1e-12)
    spread = f1.spread(p, f, a, h)
    for k, (state, action, past) in enumerate(zip(states, actions, pasts)):
        reference = model.effect_spread(state.point(model.state), support_action(*action), History.of(past, state.n))
        assert spread[k] == pytest.approx(reference.max(initial=0.0), abs=1e-12)


def test_batched_behaviour_prior_is_pi_b(single: RescueSimEnvV1) -> None:
    rng = np.random.default_rng(5)
    model = single.behaviour
    states = [_random_state(rng, n) for n in rng.integers(1, 5, 80)]
    actions = [_random_action(rng, s.n) for s in states]
    pasts = [_history(rng, s.n) for s in states]
    valid = [sorted(rng.choice(len(ALL_STRATEGY_KEYS), 6, replace=False).tolist()) for _ in states]
    s, f = B.stack(states, valid=valid)
    a = _batch_actions(actions, f)
    # an invalid strategy is -1 (the env's decoding): outside the session's taxonomy too
    strategy = np.array([st if st in v else -1 for (_, _, st), v in zip(actions, valid)])
    a = B.Supports(a.speaks, a.supported, a.kind, strategy)
    recent = _recent(pasts, f.present.shape[0]).speaks
    since = np.array([next((k for k, x in enumerate(reversed(p)) if x.intervene), 10) for p in pasts])
    x = B.behaviour_features(s, f, recent, since)
    log_pi = B.BehaviourBatch(model).log_prob(x, s, f, a)
    for k, (state, action, past) in enumerate(zip(states, actions, pasts)):
        intervene, recipients, _ = action
        support = support_action(intervene, recipients, int(strategy[k]))
        x_ref = behaviour_features(state.distress_raw, state.g_raw, state.last_speaker, state.family, past)
        np.testing.assert_allclose(x[:, k], x_ref, rtol=0, atol=1e-15)
        keys = [ALL_STRATEGY_KEYS[i] for i in valid[k]]
        reference = model.log_prob(x_ref, support.intervene, support.recipients, support.strategy, state.n,
                                   state.last_speaker, keys)  # fmt: skip
        assert log_pi[k] == pytest.approx(reference, abs=1e-12)


def test_objective_and_speakers_by_hand() -> None:
    # d = (0.2, 0.6), Alan's view of Bea 0.5: U = mean(0.8, 0.4) - 0.5 x 0.5 / 2 = 0.475; minus max d = -0.125
    state = SimState(np.array([0.2, 0.6]), np.array([3, 3]), np.array([[0.0, 0.5], [0.0, 0.0]]),
                     np.array([[-1, 3], [-1, -1]]), 4, 0, False, None, np.array([1.0, 3.0]))  # fmt: skip
    s, f = B.stack([state])
    assert objective(state.distress_raw, state.g_raw, 0.5, 1.0) == pytest.approx(-0.125)
    assert B.objective(s.distress_raw, s.g_raw, f, 0.5, 1.0)[0] == pytest.approx(-0.125)
    # weights 1 and 3: cumulative shares 0.25, 1 (bisect_right: a draw of exactly 0.25 is the second speaker)
    nobody = np.zeros((2, 1), dtype=bool)
    for u, expected in ((0.2, 0), (0.25, 1), (0.9, 1)):
        assert B.next_speakers(f, nobody, np.array([False]), np.array([u]))[0] == expected
    # a reply from the recipients only: {0} answers whatever the draw
    alan = np.array([[True], [False]])
    assert B.next_speakers(f, alan, np.array([True]), np.array([0.99]))[0] == 0


class _Replay:
    """A generator that gives back given uniforms in turn (``next_speaker``'s draws, replayed)."""

    def __init__(self, draws: np.ndarray) -> None:
        self._draws = iter(draws.tolist())

    def random(self) -> float:
        return next(self._draws)


def test_speakers_are_next_speaker_given_its_draws() -> None:
    rng = np.random.default_rng(11)
    rates = SessionRates(emotion_speaker=0.5, emotion_other=0.1, viewpoint_speaker=0.5, viewpoint_other=0.1,
                         reply_recipient=0.8, steps=10)  # fmt: skip
    states = [_random_state(rng, n) for n in rng.integers(1, 5, 200)]
    actions = [support_action(*_random_action(rng, s.n)) for s in states]
    s, f = B.stack(states)
    m = f.present.shape[0]
    supported = np.zeros((m, len(states)), dtype=bool)
    replies, uniforms = np.zeros(len(states), dtype=bool), np.zeros(len(states))
    expected = []
    for k, (state, action) in enumerate(zip(states, actions)):
        # next_speaker's draws, replayed: the reply draw only after a supported intervention, then the speaker's
        draws = rng.random(2)
        expected.append(next_speaker(state, action, rates, _Replay(draws)))
        supported[sorted(action.recipients), k] = action.intervene
        replies[k] = action.intervene and bool(action.recipients) and draws[0] < rates.reply_recipient
        uniforms[k] = draws[1] if action.intervene and action.recipients else draws[0]
    got = B.next_speakers(f, supported, replies, uniforms)
    assert got.tolist() == expected and replies.any() and not replies.all()


# ----- autoreset, seeding, arguments ----------------------------------------------------------------------------

EVERYONE_TRACK = {"intervene": 1, "strategy": 0}  # ``track`` is in both taxonomies


def _fixed(num_envs: int, slots: int = 6) -> dict[str, np.ndarray]:
    target = np.zeros((num_envs, slots + 1), dtype=np.int8)
    target[:, -1] = 1
    return {"intervene": np.ones(num_envs, dtype=np.int64), "target": target,
            "strategy": np.zeros(num_envs, dtype=np.int64)}  # fmt: skip


def test_next_step_autoreset() -> None:
    envs = _vec(4, max_steps=3)
    envs.reset(seed=0)
    for step in range(3):
        observation, reward, terminated, truncated, info = envs.step(_fixed(4))
        assert info["_step"].all() and (info["step"] == step).all()
    assert truncated.all() and info["_episode"].all() and (info["episode"]["length"] == 3).all()
    np.testing.assert_allclose(info["episode"]["per_step_return"], info["episode"]["return"] / 3)
    assert (observation["elapsed"] == [[3, 3]] * 4).all()
    # the next step resets: the actions are ignored, reward 0, the reset's info, the first observation
    observation, reward, terminated, truncated, info = envs.step(_fixed(4))
    assert (reward == 0).all() and not truncated.any() and not terminated.any()
    assert "step" not in info and info["_sample_id"].all()
    assert (observation["elapsed"] == 0).all()
    observation, reward, terminated, truncated, info = envs.step(_fixed(4))
    assert info["_step"].all() and (info["step"] == 0).all()


def test_same_step_autoreset() -> None:
    envs = _vec(4, max_steps=2, autoreset_mode="same_step")
    assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    envs.reset(seed=0)
    envs.step(_fixed(4))
    observation, reward, terminated, truncated, info = envs.step(_fixed(4))
    assert truncated.all() and (reward != 0).all()
    assert (observation["elapsed"] == 0).all()  # already the next episode's first observation
    assert info["_final_obs"].all() and all((o["elapsed"] == [2, 2]).all() for o in info["final_obs"])
    assert (info["final_info"]["episode"]["length"] == 2).all() and info["_sample_id"].all()
    assert "step" not in info  # every session was reset: its info is the reset's (SyncVectorEnv's layout)


def test_seeded_and_deterministic() -> None:
    def returns(seed: int) -> np.ndarray:
        envs = _vec(8)
        envs.reset(seed=seed)
        envs.action_space.seed(0)
        return np.array([envs.step(envs.action_space.sample())[1] for _ in range(30)])

    assert np.array_equal(returns(4), returns(4)) and not np.array_equal(returns(4), returns(5))


def test_reset_options_and_bad_input() -> None:
    envs = _vec(2)
    ids = [sample.sample_id for sample in envs.env.samples]
    _, info = envs.reset(seed=0, options={"sample_id": ids[1]})
    assert info["sample_id"].tolist() == [ids[1], ids[1]]
    _, info = envs.reset(options={"sample_id": [ids[0], ids[1]]})
    assert envs.sample_ids() == [ids[0], ids[1]]
    with pytest.raises(ValueError, match="not starts"):
        envs.reset(options={"sample_id": "nope"})
    with pytest.raises(ValueError, match="unknown reset option"):
        envs.reset(options={"where": 1})
    with pytest.raises(ValueError, match="one int"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="exactly intervene, target and strategy"):
        envs.step({"intervene": np.zeros(2, dtype=np.int64)})
    bad = _fixed(2)
    bad["strategy"] = np.array([0, 11])
    with pytest.raises(ValueError, match="strategy"):
        envs.step(bad)
    bad = _fixed(2)
    bad["target"] = bad["target"][:, :3]
    with pytest.raises(ValueError, match="target"):
        envs.step(bad)
    refused = [({"render_mode": "ansi"}, "render"), ({"info_level": "full"}, "info_level"),
               ({"autoreset_mode": "disabled"}, "autoreset_mode"), ({"num_envs": 0}, "num_envs")]  # fmt: skip
    for kwargs, match in refused:
        with pytest.raises(ValueError, match=match):
            RescueSimVectorEnvV1(**{"num_envs": 2, **kwargs})


def test_masked_choices_are_counted_as_the_single_env_counts_them(single: RescueSimEnvV1) -> None:
    envs = _vec(1)
    observation, _ = envs.reset(seed=0)
    action = _fixed(1)
    action["target"][0, :] = 0
    action["target"][0, 5] = 1  # an absent slot (no conversation of the demo has six participants)
    action["strategy"][0] = np.flatnonzero(observation["strategy_mask"][0] == 0)[0]  # outside the taxonomy
    _, _, _, _, info = envs.step(action)
    single.reset(seed=0)
    _, _, _, _, reference = single.step({k: v[0] for k, v in action.items()})
    assert info["n_invalid"][0] == reference["n_invalid"] >= 1


# ----- the same dynamics, in distribution ---------------------------------------------------------------------
#
# The criterion, fixed before the results were looked at: the per-step returns of the episodes of each side agree
# when a two-sample Kolmogorov-Smirnov test gives p >= 0.01 and the means differ by less than 4 standard errors;
# a side whose dynamics differ -- beta doubled, or F1's distress intercept raised by 0.05 -- must fail it. Each
# side has 1024 episodes: the first four of each of 256 sessions (all of them: no bias toward short episodes)
# and single envs seeded 0 .. 1023. (With 512 a side, doubling beta under the random policy -- a shift of 0.045
# in per-step return, 3.6 standard errors -- went undetected: too little power; 1024 detects it.)

EPISODES, SESSIONS, PER_SESSION = 1024, 256, 4


def _vector_returns(policy: str, **kwargs) -> np.ndarray:
    envs = RescueSimVectorEnvV1(num_envs=SESSIONS, data="demo", **kwargs)
    envs.reset(seed=7)
    envs.action_space.seed(7)
    done = np.zeros(SESSIONS, dtype=np.int64)
    out: list[float] = []
    while (done < PER_SESSION).any():
        action = _fixed(SESSIONS) if policy == "everyone" else envs.action_space.sample()
        _, _, _, truncated, info = envs.step(action)
        if truncated.any():
            out += info["episode"]["per_step_return"][truncated & (done < PER_SESSION)].tolist()
            done += truncated
    return np.array(out)


def _single_returns(env: RescueSimEnvV1, policy: str) -> np.ndarray:
    out = []
    env.action_space.seed(11)
    everyone = {k: v[0] for k, v in _fixed(1).items()}
    for seed in range(EPISODES):
        env.reset(seed=seed)
        truncated = False
        while not truncated:
            _, _, _, truncated, info = env.step(everyone if policy == "everyone" else env.action_space.sample())
        out.append(info["episode"]["per_step_return"])
    return np.array(out)


def _agree(a: np.ndarray, b: np.ndarray) -> tuple[bool, float]:
    from scipy.stats import ks_2samp

    p = float(ks_2samp(a, b).pvalue)
    se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    return p >= 0.01 and abs(a.mean() - b.mean()) < 4 * se, p


@pytest.mark.parametrize("policy", ["everyone", "random"])
def test_return_distribution_is_the_single_envs(single: RescueSimEnvV1, policy: str) -> None:
    reference = _single_returns(single, policy)
    same, p = _agree(_vector_returns(policy), reference)
    assert same, f"p = {p:.3g}"
    # negative controls: the criterion tells different dynamics apart
    doubled, p = _agree(_vector_returns(policy, beta=2 * single.beta), reference)
    assert not doubled, f"beta x 2 passed (p = {p:.3g})"
    data = single.outcome_model.model_dump()
    data["distress"]["intercept"] += 0.05
    shifted = OutcomeModelV1.model_validate(data)
    worse, p = _agree(_vector_returns(policy, dynamics=shifted, behaviour=single.behaviour, beta=single.beta),
                      reference)  # fmt: skip
    assert not worse, f"F1 + 0.05 passed (p = {p:.3g})"


# ----- SB3's VecEnv ---------------------------------------------------------------------------------------------


def test_sb3_vec_env_learns_and_follows_the_vecenv_contract() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    from policies.sb3_vec import RescueSimSB3VecEnv

    venv = RescueSimSB3VecEnv(num_envs=4, data="demo", max_steps=3)
    venv.seed(3)
    observation = venv.reset()
    assert set(observation) == set(venv.observation_space.spaces) and "text" not in observation
    assert venv.action_masks().shape == (4, 2 + 2 * 7 + 11)
    actions = np.array([venv.action_space.sample() for _ in range(4)])
    for _ in range(3):
        observation, rewards, dones, infos = venv.step(actions)
    assert dones.all() and rewards.dtype == np.float32
    for info in infos:
        assert info["TimeLimit.truncated"] and info["episode"]["l"] == 3
        assert (
            info["terminal_observation"]["elapsed"][0] == 3
            and venv.observation_space.contains(
                {k: np.asarray(v)[None] for k, v in info["terminal_observation"].items()}
            )
            is not None
        )
        assert info["rescue_episode"]["per_step_return"] == pytest.approx(info["episode"]["r"] / 3)
    assert (observation["elapsed"] == 0).all()  # SB3's auto-reset: already the next episode
    assert venv.get_attr("beta") == [venv.venv.env.beta] * 4 and venv.env_is_wrapped(gym.Wrapper) == [False] * 4
    model = PPO("MultiInputPolicy", RescueSimSB3VecEnv(num_envs=8, data="demo"), n_steps=16, batch_size=32,
                n_epochs=1, seed=0)  # fmt: skip
    model.learn(total_timesteps=256)
    assert len(model.ep_info_buffer) > 0


def test_sb3_flat_discrete_is_rescuesimflatdiscrete_v1() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    from policies.sb3_vec import RescueSimSB3VecEnv

    venv = RescueSimSB3VecEnv(num_envs=1, observation="flat", action="discrete", data="demo")
    env = gym.make("RescueSimFlatDiscrete-v1", data="demo")
    assert venv.observation_space == env.observation_space and venv.action_space == env.action_space
    venv.seed(2)
    observation, (reference, _) = venv.reset(), env.reset(seed=2)
    assert np.array_equal(observation[0], reference)
    env.action_space.seed(4)
    episodes = 0
    for _ in range(80):
        action = env.action_space.sample()
        np.testing.assert_array_equal(venv.action_masks()[0], env.get_wrapper_attr("action_masks")())
        observation, rewards, dones, infos = venv.step(np.array([action]))
        reference, reward, terminated, truncated, info = env.step(action)
        assert rewards[0] == pytest.approx(reward, abs=1e-6)
        if dones[0]:
            episodes += 1
            assert np.array_equal(infos[0]["terminal_observation"], reference)
            reference, _ = env.reset()
        assert np.array_equal(observation[0], reference)
    assert episodes >= 2
    if importlib.util.find_spec("sb3_contrib") is not None:  # MaskablePPO asks the masks through env_method
        from sb3_contrib.common.maskable.utils import get_action_masks

        assert np.array_equal(get_action_masks(venv), venv.action_masks())
    model = PPO("MlpPolicy", RescueSimSB3VecEnv(num_envs=8, observation="flat", action="discrete", data="demo"),
                n_steps=16, batch_size=32, n_epochs=1, seed=0)  # fmt: skip
    model.learn(total_timesteps=256)


def test_vector_kinds_by_hand() -> None:
    # outcome.recipient_kind of a batch: one of three is alone, two a pair, three of four a subgroup, all the group
    recipients = np.array([[1, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]], dtype=bool)
    a = B.supports(np.array([True, True, True, True, True]), recipients, np.zeros(5, dtype=np.int64),
                   np.array([3, 3, 4, 3, 3]))  # fmt: skip
    assert a.kind.tolist() == [0, 1, 2, 3, -1] and a.speaks.tolist() == [True] * 4 + [False]


# ----- the step's bookkeeping (issue 27's speed-up) against the plain computations it replaced -------------------


def test_draws_fill_the_used_cells_in_turn() -> None:
    # One call per draw; cell j of every session, then cell j + 1 (a boolean mask's row-major fill), unused cells 0.
    envs = _vec(7)
    envs.reset(seed=3)
    for _ in range(5):  # sessions of two and four participants, some reset on the way
        envs.step(envs.action_space.sample())
    W, cells = envs.width, envs._c.cells
    for normal in (True, False):
        for rows in (None, np.array([1, 4, 5])):
            clone = np.random.Generator(np.random.PCG64())
            clone.bit_generator.state = envs.np_random.bit_generator.state
            got = envs._draw(normal, rows)
            count = cells if rows is None else cells[rows]
            expected = np.zeros((W + 1, count.size))
            numbers = clone.standard_normal(int(count.sum())) if normal else clone.random(int(count.sum()))
            expected[:-1][np.arange(W)[:, None] < count] = numbers
            assert np.array_equal(got, expected)
            assert envs.np_random.bit_generator.state == clone.bit_generator.state  # the same amount drawn


def test_stance_is_each_cell_at_its_place() -> None:
    envs = _vec(6, text=False)
    envs.reset(seed=1)
    for _ in range(4):
        envs.step(envs.action_space.sample())
    c, N, m, P = envs._c, envs.num_envs, envs.slots, envs.env.max_participants
    readings = np.random.default_rng(0).random((envs.width + 1, N))
    readings[-1] = 0.0  # the cell of zeros
    layout = envs._layout()
    stance = np.zeros((N, P, P), dtype=np.float32)
    stance.ravel()[layout.stance_to] = readings.ravel()[layout.stance_from]
    expected = np.zeros((N, P, P), dtype=np.float32)
    expected[:, :m, :m] = readings.ravel()[c.cell_map.transpose(2, 0, 1) * N + np.arange(N)[:, None, None]]
    assert np.array_equal(stance, expected)


def test_sessions_stay_views_of_their_packs() -> None:
    # settle writes in place, so that a reset stays one copy per dtype (Arrays.packed)
    envs = _vec(5, max_steps=3)
    envs.reset(seed=0)
    for _ in range(8):
        envs.step(envs.action_space.sample())
    packs = envs._s._packs
    for name in ("distress_raw", "emotion_row", "g_raw", "viewpoint_row", "row", "last_speaker"):
        value = getattr(envs._s, name)
        assert np.shares_memory(value, packs[value.dtype]), name


def test_placement_copies_columns() -> None:
    rng = np.random.default_rng(2)
    table, out = rng.random((5, 9)), np.zeros((5, 12))
    rows, index = np.array([0, 3, 11]), np.array([8, 0, 8])
    B.Placement(rows, index, 12, 9, most=7).copy(out, table)
    expected = np.zeros((5, 12))
    expected[:, rows] = table[:, index]
    assert np.array_equal(out, expected)


def test_others_max_by_hand() -> None:
    # columns: distinct values; a tie at the top; all zero; alone (the others are absent slots, 0)
    d = np.array([[0.2, 0.7, 0.0, 0.6], [0.9, 0.7, 0.0, 0.0], [0.5, 0.1, 0.0, 0.0]])
    out = np.empty_like(d)
    B.others_max(d, out)
    assert out.tolist() == [[0.9, 0.7, 0.0, 0.0], [0.5, 0.7, 0.0, 0.6], [0.9, 0.7, 0.0, 0.6]]
    one = np.array([[0.4, 0.0]])
    B.others_max(one, out[:1, :2])
    assert out[0, :2].tolist() == [0.0, 0.0]


def test_logit_batch_is_logit_head(single: RescueSimEnvV1) -> None:
    # scikit-learn's binary form, a full softmax, one class, and classes the vocabulary has but the head lacks
    from rescue_env.dynamics.behaviour import KINDS, LogitHead

    rng = np.random.default_rng(4)
    x = rng.random((9, 20))
    lone = LogitHead(classes=["evoke"], coef=[[0.0] * 9], intercept=[0.0], C=1.0, n=3)
    partial = LogitHead(classes=["join", "track", "reframe"], coef=rng.normal(0, 1, (3, 9)).tolist(),
                        intercept=[0.1, -0.2, 0.3], C=1.0, n=30)  # fmt: skip
    model = single.behaviour
    for head, vocabulary in ((model.speaks, ("0", "1")), (model.kind, KINDS),
                             (model.strategy, ALL_STRATEGY_KEYS), (lone, ALL_STRATEGY_KEYS),
                             (partial, ALL_STRATEGY_KEYS)):  # fmt: skip
        got = B.LogitBatch(head, vocabulary).probabilities(x)
        for k in range(x.shape[1]):
            reference = head.probabilities(x[:, k])
            expected = [reference.get(name, 0.0) for name in vocabulary]
            np.testing.assert_allclose(got[:, k], expected, rtol=0, atol=1e-15)


def test_negative_actions_are_refused() -> None:
    envs = _vec(2)
    envs.reset(seed=0)
    bad = _fixed(2)
    bad["strategy"] = np.array([0, -1])
    with pytest.raises(ValueError, match=r"outside \[0, 11\): -1 \.\. 0"):
        envs.step(bad)


# ----- the compiled step (optional: numba) against the numpy step ------------------------------------------------


def _native_trace(kernels, steps: int, threads: int = 1, **kwargs) -> list[tuple]:
    """``steps`` steps of 24 sessions of the native env, stepped and observed by ``kernels`` (``BC.Kernels``; None:
    the numpy step) on ``threads`` blocks of sessions."""
    envs = RescueSimVectorEnvV1(num_envs=24, compiled=False, **kwargs)
    envs._use_kernels(kernels)
    envs.threads = threads
    out = [envs.reset(seed=9)]
    envs.action_space.seed(10)
    out += [envs.step(envs.action_space.sample()) for _ in range(steps)]
    return out


def _same_traces(a: list[tuple], b: list[tuple]) -> None:
    for x, y in zip(a, b):
        _same_observation(x[0], y[0])
        if len(x) == 5:
            np.testing.assert_allclose(x[1], y[1], rtol=0, atol=1e-12)
            assert np.array_equal(x[3], y[3])
        _close_info(x[-1], y[-1])


def test_the_step_loop_is_the_numpy_step(single: RescueSimEnvV1) -> None:
    # batch.advance_loop as plain Python (what numba compiles), every candidate block, two members, on few steps
    model = _every_block_model(single.outcome_model, np.random.default_rng(8))
    kwargs = {"data": "demo", "dynamics": model, "behaviour": single.behaviour, "beta": single.beta,
              "ensemble": "member", "effect_scale": 0.7}  # fmt: skip
    _same_traces(_native_trace(None, 12, **kwargs), _native_trace(BC.Kernels.python(), 12, **kwargs))
    # three blocks of sessions (advance_threads, its prange a range here) step as one
    _same_traces(_native_trace(None, 12, **kwargs), _native_trace(BC.Kernels.python(), 12, threads=3, **kwargs))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"ensemble": "member", "split": "test"}, {"outcome": "mean", "perception_noise": 0.0},
     {"effect_scale": 0.5, "kappa": 0.1, "max_steps": 7, "autoreset_mode": "same_step"}, "every block"],
    ids=["default", "member-test", "mean-noiseless", "scale-kappa-same-step", "every-block"],
)  # fmt: skip
def test_the_compiled_step_is_the_numpy_step(single: RescueSimEnvV1, kwargs) -> None:
    pytest.importorskip("numba")
    if kwargs == "every block":
        model = _every_block_model(single.outcome_model, np.random.default_rng(8))
        kwargs = {"dynamics": model, "behaviour": single.behaviour, "beta": single.beta, "ensemble": "member"}
    kernels = BC.compiled_kernels()
    _same_traces(_native_trace(None, 60, data="demo", **kwargs), _native_trace(kernels, 60, data="demo", **kwargs))


def test_threads_step_as_one_thread_bit_for_bit() -> None:
    pytest.importorskip("numba")
    kernels = BC.compiled_kernels()
    one = _native_trace(kernels, 30, data="demo", ensemble="member")
    two = _native_trace(kernels, 30, threads=2, data="demo", ensemble="member")
    for x, y in zip(one, two):
        _same_observation(x[0], y[0])
        if len(x) == 5:
            assert np.array_equal(x[1], y[1])  # each session is one thread's: the same sums in the same order


def test_the_compiled_draws_are_the_numpy_draws() -> None:
    # draw_cells (what the compiled step and perception draw with) fills the cells as _draw does, from the same state
    pytest.importorskip("numba")
    BC.compiled_kernels()  # compiles the kernels; draw_cells itself stays the plain Python function
    import numba

    envs = _vec(9)
    envs.reset(seed=5)
    for _ in range(3):
        envs.step(envs.action_space.sample())
    for draw in (BC.draw_cells, numba.njit(BC.draw_cells)):
        for normal in (True, False):
            clone = np.random.Generator(np.random.PCG64())
            clone.bit_generator.state = envs.np_random.bit_generator.state
            out = np.full((envs.width + 1, envs.num_envs), np.nan)
            draw(clone, envs._c.cells, normal, out)
            assert np.array_equal(out, envs._draw(normal))
            assert clone.bit_generator.state == envs.np_random.bit_generator.state


def test_compiled_is_chosen_and_refused_as_asked() -> None:
    assert not _vec(2, compiled=False).compiled
    assert not _vec(2, penalty=0.5).compiled  # the penalty's ensemble spread is the numpy path's
    if importlib.util.find_spec("numba") is None:
        assert not _vec(2).compiled
        with pytest.raises(ValueError, match="numba"):
            _vec(2, compiled=True)
    else:
        assert _vec(2).compiled and _vec(2, compiled=True).compiled
        assert _vec(2, threads=2).threads == 2
    for threads in (0, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an integer >= 1"):
            _vec(2, threads=threads)
    with pytest.raises(ValueError, match="threads > 1 runs the compiled step"):
        _vec(2, threads=2, compiled=False)
