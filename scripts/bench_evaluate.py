"""Evaluation harness figures, all measured in one run:

1. harness time per instance with an instant model (litellm's mock_response), next to the built-in heuristic
   agent (no litellm at all);
2. wall time at 16 connections against the local OpenAI-compatible server with a fixed 50 ms latency, one
   instance per request, as a multiple of the ideal (instances x latency / connections);
3. prompt tokens per instance: our rendering against the authors' JSON-record layout for the same instances;
4. BERTScore pairs/s on the packaged MiniLM.

    python scripts/bench_evaluate.py [--data PATH] [--limit N]

--data defaults to ../shared/data/rescue_text.jsonl when present, else the demo data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agents.client import LLMClient, ModelConfig  # noqa: E402
from agents.fake_server import example_responder, server_process  # noqa: E402
from benchmarks.base import PromptOptions  # noqa: E402
from benchmarks.registry import get_task, make_batches  # noqa: E402
from benchmarks.runner import EvalConfig, Evaluation  # noqa: E402
from benchmarks.runs import RunOptions  # noqa: E402
from rescue_env.data import load_dataset  # noqa: E402
from rescue_env.data.domain import participants  # noqa: E402
from rescue_env.data.overlaps import leak_groups  # noqa: E402

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "data" / "rescue_text.jsonl"


def echo(messages: list[dict[str, str]]) -> str:
    return example_responder({"messages": messages})


def timed_run(config: EvalConfig, dataset, client: LLMClient | None = None) -> tuple[float, int]:
    directory = Path(tempfile.mkdtemp(prefix="rescue-bench-"))
    try:
        evaluation = Evaluation(
            config, directory, dataset=dataset, options=RunOptions(progress=False, command=["bench"])
        )
        if client is not None:
            evaluation._client = client
        start = time.perf_counter()
        results = evaluation.run()
        elapsed = time.perf_counter() - start
        return elapsed, sum(t["instances"] for t in results["tasks"].values())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def openai_sdk_wall(base_url: str, count: int, connections: int) -> float:
    """Reference: the same number of requests straight through the openai SDK (no litellm, no harness)."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-no-key")
    gate = asyncio.Semaphore(connections)
    messages = [{"role": "user", "content": '### Item 1\nin this form:\n{"answers": [{"id": "1"}]}'}]

    async def one() -> None:
        async with gate:
            await client.chat.completions.create(model="fake", messages=messages)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - start


def authors_record(sample, position: int) -> dict:
    """A row as the authors' scripts send it (reference-spec 2.4, dialogue mode): a JSON record."""
    row = sample.rows[position]
    return {
        "row_index": position + 1,
        "primary_speaker": row.primary_speaker,
        "target": [t for t in row.target if t.strip()],
        "dialogue_cleaned": row.dialogue_cleaned,
        "background_dialogue": [b.to_record() for b in row.background_dialogue],
        "timestamp": f"{row.start_time:.3f}-{row.end_time:.3f}",
    }


def authors_context(task_name: str, sample, position: int) -> dict:
    if task_name == "itp":
        rows = range(max(0, position - 2), position + 1)
        return {
            "candidate_id": f"{sample.sample_id}__after_row{position + 1}",
            "decision_after_row": authors_record(sample, position),
            "prior_context": [authors_record(sample, p) for p in rows],
        }
    rows = range(0, position) if task_name == "rpp" else range(max(0, position - 3), position)
    return {
        "turn_id": f"{sample.sample_id}__row{position + 1}",
        "row_index": position + 1,
        "participants": participants(sample),
        "prior_context": [authors_record(sample, p) for p in rows],
    }


