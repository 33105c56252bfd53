"""pydantic models of a RESCUE-Bench sample and its rows, exactly as the public release stores them.

Every model keeps unknown keys (``extra="allow"``) and remembers which keys were present, so that
``sample.to_record()`` gives back every key and value that was read (a round trip of the release). Fields that
the text transcription or older exports omit (the visual cue fields, the relation reasons, ...) default to empty
values but are not written back unless they were present.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, model_validator
from pydantic_core import PydanticCustomError
from pydantic_core import core_schema as cs

from rescue_env.taxonomy import Scenario

SCENARIOS: tuple[Scenario, ...] = ("couple", "family")


NOT_A_NUMBER = "not_a_number"
OUT_OF_RANGE = "out_of_range"


@dataclass(frozen=True)
class _Bounded:
    """An int or a float within ``[low, high]``, checked by pydantic-core alone (no Python call per value: ~10 %
    of the loading time of the release went to per-value Python validators).

    A chain of two unions: first the kind (JSON/Python ints and floats only, kept as read: an intensity of 8 stays 8,
    7.5 stays 7.5; ``true``, strings, NaN and infinities fail with :data:`NOT_A_NUMBER`), then the range (fails
    with :data:`OUT_OF_RANGE`, ``ctx["expected"]`` saying what was expected). :func:`error_message` turns both
    into the one-line text the loader shows, with the value read."""

    low: float
    high: float
    expected: str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        kind = cs.union_schema(
            [cs.int_schema(strict=True), cs.float_schema(strict=True, allow_inf_nan=False)],
            custom_error_type=NOT_A_NUMBER,
            custom_error_message="is not a number",
        )
        bounds: dict[str, float] = {"ge": self.low} if self.high == math.inf else {"ge": self.low, "le": self.high}
        within = cs.union_schema(
            [cs.int_schema(strict=True, **bounds), cs.float_schema(strict=True, **bounds)],  # type: ignore[arg-type]
            custom_error_type=OUT_OF_RANGE,
            custom_error_message=f"must be {self.expected}",
            custom_error_context={"expected": self.expected},
        )
        return cs.chain_schema([kind, within])


Intensity = Annotated[float | int, _Bounded(0, 10, "between 0 and 10")]
"""0-10, the release's scale (App. A): an 11 or a -3 is a data error, not a stronger or negative emotion."""
Seconds = Annotated[float | int, _Bounded(0, math.inf, ">= 0")]
"""A time in seconds from the start of the session: never negative."""


def error_message(error: Mapping[str, Any]) -> str | None:
    """The one-line message of this module's own number errors, with the value read (``'high' is not a number``,
    ``must be between 0 and 10, got 11``); None for any other pydantic error."""
    if error["type"] == NOT_A_NUMBER:
        return f"{error['input']!r} is not a number"
    if error["type"] == OUT_OF_RANGE:
        return f"must be {error['ctx']['expected']}, got {error['input']}"
    return None


class _Record(BaseModel):
    # cache_strings=False: pydantic's string cache (a hash lookup per JSON string) costs more than it saves on the
    # release, whose strings are mostly unique utterances and descriptions (~8 % of the loading time).
    model_config = ConfigDict(extra="allow", frozen=False, populate_by_name=True, cache_strings=False)

    def to_record(self) -> dict[str, Any]:
        """The keys that were read (plus unknown ones), in the release's layout."""
        return self.model_dump(exclude_unset=True, mode="python")


class PersonCue(_Record):
    """A visual cue about one person (``body_posture``, ``facial_expressions``, ``self_directed_behavior``)."""

    person: str = ""
    description: str = ""


class InteractionCue(_Record):
    """A visual cue about an interaction (``interaction_behavior``)."""

    initiator: str = ""
    target: list[str] = Field(default_factory=list)
    description: str = ""


class BackgroundUtterance(_Record):
    """Speech overlapping the row's main utterance (``background_dialogue``)."""

    speaker: str = ""
    target: list[str] = Field(default_factory=list)
    content: str = ""


