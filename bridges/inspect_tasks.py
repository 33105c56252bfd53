"""The six RESCUE-Bench tasks as inspect_ai tasks: ``rescue_itp``, ``rescue_rpp``, ``rescue_stp``, ``rescue_ssp``,
``rescue_er`` and ``rescue_vp`` (``inspect eval rescue/rescue_rpp --model M`` once the package's ``inspect_ai``
entry point is installed, or ``inspect eval bridges/inspect_tasks.py@rescue_rpp --model M`` from the repository).

Nothing here re-implements a task: each inspect task is our task module (``benchmarks.registry.get_task``) seen
through inspect's Task / Sample / solver / scorer / metric shape.

* Dataset: our instances (``build_instances`` + ``benchmarks.runner.limit_instances``: ``limit`` is our stratified,
  evenly spaced limit, not inspect's ``--limit``, which keeps the first N samples), one instance per inspect
  ``Sample``, unbatched: ``input`` is ``task.render([instance], samples, PromptOptions(mode, context_size))``, the
  same leak-free messages as ``rescue-bench evaluate --batch-size 1``.
* No gold in a ``Sample``: ``target`` is empty and ``metadata`` holds only the task, scenario, sample id and row
  (all shown by the prompt itself, or not gold). The scorer rebuilds the instances from its own arguments (the
  data, the RPP protocol) and looks the gold up by sample id, so a solver - ``generate()`` or any other - cannot
  read it from ``TaskState``; it appears only in the scores (``Score.metadata``), after the answer.
* Scorer: ``task.parse`` + ``task.score`` (through ``benchmarks.results.score_records``, as the runner scores its
  records). A malformed answer, a missing field and a failed model call (with ``score_on_error``, set here) are
  scored wrong, with our failure reasons. ER and VP: the judge (``judge=MODEL``, or ``judge=grader`` for the
  eval's ``grader`` model role, e.g. ``--model-role 'grader={model: M, model_args: {...}}'``) is asked through
  inspect's model API (``get_model(...).generate``, as inspect's model-graded scorers do) with our judge prompt
  and rubric (``benchmarks.judge``, temperature 0, one call per valid answer; a failed call or an invalid verdict
  leaves that instance unjudged, as ours), and BERTScore (``bertscore``, on by default) is ours
  (``benchmarks.bertscore``), per instance. Without ``judge`` the judge's metrics are "not run", as ours.
* Metrics: ours. ``couple``, ``family`` and ``both`` call ``task.summary`` over the per-instance scores of that
  scope (Both = pooled over instances, as our tables), giving ``couple/f1``, ``family/f1``, ``both/f1``, ...; a
  metric that was not run (value None in ``results.json``) is left out, and a scope without instances gives none.
* Generation config: temperature 0 and max_tokens 2048 (``rescue-bench evaluate``'s defaults); inspect's
  ``--temperature`` / ``--max-tokens`` override them for the model under test.

A local OpenAI-compatible server as ``openai/NAME`` (``OPENAI_BASE_URL``): inspect takes a model name it does not
know for a current reasoning model, so add ``-M responses_api=false`` (the server speaks chat completions); it
then still sends the system prompt as a "developer" message and no temperature.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Literal

import anyio
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import HeadlineMetric
from inspect_ai.model import ChatMessage, ChatMessageSystem, ChatMessageUser, GenerateConfig, get_model
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import TaskState, generate

from benchmarks import judge as judging
from benchmarks.base import MODES, Instance, Prediction, PromptOptions
from benchmarks.bertscore import PACKAGED_MODEL, BERTScore, BERTScoreConfig
from benchmarks.registry import get_task
from benchmarks.results import SCOPE_TITLES, SCOPES, score_records
from benchmarks.runner import API_FAILURE, limit_instances
from rescue_env.data import Dataset, load_dataset

__all__ = [
    "rescue_itp",
    "rescue_rpp",
    "rescue_stp",
    "rescue_ssp",
    "rescue_er",
    "rescue_vp",
    "rescue_scorer",
    "couple",
    "family",
    "both",
]

MAX_TOKENS = 2048  # rescue-bench evaluate's --max-tokens default (the model's and the judge's)
JUDGE_CONFIG = GenerateConfig(temperature=0.0, max_tokens=MAX_TOKENS)  # as our runner asks the judge
GRADER_ROLE = "grader"  # judge="grader": the eval's grader model role (--model-role grader=...), with its model args
SCORE_KEY = "rescue"  # Score.metadata[SCORE_KEY]: what our metrics read
HEADLINE = {"itp": "f1", "rpp": "accuracy", "stp": "recall@1", "ssp": "recall@1", "er": "s_er", "vp": "judge"}
HEADLINE_WITHOUT_JUDGE = {"er": "s_int", "vp": "target_match"}


def _offline_tokenizers() -> None:
    """Inspect counts tokens with tiktoken's o200k_base (e.g. for ``mockllm``), which tiktoken downloads on first
    use; nothing is downloaded at run time here, so point tiktoken at the copy that litellm (one of our
    dependencies) ships, as litellm itself does when imported. An explicit TIKTOKEN_CACHE_DIR is kept."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    spec = importlib.util.find_spec("litellm")  # located, not imported (litellm is slow to import)
    if spec is None or spec.origin is None:
        return
    bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    if bundled.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)


