"""Domain helpers over samples: scenario, speakers, participants, targets, relation labels, annotated states.

The one place for the rules that every task and the environment share. Speakers are compared exactly, as in
the release: the therapist is the string ``Therapist``; ``Couple`` and ``Family`` are group pseudo-speakers.
Row positions are 0-based list indices (the release's ``row_index`` is 1-based).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from rescue_env.data.schema import Row, Sample, Scenario
from rescue_env.taxonomy import relation_patterns

THERAPIST = "Therapist"
GROUP_LABELS: dict[Scenario, str] = {"couple": "Couple", "family": "Family"}
GROUP_SPEAKERS = frozenset(GROUP_LABELS.values())


class SpeakerClass(str, Enum):
    THERAPIST = "therapist"
    GROUP = "group"
    CLIENT = "client"
    NONE = "none"


def speaker_class(name: str) -> SpeakerClass:
    name = name.strip()
    if not name:
        return SpeakerClass.NONE
    if name == THERAPIST:
        return SpeakerClass.THERAPIST
    if name in GROUP_SPEAKERS:
        return SpeakerClass.GROUP
    return SpeakerClass.CLIENT


def is_therapist(row: Row) -> bool:
    return row.primary_speaker.strip() == THERAPIST


def is_client(row: Row) -> bool:
    """A row spoken by one client (not the therapist, not a group pseudo-speaker, not empty)."""
    return speaker_class(row.primary_speaker) is SpeakerClass.CLIENT


def scenario_of(sample: Sample) -> Scenario:
    """The sample's ``scenario`` field, else the authors' inference (reference-spec 2.2)."""
    if sample.scenario is not None:
        return sample.scenario
    lowered = sample.sample_id.lower()
    if lowered.startswith("family_therapy/") or "/family_therapy/" in lowered:
        return "family"
    for row in sample.rows:
        names = [row.primary_speaker, *row.target, *(t for s in row.support_strategy for t in s.target)]
        if any(n.strip() == "Family" for n in names):
            return "family"
    return "couple"


def group_label(scenario: Scenario) -> str:
    return GROUP_LABELS[scenario]


def participants(sample: Sample) -> list[str]:
    """Clients in order of first appearance (speaker, then row target of each row).

    The therapist and the group pseudo-speakers are excluded. Names listed in the sample's ``participants``
    field but never seen in a row are appended (the field alone can miss speakers, so it is not the source).
    Only observable fields count: the authors also read ``support_strategy[].target``, an annotation, which
    would show a model the name of someone the therapist is annotated to address but who never speaks or is
    spoken to (0 of 191 samples of the release differ).
    """
    seen: dict[str, None] = {}

    def add(names: Iterable[str]) -> None:
        for name in names:
            name = name.strip()
            if speaker_class(name) is SpeakerClass.CLIENT:
                seen.setdefault(name, None)

    for row in sample.rows:
        add([row.primary_speaker])
        add(row.target)
    add(sample.participants)
    return list(seen)


def target_members(target: Sequence[str], people: Sequence[str]) -> tuple[str, ...]:
    """The real recipient subset of a target list, in participant order.

    Empty strings and the therapist are dropped; a group label (``Couple``/``Family``) stands for every
    participant; names outside ``people`` are kept after them (a target can name someone who never speaks).
    """
    names = [t.strip() for t in target]
    if any(n in GROUP_SPEAKERS for n in names):
        return tuple(people)
    chosen = {n for n in names if speaker_class(n) is SpeakerClass.CLIENT}
    ordered = [p for p in people if p in chosen]
    return tuple(ordered + sorted(chosen - set(ordered)))


def collapse_target(target: Sequence[str], scenario: Scenario) -> str:
    """The authors' single-label view of a target (reference-spec 2.3): "" / one name / the group label.

    Dyads and subgroups collapse to ``Couple``/``Family``; use ``target_members`` to keep the real subset.
    """
    names = [t.strip() for t in target if t.strip() and t.strip() != THERAPIST]
    unique = list(dict.fromkeys(names))
    if not unique:
        return ""
    if len(unique) == 1:
        return unique[0]
    return group_label(scenario)


def support_target(row: Row) -> list[str]:
    """Target of the row's first support strategy, else the row's own target (App. C, STP/SSP fallback)."""
    if row.support_strategy:
        names = [t for t in row.support_strategy[0].target if t.strip() and t.strip() != THERAPIST]
        if names:
            return names
    return [t for t in row.target if t.strip() and t.strip() != THERAPIST]


def primary_strategy(row: Row) -> str:
    """The strategy type of the row's first support-strategy item ("" when none)."""
    return row.support_strategy[0].strategy_type.strip() if row.support_strategy else ""


