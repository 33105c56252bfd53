"""Domain helpers: scenario, participants, targets, relation labels, annotated states; hand-checked values."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_row, make_sample

from rescue_env.data import load_dataset
from rescue_env.data.domain import (
    SpeakerClass,
    collapse_target,
    decision_rows,
    is_client,
    latest_relation_pattern,
    latest_states,
    participants,
    relation_labels,
    scenario_of,
    speaker_class,
    support_target,
    target_members,
)
from rescue_env.data.schema import Sample, SupportStrategy


def _sample(record: dict) -> Sample:
    return Sample.model_validate(record)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Therapist", SpeakerClass.THERAPIST),
        (" Therapist ", SpeakerClass.THERAPIST),
        ("therapist", SpeakerClass.CLIENT),
        ("Couple", SpeakerClass.GROUP),
        ("Family", SpeakerClass.GROUP),
        ("Father", SpeakerClass.CLIENT),
        ("", SpeakerClass.NONE),
    ],
)
def test_speaker_class_is_exact(name: str, expected: SpeakerClass) -> None:
    assert speaker_class(name) is expected


def test_scenario_field_wins_then_the_authors_inference() -> None:
    assert scenario_of(_sample(make_sample("family_therapy/004/merged", ["Ana"], scenario="couple"))) == "couple"
    assert scenario_of(_sample(make_sample("family_therapy/004/merged", ["Ana"], scenario=None))) == "family"
    assert scenario_of(_sample(make_sample("x/family_therapy/1", ["Ana"], scenario=None))) == "family"
    grouped = make_sample("a_and_b/1", ["Ana", "Therapist"], scenario=None)
    grouped["rows"][1]["support_strategy"] = [{"target": ["Family"], "strategy_type": "join"}]
    assert scenario_of(_sample(grouped)) == "family"
    assert scenario_of(_sample(make_sample("a_and_b/1", ["Ana", "Therapist"], scenario=None))) == "couple"


def test_participants_in_order_of_first_appearance() -> None:
    record = make_sample("s/1", ["Therapist", "Bo", "Family", "Ana"], scenario="family", participants=["Bo", "Cy"])
    record["rows"][0]["target"] = ["Family"]
    record["rows"][0]["support_strategy"] = [{"target": ["Dee", "Bo"], "strategy_type": "join"}]
    record["rows"][1]["target"] = ["Ana"]
    # Bo, then Ana; Cy only in the participants field. Dee is only an annotated strategy target: never shown.
    assert participants(_sample(record)) == ["Bo", "Ana", "Cy"]


def test_target_members_keeps_real_subsets() -> None:
    people = ["Ana", "Bo", "Cy"]
    assert target_members(["Cy", "Ana"], people) == ("Ana", "Cy")
    assert target_members(["Family"], people) == ("Ana", "Bo", "Cy")
    assert target_members(["Therapist", "", "Bo"], people) == ("Bo",)
    assert target_members(["Zed", "Ana"], people) == ("Ana", "Zed")
    assert target_members([], people) == ()


def test_collapse_target_is_the_authors_label() -> None:
    assert collapse_target(["Charles", "Tracy"], "family") == "Family"
    assert collapse_target(["Tracy", "Charles"], "family") == "Family"
    assert collapse_target(["Ana", "Ana"], "couple") == "Ana"
    assert collapse_target(["Therapist"], "couple") == ""
    assert collapse_target(["Ana", "Bo"], "couple") == "Couple"


def test_support_target_falls_back_to_the_row_target() -> None:
    row = _sample(make_sample("s/1", ["Therapist"])).rows[0]
    row.target = ["Ana"]
    assert support_target(row) == ["Ana"]
    row.support_strategy = [SupportStrategy(target=["Therapist"], strategy_type="track")]
    assert support_target(row) == ["Ana"]
    row.support_strategy = [SupportStrategy(target=["Bo", "Ana"], strategy_type="track")]
    assert support_target(row) == ["Bo", "Ana"]


def test_relation_labels_protocols() -> None:
    rows = [
        make_row(0, "Therapist", relation_cycle_state="pursue_withdraw"),  # no prior row: never couple gold
        make_row(1, "Ana", relation_pattern="attack_attack"),  # client row: not couple gold
        make_row(2, "Therapist", relation_cycle_state="attack_attack", relation_pattern="repair_softening"),
        make_row(3, "Therapist", relation_cycle_state="escalation_conflict"),  # out of the couple taxonomy
        make_row(4, "Therapist", relation_cycle_state=""),
    ]
    couple = _sample({"sample_id": "c/1", "scenario": "couple", "rows": rows})
    assert relation_labels(couple, "paper") == [(2, "attack_attack")]
    assert relation_labels(couple, "unified") == [(2, "repair_softening")]
    family = _sample(
        {
            "sample_id": "f/1",
            "scenario": "family",
            "rows": [
                make_row(0, "Therapist", relation_pattern="escalation_conflict"),
                make_row(1, "Ana", relation_pattern=""),
                make_row(2, "Therapist", relation_cycle_state="repair_softening", relation_pattern=None),
                make_row(3, "Therapist", relation_pattern="attack_attack"),  # a couple-only label
            ],
        }
    )
    assert relation_labels(family, "paper") == [(0, "escalation_conflict")]
    assert relation_labels(family, "unified") == [(2, "repair_softening")]


def test_relation_label_counts_reproduce_table_6(text_file: Path) -> None:
    dataset = load_dataset(text_file)
    for protocol, expected in {
        "paper": {"couple": (1608, 170), "family": (525, 17)},
        "unified": {"couple": (1609, 170), "family": (517, 17)},
    }.items():
        for scenario, (rows, samples) in expected.items():
            per_sample = [len(relation_labels(s, protocol)) for s in dataset.by_scenario(scenario)]  # type: ignore[arg-type]
            assert (sum(per_sample), sum(n > 0 for n in per_sample)) == (rows, samples), (protocol, scenario)


def test_latest_states_by_hand() -> None:
    rows = [
        make_row(
            0,
            "Ana",
            internal_emotion=[{"person": "Ana", "emotion_description": "hurt", "intensity": 8}],
            viewpoints_attitudes=[{"source": "Ana", "target": "Bo", "viewpoint": "he never listens"}],
        ),
        make_row(
            1,
            "Bo",
            internal_emotion=[
                {"person": "Bo", "emotion_description": "defensive", "intensity": 6},
                {"person": "Therapist", "emotion_description": "calm", "intensity": 1},
            ],
        ),
        make_row(2, "Therapist"),
        make_row(3, "Ana", internal_emotion=[{"person": "Ana", "emotion_description": "softer", "intensity": 4}]),
    ]
    sample = _sample({"sample_id": "s/1", "scenario": "couple", "rows": rows})
    at_two = latest_states(sample, 2)
    assert set(at_two) == {"Ana", "Bo"}
    assert (at_two["Ana"].emotion, at_two["Ana"].intensity, at_two["Ana"].emotion_row) == ("hurt", 8.0, 0)
    assert at_two["Ana"].viewpoints == {"Bo": "he never listens"}
    assert at_two["Bo"].intensity == 6.0 and at_two["Bo"].viewpoints == {}
    at_three = latest_states(sample, 3)
    assert at_three["Ana"].intensity == 4.0
    # With max_age=1 Bo's intensity from row 1 has expired at row 3; Ana's row-0 viewpoint too.
    fresh = latest_states(sample, 3, max_age=1)
    assert fresh["Bo"].intensity is None and fresh["Ana"].intensity == 4.0 and fresh["Ana"].viewpoints == {}
    with pytest.raises(IndexError):
        latest_states(sample, 4)


def test_client_rows() -> None:
    sample = _sample(make_sample("s/1", ["Ana", "Therapist", "Couple"]))
    # The loader refuses a row without a speaker; is_client still says no to one built in code.
    unnamed = sample.rows[0].model_copy(update={"primary_speaker": ""})
    assert [is_client(r) for r in [*sample.rows, unnamed]] == [True, False, False, False]


def test_decision_rows_and_latest_relation_pattern():
    record = make_sample("demo_a_and_b/001", ["Ana", "Therapist", "Ben", "Ana", "Therapist"])
    record["rows"][0]["relation_pattern"] = "attack_attack"
    record["rows"][1]["relation_cycle_state"] = "pursue_withdraw"
    record["rows"][3]["relation_pattern"] = "not_a_label"
    sample = _sample(record)
    assert decision_rows(sample) == [0, 2, 3]  # not the therapist's row 1, never the last row
    assert decision_rows(sample, after_therapist=True) == [0, 1, 2, 3]
    assert latest_relation_pattern(sample, 0) == "attack_attack"
    assert latest_relation_pattern(sample, 3) == "pursue_withdraw"  # row 3's label is outside the taxonomy
