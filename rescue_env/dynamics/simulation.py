r"""The closed loop of ``RescueSim-v0``: how a session goes on under the therapist's support, moved by F.

The replay envs ask "what would you have done here"; here the state moves. One step is one client turn,
preceded by the therapist's turn when the agent intervenes (the source conversation's decision points, App. B):

1. F (``rescue_env.dynamics.outcome``, Eq. 12-13) predicts every participant's next distress and every directed
   viewpoint's next negativity from the current state and the action (a draw with the caller's generator);
2. the next client speaker is drawn: after an intervention with recipients, one of the recipients with the
   probability ``reply_recipient`` fitted on the data, else anyone, each in proportion to how often they spoke in
   the opening (plus one);
3. as in the annotated data, not every participant's state is re-read every turn: participant i's emotion is
   refreshed with probability ``emotion_speaker`` x share_i + ``emotion_other``, share_i = i's share of the
   opening's speaking weights, and each existing viewpoint with ``viewpoint_speaker`` x share_source +
   ``viewpoint_other`` -- the release's rates of fresh annotations for the participant who speaks next and for
   the others, per decision point. A refreshed value is F's draw; the others keep their last value (F reads them
   aged, as it was fitted: ``rescue_env.dynamics.state``). The refreshes follow the opening's speaking shares,
   not the speaker actually drawn: F's persistence is low (a participant at 0.9 is predicted near 0.5 at the
   next annotation: regression to the mean), so when the participant who replied was the one re-drawn (the
   addressed participant replies 87 % of the time), "always address the most distressed" won by re-measuring
   the worst-off participant, not by what the support did (a discounted return of 4.0 against -2.0 for never
   intervening, held-out starts of the release); now only F's action terms move the state;
4. the row clock advances by the rows the step took: 1, plus 1 when the therapist spoke.

So the simulated state is the same kind of object as the observed one (the latest values), and F is only asked
what it was fitted for: the value of the next annotation. The objective reads the latest values without ageing
(``SimState.values``): in a closed loop silence is not calm. What F does not model stays fixed: the relation pattern
of the opening, who is in the room, and which pairs have a viewpoint at all (F predicts how a stance changes, not
that a new one appears). ``SessionRates`` are fitted on the same conversations as F, at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.domain import decision_rows, participants
from rescue_env.data.schema import Sample
from rescue_env.dynamics.kernel import EpisodeKernel
from rescue_env.dynamics.outcome import OutcomeModel, PointState, SupportAction, point_state, recorded_action
from rescue_env.dynamics.state import Snapshot, StateConfig, annotations


class SessionRates(BaseModel):
    """How often a session's annotated state is re-read, and who answers the therapist, per decision point of
    the data (each a smoothed share: (count + 1) / (total + 2))."""

    model_config = ConfigDict(frozen=True)

    emotion_speaker: float = Field(ge=0, le=1, description="P(fresh emotion | the participant speaks next)")
    emotion_other: float = Field(ge=0, le=1, description="P(fresh emotion | someone else speaks next)")
    viewpoint_speaker: float = Field(ge=0, le=1, description="P(fresh viewpoint | its source speaks next)")
    viewpoint_other: float = Field(ge=0, le=1, description="P(fresh viewpoint | its source does not)")
    reply_recipient: float = Field(ge=0, le=1, description="P(the next speaker is a recipient | support)")
    steps: int = Field(ge=0, description="decision points counted")

    def refresh_probabilities(self, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per participant and per ordered pair (by source): P(refreshed this step) given speaking ``shares``."""
        emotion = np.clip(self.emotion_other + (self.emotion_speaker - self.emotion_other) * shares, 0.0, 1.0)
        pair = np.clip(self.viewpoint_other + (self.viewpoint_speaker - self.viewpoint_other) * shares, 0.0, 1.0)
        return emotion, np.repeat(pair[:, None], shares.size, axis=1)


def _share(hits: int, total: int) -> float:
    return (hits + 1) / (total + 2)


