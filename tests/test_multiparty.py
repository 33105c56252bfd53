"""rescue_multiparty_v0: PettingZoo API and seed tests, and the multi-party view agreeing with Rescue-v0."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_row
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from rescue_env.data.loading import Dataset, LoadReport
from rescue_env.data.schema import Sample
from rescue_env.envs.multiparty import (
    SILENT,
    SPEAK,
    ParticipantPolicy,
    ReplayParticipant,
    RescueMultiPartyEnv,
    env,
    parallel_env,
    raw_env,
)
from rescue_env.envs.replay import RescueEnv
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

FAMILY = "demo_family/002_the_lindqvists"

# Advisory warnings of the PettingZoo checkers that this design triggers on purpose: Dict observations and actions
# (a text context), therapist and participants observing different things, the agent name "therapist" (no
# _<number> suffix), and participant slots absent from a conversation that never join (possible_agents is fixed).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
    pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be"),
    pytest.mark.filterwarnings("ignore:Action space for each agent probably should be"),
    pytest.mark.filterwarnings("ignore:We recommend agents to be named"),
    pytest.mark.filterwarnings("ignore:Agents have different observation space sizes"),
    pytest.mark.filterwarnings("ignore:No agents present but not all possible_agents"),
]


def tiny_dataset() -> Dataset:
    emotion = [{"person": "Ana", "emotion_description": "hurt", "intensity": 8}]
    rows = [
        make_row(0, "Ana", "I never get a word in.", internal_emotion=emotion),  # decision 0
        make_row(1, "Bo", "That is not fair.", target=["Ana"]),  # decision 1
        make_row(2, "Bo", "I listen all the time."),  # decision 2
        make_row(3, "Therapist", "Let us slow down."),
        make_row(4, "Couple", "Okay."),  # decision 3 (a group row: attributed to no one)
        make_row(5, "Ana", "Fine."),  # decision 4
        make_row(6, "Bo", "Thank you."),
    ]
    sample = Sample.model_validate({"sample_id": "tiny/1", "scenario": "couple", "rows": rows})
    return Dataset(samples=[sample], source="tiny", sha256="0" * 64, report=LoadReport(source="tiny"))


def therapist_action(step: int, n_slots: int = 6) -> dict:
    """A fixed, varied therapist action per step (valid and invalid bits alike)."""
    bits = np.zeros(n_slots + 1, dtype=np.int8)
    bits[step % (n_slots + 1)] = 1
    return {"intervene": step % 2, "target": bits, "strategy": step % len(ALL_STRATEGY_KEYS)}


def run_both(sample_id: str, seed: int = 3):
    """Step RescueMultiPartyEnv and a fresh RescueEnv with the same therapist actions; yield both per step."""
    multi, single = parallel_env(), RescueEnv(info_level="full")
    observations, infos = multi.reset(seed=seed, options={"sample_id": sample_id})
    single_observation, single_info = single.reset(seed=seed, options={"sample_id": sample_id})
    assert infos["therapist"] == single_info
    step = 0
    while multi.agents:
        state = single.state()
        assert observations["therapist"]["context"] == single_observation["context"]
        out = multi.step({agent: therapist_action(step) if agent == "therapist" else SPEAK for agent in multi.agents})
        single_out = single.step(therapist_action(step))
        yield state, out, single_out
        observations, single_observation = out[0], single_out[0]
        step += 1


def recorded_lines(sample: Sample, rows: range, name: str) -> str | None:
    lines = [sample.rows[r].dialogue_cleaned.strip() for r in rows if sample.rows[r].primary_speaker == name]
    return "\n".join(lines) or None


# ----- PettingZoo API ------------------------------------------------------------------------------------------


def test_parallel_api() -> None:
    parallel_api_test(parallel_env(), num_cycles=60)


def test_aec_api() -> None:
    api_test(env(), num_cycles=60)


def test_raw_env_api() -> None:
    api_test(raw_env(), num_cycles=10)


def test_seeds() -> None:
    parallel_seed_test(parallel_env, num_cycles=60)
    seed_test(env, num_cycles=60)


def test_agents_spaces_and_metadata() -> None:
    multi = parallel_env(max_participants=5)
    assert multi.metadata["name"] == "rescue_multiparty_v0"
    assert multi.possible_agents == ["therapist"] + [f"participant_{i}" for i in range(5)]
    assert multi.action_space("therapist") is multi.rescue.action_space
    assert multi.observation_space("therapist") is multi.rescue.observation_space
    for agent in multi.possible_agents[1:]:
        assert multi.action_space(agent) is multi.action_space(agent)
        assert multi.observation_space(agent) is multi.observation_space(agent)
    assert multi.action_space("participant_0") is not multi.action_space("participant_1")

    observations, infos = multi.reset(options={"sample_id": FAMILY})
    assert multi.agents == ["therapist", "participant_0", "participant_1", "participant_2", "participant_3"]
    assert [infos[f"participant_{i}"]["name"] for i in range(4)] == ["Karin", "Lars", "Oskar", "Freja"]
    for agent in multi.agents:
        assert multi.observation_space(agent).contains(observations[agent])
    assert observations["participant_2"]["context"] == observations["therapist"]["context"]


# ----- agreement with Rescue-v0 and the recorded conversation ----------------------------------------------------


@pytest.mark.parametrize("sample_id", ["demo_maya_and_jordan/001", FAMILY])
def test_rewards_said_and_end_agree_with_the_replay(sample_id: str) -> None:
    probe = RescueEnv()
    sample = probe.dataset.get(sample_id)
    names = probe.episode(sample).participants
    assert len(names) == (4 if sample_id == FAMILY else 2)
    decision_rows, said = [], []
    for state, (observations, rewards, terminations, truncations, infos), single in run_both(sample_id):
        single_observation, single_reward, single_terminated, _, single_info = single
        assert all(observations[agent]["context"] == single_observation["context"] for agent in observations)
        assert rewards["therapist"] == single_reward
        assert infos["therapist"]["components"] == single_info["components"]
        for slot in range(len(names)):
            assert rewards[f"participant_{slot}"] == pytest.approx(1.0 - state["distress"][slot])
            assert not infos[f"participant_{slot}"]["silent"]
        assert set(terminations) == set(rewards) == {"therapist"} | {f"participant_{i}" for i in range(len(names))}
        assert all(v == single_terminated for v in terminations.values()) and not any(truncations.values())
        decision_rows.append(single_info["row"] - 1)
        said.append(infos)
    assert single_terminated and len(said) == len(probe.episode(sample).points)
    assert "episode" in said[-1]["therapist"]
    # What each participant says after decision t: their rows after it, through the next decision's row.
    ends = decision_rows[1:] + [len(sample.rows) - 1]
    for start, end, infos in zip(decision_rows, ends, said):
        for slot, name in enumerate(names):
            expected = recorded_lines(sample, range(start + 1, end + 1), name)
            assert infos[f"participant_{slot}"]["said"] == infos[f"participant_{slot}"]["recorded"] == expected
            assert infos[f"participant_{slot}"]["rows"] == (start + 2, end + 1)


def test_segments_self_observation_and_silence_by_hand() -> None:
    multi = RescueMultiPartyEnv(data=tiny_dataset())
    observations, _ = multi.reset(seed=0)
    assert multi.agents == ["therapist", "participant_0", "participant_1"]
    # Decision 0 is after Ana's row (to the therapist): Ana spoke it, nobody was addressed.
    assert observations["participant_0"]["self"].tolist() == [1.0, 0.0]
    assert observations["participant_1"]["self"].tolist() == [0.0, 0.0]
    listen = therapist_action(0)
    observations, rewards, *_, infos = multi.step({"therapist": listen})  # participants omitted: they speak
    assert infos["participant_1"]["said"] == "That is not fair." and infos["participant_0"]["said"] is None
    assert rewards["participant_0"] == pytest.approx(0.2) and rewards["participant_1"] == pytest.approx(1.0)
    # Decision 1 is after Bo's row to Ana.
    assert observations["participant_0"]["self"].tolist() == [0.0, 1.0]
    assert observations["participant_1"]["self"].tolist() == [1.0, 0.0]

    # Bo stays silent in the segment after decision 1 (row 3, his own): recorded, not said.
    _, _, _, _, infos = multi.step({"therapist": listen, "participant_1": SILENT})
    assert infos["participant_1"] == {
        "name": "Bo",
        "slot": 1,
        "said": None,
        "recorded": "I listen all the time.",
        "silent": True,
        "rows": (3, 3),
    }
    # The segment after decision 2 holds the therapist's row and the group row: nobody's own line.
    _, _, _, _, infos = multi.step({"therapist": listen})
    assert infos["participant_0"]["rows"] == (4, 5)
    assert infos["participant_0"]["said"] is None and infos["participant_1"]["said"] is None
    _, _, _, _, infos = multi.step({"therapist": listen})
    assert infos["participant_0"]["said"] == "Fine."
    _, _, terminations, _, infos = multi.step({"therapist": listen})
    assert infos["participant_1"]["said"] == "Thank you." and infos["participant_1"]["rows"] == (7, 7)
    assert all(terminations.values()) and multi.agents == []
    with pytest.raises(RuntimeError):
        multi.step({"therapist": listen})


def test_custom_participant_policy_is_called_with_context_and_recorded_lines() -> None:
    class Echo:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def utterance(self, agent: str, slot: int, context: str, recorded: str | None) -> str | None:
            self.calls.append((agent, slot, context, recorded))
            return f"{agent} says hi"

    policy = Echo()
    assert isinstance(policy, ParticipantPolicy) and isinstance(ReplayParticipant(), ParticipantPolicy)
    multi = RescueMultiPartyEnv(data=tiny_dataset(), participant_policy=policy)
    observations, _ = multi.reset(seed=0)
    context = observations["therapist"]["context"]
    _, _, _, _, infos = multi.step({"therapist": therapist_action(0), "participant_0": SILENT})
    assert policy.calls == [("participant_1", 1, context, "That is not fair.")]
    assert infos["participant_1"]["said"] == "participant_1 says hi" and infos["participant_0"]["said"] is None
    # The transcript still advances as recorded.
    assert infos["participant_1"]["recorded"] == "That is not fair."

    with pytest.raises(TypeError):
        RescueMultiPartyEnv(data=tiny_dataset(), participant_policy=object())


def test_invalid_actions_and_render() -> None:
    multi = RescueMultiPartyEnv(data=tiny_dataset(), render_mode="ansi")
    multi.reset(seed=0)
    with pytest.raises(ValueError, match="therapist"):
        multi.step({"participant_0": SPEAK})
    with pytest.raises(ValueError, match="not in the episode"):
        multi.step({"therapist": therapist_action(0), "participant_4": SPEAK})
    with pytest.raises(ValueError, match="0 \\(speak\\)"):
        multi.step({"therapist": therapist_action(0), "participant_0": 2})
    multi.step({"therapist": therapist_action(0), "participant_0": SILENT})
    text = multi.render()
    assert text.startswith("--- tiny/1 decision 1 after row 1")
    assert "participant_0 Ana: (silent)\nparticipant_1 Bo: That is not fair.\n" in text
    with pytest.raises(ValueError):
        RescueMultiPartyEnv(render_mode="rgb_array")


# ----------------------------------------------------------------------------------------------------------------
# rescue_multiparty_v1: v0 without the gold in the therapist's infos by default


def test_v1_passes_the_pettingzoo_api_and_seed_tests() -> None:
    from rescue_env.envs import multiparty_v1

    parallel_api_test(multiparty_v1.parallel_env(), num_cycles=20)
    api_test(multiparty_v1.raw_env(), num_cycles=10)
    parallel_seed_test(multiparty_v1.parallel_env, num_cycles=20)
    seed_test(multiparty_v1.env, num_cycles=20)


def test_v1_infos_carry_no_gold_by_default_and_otherwise_equal_v0() -> None:
    import pettingzoo

    from rescue_env.envs import multiparty_v1

    v1 = pettingzoo.make("parallel", "rescue/rescue_multiparty_v1", render_mode="ansi")
    assert isinstance(v1, multiparty_v1.RescueMultiPartyEnvV1) and v1.metadata["name"] == "rescue_multiparty_v1"
    v0, full = parallel_env(), multiparty_v1.parallel_env(info_level="full")
    starts = [view.reset(seed=3, options={"sample_id": FAMILY}) for view in (v0, v1, full)]
    assert starts[0][0].keys() == starts[1][0].keys()
    step, done = 0, False
    while not done:
        actions = {agent: therapist_action(step) if agent == "therapist" else SPEAK for agent in v0.agents}
        outs = [view.step(actions) for view in (v0, v1, full)]
        (obs0, rew0, term0, _, info0), (obs1, rew1, term1, _, info1), (_, _, _, _, info_full) = outs
        assert rew0 == rew1 and term0 == term1
        for agent, observation in obs0.items():
            for key, value in observation.items():
                np.testing.assert_equal(obs1[agent][key], value)
        # v0 (and v1 asked for "full") hand the annotated gold and state to whoever reads infos; v1 does not.
        assert "gold" in info0["therapist"] and info_full["therapist"] == info0["therapist"]
        assert not {"gold", "state", "chosen"} & set(info1["therapist"])
        assert {k: v for k, v in info1.items() if k != "therapist"} == {
            k: v for k, v in info0.items() if k != "therapist"
        }
        assert v1.render()  # the text of the step is still there
        done = all(term0.values())
        step += 1
    assert step > 3
