"""Scoring speed, all measured in one run:

1. the whole ``rescue-bench evaluate --agent heuristic --no-bertscore`` process (a subprocess, timed as a user
   times it) with the default 1,000 bootstrap resamples and with ``--bootstrap 0``, and the ratio (target <= 2x);
   with ``--baseline DIR`` the same two runs of the code in DIR (``PYTHONPATH=DIR python -m rescue_env.cli``);
2. the bootstrap alone per task (the three scopes of ``results.json``): per-resample ``task.summary`` (the old
   way; timed on ``--old-resamples`` resamples and scaled to 1,000) against the vectorised ``summary_draws``, and
   whether the two give identical intervals on the same resamples.

    python scripts/bench_scoring.py [--data PATH] [--repeat 3] [--old-resamples 100] [--baseline /tmp/baseline]

--data defaults to ../shared/data/rescue_text.jsonl (the release) when present, else the demo data. Without the
judge and BERTScore, ER and VP are scored on their non-model metrics (S_int, intensity MAE, target match).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import bootstrap
from benchmarks.registry import TASK_NAMES, get_task
from benchmarks.reports.run import load_run
from benchmarks.results import SCOPES

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"
RESAMPLES = 1000  # the runner's default (--bootstrap)


def evaluate_command(data: str, resamples: int, output: Path, baseline: Path | None) -> tuple[list[str], dict]:
    env = dict(os.environ)
    if baseline is not None:
        env["PYTHONPATH"] = str(baseline)
        command = [sys.executable, "-m", "rescue_env.cli"]
    else:
        script = Path(sys.executable).with_name("rescue-bench")
        command = [str(script)] if script.is_file() else [sys.executable, "-m", "rescue_env.cli"]
    command += ["evaluate", "--agent", "heuristic", "--data", data, "--no-bertscore", "--no-progress"]
    command += ["--bootstrap", str(resamples), "--output", str(output)]
    return command, env


def time_process(data: str, resamples: int, output: Path, baseline: Path | None) -> float:
    command, env = evaluate_command(data, resamples, output, baseline)
    shutil.rmtree(output, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, cwd=baseline or None)
    return time.perf_counter() - start


def whole_process(data: str, repeat: int, work: Path, baseline: Path | None, label: str) -> Path:
    """Best of ``repeat`` wall times of each configuration, alternated so that load changes hit both alike."""
    times: dict[int, list[float]] = {RESAMPLES: [], 0: []}
    for _ in range(repeat):
        for resamples in times:
            times[resamples].append(time_process(data, resamples, work / f"{label}-{resamples}", baseline))
    on, off = min(times[RESAMPLES]), min(times[0])
    verdict = "met" if on <= 2 * off else "NOT met"
    print(
        f"{label:9s} evaluate --bootstrap {RESAMPLES}: {on:6.2f} s   --bootstrap 0: {off:6.2f} s   "
        f"ratio {on / off:5.2f}x (target <= 2x: {verdict}; best of {repeat})"
    )
    return work / f"{label}-{RESAMPLES}"


def scope_scores(run_dir: Path, task: str) -> dict[str, list[dict]]:
    """The per-instance scores of ``task`` per scope, in run order, as ``results.build_results`` bootstraps them."""
    records = [r for r in load_run(run_dir).task_records(task) if r.get("score") is not None]
    return {s: [r["score"] for r in records if s == "all" or r["scenario"] == s] for s in SCOPES}


def bootstrap_alone(run_dir: Path, old_resamples: int) -> None:
    print(
        f"\nbootstrap alone, {RESAMPLES} resamples, the three scopes of results.json (old: per-resample task.summary, "
        f"timed on {old_resamples} resamples and scaled; same draws checked on those {old_resamples}):"
    )
    print(f"{'task':5s} {'instances':>9s} {'old (s)':>9s} {'new (s)':>9s} {'speed-up':>9s}  identical")
    total_old = total_new = 0.0
    for name in TASK_NAMES:
        task = get_task(name)
        scopes = scope_scores(run_dir, name)
        if not scopes["all"]:
            continue
        start = time.perf_counter()
        slow = [bootstrap.intervals(task, s, old_resamples, 0, vectorised=False) for s in scopes.values()]
        old = (time.perf_counter() - start) * RESAMPLES / old_resamples
        fast_same = [bootstrap.intervals(task, s, old_resamples, 0) for s in scopes.values()]
        start = time.perf_counter()
        for s in scopes.values():
            bootstrap.intervals(task, s, RESAMPLES, 0)
        new = time.perf_counter() - start
        total_old, total_new = total_old + old, total_new + new
        same = "yes" if slow == fast_same else "NO"
        print(f"{name:5s} {len(scopes['all']):9d} {old:9.2f} {new:9.3f} {old / new:8.0f}x  {same}")
    print(f"{'all':5s} {'':9s} {total_old:9.2f} {total_new:9.3f} {total_old / total_new:8.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None, help="data path (default: the release when present, else demo)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each evaluate configuration (best counts)")
    parser.add_argument("--old-resamples", type=int, default=100, help="resamples the per-resample loop is timed on")
    parser.add_argument("--baseline", type=Path, default=None, help="also time the code of this checkout")
    args = parser.parse_args()
    data = args.data or (str(RELEASE) if RELEASE.is_file() else "demo")
    what = "the release" if data == str(RELEASE) else ("the demo data" if data == "demo" else data)
    print(f"data: {what} ({data}); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    work = Path(tempfile.mkdtemp(prefix="bench-scoring-"))
    try:
        run_dir = whole_process(data, args.repeat, work, None, "now")
        if args.baseline is not None:
            whole_process(data, args.repeat, work, args.baseline.resolve(), "baseline")
        bootstrap_alone(run_dir, args.old_resamples)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