def fit_session_rates(samples: Iterable[Sample]) -> SessionRates:
    """``SessionRates`` counted on ``samples``: for each pair of consecutive decision points (rows r < r'), the
    next speaker is the speaker of row r' and a fresh annotation is one made in rows (r, r']."""
    counts = dict.fromkeys(("es", "es_n", "eo", "eo_n", "vs", "vs_n", "vo", "vo_n", "rr", "rr_n", "steps"), 0)
    for sample in samples:
        people = tuple(participants(sample))
        if not people:
            continue
        emotions, viewpoints = annotations(sample, people)
        rows = decision_rows(sample)
        for r, r_next in zip(rows, rows[1:]):
            speaker_name = sample.rows[r_next].primary_speaker.strip()
            speaker = people.index(speaker_name) if speaker_name in people else None
            fresh = {i for row, i, _, _ in emotions if r < row <= r_next}
            for i in range(len(people)):
                key = "es" if i == speaker else "eo"
                counts[key + "_n"] += 1
                counts[key] += i in fresh
            existing = {(i, j) for row, i, j, _ in viewpoints if row <= r}
            fresh_pairs = {(i, j) for row, i, j, _ in viewpoints if r < row <= r_next}
            for i, j in existing:
                key = "vs" if i == speaker else "vo"
                counts[key + "_n"] += 1
                counts[key] += (i, j) in fresh_pairs
            action = recorded_action(sample, r + 1, people)
            if action.intervene and action.recipients and speaker is not None:
                counts["rr_n"] += 1
                counts["rr"] += speaker in action.recipients
            counts["steps"] += 1
    return SessionRates(
        emotion_speaker=_share(counts["es"], counts["es_n"]),
        emotion_other=_share(counts["eo"], counts["eo_n"]),
        viewpoint_speaker=_share(counts["vs"], counts["vs_n"]),
        viewpoint_other=_share(counts["vo"], counts["vo_n"]),
        reply_recipient=_share(counts["rr"], counts["rr_n"]),
        steps=counts["steps"],
    )


# ----- the simulated state ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimState:
    """A simulated session at one step: the latest raw values and the rows they were set at (-1 = never), the
    row clock, who spoke last, and what the episode keeps fixed (scenario, pattern, speaking weights)."""

    distress_raw: np.ndarray  # (n,)
    emotion_row: np.ndarray  # (n,) int
    g_raw: np.ndarray  # (n, n)
    viewpoint_row: np.ndarray  # (n, n) int
    row: int
    last_speaker: int | None
    family: bool
    pattern: str | None
    weights: np.ndarray  # (n,) speaking weights of the opening (client rows + 1)

    @property
    def shares(self) -> np.ndarray:
        """The speaking weights as shares (sum 1)."""
        return self.weights / self.weights.sum()

    @property
    def n(self) -> int:
        return int(self.distress_raw.size)

    def point(self, config: StateConfig) -> PointState:
        """F's input: the same features as on the data (``outcome.point_state``)."""
        snapshot = Snapshot(self.distress_raw, self.emotion_row, self.g_raw, self.viewpoint_row)
        return point_state(snapshot, self.row, self.last_speaker, self.family, self.pattern, config)

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """(d, G) of the simulated session now: every participant's and pair's latest value, *not* aged.

        The replays age an annotation toward neutral because an old annotation is stale evidence; here the state
        is known, and ageing it would make a participant who is not heard from look calm, so that ignoring people
        would pay (measured before this choice: on the release, "support only the most distressed" won by letting
        the others fade). F still reads its inputs aged (``point``), as it was fitted."""
        return self.distress_raw, self.g_raw


def opening_weights(sample: Sample, people: Sequence[str], through: int) -> np.ndarray:
    """Client rows per participant in rows 0..``through``, plus one (so that a silent participant can speak)."""
    weights = np.ones(len(people))
    for row in sample.rows[: through + 1]:
        name = row.primary_speaker.strip()
        if name in people:
            weights[people.index(name)] += 1.0
    return weights


def start_state(
    sample: Sample,
    people: Sequence[str],
    snapshot: Snapshot,
    row: int,
    last_speaker: int | None,
    family: bool,
    pattern: str | None,
) -> SimState:
    """The simulated state at the end of the opening (row ``row``): the observed state there."""
    return SimState(
        snapshot.distress_raw.copy(),
        snapshot.emotion_row.copy(),
        snapshot.g_raw.copy(),
        snapshot.viewpoint_row.copy(),
        row,
        last_speaker,
        family,
        pattern,
        opening_weights(sample, people, row),
    )


@dataclass(frozen=True)
class EpisodeDynamics:
    """What ``advance`` needs that is fixed for an episode: F specialised to it and the refresh probabilities
    (they follow the opening's speaking shares, which do not change)."""

    kernel: EpisodeKernel
    p_emotion: np.ndarray  # (n,)
    p_pair: np.ndarray  # (n, n)


def episode_dynamics(model: OutcomeModel, rates: SessionRates, state: SimState) -> EpisodeDynamics:
    p_emotion, p_pair = rates.refresh_probabilities(state.shares)
    return EpisodeDynamics(EpisodeKernel.build(model, state.n, state.family, state.pattern), p_emotion, p_pair)


