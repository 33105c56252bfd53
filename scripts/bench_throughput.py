"""Model-run throughput of ``rescue-bench evaluate`` and ``rescue-bench rollout``, against the ideal, in one run.

Against the local OpenAI-compatible server (``agents.fake_server``, in a process of its own, fixed latency L):

1. start-up: ``import litellm`` in a fresh interpreter, next to ``python -c pass``;
2. requests/s at saturation (C_max connections) and CPU per request of: plain aiohttp (the server alone: what
   it sustains, the limit every other row is a ratio to; measured first and last, their mean), plain httpx,
   the harness's direct route alone (``agents.openai_route.DirectRoute``: aiohttp and the ``openai`` exceptions),
   litellm's ``acompletion`` alone on its openai SDK route and on its own HTTP handler (the one the harness's
   litellm route uses: ``EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER``), the harness client
   (``agents.client.LLMClient``, one process) on its direct route and on its litellm route
   (``RESCUE_MODEL_ROUTE=litellm``), and the harness client with ``--workers`` processes (requests/s only: the
   CPU is the workers');
3. the whole ``rescue-bench evaluate`` process (a subprocess, timed as a user times it, start-up included) on the
   four ranked tasks (ITP, RPP, STP, SSP) of the release, or of the demo data when the release is absent, at each
   connection count (``--no-bertscore --bootstrap 0``: the requests are what is measured; the bootstrap has its
   own benchmark, ``scripts/bench_scoring.py``): wall time, the ideal (requests x L / connections) and the ratio,
   and with ``--baseline DIR`` the same run of an older checkout against the same server; then runs at the
   middle connection count split into where the time goes (start-up and imports, loading, building instances,
   probe, requests (prompts are built as they are sent), scoring, writing), and the same run on the litellm route
   (``RESCUE_MODEL_ROUTE=litellm``: its probe waits for the background ``import litellm``); and the
   ``--model mock`` route (litellm's ``mock_response``, with litellm's ``mock_delay`` = L: no server);
4. the same for ``rescue-bench rollout`` (an LLM therapist on ``Rescue-v0``): its ideal is
   max(sum of steps x L / connections, the longest episode's steps x L), since an episode's steps are sequential.

    python scripts/bench_throughput.py [--connections 16,64,256] [--latency 0.2] [--workers auto]
                                       [--limit N] [--episodes 40] [--skip-rollout] [--baseline DIR]

``--workers auto`` runs one process up to 16 connections, and above it both one process and one per core.
Figures are only comparable within one run (the machine's load moves them all); the load average is printed at
the start and the end. A default run takes about 5 minutes on an idle 2-core machine (``--workers 2`` and
``--skip-rollout`` shorten it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agents.fake_server import server_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT.parent / "shared" / "data" / "rescue_text.jsonl"
RANKED = "itp,rpp,stp,ssp"
MESSAGES = [{"role": "user", "content": '### Item 1\nin this form:\n{"answers": [{"id": "1"}]}'}]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def workers_for(spec: str, connections: int) -> list[int]:
    """The ``--workers`` values to run at ``connections``: ``auto`` is 1, and one per core too above 16."""
    if spec != "auto":
        return sorted({int(w) for w in spec.split(",")})
    return [1] if connections <= 16 else sorted({1, os.cpu_count() or 1})


# ----------------------------------------------------------------------------------------------------------------
# 1. start-up


def import_seconds(code: str, repeats: int = 2) -> float:
    """The best of ``repeats`` fresh interpreters running ``code`` (wall seconds, interpreter start included)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
        best = min(best, time.perf_counter() - started)
    return best


# ----------------------------------------------------------------------------------------------------------------
# 2. saturation


