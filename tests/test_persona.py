"""The LLM persona participants (agents/persona.py): what the prompt holds and never holds, strict parsing, the
mock model, and persona episodes end to end through the one client (the offline mock and a local server)."""

from __future__ import annotations

import json
import re

import pytest
from test_sim_multiparty import FAMILY, Recorder, play

from agents.client import LLMClient, ModelConfig
from agents.fake_server import FakeOpenAIServer, Fault, example_responder
from agents.mock import mock_responder
from agents.persona import (
    FAILURE_KINDS,
    MAX_SAY_CHARS,
    PERSONA_HEADING,
    PersonaParticipant,
    is_persona_prompt,
    mock_persona,
    parse_say,
    persona_messages,
)
from agents.therapist import is_therapist_prompt
from rescue_env.data.schema import Sample
from rescue_env.envs.sim_multiparty import PersonaTurn, RescueSimMultiPartyEnv, SimParticipant
from rescue_env.taxonomy import strategies

COUPLE = "demo_rosa_and_ben/003"


def mock_client(**kwargs) -> LLMClient:
    return LLMClient(ModelConfig(model="mock"), **kwargs)


def recorded_turns(sample_id: str = COUPLE, **env_kwargs) -> tuple[RescueSimMultiPartyEnv, list[PersonaTurn]]:
    """Every turn of one episode (with the varied therapist of test_sim_multiparty) as a persona would get it."""
    recorder = Recorder()
    multi = RescueSimMultiPartyEnv(participant_policy=recorder, **env_kwargs)
    play(multi, sample_id)
    return multi, recorder.turns


def annotation_texts(sample: Sample) -> set[str]:
    """The sample's annotation free texts that are not also words of its dialogue (so that finding one in a prompt
    can only mean that an annotation leaked)."""
    dialogue = " ".join(row.dialogue_cleaned for row in sample.rows)
    texts: set[str] = set()
    for row in sample.rows:
        texts |= {e.emotion_description for e in row.internal_emotion}
        texts |= {v.viewpoint for v in row.viewpoints_attitudes} | {v.attitude for v in row.viewpoints_attitudes}
        texts |= {s.strategy_content for s in row.support_strategy}
        texts |= {row.relation_pattern_reason or "", row.relation_cycle_reason or ""}
    return {t.strip() for t in texts if len(t.strip()) >= 12 and t.strip() not in dialogue}


# ----- the prompt ----------------------------------------------------------------------------------------------------


def test_prompt_holds_who_they_are_their_voice_state_therapist_and_recent_rows() -> None:
    multi, turns = recorded_turns()
    turn = next(t for t in turns if t.therapist is not None and t.therapist.strategy and t.opening_lines)
    system, user = persona_messages(turn)
    assert system["role"] == "system" and "couple-therapy session" in system["content"]
    text = user["content"]
    other = next(name for name in turn.participants if name != turn.name)
    assert text.startswith(f"You are {turn.name}, one of the clients in a couple-therapy session")
    assert f"The other people in the session: {other}, and the therapist." in text
    assert '"Father"' in text  # names may be roles
    for line in turn.opening_lines[-8:]:
        assert f'- "{line[:400]}' in text  # their own recorded lines, as examples of their voice
    assert turn.state in text
    label = strategies("couple").get(turn.therapist.strategy)
    assert f'using the support strategy "{label.name}"' in text
    alone = turn.name in turn.therapist.targets and len(turn.therapist.targets) < len(turn.participants)
    assert ("The therapist just spoke to you" in text) == alone
    # The last rows of the conversation, without numbers or times: the latest one is this step's therapist turn.
    conversation = text.partition("## The conversation so far\n")[2].partition(f"\n\n{PERSONA_HEADING}")[0]
    lines = conversation.splitlines()[1:]
    assert len(lines) == 8 and lines[-1].startswith("Therapist -> ")
    assert not any(re.match(r"\[\d+\]", line) for line in lines)
    assert text.rstrip().endswith('{"say": "what you say next, in your own words"}')
    assert is_persona_prompt([system, user]) and not is_therapist_prompt([system, user])
    assert not is_persona_prompt([{"role": "user", "content": "## Your decision"}])


def test_prompt_after_keeping_listening_and_for_a_family() -> None:
    _, turns = recorded_turns(FAMILY)
    listened = next(t for t in turns if t.therapist is None)
    text = persona_messages(listened)[-1]["content"]
    assert "The therapist kept listening" in text and "family-therapy session" in text
    everyone = next(t for t in turns if t.therapist is not None and set(t.therapist.targets) == set(t.participants))
    assert "spoke to everyone (the family as a whole)" in persona_messages(everyone)[-1]["content"]
    assert persona_messages(listened, history=0, examples=0)[-1]["content"].count('- "') == 0


@pytest.mark.parametrize("sample_id", [COUPLE, FAMILY])
def test_prompts_carry_no_annotation(sample_id: str) -> None:
    multi, turns = recorded_turns(sample_id)
    sample = multi.sim.dataset.get(sample_id)
    needles = annotation_texts(sample)
    assert len(needles) > 10 and turns
    for turn in turns:
        text = json.dumps(persona_messages(turn))
        assert not [needle for needle in needles if needle in text]
        # A strategy is named only as the agent's own choice of this step, never a recorded one.
        chosen = turn.therapist.strategy if turn.therapist and turn.therapist.targets else None
        assert text.count("using the support strategy") == int(chosen is not None)
        if chosen:
            assert f'using the support strategy \\"{strategies(turn.scenario).get(chosen).name}\\"' in text


