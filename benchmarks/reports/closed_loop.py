r"""``rescue-bench dynamics validate``: is ``RescueSim-v1`` a closed loop worth training on (issue 24, item 5)?

Everything is held out: F, F1 and the therapist's behaviour model :math:`\pi_b` are fitted on the train side of the
project's grouped split (``RescueSim-v1``'s own fit, from the cache when there), and every number below is read
on the test side.

a. **Held-out fit per head** (the test side's transitions): F's distress head, F1's distress head and F's viewpoint
   head, each against persistence (the current value) and the training mean; mean squared error with a 95 %
   bootstrap interval over test groups (couples and families, ``rescue_env.dynamics.report.grouped_mean_ci``), and
   the paired gains (persistence - model, mean - model, F - F1) with theirs. ``rescue-bench dynamics report`` adds
   gradient boosting for F.
b. **F1's action terms**: for every column of every action block (F's strategy and recipient-kind main effects, each
   block that F1's selection kept): the n (training rows where the term is not zero) and the number of groups
   behind them, F1's coefficient, its sd over the ensemble members, F's coefficient, the block's shrinkage factor;
   and F1's forward-selection steps (the cross-validated error with each candidate block added).
c. **The privileged one-step optimum** (``best_group_action``: the expected reward of v1, group term plus
   :math:`\beta \log \pi_b`, maximised over keep listening and every single participant, pair and everyone with
   every valid strategy) played on the held-out starts: its action distribution per scenario over the categories
   ``listen`` and ``KIND x STRATEGY``, each share, and its entropy (bits) over strategies and over target kinds
   among its interventions. Target kinds are the behaviour model's (``last``: the last client speaker alone;
   ``everyone``; ``other``: one other participant; ``subset``: two or more, not everyone); an intervention without
   recipients supports no one and counts as ``listen``, as F and :math:`\pi_b` read it.
d. **A policy table** on ``RescueSim-v1(starts="test")``: every held-out start ``episodes`` times, the env seeds
   ``episode_seed(seed, "SAMPLE/k")`` the same for every policy (a stochastic policy draws from its own generator,
   seeded ``episode_seed(seed, "SAMPLE/k/policy")``, so that its draws never mirror the env's). Policies: never;
   every constant -- each strategy valid in a held-out scenario, to everyone (``always-everyone[s]``) and to the
   last speaker (``last-speaker[s]``), a strategy outside a scenario's taxonomy playing that scenario's first
   (``track``), as the env's masks make every policy do --; the content-blind rates (``content-blind[p]``: intervene
   with probability p, whatever is observed, on everyone, with the scenario's most frequent strategy among the
   recorded therapists' interventions of the *training* side: "how often" without "when"); the text heuristic and
   the perceived-state heuristic; the cloned therapist (``behaviour``, sampling :math:`\pi_b` from the observation);
   the trained models given; and, privileged, the recorded therapist (its actions played open loop) and the
   one-step optimum. Columns: ``info["episode"]``'s per-step return, per-step group term and mean
   :math:`\log \pi_b`, each a mean over starts (seeds averaged within a start) with a 95 % bootstrap interval
   over starts, and the paired difference to the **reference**: the best non-privileged policy by per-step return
   (same starts, same resamples).
e. **Each policy's action distribution against the therapist's**: the total-variation distance over the categories
   of (c), pooled over every step of every episode, to the recorded therapist at the same held-out decision
   points (each start's decision points once; a policy plays each of them ``episodes`` times, so both weigh the
   starts alike). Where a recorded intervention has no known recipients or no strategy of the scenario's
   taxonomy, the therapist's distribution is factorised: P(listen) from every decision point, the split of the
   interventions over ``KIND x STRATEGY`` from the fully labelled ones.
f. **Calibration** (the course of ``scripts/sim_calibration.py``, on v1 and with the episodes already played):
   the mean over participants of the latest distress per tenth of the conversation, observed on the held-out
   conversations and simulated under the recorded therapist's actions (and under never intervening), 95 %
   intervals over conversations; tolerance: a mean absolute gap of 0.05.
g. **Verdicts** for the issue's criteria: the optimum is not a constant (no category above ``CONSTANT_SHARE`` =
   60 % of its steps in either scenario, listen counted as one category); no constant policy within the paired
   95 % interval of the best trained policy (when one is given); the per-step return is not monotone in the
   content-blind rate; the share of never-intervene episodes that end before their horizon (0 by construction in
   v1: measured); the trained policies' TV against the best constant's.

:func:`closed_loop_validation` computes it (a ``Validation``), :func:`format_validation` prints it,
:func:`write_validation` writes ``results.json``, CSVs and figures. Errors are ``ValueError`` with one line.
"""

from __future__ import annotations

import json
import math
import time
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.metrics import mean_ci
from benchmarks.rollout import episode_seed
from benchmarks.rollout_results import table
from policies import AlwaysInterveneEveryone, AlwaysLastSpeaker, NeverIntervene, make_policy
from policies.reference import ContentBlindPolicy, GroupGreedyPolicy, RecordedTherapist
from rescue_env.data import Dataset
from rescue_env.data.domain import decision_rows, participants, scenario_of
from rescue_env.data.schema import SCENARIOS
from rescue_env.data.splits import SplitConfig, group_of, split_samples
from rescue_env.dynamics.behaviour import kind_sizes, recipient_kind
from rescue_env.dynamics.outcome import SupportAction, recorded_action, transitions
from rescue_env.dynamics.outcome_v1 import OutcomeModelV1, action_blocks, distress_transitions
from rescue_env.dynamics.report import grouped_mean_ci
from rescue_env.dynamics.state import snapshots
from rescue_env.taxonomy import ALL_STRATEGY_KEYS, strategies

__all__ = [
    "CONSTANT_SHARE",
    "RATES",
    "Validation",
    "action_category",
    "closed_loop_validation",
    "entropy_bits",
    "format_validation",
    "load_trained_sim",
    "payload",
    "shares",
    "total_variation",
    "write_validation",
]

FORMAT = "rescue-env/closed-loop-validation"
VERSION = 1
LISTEN = "listen"
RATES = (0.0, 0.25, 0.5, 0.75, 1.0)
CONSTANT_SHARE = 0.6
"""The optimum is called a constant when one category (listen, or one target kind x strategy) takes more than this
share of its steps in a scenario (issue 24)."""
CALIBRATION_BINS = 10
CALIBRATION_TOLERANCE = 0.05
METRICS = ("per_step_return", "per_step_group", "mean_log_pi_b")
OPTIMUM = "one-step-optimum"
PRIVILEGED = frozenset({"recorded", OPTIMUM})
SIM_PPO_FORMAT = "rescue-env/sim-maskable-ppo"
"""The sidecar of the models ``scripts/train_sim_ppo.py`` saves (``model.zip`` + ``model.json``)."""

Policy = Any  # policies.base.Policy: reset(seed), act(observation, env)
Step = tuple[str | None, str | None, int, int | None]
"""One decision: (target kind or None for listening, strategy key, participants, last client speaker)."""