_offline_tokenizers()

Rubric = Literal["likert", "authors"]
Mode = Literal["dialogue", "audio", "visual", "audiovisual"]


# ---------------------------------------------------------------------------------------------------------------
# Data


def _resolve_data(data: str) -> str:
    """``"demo"``, or the data path made absolute. Inspect loads a task file from the file's own directory, so a
    relative path that is not found there is looked up in the directory the command was started from (PWD)."""
    if data == "demo":
        return data
    path = Path(data).expanduser()
    if not path.is_absolute() and not path.exists() and os.environ.get("PWD"):
        started = Path(os.environ["PWD"]) / path
        if started.exists():
            path = started
    return str(path.resolve())


@functools.lru_cache(maxsize=8)
def _dataset(data: str) -> Dataset:
    return load_dataset(data)


@functools.lru_cache(maxsize=32)
def _instances(task_name: str, data: str, protocol: str) -> tuple[Instance, ...]:
    """Every instance of the task (in our order), as ``rescue-bench evaluate`` builds them."""
    module = get_task(task_name)
    options: dict[str, Any] = {"protocol": protocol} if module.name == "rpp" else {}
    return tuple(module.build_instances(_dataset(data).samples, **options))


def _chat(messages: Sequence[Mapping[str, str]]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "system":
            out.append(ChatMessageSystem(content=content))
        elif role == "user":
            out.append(ChatMessageUser(content=content))
        else:  # our prompts are a system and a user message; anything else is a bug worth seeing
            raise ValueError(f"unexpected prompt role {role!r}")
    return out


def _plain(value: Any) -> Any:
    """JSON-able copy (tuples -> lists, numpy scalars -> Python numbers, models -> dicts); NaN is kept."""

    def default(obj: Any) -> Any:
        if hasattr(obj, "model_dump"):
            return obj.model_dump()
        if hasattr(obj, "item"):
            return obj.item()
        if isinstance(obj, (set, frozenset)):
            return sorted(obj)
        raise TypeError(f"cannot store {type(obj).__name__} in a score")

    return json.loads(json.dumps(value, default=default))


# ---------------------------------------------------------------------------------------------------------------
# Metrics: our task.summary per scope


def _scope_summary(scores: list[SampleScore], scope: str, task_name: str | None) -> dict[str, float]:
    label = SCOPE_TITLES[scope].lower()
    entries = [s.score.metadata[SCORE_KEY] for s in scores if s.score.metadata and SCORE_KEY in s.score.metadata]
    if not entries:
        # nothing scored yet (inspect asks once before the first sample): the metric names, without values
        keys = get_task(task_name).summary([]) if task_name else {}
        return {f"{label}/{key}": math.nan for key in keys}
    module = get_task(entries[0]["task"])
    # our order (instance order, then epoch), so that sums and ties are taken exactly as ``build_results`` does
    entries.sort(key=lambda e: (e["index"], e.get("epoch", 1)))
    chosen = [e["score"] for e in entries if scope == "all" or e["scenario"] == scope]
    if not chosen:
        return {}  # a scope without instances: "—" in our tables
    return {f"{label}/{key}": float(value) for key, value in module.summary(chosen).items() if value is not None}


def _scope_metric(scope: str, task_name: str | None) -> Metric:
    def compute(scores: list[SampleScore]) -> dict[str, float]:
        return _scope_summary(scores, scope, task_name)

    return compute


# "unreduced": with --epochs N every epoch's answer is scored as one more instance (we have no epoch reducer).
# ``task`` only names the metrics before anything is scored; the values come from the scores' own task.
@metric(name="couple", scores="unreduced")
def couple(task: str | None = None) -> Metric:
    """Our headline metrics over the couple instances (``task.summary``), as ``couple/<metric>``."""
    return _scope_metric("couple", task)


@metric(name="family", scores="unreduced")
def family(task: str | None = None) -> Metric:
    """Our headline metrics over the family instances (``task.summary``), as ``family/<metric>``."""
    return _scope_metric("family", task)


@metric(name="both", scores="unreduced")
def both(task: str | None = None) -> Metric:
    """Our headline metrics pooled over every instance (``task.summary``; "Both" in our tables)."""
    return _scope_metric("all", task)


assert tuple(SCOPES) == ("couple", "family", "all")  # the three metrics above are our three scopes


# ---------------------------------------------------------------------------------------------------------------
# Judge and BERTScore


class _Completion(SimpleNamespace):
    text: str | None
    error: str | None


async def _judge_verdict(
    judge: str, module: ModuleType, instance: Instance, prediction: Prediction, rubric: str
) -> judging.JudgeScore | None:
    """Our judge prompt through inspect's model API; None when the task asks no judge for this answer."""
    request = module.judge_request(instance, prediction)
    if request is None:
        return None
    messages = judging.task_judge_messages(module.name, request, rubric)  # type: ignore[arg-type]
    model = get_model(role=GRADER_ROLE, required=True) if judge == GRADER_ROLE else get_model(judge)

    async def complete(chat: list[dict[str, str]]) -> _Completion:
        output = await model.generate(_chat(chat), config=JUDGE_CONFIG)
        text = output.completion if output.choices else None
        return _Completion(text=text, error=output.error or (None if text is not None else "no choices"))

    return await judging.judge(complete, messages, rubric)  # type: ignore[arg-type]  (a failed call is a value)


_BERT_LOCK = threading.Lock()  # one model, scored from worker threads one call at a time


@functools.lru_cache(maxsize=4)
def _bertscorer(model: str) -> BERTScore:
    return BERTScore(BERTScoreConfig(model=model))


async def _bertscore(model: str, pairs: Sequence[tuple[str, str]]) -> list[float]:
    if not pairs:
        return []
    scorer_ = _bertscorer(model)

    def run() -> list[float]:
        with _BERT_LOCK:
            f1 = scorer_.score([c for c, _ in pairs], [r for _, r in pairs])
        return [float(x) for x in f1]

    return await anyio.to_thread.run_sync(run)


# ---------------------------------------------------------------------------------------------------------------
# Scorer


def _value(score: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar fields of our per-instance score (inspect's ``Score.value``, shown per sample)."""
    return {
        key: value
        for key, value in _plain(dict(score)).items()
        if value is None or (isinstance(value, (str, int, float, bool)) and not _nan(value))
    }


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


@scorer(metrics=[couple(), family(), both()])
def rescue_scorer(
    task: str,
    data: str = "demo",
    protocol: str = "paper",
    judge: str | None = None,
    rubric: str = "likert",
    bertscore: bool = True,
    bertscore_model: str = PACKAGED_MODEL,
) -> Scorer:
    """Our parser and scorer for one task: ``task.parse`` the answer, ask the judge and BERTScore (ER, VP), then
    ``task.score`` (through ``score_records``). The gold comes from the instances rebuilt here from ``data``
    (and ``protocol``), never from the sample."""
    module = get_task(task)
    lookup = {i.instance_id: (k, i) for k, i in enumerate(_instances(module.name, data, protocol))}
    generative = bool(getattr(module, "generative", False))
    config = SimpleNamespace(judge_model=judge if generative else None, bertscore=bertscore, vp_rubric=rubric)
    rubric_used = rubric if module.name == "vp" else "likert"

    async def score(state: TaskState, target: Target) -> Score:
        index, instance = lookup[str(state.sample_id)]
        output = state.output
        text = output.completion if output is not None and output.choices else None
        if text is None:
            error = (output.error if output is not None else None) or "no answer"
            prediction = Prediction(instance_id=instance.instance_id, failure=f"{API_FAILURE}: {error}")
        else:
            prediction = module.parse(text, [instance])[0]
        record: dict[str, Any] = {
            "prediction": prediction.value,
            "failure": prediction.failure,
            "normalised": prediction.normalised,
        }
        if generative:
            if judge and prediction.ok:
                verdict = await _judge_verdict(judge, module, instance, prediction, rubric_used)
                record["judge"] = verdict.model_dump() if verdict is not None else None
            if bertscore:
                record["bertscore"] = await _bertscore(bertscore_model, module.bertscore_pairs(instance, prediction))
        per_instance = score_records(module, [instance], {instance.instance_id: record}, config)[0]
        verdict_reason = (record.get("judge") or {}).get("reason") or (record.get("judge") or {}).get("error")
        return Score(
            value=_value(per_instance),
            answer=text,
            explanation=prediction.failure or verdict_reason,
            metadata={
                SCORE_KEY: {
                    "task": module.name,
                    "index": index,
                    "epoch": getattr(state, "epoch", 1),
                    "instance_id": instance.instance_id,
                    "scenario": instance.scenario,
                    "score": _plain(dict(per_instance)),
                    "gold": _plain(instance.gold),
                    **_plain(record),
                }
            },
        )

    return score


# ---------------------------------------------------------------------------------------------------------------
# Tasks


def _rescue_task(
    name: str,
    *,
    data: str,
    limit: int | None,
    limit_per_scenario: int | None,
    mode: str,
    context_size: int | None,
    judge: str | None = None,
    bertscore: bool = True,
    bertscore_model: str = PACKAGED_MODEL,
    protocol: str = "paper",
    rubric: str = "likert",
) -> Task:
    module = get_task(name)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if context_size is not None and context_size < -1:
        raise ValueError(f"context_size must be >= -1 (-1 = every earlier row), got {context_size}")
    for label, number in (("limit", limit), ("limit_per_scenario", limit_per_scenario)):
        if number is not None and number < 0:
            raise ValueError(f"{label} must be >= 0, got {number}")
    if rubric not in judging.RUBRICS:
        raise ValueError(f"unknown rubric {rubric!r}; choose from {', '.join(judging.RUBRICS)}")
    data = _resolve_data(str(data))
    dataset = _dataset(data)
    chosen = limit_instances(_instances(module.name, data, protocol), limit, limit_per_scenario)
    if not chosen:
        raise ValueError(f"nothing to evaluate: 0 instances of {module.name} in {len(dataset)} sample(s) of {data}")
    generative = bool(getattr(module, "generative", False))
    if generative and bertscore:
        _bertscorer(bertscore_model).resolve()  # BERTScoreUnavailable now, not after every answer was paid for

    samples = {s.sample_id: s for s in dataset}
    options = PromptOptions(mode=mode, context_size=context_size)  # type: ignore[arg-type]
    inspect_samples = [
        Sample(
            id=instance.instance_id,
            input=_chat(module.render([instance], samples, options)),
            target="",  # the gold stays with the scorer
            metadata={
                "task": module.name,
                "scenario": instance.scenario,
                "sample_id": instance.sample_id,
                "row": instance.row + 1,
            },
        )
        for instance in chosen
    ]
    headline = HEADLINE[module.name] if judge or not generative else HEADLINE_WITHOUT_JUDGE[module.name]
    return Task(
        dataset=MemoryDataset(inspect_samples, name=f"rescue-{module.name}"),
        solver=generate(),
        scorer=rescue_scorer(
            task=module.name,
            data=data,
            protocol=protocol,
            judge=judge if generative else None,
            rubric=rubric,
            bertscore=bertscore,
            bertscore_model=bertscore_model,
        ),
        config=GenerateConfig(temperature=0.0, max_tokens=MAX_TOKENS),
        metrics=[couple(module.name), family(module.name), both(module.name)],
        score_on_error=True,  # a failed model call is scored wrong (api_error), as ours, not dropped
        headline_metric=HeadlineMetric(metric=f"both/{headline}"),
        metadata={
            "rescue_task": module.name,
            "title": module.title,
            "data": data,
            "mode": mode,
            "context_size": context_size,
            "judge": (judge or "not run") if generative else None,
            "bertscore": bertscore if generative else None,
        },
    )


@task
def rescue_itp(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
) -> Task:
    """ITP - intervention timing prediction (should the therapist speak next?): precision, recall, F1, ..."""
    return _rescue_task(
        "itp", data=data, limit=limit, limit_per_scenario=limit_per_scenario, mode=mode, context_size=context_size
    )


@task
def rescue_rpp(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
    protocol: Literal["paper", "unified"] = "paper",
) -> Task:
    """RPP - relation pattern prediction: accuracy (= R@1), R@2/3, MRR, macro F1."""
    return _rescue_task(
        "rpp",
        data=data,
        limit=limit,
        limit_per_scenario=limit_per_scenario,
        mode=mode,
        context_size=context_size,
        protocol=protocol,
    )


@task
def rescue_stp(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
) -> Task:
    """STP - support target prediction: R@1, R@2/3, MRR."""
    return _rescue_task(
        "stp", data=data, limit=limit, limit_per_scenario=limit_per_scenario, mode=mode, context_size=context_size
    )


@task
def rescue_ssp(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
) -> Task:
    """SSP - support strategy prediction: R@1, R@2/3, MRR, macro F1."""
    return _rescue_task(
        "ssp", data=data, limit=limit, limit_per_scenario=limit_per_scenario, mode=mode, context_size=context_size
    )


@task
def rescue_er(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
    judge: str | None = None,
    bertscore: bool = True,
    bertscore_model: str = PACKAGED_MODEL,
) -> Task:
    """ER - emotion recognition: S_ER and S_emo (need ``judge``: a model, or "grader" for the grader model
    role), S_int, BERTScore (``bertscore``), intensity MAE."""
    return _rescue_task(
        "er",
        data=data,
        limit=limit,
        limit_per_scenario=limit_per_scenario,
        mode=mode,
        context_size=context_size,
        judge=judge,
        bertscore=bertscore,
        bertscore_model=bertscore_model,
    )


@task
def rescue_vp(
    data: str = "demo",
    limit: int | None = None,
    limit_per_scenario: int | None = None,
    mode: Mode = "dialogue",
    context_size: int | None = None,
    judge: str | None = None,
    rubric: Rubric = "likert",
    bertscore: bool = True,
    bertscore_model: str = PACKAGED_MODEL,
) -> Task:
    """VP - viewpoint prediction: judge score (needs ``judge``: a model, or "grader" for the grader model role;
    ``rubric`` likert 1-5 or authors 0-6), BERTScore (``bertscore``), target match."""
    return _rescue_task(
        "vp",
        data=data,
        limit=limit,
        limit_per_scenario=limit_per_scenario,
        mode=mode,
        context_size=context_size,
        judge=judge,
        rubric=rubric,
        bertscore=bertscore,
        bertscore_model=bertscore_model,
    )


# ``inspect eval rescue/rescue_rpp``: the package's ``inspect_ai`` entry point is named ``rescue`` and loads this
# module, so each task is registered a second time as ``rescue/<task>`` (inspect looks a ``package/name`` up under
# that full name). The decorated names above serve ``inspect eval bridges/inspect_tasks.py@rescue_rpp`` and
# ``inspect list tasks``. (Inspect namespaces a module of an installed, non-editable package by its top-level
# package, ``bridges/...``; the entry point serves the editable install and a source checkout.)
ENTRY_POINT = "rescue"
TASKS = (rescue_itp, rescue_rpp, rescue_stp, rescue_ssp, rescue_er, rescue_vp)
for _function in TASKS:
    task(name=f"{ENTRY_POINT}/{_function.__name__}")(_function.__wrapped__)
del _function
