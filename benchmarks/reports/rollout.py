"""The rollout report of ``rescue-bench report ROLLOUT_DIR [ROLLOUT_DIR ...]``, and the learning curve of a training.

:func:`rollout_report` reads one or several run directories of ``rescue-bench rollout`` (any env: ``Rescue-v0``,
``Rescue-v1``, ``RescueSim-v0``; a built-in, trained or LLM policy) and builds one report, the runs side by side,
each labelled by its agent and env (``config.json``):

1. **Episode returns**: per run and scope (Couple, Family, Both) the mean episode return with its 95 % bootstrap
   interval over episodes, read from ``results.json`` (never recomputed), and a points figure of the
   per-episode returns (``episode_end.return`` of ``trajectories.jsonl``), with quartile boxes where a run has at
   least ``BOX_MIN_EPISODES`` (10) episodes in the scope, and that mean and interval marked.
2. **Reward components per step**: the mean of each component per run (table and bar chart) and how the main
   components (those scored at every step) and the step reward evolve over ten bins of relative position in the
   episode (step / episode length), each with a standard error clustered by episode (the steps of one
   conversation are not independent). The replays' components are the step records' ``components``; an
   unscored component (``None``: target and strategy off the z = z* = 1 steps) counts 0, as it does in the reward,
   and its mean over the steps where it is scored is listed too. ``RescueSim-v0``'s records carry none, so the
   report splits Eq. 14 with the recorded state after the step: wellbeing mean(1 - d), -lambda max d, -kappa z
   (shown when kappa is not 0) and the rest, reward minus those (-w T(G), plus the calm bonus on the last step of
   an episode that ended calm); the parts add up to the step reward.
3. **Learning curve** of a trained policy (``ALGO:PATH`` in ``config.json``): the monitor log that training left
   beside the model, ``PATH.monitor.csv`` (``policies.sb3.monitor_path``: ``runs/ppo.zip`` ->
   ``runs/ppo.monitor.csv``, written by ``policies.sb3.train``, ``scripts/train_sb3.py`` and, as
   ``OUTPUT/model.monitor.csv``, ``scripts/train_sim_ppo.py``), drawn as training episode return against
   timesteps (the cumulative episode lengths, as SB3's ``ts2xy``), raw and as a rolling mean over a tenth of the
   episodes (1 to 100; not drawn when that is a single episode). A relative model
   path is looked up from the current directory, then from the run directory and its two parents. A run
   without a model or a monitor log gets one line saying so, never an empty plot.
4. **One episode step by step** (``episode``: a sample id; default the first of the first run's plan): per step
   the row, the context the policy saw (the last two rows, reloaded from the run's data with
   ``rescue_env.data.load_dataset`` only when its sha256 is the one ``config.json`` recorded; otherwise no text,
   and the report says why; for ``RescueSim-v0`` the simulated transcript of ``transcripts/`` when there is one,
   else who spoke and the state), gold and chosen action (label display names), the reward and its components;
   and a figure of the episode's reward per step and cumulative, gold and chosen interventions marked.

:func:`learning_curve_report` is the same learning curve for a training output on its own: a ``*.monitor.csv``
file, a model ``.zip`` (its monitor log beside it) or a directory holding ``*.monitor.csv`` files (e.g.
``scripts/train_sim_ppo.py``'s OUTPUT). :func:`is_rollout_dir` and :func:`is_training_output` tell the CLI which
of the two a path is for.

Both return a ``benchmarks.reports.document.Report``; the caller writes it. The figures are ``episode_returns``,
``reward_components``, ``component_evolution``, ``learning_curve`` (when there is a log) and ``episode_steps``
(``episode_steps_N`` for run N of several); every figure's numbers are written as ``figures/<name>.csv`` beside its
PNG (tidy frames ``pandas.read_csv`` reads), and they are the frames the figures are drawn from. A figure whose
labels would overlap or be cut off at its edge is an error, not a figure. Errors are ``ValueError`` with a
one-line message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from benchmarks.reports.document import Report, new_figure
from benchmarks.rollout import TRAJECTORIES, TRANSCRIPTS, TrajectoryStore
from benchmarks.rollout_results import MISSING, SCOPES
from rescue_env.taxonomy import label_name

__all__ = [
    "RolloutRun",
    "clustered_se",
    "component_evolution",
    "component_frame",
    "component_summary",
    "episode_frame",
    "episode_returns_frame",
    "find_monitor",
    "is_rollout_dir",
    "is_training_output",
    "learning_curve_frame",
    "learning_curve_report",
    "load_run",
    "monitor_files",
    "read_monitor",
    "rollout_report",
    "run_label",
]

SCOPE_NAMES = {"couple": "Couple", "family": "Family", "all": "Both"}
CLOSED_LOOP = frozenset({"RescueSim-v0", "RescueSim-v1"})
BINS = 10
"""Relative-position bins of the components' course over the episode."""
CONTEXT_ROWS = 2
"""Rows of the conversation shown as the context of a step (the current row and the one before)."""
CONTEXT_CHARS = 140
MONITOR_SUFFIX = ".monitor.csv"

COMPONENT_NAMES: dict[str, str] = {
    "timing": "timing 1[z = z*]",
    "target": "target Jaccard",
    "strategy": "strategy 1[a = a*]",
    "group": "group objective",
    "wellbeing": "wellbeing mean(1 − d)",
    "distress": "−λ·max distress",
    "cost": "−κ·z",
    "tension": "−w·T(G) (+ calm bonus)",
    "reward": "step reward",
}
"""Display names of the reward components (replays: the records' own; closed loop: Eq. 14 split, see above)."""
REPLAY_COMPONENTS = ("timing", "target", "strategy", "group")
SIM_COMPONENTS = ("wellbeing", "distress", "cost", "tension")


# ----------------------------------------------------------------------------------------------------------------
# the run directory


@dataclass
class RolloutRun:
    """A finished rollout run directory, read once: ``config.json``, ``results.json`` and the episodes of
    ``trajectories.jsonl`` in plan order; ``label`` names it in tables and legends."""

    path: Path
    config: dict[str, Any]
    results: dict[str, Any]
    episodes: dict[str, list[dict[str, Any]]]
    label: str = ""
    index: int = 1

    @property
    def settings(self) -> dict[str, Any]:
        return self.config["config"]

    @property
    def env_id(self) -> str:
        return str(self.settings.get("env_id", "Rescue-v0"))

    @property
    def closed_loop(self) -> bool:
        return self.env_id in CLOSED_LOOP

    @property
    def agent(self) -> str:
        policy = self.settings.get("policy")
        return policy if policy is not None else f"llm:{self.settings.get('model')}"

    @property
    def order(self) -> list[str]:
        return list(self.episodes)


