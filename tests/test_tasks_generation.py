"""The generative tasks ER and VP: instance sets (Table 6), prompts without leaks, parsing, and scoring
(S_int, S_ER, BERTScore best-match, failures scored as the minimum)."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks import er, vp
from benchmarks.base import Instance, Prediction, PromptOptions
from rescue_env.data import Sample, load_dataset
from rescue_env.data.domain import is_client
from rescue_env.data.schema import Emotion


@dataclass
class FakeJudge:
    score: float | None
    error: str | None = None
    detail: Any = None


def _counts(instances: list[Instance]) -> dict[str, tuple[int, int]]:
    out = {}
    for scenario in ("couple", "family"):
        chosen = [i for i in instances if i.scenario == scenario]
        out[scenario] = (len(chosen), len({i.sample_id for i in chosen}))
    return out


@pytest.fixture(scope="module")
def demo() -> list[Sample]:
    return load_dataset(strict=True).samples


def _answer(items: list[dict[str, Any]]) -> str:
    return json.dumps({"answers": [{"id": str(n), **item} for n, item in enumerate(items, start=1)]})


# ----------------------------------------------------------------------------------------------------------------
# Instance sets
# ----------------------------------------------------------------------------------------------------------------


def test_counts_on_the_release_match_table_6(text_file: Path) -> None:
    samples = load_dataset(text_file).samples
    assert _counts(er.build_instances(samples)) == {"couple": (844, 174), "family": (82, 17)}
    assert _counts(vp.build_instances(samples)) == {"couple": (775, 170), "family": (80, 17)}


def test_demo_has_instances_for_both_scenarios(demo: list[Sample]) -> None:
    for task in (er, vp):
        instances = task.build_instances(demo)
        assert {i.scenario for i in instances} == {"couple", "family"}, task.name
        per_sample = Counter(i.sample_id for i in instances)
        assert max(per_sample.values()) <= 5
        assert len({i.instance_id for i in instances}) == len(instances)


def test_er_rules(demo: list[Sample]) -> None:
    by_id = {s.sample_id: s for s in demo}
    for instance in er.build_instances(demo):
        sample = by_id[instance.sample_id]
        row = sample.rows[instance.row]
        assert is_client(row)
        assert instance.row + 1 > er.early_cutoff(len(sample.rows))
        assert isinstance(instance.gold["intensity"], int) and 0 <= instance.gold["intensity"] <= 10
        assert instance.gold["emotion"]
    assert er.early_cutoff(10) == 3 and er.early_cutoff(33) == 10 and er.early_cutoff(1) == 0
    assert er.early_cutoff(2) == 1


def test_er_gold_uses_the_first_speaker_item(demo: list[Sample]) -> None:
    row = next(r for s in demo for r in s.rows if is_client(r)).model_copy(deep=True)
    speaker = row.primary_speaker
    row.internal_emotion = [
        Emotion(person="Someone", emotion_description="calm", intensity=2),
        Emotion(person=speaker, emotion_description="", intensity=5),
        Emotion(person=speaker, emotion_description="feels hurt", intensity=5),
    ]
    assert er.gold_of(row) is None  # the first item of the speaker is incomplete: no fallback to a later one
    row.internal_emotion = row.internal_emotion[2:]
    assert er.gold_of(row) == {"emotion": "feels hurt", "intensity": 5}
    row.internal_emotion[0].intensity = 10.5  # half to even -> 10
    assert er.gold_of(row)["intensity"] == 10
    row.internal_emotion[0].intensity = 11
    assert er.gold_of(row) is None


# ----------------------------------------------------------------------------------------------------------------
# Prompts: no gold, no gold-bearing id
# ----------------------------------------------------------------------------------------------------------------


def _mutated(sample: Sample, position: int, task: str) -> Sample:
    copy = sample.model_copy(deep=True)
    row = copy.rows[position]
    if task == "er":
        for emotion in row.internal_emotion:
            emotion.emotion_description = "LEAKED-EMOTION"
            emotion.intensity = 0
    else:
        for view in row.viewpoints_attitudes:
            view.viewpoint, view.attitude, view.target = "LEAKED-VIEW", "LEAKED-ATTITUDE", "LEAKED-TARGET"
    return copy


@pytest.mark.parametrize("task", [er, vp], ids=["er", "vp"])
@pytest.mark.parametrize("mode", ["dialogue", "audiovisual"])
def test_prompts_do_not_depend_on_gold(task: Any, mode: str, demo: list[Sample]) -> None:
    samples = {s.sample_id: s for s in demo}
    options = PromptOptions(mode=mode)
    for sample_id in {i.sample_id for i in task.build_instances(demo)}:
        batch = [i for i in task.build_instances([samples[sample_id]])][: task.batch_size]
        messages = task.render(batch, samples, options)
        text = json.dumps(messages)
        assert sample_id not in text and "LEAKED" not in text
        assert all(i.instance_id not in text for i in batch)
        changed = dict(samples)
        for instance in batch:
            changed[sample_id] = _mutated(changed[sample_id], instance.row, task.name)
        fake_gold = (
            {"emotion": "LEAKED", "intensity": 0}
            if task is er
            else {"viewpoints": [{"target": "X", "viewpoint": "LEAKED", "attitude": ""}]}
        )
        regold = [i.model_copy(update={"gold": fake_gold}) for i in batch]
        assert task.render(regold, changed, options) == messages


def test_prompt_shapes(demo: list[Sample]) -> None:
    samples = {s.sample_id: s for s in demo}
    instance = er.build_instances(demo)[0]
    user = er.render([instance], samples, PromptOptions())[1]["content"]
    assert f"[{instance.row + 1}]" in user and f"[{instance.row - 2}]" in user and f"[{instance.row - 3}]" not in user
    assert "feels dismissed and frustrated" in user and "0 (none) to 10" in user
    no_context = er.render([instance], samples, PromptOptions(context_size=0))[1]["content"]
    assert f"[{instance.row}]" not in no_context and f"[{instance.row + 1}]" in no_context
    everything = er.render([instance], samples, PromptOptions(context_size=-1))[1]["content"]
    assert "[1] " in everything
    vp_instance = vp.build_instances(demo)[0]
    vp_user = vp.render([vp_instance], samples, PromptOptions())[1]["content"]
    assert "Therapist" in vp_instance.inputs["people"]
    assert vp_instance.inputs["speaker"] not in vp_instance.inputs["people"]
    assert ", ".join(vp_instance.inputs["people"]) in vp_user


# ----------------------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------------------


def _er_batch(demo: list[Sample], n: int = 2) -> list[Instance]:
    return er.build_instances(demo)[:n]


def test_er_parse_cases(demo: list[Sample]) -> None:
    batch = _er_batch(demo, 2)
    fenced = "Sure!\n```json\n" + _answer([{"emotion": "feels hurt", "intensity": 6}]) + "\n```"
    first, second = er.parse(fenced, batch)
    assert first.ok and first.value == {"emotion": "feels hurt", "intensity": 6} and not first.normalised
    assert second.failure == "missing_item"

    cases = {
        "intensity 11": {"emotion": "feels hurt", "intensity": 11},
        "intensity high": {"emotion": "feels hurt", "intensity": "high"},
        "no intensity": {"emotion": "feels hurt"},
        "no emotion": {"intensity": 5},
        "empty emotion": {"emotion": "  ", "intensity": 5},
        "bool": {"emotion": "feels hurt", "intensity": True},
    }
    for label, item in cases.items():
        (prediction,) = er.parse(_answer([item]), batch[:1])
        assert not prediction.ok and prediction.value is None, label
    assert "intensity" in er.parse(_answer([cases["intensity 11"]]), batch[:1])[0].failure
    assert er.parse(_answer([cases["no intensity"]]), batch[:1])[0].failure == "missing_field: intensity"
    assert er.parse(_answer([cases["no emotion"]]), batch[:1])[0].failure == "missing_field: emotion"

    (loose,) = er.parse(_answer([{"emotion": "feels hurt", "intensity": "7"}]), batch[:1])
    assert loose.ok and loose.value["intensity"] == 7 and loose.normalised
    assert [p.failure for p in er.parse("no json here", batch)] == ["malformed_json"] * 2
    assert [p.failure for p in er.parse(None, batch)] == ["no_answer"] * 2


def test_vp_parse_cases(demo: list[Sample]) -> None:
    batch = vp.build_instances(demo)[:2]
    good = {"viewpoints": [{"target": "Jordan", "viewpoint": "he never listens", "attitude": "resentful"}]}
    text = "```json\n" + _answer([good, {"viewpoints": []}]) + "\n```"
    first, second = vp.parse(text, batch)
    assert first.ok and first.value == good and not first.normalised
    assert second.failure == "empty_viewpoints"
    (missing,) = vp.parse(_answer([{"viewpoints": [{"target": "Jordan"}, {"viewpoint": "x"}]}]), batch[:1])
    assert not missing.ok and "no viewpoint" in missing.failure
    (partial,) = vp.parse(_answer([{"viewpoints": [{"target": "Jordan"}, good["viewpoints"][0]]}]), batch[:1])
    assert partial.ok and partial.normalised and partial.value == good
    (no_field,) = vp.parse(_answer([{"answer": "x"}]), batch[:1])
    assert no_field.failure == "missing_field: viewpoints"
    assert vp.parse(_answer([good]), batch)[1].failure == "missing_item"


# ----------------------------------------------------------------------------------------------------------------
# ER scoring
# ----------------------------------------------------------------------------------------------------------------


def _er_instance(intensity: int = 7) -> Instance:
    return Instance(
        task="er", instance_id="er:x:r5", sample_id="x", scenario="couple", row=4,
        inputs={"speaker": "Maya"}, gold={"emotion": "feels dismissed", "intensity": intensity},
    )  # fmt: skip


def _er_prediction(intensity: int, emotion: str = "feels ignored") -> Prediction:
    return Prediction(instance_id="er:x:r5", value={"emotion": emotion, "intensity": intensity})


def test_intensity_score_hand_values() -> None:
    assert er.intensity_score(4, 7) == 2
    assert er.intensity_score(7, 7) == 5
    assert er.intensity_score(0, 10) == 1
    assert er.score(_er_instance(7), _er_prediction(4))["s_int"] == 2


def test_s_er_with_a_judge() -> None:
    instance, prediction = _er_instance(7), _er_prediction(6)
    assert er.judge_request(instance, prediction) == {
        "speaker": "Maya",
        "gold_emotion": "feels dismissed",
        "predicted_emotion": "feels ignored",
    }
    assert er.bertscore_pairs(instance, prediction) == [("feels ignored", "feels dismissed")]
    s = er.score(instance, prediction, {"judge": FakeJudge(3.0), "bertscore": [0.8]})
    assert (s["s_int"], s["s_emo"], s["s_er"], s["bertscore"]) == (4, 3.0, 3.5, 0.8)
    unjudged = er.score(instance, prediction, {"judge": None, "bertscore": None})
    assert unjudged["s_emo"] is None and unjudged["s_er"] is None and unjudged["bertscore"] is None
    errored = er.score(instance, prediction, {"judge": FakeJudge(None, error="timeout"), "bertscore": [0.8]})
    assert errored["s_emo"] is None and errored["judge_failed"]
    assert er.score(instance, prediction, {"judge": FakeJudge(9.0)})["judge_failed"]  # outside 1..5

    summary = er.summary([s, unjudged])
    assert summary["s_int"] == 4 and summary["s_er"] == 3.5 and summary["intensity_mae"] == 1
    assert er.details([instance, instance], [s, errored])["judge_failures"] == 1
    none_run = er.summary([unjudged])
    assert none_run["s_emo"] is None and none_run["s_er"] is None and none_run["bertscore"] is None


def test_er_failure_is_the_minimum() -> None:
    instance = _er_instance(7)
    failed = Prediction(instance_id="er:x:r5", failure="missing_item")
    assert er.judge_request(instance, failed) is None and er.bertscore_pairs(instance, failed) == []
    s = er.score(instance, failed, {"judge": None, "bertscore": []})
    assert (s["s_int"], s["s_emo"], s["s_er"], s["bertscore"], s["abs_error"]) == (1, 1.0, 1.0, 0.0, 7)
    good = er.score(instance, _er_prediction(7), {"judge": FakeJudge(5.0), "bertscore": [1.0]})
    summary = er.summary([good, s])
    assert summary == {"s_emo": 3.0, "s_int": 3.0, "s_er": 3.0, "bertscore": 0.5, "intensity_mae": 3.5}
    assert er.details([instance, instance], [good, s])["failures"] == 1
    # the judge/BERTScore not run at all: failures do not invent a value ...
    unjudged = er.score(instance, _er_prediction(7), {"judge": None, "bertscore": None})
    assert er.summary([unjudged, s])["s_er"] is None
    # ... but a run where everything failed reports the minimum, not "not run"
    assert er.summary([s, s]) == {"s_emo": 1.0, "s_int": 1.0, "s_er": 1.0, "bertscore": 0.0, "intensity_mae": 7.0}


def test_er_oracle_round_trip(demo: list[Sample]) -> None:
    batch = _er_batch(demo, 3)
    text = _answer([er.oracle_answer(i) for i in batch])
    for instance, prediction in zip(batch, er.parse(text, batch)):
        assert prediction.ok
        plain = er.score(instance, prediction)
        assert plain["s_int"] == 5 and plain["s_er"] is None
        full = er.score(instance, prediction, {"judge": FakeJudge(5.0), "bertscore": [1.0]})
        assert full["s_er"] == 5 and full["bertscore"] == 1.0


def test_er_baselines(demo: list[Sample]) -> None:
    instances = er.build_instances(demo)
    samples = {s.sample_id: s for s in demo}
    rng = random.Random(0)
    for instance in instances:
        for answer in (
            er.random_answer(instance, samples[instance.sample_id], rng),
            er.heuristic_answer(instance, samples[instance.sample_id]),
            er.majority_answer(instance, [i for i in instances if i.scenario == instance.scenario]),
        ):
            (prediction,) = er.parse(_answer([answer]), [instance])
            assert prediction.ok, answer


# ----------------------------------------------------------------------------------------------------------------
# VP scoring
# ----------------------------------------------------------------------------------------------------------------


def _vp_instance() -> Instance:
    gold = [
        {"target": "Jordan", "viewpoint": "he never listens", "attitude": "resentful"},
        {"target": "Therapist", "viewpoint": "she can help", "attitude": "hopeful"},
    ]
    return Instance(
        task="vp", instance_id="vp:x:r3", sample_id="x", scenario="couple", row=2,
        inputs={"speaker": "Maya", "people": ["Jordan", "Therapist"]}, gold={"viewpoints": gold},
    )  # fmt: skip


def _vp_prediction() -> Prediction:
    predicted = [
        {"target": "jordan", "viewpoint": "he ignores me", "attitude": "hurt"},
        {"target": "Jordan", "viewpoint": "he is lazy", "attitude": "critical"},
        {"target": "Maya", "viewpoint": "I try hard", "attitude": "proud"},
    ]
    return Prediction(instance_id="vp:x:r3", value={"viewpoints": predicted})


def test_vp_bertscore_best_match_per_gold() -> None:
    instance, prediction = _vp_instance(), _vp_prediction()
    pairs = vp.bertscore_pairs(instance, prediction)
    assert len(pairs) == 6
    assert pairs[:3] == [("he ignores me", "he never listens"), ("he is lazy", "he never listens"),
                         ("I try hard", "he never listens")]  # fmt: skip
    assert pairs[3] == ("he ignores me", "she can help")
    f1s = [0.9, 0.6, 0.3, 0.2, 0.4, 0.7]  # gold 1: best 0.9; gold 2: best 0.7
    s = vp.score(instance, prediction, {"judge": FakeJudge(4.0, detail={"verdict": "pass"}), "bertscore": f1s})
    assert s["bertscore"] == pytest.approx(0.8)
    assert s["target_match"] == 0.5  # "jordan" matches Jordan case-insensitively; Therapist is missed
    assert s["judge"] == 4.0 and s["judge_detail"] == {"verdict": "pass"}
    with pytest.raises(ValueError):
        vp.score(instance, prediction, {"judge": None, "bertscore": f1s[:5]})
    assert vp.judge_request(instance, prediction) == {
        "speaker": "Maya",
        "gold": instance.gold["viewpoints"],
        "predicted": prediction.value["viewpoints"],
    }


def test_vp_failure_is_the_minimum() -> None:
    instance = _vp_instance()
    failed = Prediction(instance_id="vp:x:r3", failure="empty_viewpoints")
    assert vp.judge_request(instance, failed) is None and vp.bertscore_pairs(instance, failed) == []
    s = vp.score(instance, failed, {"judge": None, "bertscore": []})
    assert (s["judge"], s["bertscore"], s["target_match"]) == (1.0, 0.0, 0.0)
    authors = vp.score(instance, failed, {"judge": None, "bertscore": None, "rubric": "authors"})
    assert authors["judge"] == 0.0
    assert vp.JUDGE_MIN == {"likert": 1.0, "authors": 0.0}
    ok = vp.score(instance, _vp_prediction(), {"judge": FakeJudge(5.0), "bertscore": [1.0] * 6})
    assert vp.summary([ok, s]) == {"judge": 3.0, "bertscore": 0.5, "target_match": 0.25}
    assert vp.details([instance, instance], [ok, s])["failures"] == 1
    unrun = vp.score(instance, _vp_prediction(), {"judge": None, "bertscore": None})
    assert vp.summary([unrun, s]) == {"judge": None, "bertscore": None, "target_match": 0.25}
    # the authors' 0-6 rubric is passed through; a value outside the rubric is a judge failure
    six = vp.score(instance, _vp_prediction(), {"judge": FakeJudge(6.0), "rubric": "authors"})
    assert six["judge"] == 6.0
    bad = vp.score(instance, _vp_prediction(), {"judge": FakeJudge(6.0)})
    assert bad["judge"] is None and bad["judge_failed"]


def test_vp_oracle_round_trip(demo: list[Sample]) -> None:
    batch = vp.build_instances(demo)[:3]
    predictions = vp.parse(_answer([vp.oracle_answer(i) for i in batch]), batch)
    for instance, prediction in zip(batch, predictions):
        assert prediction.ok
        n = len(vp.bertscore_pairs(instance, prediction))
        assert n == len(instance.gold["viewpoints"]) ** 2
        s = vp.score(instance, prediction, {"judge": FakeJudge(5.0), "bertscore": [1.0] * n})
        assert (s["judge"], s["bertscore"], s["target_match"]) == (5.0, 1.0, 1.0)


def test_vp_baselines(demo: list[Sample]) -> None:
    instances = vp.build_instances(demo)
    samples = {s.sample_id: s for s in demo}
    rng = random.Random(0)
    for instance in instances:
        for answer in (
            vp.random_answer(instance, samples[instance.sample_id], rng),
            vp.heuristic_answer(instance, samples[instance.sample_id]),
            vp.majority_answer(instance, [i for i in instances if i.scenario == instance.scenario]),
        ):
            (prediction,) = vp.parse(_answer([answer]), [instance])
            assert prediction.ok, answer
            assert all(v["target"] != instance.inputs["speaker"] for v in prediction.value["viewpoints"])