def decision_rows(sample: Sample, after_therapist: bool = False) -> list[int]:
    """Row positions after which the supporter decides (App. B): every row but the last that the therapist did
    not speak; with ``after_therapist``, the therapist's rows too."""
    rows = sample.rows
    return [p for p in range(len(rows) - 1) if after_therapist or not is_therapist(rows[p])]


def latest_relation_pattern(sample: Sample, row: int) -> str | None:
    """The latest in-taxonomy relation label at or before ``row``: ``relation_pattern`` when non-empty, else the
    ``relation_cycle_state`` (the release keeps labels in both fields)."""
    labels = relation_patterns(scenario_of(sample))
    for earlier in sample.rows[row::-1]:
        label = (earlier.relation_pattern or "").strip() or (earlier.relation_cycle_state or "").strip()
        if label in labels:
            return label
    return None


RelationProtocol = Literal["paper", "unified"]


def relation_labels(sample: Sample, protocol: RelationProtocol = "paper") -> list[tuple[int, str]]:
    """Rows that carry a gold relation-pattern label, as (row position, label), in-taxonomy labels only.

    The release stores relation labels in two fields (shared/data/README.md). ``paper`` reproduces Table 6:
    couple - therapist rows whose ``relation_cycle_state`` is a couple label, with at least one prior row;
    family - any row whose ``relation_pattern`` is a family label. ``unified`` uses one rule for both: label =
    ``relation_pattern`` when non-empty, else ``relation_cycle_state``; therapist rows with a prior row.
    """
    scenario = scenario_of(sample)
    taxonomy = relation_patterns(scenario)
    out: list[tuple[int, str]] = []
    for position, row in enumerate(sample.rows):
        if protocol == "paper" and scenario == "family":
            label = (row.relation_pattern or "").strip()
        else:
            if position == 0 or not is_therapist(row):
                continue
            if protocol == "paper":
                label = (row.relation_cycle_state or "").strip()
            else:
                label = (row.relation_pattern or "").strip() or (row.relation_cycle_state or "").strip()
        if label and label in taxonomy:
            out.append((position, label))
    return out


@dataclass
class ParticipantState:
    """The latest annotated state of one participant at some row (App. B: s_i and the outgoing g_ij)."""

    emotion: str | None = None
    intensity: float | None = None
    emotion_row: int | None = None
    viewpoints: dict[str, str] = field(default_factory=dict)
    """Latest viewpoint of this participant about each other person (target name -> viewpoint text)."""
    viewpoint_rows: dict[str, int] = field(default_factory=dict)


def latest_states(sample: Sample, through: int, max_age: int | None = None) -> dict[str, ParticipantState]:
    """Each participant's latest annotated emotion, intensity and viewpoints over rows ``0..through``.

    ``max_age`` (in rows) forgets annotations older than that, so a stale intensity stops counting as distress.
    """
    if not 0 <= through < len(sample.rows):
        raise IndexError(f"row position {through} outside 0..{len(sample.rows) - 1} of {sample.sample_id}")
    states = {name: ParticipantState() for name in participants(sample)}
    for position in range(through + 1):
        row = sample.rows[position]
        for emotion in row.internal_emotion:
            person = emotion.person.strip()
            if person in states and emotion.intensity is not None:
                state = states[person]
                state.emotion, state.intensity, state.emotion_row = (
                    emotion.emotion_description,
                    float(emotion.intensity),
                    position,
                )
        for view in row.viewpoints_attitudes:
            source = view.source.strip()
            if source in states and view.target.strip() and view.viewpoint.strip():
                states[source].viewpoints[view.target.strip()] = view.viewpoint
                states[source].viewpoint_rows[view.target.strip()] = position
    if max_age is not None:
        for state in states.values():
            if state.emotion_row is not None and through - state.emotion_row > max_age:
                state.emotion = state.intensity = state.emotion_row = None
            for target, row_pos in list(state.viewpoint_rows.items()):
                if through - row_pos > max_age:
                    del state.viewpoint_rows[target], state.viewpoints[target]
    return states
