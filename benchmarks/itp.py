"""ITP - Intervention Timing Prediction (paper Sec. 3, App. C; Table 4: precision, recall, F1 of ``yes``).

After a client's row, should the therapist take the next turn now (``yes``) or keep listening (``no``)?

Instances (App. C; reference-spec 3.1): a positive is a non-therapist row followed by a therapist row; a negative
is a non-therapist row followed by another non-therapist row. Each sample is balanced to min(#pos, #neg) of each
class by deterministic even spacing; a sample lacking either kind contributes nothing. This reproduces Table 6
(2,722 couple + 284 family instances in 168 + 16 samples).

Prompt: the rows ending at the decision row (3 by default). Unlike the authors' prompt, no candidate type,
boundary type or gold-bearing id is shown: the model sees only the context and a neutral item number.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.base import Instance, Prediction, PromptOptions, even_sample, new_instance
from benchmarks.bootstrap import Statistic, binary_statistic
from benchmarks.metrics import binary_metrics
from benchmarks.parsing import parse_batch
from benchmarks.prompting import context_size, describe_window, envelope, render_rows, window
from rescue_env.data.domain import is_therapist, scenario_of
from rescue_env.data.schema import Sample

name = "itp"
title = "Intervention timing prediction"
batch_size = 4
default_context = 3
generative = False

_YES = {"yes", "y", "true", "1", "speak", "intervene", "should_speak"}
_NO = {"no", "n", "false", "0", "listen", "keep_listening", "wait", "continue_listening"}


def build_instances(samples: Sequence[Sample], max_per_class: int = 0) -> list[Instance]:
    instances: list[Instance] = []
    for sample in samples:
        rows = sample.rows
        positives = [r - 1 for r in range(1, len(rows)) if is_therapist(rows[r]) and not is_therapist(rows[r - 1])]
        negatives = [r for r in range(len(rows) - 1) if not is_therapist(rows[r]) and not is_therapist(rows[r + 1])]
        if max_per_class > 0:
            positives, negatives = even_sample(positives, max_per_class), even_sample(negatives, max_per_class)
        keep = min(len(positives), len(negatives))
        if keep == 0:
            continue
        chosen = [(p, True) for p in even_sample(positives, keep)] + [(n, False) for n in even_sample(negatives, keep)]
        scenario = scenario_of(sample)
        for position, should_speak in sorted(chosen):
            instances.append(new_instance(name, sample, position, scenario, {"should_speak": should_speak}))
    return instances


def render(batch: Sequence[Instance], samples: Mapping[str, Sample], options: PromptOptions) -> list[dict[str, str]]:
    size = context_size(options, default_context)
    scenario = batch[0].scenario
    people = "the partners" if scenario == "couple" else "the family members"
    instructions = (
        f"Each item below shows {describe_window(size)} up to a decision point in a session, "
        f"the last one spoken by a client. Decide whether the therapist should take the very next turn, right "
        f"after the last row shown.\n"
        f"- yes: an intervention now would be timely and helpful (a pattern has crystallised, distress is rising, "
        f"a client has finished a thought or addressed the therapist, a question, reflection, validation, "
        f"containment or reframe would help now).\n"
        f"- no: the therapist should keep listening ({people} are still unfolding a thought, vulnerable material "
        f"is emerging, or their exchange is developing productively).\n"
        f"Use a concise clinical standard; do not guess what was actually said next."
    )
    items = []
    for instance in batch:
        sample = samples[instance.sample_id]
        rows = window(instance.row, size if size != 0 else 1)
        items.append(
            f"Rows shown:\n{render_rows(sample, rows, options.mode)}\n"
            f"Should the therapist speak right after row {instance.row + 1}?"
        )
    example = '{"answers": [{"id": "1", "should_speak": "yes"}, {"id": "2", "should_speak": "no"}]}'
    return envelope(scenario, instructions, items, example, options)


def _decision(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "_")
        if text in _YES:
            return True
        if text in _NO:
            return False
    return None


def _parse_item(answer: Mapping[str, Any], instance: Instance) -> tuple[bool | None, str | None, bool]:
    raw = answer.get("should_speak", answer.get("answer"))
    decision = _decision(raw)
    if decision is None:
        return None, f"invalid_value: {str(raw)[:40]}", False
    return decision, None, not (isinstance(raw, str) and raw.strip().lower() in ("yes", "no"))


def parse(text: str | None, batch: Sequence[Instance]) -> list[Prediction]:
    return parse_batch(text, batch, _parse_item)


def score(instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A failed answer scores as the wrong label (``binary_metrics`` treats None so)."""
    return {"gold": instance.gold["should_speak"], "pred": prediction.value if prediction.ok else None}


def summary(scores: Sequence[dict[str, Any]]) -> dict[str, float]:
    m = binary_metrics([s["gold"] for s in scores], [s["pred"] for s in scores])
    return {k: float(m[k]) for k in ("precision", "recall", "f1", "accuracy", "balanced_accuracy")}


def summary_draws(scores: Sequence[dict[str, Any]]) -> Statistic:
    """``summary`` over blocks of bootstrap resamples (``benchmarks.bootstrap``; the same values, tested)."""
    return binary_statistic([s["gold"] for s in scores], [s["pred"] for s in scores])


def details(instances: Sequence[Instance], scores: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return binary_metrics([s["gold"] for s in scores], [s["pred"] for s in scores])


def _answer(should_speak: bool) -> dict[str, Any]:
    return {"should_speak": "yes" if should_speak else "no"}


def oracle_answer(instance: Instance) -> dict[str, Any]:
    return _answer(instance.gold["should_speak"])


def random_answer(instance: Instance, sample: Sample, rng: Any) -> dict[str, Any]:
    return _answer(bool(rng.random() < 0.5))


def majority_answer(instance: Instance, pool: Sequence[Instance]) -> dict[str, Any]:
    # Balanced by construction (App. C), so ties go to "yes", the class the paper's F1 is about.
    counts = Counter(i.gold["should_speak"] for i in pool)
    return _answer(counts[True] >= counts[False])


_QUESTION_OR_APPEAL = re.compile(r"\?\s*$|\b(what do you|can you|do you think|help|i don't know)\b", re.I)


def heuristic_answer(instance: Instance, sample: Sample) -> dict[str, Any]:
    """Speak when the last client row addresses the therapist, ends in a question, or appeals for help; keep
    listening while clients address each other. Reads only speaker, addressees and words."""
    row = sample.rows[instance.row]
    addressed = any(t.strip() == "Therapist" for t in row.target)
    return _answer(addressed or bool(_QUESTION_OR_APPEAL.search(row.dialogue_cleaned)))
