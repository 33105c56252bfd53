"""The cross-fitting protocol of the trained solvers: grouped K-fold over every instance of a task.

Each instance is predicted by a model trained on the other folds, and a fold holds whole groups (a couple, or a
family found by its people across ``family_therapy/NNN`` numbers: ``rescue_env.data.splits.group_of``), so no
model ever saw the couple or family it predicts, and the predictions cover exactly the task's instance set (the
paper's Table 6), the instances Table 5 was scored on. The seed changes which groups share a fold.

Groups are dealt per scenario (so every fold holds families when there are enough), largest first in a seeded
order, each to the fold with the fewest instances so far, which keeps the folds' sizes close.

``grouping`` exists to show what the wrong protocols would report (README): ``"number"`` treats each
``family_therapy/NNN`` as its own family (the same people then sit on both sides), ``"instance"`` deals instances
at random (rows of one conversation on both sides). Only ``"family"`` is the protocol.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Literal

import numpy as np

from benchmarks.base import Instance, PromptOptions
from benchmarks.prompting import item_ids
from benchmarks.solvers.features import InstanceView, view
from benchmarks.solvers.models import SOLVERS, make_solver
from rescue_env.data.domain import scenario_of
from rescue_env.data.schema import Sample
from rescue_env.data.splits import group_of

__all__ = ["Grouping", "CrossFitAgent", "assign_folds"]

Grouping = Literal["family", "number", "instance"]
GROUPINGS: tuple[Grouping, ...] = ("family", "number", "instance")


def _groups(instances: Sequence[Instance], samples: Mapping[str, Sample], grouping: Grouping) -> dict[str, str]:
    """instance id -> its group under ``grouping``."""
    if grouping == "instance":
        return {i.instance_id: i.instance_id for i in instances}
    if grouping == "number":  # couples by their id prefix (right), families by their number (wrong)
        return {
            i.instance_id: (
                "family:" + i.sample_id
                if scenario_of(samples[i.sample_id]) == "family"
                else "couple:" + i.sample_id.split("/", 1)[0]
            )
            for i in instances
        }
    used = [samples[sid] for sid in dict.fromkeys(i.sample_id for i in instances)]
    groups = group_of(used)
    return {i.instance_id: groups[i.sample_id] for i in instances}


def assign_folds(
    instances: Sequence[Instance],
    samples: Mapping[str, Sample],
    folds: int = 5,
    seed: int = 0,
    grouping: Grouping = "family",
) -> dict[str, int]:
    """instance id -> fold (0 .. folds-1); whole groups per fold (see the module docstring)."""
    if folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got {folds}")
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r}; choose from {', '.join(GROUPINGS)}")
    group = _groups(instances, samples, grouping)
    out: dict[str, int] = {}
    for scenario_index, scenario in enumerate(("couple", "family")):
        chosen = [i for i in instances if scenario_of(samples[i.sample_id]) == scenario]
        sizes = Counter(group[i.instance_id] for i in chosen)
        rng = np.random.default_rng([seed, scenario_index])
        names = sorted(sizes)
        shuffled = [names[k] for k in rng.permutation(len(names))]
        order = sorted(shuffled, key=lambda g: -sizes[g])  # stable: the seeded order breaks ties between sizes
        load = [0] * folds
        fold_of_group = {}
        for name in order:
            target = min(range(folds), key=lambda f: (load[f], f))
            fold_of_group[name] = target
            load[target] += sizes[name]
        out.update({i.instance_id: fold_of_group[group[i.instance_id]] for i in chosen})
    return out


class CrossFitAgent:
    """A trained solver answering every instance of a task with the model of the folds that do not hold it.

    Answers like ``agents.baselines.BaselineAgent`` (the JSON a model would send), so its answers go through the
    task's own parser and scorer in ``rescue-bench evaluate``. All fitting happens here, once, at construction."""

    def __init__(
        self,
        solver: str,
        task: ModuleType,
        samples: Mapping[str, Sample],
        instances: Sequence[Instance],
        options: PromptOptions,
        *,
        folds: int = 5,
        seed: int = 0,
        grouping: Grouping = "family",
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; choose from {', '.join(SOLVERS)}")
        self.task, self.solver = task, solver
        views: dict[str, InstanceView] = {i.instance_id: view(task, i, samples, options) for i in instances}
        self.fold = assign_folds(instances, samples, folds, seed, grouping)
        self.answers: dict[str, dict[str, Any]] = {}
        self.fit_seconds = 0.0
        for k in range(folds):
            train = [i for i in instances if self.fold[i.instance_id] != k]
            test = [i for i in instances if self.fold[i.instance_id] == k]
            if not test:
                continue
            started = time.perf_counter()
            model = make_solver(solver, task.name, seed=seed).fit(train, views)
            self.fit_seconds += time.perf_counter() - started
            for instance in test:
                self.answers[instance.instance_id] = model.answer(instance, views[instance.instance_id])

    def answer(self, batch: Sequence[Instance]) -> str:
        items = [{"id": i, **self.answers[inst.instance_id]} for i, inst in zip(item_ids(len(batch)), batch)]
        return json.dumps({"answers": items}, ensure_ascii=False)
