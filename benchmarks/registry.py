"""Task registry: names -> task modules, and the batching rule shared by every task."""

from __future__ import annotations

import importlib
from collections import defaultdict
from collections.abc import Sequence
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


def make_batches(instances: Sequence[Instance], batch_size: int) -> list[list[Instance]]:
    """Group instances into requests of at most ``batch_size``, one scenario per request, and never two
    instances of the same sample in one request.

    The authors batch a sample's instances together; then a later item's context shows what happened after an
    earlier item's decision row (ITP: whether the therapist spoke next; STP: the therapist row's target), which
    leaks the earlier item's gold. Interleaving samples removes that leak. Order is deterministic.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    batches: list[list[Instance]] = []
    by_scenario: dict[str, dict[str, list[Instance]]] = defaultdict(lambda: defaultdict(list))
    for instance in instances:
        by_scenario[instance.scenario][instance.sample_id].append(instance)
    for scenario in sorted(by_scenario):
        queues = list(by_scenario[scenario].values())
        round_robin: list[Instance] = []
        depth = 0
        while any(depth < len(q) for q in queues):
            round_robin.extend(q[depth] for q in queues if depth < len(q))
            depth += 1
        current: list[Instance] = []
        for instance in round_robin:
            if len(current) == batch_size or any(i.sample_id == instance.sample_id for i in current):
                batches.append(current)
                current = []
            current.append(instance)
        if current:
            batches.append(current)
    return batches
