"""The verifiers bridge (issue 25 item 2): the six RESCUE-Bench tasks and the LLM therapist's envs as
`verifiers <https://github.com/PrimeIntellect-ai/verifiers>`_ environments, so that a verifiers-compatible
trainer or evaluator (``vf-eval``, its GRPO trainers, prime-rl of the same generation) can run them::

    from bridges.verifiers_env import load_environment

    itp = load_environment(task="itp")                              # a SingleTurnEnv, one instance per row
    therapist = load_environment(task="therapist", env="RescueSim-v0")  # a MultiTurnEnv, one episode per row

``verifiers.load_environment("bridges.verifiers_env", task="itp")`` finds the same function (run from the
repository root: ``bridges`` is not a package of the wheel).

**Tasks** (``itp``, ``rpp``, ``stp``, ``ssp``, ``er``, ``vp``): each row is one instance, rendered by the task's
own ``render`` as a batch of one (``rescue-bench evaluate --batch-size 1``); the row's ``answer`` is empty and its
``info`` names the instance, so no gold reaches the dataset (the gold stays in this process, looked up by
instance id). The rubric parses the completion with the task's ``parse`` and scores it with
``benchmarks.results.score_records`` (``task.score`` with the runner's extras: BERTScore for ER and VP when
``bertscore``; no judge), a failed answer scored wrong as everywhere else. Its reward is one number per instance
(``TASK_REWARDS``), its metrics the per-instance parts; the state column ``rescue`` keeps the whole per-instance
score, and ``env.rescue.summary(outputs)`` aggregates those with ``task.summary`` per scope (couple, family,
all), the numbers of ``rescue-bench evaluate``'s ``results.json``.

**Therapist** (``env`` = ``Rescue-v0``, ``Rescue-v1``, ``RescueSim-v0`` or ``RescueSim-v1``): each row is one
conversation, played as ``rescue-bench rollout`` plays it (the same env construction, split, selection and
episode seed ``episode_seed(seed, sample id)``). The prompt is ``agents.therapist.therapist_messages`` of the
first observation; each assistant turn is parsed by ``agents.therapist.parse_decision`` (an unusable answer is
the keep-listening fallback, its failure recorded) and stepped; the env's reply is the therapist prompt of the
next observation (its user message; the system message stays the first one). A rollout that stops before the
episode ends (a model error, a turn or token cap) is played out with the fallback, as a rollout records an
answer that never came (``api_error``). The reward is the episode return, the metrics the episode summary's
numbers, each reward component's sum (replays) and the failed / invalid steps; ``env.rescue.report(outputs)``
is ``rescue-bench rollout``'s report of the same step records.

**Versions.** The bridge needs verifiers' classic API (``SingleTurnEnv``, ``MultiTurnEnv``, ``Rubric``,
``vf.stop`` / ``vf.cleanup``): verifiers >= 0.1.10, < 0.4 (0.3.x serves it from ``verifiers.legacy``). verifiers
0.4 removed that stack; only its ``v1`` taskset/harness stack is left, whose agents run as ``uv``-launched chat
programs, which this bridge does not target (``import_verifiers`` says so).

**The ``agents`` name.** Every verifiers release with the classic API depends on ``openai-agents``, whose import
package is a top-level ``agents``, the name of this project's ``agents`` package; verifiers imports
``agents.function_schema`` when it loads. ``import_verifiers`` therefore imports verifiers with ``openai-agents``
standing in as ``agents`` and then puts this project's modules back (the tool-schema helper that verifiers bound
keeps working; nothing here uses verifiers' tool environments).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from agents.messages import prompt_hash
from agents.therapist import FewShotExample, few_shot_examples, parse_decision, therapist_messages
from benchmarks.base import Instance, Prediction, PromptOptions
from benchmarks.registry import TASK_NAMES, get_task
from benchmarks.results import SCOPES, score_records
from benchmarks.rollout import ENV_IDS as ROLLOUT_ENV_IDS
from benchmarks.rollout import Rollout, RolloutConfig, episode_seed, reward_of, step_record, subset
from benchmarks.rollout_results import PolicyReport, build_report
from benchmarks.runner import EvalConfig, Evaluation
from rescue_env.data.schema import SCENARIOS, Sample
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.sim import RescueSimEnv

__all__ = [
    "THERAPIST",
    "THERAPIST_ENV_IDS",
    "TASK_REWARDS",
    "TaskBridge",
    "TherapistBridge",
    "import_verifiers",
    "load_environment",
]

THERAPIST = "therapist"
THERAPIST_ENV_IDS: tuple[str, ...] = ROLLOUT_ENV_IDS
SESSION_OVER = "The session is over: no further decision is needed."
_UNUSED_OUTPUT = Path(".verifiers-bridge-unused")  # Evaluation / Rollout want a run directory; nothing is written


# ----------------------------------------------------------------------------------------------------------------
# importing verifiers


_VERIFIERS: ModuleType | None = None
_OPENAI_AGENTS: dict[str, ModuleType] = {}  # openai-agents' modules, kept alive after they leave sys.modules


def _ours(name: str) -> bool:
    return name == "agents" or name.startswith("agents.")


def import_verifiers() -> ModuleType:
    """``verifiers`` with its classic API loaded (see the module docstring for the ``agents`` name). ImportError
    when verifiers is missing or has no classic API (0.4 and later)."""
    global _VERIFIERS
    if _VERIFIERS is not None:
        return _VERIFIERS
    try:
        location = importlib.metadata.distribution("openai-agents").locate_file("agents/__init__.py")
    except importlib.metadata.PackageNotFoundError:
        location = None
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    if location is not None and Path(str(location)).is_file():
        for name in saved:
            del sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            "agents", str(location), submodule_search_locations=[str(Path(str(location)).parent)]
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["agents"] = module
    try:
        if location is not None and Path(str(location)).is_file():
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        try:
            import verifiers as vf
        except ImportError as exc:
            raise ImportError(f"the verifiers bridge needs verifiers>=0.1.10,<0.4 ({exc})") from exc
        try:
            for name in ("SingleTurnEnv", "MultiTurnEnv", "Rubric", "stop", "cleanup"):
                getattr(vf, name)
            importlib.import_module("verifiers.utils.tool_utils")  # the module that reads agents.function_schema
        except (AttributeError, ImportError) as exc:
            version = getattr(vf, "__version__", "?")
            raise ImportError(
                f"verifiers {version} has no SingleTurnEnv/MultiTurnEnv/Rubric (0.4 removed its classic stack); "
                f"the verifiers bridge needs verifiers>=0.1.10,<0.4 ({exc})"
            ) from exc
    finally:
        if location is not None and Path(str(location)).is_file():
            theirs = {name: module for name, module in sys.modules.items() if _ours(name)}
            for name in theirs:
                del sys.modules[name]
            _OPENAI_AGENTS.update(theirs)
            sys.modules.update(saved)
    _VERIFIERS = vf
    return vf


# ----------------------------------------------------------------------------------------------------------------
# small helpers


def _content(message: Any) -> str | None:
    """The text of a chat message (a dict or a message object; content parts joined)."""
    content = message.get("content") if isinstance(message, Mapping) else getattr(message, "content", None)
    if content is None or isinstance(content, str):
        return content
    parts = []
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) else getattr(part, "text", None)
        if text:
            parts.append(str(text))
    return "".join(parts)


def _last_text(completion: Any) -> str | None:
    """The model's answer in a completion (the last assistant message; a completion-mode string as it is)."""
    if completion is None or isinstance(completion, str):
        return completion
    messages = list(completion)
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)
        if role == "assistant":
            return _content(message)
    return None