class Emotion(_Record):
    """One ``internal_emotion`` item: a person's annotated emotion and its intensity (0-10 in the release)."""

    person: str = ""
    emotion_description: str = ""
    intensity: Intensity | None = None


class Viewpoint(_Record):
    """One ``viewpoints_attitudes`` item: what ``source`` thinks of ``target`` (a directed relational state)."""

    source: str = ""
    target: str = ""
    viewpoint: str = ""
    attitude: str = ""


class SupportStrategy(_Record):
    """One ``support_strategy`` item of a therapist row."""

    provider: str = ""
    target: list[str] = Field(default_factory=list)
    strategy_type: str = ""
    strategy_content: str = ""


class Row(_Record):
    """One annotated row (turn) of a conversation.

    ``relation_cycle_state`` is absent on client rows of couple samples and on every row of some family samples;
    ``relation_pattern`` is ``None`` where unannotated and ``""`` where annotators found no clear pattern.
    Both are kept as read; see ``rescue_env.data.domain.relation_labels`` for how tasks use them. A row's speaker
    and times are checked against each other (:func:`row_problem`) by the :class:`Sample` that holds it.
    """

    start_time: Seconds = 0.0
    end_time: Seconds = 0.0
    primary_speaker: str = ""
    target: list[str] = Field(default_factory=list)
    dialogue_cleaned: str = ""
    utterance_type: str = ""
    background_dialogue: list[BackgroundUtterance] = Field(default_factory=list)
    tone_of_voice: str = ""
    body_posture: list[PersonCue] = Field(default_factory=list)
    facial_expressions: list[PersonCue] = Field(default_factory=list)
    self_directed_behavior: list[PersonCue] = Field(default_factory=list)
    interaction_behavior: list[InteractionCue] = Field(default_factory=list)
    internal_emotion: list[Emotion] = Field(default_factory=list)
    viewpoints_attitudes: list[Viewpoint] = Field(default_factory=list)
    support_strategy: list[SupportStrategy] = Field(default_factory=list)
    relation_cycle_state: str | None = None
    relation_cycle_reason: str | None = None
    relation_cycle_evidence_rows: list[int] = Field(default_factory=list)
    row_index: int | None = None
    relation_pattern: str | None = None
    relation_pattern_reason: str | None = None
    relation_pattern_evidence_rows: list[int] = Field(default_factory=list)


ROW_CHECKS = frozenset({"no_speaker", "reversed_times"})
"""The error types of :func:`row_problem`."""


def row_problem(primary_speaker: str, start_time: float, end_time: float) -> PydanticCustomError | None:
    """What every row of the release has and a row with valid fields may still lack: a speaker, and an end time
    not before its start time. None when the row is consistent."""
    if not primary_speaker.strip():
        return PydanticCustomError("no_speaker", "primary_speaker is missing or empty: every row has a speaker")
    if end_time < start_time:
        return PydanticCustomError(
            "reversed_times", "end_time {end} is before start_time {start}", {"end": end_time, "start": start_time}
        )
    return None


class Sample(_Record):
    """One conversation (a clip of a therapy session) with its annotated rows.

    ``scenario`` may be missing in per-sample JSON files; ``rescue_env.data.domain.scenario_of`` then infers it.
    """

    sample_id: str
    scenario: Scenario | None = None
    participants: list[str] = Field(default_factory=list)
    source_file: str | None = None
    rows: list[Row] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent_rows(self) -> Sample:
        # Once per sample, after every field is valid, rather than a validator per row: one Python call per row was
        # ~10 % of the loading time of the release. The loader reports every inconsistent row at its own position
        # (``rescue_env.data.loading``), as a per-row check would.
        for position, row in enumerate(self.rows):
            if row.end_time < row.start_time or not row.primary_speaker.strip():  # inline: the common case is fine
                problem = row_problem(row.primary_speaker, row.start_time, row.end_time)
                if problem is not None:
                    raise PydanticCustomError(problem.type, f"row {position + 1}: {problem.message()}")
        return self
