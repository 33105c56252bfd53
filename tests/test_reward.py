"""The reward of App. B / Eq. 14, component by component, with hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env.reward import (
    RewardConfig,
    components,
    discounted_return,
    group_objective,
    group_state,
    jaccard,
    mean_wellbeing,
    total,
)

CONFIG = RewardConfig(timing=1.0, target=1.0, strategy=1.0, group=1.0, lam=1.0, kappa=0.2)


def test_jaccard() -> None:
    assert jaccard(frozenset({0, 1}), frozenset({1, 2})) == pytest.approx(1 / 3)
    assert jaccard(frozenset({0}), frozenset({0})) == 1.0
    assert jaccard(frozenset(), frozenset({0})) == 0.0


def test_group_state() -> None:
    state = group_state([0.2, 0.7, 0.7], CONFIG)
    assert (state.d_max, state.most_distressed) == (0.7, frozenset({1, 2}))
    assert state.utility == pytest.approx((0.8 + 0.3 + 0.3) / 3)
    assert group_state([], CONFIG) == group_state([], CONFIG) and group_state([], CONFIG).utility == 1.0


def test_group_objective_by_hand() -> None:
    d = np.array([0.8, 0.2, 0.5])
    u = ((1 - 0.8) + (1 - 0.2) + (1 - 0.5)) / 3  # 0.5
    assert mean_wellbeing(d, {}, None) == pytest.approx(u)
    state = group_state(d, CONFIG)
    never = group_objective(state, False, frozenset(), CONFIG)
    assert never == pytest.approx(u - 0.8)  # the whole unmet need of the most distressed, no cost
    most = group_objective(state, True, frozenset({0}), CONFIG)
    assert most == pytest.approx(u - 0.0 - 0.2)  # their term removed, kappa paid
    everyone = group_objective(state, True, frozenset({0, 1, 2}), CONFIG)
    assert everyone == pytest.approx(u - 0.8 * (1 - 1 / 3) - 0.2)  # (1 - 1/n) of it left
    other = group_objective(state, True, frozenset({1}), CONFIG)
    assert group_objective(state, False, frozenset({0}), CONFIG) == pytest.approx(never)  # no intervention, no share
    assert other == pytest.approx(u - 0.8 - 0.2)


def test_ties_among_the_most_distressed() -> None:
    d = np.array([0.6, 0.6])
    state = group_state(d, CONFIG)
    one = group_objective(state, True, frozenset({0}), CONFIG)
    assert one == pytest.approx(0.4 - 0.6 - 0.2)  # the other, equally distressed, is still unsupported
    both = group_objective(state, True, frozenset({0, 1}), CONFIG)
    assert both == pytest.approx(0.4 - 0.3 - 0.2)


def test_custom_utility_and_lambda() -> None:
    config = RewardConfig(lam=2.0, kappa=0.0, utility=lambda d, g, rho: 10.0 if rho == "repair_softening" else 0.0)
    d = np.array([0.5, 0.0])
    softening = group_state(d, config, pattern="repair_softening")
    assert group_objective(softening, False, frozenset(), config) == pytest.approx(10.0 - 1.0)
    assert group_objective(group_state(d, config), False, frozenset(), config) == pytest.approx(-1.0)


def test_components_and_presets_by_hand() -> None:
    d = np.array([0.8, 0.2])
    parts = components(
        intervene=True,
        recipients=frozenset({0}),
        strategy=3,
        gold_intervene=True,
        gold_recipients=frozenset({0, 1}),
        gold_strategy=3,
        state=group_state(d, CONFIG),
        config=CONFIG,
    )
    group = 0.5 - 0.0 - 0.2
    assert parts == pytest.approx({"timing": 1.0, "target": 0.5, "strategy": 1.0, "group": group})
    imitation = RewardConfig.preset("imitation")
    assert total(parts, imitation) == pytest.approx(2.5)
    assert total(parts, RewardConfig.preset("group", kappa=0.2, lam=1.0)) == pytest.approx(group)
    combined = RewardConfig.preset("combined", kappa=0.2, lam=1.0)
    assert total(parts, combined) == pytest.approx(
        combined.timing + 0.5 * combined.target + combined.strategy + combined.group * group
    )


def test_unscored_components() -> None:
    d = np.array([0.3, 0.0])
    # The agent intervenes, the therapist did not: target and strategy are not scored.
    parts = components(
        intervene=True,
        recipients=frozenset({0}),
        strategy=0,
        gold_intervene=False,
        gold_recipients=None,
        gold_strategy=None,
        state=group_state(d, CONFIG),
        config=CONFIG,
    )
    assert parts["timing"] == 0.0 and parts["target"] is None and parts["strategy"] is None
    # Both intervene but the therapist's row has no strategy annotation.
    parts = components(
        intervene=True,
        recipients=frozenset({0}),
        strategy=0,
        gold_intervene=True,
        gold_recipients=None,
        gold_strategy=None,
        state=group_state(d, CONFIG),
        config=CONFIG,
    )
    assert parts["timing"] == 1.0 and parts["target"] is None and parts["strategy"] is None
    assert total(parts, RewardConfig.preset("imitation")) == 1.0


def test_presets_and_errors() -> None:
    assert RewardConfig.preset("group").timing == 0.0
    assert RewardConfig.preset("imitation").group == 0.0
    with pytest.raises(ValueError, match="unknown reward preset"):
        RewardConfig.preset("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RewardConfig(gamma=1.5)


def test_discounted_return() -> None:
    assert discounted_return([1.0, 1.0, 1.0], 0.5) == pytest.approx(1.75)
    assert discounted_return([], 0.9) == 0.0
