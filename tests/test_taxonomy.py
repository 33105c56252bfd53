"""Tests for rescue_env.taxonomy (the closed label sets of the paper's App. D)."""

from __future__ import annotations

import pydantic
import pytest

from rescue_env.taxonomy import (
    ALL_RELATION_PATTERN_KEYS,
    ALL_STRATEGY_KEYS,
    BOUNDARY_RULES,
    COUPLE_RELATION_PATTERNS,
    COUPLE_STRATEGIES,
    FAMILY_RELATION_PATTERNS,
    FAMILY_STRATEGIES,
    Label,
    LabelSet,
    match_label,
    normalise_label,
    relation_patterns,
    strategies,
)

COUPLE_RP = (
    "pursue_withdraw",
    "attack_attack",
    "withdraw_withdraw",
    "repair_softening",
    "constructive_alignment",
    "mixed_transition",
)
FAMILY_RP = (
    "escalation_conflict",
    "pursue_withdraw",
    "mutual_disengagement",
    "cross_generational_coalition",
    "boundary_hierarchy_strain",
    "repair_softening",
    "cooperative_family_alliance",
    "mixed_transition",
)
COUPLE_ST = (
    "track",
    "reframe",
    "evoke",
    "enact",
    "join",
    "detach",
    "repair",
    "counterbalance",
    "safeguard",
    "goal_align",
)
FAMILY_ST = ("join", "track", "counterbalance", "enact", "boundary", "reframe", "repair", "safeguard")

ALL_SETS = {
    "couple_rp": (COUPLE_RELATION_PATTERNS, "couple", "relation_pattern", COUPLE_RP),
    "family_rp": (FAMILY_RELATION_PATTERNS, "family", "relation_pattern", FAMILY_RP),
    "couple_st": (COUPLE_STRATEGIES, "couple", "strategy", COUPLE_ST),
    "family_st": (FAMILY_STRATEGIES, "family", "strategy", FAMILY_ST),
}
SET_PARAMS = pytest.mark.parametrize("name", sorted(ALL_SETS))


def test_counts() -> None:
    assert len(COUPLE_RELATION_PATTERNS) == 6
    assert len(FAMILY_RELATION_PATTERNS) == 8
    assert len(COUPLE_STRATEGIES) == 10
    assert len(FAMILY_STRATEGIES) == 8


@SET_PARAMS
def test_table_order_scenario_and_kind(name: str) -> None:
    label_set, scenario, kind, keys = ALL_SETS[name]
    assert label_set.keys() == keys
    assert label_set.scenario == scenario
    assert label_set.kind == kind


@SET_PARAMS
def test_ids_are_positions_and_iteration_yields_labels(name: str) -> None:
    label_set = ALL_SETS[name][0]
    labels = list(label_set)
    assert all(isinstance(label, Label) for label in labels)
    assert [label.id for label in labels] == list(range(len(label_set)))
    assert [label.key for label in labels] == list(label_set.keys())


@SET_PARAMS
def test_every_text_is_non_empty(name: str) -> None:
    for label in ALL_SETS[name][0]:
        for field in ("key", "name", "definition", "use_when", "do_not_use_when", "basis"):
            value = getattr(label, field)
            assert isinstance(value, str) and value.strip(), (label.key, field)
        assert label.key == normalise_label(label.key)


def test_basis_matches_paper_tables() -> None:
    assert COUPLE_RELATION_PATTERNS.get("attack_attack").basis == "EFT; Gottman"
    assert FAMILY_RELATION_PATTERNS.get("pursue_withdraw").basis == "FST; EFT"
    assert FAMILY_RELATION_PATTERNS.get("boundary_hierarchy_strain").basis == "SFT"
    assert COUPLE_STRATEGIES.get("detach").basis == "IBCT"
    assert COUPLE_STRATEGIES.get("goal_align").basis == "WAT"
    assert FAMILY_STRATEGIES.get("reframe").basis == "FST; SFT"


def test_boundary_rules_reflected_in_do_not_use_when() -> None:
    assert "reframe" in COUPLE_STRATEGIES.get("track").do_not_use_when
    assert "join" in COUPLE_STRATEGIES.get("evoke").do_not_use_when
    assert "boundary" in FAMILY_STRATEGIES.get("track").do_not_use_when
    assert "safeguard" in FAMILY_STRATEGIES.get("counterbalance").do_not_use_when
    assert "cooperative_family_alliance" in FAMILY_RELATION_PATTERNS.get("repair_softening").do_not_use_when
    assert "boundary_hierarchy_strain" in (FAMILY_RELATION_PATTERNS.get("cross_generational_coalition").do_not_use_when)
    assert "fallback" in COUPLE_RELATION_PATTERNS.get("mixed_transition").do_not_use_when


