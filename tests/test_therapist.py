"""The LLM therapist (agents/therapist.py): its prompt reads only the observation, its answers are validated
against the masks, unusable answers become the documented fallback with their failure kind."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from conftest import make_row, make_sample, write_jsonl
from test_tasks_common import _scrub_annotations

from agents.client import LLMClient, ModelConfig
from agents.mock import mock_responder
from agents.therapist import (
    DECISION_HEADING,
    EVERYONE,
    LLMPolicy,
    fallback_action,
    few_shot_examples,
    gold_answer,
    is_therapist_prompt,
    mock_decision,
    parse_decision,
    read_observation,
    therapist_messages,
)
from rescue_env.data import Dataset, load_dataset
from rescue_env.envs.replay import RescueEnv
from rescue_env.taxonomy import ALL_STRATEGY_KEYS


def _couple_observation(tmp_path) -> dict:
    """Ana and Ben; the decision after Ana's row addressed to the therapist."""
    sample = make_sample("t/1", ["Ben", "Ana"])
    sample["rows"].append(make_row(2, "Therapist"))
    env = RescueEnv(str(write_jsonl(tmp_path / "t.jsonl", [sample])))
    observation, _ = env.reset(seed=0)
    observation, *_ = env.step(fallback_action(observation))  # the second decision point: after Ana's row
    return observation


def _family_observation() -> dict:
    env = RescueEnv(sample_order="sequential")
    while True:
        observation, info = env.reset()
        if info["scenario"] == "family":
            return observation


def test_read_observation_names_slots_and_strategies(tmp_path) -> None:
    session = read_observation(_couple_observation(tmp_path))
    assert session.scenario == "couple"
    assert session.slots == {"Ben": 0, "Ana": 1} and session.people == ["Ben", "Ana"]
    assert session.group_slot == 6
    assert session.last_row == 2  # the row numbers shown are 1-based
    assert "boundary" not in session.strategy_keys and "reframe" in session.strategy_keys


def test_prompt_shows_people_strategies_rows_and_the_answer_form(tmp_path) -> None:
    observation = _couple_observation(tmp_path)
    system, user = therapist_messages(observation)
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    assert 'People in the session: Ben, Ana. "everyone" means all of them together' in text
    assert "- reframe (Reframe):" in text and "- boundary (" not in text  # the couple taxonomy only
    assert "## Conversation\n[1] " in text and "[2] " in text
    assert text.rstrip().endswith('"rationale": "one short sentence"}')
    assert is_therapist_prompt([system, user]) and DECISION_HEADING in text
    assert not is_therapist_prompt([{"role": "user", "content": "### Item 1"}])


def test_parse_a_valid_intervention(tmp_path) -> None:
    observation = _couple_observation(tmp_path)
    decision = parse_decision(
        '{"intervene": true, "targets": ["Ana"], "strategy": "reframe", "rationale": "r"}', observation
    )
    assert decision.failure is None and decision.intervene and decision.targets == ("Ana",)
    assert decision.action["intervene"] == 1 and decision.action["target"].tolist() == [0, 1, 0, 0, 0, 0, 0]
    assert decision.action["strategy"] == ALL_STRATEGY_KEYS.index("reframe") and decision.rationale == "r"
    assert not decision.normalised


@pytest.mark.parametrize(
    "answer",
    [
        {"intervene": True, "targets": EVERYONE, "strategy": "track"},
        {"intervene": True, "targets": ["Couple"], "strategy": "track"},
        {"intervene": True, "targets": ["Ana", "Ben"], "strategy": "track"},
    ],
)
def test_everyone_is_the_group_bit(tmp_path, answer) -> None:
    decision = parse_decision(json.dumps(answer), _couple_observation(tmp_path))
    assert decision.failure is None and decision.action["target"].tolist() == [0, 0, 0, 0, 0, 0, 1]
    assert set(decision.targets) == {"Ana", "Ben"}


def test_case_folded_names_are_matched_and_recorded(tmp_path) -> None:
    decision = parse_decision(
        '{"intervene": true, "targets": ["ana"], "strategy": "Reframe"}', _couple_observation(tmp_path)
    )
    assert decision.failure is None and decision.targets == ("Ana",) and decision.normalised


def test_keep_listening_ignores_the_other_fields(tmp_path) -> None:
    observation = _couple_observation(tmp_path)
    decision = parse_decision('{"intervene": false, "targets": ["Nobody"], "strategy": "nonsense"}', observation)
    assert decision.failure is None and not decision.intervene
    assert decision.action["intervene"] == 0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (None, "api_error"),
        ("I would reframe.", "malformed_json"),
        ('["intervene"]', "malformed_json"),
        ('{"intervene": "yes", "targets": ["Ana"], "strategy": "track"}', "invalid_schema"),
        ('{"targets": ["Ana"], "strategy": "track"}', "invalid_schema"),
        ('{"intervene": true, "targets": 3, "strategy": "track"}', "invalid_schema"),
        ('{"intervene": true, "strategy": "track"}', "missing_target"),
        ('{"intervene": true, "targets": [], "strategy": "track"}', "missing_target"),
        ('{"intervene": true, "targets": ["Carla"], "strategy": "track"}', "unknown_target"),
        ('{"intervene": true, "targets": ["Family"], "strategy": "track"}', "unknown_target"),  # not a couple word
        ('{"intervene": true, "targets": ["Ana"]}', "missing_strategy"),
        ('{"intervene": true, "targets": ["Ana"], "strategy": "boundary"}', "invalid_strategy"),  # family only
        ('{"intervene": true, "targets": ["Ana"], "strategy": "hug"}', "invalid_strategy"),
    ],
)
def test_unusable_answers_fall_back_to_listening_with_their_kind(tmp_path, text, kind) -> None:
    observation = _couple_observation(tmp_path)
    decision = parse_decision(text, observation)
    assert decision.failure == kind
    assert not decision.intervene and decision.targets == () and decision.strategy is None
    fallback = fallback_action(observation)
    assert decision.action["intervene"] == fallback["intervene"] == 0
    assert np.array_equal(decision.action["target"], fallback["target"])
    assert decision.raw == text


