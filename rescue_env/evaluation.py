"""Roll a policy through ``Rescue-v0`` and report how it decided and what it earned, per scenario and pooled.

``evaluate_policy`` plays every conversation once by default (in dataset order) and returns a ``PolicyReport``:

- timing: precision, recall and F1 of ``intervene`` (the yes class, as the ITP task scores it) and accuracy, over
  every decision point;
- target: exact match and mean Jaccard of A against A*, on the steps where z = z* = 1 and A* is known (the
  steps where the env scores the target);
- strategy: accuracy of a against a*, on the steps where z = z* = 1 and a* is known;
- returns: the mean episode return under the env's reward, its mean discounted return, and the mean episode
  return under every preset (``info["episode"]["returns_by_preset"]``, same lambda, kappa, gamma).

Runs are deterministic given ``seed``: the env is reset with it once, and the policy is re-seeded with it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from benchmarks.metrics import binary_metrics
from rescue_env.data.schema import SCENARIOS
from rescue_env.env import RescueEnv
from rescue_env.reward import PRESETS, RewardConfig

SCOPES: tuple[str, ...] = (*SCENARIOS, "all")


class TimingMetrics(BaseModel):
    precision: float
    recall: float
    f1: float
    accuracy: float
    tp: int
    fp: int
    tn: int
    fn: int


class ScopeReport(BaseModel):
    """One scope (a scenario, or ``all`` pooled over steps and episodes). Means are None without data."""

    episodes: int
    steps: int
    timing: TimingMetrics | None
    target_steps: int
    target_exact: float | None
    target_jaccard: float | None
    strategy_steps: int
    strategy_accuracy: float | None
    invalid_steps: int
    mean_return: float | None
    mean_discounted_return: float | None
    returns_by_preset: dict[str, float | None]


class PolicyReport(BaseModel):
    policy: str
    data: str
    sha256: str
    reward: str
    reward_config: dict[str, Any]
    seed: int
    episodes: int
    scopes: dict[str, ScopeReport]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.model_dump(), indent=indent)


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def _scope(steps: list[dict[str, Any]], episodes: list[dict[str, Any]]) -> ScopeReport:
    timing = None
    if steps:
        m = binary_metrics([s["gold"] for s in steps], [s["chosen"] for s in steps])
        timing = TimingMetrics(
            precision=m["precision"],
            recall=m["recall"],
            f1=m["f1"],
            accuracy=m["accuracy"],
            **{k: int(m[k]) for k in ("tp", "fp", "tn", "fn")},
        )
    targets = [s for s in steps if s["jaccard"] is not None]
    chosen_strategies = [s["strategy"] for s in steps if s["strategy"] is not None]
    return ScopeReport(
        episodes=len(episodes),
        steps=len(steps),
        timing=timing,
        target_steps=len(targets),
        target_exact=_mean([float(s["exact"]) for s in targets]),
        target_jaccard=_mean([s["jaccard"] for s in targets]),
        strategy_steps=len(chosen_strategies),
        strategy_accuracy=_mean(chosen_strategies),
        invalid_steps=sum(bool(s["invalid"]) for s in steps),
        mean_return=_mean([e["return"] for e in episodes]),
        mean_discounted_return=_mean([e["discounted_return"] for e in episodes]),
        returns_by_preset={p: _mean([e["returns_by_preset"][p] for e in episodes]) for p in PRESETS},
    )


def _reward_name(config: RewardConfig) -> str:
    constants = {k: getattr(config, k) for k in ("lam", "kappa", "gamma", "max_age", "utility")}
    for name in PRESETS:
        if RewardConfig.preset(name, **constants) == config:
            return name
    return "custom"


def evaluate_policy(
    policy: Any,
    env_or_kwargs: RescueEnv | Mapping[str, Any] | None = None,
    episodes: int | None = None,
    seed: int = 0,
    on_step: Callable[[RescueEnv, dict[str, Any]], None] | None = None,
) -> PolicyReport:
    """Roll ``policy`` (a ``policies.Policy`` or a registry name) through an env (a ``RescueEnv``, possibly
    wrapped, or ``RescueEnv`` keyword arguments; ``sample_order`` defaults to sequential).

    ``episodes=None`` plays every conversation exactly once, in dataset order; ``episodes=N`` plays N: the
    conversations in order, cycling, when the env's ``sample_order`` is sequential, else N draws of the env's
    seeded ``np_random``. ``on_step(env, info)`` is called after every step (e.g. to render it).
    """
    if env_or_kwargs is None or isinstance(env_or_kwargs, Mapping):
        env = RescueEnv(**{"sample_order": "sequential", **dict(env_or_kwargs or {})})
    else:
        env = getattr(env_or_kwargs, "unwrapped", env_or_kwargs)
    if not isinstance(env, RescueEnv):
        raise TypeError(f"expected a RescueEnv or its keyword arguments, got {type(env_or_kwargs).__name__}")
    if isinstance(policy, str):
        from policies import make_policy

        policy = make_policy(policy, env, seed)
    if episodes is not None and episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")

    if episodes is None:
        order: list[str | None] = [s.sample_id for s in env.samples]
    elif env.sample_order == "sequential":
        order = [env.samples[i % len(env.samples)].sample_id for i in range(episodes)]
    else:
        order = [None] * episodes

    steps: list[dict[str, Any]] = []
    played: list[dict[str, Any]] = []
    for index, sample_id in enumerate(order):
        options = {"sample_id": sample_id} if sample_id is not None else None
        observation, info = env.reset(seed=seed if index == 0 else None, options=options)
        policy.reset(seed=seed if index == 0 else None)
        scenario = info["scenario"]
        terminated = truncated = False
        while not (terminated or truncated):
            action = policy.act(observation, env)
            observation, _, terminated, truncated, info = env.step(action)
            parts = info["components"]
            steps.append(
                {
                    "scenario": scenario,
                    "gold": info["gold"]["intervene"],
                    "chosen": info["chosen"]["intervene"],
                    "jaccard": parts["target"],
                    "exact": parts["target"] is not None
                    and set(info["chosen"]["target"]) == set(info["gold"]["target"]),
                    "strategy": parts["strategy"],
                    "invalid": info["invalid"],
                }
            )
            if on_step is not None:
                on_step(env, info)
        played.append({"scenario": scenario, **info["episode"]})

    scopes = {
        scope: _scope(
            [s for s in steps if scope in ("all", s["scenario"])],
            [e for e in played if scope in ("all", e["scenario"])],
        )
        for scope in SCOPES
    }
    return PolicyReport(
        policy=getattr(policy, "name", type(policy).__name__),
        data=env.dataset.source,
        sha256=env.dataset.sha256,
        reward=_reward_name(env.reward_config),
        reward_config=env.reward_config.model_dump(),
        seed=seed,
        episodes=len(played),
        scopes=scopes,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_report(report: PolicyReport) -> str:
    """The report as a plain-text table: one row per metric, one column per scope (couple, family, all)."""
    scopes = [report.scopes[s] for s in SCOPES]

    def timing(key: str) -> list[str]:
        return [_pct(getattr(s.timing, key)) if s.timing else "-" for s in scopes]

    rows = [
        ["episodes", *(str(s.episodes) for s in scopes)],
        ["decision points", *(str(s.steps) for s in scopes)],
        ["timing precision %", *timing("precision")],
        ["timing recall %", *timing("recall")],
        ["timing F1 %", *timing("f1")],
        ["timing accuracy %", *timing("accuracy")],
        ["target steps", *(str(s.target_steps) for s in scopes)],
        ["target exact match %", *(_pct(s.target_exact) for s in scopes)],
        ["target mean Jaccard", *(_num(s.target_jaccard) for s in scopes)],
        ["strategy steps", *(str(s.strategy_steps) for s in scopes)],
        ["strategy accuracy %", *(_pct(s.strategy_accuracy) for s in scopes)],
        ["steps with invalid bits", *(str(s.invalid_steps) for s in scopes)],
        [f"mean return ({report.reward})", *(_num(s.mean_return) for s in scopes)],
        ["mean discounted return", *(_num(s.mean_discounted_return) for s in scopes)],
        *([f"mean return [{p}]", *(_num(s.returns_by_preset[p]) for s in scopes)] for p in PRESETS),
    ]
    config = report.reward_config
    title = (
        f"policy {report.policy} on {report.data} ({report.episodes} episodes, seed {report.seed}); reward "
        f"{report.reward}: lam={config['lam']:g}, kappa={config['kappa']:g}, gamma={config['gamma']:g}"
    )
    return title + "\n" + table(["metric", *SCOPES], rows)
