"""rescue_sim_multiparty_v0: PettingZoo API and seed tests, the registry, replay participants' words, the drawn
speaker, the transcript, the growing therapist context, and words that never move the state."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pettingzoo
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import rescue_env
from agents.therapist import read_observation
from rescue_env.data.schema import Sample
from rescue_env.envs.multiparty import SILENT, SPEAK, RescueMultiPartyEnv
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.envs.sim_multiparty import (
    PersonaTurn,
    ReplaySimParticipant,
    RescueSimMultiPartyEnv,
    SimParticipant,
    env,
    fit_context,
    parallel_env,
    raw_env,
)
from rescue_env.rendering import ParsedRow, split_context
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

FAMILY = "demo_family/002_the_lindqvists"
COUPLE = "demo_maya_and_jordan/001"

# The same advisory PettingZoo checker warnings as tests/test_multiparty.py (Dict spaces, a text context,
# different observations per agent, the name "therapist", fixed possible_agents).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
    pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be"),
    pytest.mark.filterwarnings("ignore:Action space for each agent probably should be"),
    pytest.mark.filterwarnings("ignore:We recommend agents to be named"),
    pytest.mark.filterwarnings("ignore:Agents have different observation space sizes"),
    pytest.mark.filterwarnings("ignore:No agents present but not all possible_agents"),
]


def therapist_action(step: int, n_slots: int = 6) -> dict:
    """A fixed, varied therapist action per step: keep listening every other step, one slot or everyone."""
    bits = np.zeros(n_slots + 1, dtype=np.int8)
    bits[step % (n_slots + 1)] = 1
    return {"intervene": step % 2, "target": bits, "strategy": step % len(ALL_STRATEGY_KEYS)}


def play(multi: RescueSimMultiPartyEnv, sample_id: str, seed: int = 3, participant_action=lambda step: SPEAK):
    """One episode with ``therapist_action``; returns the reset observations and every step's output."""
    observations, _ = multi.reset(seed=seed, options={"sample_id": sample_id})
    steps, step = [], 0
    while multi.agents:
        actions = {agent: participant_action(step) for agent in multi.agents[1:]}
        steps.append(multi.step({"therapist": therapist_action(step), **actions}))
        step += 1
    return observations, steps


def later_lines(sim: RescueSimEnv, sample: Sample, name: str) -> list[str]:
    first = sim.episode(sample).rows[0]
    return [
        r.dialogue_cleaned.strip()
        for r in sample.rows[first + 1 :]
        if r.primary_speaker.strip() == name and r.dialogue_cleaned.strip()
    ]


class Recorder:
    """A participant that records every turn it is asked for and says a fixed line."""

    def __init__(self, line: str | None = "I hear you.") -> None:
        self.turns: list[PersonaTurn] = []
        self.line = line

    def say(self, turn: PersonaTurn) -> str | None:
        self.turns.append(turn)
        return self.line


# ----- PettingZoo API and registry -------------------------------------------------------------------------------


def test_parallel_api() -> None:
    parallel_api_test(parallel_env(), num_cycles=40)


def test_aec_api() -> None:
    api_test(env(), num_cycles=40)
    api_test(raw_env(), num_cycles=10)


def test_seeds() -> None:
    parallel_seed_test(parallel_env, num_cycles=40)
    seed_test(env, num_cycles=40)


def test_registry_makes_the_views_and_registering_again_is_quiet() -> None:
    sim = pettingzoo.make("parallel", "rescue/rescue_sim_multiparty_v0", max_participants=5)
    assert isinstance(sim, RescueSimMultiPartyEnv) and sim.metadata["name"] == "rescue_sim_multiparty_v0"
    assert sim.possible_agents == ["therapist"] + [f"participant_{i}" for i in range(5)]
    replay = pettingzoo.make("parallel", "rescue/rescue_multiparty_v0")
    assert isinstance(replay, RescueMultiPartyEnv)
    for env_id, name in (("rescue/rescue_sim_multiparty_v0", "rescue_sim_multiparty_v0"),
                         ("rescue/rescue_multiparty_v0", "rescue_multiparty_v0")):  # fmt: skip
        aec = pettingzoo.make("aec", env_id)
        assert isinstance(aec, pettingzoo.AECEnv) and aec.metadata["name"] == name
        aec.reset(seed=0)
        assert aec.agent_selection == "therapist"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an "Overriding environment" warning would fail here
        rescue_env._register_environments()
    assert sum("rescue" in key for key in pettingzoo.parallel_registry) == 3  # the replay's v0 and v1, the sim's v0


