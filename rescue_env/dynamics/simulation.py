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

Two implementations of one step: ``advance`` and ``perceive`` on numpy arrays (the reference, for analysis and
tests), and ``advance_live`` and ``perceive_lists`` on plain lists, which ``RescueSim-v0`` steps with (issue 14: a
few participants make dozens of tiny numpy calls cost more than the arithmetic). The list versions draw the same
numbers from the generator in the same order (k numbers in one call are the k numbers of k calls, so F's n + n x n
normals, then the speaker's and the refreshes' uniforms, each come in one call) and do the same float operations
in the same order, so they give the same bits (tested on random states and on long traces of the env).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate

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
    (they follow the opening's speaking shares, which do not change); as lists too, for ``advance_live``."""

    kernel: EpisodeKernel
    p_emotion: np.ndarray  # (n,)
    p_pair: np.ndarray  # (n, n)
    weights: tuple[float, ...] = ()
    """The opening's speaking weights (``SimState.weights``)."""
    p_emotion_list: list[float] = field(init=False, repr=False, compare=False)
    p_pair_list: list[list[float]] = field(init=False, repr=False, compare=False)
    speaker_cdf: list[float] = field(init=False, repr=False, compare=False)
    """``next_speaker``'s cumulative shares over everyone (the same sums and divisions, once per episode)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "p_emotion_list", self.p_emotion.tolist())
        object.__setattr__(self, "p_pair_list", self.p_pair.tolist())
        object.__setattr__(self, "speaker_cdf", _cdf(list(self.weights)) if self.weights else [])


def episode_dynamics(model: OutcomeModel, rates: SessionRates, state: SimState) -> EpisodeDynamics:
    p_emotion, p_pair = rates.refresh_probabilities(state.shares)
    kernel = EpisodeKernel.build(model, state.n, state.family, state.pattern)
    return EpisodeDynamics(kernel, p_emotion, p_pair, tuple(state.weights.tolist()))


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
    return settle(state, action, d_next, g_next, rates, rng, dynamics.p_emotion, dynamics.p_pair)


def settle(
    state: SimState,
    action: SupportAction,
    d_next: np.ndarray,
    g_next: np.ndarray,
    rates: SessionRates,
    rng: np.random.Generator,
    p_emotion: np.ndarray,
    p_pair: np.ndarray,
) -> SimState:
    """Steps 2-4 of the module docstring once the outcome model has given the next (d, G): the next speaker, the
    refreshes (``p_emotion``, ``p_pair``), the row clock. Shared by F's step (``advance``) and F1's
    (``RescueSim-v1``), with the same draws in the same order."""
    n = state.n
    speaker = next_speaker(state, action, rates, rng)
    row = state.row + 1 + int(action.intervene)
    fresh = rng.random(n) < p_emotion
    fresh_pairs = (state.viewpoint_row >= 0) & (rng.random((n, n)) < p_pair)
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
    weights = state.weights.tolist()
    if replies:
        weights = [weights[i] for i in recipients]
    index = bisect_right(_cdf(weights), rng.random())
    return recipients[index] if replies else index


def _cdf(weights: list[float]) -> list[float]:
    # np.cumsum and the division by the total in plain Python: the same sums in the same order, so with
    # bisect_right (np.searchsorted(side="right")) the same index, without numpy calls on a few numbers.
    cdf = list(accumulate(weights))
    return [c / cdf[-1] for c in cdf]


# ----- the same step on lists (the env's hot path, issue 14) -------------------------------------------------


@dataclass(slots=True)
class LiveState:
    """The varying part of a ``SimState`` as plain lists, moved in place by ``advance_live`` (a step of
    ``RescueSim-v0`` without numpy calls on a few numbers; ``state`` gives the ``SimState``)."""

    distress_raw: list[float]
    emotion_row: list[int]
    g_raw: list[list[float]]
    viewpoint_row: list[list[int]]
    row: int
    last_speaker: int | None

    @classmethod
    def of(cls, state: SimState) -> LiveState:
        return cls(
            state.distress_raw.tolist(),
            state.emotion_row.tolist(),
            state.g_raw.tolist(),
            state.viewpoint_row.tolist(),
            state.row,
            state.last_speaker,
        )

    def state(self, start: SimState) -> SimState:
        """The ``SimState`` (the fixed parts from the episode's ``start``), with the dtypes ``advance`` gives."""
        n = len(self.distress_raw)
        return replace(
            start,
            distress_raw=np.array(self.distress_raw, dtype=np.float64).reshape(n),
            emotion_row=np.array(self.emotion_row, dtype=np.int64).reshape(n),
            g_raw=np.array(self.g_raw, dtype=np.float64).reshape(n, n),
            viewpoint_row=np.array(self.viewpoint_row, dtype=np.int64).reshape(n, n),
            row=self.row,
            last_speaker=self.last_speaker,
        )


def advance_live(
    live: LiveState,
    action: SupportAction,
    dynamics: EpisodeDynamics,
    reply_recipient: float,
    rng: np.random.Generator,
    effect_scale: float = 1.0,
    draw: bool = True,
) -> None:
    """``advance`` on lists, in place: the same numbers in the same order from ``rng`` (F's n + n x n normals in
    one call, then the speaker's and the refreshes' uniforms in one call: a call of k numbers gives what k
    calls of one give), the same arithmetic, so the same state (tested against ``advance``)."""
    kernel, n = dynamics.kernel, len(live.distress_raw)
    distress_raw, emotion_row = live.distress_raw, live.emotion_row
    g_raw, viewpoint_row = live.g_raw, live.viewpoint_row
    # F's draw: n + n x n normals (distress, then G row-major), all drawn, used where a value is refreshed
    noise = rng.standard_normal(n + n * n).tolist() if draw else None
    # next_speaker: a reply draw only after a supported intervention, then the speaker's draw; then the refreshes
    recipients = _sorted_recipients(action.recipients, n) if action.intervene else ()
    start = 2 if recipients else 1
    uniforms = rng.random(start + n + n * n).tolist()
    if recipients and uniforms[0] < reply_recipient:
        weights = dynamics.weights
        speaker = recipients[bisect_right(_cdf([weights[i] for i in recipients]), uniforms[1])]
    else:
        speaker = bisect_right(dynamics.speaker_cdf, uniforms[start - 1])
    row = live.row + 1 + int(action.intervene)
    # Where refreshed: F's value (its draw: mean + sigma z), clipped to [0, 1] (kernel._clipped). Every value is
    # computed from the state before the step (the heads read the lists as they were: nothing is written before
    # all are computed).
    p_emotion, p_pair = dynamics.p_emotion_list, dynamics.p_pair_list
    fresh_d = [i for i in range(n) if uniforms[start + i] < p_emotion[i]]
    start += n
    fresh_g = [
        (i, j)
        for i in range(n)
        for j in range(n)
        if viewpoint_row[i][j] >= 0 and uniforms[start + i * n + j] < p_pair[i][j]
    ]
    new_d: list[float] = []
    new_g: list[float] = []
    if fresh_d or fresh_g:  # F is evaluated only where a value is refreshed (often nowhere)
        distress_of, pair_of = kernel.heads(
            distress_raw, emotion_row, g_raw, viewpoint_row, live.row, live.last_speaker, action, effect_scale
        )
        sd, sg = kernel.sigma_d, kernel.sigma_g
        new_d = [distress_of(i) + sd * noise[i] if draw else distress_of(i) for i in fresh_d]
        new_g = [pair_of(i, j) + sg * noise[n + i * n + j] if draw else pair_of(i, j) for i, j in fresh_g]
    for i, x in zip(fresh_d, new_d):
        distress_raw[i], emotion_row[i] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x, row
    for (i, j), x in zip(fresh_g, new_g):
        g_raw[i][j], viewpoint_row[i][j] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x, row
    live.row, live.last_speaker = row, speaker


_RECIPIENTS: dict[tuple[frozenset[int], int], tuple[int, ...]] = {}


def _sorted_recipients(recipients: frozenset[int], n: int) -> tuple[int, ...]:
    """``next_speaker``'s recipients: those in range, sorted (memoised: a few subsets of a few participants)."""
    key = (recipients, n)
    found = _RECIPIENTS.get(key)
    if found is None:
        found = tuple(sorted(i for i in recipients if 0 <= i < n))
        if len(_RECIPIENTS) < 4096:
            _RECIPIENTS[key] = found
    return found


def perceive_lists(
    distress: list[float], g: list[list[float]], noise: float, rng: np.random.Generator
) -> tuple[list[float], list[list[float]]]:
    """``perceive`` on lists: the same normals (n + n x n in one call), clipping and rounding (``np.round(x, 1)``
    is ``rint(x * 10) / 10``; Python's ``round`` is the same round-half-even), so the same readings."""
    n = len(distress)
    if noise > 0:
        z = rng.standard_normal(n + n * n).tolist()
        distress = [x + noise * e for x, e in zip(distress, z)]
        g = [[x + noise * e for x, e in zip(line, z[n * (i + 1) : n * (i + 2)])] for i, line in enumerate(g)]
    # clip, then round to tenths (inline: a function call per value would cost more than the arithmetic)
    levels = [round((0.0 if x < 0.0 else 1.0 if x > 1.0 else x) * 10.0) / 10.0 for x in distress]
    stances = []
    for i, line in enumerate(g):
        reading = [round((0.0 if x < 0.0 else 1.0 if x > 1.0 else x) * 10.0) / 10.0 for x in line]
        reading[i] = 0.0
        stances.append(reading)
    return levels, stances


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
    return describe_levels(names, distress.tolist(), g.tolist())


def describe_levels(names: Sequence[str], levels: list[float], stances: list[list[float]]) -> str:
    """``describe_state`` of readings as lists: the participants' sentences (``describe_participant``) joined."""
    return " ".join([describe_participant(names, i, levels[i], stances[i]) for i in range(len(names))])


def describe_participant(names: Sequence[str], i: int, level: float, stance_row: Sequence[float]) -> str:
    """Participant i's sentence of ``describe_levels``: i's distress reading ``level`` and i's stances toward the
    others (``stance_row[j]``; the native vector env caches it per reading)."""
    sentence = names[i] + _distress_words(float(level))
    said = [
        f"{names[j]} {words}"
        for j in range(len(names))
        if j != i and (words := _stance_words(float(stance_row[j]))) is not None
    ]
    if said:
        sentence += " and sees " + ", ".join(said)
    return sentence + "."


# The words of a reading, by its value: perceived readings are tenths, so a few entries serve every step (bounded
# anyway, for callers that pass other values).
_DISTRESS_TEXT: dict[float, str] = {}
_STANCE_TEXT: dict[float, str | None] = {}
_WORDS_CACHE = 4096


def _distress_words(value: float) -> str:
    text = _DISTRESS_TEXT.get(value)
    if text is None:
        text = f" {_band(value, DISTRESS_WORDS)} (about {round(10 * value)}/10)"
        if len(_DISTRESS_TEXT) < _WORDS_CACHE:
            _DISTRESS_TEXT[value] = text
    return text


def _stance_words(value: float) -> str | None:
    if value in _STANCE_TEXT:
        return _STANCE_TEXT[value]
    words = _band(value, STANCE_WORDS)
    if len(_STANCE_TEXT) < _WORDS_CACHE:
        _STANCE_TEXT[value] = words
    return words


__all__ = [
    "DISTRESS_WORDS",
    "EpisodeDynamics",
    "LiveState",
    "STANCE_WORDS",
    "SessionRates",
    "SimState",
    "advance",
    "advance_live",
    "describe_levels",
    "describe_participant",
    "describe_state",
    "episode_dynamics",
    "fit_session_rates",
    "next_speaker",
    "opening_weights",
    "perceive",
    "perceive_lists",
    "settle",
    "start_state",
]
