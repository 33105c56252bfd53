"""Task registry: names -> task modules, and the batching rule shared by every task."""

from __future__ import annotations

import importlib
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from types import ModuleType

from benchmarks.base import Instance

TASK_NAMES: tuple[str, ...] = ("itp", "rpp", "stp", "ssp", "er", "vp")


def get_task(name: str) -> ModuleType:
    """The task module for ``name`` (case-insensitive); ValueError lists the valid names."""
    key = name.strip().lower()
    if key not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASK_NAMES)}")
    return importlib.import_module(f"benchmarks.{key}")


def parse_task_list(text: str) -> list[str]:
    """``"itp,rpp"`` or ``"all"`` -> validated task names in the canonical order."""
    if text.strip().lower() == "all":
        return list(TASK_NAMES)
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    for name in names:
        get_task(name)
    return [t for t in TASK_NAMES if t in names]


def make_batches(instances: Sequence[Instance], batch_size: int, groups: Mapping[str, str]) -> list[list[Instance]]:
    """Group instances into requests of at most ``batch_size``, one scenario per request, and never two instances
    of one leak group in a request (``groups``: sample id -> key, from ``rescue_env.data.overlaps.leak_groups``).

    The authors batch a sample's instances together; then a later item's context shows what happened after an
    earlier item's decision row (ITP: whether the therapist spoke next; STP: the therapist row's target), which
    leaks the earlier item's gold. Keeping samples apart is not enough: segments of one session overlap, so an
    instance of one segment can show another segment's hidden or future rows (12 pairs of the release). So the key
    is the couple or family group, joined with any sample it overlaps.

    Each request takes the next instance of the ``batch_size`` groups with the most instances left (ties by group
    key), which needs max(ceil(n / batch_size), the largest group's n) requests per scenario: the fewest possible
    under the rule. Order within a group is kept; the plan is a pure function of the instances and groups.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    batches: list[list[Instance]] = []
    by_scenario: dict[str, dict[str, deque[Instance]]] = defaultdict(lambda: defaultdict(deque))
    for instance in instances:
        by_scenario[instance.scenario][groups[instance.sample_id]].append(instance)
    for scenario in sorted(by_scenario):
        queues = by_scenario[scenario]
        while queues:
            chosen = sorted(queues, key=lambda g: (-len(queues[g]), g))[:batch_size]
            batches.append([queues[g].popleft() for g in chosen])
            for g in chosen:
                if not queues[g]:
                    del queues[g]
    return batches