# ----- parsing and the mock ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "say", "failure"),
    [
        ('{"say": "  I am tired.  "}', "I am tired.", None),
        ('```json\n{"say": "Fine.", "mood": "x"}\n```', "Fine.", None),
        (None, None, "api_error"),
        ("I cannot help with that", None, "malformed_json"),
        ('["say", "hi"]', None, "malformed_json"),
        ('{"words": "hi"}', None, "invalid_schema"),
        ('{"say": 3}', None, "invalid_schema"),
        ('{"say": ["hi"]}', None, "invalid_schema"),
        ('{"say": "   "}', None, "empty_say"),
        (json.dumps({"say": "x" * (MAX_SAY_CHARS + 1)}), None, "too_long"),
    ],
)
def test_parse_say_is_strict(text: str | None, say: str | None, failure: str | None) -> None:
    reply = parse_say(text)
    assert (reply.say, reply.failure) == (say, failure) and reply.raw == text
    assert failure is None or failure in FAILURE_KINDS


def test_mock_answers_persona_prompts_validly_and_deterministically() -> None:
    _, turns = recorded_turns()
    answers = set()
    for turn in turns:
        messages = persona_messages(turn)
        answer = mock_responder(messages)  # --model mock routes persona prompts here
        assert answer == mock_persona(messages) == mock_responder(messages)
        assert parse_say(answer).failure is None
        answers.add(json.loads(answer)["say"])
    assert len(answers) >= 2  # it reacts to what just happened


# ----- persona episodes through the one client -----------------------------------------------------------------------


def test_persona_episode_with_the_mock_model() -> None:
    persona = PersonaParticipant(mock_client())
    assert isinstance(persona, SimParticipant) and persona.name == "persona:mock"
    multi = RescueSimMultiPartyEnv(participant_policy=persona)
    _, steps = play(multi, FAMILY)
    transcript = multi.transcript
    assert len(transcript) == len(steps) and all(record["words"] for record in transcript)
    assert persona.usage.calls == len(transcript) and persona.usage.failed == 0 and persona.failure_log == []
    assert persona.usage.completion_tokens > 0 and persona.last is not None and persona.last.prompt_hash
    context = steps[-1][0]["therapist"]["context"]
    assert transcript[-1]["words"] in context
    # The same episode again: the same words (deterministic), the rewards untouched by them.
    again = RescueSimMultiPartyEnv(participant_policy=PersonaParticipant(mock_client()))
    _, steps_again = play(again, FAMILY)
    assert again.transcript == transcript
    assert [s[1] for s in steps_again] == [s[1] for s in steps]


def test_persona_episode_against_a_local_server(tmp_path) -> None:
    with FakeOpenAIServer(example_responder) as server:
        config = ModelConfig(model="openai/fake", api_base=server.base_url)
        persona = PersonaParticipant(LLMClient(config, cache_dir=tmp_path, backoff_base=0.01, backoff_max=0.05))
        multi = RescueSimMultiPartyEnv(participant_policy=persona, max_steps=5)
        play(multi, COUPLE)
        sent = server.request_count
        assert sent == persona.usage.calls == 5 and persona.usage.failed == 0
        assert all(is_persona_prompt(body["messages"]) for body in server.requests)
        assert all(record["words"] for record in multi.transcript) and persona.usage.prompt_tokens > 0
        # Played again: every answer comes from the client's cache, none from the server.
        cached = PersonaParticipant(LLMClient(config, cache_dir=tmp_path))
        again = RescueSimMultiPartyEnv(participant_policy=cached, max_steps=5)
        play(again, COUPLE)
        assert server.request_count == sent and cached.usage.cache_hits == 5
        assert again.transcript == multi.transcript


def test_unusable_answers_say_nothing_and_are_counted() -> None:
    persona = PersonaParticipant(mock_client(mock_response="I cannot help with that"))
    multi = RescueSimMultiPartyEnv(participant_policy=persona, max_steps=6)
    observations, steps = play(multi, COUPLE)
    assert persona.usage.failures == {"malformed_json": 6} and persona.usage.failed == 6
    assert [entry["kind"] for entry in persona.failure_log] == ["malformed_json"] * 6
    assert all(record["words"] is None for record in multi.transcript)
    assert all(s[4]["therapist"]["said"] is None for s in steps)
    # No client row was added: only the therapist's own turns.
    opening = observations["therapist"]["context"]
    added = steps[-1][0]["therapist"]["context"][len(opening) :]
    assert "I cannot help" not in added and all(" Therapist -> " in line for line in added.strip().splitlines())


def test_api_errors_are_counted_with_their_detail() -> None:
    with FakeOpenAIServer(faults=lambda index, body: Fault("500")) as server:
        client = LLMClient(ModelConfig(model="openai/fake", api_base=server.base_url), max_retries=0)
        persona = PersonaParticipant(client)
        multi = RescueSimMultiPartyEnv(participant_policy=persona, max_steps=2)
        play(multi, COUPLE)
    assert persona.usage.failures == {"api_error": 2} and client.usage.failures == 2
    assert persona.failure_log[0]["detail"].startswith("InternalServerError")
    assert [record["words"] for record in multi.transcript] == [None, None]


def test_say_all_gathers_several_turns_in_one_run() -> None:
    _, turns = recorded_turns()
    persona = PersonaParticipant(mock_client())
    said = persona.say_all(turns[:3])
    assert said == [json.loads(mock_persona(persona.messages(t)))["say"] for t in turns[:3]]
    assert persona.usage.calls == 3 and persona.say_all([]) == []
    assert persona.say(turns[0]) == said[0] and persona.usage.calls == 4
    with pytest.raises(ValueError):
        PersonaParticipant(mock_client(), history=-1)