def test_union_key_tuples() -> None:
    expected_patterns = (
        *COUPLE_RP,
        "escalation_conflict",
        "mutual_disengagement",
        "cross_generational_coalition",
        "boundary_hierarchy_strain",
        "cooperative_family_alliance",
    )
    expected_strategies = (*COUPLE_ST, "boundary")
    assert expected_patterns == ALL_RELATION_PATTERN_KEYS
    assert expected_strategies == ALL_STRATEGY_KEYS
    assert len(set(ALL_RELATION_PATTERN_KEYS)) == len(ALL_RELATION_PATTERN_KEYS) == 11
    assert len(set(ALL_STRATEGY_KEYS)) == len(ALL_STRATEGY_KEYS) == 11


def test_dispatch() -> None:
    assert relation_patterns("couple") is COUPLE_RELATION_PATTERNS
    assert relation_patterns("family") is FAMILY_RELATION_PATTERNS
    assert strategies("couple") is COUPLE_STRATEGIES
    assert strategies("family") is FAMILY_STRATEGIES
    with pytest.raises(ValueError, match="group"):
        relation_patterns("group")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Couple"):
        strategies("Couple")  # type: ignore[arg-type]


def test_contains_get_index() -> None:
    assert "pursue_withdraw" in COUPLE_RELATION_PATTERNS
    assert "escalation_conflict" not in COUPLE_RELATION_PATTERNS
    assert "boundary" in FAMILY_STRATEGIES
    assert "boundary" not in COUPLE_STRATEGIES
    assert "Pursue_withdraw" not in COUPLE_RELATION_PATTERNS  # exact match only
    assert 3 not in COUPLE_STRATEGIES

    label = FAMILY_STRATEGIES.get("boundary")
    assert label is not None and label.key == "boundary" and label.id == 4
    assert COUPLE_STRATEGIES.get("boundary") is None

    assert COUPLE_STRATEGIES.index("goal_align") == 9
    assert FAMILY_RELATION_PATTERNS.index("escalation_conflict") == 0
    with pytest.raises(KeyError) as excinfo:
        COUPLE_STRATEGIES.index("boundary")
    message = str(excinfo.value)
    assert "boundary" in message
    for key in COUPLE_ST:
        assert key in message


def test_normalise_label() -> None:
    assert normalise_label("Pursue-Withdraw ") == "pursue_withdraw"
    assert normalise_label("  attack  attack") == "attack_attack"
    assert normalise_label("Repair\u2013softening") == "repair_softening"
    assert normalise_label("goal__align") == "goal_align"
    assert normalise_label("cross-generational coalition") == "cross_generational_coalition"
    assert normalise_label("track") == "track"


def test_match_label() -> None:
    assert match_label("pursue_withdraw", COUPLE_RELATION_PATTERNS) == ("pursue_withdraw", False)
    assert match_label("Pursue-Withdraw ", COUPLE_RELATION_PATTERNS) == ("pursue_withdraw", True)
    assert match_label("GOAL ALIGN", COUPLE_STRATEGIES) == ("goal_align", True)
    assert match_label("Mutual\u2013Disengagement", FAMILY_RELATION_PATTERNS) == (
        "mutual_disengagement",
        True,
    )
    assert match_label("validation", COUPLE_STRATEGIES) == (None, False)
    assert match_label("boundary", COUPLE_STRATEGIES) == (None, False)  # family-only key
    assert match_label("", FAMILY_STRATEGIES) == (None, False)


def test_models_are_frozen() -> None:
    label = COUPLE_STRATEGIES.get("track")
    assert label is not None
    with pytest.raises(pydantic.ValidationError):
        label.key = "other"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        COUPLE_STRATEGIES.scenario = "family"  # type: ignore[misc]
    assert label.key == "track"
    assert COUPLE_STRATEGIES.scenario == "couple"


def test_labelset_rejects_bad_ids_and_duplicates() -> None:
    track = COUPLE_STRATEGIES.get("track")
    reframe = COUPLE_STRATEGIES.get("reframe")
    assert track is not None and reframe is not None
    with pytest.raises(pydantic.ValidationError, match="expected its position"):
        LabelSet(scenario="couple", kind="strategy", labels=(reframe,))
    with pytest.raises(pydantic.ValidationError, match="duplicate"):
        LabelSet(scenario="couple", kind="strategy", labels=(track, track.model_copy(update={"id": 1})))


def test_boundary_rules() -> None:
    assert set(BOUNDARY_RULES) == {"strategy", "relation_pattern"}
    assert len(BOUNDARY_RULES["strategy"]) >= 4
    assert len(BOUNDARY_RULES["relation_pattern"]) >= 4
    assert all(isinstance(rule, str) and rule.strip() for rules in BOUNDARY_RULES.values() for rule in rules)
    strategy_text = " ".join(BOUNDARY_RULES["strategy"])
    for key in ("track", "reframe", "evoke", "join", "boundary", "counterbalance", "safeguard"):
        assert key in strategy_text
    pattern_text = " ".join(BOUNDARY_RULES["relation_pattern"])
    for key in ("repair_softening", "attack_attack", "cross_generational_coalition", "mixed_transition"):
        assert key in pattern_text