async def saturate(kind: str, base_url: str, requests: int, connections: int, workers: int = 1) -> tuple[float, float]:
    """(requests/s, CPU ms per request in this process) for ``requests`` requests, ``connections`` at once."""
    gate = asyncio.Semaphore(connections)
    close = None
    if kind == "httpx":
        import httpx

        http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections), timeout=120
        )
        close = http.aclose

        async def call(i: int) -> None:
            response = await http.post(base_url + "/chat/completions", json={"model": "fake", "messages": MESSAGES})
            response.raise_for_status()
            response.json()

    elif kind == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections))
        close = session.close

        async def call(i: int) -> None:
            async with session.post(
                base_url + "/chat/completions", json={"model": "fake", "messages": MESSAGES}
            ) as response:
                response.raise_for_status()
                await response.json()

    elif kind == "direct":
        from agents.openai_route import DirectRoute

        route = DirectRoute(base_url, connections)
        request = {"model": "openai/fake", "messages": MESSAGES, "timeout": 120.0, "api_key": "sk-no-key"}

        async def call(i: int) -> None:
            await route.create(request)

    elif kind in ("litellm", "litellm-sdk"):
        from agents.client import OPENAI_ROUTE_ENV, _import_litellm

        litellm = _import_litellm()
        # litellm reads its route switch per request: "false" is its openai SDK route, "true" its own HTTP handler
        os.environ[OPENAI_ROUTE_ENV] = "false" if kind == "litellm-sdk" else "true"

        def restore() -> None:
            os.environ[OPENAI_ROUTE_ENV] = "true"

        close = restore

        async def call(i: int) -> None:
            await litellm.acompletion(
                model="openai/fake", messages=MESSAGES, api_base=base_url, api_key="sk-no-key", num_retries=0
            )

    else:  # the harness client ("harness": its direct route, "harness-litellm": its litellm route)
        from agents.client import LLMClient, ModelConfig
        from agents.openai_route import ROUTE_ENV

        os.environ[ROUTE_ENV] = "litellm" if kind == "harness-litellm" else "auto"
        client = LLMClient(
            ModelConfig(model="openai/fake", api_base=base_url), max_connections=connections, workers=workers
        )
        client.start_workers()
        close = None

        async def call(i: int) -> None:
            completion = await client.complete([*MESSAGES, {"role": "user", "content": str(i)}])  # no cache hits
            if not completion.ok:
                raise RuntimeError(completion.error)

    async def one(i: int) -> None:
        async with gate:
            await call(i)

    await asyncio.gather(*(one(-1 - i) for i in range(min(connections, 32))))  # warm up: imports, connections
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if close is not None:
        closed = close()
        if asyncio.iscoroutine(closed):
            await closed
    if kind.startswith("harness"):
        client.close()
        os.environ.pop(ROUTE_ENV, None)
    return requests / wall, 1000 * cpu / requests


# ----------------------------------------------------------------------------------------------------------------
# 3. and 4. the CLI, as a user runs it

PHASES = r"""
import json, sys, time
T = {"process": float(sys.argv[1])}
import asyncio
from benchmarks import runner, results
import rescue_env.cli as cli
T["imported"] = time.time()
SPANS = {}
def timed(owner, name, label, is_async=False):
    original = getattr(owner, name)
    def note(started):
        first, last = SPANS.get(label, (started, started))
        SPANS[label] = (min(first, started), max(last, time.time()))
    if is_async:
        async def wrapper(*a, **k):
            t = time.time()
            try:
                return await original(*a, **k)
            finally:
                note(t)
    else:
        def wrapper(*a, **k):
            t = time.time()
            try:
                return original(*a, **k)
            finally:
                note(t)
    setattr(owner, name, wrapper)
timed(cli, "load_dataset", "loading the data")
timed(runner.Evaluation, "instances", "building instances")
timed(runner.Evaluation, "probe", "probe (on the litellm route: waits for its import)", True)
timed(runner.Evaluation, "_predict", "requests (prompts built as sent)", True)
timed(results, "score_plan", "scoring")
timed(runner.RunStore, "compact", "writing")
timed(results, "write_results", "writing")
code = cli.main(sys.argv[2:])
T["end"] = time.time()
T["spans"] = SPANS
print("PHASES " + json.dumps(T), file=sys.stderr)
sys.exit(code)
"""


