"""Closed label taxonomy of RESCUE-Bench: relation patterns and therapist support strategies.

The benchmark uses two label dimensions, each with a separate closed set per scenario:

* relation patterns describe which interpersonal dynamic dominates a moment of the session
  (couple: Table 7, family: Table 8 of the paper);
* support strategies describe the primary intervention intention of a therapist turn
  (couple: Table 9, family: Table 10).

The sets follow Appendix D of the paper. Every label carries a short definition, the evidence that
calls for it (``use_when``), the neighbouring cases it must not be confused with (``do_not_use_when``,
built from the disambiguation rules of App. D.3) and its main theoretical basis (EFT, IBCT, Gottman,
SFT, FST, WAT). All texts are our own paraphrases of the paper. ``BOUNDARY_RULES`` restates D.3 one
rule per string, for use in prompts.

A label's ``id`` is its 0-based position in its table and is stable, as is the order of
``ALL_RELATION_PATTERN_KEYS`` and ``ALL_STRATEGY_KEYS`` (couple keys in table order, then the
family-only keys in table order); the latter two index Discrete action spaces, so never reorder them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = [
    "ALL_RELATION_PATTERN_KEYS",
    "ALL_STRATEGY_KEYS",
    "BOUNDARY_RULES",
    "COUPLE_RELATION_PATTERNS",
    "COUPLE_STRATEGIES",
    "FAMILY_RELATION_PATTERNS",
    "FAMILY_STRATEGIES",
    "Label",
    "LabelKind",
    "LabelSet",
    "Scenario",
    "match_label",
    "normalise_label",
    "relation_patterns",
    "strategies",
]

Scenario = Literal["couple", "family"]
LabelKind = Literal["relation_pattern", "strategy"]


class Label(BaseModel):
    """One label of a closed set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    key: str
    name: str
    definition: str
    use_when: str
    do_not_use_when: str
    basis: str