def is_rollout_dir(path: Path) -> bool:
    """``path`` is a run directory of ``rescue-bench rollout`` (finished or not): ``config.json`` and
    ``trajectories.jsonl``."""
    path = Path(path)
    return path.is_dir() and (path / TRAJECTORIES).is_file() and (path / "config.json").is_file()


def is_training_output(path: Path) -> bool:
    """``path`` is something :func:`learning_curve_report` draws: a ``*.monitor.csv`` file, a model ``.zip`` with
    its monitor log beside it, or a directory (not a rollout run) holding ``*.monitor.csv`` files."""
    path = Path(path)
    if path.is_file():
        return path.name.endswith(MONITOR_SUFFIX) or (path.suffix == ".zip" and _monitor_of(path).is_file())
    return path.is_dir() and not is_rollout_dir(path) and any(path.glob("*" + MONITOR_SUFFIX))


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the {what} ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a rollout's {what}")
    return data


def load_run(path: Path) -> RolloutRun:
    """The finished rollout at ``path``; ``ValueError`` (one line) for anything else or an unfinished run."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory (give a run directory of rescue-bench rollout)")
    if not is_rollout_dir(path):
        missing = " and ".join(name for name in ("config.json", TRAJECTORIES) if not (path / name).is_file())
        raise ValueError(f"{path}: not a rollout run directory (no {missing} of rescue-bench rollout)")
    config = _read_json(path / "config.json", "config.json")
    if not isinstance(config.get("config"), dict) or "episodes" not in config:
        raise ValueError(f"{path}: config.json is not a rollout's (no settings or episode plan)")
    plan = [str(x) for x in config["episodes"]]
    store = TrajectoryStore(path)
    done = [k for k in plan if k in store.episodes]
    rerun = "re-run the same rescue-bench rollout command to finish it"
    if not (path / "results.json").is_file():
        raise ValueError(
            f"{path}: unfinished rollout ({len(done)} of {len(plan)} episodes on disk, no results.json); {rerun}"
        )
    if len(done) < len(plan):
        raise ValueError(f"{path}: unfinished rollout ({len(done)} of {len(plan)} episodes on disk); {rerun}")
    results = _read_json(path / "results.json", "results.json")
    if "scopes" not in results:
        raise ValueError(f"{path}: results.json is not a rollout's (no scopes)")
    order = [str(x) for x in results.get("episode_ids", plan)]
    return RolloutRun(path, config, results, {k: store.episodes[k] for k in order if k in store.episodes})


def _short_agent(agent: str) -> str:
    """``ppo:runs/ppo-demo.zip`` -> ``ppo (ppo-demo.zip)``; others as they are."""
    algo, sep, rest = agent.partition(":")
    if sep and algo != "llm" and rest:
        return f"{algo} ({Path(rest).name})"
    return agent


def run_label(config: Mapping[str, Any]) -> str:
    """A run's name in tables and legends, from its ``config.json``: agent and env (``heuristic · Rescue-v0``)."""
    settings = config.get("config", config)
    agent = settings.get("policy") or f"llm:{settings.get('model')}"
    label = f"{_short_agent(str(agent))} · {settings.get('env_id', 'Rescue-v0')}"
    return label + (" + LLM personas" if settings.get("participants") == "llm" else "")


def _label_runs(runs: Sequence[RolloutRun]) -> None:
    """Labels from the configs; runs that would share one get their directory name, then their number."""
    labels = [run_label(run.config) for run in runs]
    for i, run in enumerate(runs):
        run.index = i + 1
        if labels.count(labels[i]) > 1:
            run.label = f"{labels[i]} [{run.path.name}]"
        else:
            run.label = labels[i]
    seen = [run.label for run in runs]
    for run in runs:
        if seen.count(run.label) > 1:
            run.label = f"{run.label} #{run.index}"


# ----------------------------------------------------------------------------------------------------------------
# numbers