def _span(found: dict | None, prefix: str) -> tuple[float, float]:
    for label, span in (found or {}).get("spans", {}).items():
        if label.startswith(prefix):
            return span[0], span[1]
    return 0.0, 0.0


def run_cli(
    argv: list[str], phases: bool = False, code: Path | None = None, route: str = "auto"
) -> tuple[float, dict | None]:
    """Wall seconds of ``rescue-bench ARGV`` in a subprocess (and its phases when asked); ``code``: run another
    checkout of the project instead (e.g. an unchanged copy, for the old figures); ``route``:
    ``RESCUE_MODEL_ROUTE`` (``litellm``: the route the harness took before its direct one)."""
    from agents.openai_route import ROUTE_ENV

    started = time.time()
    if phases:
        command = [sys.executable, "-c", PHASES, repr(started), *argv]
    else:
        command = [sys.executable, "-m", "rescue_env.cli", *argv]
    env = {**os.environ, ROUTE_ENV: route}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    done = subprocess.run(command, capture_output=True, text=True, cwd=code or ROOT, env=env)
    wall = time.time() - started
    if done.returncode != 0:
        raise RuntimeError(f"rescue-bench {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    found = None
    for line in done.stderr.splitlines():
        if line.startswith("PHASES "):
            found = json.loads(line.removeprefix("PHASES "))
    return wall, found


def show_phases(found: dict, wall: float) -> list[str]:
    """Each phase's span (first start to last end; the tasks' requests overlap, so their spans are merged)."""
    rows = [("start-up: interpreter and imports of the CLI", found["imported"] - found["process"])]
    spans = sorted(found["spans"].items(), key=lambda item: item[1][0])
    rows += [(label, last - first) for label, (first, last) in spans]
    covered = sum(seconds for _, seconds in rows)
    rows.append(("other (config, directory, printing, exit)", wall - covered))
    lines = [f"      {name:46s} {seconds:6.2f} s" for name, seconds in rows]
    return [*lines, f"      {'whole process':46s} {wall:6.2f} s"]


def evaluate_argv(data: str, base_url: str, connections: int, workers: int, limit: int | None, out: Path) -> list[str]:
    argv = ["evaluate", "--data", data, "--tasks", RANKED, "--model", "openai/fake", "--api-base", base_url]
    argv += ["--max-connections", str(connections), "--workers", str(workers), "--no-bertscore", "--bootstrap", "0"]
    argv += ["--no-progress", "--output", str(out)]
    return argv + (["--limit", str(limit)] if limit is not None else [])


def planned_requests(data: str, limit: int | None) -> int:
    from benchmarks.registry import get_task, make_batches
    from benchmarks.runner import limit_instances
    from rescue_env.data import load_dataset
    from rescue_env.data.overlaps import leak_groups

    dataset = load_dataset(data)
    groups = leak_groups(dataset)
    total = 0
    for name in RANKED.split(","):
        task = get_task(name)
        instances = limit_instances(task.build_instances(dataset.samples), limit)
        total += len(make_batches(instances, task.batch_size, groups))
    return total


def mock_run(
    data: str, connections: int, workers: int, delay: float, limit: int | None, out: Path
) -> tuple[float, int]:
    """``--model mock`` with litellm's own ``mock_delay`` (the "mock model with latency"), in this process: wall
    seconds (the client's start included) and the requests sent."""
    from agents.client import LLMClient, ModelConfig
    from benchmarks.runner import EvalConfig, Evaluation
    from benchmarks.runs import RunOptions

    config = EvalConfig(data=data, tasks=RANKED.split(","), agent="litellm", model="mock", limit=limit)
    config = config.model_copy(update={"bertscore": False, "bootstrap": 0})
    options = RunOptions(progress=False, command=["bench"], max_connections=connections, workers=workers)
    started = time.perf_counter()
    evaluation = Evaluation(config, out, options=options)
    client = LLMClient(
        ModelConfig(model="mock", extra_params={"mock_delay": delay}), max_connections=connections, workers=workers
    )
    evaluation._client = client
    evaluation.run()
    return time.perf_counter() - started, client.usage.calls


def rollout_plan(data: str, episodes: int) -> list[int]:
    from benchmarks.rollout import Rollout, RolloutConfig

    config = RolloutConfig(data=data, model="openai/fake", api_base="http://127.0.0.1:9/v1", episodes=episodes)
    rollout = Rollout(config, Path(tempfile.gettempdir()) / "unused-rollout-plan")
    return [rollout.planned_steps([s]) for s in rollout.samples]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(RELEASE) if RELEASE.is_file() else "demo")
    parser.add_argument("--connections", default="16,64,256", help="comma-separated (default: %(default)s)")
    parser.add_argument("--latency", type=float, default=0.2, help="server seconds per request (default: %(default)s)")
    parser.add_argument(
        "--workers", default="auto", help="--workers of the runs: N, N,M or auto (default: %(default)s)"
    )
    parser.add_argument("--limit", type=int, default=None, help="evaluate: instances per task (default: all)")
    parser.add_argument("--episodes", type=int, default=40, help="rollout episodes (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=1000, help="saturation requests (default: %(default)s)")
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="an unchanged older checkout: its evaluate is timed too, against the same server (default: none)",
    )
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.connections.split(",")]
    where = (
        "the release"
        if args.data == str(RELEASE)
        else ("the DEMO data (release absent)" if args.data == "demo" else args.data)
    )
    print(f"data: {where}; server latency {1000 * args.latency:.0f} ms; {os.cpu_count()} cores; load {load()}")

    print("1. start-up (best of 2 fresh interpreters)")
    bare = import_seconds("pass")
    lite = import_seconds("import litellm")
    print(
        f"  python -c pass {bare:.2f} s; python -c 'import litellm' {lite:.2f} s (litellm alone: {lite - bare:.2f} s)"
    )

    scratch = Path(tempfile.mkdtemp(prefix="rescue-throughput-"))
    try:
        with server_process(args.latency) as base_url:
            top = max(counts)
            many = max(workers_for(args.workers, top))
            print(
                f"2. saturation: {args.requests} requests, {top} connections (ideal {top / args.latency:,.0f}/s); "
                "each against plain aiohttp (the limit: what the server sustains), measured before and after"
            )
            rows = [
                ("plain aiohttp (the server alone), before", "aiohttp", 1),
                ("plain httpx", "httpx", 1),
                ("the direct route alone (aiohttp)", "direct", 1),
                ("litellm.acompletion, its openai SDK route", "litellm-sdk", 1),
                ("litellm.acompletion, its own HTTP handler", "litellm", 1),
                ("harness client, 1 process", "harness", 1),
                ("harness client, 1 process, litellm route", "harness-litellm", 1),
                (f"harness client, {many} worker processes", "harness", many),
                ("plain aiohttp (the server alone), after", "aiohttp", 1),
            ]
            measured = []
            for label, kind, workers in rows:
                if kind == "harness" and workers == 1 and many == 1 and label.endswith("processes"):
                    continue
                rate, cpu = asyncio.run(saturate(kind, base_url, args.requests, top, workers))
                measured.append((label, kind, workers, rate, cpu))
            limit = sum(rate for _, kind, _, rate, _ in measured if kind == "aiohttp") / 2
            print(f"  {'client':44s} {'requests/s':>10s} {'x aiohttp':>9s}  CPU/request in this process")
            for label, kind, workers, rate, cpu in measured:
                cpu_text = f"{cpu:5.2f} ms" if workers == 1 else "(in the workers)"
                target = "  (target >= 0.5x)" if kind == "harness" and workers == 1 else ""
                print(f"  {label:44s} {rate:10.0f} {rate / limit:8.2f}x  {cpu_text}{target}")
            print(f"  (the limit, plain aiohttp: the mean of before and after, {limit:,.0f} requests/s)")

            requests = planned_requests(args.data, args.limit)
            print(f"3. rescue-bench evaluate, {RANKED} ({requests} requests), whole process")
            for connections in counts:
                for workers in workers_for(args.workers, connections):
                    out = scratch / f"evaluate-{connections}-{workers}"
                    wall, _ = run_cli(evaluate_argv(args.data, base_url, connections, workers, args.limit, out))
                    ideal = requests * args.latency / connections
                    print(
                        f"  {connections:4d} connections, --workers {workers}: {wall:6.2f} s, ideal {ideal:6.2f} s, "
                        f"{wall / ideal:5.2f}x ideal (target 1.5x)"
                    )
                if args.baseline is not None:
                    argv = evaluate_argv(
                        args.data, base_url, connections, 1, args.limit, scratch / f"old-{connections}"
                    )
                    at = argv.index("--workers")
                    wall, _ = run_cli(argv[:at] + argv[at + 2 :], code=args.baseline.resolve())  # no --workers then
                    ideal = requests * args.latency / connections
                    print(f"  {connections:4d} connections, old checkout: {wall:6.2f} s, {wall / ideal:5.2f}x ideal")
            middle = counts[len(counts) // 2]
            ideal = requests * args.latency / middle
            for workers in workers_for(args.workers, middle):
                out = scratch / f"evaluate-phases-{workers}"
                wall, found = run_cli(evaluate_argv(args.data, base_url, middle, workers, args.limit, out), phases=True)
                print(
                    f"  where the time goes at {middle} connections, --workers {workers}: {wall:.2f} s, "
                    f"{wall / ideal:.2f}x ideal (seconds):"
                )
                for line in show_phases(found or {}, wall):
                    print(line)
            out = scratch / "evaluate-litellm-route"
            wall_plain, found = run_cli(
                evaluate_argv(args.data, base_url, middle, 1, args.limit, out), phases=True, route="litellm"
            )
            print(
                f"  the same, --workers 1, on the litellm route (RESCUE_MODEL_ROUTE=litellm; `import litellm` on a "
                f"thread): {wall_plain:.2f} s, {wall_plain / ideal:.2f}x ideal; its probe waits "
                f"{_span(found, 'probe')[1] - _span(found, 'probe')[0]:.2f} s"
            )

            print(f"  the mock model (litellm's mock_response with mock_delay {args.latency:g} s, no server), in this")
            print("  process (litellm already imported; the workers' own import is included):")
            for count_workers in sorted({1, workers}):
                out = scratch / f"mock-{count_workers}"
                wall, count = mock_run(args.data, middle, count_workers, args.latency, args.limit, out)
                ideal = count * args.latency / middle
                print(
                    f"    {middle} connections, workers {count_workers}: {wall:6.2f} s for {count} requests, "
                    f"ideal {ideal:.2f} s, {wall / ideal:.2f}x ideal"
                )

            if not args.skip_rollout:
                steps = rollout_plan(args.data, args.episodes)
                print(f"4. rescue-bench rollout, {len(steps)} episodes, {sum(steps)} decisions, whole process")
                for connections in counts:
                    for workers in workers_for(args.workers, min(connections, len(steps))):
                        out = scratch / f"rollout-{connections}-{workers}"
                        argv = ["rollout", "--data", args.data, "--model", "openai/fake", "--api-base", base_url]
                        argv += ["--episodes", str(args.episodes), "--max-connections", str(connections)]
                        argv += ["--workers", str(workers), "--no-progress", "--output", str(out), "--bootstrap", "0"]
                        wall, _ = run_cli(argv)
                        ideal = max(sum(steps) * args.latency / connections, max(steps) * args.latency)
                        print(
                            f"  {connections:4d} connections, --workers {workers}: {wall:6.2f} s, ideal {ideal:6.2f} s,"
                            f" {wall / ideal:5.2f}x ideal (longest episode {max(steps) * args.latency:.2f} s)"
                        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