class LabelSet(BaseModel):
    """An ordered closed label set for one scenario and one label kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: Scenario
    kind: LabelKind
    labels: tuple[Label, ...]

    @model_validator(mode="after")
    def _check_ids_and_keys(self) -> LabelSet:
        for position, label in enumerate(self.labels):
            if label.id != position:
                raise ValueError(f"label {label.key!r} has id {label.id}, expected its position {position}")
        keys = self.keys()
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate keys in {self.scenario} {self.kind} set: {keys}")
        return self

    def keys(self) -> tuple[str, ...]:
        return tuple(label.key for label in self.labels)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and any(label.key == key for label in self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    # BaseModel.__iter__ yields (field, value) pairs; a label set iterates over its labels instead.
    def __iter__(self) -> Iterator[Label]:  # type: ignore[override]
        return iter(self.labels)

    def get(self, key: str) -> Label | None:
        return next((label for label in self.labels if label.key == key), None)

    def index(self, key: str) -> int:
        label = self.get(key)
        if label is None:
            raise KeyError(f"unknown {self.scenario} {self.kind} label {key!r}; valid keys: {', '.join(self.keys())}")
        return label.id


# (key, name, basis, definition, use_when, do_not_use_when)
_Row = tuple[str, str, str, str, str, str]

_MIXED_NOT_FALLBACK = (
    "One pattern clearly organises the interaction, or the evidence is merely weak, thin or ambiguous: "
    "this label is never a fallback for uncertainty."
)

_COUPLE_RELATION_ROWS: tuple[_Row, ...] = (
    (
        "pursue_withdraw",
        "Pursue–withdraw",
        "EFT",
        "An asymmetric negative cycle: one partner pushes for contact, answers or an emotional response, "
        "and the other pulls back by evading, downplaying, changing the subject or going quiet.",
        "The moment is mainly organised by this imbalance of pressure and retreat, e.g. repeated demands "
        "or complaints met with short answers, deflection or shutdown.",
        "Both partners actively blame or counterattack (use attack_attack), or neither partner reaches for "
        "the other (use withdraw_withdraw). One partner simply talking more is not a pursuit cycle.",
    ),
    (
        "attack_attack",
        "Attack–attack",
        "EFT; Gottman",
        "A symmetric escalation cycle in which both partners meet each other with blame, criticism, "
        "defensiveness or counterattack.",
        "Both sides stay actively engaged in the fight and each reply raises the stakes, so reciprocal "
        "attack is what organises the exchange.",
        "Only one side presses while the other avoids, minimises, shuts down or retreats (use pursue_withdraw).",
    ),
    (
        "withdraw_withdraw",
        "Withdraw–withdraw",
        "EFT; Gottman",
        "A mutually disengaged pattern in which both partners keep away from emotional contact and show "
        "little willingness to enter the core issue.",
        "Both partners show parallel retreat: silences, minimal or flat replies, topic avoidance and low "
        "responsiveness to each other.",
        "One partner is still actively seeking engagement (use pursue_withdraw), or the quiet is only a "
        "brief lull inside an otherwise heated exchange.",
    ),
    (
        "repair_softening",
        "Repair / softening",
        "EFT; Gottman",
        "An early loosening of a negative cycle: defensiveness drops and vulnerability, apology, "
        "validation or a wish to reconnect starts to show.",
        "Fresh but still fragile signs of repair appear, such as a softer tone, acknowledging the other's "
        "hurt, an apology, or reaching back toward the partner.",
        "The partners already hold a sustained shared stance toward the problem (use "
        "constructive_alignment), or the conflict has merely paused while hostility or withdrawal still "
        "organises the segment.",
    ),
    (
        "constructive_alignment",
        "Constructive alignment",
        "EFT; IBCT",
        "A fairly stable cooperative stance in which the partners treat the problem as shared and jointly manageable.",
        "The exchange has moved past a first softening into clear collaboration: perspective-taking, "
        "agreeing on what the problem is, or working out next steps together.",
        "Repair is only beginning and remains fragile (use repair_softening), or a pause in conflict "
        "hides blame or withdrawal that still shapes the interaction.",
    ),
    (
        "mixed_transition",
        "Mixed / transition",
        "EFT; IBCT",
        "A segment in which two strong relational patterns are salient at once, or which sits at a "
        "visible pivot from one pattern to another.",
        "Competing signals genuinely coexist (e.g. one partner turns vulnerable while the other stays "
        "defensive), or escalation is turning into partial repair without a stable new pattern yet.",
        _MIXED_NOT_FALLBACK,
    ),
)

_FAMILY_RELATION_ROWS: tuple[_Row, ...] = (
    (
        "escalation_conflict",
        "Escalation / conflict",
        "SFT; FST",
        "Open conflict in which two or more family members drive disagreement upward through blame, "
        "interruption, criticism, defensiveness or emotional confrontation.",
        "Rising conflict intensity, rather than retreat or repair, organises the exchange; this includes "
        "broad reciprocal escalation that involves several members.",
        "One member presses while another avoids or falls silent (use pursue_withdraw), or a specific "
        "cross-generational alliance or triangle is what organises the fight (use "
        "cross_generational_coalition).",
    ),
    (
        "pursue_withdraw",
        "Pursue–withdraw",
        "FST; EFT",
        "An asymmetric pressure-and-retreat cycle in which one family member seeks engagement, an "
        "explanation or a response while another evades, downplays, goes silent or disengages.",
        "The exchange is organised around one member pursuing and another retreating, as when a parent "
        "keeps pressing a child who shuts down.",
        "Several members escalate against each other reciprocally (use escalation_conflict), or the key "
        "members all pull back together (use mutual_disengagement).",
    ),
    (
        "mutual_disengagement",
        "Mutual disengagement",
        "SFT; FST",
        "A family-wide withdrawal in which the key members jointly steer away from the central issue and "
        "take part with little emotion.",
        "Silence, short answers, topic avoidance, emotional flatness or a general reluctance to engage "
        "with one another are spread across the members who matter.",
        "Someone is still actively pursuing engagement (use pursue_withdraw), or the quiet is only a short "
        "pause within an otherwise active conflict.",
    ),
    (
        "cross_generational_coalition",
        "Cross-generational coalition",
        "SFT; FST",
        "A systemic configuration in which members of different generations side together in a way that "
        "sidelines, opposes or puts pressure on another member.",
        "A specific cross-generational alliance or triangle (e.g. a parent and a child united against the "
        "other parent) shapes the interaction, rather than a simple two-person conflict.",
        "The sharper issue is broader role confusion, parentification, unstable hierarchy or blurred "
        "subsystem boundaries with no single dominant alliance (use boundary_hierarchy_strain).",
    ),
    (
        "boundary_hierarchy_strain",
        "Boundary / hierarchy strain",
        "SFT",
        "Interaction organised by blurred boundaries, unstable hierarchy, role confusion or tension "
        "between family subsystems.",
        "There is parent-child role reversal or parentification, a child drawn into adult conflict, or "
        "members crossing generational or relational lines.",
        "One specific cross-generational alliance or triangle dominates the exchange (use "
        "cross_generational_coalition).",
    ),
    (
        "repair_softening",
        "Repair / softening",
        "EFT; FST",
        "An early loosening of a rigid or conflictual family interaction, with less blame or rigidity and "
        "more vulnerability, validation, apology or willingness to reconnect.",
        "Emerging, not yet stable repair signals appear: a softer tone, acknowledging someone's hurt, an "
        "apology, or a member reaching back toward another.",
        "Several members already share a sustained cooperative stance (use cooperative_family_alliance), "
        "or the conflict has only paused while hostility, withdrawal, coalition or structural strain "
        "still organises the segment.",
    ),
    (
        "cooperative_family_alliance",
        "Cooperative family alliance",
        "FST",
        "A constructive family-level stance in which several members coordinate around shared "
        "understanding, mutual support or joint problem solving.",
        "Cooperation is sustained across the family system: members build on each other's contributions "
        "and treat the problem as one they face together.",
        "Repair is only starting and remains fragile (use repair_softening), or a lull in conflict hides "
        "ongoing hostility, withdrawal, coalition or structural strain.",
    ),
    (
        "mixed_transition",
        "Mixed / transition",
        "SFT; FST",
        "A segment in which several family dynamics are strongly salient at once, or in which the "
        "interaction is visibly turning from one pattern to another.",
        "Strong competing signals genuinely coexist (e.g. coalition alongside repair), or escalation is "
        "moving toward partial cooperation without a stable dominant pattern.",
        _MIXED_NOT_FALLBACK,
    ),
)

_COUPLE_STRATEGY_ROWS: tuple[_Row, ...] = (
    (
        "track",
        "Track",
        "EFT",
        "The therapist follows, names or clarifies the interactional process or cycle unfolding between "
        "the partners, making it visible.",
        "The turn maps a live sequence or recurring cycle, e.g. pointing out how one partner's pursuit "
        "and the other's withdrawal keep feeding each other.",
        "The therapist substantially changes what the sequence means, e.g. turning individual blame into "
        "a shared or attachment-based pattern (use reframe).",
    ),
    (
        "reframe",
        "Reframe",
        "EFT; IBCT",
        "The therapist gives an event, emotion or interaction a new meaning, typically moving it from one "
        "partner's fault to a pattern both are caught in.",
        "The turn offers a transformed reading, e.g. recasting criticism as a protest against "
        "disconnection, or the fight as something the couple is stuck in together.",
        "The therapist only describes or follows the sequence without altering its interpretation (use track).",
    ),
    (
        "evoke",
        "Evoke",
        "EFT",
        "The therapist deepens one partner's access to the primary emotions and attachment needs lying "
        "beneath surface anger or defensiveness.",
        "The turn invites a partner to explore and put into words softer feelings such as hurt, fear, "
        "shame, loneliness or longing for closeness.",
        "The main aim is to make that emotion hearable, receivable or connecting for the other partner (use join).",
    ),
    (
        "enact",
        "Enact",
        "EFT",
        "The therapist asks one partner to address the other directly in the session instead of talking "
        "only to the therapist.",
        "The turn directs a partner to voice an emotion, need, request or acknowledgement straight to "
        "the other partner.",
        "The therapist explores a feeling with one partner (use evoke) or describes the cycle (use track) "
        "without inviting that partner to turn and speak to the other.",
    ),
    (
        "join",
        "Join",
        "EFT; IBCT",
        "The therapist fosters empathic connection, emotional contact and a working alliance between the partners.",
        "The turn helps one partner's emotion be heard and received by the other, so that the other can "
        "understand or respond in a softer, more engaged way.",
        "The main aim is to deepen one partner's own primary emotion rather than its reception by the "
        "other (use evoke).",
    ),
    (
        "detach",
        "Detach",
        "IBCT",
        "The therapist helps the partners step back from immediate blame or reactivity and look together "
        "at their interaction pattern as a shared problem.",
        "The turn puts both partners in an observer position, treating the cycle as something they can "
        "examine side by side rather than as a flaw in either of them.",
        "The therapist merely names the ongoing sequence (use track), or recasts its meaning without "
        "inviting the partners to observe it jointly (use reframe).",
    ),
    (
        "repair",
        "Repair",
        "EFT",
        "The therapist guides the partners toward apology, clarification of intent, acknowledgement of "
        "hurt or reconnection.",
        "The moment calls for restoring trust, addressing an injury, or helping the partners respond "
        "constructively to each other after a conflict.",
        "The turn's first job is to stop an exchange that is harming a partner right now (use safeguard), "
        "or to deepen a partner's underlying emotion (use evoke).",
    ),
    (
        "counterbalance",
        "Counterbalance",
        "WAT",
        "The therapist restores voice, space or participation to a partner who is less heard, has less "
        "power or is otherwise disadvantaged in the interaction.",
        "One partner dominates, dismisses, interrupts or crowds out the other, and the turn rebalances "
        "who gets to speak and be heard.",
        "The primary function is immediate protection from flooding, humiliation, attack or escalation "
        "(use safeguard).",
    ),
    (
        "safeguard",
        "Safeguard",
        "WAT",
        "The therapist protects a vulnerable partner from being shamed, attacked, overwhelmed or emotionally flooded.",
        "Immediate protection is the turn's main purpose: slowing the exchange, interrupting a harmful "
        "sequence, or securing enough safety for the partner to stay engaged.",
        "The aim is to give voice, access or influence back to a less-heard partner without an acute need "
        "for protection (use counterbalance).",
    ),
    (
        "goal_align",
        "Goal alignment",
        "WAT",
        "The therapist steers the partners back to a shared therapeutic task, common goal or "
        "collaborative working frame.",
        "The conversation has drifted into blame, defensiveness or side disputes, and the turn reorients "
        "it toward joint relational work.",
        "The turn chiefly names the cycle (use track) or changes its meaning (use reframe) rather than "
        "re-establishing what the couple is working on together.",
    ),
)

_FAMILY_STRATEGY_ROWS: tuple[_Row, ...] = (
    (
        "join",
        "Join",
        "SFT",
        "The therapist builds contact, trust and a working alliance with the family system.",
        "The turn enters the family's interaction in a supportive way, e.g. acknowledging members or "
        "affiliating with their concerns, so that they can take part in the therapeutic work.",
        "The turn mainly names a family process (use track) or reorganises roles and hierarchy (use "
        "boundary); rapport building, not pattern work, must be its primary function.",
    ),
    (
        "track",
        "Track",
        "SFT; FST",
        "The therapist follows, names or clarifies recurring family processes such as escalation, "
        "disengagement, triangulation, coalition forming or repeated parent-child conflict.",
        "The turn makes the process that organises the problem visible to the family without changing "
        "its meaning or acting on the family structure.",
        "The therapist actively intervenes in roles, generational boundaries, subsystems, hierarchy or "
        "parent-child organisation (use boundary), or recasts the pattern from individual blame into a "
        "systemic process (use reframe).",
    ),
    (
        "counterbalance",
        "Counterbalance",
        "SFT",
        "The therapist brings a less-heard, lower-power or structurally sidelined family member back into "
        "the conversation.",
        "Someone is being dominated, ignored or shut out, and the turn rebalances participation, e.g. by "
        "explicitly inviting that member's view.",
        "The primary function is immediate protection from scapegoating, humiliation, attack, flooding or "
        "escalation (use safeguard).",
    ),
    (
        "enact",
        "Enact",
        "SFT",
        "The therapist has family members interact directly with each other in the session so that the "
        "live pattern can be observed and reshaped.",
        "The turn asks members to talk to one another rather than through the therapist, often guiding "
        "them toward a different way of responding.",
        "The turn only describes the pattern (use track) or redraws roles and boundaries by the "
        "therapist's own statement (use boundary), without setting up a direct exchange.",
    ),
    (
        "boundary",
        "Boundary",
        "SFT",
        "The therapist clarifies or reorganises boundaries, hierarchy, roles, subsystems or "
        "intergenerational structure.",
        "The problem involves role confusion, parent-child boundary issues, an inappropriate coalition or "
        "unclear structure, and the turn acts on it, e.g. returning a child to the child's role or "
        "backing the parents' authority.",
        "The therapist only identifies escalation, disengagement, triangulation or a coalition without "
        "intervening in the structure (use track).",
    ),
    (
        "reframe",
        "Reframe",
        "FST; SFT",
        "The therapist shifts the meaning of a problem from one member's fault to a systemic or shared family process.",
        "The turn recasts a behaviour or conflict as part of a wider interactional pattern, e.g. a child's "
        "acting out as bound up with tension elsewhere in the family.",
        "The therapist only names or follows the process without altering its interpretation (use track).",
    ),
    (
        "repair",
        "Repair",
        "EFT; FST",
        "The therapist supports apology, recognition, emotional repair or reconnection among family members.",
        "The interaction offers a chance to acknowledge hurt, lower defensiveness or rebuild trust, and "
        "the turn helps the members take it.",
        "The turn's first job is to shield a member from an attack or from being overwhelmed right now "
        "(use safeguard).",
    ),
    (
        "safeguard",
        "Safeguard",
        "SFT",
        "The therapist protects a vulnerable family member from being scapegoated, attacked, shamed or "
        "emotionally overwhelmed.",
        "Immediate protection is the turn's main job: slowing the exchange, interrupting a harmful "
        "interaction, or creating safety so the member can stay engaged.",
        "The aim is to bring a less-heard member back in or restore their influence without an acute need "
        "for protection (use counterbalance).",
    ),
)


def _build(scenario: Scenario, kind: LabelKind, rows: tuple[_Row, ...]) -> LabelSet:
    labels = tuple(
        Label(
            id=i,
            key=key,
            name=name,
            basis=basis,
            definition=definition,
            use_when=use_when,
            do_not_use_when=do_not_use_when,
        )
        for i, (key, name, basis, definition, use_when, do_not_use_when) in enumerate(rows)
    )
    return LabelSet(scenario=scenario, kind=kind, labels=labels)


COUPLE_RELATION_PATTERNS: LabelSet = _build("couple", "relation_pattern", _COUPLE_RELATION_ROWS)
FAMILY_RELATION_PATTERNS: LabelSet = _build("family", "relation_pattern", _FAMILY_RELATION_ROWS)
COUPLE_STRATEGIES: LabelSet = _build("couple", "strategy", _COUPLE_STRATEGY_ROWS)
FAMILY_STRATEGIES: LabelSet = _build("family", "strategy", _FAMILY_STRATEGY_ROWS)

_RELATION_PATTERNS: dict[str, LabelSet] = {
    "couple": COUPLE_RELATION_PATTERNS,
    "family": FAMILY_RELATION_PATTERNS,
}
_STRATEGIES: dict[str, LabelSet] = {"couple": COUPLE_STRATEGIES, "family": FAMILY_STRATEGIES}


def _dispatch(table: dict[str, LabelSet], scenario: object) -> LabelSet:
    if not isinstance(scenario, str) or scenario not in table:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {sorted(table)}")
    return table[scenario]


def relation_patterns(scenario: Scenario) -> LabelSet:
    """The relation-pattern set of ``scenario`` ("couple" or "family")."""
    return _dispatch(_RELATION_PATTERNS, scenario)


def strategies(scenario: Scenario) -> LabelSet:
    """The support-strategy set of ``scenario`` ("couple" or "family")."""
    return _dispatch(_STRATEGIES, scenario)


def _union(couple: LabelSet, family: LabelSet) -> tuple[str, ...]:
    return couple.keys() + tuple(label.key for label in family if label.key not in couple)


# Discrete action-space orders: never reorder.
ALL_RELATION_PATTERN_KEYS: tuple[str, ...] = _union(COUPLE_RELATION_PATTERNS, FAMILY_RELATION_PATTERNS)
ALL_STRATEGY_KEYS: tuple[str, ...] = _union(COUPLE_STRATEGIES, FAMILY_STRATEGIES)

BOUNDARY_RULES: dict[LabelKind, tuple[str, ...]] = {
    "strategy": (
        "Decide by the primary intervention function of the therapist turn, not by its surface wording.",
        "track vs reframe: a turn that maps, names or follows a live sequence or recurring cycle while "
        "leaving its meaning essentially intact is track; a turn that turns the same sequence from "
        "individual blame into a shared relational, attachment-based or systemic account is reframe.",
        "evoke vs join: evoke deepens one participant's primary emotion (hurt, fear, shame, longing); join "
        "helps that emotion become hearable, receivable and connecting within the couple or family.",
        "track vs boundary (family): naming escalation, disengagement, triangulation or a coalition stays "
        "track; actively intervening in roles, generational boundaries, subsystems, hierarchy or "
        "parent-child organisation is boundary.",
        "counterbalance vs safeguard: both address imbalance, but counterbalance gives voice, access or "
        "influence back to a less-heard or lower-power participant, whereas safeguard is kept for turns "
        "whose main job is immediate protection from flooding, humiliation, scapegoating, attack or "
        "escalation.",
    ),
    "relation_pattern": (
        "Decide by which interactional organisation dominates the moment, not by surface wording.",
        "repair_softening vs constructive_alignment / cooperative_family_alliance: repair_softening is an "
        "early, still fragile move out of blame, shutdown or disconnection; the alignment/alliance labels "
        "need a sustained shared stance toward the problem. A mere pause in conflict earns none of these "
        "if hostility, withdrawal, coalition or structural strain still organises the segment.",
        "attack_attack vs pursue_withdraw: attack_attack needs both sides actively escalating through "
        "reciprocal blame, criticism, defensiveness or counterattack; pursue_withdraw is one side pressing "
        "while the other avoids, minimises, shuts down or retreats.",
        "escalation_conflict vs pursue_withdraw (family): broad reciprocal escalation involving several "
        "members is escalation_conflict, not pursue_withdraw.",
        "cross_generational_coalition vs boundary_hierarchy_strain: a specific cross-generational alliance "
        "or triangle organising the interaction is cross_generational_coalition; broader role confusion, "
        "parentification, unstable hierarchy or unclear subsystem boundaries without one dominant "
        "coalition is boundary_hierarchy_strain.",
        "mixed_transition is never a fallback for uncertainty or thin evidence: use it only when two strong "
        "patterns are salient at once or the segment sits at a clinically visible pivot between patterns; "
        "if one pattern clearly organises the interaction, label that pattern.",
    ),
}

_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015/]+")
_UNDERSCORES = re.compile(r"_+")
_WRAPPING = "\"'`*."


def normalise_label(text: str) -> str:
    """Canonical key form of a free-text label.

    Lower-cases and strips the text (and any wrapping quotes, backticks, asterisks or full stops),
    turns runs of whitespace, hyphens, dashes and slashes into ``_``, collapses repeated underscores
    and trims them from the ends: ``"Pursue-Withdraw "`` -> ``"pursue_withdraw"``.
    """
    text = text.strip().lower().strip(_WRAPPING).strip()
    text = _UNDERSCORES.sub("_", _SEPARATORS.sub("_", text))
    return text.strip("_")


def match_label(text: str, label_set: LabelSet) -> tuple[str | None, bool]:
    """Match free text to a key of ``label_set``.

    Returns ``(key, False)`` for an exact key, ``(key, True)`` when only the normalised text matches
    (the caller may count this as a format repair), and ``(None, False)`` when nothing matches.
    """
    if text in label_set:
        return text, False
    normalised = normalise_label(text)
    if normalised in label_set:
        return normalised, True
    return None, False


def label_name(key: str) -> str:
    """The display name of a relation-pattern or strategy key ("pursue_withdraw" -> "Pursue–withdraw"); a key of no
    closed set (a model's out-of-set answer, "none") is shown as it is, underscores as spaces."""
    for table in (_RELATION_PATTERNS, _STRATEGIES):
        for label_set in table.values():
            label = label_set.get(key)
            if label is not None:
                return label.name
    return key.replace("_", " ")
