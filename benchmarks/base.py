"""The common surface of the six tasks: instances, predictions, options, and the ``Task`` protocol.

A task is data + how to ask + how to score (the inspect_ai / lm-eval-harness shape): ``build_instances`` turns
samples into instances (App. C), ``render`` turns a batch of instances into chat messages, ``parse`` turns the
model's answer into one ``Prediction`` per instance, ``score`` scores one instance, ``metrics`` aggregates.

Leak rule: an ``Instance`` carries its gold in ``gold`` and nothing else gold-bearing; ``render`` must read only
``instance.inputs``, the instance's position and the observable fields of the sample's rows (see
``benchmarks.prompting.render_row``). The model sees neutral item ids ("1", "2", ...), never ``instance_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rescue_env.data.schema import Sample, Scenario
from rescue_env.rendering import MODES, Mode  # noqa: E402,F401  (re-exported)


class Instance(BaseModel):
    """One task instance. ``row`` is the 0-based position of the decision/target row in its sample."""

    model_config = ConfigDict(frozen=True)

    task: str
    instance_id: str
    sample_id: str
    scenario: Scenario
    row: int
    inputs: dict[str, Any] = Field(default_factory=dict)
    """Task inputs that the prompt may show (e.g. SSP's given target, candidate labels)."""
    gold: dict[str, Any]
    """The answer; never rendered."""


class Prediction(BaseModel):
    """A parsed answer for one instance. ``value`` is None exactly when ``failure`` says why."""

    instance_id: str
    value: Any = None
    failure: str | None = None
    normalised: bool = False
    """True when the answer's labels only matched after case/separator normalisation."""

    @property
    def ok(self) -> bool:
        return self.failure is None


class PromptOptions(BaseModel):
    """How prompts are built. ``context_size`` None = the task's default; -1 = all prior rows."""

    model_config = ConfigDict(frozen=True)

    mode: Mode = "dialogue"
    context_size: int | None = None


class Task(Protocol):
    """What every task module provides, as module-level names (see ``benchmarks.registry``).

    ``score`` gets ``extras`` for the generation tasks: ``{"judge": JudgeScore | None, "bertscore": [F1, ...] |
    None}``, the judge verdict and the F1 of each pair that ``bertscore_pairs`` asked for (None = not run).
    A failed prediction is scored as wrong: the lowest value of every metric.

    A task may also provide ``summary_draws(scores)``: ``summary`` vectorised over blocks of bootstrap resamples
    (a ``benchmarks.bootstrap.Statistic``, the same values bit for bit); without it the intervals call ``summary``
    once per resample.
    """

    name: str
    title: str
    batch_size: int
    default_context: int
    generative: bool

    def build_instances(self, samples: Sequence[Sample], **options: Any) -> list[Instance]: ...

    def render(
        self, batch: Sequence[Instance], samples: Mapping[str, Sample], options: PromptOptions
    ) -> list[dict[str, str]]: ...

    def parse(self, text: str | None, batch: Sequence[Instance]) -> list[Prediction]: ...

    def score(
        self, instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def summary(self, scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
        """Headline metrics over a set of per-instance scores (also used for bootstrap intervals)."""
        ...

    def details(self, instances: Sequence[Instance], scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Everything else worth reporting (confusions, per-label metrics, counts)."""
        ...

    # Built-in agents (benchmarks.baselines) answer through the same parse path, with the answer object of one item:
    def oracle_answer(self, instance: Instance) -> dict[str, Any]: ...

    def random_answer(self, instance: Instance, sample: Sample, rng: Any) -> dict[str, Any]: ...

    def majority_answer(self, instance: Instance, pool: Sequence[Instance]) -> dict[str, Any]:
        """The most frequent gold answer among ``pool`` (the evaluated instances of the same scenario)."""
        ...

    def heuristic_answer(self, instance: Instance, sample: Sample) -> dict[str, Any]:
        """Simple documented rules over the observable rows only (never the annotations)."""
        ...


T = TypeVar("T")


def even_sample(items: Sequence[T], limit: int, *, single: Literal["middle", "first"] = "middle") -> list[T]:
    """Deterministic even spacing (reference-spec 3.1 / 8.1): positions round(i*(n-1)/(limit-1)), i < limit.

    Python's ``round`` (half to even) is used on purpose: it reproduces the paper's instance sets (Table 6).
    With ``limit == 1`` ITP keeps the middle item, ER/VP the first (``single``).
    """
    n = len(items)
    if limit <= 0 or n <= limit:
        return list(items)
    if limit == 1:
        return [items[n // 2] if single == "middle" else items[0]]
    positions = list(dict.fromkeys(round(i * (n - 1) / (limit - 1)) for i in range(limit)))
    for extra in range(n):  # top up from the start if rounding collided
        if len(positions) >= limit:
            break
        if extra not in positions:
            positions.append(extra)
    return [items[p] for p in sorted(positions[:limit])]


def instance_id(task: str, sample_id: str, row: int) -> str:
    """Internal instance id (never shown to a model): task, sample and 1-based row."""
    return f"{task}:{sample_id}:r{row + 1}"


def new_instance(
    task: str, sample: Sample, row: int, scenario: Scenario, gold: dict[str, Any], inputs: dict[str, Any] | None = None
) -> Instance:
    """The instance of ``task`` at row position ``row`` of ``sample``."""
    return Instance(
        task=task,
        instance_id=instance_id(task, sample.sample_id, row),
        sample_id=sample.sample_id,
        scenario=scenario,
        row=row,
        inputs=inputs or {},
        gold=gold,
    )
