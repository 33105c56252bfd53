"""pydantic models of a RESCUE-Bench sample and its rows, exactly as the public release stores them.

Every model keeps unknown keys (``extra="allow"``) and remembers which keys were present, so that
``sample.to_record()`` gives back every key and value that was read (a round trip of the release). Fields that
the text transcription or older exports omit (the visual cue fields, the relation reasons, ...) default to empty
values but are not written back unless they were present.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from rescue_env.taxonomy import Scenario

SCENARIOS: tuple[Scenario, ...] = ("couple", "family")


def _number(value: Any) -> Any:
    # bool is an int subclass in Python; an intensity of `true` is a data error, not 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PydanticCustomError("not_a_number", "{value} is not a number", {"value": repr(value)})
    return value


Number = Annotated[float | int, BeforeValidator(_number)]
"""An int or a float, kept as it was read (an intensity of 8 stays 8, 7.5 stays 7.5)."""


def _within(low: float, high: float, expected: str):
    def check(value: Any) -> Any:
        if value is not None and not low <= value <= high:
            raise PydanticCustomError(
                "out_of_range", "must be {expected}, got {value}", {"expected": expected, "value": value}
            )
        return value

    return AfterValidator(check)


Intensity = Annotated[Number, _within(0, 10, "between 0 and 10")]
"""0-10, the release's scale (App. A): an 11 or a -3 is a data error, not a stronger or negative emotion."""
Seconds = Annotated[Number, _within(0, math.inf, ">= 0")]
"""A time in seconds from the start of the session: never negative."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=False, populate_by_name=True)

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
    Both are kept as read; see ``rescue_env.data.domain.relation_labels`` for how tasks use them.
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

    @model_validator(mode="after")
    def _consistent(self) -> Row:
        # After the fields (their own problems are reported first): what the release always has.
        if not self.primary_speaker.strip():
            raise PydanticCustomError("no_speaker", "primary_speaker is missing or empty: every row has a speaker")
        if self.end_time < self.start_time:
            raise PydanticCustomError(
                "reversed_times",
                "end_time {end} is before start_time {start}",
                {"end": self.end_time, "start": self.start_time},
            )
        return self


class Sample(_Record):
    """One conversation (a clip of a therapy session) with its annotated rows.

    ``scenario`` may be missing in per-sample JSON files; ``rescue_env.data.domain.scenario_of`` then infers it.
    """

    sample_id: str
    scenario: Scenario | None = None
    participants: list[str] = Field(default_factory=list)
    source_file: str | None = None
    rows: list[Row] = Field(min_length=1)
