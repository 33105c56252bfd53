"""Policy rollouts through ``Rescue-v0``, ``Rescue-v1`` and the closed loop ``RescueSim-v0``: ``evaluate_policy`` (in
process, returns a report) and the resumable run behind ``rescue-bench rollout`` (``Rollout``), for built-in and
trained policies and for LLM therapists; in ``RescueSim-v0`` the participants may be LLM personas
(``participants="llm"``, ``rescue_env.envs.sim_multiparty``), whose transcripts go to ``transcripts/``.

A run directory mirrors ``rescue-bench evaluate``'s:

- ``config.json``: command, settings (``RolloutConfig``), package versions, data sha256, seed, the split (its
  config, groups and sample ids per side);
- ``trajectories.jsonl``: one line per step (``step_record``): sample id, row, the action chosen, the gold, every
  reward component, the model's raw answer, rationale and failure kind, a prompt hash (never the prompt text);
- ``results.json`` / ``.csv`` / ``.md``: the metrics per scenario and pooled with 95 % bootstrap intervals over
  episodes, and the failure counts (``benchmarks.rollout_results``);
- ``run.json``: wall time, episodes played and resumed, calls, cache hits, retries, tokens, cost.

**Resuming.** An episode's steps are appended in one write when it ends, so a run killed at any point loses only
the episodes in flight. Re-running the same command replays only the episodes that are not on disk, or whose
record holds an API failure (their successful calls come from the response cache); finished episodes make no
call. Results depend only on the stored steps, in plan order: a killed-and-resumed run writes the same
``results.json`` as an uninterrupted one. A different setting in the same directory is refused.

**Concurrency.** Decisions inside one episode are sequential (each observation follows from the last action);
episodes run concurrently, at most ``max_connections`` at a time, longest first (so that the last episode to
start is a short one). Every policy and episode is seeded from the run's seed and the sample id, so the order
in which episodes finish never changes a result.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.client import EnvVarName
from agents.therapist import Decision, LLMPolicy, few_shot_examples
from benchmarks.rollout_results import PolicyReport, build_report, format_report, report_csv, report_markdown
from benchmarks.runs import ModelRun, Progress, RunOptions, atomic_write, check_same_settings, write_config
from rescue_env.data import Dataset, Sample, load_dataset
from rescue_env.data.loading import read_sample_ids
from rescue_env.data.splits import Split, SplitConfig, describe, split_samples, stratified_subset
from rescue_env.dynamics.fitting import outcome_model_for
from rescue_env.dynamics.simulation import fit_session_rates
from rescue_env.envs.replay import RescueEnv
from rescue_env.envs.replay_v1 import RescueEnvV1
from rescue_env.envs.sim import RescueSimEnv
from rescue_env.envs.sim_v1 import RescueSimEnvV1
from rescue_env.rendering import MODES, Mode
from rescue_env.reward import PRESETS, Preset, RewardConfig

__all__ = [
    "ENV_IDS",
    "NothingToEvaluate",
    "Rollout",
    "RolloutConfig",
    "TrajectoryStore",
    "episode_seed",
    "evaluate_policy",
    "format_results",
    "report_of",
    "step_record",
]

ENV_IDS = ("Rescue-v0", "Rescue-v1", "RescueSim-v0", "RescueSim-v1")
"""Environments a rollout plays (sequential ``Dict`` observations that the LLM policy reads)."""
ENV_CLASSES: dict[str, type] = {
    "Rescue-v0": RescueEnv,
    "Rescue-v1": RescueEnvV1,
    "RescueSim-v0": RescueSimEnv,
    "RescueSim-v1": RescueSimEnvV1,
}
CLOSED_LOOP = frozenset({"RescueSim-v0", "RescueSim-v1"})
"""Envs whose state follows the actions: no gold, no presets, the opening instead of a context window."""
PARTICIPANTS = ("replay", "llm")
TRAJECTORIES = "trajectories.jsonl"
TRANSCRIPTS = "transcripts"
"""With ``--participants llm``: one ``<sample id>.jsonl`` per episode (``/`` written ``__``), the simulated
transcript (``RescueSimMultiPartyEnv.transcript``)."""


class NothingToEvaluate(ValueError):
    """No episode left after the data, ``--sample-ids``, ``--split`` and ``--episodes`` were applied."""


def episode_seed(seed: int, key: str) -> int:
    """The seed of one episode: a function of the run's seed and the episode (never of the order of play)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "little")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def step_record(info: Mapping[str, Any], reward: float, decision: Decision | None, done: bool) -> dict[str, Any]:
    """One line of ``trajectories.jsonl`` from the env's step ``info`` and the policy's decision."""
    record: dict[str, Any] = {
        "sample_id": info["sample_id"],
        "scenario": info["scenario"],
        "step": info["decision"] if "decision" in info else info["step"],
        "row": info.get("row"),  # the replays' row; the closed loop has none
        "chosen": info["chosen"],
        "gold": info.get("gold"),
        "components": info.get("components"),
        "scored": info.get("scored"),
        "reward": float(reward),
        "invalid": list(info["invalid"]),
        "raw": None,
        "failure": None,
        "error": None,
        "normalised": False,
        "rationale": None,
        "prompt_hash": None,
        "cached": False,
        "terminated": bool(done),
        "episode_end": info.get("episode"),
    }
    if "speaker" in info:  # the closed loop: who spoke next and the simulated state after the step
        record.update(speaker=info["speaker"], state=info["state"])
    if decision is not None:
        record.update(
            raw=decision.raw,
            failure=decision.failure,
            error=decision.detail,
            normalised=decision.normalised,
            rationale=decision.rationale,
            prompt_hash=decision.prompt_hash,
            cached=bool(decision.usage.get("cached", False)),
        )
    return _jsonable(record)


