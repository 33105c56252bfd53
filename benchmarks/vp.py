"""VP - Viewpoint Prediction (paper Sec. 3, App. A.6, App. C; Table 4: LLM judge and BERTScore F1).

At a client's row, which viewpoints does the CURRENT speaker hold about other people (directed: speaker -> target),
as expressed or implied by that row?

Instances (App. C; reference-spec 9.1): a checkpoint is a client row with at least one ``viewpoints_attitudes`` item
whose stripped ``source`` equals the speaker and that has a non-empty ``target`` and ``viewpoint``. Gold = all such
items, ``[{"target", "viewpoint", "attitude"}]`` (stripped; ``attitude`` may be ""). No early cutoff, no minimum
length; at most 5 checkpoints per sample by deterministic even spacing (``even_sample(..., 5, single="first")``).
This reproduces Table 6 (775 couple + 80 family instances in 170 + 17 samples).

Prompt: the current row plus the 3 rows before it (``context_size``; -1 = all earlier rows, 0 = none), the current
speaker, and the people a viewpoint can be about: the sample's participants (``domain.participants``) other than the
speaker, plus ``Therapist``. No checkpoint id (which names the sample and row) is shown.

Answer: ``{"id", "viewpoints": [{"target", "viewpoint", "attitude"}, ...]}``. Items lacking a target or a viewpoint
are dropped (``normalised``), as the authors' normaliser does; an answer with no complete item left - an empty
list included - is a failure. A target given as a list of names becomes one item per name.

Scores per instance. Deviations from the authors' code, which never matched viewpoints and computed no BERTScore
(reference-spec 9.3/9.4):

* ``judge``: the judge's holistic score of the predicted list against the gold list, passed through: a 1-5 Likert
  score by default (the paper's scale), or the authors' 0-6 rubric total when the runner used it
  (``extras["rubric"] = "authors"``). A score outside the rubric's range counts as a judge failure (None).
  ``extras["judge"].detail`` is recorded when present.
* ``bertscore``: best match per gold viewpoint, averaged. ``bertscore_pairs`` asks for every (predicted viewpoint,
  gold viewpoint) pair, gold-major (pair ``g * P + p`` = prediction ``p`` against gold ``g``); each gold viewpoint
  takes the max F1 over the predictions, and the instance's value is the mean over gold viewpoints. Predicting
  extra viewpoints is not penalised by this number (the judge sees the whole lists).
* ``target_match``: the fraction of gold viewpoints whose target (case-insensitive) is among the predicted targets.

A failed prediction is scored as wrong and stays in every denominator (the authors dropped failed samples):
``judge`` = the rubric's minimum (``JUDGE_MIN``: 1.0 Likert, 0.0 authors), ``bertscore`` = 0.0,
``target_match`` = 0.0; no judge call is made for it. ``summary`` averages over instances where a value is
available; judge (BERTScore) counts as not run - None - when no valid prediction got a judge verdict (F1s), unless
every prediction failed. Judge errors on valid predictions are counted in ``details()["judge_failures"]`` so that
the runner can retry them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.base import Instance, Prediction, PromptOptions, even_sample, new_instance
from benchmarks.bootstrap import Resample, Statistic, mean_if_run
from benchmarks.parsing import parse_batch
from benchmarks.prompting import context_size, current_row_item, current_row_note, describe_window, envelope
from rescue_env.data.domain import THERAPIST, is_client, participants, scenario_of
from rescue_env.data.schema import Row, Sample

name = "vp"
title = "Viewpoint prediction"
batch_size = 5
default_context = 3
generative = True

MAX_PER_SAMPLE = 5
JUDGE_MIN: dict[str, float] = {"likert": 1.0, "authors": 0.0}
JUDGE_MAX: dict[str, float] = {"likert": 5.0, "authors": 6.0}
DEFAULT_RUBRIC = "likert"

_LIST_KEYS = ("viewpoints", "predicted_viewpoints")
_TOKEN = re.compile(r"[A-Za-z0-9']+")


# --------------------------------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------------------------------


def gold_of(row: Row) -> list[dict[str, str]]:
    """The row's VP gold: every viewpoint item of the speaker with a target and a viewpoint (may be [])."""
    speaker = row.primary_speaker.strip()
    return [
        {"target": v.target.strip(), "viewpoint": v.viewpoint.strip(), "attitude": v.attitude.strip()}
        for v in row.viewpoints_attitudes
        if v.source.strip() == speaker and v.target.strip() and v.viewpoint.strip()
    ]