# ----- distributions ----------------------------------------------------------------------------------------


def action_category(support: SupportAction, n: int, last_speaker: int | None) -> Step:
    """A decision as (target kind, strategy, n, last speaker); an intervention without recipients is listening."""
    if not support.intervene or not support.recipients:
        return (None, None, n, last_speaker)
    return (recipient_kind(support.recipients, n, last_speaker), support.strategy or "unknown", n, last_speaker)


def category(step: Step) -> str:
    kind, strategy = step[0], step[1]
    return LISTEN if kind is None else f"{kind} x {strategy}"


def shares(labels: Iterable[str]) -> dict[str, float]:
    """Each label's share, largest first (ties by name)."""
    counts = Counter(labels)
    total = sum(counts.values())
    if not total:
        return {}
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Half the L1 distance of two distributions over their labels (a label missing from one has share 0)."""
    # fsum over sorted labels: the same bits whatever the hash seed's set order
    return 0.5 * math.fsum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in sorted(set(p) | set(q)))


def entropy_bits(counts: Iterable[float]) -> float:
    """Shannon entropy in bits of counts or shares (zeros ignored; 0 for nothing)."""
    values = np.array([c for c in counts if c > 0], dtype=np.float64)
    if values.size == 0:
        return 0.0
    p = values / values.sum()
    return float(-(p * np.log2(p)).sum() + 0.0)


def _profile(steps: Sequence[Step], valid: int | None = None) -> dict[str, Any]:
    """Shares of the categories, the top one, and the entropies over strategies and target kinds among the
    interventions (with their uniform maxima: the scenario's strategies, the kinds the states offered)."""
    categories = shares(category(s) for s in steps)
    on = [s for s in steps if s[0] is not None]
    offered = {k for _, _, n, last in steps for k, size in kind_sizes(n, last).items() if size}
    top = next(iter(categories), None)
    return {
        "steps": len(steps),
        "interventions": len(on),
        "shares": categories,
        "top": top,
        "top_share": categories.get(top, 0.0) if top else 0.0,
        "entropy_strategy": entropy_bits(Counter(s[1] for s in on).values()),
        "entropy_strategy_max": math.log2(valid) if valid else None,
        "entropy_target": entropy_bits(Counter(s[0] for s in on).values()),
        "entropy_target_max": math.log2(len(offered)) if offered else 0.0,
        "strategies": shares(s[1] for s in on),
        "targets": shares(s[0] for s in on),
    }


def therapist_distribution(points: Sequence[tuple[SupportAction, int, int | None, frozenset[str]]]) -> dict[str, Any]:
    """The recorded therapist's distribution over the categories at ``points`` (action, n, last speaker, the
    scenario's strategy keys): P(listen) from every point, the interventions' split from the fully labelled ones
    (module docstring, e)."""
    listen = sum(not a.intervene for a, *_ in points)
    known = [
        category(action_category(a, n, last))
        for a, n, last, valid in points
        if a.intervene and a.recipients and a.strategy in valid
    ]
    total = len(points)
    interventions = total - listen
    out: dict[str, float] = {}
    if total:
        if listen:
            out[LISTEN] = listen / total
        if interventions:
            split = shares(known) if known else {"unknown": 1.0}
            out.update({k: v * interventions / total for k, v in split.items()})
    return {
        "shares": dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))),
        "decision_points": total,
        "interventions": interventions,
        "labelled_interventions": len(known),
    }


# ----- playing ----------------------------------------------------------------------------------------------


@dataclass
class Played:
    """One episode: ``info["episode"]`` with the start, the seed, whether it ended before its horizon, its
    decisions (``Step``) and the mean true distress before each step's action (the calibration's course)."""

    record: dict[str, Any]
    steps: list[Step]
    course: list[float]


def play(env: Any, policy: Policy, sample_id: str, seed: int, policy_seed: int) -> Played:
    base = env.unwrapped
    observation, info = env.reset(seed=seed, options={"sample_id": sample_id})
    policy.reset(policy_seed)
    n, horizon, scenario = len(info["participants"]), base.limit, info["scenario"]
    speakers: list[int | None] = []
    course: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        slot = int(observation["last_speaker"])
        speakers.append(slot if slot < n else None)
        course.append(float(base.state()["distress"].mean()))
        observation, _, terminated, truncated, info = env.step(policy.act(observation, env))
    steps = [action_category(s, n, last) for s, last in zip(base.history(), speakers)]
    episode = info["episode"]
    record = {
        "sample_id": sample_id,
        "scenario": scenario,
        "seed": seed,
        **{k: episode[k] for k in (*METRICS, "return", "length", "intervention_rate", "final_max_distress")},
        "horizon": horizon,
        "terminated": bool(terminated),
        "early_end": bool(terminated or episode["length"] < horizon),
    }
    return Played(record, steps, course)


# ----- the pieces -------------------------------------------------------------------------------------------


def head_fits(
    f1: OutcomeModelV1, train: Sequence[Any], test: Sequence[Any], groups: dict[str, str], n_boot: int, seed: int
) -> tuple[dict[str, Any], Any]:
    """(a): per head, the test side's MSE of the model, persistence and the training mean with their intervals and
    the paired gains; and F1's training rows (for (b))."""
    rng = np.random.default_rng(seed)
    base = f1.base
    d_train, g_train = transitions(train, groups, base.state, base.horizon)
    d_test, g_test = transitions(test, groups, base.state, base.horizon)
    rich_train = distress_transitions(train, groups, base.state, base.horizon).with_blocks(f1.blocks)
    rich_test = distress_transitions(test, groups, base.state, base.horizon).with_blocks(f1.blocks)
    heads = {
        "F distress": (base.distress, d_train, d_test),
        "F1 distress": (f1.distress, rich_train, rich_test),
        "F viewpoint": (base.viewpoint, g_train, g_test),
    }
    out: dict[str, Any] = {}
    errors: dict[str, np.ndarray] = {}
    for name, (head, fit, held) in heads.items():
        if held.y.size == 0:
            out[name] = {"n_test": 0, "groups": 0}
            continue
        predicted = {
            "model": np.clip(head.predict(held.X), 0, 1),
            "persistence": held.current,
            "training mean": np.full_like(held.y, fit.y.mean() if fit.y.size else 0.5),
        }
        squared = {k: (v - held.y) ** 2 for k, v in predicted.items()}
        errors[name] = squared["model"]
        out[name] = {
            "n_test": int(held.y.size),
            "groups": len(set(held.groups)),
            "n_train": int(fit.y.size),
            "alpha": head.alpha,
            "mse": {k: grouped_mean_ci(v, held.groups, rng, n_boot) for k, v in squared.items()},
            "gain_over_persistence": grouped_mean_ci(
                squared["persistence"] - squared["model"], held.groups, rng, n_boot
            ),
            "gain_over_mean": grouped_mean_ci(squared["training mean"] - squared["model"], held.groups, rng, n_boot),
        }
    same_rows = (
        d_test.y.size and np.array_equal(d_test.y, rich_test.y) and np.array_equal(d_test.current, rich_test.current)
    )
    out["F1 over F"] = (
        grouped_mean_ci(errors["F distress"] - errors["F1 distress"], d_test.groups, rng, n_boot) if same_rows else None
    )
    return out, rich_train


