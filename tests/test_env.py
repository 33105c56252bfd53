"""Rescue-v0: decision points, gold, rewards and info on a hand-made conversation; API conventions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import make_row
from gymnasium.utils.env_checker import check_env

import rescue_env  # noqa: F401  (registers the ids)
from rescue_env.data import load_dataset
from rescue_env.data.loading import Dataset, LoadReport
from rescue_env.data.schema import Sample
from rescue_env.envs.replay import CHARSET, RescueEnv, normalise_text
from rescue_env.reward import RewardConfig
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


def _emotion(person: str, intensity: int) -> list[dict]:
    return [{"person": person, "emotion_description": "feels it", "intensity": intensity}]


def tiny_dataset() -> Dataset:
    rows = [
        make_row(0, "Ana", internal_emotion=_emotion("Ana", 8)),  # decision 0: next is Bo -> z* = 0
        make_row(1, "Bo", target=["Ana"], internal_emotion=_emotion("Bo", 4)),  # decision 1: next is therapist
        make_row(
            2,
            "Therapist",
            target=["Ana"],
            support_strategy=[{"provider": "Therapist", "target": ["Ana"], "strategy_type": "evoke"}],
        ),
        make_row(3, "Ana", internal_emotion=_emotion("Ana", 5)),  # decision 2: next is therapist, to both
        make_row(
            4,
            "Therapist",
            target=["Couple"],
            support_strategy=[{"provider": "Therapist", "target": ["Couple"], "strategy_type": "boundary"}],
        ),
        make_row(5, "Bo"),  # last row: no decision (nothing follows)
    ]
    sample = Sample.model_validate({"sample_id": "tiny/1", "scenario": "couple", "rows": rows})
    return Dataset(samples=[sample], source="tiny", sha256="0" * 64, report=LoadReport(source="tiny"))


def action(intervene: int, slots: list[int], strategy: str, n_slots: int = 6) -> dict:
    bits = np.zeros(n_slots + 1, dtype=np.int8)
    bits[slots] = 1
    return {"intervene": intervene, "target": bits, "strategy": ALL_STRATEGY_KEYS.index(strategy)}


CONFIG = RewardConfig(timing=1.0, target=1.0, strategy=1.0, group=1.0, lam=1.0, kappa=0.2)


def test_decision_points_gold_and_rewards_by_hand() -> None:
    env = RescueEnv(data=tiny_dataset(), reward=CONFIG, info_level="full")
    observation, info = env.reset(seed=0)
    assert info == {"sample_id": "tiny/1", "scenario": "couple", "participants": ["Ana", "Bo"], "decision_points": 3}
    assert observation["context"].startswith("Couple therapy session. Participant slots: [0] Ana, [1] Bo, [6]")
    assert observation["participants"].tolist() == [1, 1, 0, 0, 0, 0]
    assert observation["last_speaker"] == 0

    # Decision 0 (after Ana's row; Bo speaks next): keeping quiet is right. d = (0.8, 0): U = 0.6.
    _, reward, terminated, _, info = env.step(action(0, [], "track"))
    assert info["gold"] == {"intervene": False, "target": None, "strategy": None}
    assert info["components"] == pytest.approx({"timing": 1.0, "target": None, "strategy": None, "group": 0.6 - 0.8})
    assert reward == pytest.approx(1.0 + 0.6 - 0.8) and not terminated

    # Decision 1 (after Bo's row; the therapist evokes with Ana). d = (0.8, 0.4): U = 0.4; we support Ana.
    _, reward, _, _, info = env.step(action(1, [0], "evoke"))
    assert info["gold"] == {"intervene": True, "target": ["Ana"], "strategy": "evoke"}
    assert info["components"] == pytest.approx({"timing": 1.0, "target": 1.0, "strategy": 1.0, "group": 0.4 - 0.2})
    assert info["state"]["distress"] == {"Ana": 0.8, "Bo": 0.4}

    # Decision 2: the therapist turns to the couple with a family-only label, so a* is unknown; we pick Bo.
    _, reward, terminated, _, info = env.step(action(1, [1], "track"))
    assert info["gold"] == {"intervene": True, "target": ["Ana", "Bo"], "strategy": None}
    assert info["scored"] == {"timing": True, "target": True, "strategy": False, "group": True}
    # d = (0.5, 0.4): U = 0.55; Ana, the most distressed, gets nothing: penalty 0.5.
    assert info["components"] == pytest.approx(
        {"timing": 1.0, "target": 0.5, "strategy": None, "group": 0.55 - 0.5 - 0.2}
    )
    assert terminated
    rewards = [1.0 + 0.6 - 0.8, 3.0 + 0.2, 1.5 + 0.55 - 0.7]
    episode = info["episode"]
    assert episode["return"] == pytest.approx(sum(rewards)) and episode["length"] == 3
    assert episode["discounted_return"] == pytest.approx(sum(r * CONFIG.gamma**t for t, r in enumerate(rewards)))
    assert episode["returns_by_preset"]["imitation"] == pytest.approx(1.0 + 3.0 + 1.5)
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step(action(0, [], "track"))


def test_masked_choices_are_ignored_and_reported() -> None:
    env = RescueEnv(data=tiny_dataset(), reward=CONFIG, info_level="full")
    env.reset(seed=0)
    env.step(action(0, [], "track"))
    _, _, _, _, info = env.step(action(1, [0, 4], "boundary"))  # slot 4 is empty; boundary is family-only
    assert info["invalid"] == ["target: absent participant slot", "strategy: outside the scenario's taxonomy"]
    assert info["chosen"] == {"intervene": True, "target": ["Ana"], "strategy": None}
    assert info["components"]["strategy"] == 0.0
    masks = env.action_masks()
    assert masks["target"].tolist() == [True, True, False, False, False, False, True]
    assert not masks["strategy"][ALL_STRATEGY_KEYS.index("boundary")]


def test_group_slot_means_everyone() -> None:
    env = RescueEnv(data=tiny_dataset(), reward=CONFIG, info_level="full")
    env.reset(seed=0)
    env.step(action(0, [], "track"))
    env.step(action(0, [], "track"))
    _, _, _, _, info = env.step(action(1, [6], "track"))
    assert info["chosen"]["target"] == ["Ana", "Bo"] and info["components"]["target"] == 1.0


def test_decisions_after_therapist_rows_option() -> None:
    env = RescueEnv(data=tiny_dataset(), decide_after_therapist=True, info_level="full")
    assert env.reset(seed=0)[1]["decision_points"] == 5


def test_oracle_actions_earn_the_maximum_imitation_reward() -> None:
    env = RescueEnv(data="demo", reward="imitation", sample_order="sequential", info_level="full")
    for _ in range(len(env.samples)):
        env.reset()
        done = False
        while not done:
            gold = env.gold()
            bits = np.zeros(7, dtype=np.int8)
            bits[list(gold["recipients"] or [])] = 1
            strategy = gold["strategy"] if gold["strategy"] is not None else 0
            _, reward, done, _, info = env.step(
                {"intervene": int(gold["intervene"]), "target": bits, "strategy": strategy}
            )
            best = 1.0 + (info["scored"]["target"] + info["scored"]["strategy"] if gold["intervene"] else 0)
            assert reward == pytest.approx(best)


def test_sequential_order_covers_the_dataset_once() -> None:
    env = RescueEnv(sample_order="sequential")
    seen = [env.reset()[1]["sample_id"] for _ in range(len(env.samples))]
    assert sorted(seen) == sorted(s.sample_id for s in env.samples) and len(set(seen)) == len(seen)


def test_reset_options_and_errors() -> None:
    env = RescueEnv()
    assert (
        env.reset(options={"sample_id": "demo_family/001_the_okafors"})[1]["sample_id"] == "demo_family/001_the_okafors"
    )
    with pytest.raises(KeyError):
        env.reset(options={"sample_id": "nope"})
    with pytest.raises(ValueError, match="unknown mode"):
        RescueEnv(mode="video")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_participants"):
        RescueEnv(max_participants=2)
    with pytest.raises(RuntimeError, match="reset"):
        RescueEnv().step(action(0, [], "track"))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside"):
        env.step({"intervene": 1, "target": np.zeros(3), "strategy": 0})
    with pytest.raises(ValueError, match="outside"):
        env.step({"intervene": 1, "target": np.zeros(7), "strategy": 11})
    with pytest.raises(ValueError, match="must be a dict"):
        env.step({"intervene": 1})


def test_seeded_reset_restarts_the_sequential_order() -> None:
    env = RescueEnv(sample_order="sequential")
    first = env.reset(seed=0)[1]["sample_id"]
    env.reset()
    assert env.reset(seed=0)[1]["sample_id"] == first


def test_privileged_accessors_after_the_end() -> None:
    env = RescueEnv(data=tiny_dataset())
    env.reset(seed=0)
    for _ in range(3):
        env.step(action(0, [], "track"))
    with pytest.raises(RuntimeError, match="ended"):
        env.gold()


def test_deterministic_given_seed() -> None:
    def trajectory(seed: int) -> list:
        env = gym.make("Rescue-v0")
        env.action_space.seed(seed)
        observation, info = env.reset(seed=seed)
        out = [(observation["context"], info)]
        done = False
        while not done:
            observation, reward, done, _, info = env.step(env.action_space.sample())
            out.append((observation["context"], reward, repr(info)))
        return out

    assert trajectory(3) == trajectory(3)
    assert trajectory(3) != trajectory(4)


def test_gymnasium_conventions() -> None:
    env = gym.make("Rescue-v0")
    check_env(env.unwrapped)
    assert env.spec.id == "Rescue-v0"
    text_env = gym.make("Rescue-v0", render_mode="ansi")
    text_env.reset(seed=0)
    text_env.step(text_env.action_space.sample())
    rendered = text_env.render()
    assert "gold:" in rendered and "chosen:" in rendered and "reward" in rendered


def test_no_annotation_in_the_observation() -> None:
    dataset = load_dataset()
    env = RescueEnv(data=dataset, mode="audiovisual", context_size=-1)
    annotations = {e.emotion_description for s in dataset for r in s.rows for e in r.internal_emotion}
    annotations |= {v.viewpoint for s in dataset for r in s.rows for v in r.viewpoints_attitudes}
    annotations |= {st.strategy_content for s in dataset for r in s.rows for st in r.support_strategy}
    for sample in env.samples:
        for point in env.episode(sample).points:
            assert not any(a and a in point.context for a in annotations)


def test_text_is_normalised_into_the_charset() -> None:
    text = normalise_text("Caf\u00e9 \u201cquoted\u201d \u2014 it\u2019s \u00e2\x80\x94 ok\u2026\r")
    assert text == 'Cafe "quoted" - it\'s a?? ok...?'
    assert set(text) <= CHARSET


def test_release_contexts_fit_the_text_space(text_file) -> None:
    env = RescueEnv(data=str(text_file), mode="audiovisual", context_size=-1)
    space = env.observation_space["context"]
    for sample in env.samples:
        for point in env.episode(sample).points:
            assert space.contains(point.context)


# ----- the fast path (issue 14): precomputation, shared cache, info levels --------------------------------------


def _reference_points(env: RescueEnv, sample: Sample) -> list[dict]:
    """Each decision point as the straightforward code computed it before issue 14: the annotated state, the
    relation pattern and the rendered window recomputed from the rows at every decision point."""
    from rescue_env.data.domain import latest_relation_pattern, latest_states, participants, scenario_of
    from rescue_env.rendering import render_header, render_rows, window

    people = participants(sample)
    header = normalise_text(render_header(scenario_of(sample), people, env.max_participants))
    budget = max(0, env.max_chars - len(header))
    points = []
    for row in env.decision_rows(sample):
        states = latest_states(sample, row, max_age=env.reward_config.max_age)
        text = normalise_text(render_rows(sample, window(row, env.context_size), env.mode))
        points.append(
            {
                "context": header + text[-budget:] if budget else header[: env.max_chars],
                "distress": [(states[p].intensity or 0.0) / 10.0 for p in people],
                "viewpoints": {p: dict(states[p].viewpoints) for p in people if states[p].viewpoints},
                "pattern": latest_relation_pattern(sample, row),
            }
        )
    return points


SETTINGS = (
    {},
    {"mode": "audiovisual", "context_size": -1, "max_chars": 700},
    {"context_size": 0},
    {"decide_after_therapist": True, "reward": RewardConfig(max_age=3)},
)


def _assert_points_match(env: RescueEnv) -> None:
    for sample in env.samples:
        expected = _reference_points(env, sample)
        points = env.episode(sample).points
        assert len(points) == len(expected)
        for point, reference in zip(points, expected):
            assert point.context == reference["context"]
            assert point.distress.tolist() == reference["distress"]
            assert point.viewpoints == reference["viewpoints"]
            assert point.pattern == reference["pattern"]


@pytest.mark.parametrize("settings", SETTINGS, ids=["default", "audiovisual-all-rows", "no-rows", "max-age"])
def test_precomputed_points_equal_the_straightforward_reference(settings) -> None:
    _assert_points_match(RescueEnv(data="demo", **settings))
    _assert_points_match(RescueEnv(data=tiny_dataset(), **settings))


def test_release_points_equal_the_straightforward_reference(text_file) -> None:
    dataset = load_dataset(text_file)
    for settings in SETTINGS[:2]:
        _assert_points_match(RescueEnv(data=dataset, **settings))


def test_conversations_are_precomputed_once_per_process_and_keyed_by_content() -> None:
    from conftest import without_annotations

    from rescue_env.envs.replay import EPISODES

    first, second = RescueEnv(data=load_dataset()), RescueEnv(data=load_dataset())  # two loads: other objects
    sample = first.samples[0]
    assert first.episode(sample) is second.episode(second.samples[0])
    assert RescueEnv(data=load_dataset(), context_size=2).episode(sample) is not first.episode(sample)
    scrubbed = without_annotations(sample)  # the same id, other content: precomputed again
    dataset = Dataset(samples=[scrubbed], source="scrubbed", sha256="0" * 64, report=LoadReport(source="scrubbed"))
    other = RescueEnv(data=dataset).episode(scrubbed)
    assert other is not first.episode(sample) and other.points[-1].state_info != first.episode(sample).points[-1]
    assert len(EPISODES) >= 3
    with pytest.raises(ValueError, match="read-only"):
        first.episode(sample).present[0] = 0  # shared between envs: never written


def _play(env: RescueEnv, seed: int, steps: int) -> list:
    env.action_space.seed(seed)
    observation, _ = env.reset(seed=seed)
    trace = []
    for _ in range(steps):
        observation, reward, terminated, _, info = env.step(env.action_space.sample())
        trace.append((observation, reward, terminated, info))
        if terminated:
            observation, _ = env.reset()
    return trace


def test_basic_info_is_flat_and_full_info_keeps_the_details() -> None:
    basic = _play(RescueEnv(sample_order="sequential"), 3, 60)
    full = _play(RescueEnv(sample_order="sequential", info_level="full"), 3, 60)
    for (obs_b, reward_b, end_b, info_b), (obs_f, reward_f, end_f, info_f) in zip(basic, full):
        assert reward_b == reward_f and end_b == end_f and obs_b["context"] == obs_f["context"]
        assert set(info_b) - {"episode"} == {"decision", "row", "n_invalid"}
        assert all(info_b[k] == info_f[k] for k in ("decision", "row", "n_invalid"))
        assert all(type(v) is int for k, v in info_b.items() if k != "episode")
        assert {"gold", "chosen", "components", "scored", "state", "invalid"} <= set(info_f)
        assert info_f["n_invalid"] == len(info_f["invalid"])
        assert ("episode" in info_b) == end_b and info_b.get("episode") == info_f.get("episode")
    assert any(end for _, _, end, _ in basic)
    env = RescueEnv()
    env.info_level = "full"
    env.reset(seed=0)
    assert "gold" in env.step(env.action_space.sample())[4]
    with pytest.raises(ValueError, match="info_level"):
        RescueEnv(info_level="everything")  # type: ignore[arg-type]


def test_vector_env_merges_the_flat_info() -> None:
    vector = gym.make_vec("Rescue-v0", num_envs=2, vectorization_mode="sync")
    vector.reset(seed=0)
    vector.action_space.seed(0)
    _, rewards, _, _, infos = vector.step(vector.action_space.sample())
    assert rewards.shape == (2,) and infos["decision"].tolist() == [0, 0] and infos["n_invalid"].dtype.kind == "i"
    vector.close()