def candidates(sample: Sample) -> list[tuple[int, list[dict[str, str]]]]:
    """Eligible (row position, gold viewpoints) pairs of a sample, before sampling."""
    out = []
    for position, row in enumerate(sample.rows):
        if not is_client(row):
            continue
        gold = gold_of(row)
        if gold:
            out.append((position, gold))
    return out


def people(sample: Sample, speaker: str) -> list[str]:
    """Who a viewpoint of ``speaker`` can be about: the other participants, then the therapist."""
    return [p for p in participants(sample) if p != speaker] + [THERAPIST]


def build_instances(samples: Sequence[Sample], max_per_sample: int = MAX_PER_SAMPLE) -> list[Instance]:
    instances: list[Instance] = []
    for sample in samples:
        scenario = scenario_of(sample)
        for position, gold in even_sample(candidates(sample), max_per_sample, single="first"):
            speaker = sample.rows[position].primary_speaker.strip()
            instances.append(
                new_instance(
                    name,
                    sample,
                    position,
                    scenario,
                    {"viewpoints": gold},
                    {"speaker": speaker, "people": people(sample, speaker)},
                )
            )
    return instances


# --------------------------------------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------------------------------------


def render(batch: Sequence[Instance], samples: Mapping[str, Sample], options: PromptOptions) -> list[dict[str, str]]:
    size = context_size(options, default_context)
    scenario = batch[0].scenario
    context_note = current_row_note(size)
    instructions = (
        "You are evaluating viewpoint understanding in a therapy session. Each item below shows one CURRENT row "
        f"spoken by a client, preceded by {describe_window(size)} before it. For each item, identify the "
        "viewpoints that the CURRENT speaker holds about other people, as expressed or implied in that row: "
        "about whom (target), what the speaker believes, assumes or expresses about them (viewpoint), and the "
        "speaker's attitude toward them.\n"
        "- The viewpoint holder is always the current speaker named in the item.\n"
        "- If the row expresses distinct viewpoints toward different people, give all of them; give at least one.\n"
        "- Use a name from the item's list of people as the target.\n"
        "- Use no future rows and no outside knowledge about the people.\n"
        f"- {context_note}\n"
        '- Write short concrete English phrases, e.g. viewpoint "he does not take my worries seriously", '
        'attitude "resentful".'
    )
    items = []
    for instance in batch:
        sample = samples[instance.sample_id]
        speaker = instance.inputs.get("speaker") or sample.rows[instance.row].primary_speaker.strip()
        names = instance.inputs.get("people") or people(sample, speaker)
        parts = current_row_item(sample, instance.row, size, options.mode)
        parts.append(f"People {speaker}'s viewpoints can be about: {', '.join(names)}")
        parts.append(
            f"Which viewpoints does {speaker} (the current speaker) hold about others at row {instance.row + 1}?"
        )
        items.append("\n".join(parts))
    example = (
        '{"answers": [{"id": "1", "viewpoints": [{"target": "<a name from the list>", "viewpoint": "does not take '
        'my worries seriously", "attitude": "resentful"}]}, {"id": "2", "viewpoints": [{"target": "Therapist", '
        '"viewpoint": "can help us talk calmly", "attitude": "hopeful"}, {"target": "<another name>", "viewpoint": '
        '"is trying harder lately", "attitude": "appreciative"}]}]}'
    )
    return envelope(scenario, instructions, items, example, options)