def _info(state_or_info: Any) -> dict[str, Any]:
    """A row's ``info`` (a dict, or the JSON string some verifiers versions keep), from a state or the info."""
    import json

    try:
        info = state_or_info["info"]
    except (KeyError, TypeError):
        info = state_or_info
    return json.loads(info) if isinstance(info, str) else dict(info or {})


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None


def _named(name: str, function: Callable[..., float]) -> Callable[..., float]:
    function.__name__ = function.__qualname__ = name
    return function


def _rows_dataset(rows: list[dict[str, Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(rows)


# ----------------------------------------------------------------------------------------------------------------
# the six tasks


def _reciprocal_rank(score: Mapping[str, Any]) -> float:
    rank = score.get("rank") or 0
    return 1.0 / rank if rank else 0.0


def _correct(score: Mapping[str, Any]) -> float:
    return float(score["pred"] is not None and score["pred"] == score["gold"])


TASK_REWARDS: dict[str, tuple[str, Callable[[Mapping[str, Any]], float]]] = {
    "itp": ("correct", _correct),
    "rpp": ("reciprocal_rank", _reciprocal_rank),
    "stp": ("reciprocal_rank", _reciprocal_rank),
    "ssp": ("reciprocal_rank", _reciprocal_rank),
    "er": ("intensity_score", lambda s: (float(s["s_int"]) - 1.0) / 4.0),  # Eq. 5's 1-5 mapped to 0-1
    "vp": ("target_match", lambda s: float(s["target_match"])),
}
"""The scalar reward of one instance, per task: ITP 1 for the right decision; RPP, STP, SSP the reciprocal rank
of the gold in the top 3 (MRR's term; 0 for a miss or a failure); ER the intensity score (Eq. 5) on 0-1; VP the
target match. A failed answer gets the lowest value. (The judge's S_emo / VP judge are not run by the bridge.)"""

# Per-instance numbers reported as metrics (weight 0), per task: (metric name, score key or function).
_TASK_METRICS: dict[str, tuple[tuple[str, Callable[[Mapping[str, Any]], float | None]], ...]] = {
    "itp": (("failed", lambda s: float(s["pred"] is None)),),
    **{
        t: (
            ("recall_at_1", lambda s: float(s.get("rank") == 1)),
            ("failed", lambda s: float(s["failure"] is not None)),
        )
        for t in ("rpp", "stp", "ssp")
    },
    "er": (
        ("s_int", lambda s: _number(s["s_int"])),
        ("abs_error", lambda s: _number(s["abs_error"])),
        ("bertscore", lambda s: _number(s.get("bertscore"))),
        ("failed", lambda s: float(s["failed"])),
    ),
    "vp": (
        ("bertscore", lambda s: _number(s.get("bertscore"))),
        ("failed", lambda s: float(s["failed"])),
    ),
}

_TASK_OPTIONS = frozenset(
    {"data", "sample_ids", "mode", "context_size", "limit", "limit_per_scenario", "protocol", "bertscore",
     "bertscore_model", "bertscore_num_layers", "vp_rubric", "seed"}
)  # fmt: skip


class TaskBridge:
    """One task's instances, prompts and scoring, as ``rescue-bench evaluate --batch-size 1`` has them.

    ``options`` are ``EvalConfig``'s (``data``, ``sample_ids``, ``mode``, ``context_size``, ``limit``,
    ``limit_per_scenario``, ``protocol``, ``bertscore``, ``bertscore_model``, ``bertscore_num_layers``,
    ``vp_rubric``); a judge is not run (its metrics are None, as without ``--judge-model``)."""

    def __init__(self, task: str, **options: Any) -> None:
        unknown = sorted(set(options) - _TASK_OPTIONS)
        if unknown:
            raise TypeError(f"unknown option(s) for a task environment: {', '.join(unknown)}")
        self.task = get_task(task)
        self.name = self.task.name
        self.config = EvalConfig(tasks=[self.name], agent="heuristic", batch_size=1, **options)
        evaluation = Evaluation(self.config, _UNUSED_OUTPUT)
        self.samples: dict[str, Sample] = evaluation.samples
        self.source = evaluation.dataset.source
        self.instances: list[Instance] = evaluation.instances(self.task)
        self.by_id = {i.instance_id: i for i in self.instances}
        self.prompt_options = PromptOptions(mode=self.config.mode, context_size=self.config.context_size)
        self.uses_bertscore = bool(self.config.bertscore) and bool(getattr(self.task, "generative", False))
        self._bertscore: Any = None
        self._f1_seen: dict[tuple[str, str], float] = {}
        if self.uses_bertscore:
            from benchmarks.bertscore import BERTScore, BERTScoreConfig

            self._bertscore = BERTScore(
                BERTScoreConfig(model=self.config.bertscore_model, num_layers=self.config.bertscore_num_layers)
            )
            self._bertscore.resolve()  # BERTScoreUnavailable now rather than at the first reward

    def messages(self, instance: Instance) -> list[dict[str, str]]:
        """The prompt of one instance: the task's own ``render`` of a batch of one (item id "1")."""
        return self.task.render([instance], self.samples, self.prompt_options)

    def rows(self) -> list[dict[str, Any]]:
        """The dataset rows: prompt, an empty answer (the gold stays here), the instance's id and scenario (no
        ``task`` column: verifiers 0.3 reads one as a JSON task payload; the env's ``env_id`` names the task)."""
        return [
            {
                "prompt": self.messages(instance),
                "answer": "",
                "info": {"instance_id": instance.instance_id, "scenario": instance.scenario},
            }
            for instance in self.instances
        ]

    def score_text(self, instance_id: str, text: str | None) -> dict[str, Any]:
        """Parse and score one answer as the runner does (``task.parse`` of a batch of one, BERTScore, then
        ``score_records``): the per-instance record, JSON-ready."""
        from benchmarks.results import _jsonable

        instance = self.by_id[instance_id]
        prediction: Prediction = self.task.parse(text, [instance])[0]
        record: dict[str, Any] = {
            "prediction": prediction.value,
            "failure": prediction.failure,
            "normalised": prediction.normalised,
        }
        if self.uses_bertscore:
            record["bertscore"] = self._f1(self.task.bertscore_pairs(instance, prediction))
        score = score_records(self.task, [instance], {instance_id: record}, self.config)[0]
        return _jsonable(
            {
                "instance_id": instance_id,
                "scenario": instance.scenario,
                **record,
                "score": dict(score),
            }
        )

    def _f1(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """BERTScore F1 of each (candidate, reference) pair, the pairs not seen before in one call (a pair's F1
        does not depend on the others in the call, up to float rounding)."""
        todo = list(dict.fromkeys(p for p in pairs if p not in self._f1_seen))
        if todo:
            values = self._bertscore.score([c for c, _ in todo], [r for _, r in todo])
            self._f1_seen.update(zip(todo, (float(x) for x in values)))
        return [self._f1_seen[p] for p in pairs]

    def summary(self, records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """``task.summary`` per scope (``couple``, ``family``, ``all``) over per-instance records (rollout outputs
        or states with the ``rescue`` column, or the records themselves), in instance order; each scope also
        says how many instances it holds."""
        found: dict[str, Mapping[str, Any]] = {}
        for item in records:
            record = item.get("rescue", item) if isinstance(item, Mapping) else item
            found[record["instance_id"]] = record
        ordered = [found[i.instance_id] for i in self.instances if i.instance_id in found]
        out = {}
        for scope in SCOPES:
            chosen = [r["score"] for r in ordered if scope == "all" or r["scenario"] == scope]
            out[scope] = {"instances": len(chosen), "metrics": self.task.summary(chosen)}
        return out

    def rubric(self, vf: ModuleType) -> Any:
        key, reward = TASK_REWARDS[self.name]

        def scored(state: Any, completion: Any, info: Any) -> dict[str, Any]:
            record = state.get("rescue") if isinstance(state, Mapping) else None
            if record is None:
                instance_id = _info(info if info is not None else state)["instance_id"]
                record = self.score_text(instance_id, _last_text(completion))
                state["rescue"] = record
            return record["score"]

        def main(completion: Any, info: Any = None, state: Any = None, **kwargs: Any) -> float:
            return reward(scored(state, completion, info))

        funcs = [_named(f"{self.name}_{key}", main)]
        for metric, value in _TASK_METRICS[self.name]:
            if metric == "bertscore" and not self.uses_bertscore:
                continue

            def one(completion: Any, info: Any = None, state: Any = None, _value=value, **kwargs: Any) -> float:
                number = _value(scored(state, completion, info))
                return 0.0 if number is None else float(number)

            funcs.append(_named(f"{self.name}_{metric}", one))
        return vf.Rubric(funcs=funcs, weights=[1.0] + [0.0] * (len(funcs) - 1))

    def environment(self, **env_kwargs: Any) -> Any:
        vf = import_verifiers()
        environment = vf.SingleTurnEnv(
            dataset=_rows_dataset(self.rows()),
            rubric=self.rubric(vf),
            env_id=f"rescue-{self.name}",
            **env_kwargs,
        )
        environment.rescue = self
        return environment


# ----------------------------------------------------------------------------------------------------------------
# the therapist


class Episode:
    """One conversation played through the bridge: the env, the current observation and the step records
    (``benchmarks.rollout.step_record``, the lines of a rollout's ``trajectories.jsonl``)."""

    def __init__(self, env: Any, observation: Mapping[str, Any], examples: Sequence[FewShotExample], seed: int):
        self.env = env
        self.observation = observation
        self.examples = tuple(examples)
        self.seed = seed
        self.steps: list[dict[str, Any]] = []
        self.done = False

    def messages(self) -> list[dict[str, str]]:
        """What the LLM therapist would be asked now (``therapist_messages``, no history: the rollout default)."""
        return therapist_messages(self.observation, examples=self.examples)

    def answer(self, text: str | None) -> None:
        """Step the env with the decision ``text`` stands for (None = no answer: the fallback, ``api_error``)."""
        if self.done:
            raise RuntimeError("the episode is over")
        decision = replace(parse_decision(text, self.observation), prompt_hash=prompt_hash(self.messages()))
        self.observation, reward, terminated, truncated, info = self.env.step(decision.action)
        self.done = bool(terminated or truncated)
        self.steps.append(step_record(info, reward, decision, self.done))

    def finish(self) -> None:
        """Play the steps left with the fallback (a rollout that stopped before the end)."""
        while not self.done:
            self.answer(None)

    def summary(self) -> dict[str, Any]:
        """The episode's record for the rubric and the state column ``rescue`` (JSON-ready)."""
        end = self.steps[-1]["episode_end"] if self.steps else None
        metrics: dict[str, float] = {}
        for key, value in (end or {}).items():
            if isinstance(value, Mapping):
                for sub, number in value.items():
                    if _number(number) is not None:
                        metrics[f"{key}_{sub}" if key != "returns_by_preset" else f"return_{sub}"] = float(number)
            elif key != "return" and _number(value) is not None:
                metrics[key] = float(_number(value))
        components: dict[str, float] = {}
        for step in self.steps:
            for name, value in (step.get("components") or {}).items():
                components[f"component_{name}"] = components.get(f"component_{name}", 0.0) + (_number(value) or 0.0)
        metrics.update(components)
        metrics["failed_steps"] = float(sum(s["failure"] is not None for s in self.steps))
        metrics["invalid_steps"] = float(sum(bool(s["invalid"]) for s in self.steps))
        first = self.steps[0] if self.steps else {}
        return {
            "sample_id": first.get("sample_id"),
            "scenario": first.get("scenario"),
            "seed": self.seed,
            "return": float(end["return"]) if end else 0.0,
            "metrics": metrics,
            "steps": self.steps,
        }

    def close(self) -> None:
        self.env.close()


_THERAPIST_OPTIONS = frozenset(
    {"data", "sample_ids", "split", "split_seed", "test_fraction", "episodes", "reward", "mode", "context_size",
     "seed", "few_shot"}
)  # fmt: skip


class TherapistBridge:
    """The conversations ``rescue-bench rollout --env ENV`` would play, and how to play one of them.

    ``options`` are ``RolloutConfig``'s that set what is played (``data``, ``sample_ids``, ``split``,
    ``split_seed``, ``test_fraction``, ``episodes``, ``reward``, ``mode``, ``context_size``, ``seed``,
    ``few_shot``); the model's own settings (temperature, max tokens) are the trainer's sampling arguments, and
    ``history`` is the conversation itself."""

    def __init__(self, env_id: str = "Rescue-v0", **options: Any) -> None:
        unknown = sorted(set(options) - _THERAPIST_OPTIONS)
        if unknown:
            raise TypeError(f"unknown option(s) for a therapist environment: {', '.join(unknown)}")
        if env_id not in THERAPIST_ENV_IDS:
            raise ValueError(f"unknown env {env_id!r}; the therapist plays {', '.join(THERAPIST_ENV_IDS)}")
        self.env_id = env_id
        # A rollout's config, its env construction and its selection of conversations.
        self.config = RolloutConfig(env_id=env_id, model="verifiers-bridge", **options)
        self.rollout = Rollout(self.config, _UNUSED_OUTPUT)
        self.dataset = self.rollout.dataset
        self.samples: list[Sample] = list(self.rollout.samples)
        self.by_id = {s.sample_id: s for s in self.samples}
        self.examples: dict[str, list[FewShotExample]] = {}
        if self.config.few_shot:
            outside = RescueEnv(subset(self.dataset, self.rollout.outside), mode=self.config.mode)
            self.examples = few_shot_examples(outside, self.config.few_shot, seed=self.config.seed)

    def make_env(self, sample: Sample) -> Any:
        """A fresh env for one conversation, built as ``rescue-bench rollout`` builds it."""
        return self.rollout._make_env(subset(self.dataset, [sample]))

    def start(self, sample_id: str) -> Episode:
        """The episode of ``sample_id``, reset with the rollout's episode seed."""
        sample = self.by_id[sample_id]
        env = self.make_env(sample)
        seed = episode_seed(self.config.seed, sample_id)
        observation, _ = env.reset(seed=seed, options={"sample_id": sample_id})
        scenario = SCENARIOS[int(observation["scenario"])]
        return Episode(env, observation, self.examples.get(scenario, ()), seed)

    def rows(self) -> list[dict[str, Any]]:
        """One row per conversation: the first prompt, no answer, the conversation's id, scenario and seed."""
        out = []
        for sample in self.samples:
            episode = self.start(sample.sample_id)
            out.append(
                {
                    "prompt": episode.messages(),
                    "answer": "",
                    "info": {
                        "sample_id": sample.sample_id,
                        "scenario": SCENARIOS[int(episode.observation["scenario"])],
                        "env_id": self.env_id,
                        "seed": episode.seed,
                    },
                }
            )
            episode.close()
        return out

    def metric_names(self) -> list[str]:
        """The metrics an episode reports (read off one episode of the first conversation, played out with the
        fallback: every episode of an env reports the same keys)."""
        episode = self.start(self.samples[0].sample_id)
        episode.finish()
        names = list(episode.summary()["metrics"])
        episode.close()
        return names

    def episodes_of(self, items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The episode records of rollout outputs / states (the ``rescue`` column), in plan order."""
        found = {}
        for item in items:
            record = item.get("rescue", item)
            found[record["sample_id"]] = record
        return [found[s.sample_id] for s in self.samples if s.sample_id in found]

    def report(self, items: Iterable[Mapping[str, Any]], bootstrap: int = 0) -> PolicyReport:
        """``rescue-bench rollout``'s report (``benchmarks.rollout_results.build_report``) of the played episodes."""
        env = self.rollout.env
        reward, reward_config = reward_of(env)
        return build_report(
            [record["steps"] for record in self.episodes_of(items)],
            policy=f"verifiers:{self.env_id}",
            data=self.dataset.source,
            sha256=self.dataset.sha256,
            reward=reward if isinstance(env, RescueSimEnv) else self.config.reward,
            reward_config=reward_config,
            seed=self.config.seed,
            bootstrap=bootstrap,
        )

    def rubric(self, vf: ModuleType, environment: Any) -> Any:
        def record(state: Any) -> dict[str, Any]:
            if state.get("rescue") is None:
                environment.close_episode_now(state)
            return state["rescue"]

        def episode_return(state: Any = None, **kwargs: Any) -> float:
            return float(record(state)["return"])

        funcs = [episode_return]
        for name in self.metric_names():

            def one(state: Any = None, _name=name, **kwargs: Any) -> float:
                return float(record(state)["metrics"].get(_name, 0.0))

            funcs.append(_named(name, one))
        return vf.Rubric(funcs=funcs, weights=[1.0] + [0.0] * (len(funcs) - 1))

    def environment(self, **env_kwargs: Any) -> Any:
        vf = import_verifiers()
        environment = _therapist_env_class(vf)(
            bridge=self, dataset=_rows_dataset(self.rows()), env_id=f"rescue-therapist-{self.env_id}", **env_kwargs
        )
        environment.rescue = self
        return environment


_THERAPIST_ENV: type | None = None


def _therapist_env_class(vf: ModuleType) -> type:
    """The ``MultiTurnEnv`` subclass (built once verifiers is imported)."""
    global _THERAPIST_ENV
    if _THERAPIST_ENV is not None:
        return _THERAPIST_ENV

    class RescueTherapistEnv(vf.MultiTurnEnv):
        """A therapist episode as a conversation: the env's reply to each decision is the next therapist prompt."""

        def __init__(self, bridge: TherapistBridge, **kwargs: Any) -> None:
            self.bridge = bridge
            self.episodes: dict[str, Episode] = {}
            kwargs.setdefault("rubric", bridge.rubric(vf, self))
            super().__init__(**kwargs)

        async def setup_state(self, state: Any, **kwargs: Any) -> Any:
            self.episodes[state["trajectory_id"]] = self.bridge.start(_info(state)["sample_id"])
            state["rescue"] = None
            return state

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            episode = self.episodes[state["trajectory_id"]]
            episode.answer(_last_text(messages) or "")
            if episode.done:
                final = [{"role": "user", "content": SESSION_OVER}]
                state["final_env_response"] = final
                return final
            return [{"role": "user", "content": episode.messages()[-1]["content"]}]

        def close_episode_now(self, state: Any) -> None:
            """Finish the episode (the fallback for what is left), keep its record in ``state["rescue"]``."""
            episode = self.episodes.pop(state["trajectory_id"], None)
            if episode is None:
                return
            episode.finish()
            state["rescue"] = episode.summary()
            episode.close()

        @vf.cleanup
        async def close_episode(self, state: Any) -> None:
            self.close_episode_now(state)

    _THERAPIST_ENV = RescueTherapistEnv
    return RescueTherapistEnv


# ----------------------------------------------------------------------------------------------------------------
# the entry point


def load_environment(task: str | None = None, env: str | None = None, **kwargs: Any) -> Any:
    """A verifiers environment: ``task`` one of ``itp``, ``rpp``, ``stp``, ``ssp``, ``er``, ``vp`` (a
    ``SingleTurnEnv``; ``kwargs`` as ``TaskBridge``), or ``therapist`` (also implied by ``env``) with ``env`` one
    of ``THERAPIST_ENV_IDS`` (a ``MultiTurnEnv``, default ``Rescue-v0``; ``kwargs`` as ``TherapistBridge``).
    Keyword arguments of verifiers' ``Environment`` (``sampling_args``, ``max_turns``, ...) go in ``env_kwargs``."""
    env_kwargs = dict(kwargs.pop("env_kwargs", None) or {})
    if task is None and env is None:
        raise ValueError(f"give task= (one of {', '.join((*TASK_NAMES, THERAPIST))}) or env= (the therapist's)")
    name = THERAPIST if task is None else task.strip().lower()
    if name == THERAPIST:
        return TherapistBridge(env or "Rescue-v0", **kwargs).environment(**env_kwargs)
    if env is not None:
        raise ValueError(f"env= is the therapist's environment; task {task!r} takes none")
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join((*TASK_NAMES, THERAPIST))}")
    return TaskBridge(name, **kwargs).environment(**env_kwargs)