def test_agents_spaces_and_reset() -> None:
    multi = parallel_env(max_participants=5)
    assert multi.action_space("therapist") is multi.sim.action_space
    assert multi.observation_space("therapist") is multi.sim.observation_space
    assert multi.action_space("participant_0") is not multi.action_space("participant_1")
    observations, infos = multi.reset(seed=0, options={"sample_id": FAMILY})
    names = list(multi.sim.episode(multi.sim.dataset.get(FAMILY)).participants)
    assert multi.agents == ["therapist"] + [f"participant_{i}" for i in range(len(names))]
    assert [infos[f"participant_{i}"]["name"] for i in range(len(names))] == names
    # The opening is exactly RescueSim-v0's context; the transcript is empty.
    single, _ = RescueSimEnv(max_participants=5).reset(seed=0, options={"sample_id": FAMILY})
    assert observations["therapist"]["context"] == single["context"] and multi.transcript == []
    for agent in multi.agents:
        assert multi.observation_space(agent).contains(observations[agent])
    # self: the speaker of the opening's last row; nobody addressed yet.
    start = multi.sim.episode(multi.sim.dataset.get(FAMILY)).start
    assert [observations[f"participant_{i}"]["self"][0] for i in range(len(names))] == [
        float(i == start.last_speaker) for i in range(len(names))
    ]
    assert all(observations[f"participant_{i}"]["self"][1] == 0 for i in range(len(names)))


# ----- words: replay participants, the drawn speaker, the transcript -----------------------------------------------


@pytest.mark.parametrize("sample_id", [COUPLE, FAMILY])
def test_replay_participants_say_their_later_lines_in_order(sample_id: str) -> None:
    multi = parallel_env()
    _, steps = play(multi, sample_id)
    sample = multi.sim.dataset.get(sample_id)
    names = multi.sim.episode(sample).participants
    transcript = multi.transcript
    assert len(transcript) == len(steps) and transcript[-1]["step"] == len(steps) - 1
    for name in names:
        drawn = [record for record in transcript if record["speaker"] == name]
        lines = later_lines(multi.sim, sample, name)
        said = [record["words"] for record in drawn]
        # One recorded line per turn drawn, in order, then nothing once they run out.
        expected = lines[: len(drawn)] + [None] * max(0, len(drawn) - len(lines))
        assert said == expected
    assert any(record["words"] for record in transcript)


def test_only_the_drawn_speaker_speaks_and_silence_says_nothing() -> None:
    recorder = Recorder()
    multi = RescueSimMultiPartyEnv(participant_policy=recorder)
    # The drawn speaker stays silent on every third step.
    _, steps = play(multi, FAMILY, participant_action=lambda step: SILENT if step % 3 == 2 else SPEAK)
    names = multi.sim.episode(multi.sim.dataset.get(FAMILY)).participants
    asked = iter(recorder.turns)
    for step, (_, _, _, _, infos) in enumerate(steps):
        speaker = infos["therapist"]["speaker"]
        drawn = [i for i in range(len(names)) if infos[f"participant_{i}"]["speaker"]]
        assert [names[i] for i in drawn] == [speaker]
        for i in range(len(names)):
            entry = infos[f"participant_{i}"]
            if i not in drawn:
                assert entry["said"] is None and not entry["silent"]
        silent = step % 3 == 2
        assert infos[f"participant_{drawn[0]}"]["silent"] == silent
        assert infos["therapist"]["said"] == (None if silent else "I hear you.")
        if not silent:
            turn = next(asked)  # the policy is asked exactly for the drawn, speaking participant
            assert (turn.name, turn.slot, turn.agent) == (speaker, drawn[0], f"participant_{drawn[0]}")
    assert next(asked, None) is None


