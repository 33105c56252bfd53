r"""The annotated state of a conversation at a row, as the group objective reads it (paper App. B: s_i, G).

- **Distress** :math:`d_i = \text{negativity}(e_i) \cdot \text{intensity}_i / 10` of participant i's latest
  annotated emotion :math:`e_i` (negativity = P(negative) of its description under a ``rescue_env.valence``
  scorer), so "feels immense love", intensity 9, is not distress.
- **Directed relational state** :math:`g_{ij}` = the negativity of i's latest viewpoint about j (its viewpoint and
  attitude), for ordered pairs of participants; a pair without a viewpoint is neutral (0).
- **Ageing**: an annotation made ``age`` rows ago counts with weight 1 for ``age <= decay_after`` and
  :math:`2^{-(age - k)/h}` after, decaying toward the neutral baseline 0 (k = ``decay_after``, h = ``half_life``).
  Defaults k = h = 8 rows: on the release, 90 % of the gaps between a participant's consecutive emotion
  annotations are 8 rows or less, so an annotation older than that is more likely stale than current.
- **Utility** :math:`U(s, G) = \frac{1}{n}\sum_i (1 - d_i) - w \cdot T(G)`, with relational tension
  :math:`T(G)` = the (expected) share of present ordered pairs whose latest viewpoint is negative,
  :math:`\frac{1}{n(n-1)}\sum_{i \ne j} g_{ij}`; w = ``tension_weight`` = 0.5 (ours; the paper only says U depends
  on s and G): a group whose every pair is hostile loses half of what a fully distressed group loses.
- **Objective** (Eq. 14, one step): :math:`U(s, G) - \lambda \max_i d_i`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.schema import Sample
from rescue_env.valence import DEFAULT_SCORER, SCORER_NAMES, negativity
from rescue_env.valence.labels import attitude_text


class StateConfig(BaseModel):
    """How annotations become the state: the polarity scorer, ageing, and the utility's tension weight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scorer: str = Field(DEFAULT_SCORER, description=f"polarity scorer: {' | '.join(SCORER_NAMES)}")
    decay_after: int = Field(8, ge=0, description="rows an annotation counts in full")
    half_life: float = Field(8.0, gt=0, description="rows to halve an older annotation's weight")
    tension_weight: float = Field(0.5, ge=0, description="w: weight of relational tension in U")


def age_weight(age: np.ndarray | float, decay_after: int, half_life: float) -> np.ndarray:
    """1 for ``age <= decay_after``, then halving every ``half_life`` rows; 0 where the age is infinite."""
    age = np.asarray(age, dtype=np.float64)
    return np.where(np.isinf(age), 0.0, np.exp2(-np.maximum(0.0, age - decay_after) / half_life))


def tension(g: np.ndarray) -> float:
    """The mean of g_ij over ordered pairs i != j (0 with fewer than two participants)."""
    n = g.shape[0]
    if n < 2:
        return 0.0
    return float((g.sum() - np.trace(g)) / (n * (n - 1)))


def utility(distress: np.ndarray, g: np.ndarray, tension_weight: float) -> float:
    """U(s, G) = mean(1 - d_i) - w T(G)."""
    wellbeing = float(np.mean(1.0 - distress)) if distress.size else 1.0
    return wellbeing - tension_weight * tension(g)


def objective(distress: np.ndarray, g: np.ndarray, tension_weight: float, lam: float) -> float:
    """U(s, G) - lambda max_i d_i (Eq. 14 at one step)."""
    return utility(distress, g, tension_weight) - lam * (float(distress.max()) if distress.size else 0.0)


def numpy_sum(values: Sequence[float]) -> float:
    """``np.add.reduce`` of a contiguous float64 array, in plain Python and in numpy's order (its pairwise sum:
    sequential below 8 values, else 8 interleaved partial sums, blocks above 128), so that a step on lists gives
    the same bits as the numpy expressions (the env's hot path; tested against numpy)."""
    n = len(values)
    if n < 8:
        total = -0.0  # as numpy: keeps the sum of -0.0 values -0.0
        for x in values:
            total += x
        return total
    if n > 128:
        half = n // 2
        half -= half % 8
        return numpy_sum(values[:half]) + numpy_sum(values[half:])
    r = list(values[:8])
    i, end = 8, n - n % 8
    while i < end:
        for j in range(8):
            r[j] += values[i + j]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for x in values[end:]:
        total += x
    return total


