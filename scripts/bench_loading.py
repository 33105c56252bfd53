"""Loading speed: rescue-env's validated loader next to plain `json.loads` of the same file, in one run.

    python scripts/bench_loading.py [PATH] [--repeat 7]

PATH defaults to ../shared/data/rescue_text.jsonl (the whole release, 191 samples) when present, else a
synthetic file of 191 samples. Prints the best-of-N wall time, samples/s and the ratio to json.loads.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rescue_env.data import load_dataset
from rescue_env.data.synthetic import generate_samples, write_jsonl

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default=None)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    path = Path(args.path) if args.path else DEFAULT
    if not path.is_file():
        path = Path(tempfile.mkdtemp()) / "synthetic_191.jsonl"
        write_jsonl(generate_samples(191, seed=0), path)
        print(f"(release data not found; using a synthetic file of 191 samples: {path})")

    def plain() -> int:
        with path.open("rb") as f:
            return len([json.loads(line) for line in f if line.strip()])

    n = plain()
    load_dataset(path)  # warm-up: imports, pydantic schema build
    t_json = best_of(args.repeat, plain)
    t_load = best_of(args.repeat, lambda: load_dataset(path))
    print(f"file: {path} ({path.stat().st_size / 1e6:.1f} MB, {n} samples), best of {args.repeat}")
    print(f"json.loads           {t_json * 1000:8.1f} ms  {n / t_json:10,.0f} samples/s")
    print(
        f"rescue_env loader    {t_load * 1000:8.1f} ms  {n / t_load:10,.0f} samples/s  "
        f"({t_load / t_json:.2f}x json.loads's time; target < 1 s: {'met' if t_load < 1 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