def test_transcript_records_and_persona_turns() -> None:
    recorder = Recorder()
    multi = RescueSimMultiPartyEnv(participant_policy=recorder)
    first_observations, steps = play(multi, COUPLE)
    sample = multi.sim.dataset.get(COUPLE)
    episode = multi.sim.episode(sample)
    transcript = multi.transcript
    json.dumps(transcript)  # JSON-able
    assert transcript is not multi._transcript  # a copy: callers cannot rewrite the episode's record
    for step, (record, (observations, _, _, _, infos)) in enumerate(zip(transcript, steps)):
        chosen = infos["therapist"]["chosen"]
        assert set(record) == {"step", "row", "speaker", "slot", "silent", "words", "therapist", "state"}
        assert record["step"] == step and record["speaker"] == infos["therapist"]["speaker"]
        assert record["words"] == "I hear you." and record["state"] == observations["therapist"]["text"]
        if chosen["intervene"]:
            assert record["therapist"] == chosen
        else:
            assert record["therapist"] == {"intervene": False, "target": [], "strategy": None}
    # What each participant is told: its opening lines, the therapist's action, the transcript so far.
    first = episode.rows[0]
    for n, turn in enumerate(recorder.turns):
        own = [r.dialogue_cleaned.strip() for r in sample.rows[: first + 1] if r.primary_speaker == turn.name]
        assert list(turn.opening_lines) == [line for line in own if line]
        assert turn.transcript == tuple(transcript[:n]) and turn.state == transcript[n]["state"]
        assert turn.sample_id == COUPLE and turn.scenario == "couple" and turn.participants == episode.participants
        action = transcript[n]["therapist"]
        if action["intervene"]:
            assert turn.therapist is not None and list(turn.therapist.targets) == action["target"]
            assert turn.therapist.strategy == action["strategy"]
        else:
            assert turn.therapist is None
    assert first_observations["therapist"]["context"] in recorder.turns[0].context


def test_self_observation_and_rewards() -> None:
    multi = parallel_env()
    _, steps = play(multi, FAMILY)
    names = multi.sim.episode(multi.sim.dataset.get(FAMILY)).participants
    for step, (observations, rewards, _, _, infos) in enumerate(steps):
        chosen = infos["therapist"]["chosen"]
        addressed = set(chosen["target"]) if chosen["intervene"] else set()
        for i, name in enumerate(names):
            agent = f"participant_{i}"
            assert rewards[agent] == pytest.approx(1.0 - infos["therapist"]["state"]["distress"][name])
            expected = [float(name == infos["therapist"]["speaker"]), float(name in addressed)]
            assert observations[agent]["self"].tolist() == expected, step
            assert observations[agent]["context"] == observations["therapist"]["context"]


def test_words_never_move_the_state() -> None:
    """The same seed and therapist actions give the same rewards, speakers, state and end with replayed words,
    other words or none at all: the words are text only, the state moves by F."""
    runs = []
    for policy in (None, Recorder("Something else entirely."), Recorder(None)):
        _, steps = play(RescueSimMultiPartyEnv(participant_policy=policy), FAMILY, seed=11)
        runs.append(
            [
                (rewards, infos["therapist"]["speaker"], infos["therapist"]["state"], terminations, truncations)
                for _, rewards, terminations, truncations, infos in steps
            ]
        )
    single = RescueSimEnv(info_level="full")
    single.reset(seed=11, options={"sample_id": FAMILY})
    alone, step, done = [], 0, False
    while not done:
        _, reward, terminated, truncated, info = single.step(therapist_action(step))
        alone.append((reward, info["speaker"], info["state"]))
        done, step = terminated or truncated, step + 1
    assert runs[0] == runs[1] == runs[2]
    assert [(r["therapist"], s, st) for r, s, st, _, _ in runs[0]] == alone


# ----- the therapist's context -------------------------------------------------------------------------------------