def advance(
    state: SimState,
    action: SupportAction,
    model: OutcomeModel,
    rates: SessionRates,
    rng: np.random.Generator,
    effect_scale: float = 1.0,
    draw: bool = True,
    dynamics: EpisodeDynamics | None = None,
) -> SimState:
    """The state one step later under ``action`` (module docstring, steps 1-4); ``draw=False`` uses F's mean
    (the speaker and the refreshes are still drawn). ``dynamics``: the episode's ``episode_dynamics`` (built
    here when not given; an env builds it once per episode)."""
    dynamics = dynamics or episode_dynamics(model, rates, state)
    kernel = dynamics.kernel
    if draw:
        d_next, g_next = kernel.sample(state, action, rng, effect_scale)
    else:
        d_next, g_next = kernel.mean(state, action, effect_scale)
    n = state.n
    speaker = next_speaker(state, action, rates, rng)
    row = state.row + 1 + int(action.intervene)
    fresh = rng.random(n) < dynamics.p_emotion
    fresh_pairs = (state.viewpoint_row >= 0) & (rng.random((n, n)) < dynamics.p_pair)
    return replace(
        state,
        distress_raw=np.where(fresh, d_next, state.distress_raw),
        emotion_row=np.where(fresh, row, state.emotion_row),
        g_raw=np.where(fresh_pairs, g_next, state.g_raw),
        viewpoint_row=np.where(fresh_pairs, row, state.viewpoint_row),
        row=row,
        last_speaker=speaker,
    )


def next_speaker(state: SimState, action: SupportAction, rates: SessionRates, rng: np.random.Generator) -> int:
    """Step 2: a recipient with probability ``reply_recipient`` after a supported intervention, else anyone,
    by speaking weight (one uniform draw, through the weights' cumulative shares)."""
    recipients = sorted(i for i in action.recipients if 0 <= i < state.n)
    replies = action.intervene and bool(recipients) and rng.random() < rates.reply_recipient
    weights = state.weights[recipients] if replies else state.weights
    cdf = np.cumsum(weights)
    index = int(np.searchsorted(cdf / cdf[-1], rng.random(), side="right"))
    return recipients[index] if replies else index


# ----- perception and words ----------------------------------------------------------------------------------


def perceive(
    distress: np.ndarray, g: np.ndarray, noise: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """What a therapist reads of (d, G): each value plus Gaussian noise of sd ``noise``, clipped to [0, 1] and
    rounded to tenths (a 0-10 reading); the diagonal of G stays 0."""
    if noise > 0:
        distress = distress + noise * rng.standard_normal(distress.shape)
        g = g + noise * rng.standard_normal(g.shape)
    d = np.round(np.clip(distress, 0.0, 1.0), 1)
    g = np.round(np.clip(g, 0.0, 1.0), 1)
    np.fill_diagonal(g, 0.0)
    return d, g


DISTRESS_WORDS = ((0.15, "seems calm"), (0.35, "seems a little uneasy"), (0.55, "seems upset"),
                  (0.75, "seems very upset"), (1.01, "seems in acute distress"))  # fmt: skip
"""Upper bounds of a perceived distress reading and the words for it."""
STANCE_WORDS = ((0.35, None), (0.65, "with some tension"), (1.01, "negatively"))
"""Upper bounds of a perceived stance reading (negativity of i's view of j) and the words (None: not said)."""


def _band(value: float, bands: Sequence[tuple[float, str | None]]) -> str | None:
    return next(words for bound, words in bands if value < bound)


def describe_state(names: Sequence[str], distress: np.ndarray, g: np.ndarray) -> str:
    """The perceived state in words, one sentence per participant, e.g. ``Alan seems very upset (about 7/10) and
    sees Evelyn negatively.`` (a neutral or warm stance is not mentioned)."""
    lines = []
    for i, name in enumerate(names):
        sentence = f"{name} {_band(float(distress[i]), DISTRESS_WORDS)} (about {round(10 * float(distress[i]))}/10)"
        stances = [
            f"{names[j]} {words}"
            for j in range(len(names))
            if j != i and (words := _band(float(g[i, j]), STANCE_WORDS)) is not None
        ]
        if stances:
            sentence += " and sees " + ", ".join(stances)
        lines.append(sentence + ".")
    return " ".join(lines)


__all__ = [
    "DISTRESS_WORDS",
    "EpisodeDynamics",
    "STANCE_WORDS",
    "SessionRates",
    "SimState",
    "advance",
    "describe_state",
    "episode_dynamics",
    "fit_session_rates",
    "next_speaker",
    "opening_weights",
    "perceive",
    "start_state",
]