def action_terms(f1: OutcomeModelV1, rich_train: Any) -> dict[str, Any]:
    """(b): every action column of F1 with its support in the training rows, its coefficients and shrinkage."""
    X, labels = rich_train.X, np.asarray(rich_train.groups)
    features = f1.distress.features
    members = np.array([m.coef for m in f1.members]) if f1.members else None
    rows = []
    for block, columns in action_blocks(f1.blocks).items():
        for c in columns:
            nonzero = X[:, c] != 0
            rows.append(
                {
                    "block": block,
                    "term": features[c],
                    "n": int(nonzero.sum()),
                    "groups": len(set(labels[nonzero].tolist())),
                    "shrinkage": float(f1.shrinkage.get(block, 1.0)),
                    "coef_F1": float(f1.distress.coef[c]),
                    "coef_F1_member_sd": float(members[:, c].std()) if members is not None else None,
                    "coef_F": float(f1.base.distress.coef[c]) if c < len(f1.base.distress.coef) else None,
                }
            )
    return {
        "blocks": list(f1.blocks),
        "shrinkage": dict(f1.shrinkage),
        "selection": [step.model_dump(mode="json") for step in f1.selection],
        "training_rows": int(X.shape[0]),
        "training_groups": len(set(labels.tolist())),
        "members": len(f1.members),
        "terms": rows,
    }


def most_frequent_strategies(train: Sequence[Any]) -> dict[str, str]:
    """Per scenario, the strategy of the scenario's taxonomy the recorded therapists chose most often at the
    training side's decision points (ties: the taxonomy order of ``ALL_STRATEGY_KEYS``)."""
    counts: dict[str, Counter[str]] = {s: Counter() for s in SCENARIOS}
    for sample in train:
        people = tuple(participants(sample))
        scenario = scenario_of(sample)
        if not people or scenario not in counts:
            continue
        valid = set(strategies(scenario).keys())
        for row in decision_rows(sample):
            action = recorded_action(sample, row + 1, people)
            if action.intervene and action.strategy in valid:
                counts[scenario][action.strategy] += 1
    return {s: min(c, key=lambda k: (-c[k], ALL_STRATEGY_KEYS.index(k))) for s, c in counts.items() if c}