def clustered_se(values: np.ndarray, clusters: Sequence[Any]) -> float:
    """Standard error of ``values.mean()`` clustered by ``clusters`` (episodes): the spread of the per-cluster sums
    of residuals, with the small-sample factor k/(k-1); NaN with fewer than two clusters."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan")
    ids, inverse = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    k = len(ids)
    if k < 2:
        return float("nan")
    residuals = np.bincount(inverse, weights=values - values.mean(), minlength=k)
    return float(math.sqrt(k / (k - 1) * float(np.sum(residuals**2))) / values.size)


def _episode_return(steps: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    end = steps[-1].get("episode_end") or {}
    return float(end.get("return", np.nan)), float(end.get("discounted_return", np.nan))


def episode_returns_frame(runs: Sequence[RolloutRun]) -> pd.DataFrame:
    """One row per run x scope x episode: its return and discounted return, and the scope's mean return with its
    95 % interval as ``results.json`` gives them (``scope`` = couple, family or all)."""
    rows = []
    for run in runs:
        for scope in SCOPES:
            stored = run.results["scopes"].get(scope) or {}
            interval = (stored.get("ci95") or {}).get("mean_return") or (None, None)
            for sample_id, steps in run.episodes.items():
                scenario = steps[0]["scenario"]
                if scope not in ("all", scenario):
                    continue
                ret, discounted = _episode_return(steps)
                rows.append(
                    {
                        "run": run.index,
                        "label": run.label,
                        "scope": scope,
                        "sample_id": sample_id,
                        "scenario": scenario,
                        "return": ret,
                        "discounted_return": discounted,
                        "scope_mean_return": stored.get("mean_return"),
                        "ci95_low": interval[0],
                        "ci95_high": interval[1],
                        "bootstrap": run.results.get("bootstrap"),
                    }
                )
    columns = ["run", "label", "scope", "sample_id", "scenario", "return", "discounted_return"]
    return pd.DataFrame(rows, columns=[*columns, "scope_mean_return", "ci95_low", "ci95_high", "bootstrap"])


def _sim_components(step: Mapping[str, Any], lam: float, kappa: float) -> dict[str, float]:
    """Eq. 14 at one closed-loop step, split with the state recorded after it (the parts add up to the reward)."""
    d = np.array(list(step["state"]["distress"].values()), dtype=float)
    wellbeing = float(np.mean(1.0 - d)) if d.size else 1.0
    distress = -lam * (float(d.max()) if d.size else 0.0)
    cost = -kappa * float(bool(step["chosen"]["intervene"]))
    rest = float(step["reward"]) - wellbeing - distress - cost
    return {"wellbeing": wellbeing, "distress": distress, "cost": cost, "tension": rest}


def _step_components(run: RolloutRun, step: Mapping[str, Any]) -> dict[str, float | None]:
    if step.get("components") is not None:
        return {k: step["components"].get(k) for k in REPLAY_COMPONENTS if k in step["components"]}
    if "state" in step:
        config = run.results.get("reward_config") or {}
        kappa = float(config.get("kappa", 0.0))
        parts: dict[str, float | None] = dict(_sim_components(step, float(config.get("lam", 1.0)), kappa))
        if kappa == 0.0:
            parts.pop("cost")  # always 0: no column, bar or line
        return parts
    return {}


def _weights(run: RolloutRun) -> dict[str, float]:
    """The weight of each component in the step reward (the closed loop's parts count once each)."""
    if run.closed_loop:
        return dict.fromkeys(SIM_COMPONENTS, 1.0)
    config = run.results.get("reward_config") or {}
    return {k: float(config.get(k, 1.0)) for k in REPLAY_COMPONENTS}


def component_frame(run: RolloutRun) -> pd.DataFrame:
    """One row per step x component (and ``reward``, the step reward): ``value`` NaN where the component is not
    scored; ``position`` = step / episode length, in [0, 1)."""
    rows = []
    for sample_id, steps in run.episodes.items():
        length = len(steps)
        for step in steps:
            parts = _step_components(run, step)
            parts["reward"] = float(step["reward"])
            for name, value in parts.items():
                rows.append(
                    {
                        "run": run.index,
                        "label": run.label,
                        "sample_id": sample_id,
                        "scenario": step["scenario"],
                        "step": int(step["step"]),
                        "length": length,
                        "position": int(step["step"]) / length,
                        "component": name,
                        "value": np.nan if value is None else float(value),
                    }
                )
    columns = ["run", "label", "sample_id", "scenario", "step", "length", "position", "component", "value"]
    return pd.DataFrame(rows, columns=columns)


def component_summary(frame: pd.DataFrame, weights: Mapping[int, Mapping[str, float]]) -> pd.DataFrame:
    """Per run x component: steps, scored steps, the mean per step (unscored = 0, as in the reward) and over the
    scored steps, each with its standard error clustered by episode; ``weight`` in the run's step reward."""
    rows = []
    for (run, component), group in frame.groupby(["run", "component"], sort=False):
        values = group["value"].to_numpy(dtype=float)
        scored = ~np.isnan(values)
        filled = np.where(scored, values, 0.0)
        episodes = group["sample_id"].to_numpy()
        rows.append(
            {
                "run": run,
                "label": group["label"].iloc[0],
                "component": component,
                "component_name": COMPONENT_NAMES.get(component, component),
                "weight": weights.get(run, {}).get(component, np.nan) if component != "reward" else np.nan,
                "steps": int(values.size),
                "scored_steps": int(scored.sum()),
                "mean_per_step": float(filled.mean()) if values.size else np.nan,
                "se_per_step": clustered_se(filled, episodes),
                "mean_scored": float(values[scored].mean()) if scored.any() else np.nan,
                "se_scored": clustered_se(values[scored], episodes[scored]) if scored.any() else np.nan,
            }
        )
    return pd.DataFrame(rows)


def _main_components(frame: pd.DataFrame) -> list[str]:
    """The components scored at every step of the run (timing and group; the closed loop's parts), then the
    step reward: the ones whose course over an episode means something at every position."""
    main = [
        c for c, group in frame.groupby("component", sort=False) if c != "reward" and not group["value"].isna().any()
    ]
    return [*main, "reward"]


def component_evolution(frame: pd.DataFrame, bins: int = BINS) -> pd.DataFrame:
    """Per run x main component x relative-position bin: the mean over the steps in the bin and its standard error
    clustered by episode, with the steps and episodes it rests on."""
    rows = []
    for run, run_frame in frame.groupby("run", sort=False):
        main = _main_components(run_frame)
        binned = run_frame.assign(bin=np.minimum((run_frame["position"] * bins).astype(int), bins - 1))
        for component in main:
            part = binned[binned["component"] == component]
            for b in range(bins):
                cell = part[part["bin"] == b]
                values = cell["value"].to_numpy(dtype=float)
                rows.append(
                    {
                        "run": run,
                        "label": run_frame["label"].iloc[0],
                        "component": component,
                        "component_name": COMPONENT_NAMES.get(component, component),
                        "bin": b,
                        "position_low": b / bins,
                        "position_high": (b + 1) / bins,
                        "mean": float(values.mean()) if values.size else np.nan,
                        "se": clustered_se(values, cell["sample_id"].to_numpy()),
                        "steps": int(values.size),
                        "episodes": int(cell["sample_id"].nunique()),
                    }
                )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------------------------
# learning curves


def _monitor_of(model: Path) -> Path:
    from policies.sb3 import monitor_path

    return monitor_path(model)


def _model_candidates(raw: str, run_dir: Path) -> list[Path]:
    path = Path(raw)
    if path.suffix != ".zip":
        path = path.with_name(path.name + ".zip")
    if path.is_absolute():
        return [path]
    bases = [Path.cwd(), run_dir, *list(run_dir.resolve().parents)[:2]]
    return [base / path for base in bases]


def find_monitor(run: RolloutRun) -> tuple[Path | None, str]:
    """The monitor log of the trained model ``run`` plays, or None and the line saying why there is none."""
    algo, sep, raw = run.agent.partition(":")
    if not sep or algo == "llm" or not raw:
        return None, f"{run.label}: not a trained policy, so no learning curve"
    candidates = _model_candidates(raw, run.path)
    model = next((c for c in candidates if c.is_file()), None)
    if model is None:
        return None, (
            f"{run.label}: no learning curve: the model {raw} is not found from here (looked from the current "
            "directory, the run directory and its parents)"
        )
    expected = _monitor_of(model)
    if expected.is_file():
        return expected, ""
    sidecar = model.with_suffix(".json")  # a monitor log named in the sidecar (train_sim_ppo, policies.sb3.fit)
    if sidecar.is_file():
        try:
            named = (json.loads(sidecar.read_text(encoding="utf-8")).get("training") or {}).get("monitor")
        except (OSError, json.JSONDecodeError, AttributeError):
            named = None
        if named and (model.parent / str(named)).is_file():
            return model.parent / str(named), ""
    return None, f"{run.label}: no monitor log beside the model (expected {expected}), so no learning curve"


def read_monitor(path: Path) -> pd.DataFrame:
    """An SB3 monitor log (``#{json header}`` then ``r,l,t``) as episodes in the order they ended: ``episode``,
    ``timesteps`` (cumulative lengths), ``return``, ``length``, ``seconds``; ValueError if it is not one."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
            frame = pd.read_csv(handle)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: not an SB3 monitor log ({type(exc).__name__})") from None
    if not first.startswith("#") or not {"r", "l", "t"} <= set(frame.columns):
        raise ValueError(f"{path}: not an SB3 monitor log (expected a #{{...}} header, then columns r, l, t)")
    frame = frame.sort_values("t", kind="stable").reset_index(drop=True)
    return pd.DataFrame(
        {
            "episode": np.arange(1, len(frame) + 1),
            "timesteps": frame["l"].cumsum().astype(int),
            "return": frame["r"].astype(float),
            "length": frame["l"].astype(int),
            "seconds": frame["t"].astype(float),
        }
    )


def rolling_window(episodes: int) -> int:
    """The rolling mean's window: a tenth of the episodes, between 1 and 100."""
    return int(min(100, max(1, round(episodes / 10))))


def learning_curve_frame(monitors: Mapping[str, Path]) -> pd.DataFrame:
    """Every monitor log (``label -> path``) as one frame: the episodes of :func:`read_monitor` with ``label``,
    ``monitor``, ``rolling_mean`` and its ``window``."""
    frames = []
    for label, path in monitors.items():
        episodes = read_monitor(path)
        window = rolling_window(len(episodes))
        rolling = episodes["return"].rolling(window, min_periods=1).mean()
        frames.append(episodes.assign(label=label, monitor=str(path), rolling_mean=rolling, window=window))
    columns = ["label", "monitor", "episode", "timesteps", "return", "length", "seconds", "rolling_mean", "window"]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def monitor_files(source: Path) -> list[Path]:
    """The monitor logs of a training output: the file itself, a model's log beside it, or a directory's
    ``*.monitor.csv``; ValueError (one line) when there is none."""
    source = Path(source)
    if source.is_file() and source.name.endswith(MONITOR_SUFFIX):
        return [source]
    if source.is_file() and source.suffix == ".zip":
        monitor = _monitor_of(source)
        if not monitor.is_file():
            raise ValueError(f"{source}: no monitor log beside the model (expected {monitor})")
        return [monitor]
    if source.is_dir():
        found = sorted(source.glob("*" + MONITOR_SUFFIX))
        if found:
            return found
        raise ValueError(
            f"{source}: no *{MONITOR_SUFFIX} here (training writes MODEL{MONITOR_SUFFIX} beside the model)"
        )
    raise ValueError(f"{source}: not a monitor log, a model .zip or a directory of training output")


def _monitor_label(path: Path) -> str:
    return f"{path.parent.name}/{path.name[: -len(MONITOR_SUFFIX)]}" if path.parent.name else path.name


# ----------------------------------------------------------------------------------------------------------------
# one episode


def _action_text(action: Mapping[str, Any] | None) -> str:
    if action is None:
        return MISSING
    if not action.get("intervene"):
        return "listen"
    target, strategy = action.get("target"), action.get("strategy")
    # a gold action without a target or strategy is a therapist row the release left unannotated
    whom = "no target annotated" if target is None else (", ".join(target) or "nobody")
    return f"intervene → {whom} · {label_name(strategy) if strategy else 'no strategy annotated'}"


def _chosen_text(step: Mapping[str, Any]) -> str:
    """The chosen action; a decision whose answer failed (an LLM's) says so: it became what the fallback did.
    Where the gold intervenes without a strategy, the chosen strategy is a filler (the action must name one,
    e.g. the oracle's first valid strategy) and is not scored: said, lest it read as a clinical choice."""
    text = _action_text(step["chosen"])
    gold, chosen = step.get("gold") or {}, step.get("chosen") or {}
    if gold.get("intervene") and not gold.get("strategy") and chosen.get("intervene"):
        text += " (strategy not scored: none annotated)"
    return text + (f" (failed: {step['failure']})" if step.get("failure") else "")


def _clip(text: str, limit: int = CONTEXT_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _replay_context(dataset: Any, sample_id: str, row: int | None) -> str:
    """The last ``CONTEXT_ROWS`` rows through the current one (``row`` is 1-based: the record's ``row``)."""
    if dataset is None or row is None:
        return ""
    try:
        sample = dataset.get(sample_id)
    except (KeyError, ValueError):
        return "(not in the data)"
    shown = sample.rows[max(0, row - CONTEXT_ROWS) : row]
    start = max(0, row - CONTEXT_ROWS)
    parts = []
    for offset, item in enumerate(shown):
        number = getattr(item, "row_index", None) or start + offset + 1
        parts.append(f"r{number} {item.primary_speaker}: {_clip(item.dialogue_cleaned)}")
    return " · ".join(parts)


def _state_text(step: Mapping[str, Any]) -> str:
    distress = step.get("state", {}).get("distress") or {}
    if not distress:
        return ""
    who = max(distress, key=distress.get)
    return f"max distress {distress[who]:.2f} ({who}), tension {step['state'].get('tension', 0.0):.2f}"


def _sim_context(previous: Mapping[str, Any] | None, transcript: Mapping[int, Mapping[str, Any]], step: int) -> str:
    """What the closed-loop policy saw last before step ``step``: the transcript's row of the step before (with
    LLM personas), else who spoke and the state after it; the opening at step 0."""
    if step == 0 or previous is None:
        return "(the opening)"
    said = transcript.get(step - 1)
    if said is not None:
        words = said.get("words")
        return f"r{said.get('row')} {said.get('speaker')}: " + (_clip(words) if words else "(silent)")
    return f"{previous.get('speaker') or '?'} spoke; {_state_text(previous)}"


def _components_text(parts: Mapping[str, float | None]) -> str:
    return " · ".join(f"{k} {MISSING if v is None else f'{v:+.2f}'}" for k, v in parts.items())


def episode_frame(run: RolloutRun, sample_id: str) -> pd.DataFrame:
    """One row per step of an episode: gold and chosen action, reward, cumulative return, components."""
    rows = []
    total = 0.0
    for step in run.episodes[sample_id]:
        total += float(step["reward"])
        gold, chosen = step.get("gold"), step["chosen"]
        row: dict[str, Any] = {
            "run": run.index,
            "label": run.label,
            "sample_id": sample_id,
            "step": int(step["step"]),
            "row": step.get("row"),
            "speaker_after": step.get("speaker"),
            "gold_intervene": None if gold is None else bool(gold["intervene"]),
            "gold_target": None if gold is None or gold.get("target") is None else ";".join(gold["target"]),
            "gold_strategy": None if gold is None else gold.get("strategy"),
            "chosen_intervene": bool(chosen["intervene"]),
            "chosen_target": ";".join(chosen.get("target") or []),
            "chosen_strategy": chosen.get("strategy"),
            "reward": float(step["reward"]),
            "cumulative_return": total,
        }
        for name, value in _step_components(run, step).items():
            row[f"component_{name}"] = np.nan if value is None else value
        rows.append(row)
    return pd.DataFrame(rows)


def _read_transcript(run: RolloutRun, sample_id: str) -> dict[int, dict[str, Any]]:
    path = run.path / TRANSCRIPTS / (sample_id.replace("/", "__") + ".jsonl")
    if not path.is_file():
        return {}
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[int(record.get("step", len(records)))] = record
    return records


@dataclass
class _Datasets:
    """The runs' data, reloaded once per (source, sha256), only when the hash is the recorded one."""

    cache: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)

    def get(self, run: RolloutRun) -> tuple[Any, str]:
        data = run.config.get("data") or {}
        source, sha = str(data.get("source") or run.settings.get("data") or ""), str(data.get("sha256") or "")
        key = (source, sha)
        if key not in self.cache:
            self.cache[key] = _load_checked(source, sha, str(run.settings.get("data") or ""))
        return self.cache[key]


def _load_checked(source: str, sha: str, given: str) -> tuple[Any, str]:
    from rescue_env.data import load_dataset

    if not source:
        return None, "config.json records no data source: no text shown"
    # The recorded source is the path the rollout read; "demo" (as given) is the shipped copy wherever it is now.
    attempts = [source] + ([given] if given == "demo" else [])
    reason = f"the run's data {source} cannot be read here: no text shown"
    for attempt in attempts:
        try:
            dataset = load_dataset(attempt)
        except Exception:  # noqa: BLE001 - any failure to read means "no text", said in one line
            continue
        if dataset.sha256 == sha:
            return dataset, ""
        reason = (
            f"the data at {attempt} has changed since the run (sha256 {dataset.sha256[:12]}…, the run read "
            f"{sha[:12]}…): no text shown"
        )
    return None, reason


# ----------------------------------------------------------------------------------------------------------------
# figures


def _colours(n: int) -> list[tuple[float, ...]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _legend_below(figure: Figure, handles: Sequence[Any], labels: Sequence[str], columns: int | None = None) -> None:
    """A legend under the axes, in as many columns (at most ``columns``) as the figure's width holds: an entry
    takes about 0.45 in plus 0.065 in per character at size 8 (a legend wider than the figure is cut off)."""
    if not handles:
        return
    width = figure.get_size_inches()[0] - 0.3
    entry = 0.45 + 0.065 * max(len(label) for label in labels)
    fits = max(1, int(width // entry))
    ncols = min(len(labels), columns or 3, fits)
    figure.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)


BOX_MIN_EPISODES = 10
"""Fewest episodes of a run and scope that get a quartile box in the returns figure. A box of fewer is not a
summary: its quartiles interpolate between a handful of points (two episodes make a "box" from the 25th to the
75th percentile of a line between them), so below 10 the figure shows only the points, which are the data."""


def returns_figure(frame: pd.DataFrame) -> Figure:
    """Per scope (Couple, Family, Both) and run: the episode returns as points, with a quartile box where there
    are at least ``BOX_MIN_EPISODES`` of them, and the mean with its 95 % interval (``results.json``) as a black
    diamond with a bar."""
    runs = list(dict.fromkeys(frame["run"]))
    labels = {r: frame.loc[frame["run"] == r, "label"].iloc[0] for r in runs}
    colours = dict(zip(runs, _colours(len(runs))))
    slot = len(runs) + 1  # one empty slot between scopes
    figure = new_figure(max(6.0, 1.0 + 0.75 * slot * len(SCOPES)), 4.6)
    ax = figure.add_subplot()
    ticks, tick_labels = [], []
    boxes: set[Any] = set()  # the runs with a box somewhere (their legend key is a box, else a point)
    for s, scope in enumerate(SCOPES):
        for r_index, run in enumerate(runs):
            x = s * slot + r_index
            part = frame[(frame["run"] == run) & (frame["scope"] == scope)]
            values = part["return"].dropna().to_numpy()
            boxed = values.size >= BOX_MIN_EPISODES
            if boxed:
                boxes.add(run)
                box = ax.boxplot(values, positions=[x], widths=0.6, patch_artist=True, showfliers=False)
                for patch in box["boxes"]:
                    patch.set(facecolor=(*colours[run][:3], 0.25), edgecolor=colours[run])
                for key in ("whiskers", "caps", "medians"):
                    for line in box[key]:
                        line.set(color=colours[run])
            if values.size:
                offsets = np.linspace(-0.18, 0.18, values.size) if values.size > 1 else np.zeros(1)
                size = 14 if boxed else 26  # without a box the points are the figure: larger
                style = {"color": colours[run], "zorder": 3, "edgecolors": "white", "linewidths": 0.4}
                ax.scatter(x + offsets, values, s=size, **style)
                mean = part["scope_mean_return"].iloc[0]
                low, high = part["ci95_low"].iloc[0], part["ci95_high"].iloc[0]
                if pd.notna(mean):
                    if pd.notna(low) and pd.notna(high):
                        ax.errorbar(
                            x + 0.36, mean, yerr=[[mean - low], [high - mean]], fmt="none", color="black", capsize=3
                        )
                    ax.scatter([x + 0.36], [mean], marker="D", s=22, color="black", zorder=4)
        ticks.append(s * slot + (len(runs) - 1) / 2)
        count = int(frame[(frame["scope"] == scope) & (frame["run"] == runs[0])].shape[0]) if runs else 0
        tick_labels.append(SCOPE_NAMES[scope] + ("" if count else "\n(no episodes)"))
    ax.set_xticks(ticks, tick_labels)
    ax.set_xlim(-0.8, (len(SCOPES) - 1) * slot + len(runs) - 0.2)
    ax.set_ylabel("episode return (the run's reward)")
    ax.set_title("Episode returns per run and scenario", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    handles: list[Any] = [
        Patch(facecolor=(*colours[r][:3], 0.25), edgecolor=colours[r])
        if r in boxes
        else Line2D([], [], marker="o", color=colours[r], linestyle="none", markersize=5)
        for r in runs
    ]
    handles.append(Line2D([], [], marker="D", color="black", linestyle="none", markersize=5))
    _legend_below(figure, handles, [*(labels[r] for r in runs), "mean, 95 % bootstrap interval"])
    return figure


def components_figure(summary: pd.DataFrame) -> Figure:
    """Grouped bars: the mean of each component per step (unscored = 0) per run, with clustered standard errors."""
    parts = summary[summary["component"] != "reward"]
    components = list(dict.fromkeys(parts["component"]))
    runs = list(dict.fromkeys(parts["run"]))
    colours = dict(zip(runs, _colours(len(runs))))
    figure = new_figure(max(6.5, 1.2 * len(components) + 2.0), 4.6)
    ax = figure.add_subplot()
    width = 0.8 / max(1, len(runs))
    for r_index, run in enumerate(runs):
        rows = parts[parts["run"] == run].set_index("component")
        xs, means, errors = [], [], []
        for c_index, component in enumerate(components):
            if component in rows.index:
                xs.append(c_index - 0.4 + width * (r_index + 0.5))
                means.append(rows.loc[component, "mean_per_step"])
                se = rows.loc[component, "se_per_step"]
                errors.append(0.0 if pd.isna(se) else se)
        ax.bar(xs, means, width=width * 0.95, yerr=errors, capsize=2, color=colours[run], label=None)
    ax.axhline(0.0, color="black", linewidth=0.6)
    # Two lines per name (its first space), so that the names stay level and clear of each other.
    names = [COMPONENT_NAMES.get(c, c).replace(" ", "\n", 1) for c in components]
    ax.set_xticks(range(len(components)), names)
    ax.set_ylabel("mean per decision (unscored = 0)")
    ax.set_title("Reward components per step", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    labels = [parts.loc[parts["run"] == r, "label"].iloc[0] for r in runs]
    _legend_below(figure, [Patch(color=colours[r]) for r in runs], labels)
    return figure


def evolution_figure(evolution: pd.DataFrame) -> Figure:
    """One panel per run: the main components' and the step reward's mean per relative-position bin, with a band
    of one clustered standard error."""
    runs = list(dict.fromkeys(evolution["run"]))
    columns = min(3, len(runs))
    rows = math.ceil(len(runs) / columns)
    figure = new_figure(max(6.0, 4.2 * columns), 3.3 * rows + 0.9)
    components = [c for c in dict.fromkeys(evolution["component"]) if c != "reward"] + ["reward"]
    colours = dict(zip(components, _colours(len(components))))
    axes = figure.subplots(rows, columns, squeeze=False, sharey=True)
    for i, run in enumerate(runs):
        ax: Axes = axes[i // columns][i % columns]
        part = evolution[evolution["run"] == run]
        for component in dict.fromkeys(part["component"]):
            line = part[part["component"] == component].sort_values("bin")
            x = (line["position_low"] + line["position_high"]) / 2
            style = "--" if component == "reward" else "-"
            ax.plot(x, line["mean"], style, marker="o", markersize=3, color=colours[component])
            se = line["se"].fillna(0.0)
            ax.fill_between(x, line["mean"] - se, line["mean"] + se, color=colours[component], alpha=0.15, linewidth=0)
        ax.set_title(part["label"].iloc[0], fontsize=9)
        ax.set_xlim(-0.05, 1.05)  # keeps the x tick "0.0" clear of the lowest y tick
        ax.grid(alpha=0.3)
        ax.set_xlabel("relative position in the episode")
        if i % columns == 0:
            ax.set_ylabel("mean per decision")
    for j in range(len(runs), rows * columns):
        axes[j // columns][j % columns].set_visible(False)
    handles = [
        Line2D([], [], color=colours[c], linestyle="--" if c == "reward" else "-", marker="o") for c in components
    ]
    _legend_below(figure, handles, [COMPONENT_NAMES.get(c, c) for c in components], columns=min(len(components), 4))
    return figure


def learning_curve_figure(curve: pd.DataFrame) -> Figure:
    """Training episode return against timesteps per monitor log: the episodes (thin) and the rolling mean (thick;
    none when the window is a single episode: it would hide the episodes under the same line)."""
    labels = list(dict.fromkeys(curve["label"]))
    colours = dict(zip(labels, _colours(len(labels))))
    figure = new_figure(7.5, 4.4)
    ax = figure.add_subplot()
    handles, names = [], []
    for label in labels:
        part = curve[curve["label"] == label]
        window = int(part["window"].iloc[0])
        raw = {"alpha": 0.35, "linewidth": 0.7} if window > 1 else {"linewidth": 1.2}
        ax.plot(part["timesteps"], part["return"], color=colours[label], marker=".", markersize=3, **raw)
        handles.append(Line2D([], [], color=colours[label], marker=".", **raw))
        names.append(f"{label}: episodes")
        if window > 1:
            ax.plot(part["timesteps"], part["rolling_mean"], color=colours[label], linewidth=2.0)
            handles.append(Line2D([], [], color=colours[label], linewidth=2.0))
            names.append(f"{label}: rolling mean of {window}")
    ax.set_xlabel("training timesteps (cumulative episode lengths)")
    ax.set_ylabel("training episode return")
    ax.set_title("Learning curve (the training env's reward)", fontsize=11)
    ax.grid(alpha=0.3)
    _legend_below(figure, handles, names, columns=2)
    return figure


def episode_figure(frame: pd.DataFrame, title: str) -> Figure:
    """An episode's interventions (gold and chosen), reward per step and cumulative return."""
    steps = frame["step"].to_numpy()
    has_gold = frame["gold_intervene"].notna().any()
    figure = new_figure(max(7.0, 0.2 * len(steps) + 3.0), 5.6)
    top, middle, bottom = figure.subplots(3, 1, sharex=True, height_ratios=[1.0 if has_gold else 0.6, 2.2, 2.2])
    marks = [("policy (chosen)", frame["chosen_intervene"].astype(bool).to_numpy(), "tab:blue", "o")]
    if has_gold:
        gold = frame["gold_intervene"].fillna(False).astype(bool).to_numpy()
        marks.insert(0, ("therapist (gold)", gold, "tab:orange", "s"))
    for y, (_, on, colour, marker) in enumerate(marks):
        top.scatter(steps[on], np.full(on.sum(), y), marker=marker, color=colour, s=22)
    top.set_yticks(range(len(marks)), [m[0] for m in marks], fontsize=8)
    top.set_ylim(-0.6, len(marks) - 0.4)
    top.set_title(title, fontsize=10)
    top.set_ylabel("intervenes", fontsize=8)
    rewards = frame["reward"].to_numpy()
    middle.bar(steps, rewards, color=np.where(rewards >= 0, "tab:green", "tab:red"), width=0.8)
    middle.axhline(0.0, color="black", linewidth=0.6)
    middle.set_ylabel("reward")
    middle.grid(axis="y", alpha=0.3)
    bottom.plot(steps, frame["cumulative_return"], color="black", marker="o", markersize=3)
    bottom.set_ylabel("cumulative")
    bottom.set_xlabel("decision (step)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.grid(alpha=0.3)
    return figure


# ----------------------------------------------------------------------------------------------------------------
# the report


def _figure(report: Report, figure: Figure, name: str, caption: str, frame: pd.DataFrame) -> None:
    """The figure's PNG and, beside it, the frame it was drawn from as ``figures/<name>.csv`` (``Report.figure``
    refuses overlapping labels and labels cut off at the edge)."""
    report.figure(figure, name, caption, data=frame)


def _suffix(run: RolloutRun, runs: Sequence[RolloutRun]) -> str:
    return "" if len(runs) == 1 else f"_{run.index}"


def _fmt(value: Any, digits: int = 3) -> str:
    return MISSING if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _reward_text(run: RolloutRun) -> str:
    config = run.results.get("reward_config") or {}
    constants = ", ".join(f"{k}={config[k]:g}" for k in ("lam", "kappa", "gamma") if k in config)
    return f"{run.results.get('reward', '?')} ({constants})"


def _runs_section(report: Report, runs: Sequence[RolloutRun]) -> None:
    report.heading("Runs")
    rows = []
    for run in runs:
        data = run.config.get("data") or {}
        split = run.settings.get("split", "all")
        rows.append(
            [
                run.label,
                f"`{run.path}`",
                f"`{run.agent}`",
                run.env_id,
                _reward_text(run),
                f"{Path(str(data.get('source', '?'))).name} (sha256 {str(data.get('sha256', ''))[:12]})",
                f"{len(run.episodes)} ({split})",
                str(run.settings.get("seed", "?")),
            ]
        )
    report.table(["Run", "Directory", "Agent", "Env", "Reward", "Data", "Episodes (split)", "Seed"], rows)
    if len({_reward_text(run) for run in runs}) > 1:
        report.paragraph(
            "The runs are rewarded differently: their returns and components are each on their own scale, not "
            "comparable across runs."
        )


def _returns_section(report: Report, runs: Sequence[RolloutRun]) -> None:
    report.heading("Episode returns")
    rows = []
    for run in runs:
        cells = [run.label]
        for scope in SCOPES:
            stored = run.results["scopes"].get(scope) or {}
            mean, interval = stored.get("mean_return"), (stored.get("ci95") or {}).get("mean_return")
            text = _fmt(mean)
            if mean is not None and interval:
                text += f" [{_fmt(interval[0])}, {_fmt(interval[1])}]"
            cells.append(f"{text} (n={stored.get('episodes', 0)})")
        rows.append(cells)
    report.table(["Run", *(SCOPE_NAMES[s] for s in SCOPES)], rows)
    resamples = sorted({str(run.results.get("bootstrap", "?")) for run in runs})
    report.paragraph(
        "Mean episode return under each run's reward with its 95 % percentile bootstrap interval over episodes, as "
        f"`results.json` holds them ({', '.join(resamples)} resamples); n: episodes. {MISSING}: no episode."
    )
    frame = episode_returns_frame(runs)
    _figure(
        report,
        returns_figure(frame),
        "episode_returns",
        "Per-episode returns per run and scenario (points: episodes; box: quartiles, drawn only where a run has "
        f"at least {BOX_MIN_EPISODES} episodes in the scope, since quartiles of fewer say nothing the points do not; "
        "diamond and bar: the mean and its 95 % bootstrap interval over episodes from results.json).",
        frame,
    )


def _components_section(report: Report, runs: Sequence[RolloutRun]) -> None:
    report.heading("Reward components per step")
    frames = [component_frame(run) for run in runs]
    frame = pd.concat(frames, ignore_index=True)
    summary = component_summary(frame, {run.index: _weights(run) for run in runs})
    text = (
        "Mean of each reward component over a run's decisions: per step with an unscored component counted 0 (as "
        "the reward counts it), and over the steps where it is scored; ± one standard error clustered by episode. "
        "The step reward is the weighted sum of the components (weights of the run's reward)."
    )
    if any(run.closed_loop for run in runs):
        text += (
            " RescueSim-v0 records no components: its Eq. 14 is split with the state recorded after each step into "
            "wellbeing mean(1 − d), −λ·max distress, −κ·z (when κ is not 0) and the rest, −w·T(G) plus the calm "
            "bonus on the last step of an episode that ended calm; the parts add up to the step reward."
        )
    report.paragraph(text)
    rows = [
        [
            row.label,
            row.component_name,
            MISSING if pd.isna(row.weight) else f"{row.weight:g}",
            f"{row.scored_steps} / {row.steps}",
            f"{_fmt(row.mean_per_step)} ± {_fmt(row.se_per_step)}",
            f"{_fmt(row.mean_scored)} ± {_fmt(row.se_scored)}" if row.scored_steps else MISSING,
        ]
        for row in summary.itertuples()
    ]
    report.table(["Run", "Component", "Weight", "Scored steps", "Mean per step", "Mean when scored"], rows)
    _figure(
        report,
        components_figure(summary),
        "reward_components",
        "Mean reward component per decision (unscored = 0) per run, ± one standard error clustered by episode.",
        summary,
    )
    evolution = component_evolution(frame)
    _figure(
        report,
        evolution_figure(evolution),
        "component_evolution",
        f"The components scored at every step and the step reward over the episode: mean per {BINS} bins of relative "
        "position (step / episode length), band ± one standard error clustered by episode.",
        evolution,
    )


def _learning_section(report: Report, runs: Sequence[RolloutRun]) -> None:
    report.heading("Learning curve")
    monitors: dict[str, Path] = {}
    lines = []
    for run in runs:
        path, why = find_monitor(run)
        if path is None:
            lines.append(why)
        else:
            monitors[run.label] = path
    if monitors:
        curve = learning_curve_frame(monitors)
        if curve.empty:
            lines += [f"{label}: the monitor log {path} holds no finished episode" for label, path in monitors.items()]
        else:
            report.paragraph(
                "Return of every training episode (the training env's reward, not necessarily the run's) against the "
                "training timesteps, from SB3's monitor log beside the model: "
                + ", ".join(f"`{p}`" for p in monitors.values())
                + ". Rolling mean over a tenth of the episodes."
            )
            _figure(
                report, learning_curve_figure(curve), "learning_curve", "Learning curve of the trained policies.", curve
            )
    for line in lines:
        report.paragraph(line + ".")


def _choose_episode(runs: Sequence[RolloutRun], episode: str | None) -> str:
    if episode is None:
        return runs[0].order[0]
    if any(episode in run.episodes for run in runs):
        return episode
    ids = runs[0].order
    shown = ", ".join(ids[:5]) + (f", … ({len(ids)} in all)" if len(ids) > 5 else "")
    raise ValueError(f"episode {episode!r} is not in the rollout; valid ids: {shown}")


def _episode_section(report: Report, runs: Sequence[RolloutRun], sample_id: str) -> None:
    report.heading(f"One episode step by step: `{sample_id}`")
    datasets = _Datasets()
    for run in runs:
        if len(runs) > 1:
            report.heading(run.label, level=3)
        if sample_id not in run.episodes:
            report.paragraph(f"Not played in this run ({run.path}).")
            continue
        steps = run.episodes[sample_id]
        if run.closed_loop:
            transcript = _read_transcript(run, sample_id)
            source = "the simulated transcript (`transcripts/`)" if transcript else "who spoke and the state after it"
            report.paragraph(
                f"Context: the last row before each decision, from {source}. RescueSim-v0 has no gold. "
                "After: who was drawn to speak next and the state after the step."
            )
            rows, previous = [], None
            for step in steps:
                rows.append(
                    [
                        step["step"],
                        _sim_context(previous, transcript, int(step["step"])),
                        _chosen_text(step),
                        f"{step['reward']:+.3f}",
                        _components_text(_step_components(run, step)),
                        f"{step.get('speaker') or MISSING}; {_state_text(step)}",
                    ]
                )
                previous = step
            report.table(["Step", "Context", "Chosen", "Reward", "Components", "After"], rows)
        else:
            dataset, why = datasets.get(run)
            report.paragraph(
                "Context: the last two rows the policy saw, from the run's data (its sha256 checked against "
                "config.json)." + (f" {why[0].upper()}{why[1:]}." if why else "")
            )
            rows = [
                [
                    step["step"],
                    step.get("row", MISSING),
                    _replay_context(dataset, sample_id, step.get("row")) or MISSING,
                    _action_text(step.get("gold")),
                    _chosen_text(step),
                    f"{step['reward']:+.3f}",
                    _components_text(_step_components(run, step)),
                ]
                for step in steps
            ]
            report.table(["Step", "Row", "Context", "Gold", "Chosen", "Reward", "Components"], rows)
        frame = episode_frame(run, sample_id)
        _figure(
            report,
            episode_figure(frame, f"{run.label}: {sample_id}"),
            f"episode_steps{_suffix(run, runs)}",
            f"{run.label}, episode {sample_id}: interventions"
            + (" of the therapist (gold) and the policy" if not run.closed_loop else " of the policy")
            + ", reward per step and cumulative return.",
            frame,
        )


def rollout_report(run_dirs: Sequence[Path], output: Path, episode: str | None = None) -> Report:
    """The report of one or several finished rollout run directories (see the module docstring), to be written to
    ``output``; ``episode`` is the sample id shown step by step (default: the first of the first run's plan).
    ``ValueError`` (one line) for a directory that is not a finished rollout or an unknown episode."""
    if not run_dirs:
        raise ValueError("no rollout run directory given")
    if len({Path(p).resolve() for p in run_dirs}) < len(run_dirs):
        raise ValueError("the same rollout run directory was given twice")
    runs = [load_run(Path(p)) for p in run_dirs]
    _label_runs(runs)
    sample_id = _choose_episode(runs, episode)
    title = f"Rollout: {runs[0].label}" if len(runs) == 1 else f"Rollouts: {len(runs)} runs"
    report = Report(title, Path(output))
    _runs_section(report, runs)
    _returns_section(report, runs)
    _components_section(report, runs)
    _learning_section(report, runs)
    _episode_section(report, runs, sample_id)
    return report


def _sidecar_rows(monitors: Iterable[Path]) -> list[list[str]]:
    rows = []
    for path in monitors:
        sidecar = path.with_name(path.name[: -len(MONITOR_SUFFIX)] + ".json")
        meta: dict[str, Any] = {}
        if sidecar.is_file():
            try:
                meta = json.loads(sidecar.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                meta = {}
        if not isinstance(meta, dict):
            meta = {}
        training = meta.get("training") if isinstance(meta.get("training"), dict) else {}
        stored = meta.get("data")
        data = training.get("data") or (stored.get("source") if isinstance(stored, dict) else None)
        rows.append(
            [
                _monitor_label(path),
                str(meta.get("algo", MISSING)),
                Path(str(data)).name if data else MISSING,
                str(training.get("reward", MISSING)),
                str(training.get("timesteps", MISSING)),
                str(training.get("seed", MISSING)),
            ]
        )
    return rows


def learning_curve_report(monitor_csv_or_dir: Path, output: Path) -> Report:
    """The learning curve of a training output on its own: a ``*.monitor.csv``, a model ``.zip`` (its monitor log
    beside it) or a directory of ``*.monitor.csv`` files; ``ValueError`` (one line) when there is no log."""
    source = Path(monitor_csv_or_dir)
    monitors = monitor_files(source)
    labels: dict[str, Path] = {}
    for path in monitors:
        label = _monitor_label(path)
        labels[label if label not in labels else str(path)] = path
    curve = learning_curve_frame(labels)
    report = Report(f"Learning curve: {source}", Path(output))
    report.heading("Training")
    report.table(["Log", "Algorithm", "Data", "Reward", "Timesteps", "Seed"], _sidecar_rows(monitors))
    rows = []
    for label, path in labels.items():
        part = curve[curve["label"] == label]
        if part.empty:
            rows.append([label, "0", "0", MISSING, MISSING, f"`{path}`"])
            continue
        window = int(part["window"].iloc[0])
        rows.append(
            [
                label,
                str(len(part)),
                f"{int(part['timesteps'].iloc[-1]):,}",
                _fmt(float(part["return"].iloc[:window].mean())),
                _fmt(float(part["return"].iloc[-window:].mean())),
                f"`{path}`",
            ]
        )
    report.heading("Learning curve")
    report.table(["Log", "Episodes", "Timesteps", "First window mean", "Last window mean", "File"], rows)
    if curve.empty:
        report.paragraph("No finished training episode in the monitor log(s): no curve to draw.")
        return report
    report.paragraph(
        "Return of every training episode (the training env's reward) against the training timesteps (cumulative "
        "episode lengths, in the order the episodes ended), and the rolling mean over a tenth of the episodes."
    )
    _figure(report, learning_curve_figure(curve), "learning_curve", "Learning curve from the monitor log(s).", curve)
    return report
