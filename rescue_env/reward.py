r"""The reward of the replayed conversation (paper App. B, Eq. 14), one component per idea.

At a decision point t the supporter chooses z (intervene now?), A (which participants) and a (which strategy);
the real therapist's choice is the gold (z*, A*, a*). The state comes from the annotations up to the current row:
the distress of participant i is :math:`d_i = \text{latest annotated intensity}_i / 10` (0 when none is
known, or when it is older than ``max_age`` rows), G holds the latest directed viewpoints, rho the latest relation
pattern.

Components (each in [0, 1] except the group objective):

- timing:   :math:`r_z = 1[z = z^*]`
- target:   :math:`r_A = |A \cap A^*| / |A \cup A^*|` (Jaccard), scored only when z = z* = 1 and A* is known
- strategy: :math:`r_a = 1[a = a^*]`, scored only when z = z* = 1 and a* is known
- group:    :math:`r_g = U(s, G) - \lambda \max_{i \in I^*} d_i (1 - w_i) - \kappa z`, where
  :math:`I^* = \arg\max_i d_i` (the most distressed participants) and :math:`w_i` is the share of support that i
  receives: :math:`1/|A|` for each :math:`i \in A` when z = 1 (the group slot counts as every participant), else 0.
  U defaults to the mean of :math:`1 - d_i`; any function of (d, G, rho) can replace it.

Supporting only the most distressed person removes the penalty; spreading support over all n participants leaves
(1 - 1/n) of it; not intervening leaves all of it but saves kappa, the replay's stand-in for the cost of
interrupting the clients' own exchange (a replay cannot observe that cost).

The step reward is :math:`w_z r_z + w_A r_A + w_a r_a + w_g r_g` with the weights of a preset: ``imitation``
(timing + target + strategy), ``group`` (the group objective only) or ``combined`` (both; the default). A component
that is not scored at a step contributes 0. The discounted return :math:`\sum_t \gamma^t r_t` is reported by the
environment at the end of an episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

Preset = Literal["imitation", "group", "combined"]
PRESETS: tuple[Preset, ...] = ("imitation", "group", "combined")

Utility = Callable[[np.ndarray, Mapping[str, Mapping[str, str]], "str | None"], float]
"""U(d, G, rho): distress vector, directed viewpoints (source -> target -> text), latest relation pattern."""


def mean_wellbeing(distress: np.ndarray, viewpoints: Mapping[str, Mapping[str, str]], pattern: str | None) -> float:
    """The default U: the mean of (1 - d_i) over participants."""
    return float(np.mean(1.0 - distress)) if distress.size else 1.0


class RewardConfig(BaseModel):
    """Weights and constants of the reward. ``RewardConfig.preset(name)`` gives the documented presets."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    timing: float = 1.0
    target: float = 1.0
    strategy: float = 1.0
    group: float = 1.0
    lam: float = Field(1.0, description="lambda: weight of the most distressed participant's unmet need")
    kappa: float = Field(0.65, description="cost of intervening (interrupting the clients' exchange)")
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount of the reported episode return")
    max_age: int | None = Field(None, ge=0, description="rows after which an annotation stops counting")
    utility: Utility | None = Field(None, exclude=True, description="U(d, G, rho); default mean(1 - d)")

    @classmethod
    def preset(cls, name: Preset, version: int = 0, **overrides: float) -> RewardConfig:
        """The preset ``name`` of env version ``version`` (``Rescue-v0`` or ``Rescue-v1``; see PRESET_WEIGHTS)."""
        if version not in PRESET_WEIGHTS:
            raise ValueError(f"unknown reward version {version!r}; choose from {', '.join(map(str, PRESET_WEIGHTS))}")
        weights = PRESET_WEIGHTS[version]
        if name not in weights:
            raise ValueError(f"unknown reward preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(**{**weights[name], **VERSION_CONSTANTS[version], **overrides})


PRESET_WEIGHTS: dict[int, dict[str, dict[str, float]]] = {
    0: {
        "imitation": {"timing": 1.0, "target": 1.0, "strategy": 1.0, "group": 0.0},
        "group": {"timing": 0.0, "target": 0.0, "strategy": 0.0, "group": 1.0},
        "combined": {"timing": 1.0, "target": 1.0, "strategy": 1.0, "group": 1.0},
    },
    # Rescue-v1: when to speak is learned from the therapist (timing), whom and how from the outcome model (the
    # group objective on the predicted next state); imitating whom and how stays in ``imitation``.
    1: {
        "imitation": {"timing": 1.0, "target": 1.0, "strategy": 1.0, "group": 0.0},
        "group": {"timing": 0.0, "target": 0.0, "strategy": 0.0, "group": 1.0},
        "combined": {"timing": 1.0, "target": 0.0, "strategy": 0.0, "group": 1.0},
    },
}
VERSION_CONSTANTS: dict[int, dict[str, float]] = {
    0: {},
    # No intervention cost in v1: v0's kappa = 0.65 was chosen on the whole release, i.e. on evaluation data.
    1: {"kappa": 0.0},
}


def jaccard(chosen: frozenset[int], gold: frozenset[int]) -> float:
    union = chosen | gold
    return len(chosen & gold) / len(union) if union else 1.0


@dataclass(frozen=True)
class GroupState:
    """What the group objective needs of the annotated state at a step, computed once per decision point.

    ``most_distressed`` is the set of participants tied at the largest distress ``d_max``; ``utility`` is U(s, G).
    """

    distress: tuple[float, ...]
    utility: float
    d_max: float
    most_distressed: frozenset[int]


def group_state(
    distress: Sequence[float],
    config: RewardConfig,
    viewpoints: Mapping[str, Mapping[str, str]] | None = None,
    pattern: str | None = None,
) -> GroupState:
    values = np.asarray(distress, dtype=np.float64)
    utility = (config.utility or mean_wellbeing)(values, viewpoints or {}, pattern)
    d_max = float(values.max()) if values.size else 0.0
    most = frozenset(np.flatnonzero(values == d_max).tolist()) if values.size else frozenset()
    return GroupState(tuple(values.tolist()), float(utility), d_max, most)


def group_objective(state: GroupState, intervene: bool, recipients: frozenset[int], config: RewardConfig) -> float:
    """U(s, G) - lambda * max over the most distressed of d_i (1 - w_i) - kappa * z.

    All of the most distressed share d_max, so the max is d_max (1 - min w_i): their need is met (in part) only
    when every one of them is among the recipients, each receiving 1/|A|.
    """
    covered = intervene and bool(recipients) and state.most_distressed <= recipients
    unmet = state.d_max * (1.0 - (1.0 / len(recipients) if covered else 0.0))
    return state.utility - config.lam * unmet - config.kappa * float(intervene)


def components(
    *,
    intervene: bool,
    recipients: frozenset[int],
    strategy: int,
    gold_intervene: bool,
    gold_recipients: frozenset[int] | None,
    gold_strategy: int | None,
    state: GroupState,
    config: RewardConfig,
) -> dict[str, float | None]:
    """Every component of one step (None = not scored at this step)."""
    both = intervene and gold_intervene
    return {
        "timing": float(intervene == gold_intervene),
        "target": jaccard(recipients, gold_recipients) if both and gold_recipients is not None else None,
        "strategy": float(strategy == gold_strategy) if both and gold_strategy is not None else None,
        "group": group_objective(state, intervene, recipients, config),
    }


def total(parts: Mapping[str, float | None], config: RewardConfig) -> float:
    """The weighted step reward; unscored components count 0."""
    return (
        config.timing * (parts["timing"] or 0.0)
        + config.target * (parts["target"] or 0.0)
        + config.strategy * (parts["strategy"] or 0.0)
        + config.group * (parts["group"] or 0.0)
    )


def discounted_return(rewards: Sequence[float], gamma: float) -> float:
    return float(sum(r * gamma**t for t, r in enumerate(rewards)))
