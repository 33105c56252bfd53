"""Loading speed: rescue-env's validated loader next to plain `json.loads` of the same file, in one run.

    python scripts/bench_loading.py [PATH] [--repeat 7] [--baseline /tmp/baseline]

PATH defaults to ../shared/data/rescue_text.jsonl (the whole release, 191 samples) when present, else a
synthetic file of 191 samples. Prints the best-of-N wall and CPU times, samples/s and the ratio to json.loads
(target <= 1.5x), both timed in this process, alternately; with ``--baseline DIR`` the same figures of the code in DIR
(a subprocess with ``PYTHONPATH=DIR``), measured right after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rescue_env.data import load_dataset
from rescue_env.data.synthetic import generate_samples, write_jsonl

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"


def measure(path: Path, repeat: int) -> tuple[dict[str, float], dict[str, float], int]:
    """Best-of-``repeat`` wall and CPU times of ``json.loads`` of every line and of ``load_dataset``, alternated
    so that a change of load hits both alike (CPU time is the steadier figure on a shared machine)."""

    def plain() -> list:
        with path.open("rb") as f:
            return [json.loads(line) for line in f if line.strip()]

    n = len(plain())
    load_dataset(path)  # warm-up: imports, pydantic schema build
    best: dict[str, dict[str, float]] = {"json": {}, "load": {}}
    for _ in range(repeat):
        for name, fn in (("json", plain), ("load", lambda: load_dataset(path))):
            wall, cpu = time.perf_counter(), time.process_time()
            result = fn()
            times = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
            del result  # freed after the clock stops: loading is timed, not freeing the previous result
            best[name] = {k: min(v, best[name].get(k, v)) for k, v in times.items()}
    return best["json"], best["load"], n


def report(label: str, t_json: dict[str, float], t_load: dict[str, float], n: int) -> None:
    for clock in ("wall", "cpu"):
        ratio = t_load[clock] / t_json[clock]
        print(
            f"{label:9s} {clock:4s} json.loads {t_json[clock] * 1000:7.1f} ms   load_dataset "
            f"{t_load[clock] * 1000:7.1f} ms ({n / t_load[clock]:6,.0f} samples/s)   ratio {ratio:.2f}x "
            f"(target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default=None)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", type=Path, default=None, help="also time the loader of this checkout")
    parser.add_argument("--label", default="now", help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = Path(args.path) if args.path else DEFAULT
    if not path.is_file():
        path = Path(tempfile.mkdtemp()) / "synthetic_191.jsonl"
        write_jsonl(generate_samples(191, seed=0), path)
        print(f"(release data not found; using a synthetic file of 191 samples: {path})")
    if args.label == "now":
        print(
            f"file: {path} ({path.stat().st_size / 1e6:.1f} MB), best of {args.repeat}; load average "
            f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
    report(args.label, *measure(path, args.repeat))
    if args.baseline is not None:
        env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
        command = [sys.executable, __file__, str(path), "--repeat", str(args.repeat), "--label", "baseline"]
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