def test_family_prompt_offers_boundary_and_dyads() -> None:
    observation = _family_observation()
    session = read_observation(observation)
    assert "boundary" in session.strategy_keys and len(session.people) >= 3
    first, second = session.people[:2]
    decision = parse_decision(
        json.dumps({"intervene": True, "targets": [second, first], "strategy": "boundary"}), observation
    )
    assert decision.failure is None and decision.targets == (first, second)
    assert decision.action["target"][[session.slots[first], session.slots[second]]].tolist() == [1, 1]


def test_the_prompt_reads_no_annotation() -> None:
    """Every prompt of every decision point of the demo data is byte-identical when every annotation is rewritten."""
    dataset = load_dataset()
    scrubbed = Dataset([_scrub_annotations(s) for s in dataset], dataset.source, dataset.sha256, dataset.report)
    original, changed = RescueEnv(dataset), RescueEnv(scrubbed)
    count = 0
    for sample in dataset:
        a, _ = original.reset(options={"sample_id": sample.sample_id})
        b, _ = changed.reset(options={"sample_id": sample.sample_id})
        while True:
            assert therapist_messages(a) == therapist_messages(b)
            assert "CHANGED" not in json.dumps(therapist_messages(b))
            count += 1
            action = fallback_action(a)
            a, _, done, _, _ = original.step(action)
            b, *_ = changed.step(action)
            if done:
                break
    assert count == sum(len(original.episode(s).points) for s in original.samples)


def test_gold_answer_json() -> None:
    people = ("Ana", "Ben")
    assert gold_answer({"intervene": False, "recipients": None, "strategy": None}, people)["intervene"] is False
    assert gold_answer({"intervene": True, "recipients": frozenset({1}), "strategy": 2}, people) == {
        "intervene": True,
        "targets": ["Ben"],
        "strategy": ALL_STRATEGY_KEYS[2],
    }
    assert (
        gold_answer({"intervene": True, "recipients": frozenset({0, 1}), "strategy": 0}, people)["targets"] == EVERYONE
    )
    assert gold_answer({"intervene": True, "recipients": None, "strategy": 0}, people) is None


def test_few_shot_examples_come_from_the_given_conversations_only() -> None:
    dataset = load_dataset()
    outside = [s for s in dataset if s.sample_id != dataset[0].sample_id]
    env = RescueEnv(Dataset(outside, dataset.source, dataset.sha256, dataset.report))
    examples = few_shot_examples(env, 4, seed=0)
    assert set(examples) == {"couple", "family"}
    for scenario, chosen in examples.items():
        assert len(chosen) == 4 and all(e.scenario == scenario for e in chosen)
        assert sum(e.answer["intervene"] for e in chosen) == 2  # half interventions
    played = " ".join(r.dialogue_cleaned for r in dataset[0].rows)
    assert not any(e.rows and e.rows.split('"')[1] in played for ex in examples.values() for e in ex)
    assert few_shot_examples(env, 4, seed=0) == examples and few_shot_examples(env, 4, seed=1) != examples
    assert few_shot_examples(env, 0) == {}


def test_mock_model_answers_a_valid_action(tmp_path) -> None:
    observation = _couple_observation(tmp_path)
    messages = therapist_messages(observation)
    answer = json.loads(mock_decision(messages))
    assert answer == {"intervene": True, "targets": ["Ana"], "strategy": "track", "rationale": answer["rationale"]}
    assert mock_responder(messages) == mock_decision(messages)  # --model mock routes therapist prompts here
    assert parse_decision(mock_decision(messages), observation).failure is None


def test_policy_history_and_examples_reach_the_prompt(tmp_path) -> None:
    seen: list[list[dict]] = []

    def model(messages: list[dict]) -> str:
        seen.append(messages)
        return '{"intervene": true, "targets": ["Ana"], "strategy": "track"}'

    client = LLMClient(ModelConfig(model="openai/gpt-4o-mini"), mock_response=model)
    example = few_shot_examples(RescueEnv(), 1, seed=0)
    policy = LLMPolicy(client, examples=example, history=True)
    observation = _couple_observation(tmp_path)
    first = asyncio.run(policy.decide(observation))
    assert first.failure is None and first.prompt_hash and first.usage["cached"] is False
    second = asyncio.run(policy.decide(observation))
    assert (
        "Your earlier decisions in this session:\n- after row 2: intervened, addressing Ana, with track"
        in (seen[-1][-1]["content"])
    )
    assert "Decisions real therapists made in other sessions" in seen[-1][-1]["content"]
    assert second.prompt_hash != first.prompt_hash
    policy.reset()
    asyncio.run(policy.decide(observation))
    assert "Your earlier decisions" not in seen[-1][-1]["content"]
    assert policy.act(observation, None)["intervene"] == 1


def test_api_failure_is_the_fallback_with_the_error(tmp_path) -> None:
    client = LLMClient(ModelConfig(model="openai/fake", api_base="http://127.0.0.1:9/v1", timeout=2), max_retries=0)
    decision = asyncio.run(LLMPolicy(client).decide(_couple_observation(tmp_path)))
    assert decision.failure == "api_error" and decision.detail and decision.action["intervene"] == 0