# --------------------------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_answer(answer: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None, bool]:
    """One answer object -> (value, failure, normalised). value = {"viewpoints": [{target, viewpoint, attitude}]}."""
    raw = next((answer[k] for k in _LIST_KEYS if k in answer), None)
    if raw is None:
        return None, "missing_field: viewpoints", False
    normalised = False
    if isinstance(raw, dict):
        raw, normalised = [raw], True
    if not isinstance(raw, list):
        return None, f"invalid_value: viewpoints is {type(raw).__name__}", False
    if not raw:
        return None, "empty_viewpoints", False
    items: list[dict[str, str]] = []
    for item in raw:
        if not isinstance(item, dict):
            normalised = True
            continue
        viewpoint = _text(item.get("viewpoint"))
        attitude = _text(item.get("attitude"))
        target = item.get("target")
        targets = [_text(t) for t in target] if isinstance(target, list) else [_text(target)]
        targets = [t for t in targets if t]
        if isinstance(target, list):
            normalised = True
        if not viewpoint or not targets:
            normalised = True
            continue
        items.extend({"target": t, "viewpoint": viewpoint, "attitude": attitude} for t in targets)
    if not items:
        return None, "invalid_value: no viewpoint with both a target and a viewpoint", False
    return {"viewpoints": items}, None, normalised


def parse(text: str | None, batch: Sequence[Instance]) -> list[Prediction]:
    return parse_batch(text, batch, lambda answer, _instance: parse_answer(answer))


# --------------------------------------------------------------------------------------------------------------------
# Generation hooks and scoring
# --------------------------------------------------------------------------------------------------------------------


def judge_request(instance: Instance, prediction: Prediction) -> dict[str, Any] | None:
    """Arguments for the viewpoint judge; None for a failed prediction (no judge call)."""
    if not prediction.ok:
        return None
    return {
        "speaker": instance.inputs.get("speaker", ""),
        "gold": [dict(v) for v in instance.gold["viewpoints"]],
        "predicted": [dict(v) for v in prediction.value["viewpoints"]],
    }


def bertscore_pairs(instance: Instance, prediction: Prediction) -> list[tuple[str, str]]:
    """Every (predicted viewpoint, gold viewpoint) pair, gold-major; [] for a failed prediction."""
    if not prediction.ok:
        return []
    predicted = [v["viewpoint"] for v in prediction.value["viewpoints"]]
    return [(p, g["viewpoint"]) for g in instance.gold["viewpoints"] for p in predicted]


def best_match(f1s: Sequence[float], n_gold: int, n_pred: int) -> float:
    """Best match per gold viewpoint, averaged: mean over g of max over p of ``f1s[g * n_pred + p]``."""
    if len(f1s) != n_gold * n_pred:
        raise ValueError(f"expected {n_gold} x {n_pred} = {n_gold * n_pred} BERTScore values, got {len(f1s)}")
    if n_gold == 0 or n_pred == 0:
        return 0.0
    return sum(max(float(x) for x in f1s[g * n_pred : (g + 1) * n_pred]) for g in range(n_gold)) / n_gold


def target_match(gold: Sequence[Mapping[str, str]], predicted: Sequence[Mapping[str, str]]) -> float:
    """Fraction of gold viewpoints whose target (case-insensitive) is among the predicted targets."""
    if not gold:
        return 0.0
    targets = {p["target"].strip().casefold() for p in predicted}
    return sum(1 for g in gold if g["target"].strip().casefold() in targets) / len(gold)


def _judge_field(judge: Any, key: str) -> Any:
    if isinstance(judge, Mapping):
        return judge.get(key)
    return getattr(judge, key, None)


def rubric_of(extras: Mapping[str, Any]) -> str:
    """The judge rubric: ``extras["rubric"]``, else the verdict's own ``rubric``, else Likert."""
    rubric = extras.get("rubric") or _judge_field(extras.get("judge"), "rubric") or DEFAULT_RUBRIC
    if rubric not in JUDGE_MIN:
        raise ValueError(f"unknown VP judge rubric {rubric!r}; expected one of {sorted(JUDGE_MIN)}")
    return str(rubric)