def objective_of_lists(distress: list[float], g: list[list[float]], tension_weight: float, lam: float) -> float:
    """``objective`` of ``np.array(distress)`` and ``np.array(g)`` (the same bits; ``numpy_sum``)."""
    n = len(distress)
    wellbeing = numpy_sum([1.0 - x for x in distress]) / n if n else 1.0
    if n < 2:
        tension_ = 0.0
    else:
        flat = [x for line in g for x in line]
        tension_ = (numpy_sum(flat) - numpy_sum([g[i][i] for i in range(n)])) / (n * (n - 1))
    return wellbeing - tension_weight * tension_ - lam * (max(distress) if n else 0.0)


@dataclass(frozen=True)
class Snapshot:
    """The state after one row: raw (unaged) values and the row each was annotated at (-1 = never)."""

    distress_raw: np.ndarray  # (n,)
    emotion_row: np.ndarray  # (n,) int
    g_raw: np.ndarray  # (n, n)
    viewpoint_row: np.ndarray  # (n, n) int

    def aged(self, row: int, config: StateConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(d, G, emotion age, viewpoint age) at ``row``, ages in rows (inf = never annotated)."""
        emotion_age = np.where(self.emotion_row < 0, np.inf, row - self.emotion_row)
        viewpoint_age = np.where(self.viewpoint_row < 0, np.inf, row - self.viewpoint_row)
        d = self.distress_raw * age_weight(emotion_age, config.decay_after, config.half_life)
        g = self.g_raw * age_weight(viewpoint_age, config.decay_after, config.half_life)
        return d, g, emotion_age, viewpoint_age


def annotations(
    sample: Sample, people: Sequence[str]
) -> tuple[list[tuple[int, int, str, float]], list[tuple[int, int, int, str]]]:
    """The annotations the state reads, in row order: emotions (row, participant, description, intensity) of
    participants with an intensity, and viewpoints (row, source, target, text) between two participants."""
    index = {name: i for i, name in enumerate(people)}
    emotions, viewpoints = [], []
    for position, row in enumerate(sample.rows):
        for emotion in row.internal_emotion:
            person = emotion.person.strip()
            if person in index and emotion.intensity is not None:
                emotions.append((position, index[person], emotion.emotion_description, float(emotion.intensity)))
        for view in row.viewpoints_attitudes:
            source, target = view.source.strip(), view.target.strip()
            if source in index and target in index and source != target and view.viewpoint.strip():
                viewpoints.append(
                    (position, index[source], index[target], attitude_text(view.viewpoint, view.attitude))
                )
    return emotions, viewpoints


def snapshots(sample: Sample, people: Sequence[str], config: StateConfig) -> list[Snapshot]:
    """The state after every row of ``sample`` (one pass; texts scored in one batch per kind)."""
    n = len(people)
    emotions, viewpoints = annotations(sample, people)
    emotion_negativity = negativity([e[2] for e in emotions], config.scorer, "emotion")
    viewpoint_negativity = negativity([v[3] for v in viewpoints], config.scorer, "attitude")

    distress, emotion_row = np.zeros(n), np.full(n, -1)
    g, viewpoint_row = np.zeros((n, n)), np.full((n, n), -1)
    out: list[Snapshot] = []
    e = v = 0
    for position in range(len(sample.rows)):
        while e < len(emotions) and emotions[e][0] == position:
            _, i, _, intensity = emotions[e]
            distress[i] = emotion_negativity[e] * min(10.0, max(0.0, intensity)) / 10.0
            emotion_row[i] = position
            e += 1
        while v < len(viewpoints) and viewpoints[v][0] == position:
            _, i, j, _ = viewpoints[v]
            g[i, j], viewpoint_row[i, j] = viewpoint_negativity[v], position
            v += 1
        out.append(Snapshot(distress.copy(), emotion_row.copy(), g.copy(), viewpoint_row.copy()))
    return out
