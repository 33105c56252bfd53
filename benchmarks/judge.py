"""LLM-as-judge for the generative tasks ER and VP (paper Sec. 5.2, Table 4, App. A.5/A.6, App. F).

The paper graded with GPT-5.4 on a 1-5 Likert scale (semantic consistency of prediction and gold). Our judge is
any model behind an async ``Complete`` callable (e.g. a litellm client at temperature 0); this module only builds
the prompts and parses/validates the answer, so it depends on no client class.

Rubrics:

* ``"likert"`` (default, the paper's scale): one integer ``score`` in 1..5, for ER and VP.
* ``"authors"`` (the authors' VP code, ref-spec §9.3): ``source_target_score`` 0..2 + ``viewpoint_score`` 0..4;
  ``score`` is their sum (0..6), recomputed here, never taken from the judge. Deviation from the authors: they
  read ``viewpoint_total_score`` from the judge unchecked; we range-check both parts and sum them ourselves.

Unlike the authors' code (which applied ``float()`` to whatever came back, §8.4), answers are range-checked: an
out-of-range, non-integer-valued or missing score is an error (``score=None``), never clamped. The prompt wording
is ours; one judge call grades one item (the authors batched all checkpoints of a sample into one call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, Field

from benchmarks.parsing import extract_json


class Completion(Protocol):
    """What a ``Complete`` callable returns: the answer text, or an error (both may be None)."""

    text: str | None
    error: str | None


Complete = Callable[[list[dict[str, str]]], Awaitable[Completion]]
Rubric = Literal["likert", "authors"]
RUBRICS: tuple[str, ...] = get_args(Rubric)

LIKERT_RANGE = (1, 5)
AUTHORS_PARTS: dict[str, tuple[int, int]] = {"source_target_score": (0, 2), "viewpoint_score": (0, 4)}
AUTHORS_RANGE = (0, 6)


class JudgeScore(BaseModel):
    """One judge verdict. ``score`` is None exactly when ``error`` says why."""

    score: float | None
    detail: dict[str, float] = Field(default_factory=dict)
    """The rubric's parts (authors rubric: ``source_target_score`` and ``viewpoint_score``)."""
    raw: str | None = None
    """The judge's answer text, verbatim."""
    error: str | None = None
    reason: str | None = None
    """The judge's ``reason``, when it gave one."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.score is not None


# ---------------------------------------------------------------------------------------------------------------
# Prompts

_SYSTEM = (
    "You are an expert rater of emotional understanding in couple and family therapy. You compare a model's "
    "prediction about a therapy client with an expert annotation (the gold answer) and rate how well they agree "
    "in meaning. Judge meaning, not wording: paraphrases and near-synonyms count as agreement. You are impartial "
    "and consistent, and you answer with a single JSON object only - no code fences, no text around it."
)

_ER_RUBRIC = """\
Rate how well the PREDICTED description of the speaker's internal emotion matches the GOLD description, on an \
integer scale from 1 to 5:
5 = the same core emotion(s) and the same nuance (a paraphrase or near-synonym of the gold description);
4 = the same core emotion(s), with a minor difference in nuance, or one secondary component missing or added;
3 = a partial match: some of the gold emotion is captured (e.g. one of two emotions, or a related emotion of the \
same kind), but an important part is missing or different;
2 = only weakly related (e.g. the same broad positive/negative feeling, but a different specific emotion);
1 = unrelated, opposite or contradictory, or no usable prediction.
Rate only the emotion content; ignore intensity, length and style."""

_VP_LIKERT_RUBRIC = """\
Each viewpoint says who holds a view (source), about whom (target), and what the view is. A gold \
attitude, where given, only clarifies the gold view; predictions need not state one. Rate how well the \
PREDICTED viewpoints recover the GOLD viewpoints, as a whole, on an integer scale from 1 to 5:
5 = every gold viewpoint is recovered with the right target and essentially the same meaning;
4 = all gold targets are right and the views are close, with minor differences in nuance or one minor omission;
3 = a partial match: some gold viewpoints are recovered, or the targets are right but the views only partly match;
2 = only weakly related: targets mostly wrong, or views only loosely related to the gold ones;
1 = wrong, contradictory or missing (an empty prediction scores 1).
The order of the items does not matter. Predicted viewpoints that are not in the gold list lower the rating only \
if they misrepresent the speaker's stance."""