def score(instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    extras = extras or {}
    rubric = rubric_of(extras)
    gold = instance.gold["viewpoints"]
    if not prediction.ok:
        return {
            "failed": True,
            "failure": prediction.failure,
            "rubric": rubric,
            "judged": False,
            "judge_failed": False,
            "judge": JUDGE_MIN[rubric],
            "judge_detail": None,
            "bertscore": 0.0,
            "target_match": 0.0,
        }
    predicted = prediction.value["viewpoints"]
    judge = extras.get("judge")
    value: float | None = None
    if judge is not None and not _judge_field(judge, "error"):
        raw = _judge_field(judge, "score")
        number = isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw)
        if number and JUDGE_MIN[rubric] <= raw <= JUDGE_MAX[rubric]:
            value = float(raw)
    f1s = extras.get("bertscore")
    return {
        "failed": False,
        "failure": None,
        "rubric": rubric,
        "judged": judge is not None,
        "judge_failed": judge is not None and value is None,
        "judge": value,
        "judge_detail": _judge_field(judge, "detail") if judge is not None else None,
        "bertscore": best_match(f1s, len(gold), len(predicted)) if f1s is not None else None,
        "target_match": target_match(gold, predicted),
    }


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def summary(scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    valid = [s for s in scores if not s["failed"]]
    all_failed = bool(scores) and not valid
    judge_ran = all_failed or any(s["judged"] for s in valid)
    bert_ran = all_failed or any(s["bertscore"] is not None for s in valid)
    return {
        "judge": _mean([s["judge"] for s in scores if s["judge"] is not None]) if judge_ran else None,
        "bertscore": _mean([s["bertscore"] for s in scores if s["bertscore"] is not None]) if bert_ran else None,
        "target_match": _mean([s["target_match"] for s in scores]),
    }


def summary_draws(scores: Sequence[Mapping[str, Any]]) -> Statistic:
    """``summary`` over blocks of bootstrap resamples (``benchmarks.bootstrap``; the same values, tested), with its
    rule for the judge and BERTScore: not run in a resample where no valid answer has it, unless all failed."""
    valid = [not s["failed"] for s in scores]
    means = {
        "judge": mean_if_run([s["judge"] for s in scores], valid, [bool(s["judged"]) for s in scores]),
        "bertscore": mean_if_run([s["bertscore"] for s in scores], valid, [s["bertscore"] is not None for s in scores]),
        "target_match": mean_if_run([s["target_match"] for s in scores]),
    }

    def statistic(resample: Resample) -> dict[str, Any]:
        return {key: mean(resample) for key, mean in means.items()}

    return statistic


def details(instances: Sequence[Instance], scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    failures = Counter(str(s["failure"]).split(":")[0] for s in scores if s["failed"])
    return {
        "n": len(scores),
        "failures": sum(failures.values()),
        "failure_reasons": dict(failures),
        "judge_failures": sum(1 for s in scores if s.get("judge_failed")),
        "judged": sum(1 for s in scores if s.get("judged")),
        "rubrics": dict(Counter(s["rubric"] for s in scores)),
        "counts": {
            "instances": len(instances),
            "samples": len({i.sample_id for i in instances}),
            "by_scenario": dict(Counter(i.scenario for i in instances)),
            "gold_viewpoints": sum(len(i.gold["viewpoints"]) for i in instances),
        },
    }


# --------------------------------------------------------------------------------------------------------------------
# Built-in agents
# --------------------------------------------------------------------------------------------------------------------

_RANDOM_VIEWS = (
    ("does not listen to me", "frustrated"),
    ("is trying hard to make things work", "appreciative"),
    ("blames me for everything", "defensive"),
    ("cannot be trusted with this", "distrustful"),
    ("cares about me more than I thought", "warm"),
    ("is being unfair", "resentful"),
    ("might be able to help us", "hopeful"),
    ("does not understand what I go through", "hurt"),
)
_DEFAULT_VIEW = ("does not really understand me", "frustrated")

# Heuristic cues over the current row's words: (cue words, viewpoint, attitude); the first group found wins.
_CUES: tuple[tuple[frozenset[str], str, str], ...] = (
    (frozenset({"never", "always", "won't", "doesn't", "don't", "can't"}), "does not do what I need", "critical"),
    (frozenset({"blame", "fault", "unfair", "wrong", "lie", "lied", "lying"}), "is being unfair to me", "resentful"),
    (
        frozenset({"listen", "hear", "understand", "ignore", "ignores", "ignored"}),
        "does not listen to me",
        "frustrated",
    ),
    (
        frozenset({"love", "appreciate", "thank", "proud", "grateful", "good", "great"}),
        "means a lot to me",
        "appreciative",
    ),
    (frozenset({"help", "hope", "try", "trying"}), "could help things get better", "hopeful"),
)


def oracle_answer(instance: Instance) -> dict[str, Any]:
    """What a perfect model would answer (for the oracle agent)."""
    return {"viewpoints": [dict(v) for v in instance.gold["viewpoints"]]}


def _randint(rng: Any, low: int, high: int) -> int:
    if hasattr(rng, "integers"):
        return int(rng.integers(low, high + 1))
    return int(rng.randint(low, high))


def _others(instance: Instance, sample: Sample | None = None) -> list[str]:
    speaker = instance.inputs.get("speaker", "")
    names = instance.inputs.get("people")
    if names is None and sample is not None:
        names = people(sample, speaker)
    return [n for n in (names or [THERAPIST]) if n != speaker] or [THERAPIST]


def random_answer(instance: Instance, sample: Sample, rng: Any) -> dict[str, Any]:
    """One viewpoint about a uniformly chosen other person, from a fixed list of phrases."""
    others = _others(instance, sample)
    target = others[_randint(rng, 0, len(others) - 1)]
    viewpoint, attitude = _RANDOM_VIEWS[_randint(rng, 0, len(_RANDOM_VIEWS) - 1)]
    return {"viewpoints": [{"target": target, "viewpoint": viewpoint, "attitude": attitude}]}


def majority_answer(instance: Instance, pool: Sequence[Instance]) -> dict[str, Any]:
    """The most frequent gold viewpoint phrase and attitude among ``pool`` (case-insensitive; ties: first seen),
    aimed at the most frequent kind of gold target: the therapist, or a participant (then the first other
    participant of this instance). Names themselves do not carry over between samples, so only the kind does."""
    others = _others(instance)
    golds = [v for item in pool for v in item.gold["viewpoints"]]
    if not golds:
        viewpoint, attitude = _DEFAULT_VIEW
        return {"viewpoints": [{"target": others[0], "viewpoint": viewpoint, "attitude": attitude}]}

    def most_common(texts: list[str]) -> str:
        first: dict[str, str] = {}
        for text in texts:
            first.setdefault(text.lower(), text)
        counts = Counter(t.lower() for t in texts)
        top = max(counts.values())
        return next(first[k] for k in first if counts[k] == top)

    therapist_share = sum(1 for v in golds if v["target"] == THERAPIST) / len(golds)
    partners = [n for n in others if n != THERAPIST]
    target = THERAPIST if therapist_share > 0.5 or not partners else partners[0]
    return {
        "viewpoints": [
            {
                "target": target,
                "viewpoint": most_common([v["viewpoint"] for v in golds]),
                "attitude": most_common([v["attitude"] for v in golds]),
            }
        ]
    }


def heuristic_answer(instance: Instance, sample: Sample) -> dict[str, Any]:
    """Rules over observable fields only: the target is the row's first addressee other than the speaker and the
    therapist (``row.target``; a group label means the first other participant), else the first other
    participant, else the therapist; the phrase comes from the first cue-word group found in the row's words."""
    row = sample.rows[instance.row]
    speaker = instance.inputs.get("speaker") or row.primary_speaker.strip()
    others = _others(instance, sample)
    partners = [n for n in others if n != THERAPIST]
    addressed = [t.strip() for t in row.target if t.strip() and t.strip() not in (speaker, THERAPIST)]
    if addressed and addressed[0] in partners:
        target = addressed[0]
    elif partners:
        target = partners[0]
    else:
        target = THERAPIST
    words = {w.lower() for w in _TOKEN.findall(row.dialogue_cleaned)}
    viewpoint, attitude = _DEFAULT_VIEW
    for cues, phrase, feeling in _CUES:
        if cues & words:
            viewpoint, attitude = phrase, feeling
            break
    return {"viewpoints": [{"target": target, "viewpoint": viewpoint, "attitude": attitude}]}