def token_comparison(dataset, limit: int) -> list[str]:
    import litellm

    def count(text: str) -> int:
        return litellm.token_counter(model="gpt-4o", text=text)

    samples = {s.sample_id: s for s in dataset}
    groups = leak_groups(dataset)
    lines = []
    for name in ("itp", "rpp", "stp", "ssp"):
        task = get_task(name)
        instances = task.build_instances(dataset.samples)[:limit]
        ours_prompt = ours_items = authors = 0
        for batch in make_batches(instances, task.batch_size, groups):
            messages = task.render(batch, samples, PromptOptions())
            text = "\n".join(m["content"] for m in messages)
            ours_prompt += count(text)
            ours_items += sum(count(block) for block in text.split("### Item ")[1:])
            authors += sum(
                count(json.dumps(authors_context(name, samples[i.sample_id], i.row), ensure_ascii=False)) for i in batch
            )
        n = len(instances)
        lines.append(
            f"  {name.upper()}: context per instance {ours_items / n:7.1f} tokens (ours) vs {authors / n:7.1f} "
            f"(authors' JSON records) = {ours_items / authors:.2f}x; whole prompt incl. instructions and label "
            f"definitions {ours_prompt / n:7.1f} tokens/instance"
        )
    return lines


def bertscore_rate(dataset) -> str:
    from benchmarks.bertscore import BERTScore

    phrases = [
        e.emotion_description for s in dataset for r in s.rows for e in r.internal_emotion if e.emotion_description
    ]
    pairs = (phrases * (1 + 1024 // max(1, len(phrases))))[:1024]
    scorer = BERTScore()
    scorer.score(pairs[:8], pairs[1:9])  # load the model outside the timing
    start = time.perf_counter()
    scorer.score(pairs, pairs[::-1])
    elapsed = time.perf_counter() - start
    return (
        f"  {len(pairs) / elapsed:,.0f} pairs/s ({len(pairs)} pairs in {elapsed:.2f} s; {scorer.description['model']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--limit", type=int, default=400, help="instances per task (default 400)")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    data = args.data or (str(RELEASE) if RELEASE.is_file() else "demo")
    dataset = load_dataset(data)
    print(f"data: {dataset.source} ({len(dataset)} samples); limit {args.limit} instances per task")

    tasks = ["itp", "rpp", "stp", "ssp"]
    base = {"tasks": tasks, "bertscore": False, "bootstrap": 0, "limit": args.limit, "data": data}
    mock = LLMClient(ModelConfig(model="openai/mock"), max_connections=16, mock_response=echo)
    t_mock, n = timed_run(EvalConfig(agent="litellm", model="openai/mock", **base), dataset, mock)
    t_heur, _ = timed_run(EvalConfig(agent="heuristic", **base), dataset)
    print("1. harness time per instance (ITP, RPP, STP, SSP; paper batch sizes)")
    print(f"  instant litellm mock model: {1000 * t_mock / n:.2f} ms/instance ({n} instances, {t_mock:.2f} s)")
    print(
        f"  heuristic agent (no litellm): {1000 * t_heur / n:.2f} ms/instance "
        f"(litellm's own overhead: {1000 * (t_mock - t_heur) / n:.2f} ms/instance)"
    )

    with server_process(args.latency) as base_url:
        config = EvalConfig(
            agent="litellm",
            model="openai/fake",
            api_base=base_url,
            batch_size=1,
            tasks=["itp"],
            bertscore=False,
            bootstrap=0,
            limit=args.limit,
            data=data,
        )
        client = LLMClient(ModelConfig(model="openai/fake", api_base=base_url), max_connections=args.connections)
        wall, count = timed_run(config, dataset, client)
        sdk = asyncio.run(openai_sdk_wall(base_url, count, args.connections))
    ideal = count * args.latency / args.connections
    print(
        f"2. {count} instances (one request each, server in its own process), {args.connections} connections, "
        f"{1000 * args.latency:.0f} ms latency"
    )
    print(
        f"  wall {wall:.2f} s vs ideal {ideal:.2f} s = {wall / ideal:.2f}x the ideal "
        f"({100 * ideal / wall:.0f} % of ideal throughput)"
    )
    print(
        f"  reference, same requests through the openai SDK alone: {sdk:.2f} s = {sdk / ideal:.2f}x the ideal "
        f"(the rest is litellm's per-request CPU cost on this machine)"
    )

    print("3. prompt tokens per instance (gpt-4o tokenizer, dialogue mode)")
    for line in token_comparison(dataset, args.limit):
        print(line)

    print("4. BERTScore")
    print(bertscore_rate(dataset))


if __name__ == "__main__":
    main()
