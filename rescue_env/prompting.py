"""Prompt text about the setting, shared by the six tasks (``benchmarks.prompting``) and the LLM agents that act in
the environment (``agents.therapist``, ``agents.persona``): the scenario's setting in words and the closed label
block of a taxonomy set (definitions, use-when / do-not-use-when, then the D.3 boundary rules).

Rows reach a prompt through ``rescue_env.rendering`` (observable fields only); nothing here reads a sample.
"""

from __future__ import annotations

from rescue_env.data.schema import Scenario
from rescue_env.taxonomy import BOUNDARY_RULES, LabelSet

__all__ = ["SCENARIO_SETTING", "label_block"]

SCENARIO_SETTING: dict[Scenario, str] = {
    "couple": "a couple-therapy session (two partners and a therapist)",
    "family": "a family-therapy session (several family members and a therapist)",
}


def label_block(label_set: LabelSet, heading: str) -> str:
    """The closed label set with definitions, use-when / do-not-use-when, then the D.3 boundary rules."""
    lines = [heading]
    for label in label_set:
        lines.append(f"- {label.key} ({label.name}): {label.definition}")
        lines.append(f"    Use when: {label.use_when}")
        lines.append(f"    Do not use when: {label.do_not_use_when}")
    lines.append("Boundary rules:")
    lines.extend(f"- {rule}" for rule in BOUNDARY_RULES[label_set.kind])
    return "\n".join(lines)
