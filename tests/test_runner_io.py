"""The runner's request window and predictions log (benchmarks/runner.py): what makes a model run keep its
connections busy without building every prompt first, and its log cheap to write."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from benchmarks import runner
from benchmarks.runner import RunStore, _as_completed


def test_the_window_bounds_what_runs_over_every_caller_and_starts_nothing_early() -> None:
    created: list[str] = []
    running = {"now": 0, "most": 0}

    async def job(name: str) -> str:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.001)
        running["now"] -= 1
        return name

    def jobs(prefix: str, count: int):
        for k in range(count):
            created.append(f"{prefix}{k}")  # a coroutine is created (its prompt built) only when it has a place
            yield job(f"{prefix}{k}")

    async def consume(prefix: str, window: asyncio.Semaphore) -> list[str]:
        async with contextlib.aclosing(_as_completed(jobs(prefix, 20), window)) as results:
            return [name async for name in results]

    async def main() -> tuple[list[str], list[str]]:
        window = asyncio.Semaphore(3)
        first = asyncio.ensure_future(consume("a", window))
        await asyncio.sleep(0)
        assert len(created) <= 3  # not 20: the rest wait for a place
        return await first, await consume("b", window)

    async def both() -> tuple[list[str], list[str]]:
        window = asyncio.Semaphore(3)
        return await asyncio.gather(consume("a", window), consume("b", window))

    a, b = asyncio.run(main())
    assert sorted(a) == sorted(f"a{k}" for k in range(20)) and sorted(b) == sorted(f"b{k}" for k in range(20))
    running["most"] = 0
    a, b = asyncio.run(both())
    assert len(a) == len(b) == 20 and running["most"] <= 3  # shared: three at once over both callers


def test_a_consumer_that_stops_cancels_what_runs_and_begins_nothing_more() -> None:
    created: list[int] = []
    cancelled: list[int] = []

    async def job(k: int) -> int:
        try:
            await asyncio.sleep(0 if k == 0 else 10)
        except asyncio.CancelledError:
            cancelled.append(k)
            raise
        return k

    def jobs():
        for k in range(50):
            created.append(k)
            yield job(k)

    async def main() -> None:
        async with contextlib.aclosing(_as_completed(jobs(), asyncio.Semaphore(4))) as results:
            async for k in results:
                assert k == 0
                break  # e.g. the failure budget

    asyncio.run(main())
    assert len(created) <= 5 and sorted(cancelled) == sorted(created[1:])


def test_the_log_keeps_its_records_and_flushes_at_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "FLUSH_SECONDS", 3600.0)  # nothing flushed before close
    store = RunStore(tmp_path)
    store.write([{"instance_id": "a", "x": 1}, {"instance_id": "b", "x": 2}])
    store.write([{"instance_id": "a", "x": 3}])
    assert store.records["a"]["x"] == 3
    store.close()
    lines = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["x"] for r in lines] == [1, 2, 3]
    assert RunStore(tmp_path).records == {"a": {"instance_id": "a", "x": 3}, "b": {"instance_id": "b", "x": 2}}
    store.write([{"instance_id": "c", "x": 4}])  # reopened after close
    store.compact(["a", "b", "c"])
    assert [json.loads(line)["x"] for line in (tmp_path / "predictions.jsonl").read_text().splitlines()] == [3, 2, 4]


def test_the_log_is_flushed_at_most_every_flush_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = {"now": 100.0}
    monkeypatch.setattr(runner.time, "monotonic", lambda: clock["now"])
    store = RunStore(tmp_path)
    store.write([{"instance_id": "a"}])
    assert (tmp_path / "predictions.jsonl").read_text() == ""  # within FLUSH_SECONDS of the store's start
    clock["now"] += runner.FLUSH_SECONDS
    store.write([{"instance_id": "b"}])
    assert len((tmp_path / "predictions.jsonl").read_text().splitlines()) == 2  # both, at once
    store.close()
