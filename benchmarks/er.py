"""ER - Emotion Recognition (paper Sec. 3, App. A.5, App. C; Table 4: S_ER and BERTScore F1).

At a client's row, what does the CURRENT speaker feel internally, and how strongly (0-10)?

Instances (App. C; reference-spec 8.1): a checkpoint is a client row (not the therapist, not ``Couple``/``Family``,
not empty) whose FIRST ``internal_emotion`` item with ``person == speaker`` has a non-empty
``emotion_description`` and an intensity x with ``int(round(float(x)))`` in 0..10 (Python's round, half to even),
and whose ``dialogue_cleaned`` has at least 5 tokens ``[A-Za-z0-9']+``. Early candidates are discarded: with N
rows in the sample, rows with 1-based position <= min(N-1, ceil(0.3*N)) are dropped. At most 5 checkpoints per
sample are kept by deterministic even spacing (``even_sample(..., 5, single="first")``). This reproduces Table 6
(844 couple + 82 family instances in 174 + 17 samples). Gold = ``{"emotion": text, "intensity": int}``.

Prompt: the current row plus the 3 rows before it (``context_size``; -1 = all earlier rows, 0 = none), the
current speaker's name, and a neutral item number. Unlike the authors' prompt, no checkpoint id (which carries the
sample id and row) is shown, and with ``context_size=-1`` the earlier rows really are sent.

Answer: ``{"id", "emotion": short concrete phrase, "intensity": integer 0-10}``. A missing/empty emotion or an
intensity that is not a number in 0..10 is a failure (the reason says which). A numeric string ("7") or a
non-integer number (6.5) is accepted and rounded like the gold (``normalised``).

Scores per instance (paper App. A.5):

* ``s_int = max(1, 5 - |pred - gold|)`` (Eq. 5), integers 1..5;
* ``s_emo`` = the judge's 1-5 score (``extras["judge"].score``), None when the judge was not run;
* ``s_er = (s_emo + s_int) / 2`` (Eq. 6) when ``s_emo`` is available - the authors' code never computes it;
* ``bertscore`` = F1 of (predicted emotion, gold emotion), None when not run;
* ``abs_error`` = |pred - gold| (for ``intensity_mae``).

A failed prediction (malformed answer, missing item, invalid field) is scored as wrong and stays in every
denominator (the authors dropped failed samples): ``s_int = 1``, ``s_emo = 1``, ``s_er = 1``, ``bertscore = 0.0``
and ``abs_error`` = the worst error possible for that gold, ``max(gold, 10 - gold)``. No judge call is made for a
failure (``judge_request`` returns None).

A judge error on a valid prediction (no score, or a score outside 1..5) leaves ``s_emo``/``s_er`` None for that
instance and is counted in ``details()["judge_failures"]``: the runner can retry those judge calls and rescore.
``summary`` averages every metric over the instances where it is available; the judge (BERTScore) counts as not
run - value None - when no valid prediction got a judge verdict (F1), unless every prediction failed, in which case
the failures' minimum values are reported.
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
from rescue_env.data.domain import is_client, scenario_of
from rescue_env.data.schema import Row, Sample

name = "er"
title = "Emotion recognition"
batch_size = 5
default_context = 3
generative = True

MAX_PER_SAMPLE = 5
MIN_DIALOGUE_TOKENS = 5
EARLY_FRACTION = 0.3
INTENSITY_RANGE = (0, 10)
JUDGE_RANGE = (1.0, 5.0)

_TOKEN = re.compile(r"[A-Za-z0-9']+")
_EMOTION_KEYS = ("emotion", "predicted_internal_emotion", "internal_emotion", "predicted_emotion")
_INTENSITY_KEYS = ("intensity", "predicted_intensity_score", "intensity_score", "predicted_intensity")


# --------------------------------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------------------------------


def _intensity(value: Any) -> int | None:
    """``int(round(float(x)))`` when that lies in 0..10, else None (bools are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    rounded = int(round(number))
    return rounded if INTENSITY_RANGE[0] <= rounded <= INTENSITY_RANGE[1] else None


def gold_of(row: Row) -> dict[str, Any] | None:
    """The row's ER gold: the first ``internal_emotion`` item of the speaker, if it is complete; else None."""
    speaker = row.primary_speaker.strip()
    for emotion in row.internal_emotion:
        if emotion.person.strip() != speaker:
            continue
        text = emotion.emotion_description.strip()
        intensity = _intensity(emotion.intensity)
        if not text or intensity is None:
            return None
        return {"emotion": text, "intensity": intensity}
    return None


def early_cutoff(n_rows: int) -> int:
    """Rows with 1-based position <= this are too early to be checkpoints: min(N-1, ceil(0.3*N)), 0 when N <= 1."""
    if n_rows <= 1:
        return 0
    return min(n_rows - 1, math.ceil(EARLY_FRACTION * n_rows))


def candidates(sample: Sample) -> list[tuple[int, dict[str, Any]]]:
    """Eligible (row position, gold) pairs of a sample, before sampling."""
    cutoff = early_cutoff(len(sample.rows))
    out = []
    for position, row in enumerate(sample.rows):
        if position + 1 <= cutoff or not is_client(row):
            continue
        if len(_TOKEN.findall(row.dialogue_cleaned)) < MIN_DIALOGUE_TOKENS:
            continue
        gold = gold_of(row)
        if gold is not None:
            out.append((position, gold))
    return out


def build_instances(samples: Sequence[Sample], max_per_sample: int = MAX_PER_SAMPLE) -> list[Instance]:
    instances: list[Instance] = []
    for sample in samples:
        scenario = scenario_of(sample)
        for position, gold in even_sample(candidates(sample), max_per_sample, single="first"):
            instances.append(
                new_instance(
                    name, sample, position, scenario, gold, {"speaker": sample.rows[position].primary_speaker.strip()}
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
        "You are evaluating single-person understanding in a therapy session. Each item below shows one CURRENT "
        f"row spoken by a client, preceded by {describe_window(size)} before it. For each item, predict the "
        "CURRENT speaker's internal emotion at the moment they speak that row, and its intensity.\n"
        "- Focus only on the current speaker named in the item: not their partner or relatives, not the "
        "therapist, not the group.\n"
        "- Use no future rows and no outside knowledge about the people.\n"
        f"- {context_note}\n"
        '- Describe the emotion as a short concrete phrase, such as "feels dismissed and frustrated".\n'
        "- Intensity must be an integer from 0 (none) to 10 (overwhelming)."
    )
    items = []
    for instance in batch:
        sample = samples[instance.sample_id]
        speaker = instance.inputs.get("speaker") or sample.rows[instance.row].primary_speaker.strip()
        parts = current_row_item(sample, instance.row, size, options.mode)
        parts.append(
            f"What does {speaker} (the current speaker) feel internally at row {instance.row + 1}, and how intensely?"
        )
        items.append("\n".join(parts))
    example = (
        '{"answers": [{"id": "1", "emotion": "feels dismissed and frustrated", "intensity": 6}, '
        '{"id": "2", "emotion": "feels hopeful but guarded", "intensity": 4}]}'
    )
    return envelope(scenario, instructions, items, example, options)


# --------------------------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------------------------


def _first(answer: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in answer:
            return answer[key]
    return None


def parse_answer(answer: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None, bool]:
    """One answer object -> (value, failure, normalised)."""
    emotion = _first(answer, _EMOTION_KEYS)
    if not isinstance(emotion, str) or not emotion.strip():
        return None, "missing_field: emotion" if emotion is None else "invalid_value: emotion is empty", False
    raw = _first(answer, _INTENSITY_KEYS)
    if raw is None:
        return None, "missing_field: intensity", False
    normalised = False
    number: float | None = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        number = float(raw)
    elif isinstance(raw, str):
        try:
            number = float(raw.strip())
            normalised = True
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or not INTENSITY_RANGE[0] <= number <= INTENSITY_RANGE[1]:
        return None, f"invalid_value: intensity {str(raw)[:40]!r} is not a number in 0..10", False
    intensity = int(round(number))
    normalised |= intensity != number
    return {"emotion": emotion.strip(), "intensity": intensity}, None, normalised


def parse(text: str | None, batch: Sequence[Instance]) -> list[Prediction]:
    return parse_batch(text, batch, lambda answer, _instance: parse_answer(answer))


# --------------------------------------------------------------------------------------------------------------------
# Generation hooks and scoring
# --------------------------------------------------------------------------------------------------------------------


def judge_request(instance: Instance, prediction: Prediction) -> dict[str, Any] | None:
    """Arguments for the emotion judge (1-5 Likert); None for a failed prediction (no judge call)."""
    if not prediction.ok:
        return None
    return {
        "speaker": instance.inputs.get("speaker", ""),
        "gold_emotion": instance.gold["emotion"],
        "predicted_emotion": prediction.value["emotion"],
    }


def bertscore_pairs(instance: Instance, prediction: Prediction) -> list[tuple[str, str]]:
    """(candidate, reference) = (predicted emotion, gold emotion); [] for a failed prediction."""
    if not prediction.ok:
        return []
    return [(prediction.value["emotion"], instance.gold["emotion"])]


def intensity_score(predicted: int, gold: int) -> int:
    """Paper Eq. 5: 5 for an exact match, one point less per point of difference, at least 1."""
    return max(1, 5 - abs(int(predicted) - int(gold)))


def judge_field(judge: Any, key: str) -> Any:
    """A field of a judge verdict: an object with attributes (``JudgeScore``) or a plain mapping."""
    if isinstance(judge, Mapping):
        return judge.get(key)
    return getattr(judge, key, None)


def judge_value(judge: Any, low: float, high: float) -> float | None:
    """The judge's score when it is a finite number in [low, high]; None for an error or an invalid score."""
    if judge is None or judge_field(judge, "error"):
        return None
    value = judge_field(judge, "score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if low <= value <= high else None


def score(instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    extras = extras or {}
    gold_intensity = int(instance.gold["intensity"])
    if not prediction.ok:
        return {
            "failed": True,
            "failure": prediction.failure,
            "judged": False,
            "judge_failed": False,
            "s_int": 1,
            "s_emo": 1.0,
            "s_er": 1.0,
            "bertscore": 0.0,
            "abs_error": max(gold_intensity, INTENSITY_RANGE[1] - gold_intensity),
        }
    predicted = int(prediction.value["intensity"])
    s_int = intensity_score(predicted, gold_intensity)
    judge = extras.get("judge")
    s_emo = judge_value(judge, *JUDGE_RANGE)
    bertscore = None
    f1s = extras.get("bertscore")
    if f1s is not None:
        if len(f1s) != 1:
            raise ValueError(f"ER expects 1 BERTScore value per instance, got {len(f1s)} for {instance.instance_id}")
        bertscore = float(f1s[0])
    return {
        "failed": False,
        "failure": None,
        "judged": judge is not None,
        "judge_failed": judge is not None and s_emo is None,
        "s_int": s_int,
        "s_emo": s_emo,
        "s_er": (s_emo + s_int) / 2.0 if s_emo is not None else None,
        "bertscore": bertscore,
        "abs_error": abs(predicted - gold_intensity),
    }


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def _available(scores: Sequence[Mapping[str, Any]], key: str, ran: bool) -> float | None:
    """Mean of ``key`` over instances that have it; failures count only when the metric was run at all."""
    if not ran:
        return None
    return _mean([s[key] for s in scores if s.get(key) is not None])


def summary(scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    valid = [s for s in scores if not s["failed"]]
    all_failed = bool(scores) and not valid
    judge_ran = all_failed or any(s["judged"] for s in valid)
    bert_ran = all_failed or any(s["bertscore"] is not None for s in valid)
    return {
        "s_emo": _available(scores, "s_emo", judge_ran),
        "s_int": _mean([s["s_int"] for s in scores]),
        "s_er": _available(scores, "s_er", judge_ran),
        "bertscore": _available(scores, "bertscore", bert_ran),
        "intensity_mae": _mean([s["abs_error"] for s in scores]),
    }


def summary_draws(scores: Sequence[Mapping[str, Any]]) -> Statistic:
    """``summary`` over blocks of bootstrap resamples (``benchmarks.bootstrap``; the same values, tested), with its
    rule for the judge and BERTScore: not run in a resample where no valid answer has it, unless all failed."""
    valid = [not s["failed"] for s in scores]
    judged = [bool(s["judged"]) for s in scores]
    bert = [s["bertscore"] is not None for s in scores]
    means = {
        "s_emo": mean_if_run([s.get("s_emo") for s in scores], valid, judged),
        "s_int": mean_if_run([s["s_int"] for s in scores]),
        "s_er": mean_if_run([s.get("s_er") for s in scores], valid, judged),
        "bertscore": mean_if_run([s.get("bertscore") for s in scores], valid, bert),
        "intensity_mae": mean_if_run([s["abs_error"] for s in scores]),
    }

    def statistic(resample: Resample) -> dict[str, Any]:
        return {key: mean(resample) for key, mean in means.items()}

    return statistic


def details(instances: Sequence[Instance], scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    failures = Counter(str(s["failure"]).split(":")[0] for s in scores if s["failed"])
    by_scenario = Counter(i.scenario for i in instances)
    return {
        "n": len(scores),
        "failures": sum(failures.values()),
        "failure_reasons": dict(failures),
        "judge_failures": sum(1 for s in scores if s.get("judge_failed")),
        "judged": sum(1 for s in scores if s.get("judged")),
        "counts": {
            "instances": len(instances),
            "samples": len({i.sample_id for i in instances}),
            "by_scenario": dict(by_scenario),
        },
        "s_int_histogram": {str(k): v for k, v in sorted(Counter(s["s_int"] for s in scores).items())},
    }


# --------------------------------------------------------------------------------------------------------------------
# Built-in agents
# --------------------------------------------------------------------------------------------------------------------

_RANDOM_EMOTIONS = (
    "feels dismissed and frustrated",
    "feels hurt and sad",
    "feels anxious and worried",
    "feels defensive and misunderstood",
    "feels hopeful but guarded",
    "feels calm and reflective",
    "feels angry and resentful",
    "feels ashamed and embarrassed",
    "feels lonely and disconnected",
    "feels relieved and appreciative",
)

# Heuristic lexicon: (cue words, emotion phrase, base intensity). First cue found in the current row wins.
_LEXICON: tuple[tuple[frozenset[str], str, int], ...] = (
    (frozenset({"angry", "mad", "furious", "pissed", "hate", "sick", "fed"}), "feels angry and resentful", 7),
    (frozenset({"hurt", "sad", "cry", "crying", "cried", "lonely", "alone", "miss", "lost"}), "feels hurt and sad", 6),
    (
        frozenset({"scared", "afraid", "fear", "worried", "worry", "anxious", "nervous", "terrified"}),
        "feels anxious and worried",
        6,
    ),
    (frozenset({"never", "always", "blame", "fault", "unfair", "wrong"}), "feels accused and defensive", 6),
    (
        frozenset({"frustrated", "frustrating", "tired", "annoyed", "listen", "ignore", "ignored"}),
        "feels frustrated and unheard",
        6,
    ),
    (frozenset({"ashamed", "embarrassed", "guilty", "sorry", "stupid"}), "feels ashamed and guilty", 5),
    (
        frozenset({"love", "happy", "glad", "grateful", "thank", "appreciate", "hope", "better"}),
        "feels hopeful and appreciative",
        4,
    ),
)
_DEFAULT_EMOTION = ("feels uneasy and frustrated", 5)


def oracle_answer(instance: Instance) -> dict[str, Any]:
    """What a perfect model would answer (for the oracle agent)."""
    return {"emotion": instance.gold["emotion"], "intensity": instance.gold["intensity"]}


def _randint(rng: Any, low: int, high: int) -> int:
    """Inclusive random integer from a numpy Generator or a ``random.Random``."""
    if hasattr(rng, "integers"):
        return int(rng.integers(low, high + 1))
    return int(rng.randint(low, high))


def random_answer(instance: Instance, sample: Sample, rng: Any) -> dict[str, Any]:
    """A phrase from a fixed list and a uniform intensity 0..10."""
    return {
        "emotion": _RANDOM_EMOTIONS[_randint(rng, 0, len(_RANDOM_EMOTIONS) - 1)],
        "intensity": _randint(rng, *INTENSITY_RANGE),
    }


def majority_answer(instance: Instance, pool: Sequence[Instance]) -> dict[str, Any]:
    """The most frequent gold emotion phrase (case-insensitive; ties: first seen) and the most frequent gold
    intensity (ties: the lower) among ``pool``."""
    if not pool:
        return {"emotion": _DEFAULT_EMOTION[0], "intensity": _DEFAULT_EMOTION[1]}
    phrases: dict[str, str] = {}
    for item in pool:
        phrases.setdefault(item.gold["emotion"].lower(), item.gold["emotion"])
    emotion_counts = Counter(item.gold["emotion"].lower() for item in pool)
    best = max(emotion_counts.values())
    emotion = next(phrases[k] for k in phrases if emotion_counts[k] == best)
    intensity_counts = Counter(int(item.gold["intensity"]) for item in pool)
    top = max(intensity_counts.values())
    intensity = min(k for k, v in intensity_counts.items() if v == top)
    return {"emotion": emotion, "intensity": intensity}


def heuristic_answer(instance: Instance, sample: Sample) -> dict[str, Any]:
    """Keyword rules over the current row's words only (never the annotations): the first lexicon group with a
    cue word gives the phrase and a base intensity; "!" adds 1, a very short row subtracts 1."""
    row = sample.rows[instance.row]
    words = [w.lower() for w in _TOKEN.findall(row.dialogue_cleaned)]
    found = set(words)
    emotion, intensity = _DEFAULT_EMOTION
    for cues, phrase, base in _LEXICON:
        if cues & found:
            emotion, intensity = phrase, base
            break
    if "!" in row.dialogue_cleaned:
        intensity += 1
    if len(words) < 8:
        intensity -= 1
    return {"emotion": emotion, "intensity": max(INTENSITY_RANGE[0], min(INTENSITY_RANGE[1], intensity))}
