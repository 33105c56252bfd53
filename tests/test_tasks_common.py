"""What every task shares: the registry, leak-free prompts, batching without cross-item leaks, Table 6 counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.base import MODES, Instance, PromptOptions, even_sample
from benchmarks.registry import TASK_NAMES, get_task, make_batches, parse_task_list
from rescue_env.cli import main
from rescue_env.data import load_dataset
from rescue_env.data.overlaps import leak_groups
from rescue_env.data.schema import Emotion, Sample, Viewpoint


def test_registry() -> None:
    assert parse_task_list("all") == list(TASK_NAMES)
    assert parse_task_list("VP, itp") == ["itp", "vp"]
    with pytest.raises(ValueError, match="unknown task 'xyz'; choose from itp, rpp"):
        parse_task_list("itp,xyz")
    for name in TASK_NAMES:
        task = get_task(name)
        assert task.name == name and task.batch_size >= 1
        for attribute in (
            "build_instances",
            "render",
            "parse",
            "score",
            "summary",
            "details",
            "oracle_answer",
            "random_answer",
            "majority_answer",
            "heuristic_answer",
        ):
            assert callable(getattr(task, attribute)), (name, attribute)


def test_even_sample_matches_the_reference_examples() -> None:
    # reference-spec 3.1: len 7 limit 5 -> [0,2,3,4,6]; len 10 limit 5 -> [0,2,4,7,9]
    assert even_sample(list(range(7)), 5) == [0, 2, 3, 4, 6]
    assert even_sample(list(range(10)), 5) == [0, 2, 4, 7, 9]
    assert even_sample(list(range(5)), 1) == [2] and even_sample(list(range(5)), 1, single="first") == [0]
    assert even_sample([1, 2], 5) == [1, 2]


def _scrub_annotations(sample: Sample) -> Sample:
    """A copy whose every gold-bearing annotation is replaced by something else."""
    changed = sample.model_copy(deep=True)
    for row in changed.rows:
        row.internal_emotion = [Emotion(person=row.primary_speaker, emotion_description="CHANGED", intensity=0)]
        row.viewpoints_attitudes = [Viewpoint(source=row.primary_speaker, target="X", viewpoint="CHANGED")]
        for strategy in row.support_strategy:
            strategy.strategy_type, strategy.strategy_content = "CHANGED", "CHANGED"
            strategy.target = ["Someone Else"]
        row.relation_cycle_state = row.relation_pattern = "CHANGED"
        row.relation_pattern_reason = row.relation_cycle_reason = "CHANGED"
        row.utterance_type = "CHANGED"
    return changed


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("mode", MODES)
def test_no_gold_reaches_the_prompt(name: str, mode: str) -> None:
    task = get_task(name)
    dataset = load_dataset()
    samples = {s.sample_id: s for s in dataset}
    scrubbed = {k: _scrub_annotations(s) for k, s in samples.items()}
    instances = task.build_instances(dataset.samples)
    assert instances, name
    options = PromptOptions(mode=mode)
    for batch in make_batches(instances, task.batch_size, leak_groups(dataset))[:12]:
        original = task.render(batch, samples, options)
        regolded = [i.model_copy(update={"gold": {"anything": "else"}}) for i in batch]
        assert task.render(regolded, scrubbed, options) == original
        text = json.dumps(original)
        for instance in batch:
            assert instance.instance_id not in text and instance.sample_id not in text
        assert "CHANGED" not in json.dumps(task.render(regolded, scrubbed, options))


def test_itp_prompt_stops_at_the_decision_row() -> None:
    task = get_task("itp")
    dataset = load_dataset()
    samples = {s.sample_id: s for s in dataset}
    for instance in task.build_instances(dataset.samples)[:20]:
        prompt = task.render([instance], samples, PromptOptions())[-1]["content"]
        following = samples[instance.sample_id].rows[instance.row + 1]
        assert f"[{instance.row + 2}]" not in prompt
        assert following.dialogue_cleaned not in prompt


@pytest.mark.parametrize("name", TASK_NAMES)
def test_batches_never_mix_samples_or_scenarios(name: str) -> None:
    task = get_task(name)
    dataset = load_dataset()
    instances = task.build_instances(dataset.samples)
    for size in (1, task.batch_size, 7):
        batches = make_batches(instances, size, leak_groups(dataset))
        assert sorted(i.instance_id for b in batches for i in b) == sorted(i.instance_id for i in instances)
        for batch in batches:
            assert 1 <= len(batch) <= size
            assert len({i.sample_id for i in batch}) == len(batch)
            assert len({i.scenario for i in batch}) == 1


def test_make_batches_rejects_bad_size() -> None:
    with pytest.raises(ValueError):
        make_batches(
            [Instance(task="t", instance_id="a", sample_id="s", scenario="couple", row=0, gold={})], 0, {"s": "s"}
        )


TABLE_6 = {
    "couple": {
        "itp": (2722, 168),
        "rpp": (1608, None),
        "stp": (1290, 172),
        "ssp": (1290, 172),
        "er": (844, 174),
        "vp": (775, 170),
    },
    "family": {"itp": (284, 16), "rpp": (525, 17), "stp": (347, 17), "ssp": (347, 17), "er": (82, 17), "vp": (80, 17)},
}


def test_tasks_count_reproduces_table_6(text_file: Path, capsys) -> None:
    assert main(["tasks", "count", str(text_file), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    for scenario, tasks in TABLE_6.items():
        for name, (instances, samples) in tasks.items():
            assert counts[scenario][name]["instances"] == instances, (scenario, name)
            if samples is not None:
                assert counts[scenario][name]["samples"] == samples, (scenario, name)
    # The paper's "172" RPP couple coverage matches STP's, not the rows it counts (shared/data/README.md).
    assert counts["couple"]["rpp"]["samples"] == 170


def test_tasks_count_unified_protocol(text_file: Path, capsys) -> None:
    assert main(["tasks", "count", str(text_file), "--json", "--protocol", "unified"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert (counts["couple"]["rpp"]["instances"], counts["family"]["rpp"]["instances"]) == (1609, 517)


def test_tasks_count_text_on_demo(capsys) -> None:
    assert main(["tasks", "count"]) == 0
    out = capsys.readouterr().out
    assert "paper Table 6" in out and all(n.upper() in out for n in TASK_NAMES)