def _reward_name(config: RewardConfig, version: int = 0) -> str:
    constants = {k: getattr(config, k) for k in ("lam", "kappa", "gamma", "max_age", "utility")}
    for name in PRESETS:
        if RewardConfig.preset(name, version=version, **constants) == config:
            return name
    return "custom"


def _unwrapped_rescue_env(env: Any) -> RescueEnv | RescueSimEnv:
    inner = getattr(env, "unwrapped", env)
    if not isinstance(inner, RescueEnv | RescueSimEnv):
        raise TypeError(
            f"expected a RescueEnv, a RescueSimEnv or RescueEnv keyword arguments, got {type(env).__name__}"
        )
    return inner


def reward_of(env: RescueEnv | RescueSimEnv) -> tuple[str, dict[str, Any]]:
    """The reward's name and constants, as reports print them (the sim's is Eq. 14 with its lambda, kappa, gamma)."""
    if isinstance(env, RescueSimEnvV1):
        # Eq. 14 plus the behaviour prior and the optional uncertainty penalty (RescueSimEnvV1's docstring)
        constants = {"lam": env.lam, "kappa": env.kappa, "gamma": env.gamma, "beta": env.beta, "penalty": env.penalty}
        return "eq14+prior", constants
    if isinstance(env, RescueSimEnv):
        return "eq14", {"lam": env.lam, "kappa": env.kappa, "gamma": env.gamma}
    return _reward_name(env.reward_config, env.version), env.reward_config.model_dump()


# ----------------------------------------------------------------------------------------------------------------
# in process


