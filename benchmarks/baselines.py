"""Built-in agents that need no API: ``oracle``, ``random``, ``majority``, ``heuristic``.

They answer a batch with the same JSON a model would send, so their answers go through the task's own parser
and scorer: the oracle scoring perfectly proves the wiring end to end. ``random`` is seeded per instance (the
answer does not depend on batching or order); ``majority`` answers the most frequent gold answer of the
evaluated instances of the same scenario; ``heuristic`` applies each task's documented rules to the observable
rows (``heuristic_answer`` in each task module). They are benchmark agents (task ``Instance``s in, each task
module's ``oracle_answer`` ... ``heuristic_answer`` out), so they live beside the tasks, not in ``agents``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Literal

import numpy as np

from benchmarks.base import Instance
from benchmarks.prompting import item_ids
from rescue_env.data.schema import Sample

BaselineName = Literal["oracle", "random", "majority", "heuristic"]
BASELINES: tuple[BaselineName, ...] = ("oracle", "random", "majority", "heuristic")


class BaselineAgent:
    """Answers batches of one task without a model."""

    def __init__(
        self,
        kind: BaselineName,
        task: ModuleType,
        samples: Mapping[str, Sample],
        instances: Sequence[Instance],
        seed: int = 0,
    ) -> None:
        if kind not in BASELINES:
            raise ValueError(f"unknown baseline {kind!r}; choose from {', '.join(BASELINES)}")
        self.kind, self.task, self.samples, self.seed = kind, task, samples, seed
        self._pools = {s: [i for i in instances if i.scenario == s] for s in {i.scenario for i in instances}}

    def _rng(self, instance: Instance) -> np.random.Generator:
        digest = hashlib.sha256(f"{self.seed}:{instance.instance_id}".encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    def answer_one(self, instance: Instance) -> dict:
        if self.kind == "oracle":
            return self.task.oracle_answer(instance)
        if self.kind == "random":
            return self.task.random_answer(instance, self.samples[instance.sample_id], self._rng(instance))
        if self.kind == "majority":
            return self.task.majority_answer(instance, self._pools[instance.scenario])
        return self.task.heuristic_answer(instance, self.samples[instance.sample_id])

    def answer(self, batch: Sequence[Instance]) -> str:
        answers = [{"id": i, **self.answer_one(inst)} for i, inst in zip(item_ids(len(batch)), batch)]
        return json.dumps({"answers": answers}, ensure_ascii=False)
