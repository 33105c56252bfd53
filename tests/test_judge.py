"""The LLM-as-judge for ER and VP: prompts, tolerant and range-checked parsing, the async call."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from benchmarks.judge import (
    JudgeScore,
    er_judge_messages,
    judge,
    parse_judge_answer,
    vp_judge_messages,
)


@dataclass
class FakeCompletion:
    text: str | None = None
    error: str | None = None


def fake_complete(answer: FakeCompletion, seen: list | None = None):
    async def complete(messages: list[dict[str, str]]) -> FakeCompletion:
        if seen is not None:
            seen.append(messages)
        return answer

    return complete


# -- parse_judge_answer: likert ------------------------------------------------------------------------------------


def test_plain_json():
    result = parse_judge_answer('{"score": 4, "reason": "close paraphrase"}')
    assert result.score == 4.0 and result.error is None and result.ok
    assert result.reason == "close paraphrase"
    assert result.raw == '{"score": 4, "reason": "close paraphrase"}'


def test_fenced_json():
    result = parse_judge_answer('```json\n{"score": 5, "reason": "same"}\n```')
    assert result.score == 5.0 and result.error is None


def test_prose_around_json():
    text = 'Here is my rating.\n{"score": 2, "reason": "weakly related"}\nHope this helps {not json}.'
    result = parse_judge_answer(text)
    assert result.score == 2.0 and result.error is None


@pytest.mark.parametrize("value", ["0", "6", "3.5", '"high"', "true", "-1", "null"])
def test_bad_scores_are_errors_not_clamped(value):
    result = parse_judge_answer(f'{{"score": {value}, "reason": "x"}}')
    assert result.score is None
    assert result.error and "score" in result.error
    assert not result.ok


def test_integer_valued_forms_are_accepted():
    assert parse_judge_answer('{"score": 3.0}').score == 3.0
    assert parse_judge_answer('{"score": "4"}').score == 4.0
    assert parse_judge_answer('{"score": 1}').score == 1.0


def test_missing_key():
    result = parse_judge_answer('{"rating": 4, "reason": "wrong key"}')
    assert result.score is None and "missing" in result.error


@pytest.mark.parametrize("text", [None, "", "   ", "I would say four out of five."])
def test_no_answer_or_no_object(text):
    result = parse_judge_answer(text)
    assert result.score is None and result.error
    assert result.raw == text


# -- parse_judge_answer: authors rubric ---------------------------------------------------------------------------


def test_authors_rubric_sums_parts():
    result = parse_judge_answer(
        '{"source_target_score": 2, "viewpoint_score": 3, "viewpoint_total_score": 9, "reason": "ok"}', "authors"
    )
    assert result.score == 5.0  # recomputed, the judge's (wrong) total is ignored
    assert result.detail == {"source_target_score": 2.0, "viewpoint_score": 3.0}
    assert result.error is None


@pytest.mark.parametrize(
    "payload",
    [
        {"source_target_score": 3, "viewpoint_score": 2},
        {"source_target_score": 1, "viewpoint_score": 5},
        {"source_target_score": 1, "viewpoint_score": -1},
        {"source_target_score": 1.5, "viewpoint_score": 2},
        {"viewpoint_score": 2},
    ],
)
def test_authors_rubric_bad_part_is_error(payload):
    result = parse_judge_answer(json.dumps(payload), "authors")
    assert result.score is None and result.error


def test_authors_rubric_zero_is_valid():
    result = parse_judge_answer('{"source_target_score": 0, "viewpoint_score": 0}', "authors")
    assert result.score == 0.0 and result.error is None


def test_likert_answer_under_authors_rubric_is_error():
    assert parse_judge_answer('{"score": 4}', "authors").score is None


def test_unknown_rubric():
    with pytest.raises(ValueError):
        parse_judge_answer('{"score": 4}', "percent")  # type: ignore[arg-type]


# -- judge() ------------------------------------------------------------------------------------------------------


def test_judge_ok_passes_messages():
    seen: list = []
    messages = er_judge_messages(speaker="Anna", gold_emotion="hurt", predicted_emotion="feels hurt")
    result = asyncio.run(judge(fake_complete(FakeCompletion(text='{"score": 5, "reason": "same"}'), seen), messages))
    assert isinstance(result, JudgeScore)
    assert result.score == 5.0 and result.error is None
    assert seen == [messages]


def test_judge_completion_error():
    answer = FakeCompletion(text=None, error="RateLimitError: too many requests")
    result = asyncio.run(judge(fake_complete(answer), [{"role": "user", "content": "x"}]))
    assert result.score is None
    assert "RateLimitError" in result.error


def test_judge_raising_callable_is_an_error_value():
    async def broken(messages):
        raise TimeoutError("judge timed out")

    result = asyncio.run(judge(broken, [{"role": "user", "content": "x"}]))
    assert result.score is None and "timed out" in result.error


def test_judge_authors_rubric_and_invalid_answer():
    ok = asyncio.run(
        judge(fake_complete(FakeCompletion(text='{"source_target_score": 1, "viewpoint_score": 2}')), [], "authors")
    )
    assert ok.score == 3.0
    bad = asyncio.run(judge(fake_complete(FakeCompletion(text='{"score": 7}')), []))
    assert bad.score is None and "out of range" in bad.error


# -- prompts ------------------------------------------------------------------------------------------------------


def _text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_er_messages():
    messages = er_judge_messages(
        speaker="Michael", gold_emotion="feels dismissed and frustrated", predicted_emotion="annoyed and unheard"
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "therapy" in messages[0]["content"]
    text = _text(messages)
    for needle in ("Michael", "feels dismissed and frustrated", "annoyed and unheard", '"score"', "1", "5"):
        assert needle in text
    assert "JSON" in messages[-1]["content"]


@pytest.mark.parametrize("rubric", ["likert", "authors"])
def test_vp_messages(rubric):
    gold = [{"source": "Sarah", "target": "Tom", "viewpoint": "thinks Tom never listens", "attitude": "critical"}]
    predicted = [
        {"target": "Tom", "viewpoint": "believes he ignores her"},
        {"target": "Therapist", "viewpoint": "hopes for help"},
    ]
    messages = vp_judge_messages(speaker="Sarah", gold=gold, predicted=predicted, rubric=rubric)
    assert [m["role"] for m in messages] == ["system", "user"]
    text = _text(messages)
    for needle in ("Sarah", "Tom", "thinks Tom never listens", "critical", "believes he ignores her", "hopes for help"):
        assert needle in text
    if rubric == "likert":
        assert '"score"' in text and "source_target_score" not in text
    else:
        assert "source_target_score" in text and "viewpoint_score" in text


def test_vp_messages_empty_prediction_and_bad_input():
    messages = vp_judge_messages(speaker="Ann", gold=[{"target": "Bob", "viewpoint": "x"}], predicted=[])
    assert '"predicted_viewpoints": []' in _text(messages)
    with pytest.raises(TypeError):
        vp_judge_messages(speaker="Ann", gold={"target": "Bob", "viewpoint": "x"}, predicted=[])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        vp_judge_messages(speaker="Ann", gold=[], predicted=[], rubric="percent")  # type: ignore[arg-type]