def bin_means(values: Sequence[float], bins: int) -> np.ndarray:
    """The mean of ``values`` (one per step) within each of ``bins`` equal bins of relative position; NaN where no
    step falls (``scripts/sim_calibration.py``'s binning)."""
    values = np.asarray(values, dtype=float)
    index = np.minimum(bins - 1, (bins * np.arange(values.size)) // max(values.size, 1))
    sums = np.bincount(index, weights=values, minlength=bins)
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _interval(values: np.ndarray, resamples: int, seed: int) -> list[float]:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [float("nan")] * 3
    low, high = mean_ci(values, resamples=resamples, seed=seed) if resamples > 0 else (float("nan"),) * 2
    return [float(values.mean()), float(low), float(high)]


def calibration(
    observed: Sequence[np.ndarray], simulated: Mapping[str, Sequence[np.ndarray]], resamples: int, seed: int
) -> dict[str, Any]:
    """(f): per bin, each course's mean over conversations with its interval, and the gaps of the recorded
    actions' course to the observed one."""
    courses = {"observed": np.asarray(observed), **{k: np.asarray(v) for k, v in simulated.items()}}
    summary = {
        name: [_interval(column, resamples, seed) + [int(np.isfinite(column).sum())] for column in rows.T]
        for name, rows in courses.items()
    }
    gaps = [s[0] - o[0] for s, o in zip(summary["recorded"], summary["observed"])]
    inside = [o[1] <= s[0] <= o[2] for s, o in zip(summary["recorded"], summary["observed"])]
    with np.errstate(invalid="ignore"):
        mean_abs = float(np.nanmean(np.abs(gaps))) if np.isfinite(gaps).any() else float("nan")
        largest = float(np.nanmax(np.abs(gaps))) if np.isfinite(gaps).any() else float("nan")
    return {
        "bins": len(gaps),
        "courses": summary,
        "gaps": gaps,
        "mean_abs_gap": mean_abs,
        "largest_gap": largest,
        "tolerance": CALIBRATION_TOLERANCE,
        "within_tolerance": bool(mean_abs <= CALIBRATION_TOLERANCE),
        "bins_inside_observed_ci": int(sum(inside)),
    }


# ----- trained models ---------------------------------------------------------------------------------------


def load_trained_sim(path: str | Path) -> Policy:
    """A trained model as a policy of the closed loop: ``scripts/train_sim_ppo.py``'s ``model.zip`` with its
    ``model.json`` sidecar (``rescue-env/sim-maskable-ppo``), or a ``policies.sb3`` model (its own sidecar), both
    played by ``policies.sb3.SB3Policy`` (the flat sim features of training, the masks of the observation,
    deterministic). ``ValueError`` (one line) when it cannot be read."""
    from policies.sb3 import SB3Policy, model_path, sidecar_path

    zip_path, side = model_path(path), sidecar_path(path)
    if not zip_path.is_file():
        raise ValueError(f"--ppo {path}: no trained model at {zip_path}")
    if not zipfile.is_zipfile(zip_path):
        raise ValueError(f"--ppo {path}: {zip_path} is not a zip file (a saved stable-baselines3 model is one)")
    meta: dict[str, Any] = {}
    if side.is_file():
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--ppo {path}: cannot read its sidecar {side} ({' '.join(str(exc).split())})") from None
    name = f"ppo:{path}"
    if isinstance(meta, dict) and meta.get("format") == SIM_PPO_FORMAT:
        if meta.get("version") != 1:
            raise ValueError(f"--ppo {path}: {side} is a {SIM_PPO_FORMAT} sidecar of version {meta.get('version')!r}")
        try:
            from sb3_contrib import MaskablePPO

            model = MaskablePPO.load(zip_path, device="cpu")
        except ImportError:
            raise ValueError("--ppo needs sb3-contrib: pip install 'rescue-env[rl]'") from None
        except Exception as exc:  # noqa: BLE001 - SB3 raises anything on a damaged zip; one line for the user
            raise ValueError(
                f"--ppo {path}: cannot load it as a MaskablePPO model ({' '.join(str(exc).split())[:200]})"
            ) from None
        return SB3Policy(
            model, "ppo", meta.get("feature_kwargs"), meta.get("env_settings"), meta.get("training"), name=name
        )
    try:
        policy = SB3Policy.load(zip_path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--ppo {path}: {' '.join(str(exc).split())}") from None
    policy.name = name
    return policy


# ----- the whole validation ---------------------------------------------------------------------------------


@dataclass
class Validation:
    """What :func:`closed_loop_validation` found: ``summary`` (JSON-able: every section), the episode records
    (``episodes``, one per policy x start x seed) and the per-start values of the table (``per_start``)."""

    summary: dict[str, Any]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    per_start: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def _kind(name: str, trained: Iterable[str]) -> str:
    if name in PRIVILEGED:
        return "privileged"
    if name in trained:
        return "trained"
    if name == "never" or name.startswith(("always-everyone[", "last-speaker[")):
        return "constant"
    if name.startswith("content-blind["):
        return "content-blind"
    return "clone" if name == "behaviour" else "baseline"


def _rate_name(rate: float) -> str:
    return f"content-blind[{rate:g}]"


def closed_loop_validation(
    dataset: Dataset,
    *,
    seed: int = 0,
    test_fraction: float = 0.2,
    episodes: int = 3,
    bootstrap: int = 1000,
    beta: float | None = None,
    trained: Mapping[str, Policy] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Validation:
    """Sections (a)-(g) of the module docstring on ``dataset``'s grouped split (``seed``, ``test_fraction``);
    ``trained``: name -> a policy of the closed loop (``load_trained_sim``); ``progress`` gets a line per part."""
    from rescue_env.envs.sim_v1 import RescueSimEnvV1

    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    say = progress or (lambda line: None)
    trained = dict(trained or {})
    started = time.perf_counter()
    timing: dict[str, float] = {}
    split = SplitConfig(split="train", seed=seed, test_fraction=test_fraction)
    train = split_samples(dataset.samples, split)
    test = split_samples(dataset.samples, split.model_copy(update={"split": "test"}))
    if not train or not test:
        raise ValueError(f"{dataset.source}: the {'train' if not train else 'test'} side of the split is empty")
    groups = group_of(dataset.samples)

    say(f"building RescueSim-v1 on the held-out starts (F1 and pi_b fitted on {len(train)} train conversations)")
    clock = time.perf_counter()
    env = RescueSimEnvV1(dataset, starts="test", split_seed=seed, test_fraction=test_fraction, beta=beta)
    f1 = env.outcome_model
    timing["env"] = time.perf_counter() - clock
    for name, policy in trained.items():
        if hasattr(policy, "bind"):
            try:
                policy.bind(env)
            except ValueError as exc:
                raise ValueError(f"{name}: {' '.join(str(exc).split())}") from None

    say("(a) held-out fit per head, (b) F1's action terms")
    clock = time.perf_counter()
    heads, rich_train = head_fits(f1, train, test, groups, bootstrap, seed)
    terms = action_terms(f1, rich_train)
    timing["heads"] = time.perf_counter() - clock

    starts = [s.sample_id for s in env.samples]
    episodes_of = {s.sample_id: env.episode(s) for s in env.samples}
    scenarios = {sid: e.scenario for sid, e in episodes_of.items()}
    valid = sorted({i for e in episodes_of.values() for i in e.valid_strategies})
    frequent = most_frequent_strategies(train)
    frequent_index = {s: ALL_STRATEGY_KEYS.index(k) for s, k in frequent.items()}

    policies: dict[str, Policy] = {"never": NeverIntervene()}
    for index in valid:
        policies[f"always-everyone[{ALL_STRATEGY_KEYS[index]}]"] = AlwaysInterveneEveryone(index)
    for index in valid:
        policies[f"last-speaker[{ALL_STRATEGY_KEYS[index]}]"] = AlwaysLastSpeaker(index)
    for rate in RATES:
        policies[_rate_name(rate)] = ContentBlindPolicy(rate, frequent_index)
    skipped: dict[str, str] = {}
    for name in ("heuristic", "perceived", "behaviour"):
        try:
            policies[name] = make_policy(name, env, seed)
        except ValueError as exc:
            skipped[name] = " ".join(str(exc).split())
    policies.update(trained)
    policies["recorded"] = RecordedTherapist()
    policies[OPTIMUM] = GroupGreedyPolicy()

    played: dict[str, list[Played]] = {}
    clock = time.perf_counter()
    total = len(starts) * episodes
    for number, (name, policy) in enumerate(policies.items(), 1):
        tick = time.perf_counter()
        runs = []
        try:
            for sid in starts:
                for k in range(episodes):
                    key = f"{sid}/{k}"
                    runs.append(play(env, policy, sid, episode_seed(seed, key), episode_seed(seed, f"{key}/policy")))
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot play the sim is reported, not fatal
            if (
                name in trained
                or name in PRIVILEGED
                or name == "never"
                or name.startswith(("always-everyone[", "last-speaker[", "content-blind["))
            ):
                raise
            skipped[name] = f"does not play RescueSim-v1 ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
            say(f"  [{number}/{len(policies)}] {name}: skipped ({skipped[name]})")
            continue
        played[name] = runs
        say(f"  [{number}/{len(policies)}] {name}: {total} episodes in {time.perf_counter() - tick:.1f} s")
    timing["play"] = time.perf_counter() - clock

    # ----- (d) the table -----
    per_start: dict[str, dict[str, np.ndarray]] = {}
    for name, runs in played.items():
        values: dict[str, dict[str, list[float]]] = {}
        for run in runs:
            for key in (*METRICS, "intervention_rate"):
                values.setdefault(key, {}).setdefault(run.record["sample_id"], []).append(float(run.record[key]))
        per_start[name] = {key: np.array([np.mean(v[s]) for s in starts]) for key, v in values.items()}
    plain = [n for n in played if n not in PRIVILEGED]
    reference = max(plain, key=lambda n: per_start[n]["per_step_return"].mean())

    points = []
    for sid in starts:
        episode = episodes_of[sid]
        sample = env.dataset.get(sid)
        people = episode.participants
        keys = frozenset(ALL_STRATEGY_KEYS[i] for i in episode.valid_strategies)
        limit = len(episode.rows) if env.max_steps is None else min(len(episode.rows), env.max_steps)
        for row, action in list(zip(episode.rows, episode.recorded))[:limit]:
            speaker = sample.rows[row].primary_speaker.strip()
            points.append(
                (scenarios[sid], action, len(people), people.index(speaker) if speaker in people else None, keys)
            )
    therapist = {"all": therapist_distribution([p[1:] for p in points])}
    for scenario in SCENARIOS:
        chosen = [p[1:] for p in points if p[0] == scenario]
        if chosen:
            therapist[scenario] = therapist_distribution(chosen)

    distributions: dict[str, dict[str, dict[str, float]]] = {}
    tv: dict[str, dict[str, float]] = {}
    profiles: dict[str, dict[str, Any]] = {}
    valid_of = {scenario: len(strategies(scenario).keys()) for scenario in SCENARIOS}
    for name, runs in played.items():
        by_scope: dict[str, list[Step]] = {"all": []}
        for run in runs:
            by_scope["all"] += run.steps
            by_scope.setdefault(run.record["scenario"], []).extend(run.steps)
        distributions[name] = {scope: shares(category(s) for s in steps) for scope, steps in by_scope.items()}
        tv[name] = {
            scope: total_variation(distributions[name][scope], therapist[scope]["shares"])
            for scope in by_scope
            if scope in therapist
        }
        profiles[name] = {scope: _profile(steps, valid_of.get(scope)) for scope, steps in by_scope.items()}

    rows = []
    for name in played:
        row: dict[str, Any] = {"policy": name, "kind": _kind(name, trained), "privileged": name in PRIVILEGED}
        row["starts"], row["episodes"] = len(starts), len(played[name])
        for key in METRICS:
            row.update(zip((key, f"{key}_low", f"{key}_high"), _interval(per_start[name][key], bootstrap, seed)))
            diff = per_start[name][key] - per_start[reference][key]
            label = f"{key}_minus_reference"
            row.update(zip((label, f"{label}_low", f"{label}_high"), _interval(diff, bootstrap, seed)))
        row["intervention_rate"] = float(np.mean([r.record["intervention_rate"] for r in played[name]]))
        row["early_end_share"] = float(np.mean([r.record["early_end"] for r in played[name]]))
        row["tv_to_therapist"] = tv[name]["all"]
        for scenario in SCENARIOS:
            row[f"tv_to_therapist_{scenario}"] = tv[name].get(scenario)
        rows.append(row)
    by_name = {row["policy"]: row for row in rows}

    # ----- (c) the optimum -----
    optimum = {scope: p for scope, p in profiles.get(OPTIMUM, {}).items() if scope != "all"}

    # ----- (f) calibration -----
    observed, simulated = [], {"recorded": [], "never": []}
    for sid in starts:
        episode = episodes_of[sid]
        snaps = snapshots(env.dataset.get(sid), episode.participants, env.dynamics.state)
        limit = len(episode.rows) if env.max_steps is None else min(len(episode.rows), env.max_steps)
        observed.append(bin_means([snaps[r].distress_raw.mean() for r in episode.rows[:limit]], CALIBRATION_BINS))
        for name in simulated:
            courses = [bin_means(r.course, CALIBRATION_BINS) for r in played[name] if r.record["sample_id"] == sid]
            with warnings.catch_warnings():  # a short episode leaves bins empty: NaN, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                simulated[name].append(np.nanmean(courses, axis=0))
    calibrated = calibration(observed, simulated, bootstrap, seed)

    summary: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "data": {"source": dataset.source, "sha256": dataset.sha256, "samples": len(dataset)},
        "split": {
            "seed": seed,
            "test_fraction": test_fraction,
            "train_conversations": len(train),
            "test_conversations": len(test),
            "test_starts": len(starts),
            "test_decision_points": len(points),
        },
        "env": {
            "id": "RescueSim-v1",
            "starts": "test",
            "beta": env.beta,
            "beta_rule": beta is None,
            "penalty": env.penalty,
            "ensemble": env.ensemble,
            "episodes_per_start": episodes,
            "lam": env.lam,
            "kappa": env.kappa,
            "gamma": env.gamma,
            "f1_fitted_on": f1.fitted_on,
        },
        "bootstrap": bootstrap,
        "heads": heads,
        "terms": terms,
        "optimum": optimum,
        "policies": {
            "reference": reference,
            "rows": rows,
            "skipped": skipped,
            "content_blind_strategy": frequent,
        },
        "therapist": therapist,
        "distributions": distributions,
        "profiles": {name: p.get("all") for name, p in profiles.items()},
        "calibration": calibrated,
    }
    summary["verdicts"] = verdicts(summary, per_start, by_name, list(trained), bootstrap, seed)
    timing["total"] = time.perf_counter() - started
    summary["timing_seconds"] = {k: round(v, 2) for k, v in timing.items()}
    records = [{"policy": name, **run.record} for name, runs in played.items() for run in runs]
    return Validation(summary, records, {n: {k: v.tolist() for k, v in d.items()} for n, d in per_start.items()})


def verdicts(
    summary: Mapping[str, Any],
    per_start: Mapping[str, Mapping[str, np.ndarray]],
    by_name: Mapping[str, Mapping[str, Any]],
    trained: Sequence[str],
    bootstrap: int,
    seed: int,
) -> list[dict[str, Any]]:
    """(g): one entry per criterion: ``criterion``, ``passed`` (True, False, or None when it cannot be told) and the
    ``line`` that says it with its numbers."""
    out: list[dict[str, Any]] = []

    def add(criterion: str, passed: bool | None, line: str, **numbers: Any) -> None:
        out.append({"criterion": criterion, "passed": passed, "line": line, **numbers})

    # 1. the optimum is not a constant
    optimum = summary["optimum"]
    if optimum:
        tops = {s: (p["top"], p["top_share"]) for s, p in optimum.items()}
        passed = all(share <= CONSTANT_SHARE for _, share in tops.values())
        said = "; ".join(f"{s}: {top} {100 * share:.1f} %" for s, (top, share) in tops.items())
        acting = {}
        for scenario, p in optimum.items():
            on = {k: v for k, v in p["shares"].items() if k != LISTEN}
            if on:
                top = max(on, key=on.get)
                acting[scenario] = (top, on[top] / sum(on.values()))
        if acting:
            said += "; of its interventions: " + "; ".join(
                f"{s}: {top} {100 * share:.1f} %" for s, (top, share) in acting.items()
            )
        add(
            "optimum_not_constant",
            passed,
            f"the one-step optimum is not a constant (no category above {100 * CONSTANT_SHARE:.0f} % of its steps in "
            f"either scenario; listen counts as one category): {'yes' if passed else 'NO'} ({said})",
            tops={s: {"category": t, "share": v} for s, (t, v) in tops.items()},
        )
    else:
        add("optimum_not_constant", None, "the one-step optimum was not played")

    constants = [n for n, r in by_name.items() if r["kind"] == "constant"]
    constants += [n for n in (_rate_name(0.0), _rate_name(1.0)) if n in by_name]
    best_constant = max(constants, key=lambda n: by_name[n]["per_step_return"]) if constants else None

    # 2. no constant within the paired interval of the best trained policy
    trained = [n for n in trained if n in per_start]
    if trained and constants:
        best = max(trained, key=lambda n: by_name[n]["per_step_return"])
        close = []
        for name in constants:
            mean, low, _ = _interval(
                per_start[best]["per_step_return"] - per_start[name]["per_step_return"], bootstrap, seed
            )
            if not low > 0:
                close.append((name, mean, low))
        passed = not close
        shown = ", ".join(f"{n} ({m:+.4f}, low {lo:+.4f})" for n, m, lo in close[:6])
        add(
            "no_constant_near_trained",
            passed,
            f"no constant policy within the paired 95 % interval of the best trained policy ({best}): "
            f"{'yes' if passed else 'NO'}"
            + (
                f"; within: {shown}" + (" ..." if len(close) > 6 else "")
                if close
                else f" (all {len(constants)} below it)"
            ),
            best_trained=best,
            within=[c[0] for c in close],
        )
    else:
        add(
            "no_constant_near_trained",
            None,
            "no constant policy within the paired 95 % interval of the best trained policy: not tested (no trained "
            "policy given: --ppo PATH)",
        )

    # 3. return not monotone in the content-blind rate
    rates = [r for r in RATES if _rate_name(r) in by_name]
    if len(rates) >= 3:
        values = [by_name[_rate_name(r)]["per_step_return"] for r in rates]
        steps = np.diff(values)
        monotone = bool((steps >= 0).all() or (steps <= 0).all())
        best_rate = rates[int(np.argmax(values))]
        ends = [_rate_name(rates[0]), _rate_name(rates[-1])]
        better_end = max(ends, key=lambda n: by_name[n]["per_step_return"])
        diff = _interval(
            per_start[_rate_name(best_rate)]["per_step_return"] - per_start[better_end]["per_step_return"],
            bootstrap,
            seed,
        )
        said = ", ".join(f"{r:g}: {v:.4f}" for r, v in zip(rates, values))
        tail = (
            f"; best rate {best_rate:g}, {diff[0]:+.4f} [{diff[1]:+.4f}, {diff[2]:+.4f}] over the better end "
            f"({better_end})"
            if best_rate not in (rates[0], rates[-1])
            else f"; best at the end, rate {best_rate:g}"
        )
        # The steps against the overall trend, paired: a dip inside its interval is noise, not a shape.
        trend = np.sign(values[-1] - values[0])
        adjacent = {
            f"{a:g}->{b:g}": _interval(
                per_start[_rate_name(b)]["per_step_return"] - per_start[_rate_name(a)]["per_step_return"],
                bootstrap,
                seed,
            )
            for a, b in zip(rates, rates[1:])
        }
        against = {k: v for k, v in adjacent.items() if np.sign(v[0]) == -trend and v[0] != 0}
        if against and trend:
            tail += "; against the trend (paired): " + ", ".join(
                f"{k} {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for k, (m, lo, hi) in against.items()
            )
        add(
            "rate_not_monotone",
            not monotone,
            f"per-step return not monotone in the content-blind rate: {'yes' if not monotone else 'NO'} ({said}{tail})",
            values=dict(zip(map(str, rates), values)),
            best_rate=best_rate,
            interior_minus_better_end=diff if best_rate not in (rates[0], rates[-1]) else None,
            adjacent_differences=adjacent,
        )
    else:
        add("rate_not_monotone", None, "the content-blind rates were not played")

    # 4. never-intervene episodes that end early
    if "never" in by_name:
        share = by_name["never"]["early_end_share"]
        add(
            "never_ends_early",
            share == 0.0,
            f"never-intervene episodes that end before their horizon: {100 * share:.1f} % of "
            f"{by_name['never']['episodes']} (0 by construction in v1; RescueSim-v0: 31 % ended calm)",
            share=share,
        )

    # 5. trained policies' TV against the best constant's
    if trained and best_constant:
        base = by_name[best_constant]["tv_to_therapist"]
        parts, passed = [], True
        for name in trained:
            value = by_name[name]["tv_to_therapist"]
            passed &= value < base
            parts.append(f"{name} {value:.3f}")
        add(
            "trained_closer_to_therapist",
            passed,
            f"trained policies closer to the therapist's actions than the best constant ({best_constant}, TV "
            f"{base:.3f}): {'yes' if passed else 'NO'} ({', '.join(parts)})",
            best_constant=best_constant,
            best_constant_tv=base,
        )
    else:
        tv = (
            f" (the best constant, {best_constant}: TV {by_name[best_constant]['tv_to_therapist']:.3f})"
            if best_constant
            else ""
        )
        add(
            "trained_closer_to_therapist",
            None,
            f"trained policies' TV to the therapist against the best constant's: not tested (no --ppo){tv}",
        )
    return out


# ----- printing ---------------------------------------------------------------------------------------------


def _ci(values: Sequence[float] | None, digits: int = 4, sign: bool = False) -> str:
    if values is None:
        return "-"
    mean, low, high = values[:3]
    if not np.isfinite(mean):
        return "-"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    if not (np.isfinite(low) and np.isfinite(high)):
        return f.format(mean)
    return f"{f.format(mean)} [{f.format(low)}, {f.format(high)}]"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_validation(validation: Validation | Mapping[str, Any]) -> str:
    """The sections as plain-text tables and lines."""
    s = validation.summary if isinstance(validation, Validation) else validation
    data, split, env = s["data"], s["split"], s["env"]
    rule = "the env's rule" if env["beta_rule"] else "given"
    lines = [
        f"RescueSim-v1 validation on {data['source']} (sha256 {data['sha256'][:12]}): grouped split seed "
        f"{split['seed']}, test fraction {split['test_fraction']}: {split['train_conversations']} train / "
        f"{split['test_conversations']} held-out conversations ({split['test_starts']} starts, "
        f"{split['test_decision_points']} decision points); beta = {env['beta']:.4g} ({rule}); "
        f"{env['episodes_per_start']} episode(s) per start; 95 % intervals by {s['bootstrap']} bootstrap resamples.",
        "",
        "(a) Held-out fit per head (test side): mean squared error, 95 % CI over test groups; gains paired per row",
    ]
    header = ["head", "n test", "model", "persistence", "training mean", "gain over persistence", "gain over mean"]
    body = []
    for name in ("F distress", "F1 distress", "F viewpoint"):
        h = s["heads"][name]
        if not h.get("n_test"):
            body.append([name, "0", "-", "-", "-", "-", "-"])
            continue
        mse = h["mse"]
        body.append(
            [
                name,
                str(h["n_test"]),
                _ci(mse["model"]),
                _ci(mse["persistence"]),
                _ci(mse["training mean"]),
                _ci(h["gain_over_persistence"], sign=True),
                _ci(h["gain_over_mean"], sign=True),
            ]
        )
    lines += [table(header, body)]
    lines.append(f"F1's gain over F (distress, paired: MSE of F - MSE of F1): {_ci(s['heads']['F1 over F'], 5, True)}")

    terms = s["terms"]
    lines += [
        "",
        f"(b) F1's action terms: n = training rows where the term is not zero ({terms['training_rows']} rows, "
        f"{terms['training_groups']} groups); shrinkage = the block's factor (0 = dropped); coefficients on next "
        f"distress, sd over the {terms['members']} ensemble members",
    ]
    header = ["block", "term", "n", "groups", "shrinkage", "F1 coef", "sd members", "F coef"]
    body = [
        [
            t["block"],
            t["term"],
            str(t["n"]),
            str(t["groups"]),
            f"{t['shrinkage']:g}",
            f"{t['coef_F1']:+.4f}",
            "-" if t["coef_F1_member_sd"] is None else f"{t['coef_F1_member_sd']:.4f}",
            "-" if t["coef_F"] is None else f"{t['coef_F']:+.4f}",
        ]
        for t in terms["terms"]
    ]
    lines += [table(header, body), "F1's block selection (grouped 5-fold CV MSE of the distress head):"]
    for k, step in enumerate(terms["selection"], 1):
        tried = ", ".join(f"{b} {e:.5f}" for b, e in sorted(step["tried"].items(), key=lambda kv: kv[1]))
        kept = ", ".join(step["kept"]) or "F's features"
        lines.append(
            f"  round {k}: {kept}: {step['base_error']:.5f}; + {tried or 'nothing left'} -> "
            f"{'added ' + step['added'] if step['added'] else 'stop'}"
        )
    if not terms["selection"]:
        lines.append("  (blocks given, no selection recorded)")
    shrink = ", ".join(f"{b} {f:g}" for b, f in terms["shrinkage"].items())
    lines.append(f"kept blocks: {', '.join(terms['blocks']) or 'none'}; shrinkage factors: {shrink}")

    lines += ["", "(c) The privileged one-step optimum (best_group_action) on the held-out starts:"]
    header = [
        "scenario",
        "steps",
        "interventions",
        "top category",
        "top share %",
        "H strategies (max)",
        "H targets (max)",
    ]
    body = []
    for scenario, p in s["optimum"].items():
        body.append(
            [
                scenario,
                str(p["steps"]),
                str(p["interventions"]),
                str(p["top"]),
                _pct(p["top_share"]),
                f"{p['entropy_strategy']:.2f} ({p['entropy_strategy_max'] or 0:.2f})",
                f"{p['entropy_target']:.2f} ({p['entropy_target_max']:.2f})",
            ]
        )
    lines += [table(header, body) if body else "  (not played)"]
    for scenario, p in s["optimum"].items():
        lines.append(f"  {scenario}: " + ", ".join(f"{k} {100 * v:.1f} %" for k, v in p["shares"].items()))

    pol = s["policies"]
    ref = pol["reference"]
    lines += [
        "",
        f"(d) Policies on the held-out starts ({split['test_starts']} starts x {env['episodes_per_start']} seeds, the "
        f"same env seeds for every policy): means over starts, 95 % CI over starts; '- ref' is paired against the "
        f"reference {ref} (the best non-privileged policy by per-step return); TV = (e), the total-variation "
        "distance of its actions to the therapist's",
    ]
    header = ["policy", "kind", "per-step return", "- ref", "per-step group", "mean log pi_b", "interv. %", "TV"]
    body = []
    for r in pol["rows"]:
        label = r["policy"] + (" (priv.)" if r["privileged"] else "")
        body.append(
            [
                label,
                r["kind"],
                _ci([r["per_step_return"], r["per_step_return_low"], r["per_step_return_high"]]),
                "—"
                if r["policy"] == ref
                else _ci(
                    [
                        r["per_step_return_minus_reference"],
                        r["per_step_return_minus_reference_low"],
                        r["per_step_return_minus_reference_high"],
                    ],
                    sign=True,
                ),
                _ci([r["per_step_group"], r["per_step_group_low"], r["per_step_group_high"]]),
                _ci([r["mean_log_pi_b"], r["mean_log_pi_b_low"], r["mean_log_pi_b_high"]], 3),
                _pct(r["intervention_rate"]),
                f"{r['tv_to_therapist']:.3f}",
            ]
        )
    lines.append(table(header, body))
    blind = ", ".join(f"{k} {v}" for k, v in pol["content_blind_strategy"].items())
    lines.append(
        f"content-blind[p]: intervene with probability p on everyone with the scenario's most frequent "
        f"training strategy ({blind}); a strategy outside a scenario's taxonomy plays its first (track)"
    )
    for name, why in pol["skipped"].items():
        lines.append(f"{name}: not in the table: {why}")

    t = s["therapist"]["all"]
    lines += [
        "",
        f"(e) The therapist's actions at the {t['decision_points']} held-out decision points ({t['interventions']} "
        f"interventions, {t['labelled_interventions']} with known recipients and strategy, which give the split of "
        "the interventions):",
        "  "
        + ", ".join(f"{k} {100 * v:.1f} %" for k, v in list(t["shares"].items())[:10])
        + (" ..." if len(t["shares"]) > 10 else ""),
    ]
    per_scenario = [
        r
        for r in pol["rows"]
        if r.get("tv_to_therapist_couple") is not None or r.get("tv_to_therapist_family") is not None
    ]
    if per_scenario:
        best = sorted(pol["rows"], key=lambda r: r["tv_to_therapist"])[:5]
        lines.append(
            "  closest to the therapist (TV, all / couple / family): "
            + "; ".join(
                f"{r['policy']} {r['tv_to_therapist']:.3f} / {_num(r.get('tv_to_therapist_couple'))} / "
                f"{_num(r.get('tv_to_therapist_family'))}"
                for r in best
            )
        )

    c = s["calibration"]
    lines += [
        "",
        "(f) Calibration: mean distress over participants per tenth of the conversation (held-out; 95 % CI "
        "over conversations); simulated from the episodes of (d)",
    ]
    header = ["bin", "observed", "recorded actions", "gap", "never"]
    body = []
    for b in range(c["bins"]):
        o, r, n = c["courses"]["observed"][b], c["courses"]["recorded"][b], c["courses"]["never"][b]
        gap = c["gaps"][b]
        body.append(
            [
                f"{b / c['bins']:.1f}-{(b + 1) / c['bins']:.1f}",
                _ci(o, 3),
                _ci(r, 3),
                "-" if not np.isfinite(gap) else f"{gap:+.3f}",
                _ci(n, 3),
            ]
        )
    lines.append(table(header, body))
    lines.append(
        f"mean |gap| {c['mean_abs_gap']:.3f}: {'within' if c['within_tolerance'] else 'OUTSIDE'} the tolerance "
        f"{c['tolerance']}; largest {c['largest_gap']:.3f}; the simulated mean lies inside the observed interval in "
        f"{c['bins_inside_observed_ci']} of {c['bins']} bins"
    )

    lines += ["", "(g) Verdicts:"]
    marks = {True: "PASS", False: "FAIL", None: "n/a "}
    lines += [f"  [{marks[v['passed']]}] {v['line']}" for v in s["verdicts"]]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# ----- writing ----------------------------------------------------------------------------------------------


def write_validation(
    validation: Validation, output: str | Path, *, config: Mapping[str, Any], versions: Mapping[str, str]
) -> list[Path]:
    """``results.json`` (config, versions, data sha256, every section), CSVs (``policies.csv``, ``episodes.csv``,
    ``heads.csv``, ``action_terms.csv``, ``selection.csv``, ``distributions.csv``, ``calibration.csv``) and
    ``report.md`` / ``report.html`` with the figures (``figures/policies.png``, ``figures/calibration.png``, each
    with its numbers as CSV); the paths written."""
    import pandas as pd

    from benchmarks.reports.document import Report

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    s = validation.summary
    written: list[Path] = []

    def frame(name: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
        path = output / name
        pd.DataFrame(list(rows), columns=list(columns) if columns else None).to_csv(path, index=False)
        written.append(path)

    frame("policies.csv", s["policies"]["rows"])
    frame("episodes.csv", validation.episodes)
    heads = []
    for name in ("F distress", "F1 distress", "F viewpoint"):
        h = s["heads"][name]
        for predictor, (mean, low, high) in h.get("mse", {}).items():
            heads.append(
                {"head": name, "predictor": predictor, "n_test": h["n_test"], "mse": mean, "low": low, "high": high}
            )
        for gain in ("gain_over_persistence", "gain_over_mean"):
            if gain in h:
                mean, low, high = h[gain]
                heads.append(
                    {"head": name, "predictor": gain, "n_test": h["n_test"], "mse": mean, "low": low, "high": high}
                )
    if s["heads"]["F1 over F"] is not None:
        mean, low, high = s["heads"]["F1 over F"]
        heads.append(
            {
                "head": "F1 distress",
                "predictor": "gain_over_F",
                "n_test": s["heads"]["F1 distress"]["n_test"],
                "mse": mean,
                "low": low,
                "high": high,
            }
        )
    frame("heads.csv", heads, ["head", "predictor", "n_test", "mse", "low", "high"])
    frame("action_terms.csv", s["terms"]["terms"])
    selection = [
        {
            "round": k,
            "kept": "+".join(step["kept"]),
            "base_error": step["base_error"],
            "block": block,
            "error": error,
            "added": step["added"] == block,
        }
        for k, step in enumerate(s["terms"]["selection"], 1)
        for block, error in step["tried"].items()
    ]
    frame("selection.csv", selection, ["round", "kept", "base_error", "block", "error", "added"])
    distributions = [
        {"policy": name, "scope": scope, "category": cat, "share": share}
        for name, scopes in s["distributions"].items()
        for scope, cats in scopes.items()
        for cat, share in cats.items()
    ]
    distributions += [
        {"policy": "therapist (recorded labels)", "scope": scope, "category": cat, "share": share}
        for scope, t in s["therapist"].items()
        for cat, share in t["shares"].items()
    ]
    frame("distributions.csv", distributions, ["policy", "scope", "category", "share"])
    c = s["calibration"]
    calibration_rows = [
        {
            "course": name,
            "bin": b,
            "start": b / c["bins"],
            "end": (b + 1) / c["bins"],
            "mean": v[0],
            "low": v[1],
            "high": v[2],
            "conversations": v[3],
        }
        for name, course in c["courses"].items()
        for b, v in enumerate(course)
    ]
    frame("calibration.csv", calibration_rows)

    path = output / "results.json"
    results = payload(validation, config=config, versions=versions, per_start=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    written.insert(0, path)

    # The figures last: the numbers are on disk whatever happens to a drawing.
    report = Report("RescueSim-v1 validation (rescue-bench dynamics validate)", output)
    report.code(format_validation(s).rstrip())
    report.figure(*_policy_figure(s), data=pd.DataFrame(s["policies"]["rows"]))
    report.figure(*_calibration_figure(s), data=pd.DataFrame(calibration_rows))
    written += list(report.figures) + [p.with_suffix(".csv") for p in report.figures]
    written += list(report.write())
    return written


def payload(
    validation: Validation,
    *,
    config: Mapping[str, Any],
    versions: Mapping[str, str],
    per_start: bool = False,
) -> dict[str, Any]:
    """The summary as strict JSON (non-finite numbers as null), led by the format, ``config`` and ``versions``;
    ``per_start`` adds each policy's per-start values (``results.json`` has them, ``--json`` leaves them out)."""
    out = {
        "format": FORMAT,
        "version": VERSION,
        "config": dict(config),
        "versions": dict(versions),
        **{k: v for k, v in validation.summary.items() if k not in ("format", "version")},
    }
    if per_start:
        out["per_start"] = validation.per_start
    return _jsonable(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if hasattr(value, "item"):
        return value.item()
    return value


def _policy_figure(s: Mapping[str, Any]):
    from matplotlib.lines import Line2D

    from benchmarks.reports.document import new_figure

    rows = sorted(s["policies"]["rows"], key=lambda r: r["per_step_return"])
    figure = new_figure(7.5, 1.2 + 0.24 * len(rows))
    ax = figure.add_subplot()
    y = np.arange(len(rows))
    colours = {
        "privileged": "tab:gray",
        "trained": "tab:red",
        "constant": "tab:blue",
        "content-blind": "tab:purple",
        "clone": "tab:green",
        "baseline": "tab:orange",
    }
    for k, r in enumerate(rows):
        low, high = r["per_step_return_low"], r["per_step_return_high"]
        err = [[r["per_step_return"] - low], [high - r["per_step_return"]]] if np.isfinite([low, high]).all() else None
        ax.errorbar(
            r["per_step_return"], k, xerr=err, fmt="o", color=colours.get(r["kind"], "black"), capsize=2, markersize=4
        )
    ax.set_yticks(y, [_short(r["policy"]) + (" (priv.)" if r["privileged"] else "") for r in rows], fontsize=7)
    ref = next(r for r in rows if r["policy"] == s["policies"]["reference"])
    ax.axvline(ref["per_step_return"], color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("per-step return (mean over held-out starts, 95 % CI)", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    handles = [Line2D([], [], marker="o", linestyle="", color=colours.get(k, "black"), label=k) for k in kinds]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    caption = (
        f"Per-step return of every policy on RescueSim-v1's held-out starts; dotted: the reference, "
        f"{s['policies']['reference']}."
    )
    return figure, "policies", caption


def _short(name: str, width: int = 32) -> str:
    """A policy name for a tick label: a trained model's path cut to its last parts."""
    if len(name) <= width or ":" not in name:
        return name
    prefix, _, path = name.partition(":")
    parts = Path(path).parts
    return f"{prefix}:…/{'/'.join(parts[-2:])}"


def _calibration_figure(s: Mapping[str, Any]):
    from benchmarks.reports.document import new_figure

    c = s["calibration"]
    figure = new_figure(7.0, 4.2)
    ax = figure.add_subplot()
    centres = (np.arange(c["bins"]) + 0.5) / c["bins"]
    styles = {"observed": ("black", "o-"), "recorded": ("tab:blue", "s-"), "never": ("tab:gray", "^--")}
    labels = {
        "observed": "observed (held-out conversations)",
        "recorded": "simulated: recorded actions",
        "never": "simulated: never intervene",
    }
    for name, course in c["courses"].items():
        colour, style = styles[name]
        mean = np.array([v[0] for v in course], dtype=float)
        ax.plot(centres, mean, style, color=colour, label=labels[name])
        low, high = np.array([v[1] for v in course], dtype=float), np.array([v[2] for v in course], dtype=float)
        if name != "never" and np.isfinite(low).any():
            ax.fill_between(centres, low, high, color=colour, alpha=0.15)
    ax.set_xlim(0, 1)
    ax.set_xlabel("relative position in the conversation (from the end of the opening)")
    ax.set_ylabel("mean distress over participants")
    ax.legend(fontsize=8)
    return figure, "calibration", "RescueSim-v1 calibration: observed and simulated courses of mean distress."