_VP_AUTHORS_RUBRIC = """\
Each viewpoint says who holds a view (source), about whom (target), and what the view is. A gold \
attitude, where given, only clarifies the gold view; predictions need not state one. Grade the PREDICTED \
viewpoints against the GOLD viewpoints on two integer scales:
source_target_score (0-2): were the gold (source, target) pairings recovered?
  0 = mostly wrong or missing; 1 = partially recovered; 2 = all gold pairings essentially recovered.
viewpoint_score (0-4): how close are the predicted views to the gold views?
  0 = wrong or contradictory; 1 = weakly related; 2 = close; 3 = essentially the same; 4 = almost exact.
The order of the items does not matter. An empty prediction scores 0 on both scales."""

_LIKERT_SCHEMA = '{"score": <integer 1-5>, "reason": "<one short sentence>"}'
_AUTHORS_SCHEMA = (
    '{"source_target_score": <integer 0-2>, "viewpoint_score": <integer 0-4>, "reason": "<one short sentence>"}'
)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _check_rubric(rubric: str) -> None:
    if rubric not in RUBRICS:
        raise ValueError(f"unknown rubric {rubric!r}; expected one of {RUBRICS}")


def er_judge_messages(*, speaker: str, gold_emotion: str, predicted_emotion: str) -> list[dict[str, str]]:
    """Judge prompt for ER: does the predicted internal-emotion description match the gold one (Likert 1-5)."""
    item = {"speaker": speaker, "gold_emotion": gold_emotion, "predicted_emotion": predicted_emotion}
    user = (
        f"Task: emotion recognition. A model read a therapy session transcript and described the internal emotion "
        f"that the client {speaker} feels right as they begin speaking in the current turn.\n\n"
        f"{_ER_RUBRIC}\n\n"
        f"Item:\n{_dump(item)}\n\n"
        f"Answer with JSON only, exactly in this form:\n{_LIKERT_SCHEMA}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def _viewpoint_items(items: Sequence[Mapping[str, Any]], speaker: str, side: str) -> list[dict[str, str]]:
    if isinstance(items, (str, Mapping)):
        raise TypeError(f"{side} viewpoints must be a sequence of mappings")
    rendered: list[dict[str, str]] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise TypeError(f"{side} viewpoint items must be mappings with target and viewpoint, got {item!r}")
        entry = {
            "source": str(item.get("source") or speaker).strip(),
            "target": str(item.get("target") or "").strip(),
            "viewpoint": str(item.get("viewpoint") or "").strip(),
        }
        attitude = str(item.get("attitude") or "").strip()
        if attitude:
            entry["attitude"] = attitude
        rendered.append(entry)
    return rendered


def vp_judge_messages(
    *,
    speaker: str,
    gold: Sequence[Mapping[str, Any]],
    predicted: Sequence[Mapping[str, Any]],
    rubric: Rubric = "likert",
) -> list[dict[str, str]]:
    """Judge prompt for VP: do the predicted (source, target, viewpoint) items recover the gold ones. Items are
    mappings with ``target``, ``viewpoint`` and optionally ``source`` (default: the speaker) and ``attitude``."""
    _check_rubric(rubric)
    item = {
        "speaker": speaker,
        "gold_viewpoints": _viewpoint_items(gold, speaker, "gold"),
        "predicted_viewpoints": _viewpoint_items(predicted, speaker, "predicted"),
    }
    rubric_text, schema = (
        (_VP_LIKERT_RUBRIC, _LIKERT_SCHEMA) if rubric == "likert" else (_VP_AUTHORS_RUBRIC, _AUTHORS_SCHEMA)
    )
    user = (
        f"Task: viewpoint prediction. A model read a therapy session transcript and described the viewpoints that "
        f"the client {speaker} expresses about other people in the current turn.\n\n"
        f"{rubric_text}\n\n"
        f"Item:\n{_dump(item)}\n\n"
        f"Answer with JSON only, exactly in this form:\n{schema}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


# ---------------------------------------------------------------------------------------------------------------
# Parsing

_INT_STRING = re.compile(r"[+-]?\d+(?:\.0*)?")


def task_judge_messages(task: str, request: Mapping[str, Any], rubric: Rubric = "likert") -> list[dict[str, str]]:
    """The judge's messages for ``task`` ("er" or "vp") from ``task.judge_request(instance, prediction)``."""
    if task == "er":
        return er_judge_messages(**request)
    if task == "vp":
        return vp_judge_messages(**request, rubric=rubric)
    raise ValueError(f"no judge for task {task!r}; only er and vp are judged")


def _integer(payload: Mapping[str, Any], key: str, low: int, high: int) -> tuple[int | None, str | None]:
    """A range-checked integer-valued field: 4, 4.0 and "4" pass; 3.5, "high", true, 0/6 (for 1-5) fail."""
    if key not in payload or payload[key] is None:
        return None, f"missing {key!r}"
    value = payload[key]
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _INT_STRING.fullmatch(value.strip()):
        number = float(value.strip())
    if number is None or number != number or not number.is_integer():  # NaN compares unequal to itself
        return None, f"{key!r} is not an integer: {value!r}"
    if not low <= number <= high:
        return None, f"{key!r} out of range {low}-{high}: {value!r}"
    return int(number), None


def parse_judge_answer(text: str | None, rubric: Rubric = "likert") -> JudgeScore:
    """Extract and validate the judge's JSON object (tolerates code fences and prose around it)."""
    _check_rubric(rubric)
    if text is None or not text.strip():
        return JudgeScore(score=None, raw=text, error="empty judge answer")
    payload = extract_json(text)
    if isinstance(payload, list) and len(payload) == 1:
        payload = payload[0]
    if not isinstance(payload, dict):
        return JudgeScore(score=None, raw=text, error="no JSON object in judge answer")
    reason = payload.get("reason")
    reason = str(reason) if reason is not None else None

    if rubric == "likert":
        value, error = _integer(payload, "score", *LIKERT_RANGE)
        if error is not None:
            return JudgeScore(score=None, raw=text, error=error, reason=reason)
        return JudgeScore(score=float(value), raw=text, reason=reason)

    detail: dict[str, float] = {}
    errors: list[str] = []
    for key, (low, high) in AUTHORS_PARTS.items():
        value, error = _integer(payload, key, low, high)
        if error is not None:
            errors.append(error)
        else:
            detail[key] = float(value)
    if errors:
        return JudgeScore(score=None, detail=detail, raw=text, error="; ".join(errors), reason=reason)
    return JudgeScore(score=sum(detail.values()), detail=detail, raw=text, reason=reason)


async def judge(complete: Complete, messages: list[dict[str, str]], rubric: Rubric = "likert") -> JudgeScore:
    """Ask the judge once and parse its answer. A failed call (a Completion with ``error``, or the callable
    raising) becomes ``JudgeScore(score=None, error=...)``; retrying is the caller's (client's) business."""
    _check_rubric(rubric)
    try:
        completion = await complete(messages)
    except Exception as exc:  # failures are values: the runner counts them, it does not crash
        return JudgeScore(score=None, error=f"judge call failed: {type(exc).__name__}: {exc}")
    error = getattr(completion, "error", None)
    text = getattr(completion, "text", None)
    if error:
        return JudgeScore(score=None, raw=text, error=f"judge call failed: {error}")
    return parse_judge_answer(text, rubric)