def evaluate_policy(
    policy: Any,
    env_or_kwargs: RescueEnv | Mapping[str, Any] | None = None,
    episodes: int | None = None,
    seed: int = 0,
    on_step: Callable[[RescueEnv, dict[str, Any]], None] | None = None,
    bootstrap: int = 0,
) -> PolicyReport:
    """Roll ``policy`` (a ``policies.Policy`` or a registry name) through an env (a ``RescueEnv``, possibly
    wrapped, or ``RescueEnv`` keyword arguments; ``sample_order`` defaults to sequential) and report.

    ``episodes=None`` plays every conversation exactly once, in dataset order; ``episodes=N`` plays N: the
    conversations in order, cycling, when the env's ``sample_order`` is sequential, else N draws of the env's
    seeded ``np_random``. The policy is re-seeded at every episode with ``episode_seed(seed, sample id)``.
    ``on_step(env, info)`` is called after every step (e.g. to render it).
    """
    if env_or_kwargs is None or isinstance(env_or_kwargs, Mapping):
        env = RescueEnv(**{"sample_order": "sequential", **dict(env_or_kwargs or {})})
    else:
        env = _unwrapped_rescue_env(env_or_kwargs)
    env.info_level = "full"  # step_record reads every step's details (gold, chosen, components, state)
    if isinstance(policy, str):
        from policies import make_policy

        policy = make_policy(policy, env, seed)
    if episodes is not None and episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if episodes is None:
        order: list[str | None] = [s.sample_id for s in env.samples]
    elif getattr(env, "sample_order", "random") == "sequential":
        order = [env.samples[i % len(env.samples)].sample_id for i in range(episodes)]
    else:
        order = [None] * episodes

    played: list[list[dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for index, sample_id in enumerate(order):
        options = {"sample_id": sample_id} if sample_id is not None else None
        observation, info = env.reset(seed=seed if index == 0 else None, options=options)
        repeat = seen.get(info["sample_id"], 0)
        seen[info["sample_id"]] = repeat + 1
        policy.reset(seed=episode_seed(seed, info["sample_id"] + (f"#{repeat}" if repeat else "")))
        steps: list[dict[str, Any]] = []
        done = False
        while not done:
            action = policy.act(observation, env)
            observation, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            steps.append(step_record(info, reward, getattr(policy, "last", None), done))
            if on_step is not None:
                on_step(env, info)
        played.append(steps)
    reward, reward_config = reward_of(env)
    return build_report(
        played,
        policy=getattr(policy, "name", type(policy).__name__),
        data=env.dataset.source,
        sha256=env.dataset.sha256,
        reward=reward,
        reward_config=reward_config,
        seed=seed,
        bootstrap=bootstrap,
    )


# ----------------------------------------------------------------------------------------------------------------
# the run directory


class RolloutConfig(BaseModel):
    """Everything that determines a rollout's trajectories (``config.json``; a resume must match it)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    data: str = "demo"
    sample_ids: str | None = None
    split: Split = "all"
    split_seed: int = 0
    test_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    episodes: int | None = Field(default=None, ge=1)
    env_id: str = "Rescue-v0"
    reward: Preset = "combined"
    mode: Mode = "dialogue"
    context_size: int = 8
    policy: str | None = None
    model: str | None = None
    api_base: str | None = None
    api_key_env: EnvVarName | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # NaN fails both bounds: a NaN run could never resume
    max_tokens: int | None = Field(default=512, gt=0)
    few_shot: int = Field(default=0, ge=0)
    history: bool = False
    participants: str = "replay"
    seed: int = 0
    bootstrap: int = Field(default=1000, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> RolloutConfig:
        if (self.policy is None) == (self.model is None):
            raise ValueError("give either --policy NAME or --model MODEL (an LLM therapist), not both or neither")
        if self.env_id not in ENV_IDS:
            raise ValueError(f"unknown env {self.env_id!r}; rollouts play {', '.join(ENV_IDS)}")
        if self.participants not in PARTICIPANTS:
            raise ValueError(f"--participants must be one of {', '.join(PARTICIPANTS)}, got {self.participants!r}")
        if self.env_id in CLOSED_LOOP:
            defaults = RolloutConfig.model_fields
            if self.reward != defaults["reward"].default:
                raise ValueError(
                    f"--reward sets the replays' preset; {self.env_id} rewards Eq. 14 (lambda 1, gamma 0.99)"
                )
            if self.context_size != defaults["context_size"].default:
                raise ValueError(f"--context-size sets the replays' window; {self.env_id} shows its whole opening")
        if self.participants == "llm" and (self.env_id != "RescueSim-v0" or self.model is None):
            raise ValueError(
                "--participants llm plays the participants as LLM personas in RescueSim-v0 with the therapist's "
                "model: give --env RescueSim-v0 and --model"
            )
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}")
        if self.model is None and (self.few_shot or self.history):
            raise ValueError("--few-shot and --history are options of the LLM therapist (--model)")
        if self.few_shot and self.split == "all":
            raise ValueError(
                "--few-shot takes its examples from conversations outside the evaluated split: "
                "give --split test (or train)"
            )
        return self

    @property
    def agent(self) -> str:
        return self.policy if self.policy is not None else f"llm:{self.model}"

    def split_config(self) -> SplitConfig:
        return SplitConfig(split=self.split, seed=self.split_seed, test_fraction=self.test_fraction)

    def result_keys(self) -> dict[str, Any]:
        """The settings a resumed run must share with the stored one (the bootstrap only re-reads results)."""
        return self.model_dump(exclude={"bootstrap"})


def subset(dataset: Dataset, samples: Sequence[Sample]) -> Dataset:
    """``dataset`` restricted to ``samples`` (same source, hash and load report)."""
    return Dataset(list(samples), dataset.source, dataset.sha256, dataset.report)


class TrajectoryStore:
    """``trajectories.jsonl`` as an append-only log of whole episodes (the last complete one per sample wins)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / TRAJECTORIES
        self.episodes: dict[str, list[dict[str, Any]]] = {}
        if not self.path.exists():
            return
        current: dict[str, list[dict[str, Any]]] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that episode is played again
            key = record["sample_id"]
            if record["step"] == 0:
                current[key] = []
            block = current.get(key)
            if block is None or len(block) != record["step"]:
                current.pop(key, None)  # a broken block
                continue
            block.append(record)
            if record["terminated"]:
                self.episodes[key] = current.pop(key)

    def finished(self, sample_id: str) -> bool:
        """On disk, whole, and without an API failure (an episode with one is played again on resume)."""
        steps = self.episodes.get(sample_id)
        return steps is not None and not any(s["failure"] == "api_error" for s in steps)

    def write(self, steps: Sequence[dict[str, Any]]) -> None:
        if not steps:
            return
        with self.path.open("a", encoding="utf-8") as out:
            out.write("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in steps))
            out.flush()
        self.episodes[steps[0]["sample_id"]] = list(steps)

    def compact(self, order: Sequence[str]) -> None:
        """Rewrite the log with one episode per sample, in plan order (atomic)."""
        temporary = self.path.with_suffix(".jsonl.tmp")
        with temporary.open("w", encoding="utf-8") as out:
            for key in order:
                for step in self.episodes.get(key, ()):
                    out.write(json.dumps(step, ensure_ascii=False) + "\n")
        os.replace(temporary, self.path)


class Rollout(ModelRun):
    """One ``rescue-bench rollout`` run. ``options`` say how it calls its model (``benchmarks.runs.RunOptions``);
    ``client`` overrides the model client (tests, benchmarks); ``on_step(env, info)`` sees every step played."""

    def __init__(
        self,
        config: RolloutConfig,
        output: str | Path,
        *,
        dataset: Dataset | None = None,
        options: RunOptions | None = None,
        client: Any = None,
        on_step: Callable[[RescueEnv, dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__(output, options)
        self.config = config
        self.on_step = on_step
        self.dataset = dataset or load_dataset(config.data)
        self._client = client
        self._dynamics = None
        self._rates = None
        self._sim_v1: dict[str, Any] | None = None
        self.persona_failures: Counter[str] = Counter()
        self.env = self._make_env(self.dataset)
        self.samples, self.outside = self._select()
        self.planned = 0  # decisions planned in this invocation (set by ``arun``)
        self._store: TrajectoryStore | None = None

    # ----- what to play -----------------------------------------------------------------------------------

    def _make_env(self, dataset: Dataset, render: bool = False) -> RescueEnv | RescueSimEnv:
        c = self.config
        if c.env_id == "RescueSim-v1":
            return self._make_sim_v1(dataset, render)
        if c.env_id in ("Rescue-v1", "RescueSim-v0") and self._dynamics is None:
            # F (and the sim's session rates) are fitted once, on the train side of this run's grouped split of
            # the whole data, whatever subset of conversations an env plays: evaluating on the test side never
            # sees its own transitions.
            self._dynamics = outcome_model_for(self.dataset, "train", seed=c.split_seed, test_fraction=c.test_fraction)
            train = split_samples(self.dataset.samples, c.split_config().model_copy(update={"split": "train"}))
            self._rates = fit_session_rates(train)
        if c.env_id == "RescueSim-v0":
            return RescueSimEnv(
                dataset,
                starts="all",
                dynamics=self._dynamics,
                rates=self._rates,
                mode=c.mode,
                render_mode="ansi" if render else None,
                info_level="full",
            )
        kwargs: dict[str, Any] = {"dynamics": self._dynamics} if c.env_id == "Rescue-v1" else {}
        return ENV_CLASSES[c.env_id](
            dataset,
            reward=c.reward,
            mode=c.mode,
            context_size=c.context_size,
            sample_order="sequential",
            render_mode="ansi" if render else None,
            info_level="full",
            **kwargs,
        )

    def _make_sim_v1(self, dataset: Dataset, render: bool) -> RescueSimEnvV1:
        """``RescueSim-v1`` over ``dataset``, with the models, session rates and behaviour weight of the whole
        data's train side (fitted once per run: an env over one conversation would otherwise fix its beta on that
        conversation alone)."""
        c = self.config
        settings = {"mode": c.mode, "info_level": "full", "render_mode": "ansi" if render else None}
        if self._sim_v1 is None:
            full = RescueSimEnvV1(
                self.dataset, starts="all", split_seed=c.split_seed, test_fraction=c.test_fraction, **settings
            )
            parts = {"dynamics": full.outcome_model, "behaviour": full.behaviour, "rates": full.rates}
            self._sim_v1 = {**parts, "beta": full.beta}
            if dataset is self.dataset and not render:
                return full
        return RescueSimEnvV1(
            dataset, starts="all", split_seed=c.split_seed, test_fraction=c.test_fraction, **self._sim_v1, **settings
        )

    def _steps(self, sample: Sample) -> int:
        """The decisions an episode of ``sample`` takes (at most, for the closed loop: it may end calm)."""
        if isinstance(self.env, RescueSimEnv):
            return len(self.env.episode(sample).rows)
        return len(self.env.decision_rows(sample))

    def _select(self) -> tuple[list[Sample], list[Sample]]:
        """The conversations to play (in dataset order) and the ones outside the evaluated split."""
        c = self.config
        playable = list(self.env.samples)
        if c.sample_ids is not None:
            wanted = set(read_sample_ids(c.sample_ids))
            playable = [s for s in playable if s.sample_id in wanted]
        # The split is computed on every conversation of the data, so --sample-ids never moves a group.
        evaluated_ids = {s.sample_id for s in split_samples(self.dataset.samples, c.split_config())}
        chosen = [s for s in playable if s.sample_id in evaluated_ids]
        outside = [s for s in self.env.samples if s.sample_id not in evaluated_ids]
        if c.episodes is not None and chosen:
            chosen = stratified_subset(chosen, c.episodes, seed=c.seed)
        if not chosen:
            raise NothingToEvaluate(
                f"nothing to evaluate: no conversation with a decision point left in {self.dataset.source} after "
                f"--sample-ids/--split {c.split}"
            )
        return chosen, outside

    def finished_episodes(self) -> int:
        """Episodes of the plan that are on disk without an API failure."""
        store = self._store or TrajectoryStore(self.output)
        return sum(store.finished(s.sample_id) for s in self.samples)

    def planned_steps(self, samples: Sequence[Sample]) -> int:
        return sum(self._steps(s) for s in samples)

    # ----- model ------------------------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None and self.config.model is not None:
            from agents.client import LLMClient, ModelConfig

            c = self.config
            self._client = LLMClient(
                ModelConfig(
                    model=c.model,
                    api_base=c.api_base,
                    api_key_env=c.api_key_env,
                    temperature=c.temperature,
                    max_tokens=c.max_tokens,
                    timeout=self.timeout,
                ),
                max_connections=self.max_connections,
                workers=self.workers,
                max_retries=self.max_retries,
                backoff_base=self.backoff_base,
                cache_dir=self.cache_dir,
            )
        return self._client

    async def preflight(self) -> None:
        """Check the agent before anything is written: a built-in or trained policy is built (a model file that
        cannot be read fails here); a model's key variable is checked, then one probe request is sent
        (``agents.client.ModelSetupError`` on failure)."""
        if self.config.model is None:
            self._policy = self._builtin_policy()
            return
        from agents.client import check_model_config

        client = self.client()
        check_model_config(client.config)
        await client.probe()

    def _builtin_policy(self) -> Any:
        from policies import make_policy

        # A fitted policy (majority) learns from the conversations outside the evaluated split when there are
        # any, so that it never reads the gold of what it is scored on; with --split all it fits on everything.
        fit = self._make_env(subset(self.dataset, self.outside)) if self.outside else self.env
        return make_policy(self.config.policy, fit, self.config.seed)

    def _llm_policy(self, examples: Mapping[str, Any]) -> LLMPolicy:
        return LLMPolicy(self.client(), examples=examples, history=self.config.history)

    # ----- directory --------------------------------------------------------------------------------------

    def _prepare_directory(self) -> None:
        write_config(
            self.output,
            self.command,
            self.config,
            self.dataset,
            self.config.seed,
            split=describe(self.dataset.samples, self.config.split_config()),
            episodes=[s.sample_id for s in self.samples],
        )

    # ----- playing ----------------------------------------------------------------------------------------

    async def _play(self, sample: Sample, policy: Any) -> list[dict[str, Any]]:
        if self.config.participants == "llm":
            return await self._play_with_personas(sample, policy)
        # An env of its own per episode (episodes run concurrently), over this one conversation: cheap to build.
        env = self._make_env(subset(self.dataset, [sample]), render=self.on_step is not None)
        seed = episode_seed(self.config.seed, sample.sample_id)
        observation, _ = env.reset(seed=seed, options={"sample_id": sample.sample_id})
        policy.reset(seed=seed)
        steps: list[dict[str, Any]] = []
        done = False
        while not done:
            if isinstance(policy, LLMPolicy):
                decision: Decision | None = await policy.decide(observation)
                action = decision.action
            else:
                action, decision = policy.act(observation, env), None
            observation, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            steps.append(step_record(info, reward, decision, done))
            if self.on_step is not None:
                self.on_step(env, info)
            if decision is not None and decision.failure == "api_error":
                self.tally.add(decision.detail or "api_error")
                self.tally.check(self._limit)
        return steps

    async def _play_with_personas(self, sample: Sample, policy: LLMPolicy) -> list[dict[str, Any]]:
        """An episode of ``RescueSim-v0``'s multi-party view whose participants are LLM personas (the therapist's
        model, through the same client); the transcript goes to ``transcripts/<sample id>.jsonl``."""
        from agents.persona import PersonaParticipant
        from rescue_env.envs.sim_multiparty import THERAPIST, RescueSimMultiPartyEnv

        personas = PersonaParticipant(self.client())
        env = RescueSimMultiPartyEnv(
            participant_policy=personas,
            data=subset(self.dataset, [sample]),
            starts="all",
            dynamics=self._dynamics,
            rates=self._rates,
            mode=self.config.mode,
            render_mode="ansi" if self.on_step is not None else None,
        )
        seed = episode_seed(self.config.seed, sample.sample_id)
        observations, _ = env.reset(seed=seed, options={"sample_id": sample.sample_id})
        policy.reset(seed=seed)
        steps: list[dict[str, Any]] = []
        done, counted = False, 0
        while not done:
            decision = await policy.decide(observations[THERAPIST])
            observations, rewards, terminations, truncations, infos = await env.astep({THERAPIST: decision.action})
            info = infos[THERAPIST]
            done = terminations[THERAPIST] or truncations[THERAPIST]
            steps.append(step_record(info, rewards[THERAPIST], decision, done))
            if self.on_step is not None:
                self.on_step(env, info)
            persona_errors = personas.usage.failures.get("api_error", 0)
            for failed, detail in (
                (decision.failure == "api_error", decision.detail),
                (persona_errors > counted, "persona: api_error"),
            ):
                if failed:
                    self.tally.add(detail or "api_error")
                    self.tally.check(self._limit)
            counted = persona_errors
        self.persona_failures.update(personas.usage.failures)
        transcripts = self.output / TRANSCRIPTS
        transcripts.mkdir(exist_ok=True)
        records = [{"sample_id": sample.sample_id, **record} for record in env.transcript]
        lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
        atomic_write(transcripts / (sample.sample_id.replace("/", "__") + ".jsonl"), lines)
        return steps

    def run(self) -> dict[str, Any]:
        own = self._client is None
        if self.config.model is not None:
            self.client().start_workers()  # worker processes (``--workers``) import litellm meanwhile
        try:
            return asyncio.run(self.arun())
        finally:
            if own and self._client is not None:
                self._client.close()  # a client passed in is the caller's to close

    async def arun(self) -> dict[str, Any]:
        check_same_settings(self.output, self.config, self.dataset, what="rollout")
        store = self._store = TrajectoryStore(self.output)
        pending = [s for s in self.samples if not store.finished(s.sample_id)]
        if pending or self.config.model is None:  # a finished run re-reads its results without calling the model
            await self.preflight()
        self._prepare_directory()
        self.planned = self.planned_steps(pending)
        self._limit = self.budget.limit(self.planned)
        started = time.perf_counter()
        bar = Progress(
            len(self.samples),
            self.progress_enabled,
            unit="episode",
            initial=len(self.samples) - len(pending),
            usage=self.config.model is not None,
        )
        try:
            if self.config.model is None:
                played_steps = await self._play_all(pending, lambda: self._policy, store, bar)
            else:
                examples = {}
                if self.config.few_shot:
                    # Gold decisions of other conversations, read off the replay (the closed loop has none).
                    outside_env = RescueEnv(subset(self.dataset, self.outside), mode=self.config.mode)
                    examples = few_shot_examples(outside_env, self.config.few_shot, seed=self.config.seed)
                # Longest first: the episodes that start last are the short ones, so the run ends near the ideal.
                longest_first = sorted(pending, key=lambda s: -self._steps(s))
                played_steps = await self._play_all(longest_first, lambda: self._llm_policy(examples), store, bar)
        finally:
            bar.close()
        order = [s.sample_id for s in self.samples]
        store.compact(order)
        results = self._results(store, order)
        run_info = {
            "wall_seconds": round(time.perf_counter() - started, 3),
            "episodes_planned": len(self.samples),
            "episodes_played": len(pending),
            "episodes_resumed": len(self.samples) - len(pending),
            "steps_played": played_steps,
            "usage": None if self.config.model is None else self.client().usage.model_dump(),
            "failed_calls": dict(self.tally.counts),
            "persona_failures": dict(self.persona_failures),
        }
        self._write(results, run_info)
        return results

    async def _play_all(
        self, pending: Sequence[Sample], new_policy: Callable[[], Any], store: TrajectoryStore, bar: Progress
    ) -> int:
        """Play ``pending`` in that order (at most ``max_connections`` episodes at once) and store each episode as
        it ends; the number of steps played. A built-in policy never awaits, so its episodes simply run one after
        the other (one policy object serves them all: each episode re-seeds it)."""
        slots = asyncio.Semaphore(self.max_connections)
        played = 0
        shown = {"tokens": 0, "cost": 0.0}

        async def one(sample: Sample) -> None:
            nonlocal played
            async with slots:
                steps = await self._play(sample, new_policy())
            store.write(steps)
            played += len(steps)
            usage = self._client.usage if self._client is not None else None
            tokens = usage.prompt_tokens + usage.completion_tokens if usage else 0
            cost = usage.cost_usd if usage else 0.0
            bar.update(1, sum(s["failure"] is not None for s in steps), tokens - shown["tokens"], cost - shown["cost"])
            shown.update(tokens=tokens, cost=cost)

        tasks = [asyncio.create_task(one(s)) for s in pending]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return played

    # ----- results ----------------------------------------------------------------------------------------

    def _results(self, store: TrajectoryStore, order: Sequence[str]) -> dict[str, Any]:
        episodes = [store.episodes[k] for k in order if k in store.episodes]
        reward, reward_config = reward_of(self.env)
        report = build_report(
            episodes,
            policy=self.config.agent,
            data=self.dataset.source,
            sha256=self.dataset.sha256,
            reward=reward if isinstance(self.env, RescueSimEnv) else self.config.reward,
            reward_config=reward_config,
            seed=self.config.seed,
            bootstrap=self.config.bootstrap,
        )
        return {
            "format": "rescue-env-rollout/1",
            "config": self.config.model_dump(),
            "split": self.config.split_config().model_dump(),
            "episode_ids": list(order),
            **report.model_dump(),
        }

    def _write(self, results: Mapping[str, Any], run_info: Mapping[str, Any]) -> None:
        report = report_of(results)
        atomic_write(self.output / "results.json", json.dumps(results, indent=2, sort_keys=True))
        atomic_write(self.output / "results.csv", report_csv(report))
        atomic_write(self.output / "results.md", report_markdown(report, self.config.model_dump()))
        atomic_write(self.output / "run.json", json.dumps(run_info, indent=2, sort_keys=True))


def report_of(results: Mapping[str, Any]) -> PolicyReport:
    """The ``PolicyReport`` inside a rollout's ``results.json`` (which adds the config and the split to it)."""
    return PolicyReport.model_validate({k: v for k, v in results.items() if k in PolicyReport.model_fields})


def format_results(results: Mapping[str, Any]) -> str:
    """The console table of a rollout's ``results.json``."""
    return format_report(report_of(results))
