"""Batched requests never show an instance what it may not see, also through an overlapping segment of the same
session (issue 23): the batching key, overlap detection, and the request count it costs."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_row

from benchmarks.base import Instance
from benchmarks.registry import TASK_NAMES, get_task, make_batches
from benchmarks.runner import EvalConfig, Evaluation
from benchmarks.runs import RunOptions
from rescue_env.data import load_dataset
from rescue_env.data.overlaps import Overlap, across_groups, leak_groups, overlapping_segments
from rescue_env.data.splits import group_of

DEMO = Path(__file__).resolve().parents[1] / "rescue_env" / "data" / "demo" / "rescue_demo.jsonl"


def _overlapping_file(tmp_path: Path) -> Path:
    """The demo data plus two overlapping segments of one couple's session (rows 0-24 and 12-36 of the first demo
    conversation, under new ids of one couple), the release's shape: one segment's later rows are the other's
    first rows, word for word."""
    records = [json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()]
    first = records[0]
    early = {**first, "sample_id": "overlap_couple/001_segment01", "rows": first["rows"][:25]}
    late = {**first, "sample_id": "overlap_couple/002_segment02", "rows": first["rows"][12:]}
    path = tmp_path / "overlap.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, early, late]))
    return path


def _hidden_texts(instance: Instance, rows: list) -> list[str]:
    """Dialogue of the rows after the instance's row (ITP: whether and what the therapist said next; STP/SSP/RPP:
    the target row and after; ER/VP: what followed the row): distinctive lines only (>= 30 characters)."""
    first_hidden = instance.row + 1 if instance.task in ("itp", "er", "vp") else instance.row
    return [r.dialogue_cleaned for r in rows[first_hidden:] if len(r.dialogue_cleaned or "") >= 30]


def test_no_request_shows_an_instance_its_own_hidden_rows(tmp_path: Path) -> None:
    # Every task at its default batch size through the runner, with the offline mock model; each request's exact
    # messages are written out. Batching by sample (the old rule) fails here: an instance of segment 02 shows, as
    # its context, rows that are segment 01's future.
    data = _overlapping_file(tmp_path)
    config = EvalConfig(data=str(data), model="mock", tasks=list(TASK_NAMES), bertscore=False, bootstrap=20)
    out = tmp_path / "run"
    Evaluation(config, out, options=RunOptions(progress=False, command=["test"], write_prompts=True)).run()
    dataset = load_dataset(str(data))
    samples = {s.sample_id: s for s in dataset}
    instances = {i.instance_id: i for name in TASK_NAMES for i in get_task(name).build_instances(dataset.samples)}
    prompts = [json.loads(p.read_text()) for p in (out / "prompts").glob("*.json")]
    agent_prompts = [p for p in prompts if p["role"] == "agent"]
    assert len(agent_prompts) > 50 and any(len(p["instances"]) > 1 for p in agent_prompts)
    checked = 0
    for prompt in agent_prompts:
        text = "\n".join(m["content"] for m in prompt["messages"])
        for instance_id in prompt["instances"]:
            instance = instances[instance_id]
            for hidden in _hidden_texts(instance, samples[instance.sample_id].rows):
                checked += 1
                assert hidden not in text, (prompt["task"], instance_id, hidden[:40])
    assert checked > 1000
    # the overlapping segments are in one group, and their instances never share a request
    groups = {i: leak_groups(dataset)[instances[i].sample_id] for i in instances}
    for prompt in agent_prompts:
        assert len({groups[i] for i in prompt["instances"]}) == len(prompt["instances"])


def test_overlapping_segments_are_found_and_joined(tmp_path: Path) -> None:
    dataset = load_dataset(str(_overlapping_file(tmp_path)))
    overlaps = overlapping_segments(dataset)
    pairs = {(o.first, o.second) for o in overlaps}
    # the two new segments overlap each other and the demo conversation they were cut from; nothing else does
    assert pairs == {
        ("demo_maya_and_jordan/001", "overlap_couple/001_segment01"),
        ("demo_maya_and_jordan/001", "overlap_couple/002_segment02"),
        ("overlap_couple/001_segment01", "overlap_couple/002_segment02"),
    }
    groups = group_of(dataset)
    assert len(across_groups(overlaps, groups)) == 2  # the demo couple's id prefix is another couple's
    joined = leak_groups(dataset)
    assert len({joined[a] for a, _ in pairs} | {joined[b] for _, b in pairs}) == 1
    assert joined["demo_priya_and_sam/002"] == "couple:demo_priya_and_sam"


def test_overlap_needs_a_run_of_twelve_words() -> None:
    # hand-built: "a b c ... l" (12 words) shared across a row boundary counts; 11 shared words do not
    from rescue_env.data.schema import Sample

    def sample(sid: str, *lines: str) -> Sample:
        rows = [make_row(k, "Ann", line) for k, line in enumerate(lines)]
        return Sample.model_validate({"sample_id": sid, "scenario": "couple", "rows": rows})

    twelve = "one two three four five six seven eight nine ten eleven twelve"
    a = sample("x/1", "hello there " + " ".join(twelve.split()[:5]), " ".join(twelve.split()[5:]) + "!")
    b = sample("y/1", twelve.upper())
    c = sample("z/1", " ".join(twelve.split()[:11]))
    assert overlapping_segments([a, b, c]) == [Overlap("x/1", "y/1", 1)]
    assert overlapping_segments([a, c], min_words=11) == [Overlap("x/1", "z/1", 1)]
    with pytest.raises(ValueError, match="min_words"):
        overlapping_segments([a], min_words=0)


def test_batches_are_as_few_as_the_rule_allows() -> None:
    # Hand-computed: groups A (5 instances), B (2), C (1), batch size 3 -> max(ceil(8/3), 5) = 5 requests, and the
    # largest groups go first: [A B C] [A B] [A] [A] [A].
    def inst(k: int, sid: str) -> Instance:
        return Instance(task="t", instance_id=f"i{k}", sample_id=sid, scenario="couple", row=k, gold={})

    items = [inst(k, "a") for k in range(5)] + [inst(5 + k, "b") for k in range(2)] + [inst(7, "c")]
    batches = make_batches(items, 3, {"a": "A", "b": "B", "c": "C"})
    assert [[i.sample_id for i in b] for b in batches] == [["a", "b", "c"], ["a", "b"], ["a"], ["a"], ["a"]]
    assert [i.instance_id for i in batches[0]] == ["i0", "i5", "i7"]  # order within a group kept
    # two samples of one group never share a request
    assert all(len(b) == 1 for b in make_batches(items[:5] + items[5:7], 3, {"a": "G", "b": "G"}))


@pytest.mark.shared_data
def test_release_overlaps_stay_inside_groups_and_cost_few_requests(text_file: Path) -> None:
    release = load_dataset(str(text_file))
    overlaps = overlapping_segments(release)
    assert len(overlaps) == 25 and not across_groups(overlaps, group_of(release))
    groups = leak_groups(release)
    per_group = by_sample = 0
    for name in TASK_NAMES:
        task = get_task(name)
        instances = task.build_instances(release.samples)
        batches = make_batches(instances, task.batch_size, groups)
        per_group += len(batches)
        by_sample += len(make_batches(instances, task.batch_size, {s.sample_id: s.sample_id for s in release}))
        for scenario in ("couple", "family"):
            own = [i for i in instances if i.scenario == scenario]
            largest = max(Counter(groups[i.sample_id] for i in own).values())
            assert sum(b[0].scenario == scenario for b in batches) == max(
                math.ceil(len(own) / task.batch_size), largest
            )
    assert (by_sample, per_group) == (2912, 3045)  # 10,194 instances: batching still saves 70 % of the calls


def test_demo_data_has_no_overlap() -> None:
    assert overlapping_segments(load_dataset("demo")) == []


def test_validate_and_stats_report_the_overlapping_pairs(tmp_path: Path, capsys) -> None:
    from rescue_env.cli import main

    data = str(_overlapping_file(tmp_path))
    assert main(["data", "validate", data]) == 0
    out = capsys.readouterr().out
    assert "overlapping segments: 3 pair(s) share a run of 12+ words (2 across groups" in out
    assert "overlap_couple/001_segment01 ~ overlap_couple/002_segment02: " in out
    assert main(["data", "stats", "--data", data, "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["overlaps"]["pairs"]
    assert [(p["first"], p["across_groups"]) for p in pairs] == [
        ("demo_maya_and_jordan/001", True),
        ("demo_maya_and_jordan/001", True),
        ("overlap_couple/001_segment01", False),
    ]
    assert main(["data", "stats", "--data", "demo"]) == 0
    assert "overlapping segments: none" in capsys.readouterr().out