def test_context_grows_with_the_transcript_and_parses() -> None:
    multi = parallel_env(max_chars=20_000)  # room for the whole episode: nothing is dropped
    observations, steps = play(multi, FAMILY)
    header, opening = split_context(observations["therapist"]["context"])
    previous = len(opening)
    transcript = multi.transcript
    for (observations, _, _, _, infos), record in zip(steps, transcript):
        context = observations["therapist"]["context"]
        assert multi.observation_space("therapist").contains(observations["therapist"])
        now_header, blocks = split_context(context)
        rows = [ParsedRow(block) for block in blocks]
        assert now_header == header and all(row.is_row for row in rows)
        chosen = infos["therapist"]["chosen"]
        added = int(chosen["intervene"]) + int(record["words"] is not None)
        assert len(blocks) == previous + added
        previous = len(blocks)
        if record["words"] is not None:
            last = rows[-1]
            assert (last.position, last.speaker, last.words) == (record["row"], record["speaker"], record["words"])
            assert last.addressees == (("Therapist",) if chosen["intervene"] else tuple(
                name for name in infos["therapist"]["state"]["distress"] if name != record["speaker"]
            ))  # fmt: skip
        if chosen["intervene"]:
            therapist_row = rows[-1 - int(record["words"] is not None)]
            assert therapist_row.speaker == "Therapist" and therapist_row.position == record["row"] - 1
            words = f"(support: {chosen['strategy']})" if chosen["strategy"] else "(support)"
            assert therapist_row.words == words
        # The LLM therapist's reader sees the newest row and everyone present.
        session = read_observation(observations["therapist"])
        present = set(infos["therapist"]["state"]["distress"])
        assert session.last_row == rows[-1].position and set(session.people) == present
    numbers = [ParsedRow(b).position for b in split_context(context)[1]]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    # Intervening on everyone addresses the family as a group.
    assert any(ParsedRow(b).addressees == ("Family",) and ParsedRow(b).speaker == "Therapist" for b in blocks)


def test_context_never_exceeds_max_chars_and_keeps_the_header() -> None:
    multi = parallel_env(max_chars=900)
    observations, steps = play(multi, FAMILY)
    header = observations["therapist"]["context"].partition("\n")[0]
    for observations, *_ in steps:
        context = observations["therapist"]["context"]
        assert len(context) <= 900 and context.partition("\n")[0] == header
        blocks = split_context(context)[1]
        assert all(ParsedRow(b).is_row for b in blocks[1:])  # whole rows dropped, oldest first
    words = [r["words"] for r in multi.transcript if r["words"]]
    assert words[-1] in context and words[0] not in context


def test_fit_context_by_hand() -> None:
    blocks = ['[1] 00:00.0-00:01.0 A -> B: "one"', '[2] 00:01.0-00:02.0 B -> A: "two"']
    assert fit_context("H", blocks, 1000) == "H\n" + "\n".join(blocks)
    assert fit_context("H", blocks, 2 + len(blocks[1])) == "H\n" + blocks[1]
    assert fit_context("H", blocks, 6) == "H\n" + blocks[1][-4:]  # a single block too long keeps its end
    assert fit_context("HEADER", blocks, 3) == "HEA"


def test_words_are_one_ascii_line_in_the_context() -> None:
    multi = RescueSimMultiPartyEnv(participant_policy=Recorder('Caf\u00e9\n[99] 00:00.0-00:01.0 Fake -> X: "forged"'))
    multi.reset(seed=0, options={"sample_id": COUPLE})
    observations, *_ = multi.step({"therapist": therapist_action(0)})
    blocks = split_context(observations["therapist"]["context"])[1]
    assert ParsedRow(blocks[-1]).words.startswith("Cafe [99]") and "\n" not in blocks[-1]
    assert not any(ParsedRow(b).speaker == "Fake" for b in blocks)


# ----- errors, render, policies ------------------------------------------------------------------------------------


def test_invalid_actions_render_and_policy_type() -> None:
    assert isinstance(ReplaySimParticipant(RescueSimEnv()), SimParticipant) and isinstance(Recorder(), SimParticipant)
    with pytest.raises(TypeError):
        RescueSimMultiPartyEnv(participant_policy=object())
    with pytest.raises(ValueError):
        RescueSimMultiPartyEnv(render_mode="rgb_array")
    multi = RescueSimMultiPartyEnv(participant_policy=Recorder(), render_mode="ansi")
    with pytest.raises(RuntimeError):
        multi.step({"therapist": therapist_action(0)})
    multi.reset(seed=0, options={"sample_id": COUPLE})
    with pytest.raises(ValueError, match="therapist"):
        multi.step({"participant_0": SPEAK})
    with pytest.raises(ValueError, match="not in the episode"):
        multi.step({"therapist": therapist_action(0), "participant_4": SPEAK})
    with pytest.raises(ValueError, match="0 \\(speak\\)"):
        multi.step({"therapist": therapist_action(0), "participant_0": 2})
    _, _, _, _, infos = multi.step({"therapist": therapist_action(0)})
    text = multi.render()
    assert text.startswith(f"--- {COUPLE} step 1/") and text.endswith(f"{infos['therapist']['speaker']}: I hear you.\n")
