"""What a six-task run leaves for error analysis (benchmarks/runner.py, benchmarks/results.py): the gold and the
per-instance score in predictions.jsonl (added only at scoring time), the exact prompts (--write-prompts), a dry
run that calls nothing, results.csv in table scopes and one unit per row, and --limit stratified over scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from agents.fake_server import FakeOpenAIServer, example_responder
from benchmarks.base import Instance
from benchmarks.registry import TASK_NAMES
from benchmarks.runner import EvalConfig, Evaluation, limit_instances
from benchmarks.runs import RunOptions, prompt_hash
from rescue_env.cli import main
from rescue_env.data import load_dataset


def _records(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def heuristic_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "heuristic"
    config = EvalConfig(tasks=list(TASK_NAMES), agent="heuristic", bertscore=False, bootstrap=20)
    Evaluation(config, out, options=RunOptions(progress=False, command=["test"])).run()
    return out


def test_every_record_carries_its_gold_score_and_position(heuristic_run: Path) -> None:
    dataset = load_dataset("demo")
    rows = {s.sample_id: len(s.rows) for s in dataset}
    records = _records(heuristic_run)
    assert {r["task"] for r in records} == set(TASK_NAMES)
    for record in records:
        assert {"gold", "score", "correct", "position"} <= set(record), record["instance_id"]
        # row is 1-based in the record; position = 0-based row / rows (Fig. 4)
        assert record["position"] == pytest.approx((record["row"] - 1) / rows[record["sample_id"]])
        if record["task"] == "itp":
            assert record["correct"] == (record["prediction"] == record["gold"]["should_speak"])
        elif record["task"] in ("rpp", "stp", "ssp"):
            assert record["correct"] == (record["score"]["rank"] == 1)
            assert record["score"]["gold"] in record["gold"].values()
        else:
            assert record["correct"] is None and "s_int" in record["score"] or "target_match" in record["score"]


def test_per_instance_scores_reproduce_the_headline_metrics(heuristic_run: Path) -> None:
    results = json.loads((heuristic_run / "results.json").read_text())
    frame = pd.read_json(heuristic_run / "predictions.jsonl", lines=True)
    rpp = frame[frame.task == "rpp"]
    assert rpp.correct.mean() == pytest.approx(results["tasks"]["rpp"]["scopes"]["all"]["metrics"]["accuracy"]["value"])
    couple = rpp[rpp.scenario == "couple"]
    expected = results["tasks"]["rpp"]["scopes"]["couple"]["metrics"]["accuracy"]["value"]
    assert couple.correct.mean() == pytest.approx(expected)


def test_gold_is_added_only_when_scoring(tmp_path: Path, monkeypatch) -> None:
    """The records written while the model is asked hold no gold: stop the run at scoring and look."""
    import benchmarks.results

    def fail(*args, **kwargs):
        raise RuntimeError("stopped at scoring")

    monkeypatch.setattr(benchmarks.results, "score_plan", fail)
    config = EvalConfig(tasks=["itp", "rpp"], agent="heuristic", bertscore=False, bootstrap=0)
    with pytest.raises(RuntimeError, match="stopped at scoring"):
        Evaluation(config, tmp_path / "run", options=RunOptions(progress=False)).run()
    records = _records(tmp_path / "run")
    assert records and all("gold" not in r and "score" not in r and "correct" not in r for r in records)


def test_results_csv_has_table_scopes_units_and_label_rows(heuristic_run: Path) -> None:
    frame = pd.read_csv(heuristic_run / "results.csv")
    results = json.loads((heuristic_run / "results.json").read_text())
    assert set(frame.scope) == {"Couple", "Family", "Both"}
    headline = frame[frame.label.isna()]
    both = headline[(headline.task == "stp") & (headline.scope == "Both") & (headline.metric == "mrr")]
    assert both.value.item() == pytest.approx(results["tasks"]["stp"]["scopes"]["all"]["metrics"]["mrr"]["value"])
    assert set(headline[headline.task == "rpp"].unit) == {"fraction"}
    assert set(headline[(headline.task == "er") & (headline.metric == "s_int")].unit) == {"score_1_5"}
    assert set(headline[(headline.task == "er") & (headline.metric == "intensity_mae")].unit) == {"intensity_points"}
    labels = frame[frame.label.notna()]
    assert set(labels.task) == {"rpp", "ssp"}
    recall = labels[
        (labels.task == "ssp") & (labels.scope == "Couple") & (labels.metric == "recall") & (labels.label == "reframe")
    ]
    per_label = results["tasks"]["ssp"]["scopes"]["couple"]["details"]["labels"]["per_label"]["reframe"]
    assert recall.value.item() == pytest.approx(per_label["recall"]) and recall.unit.item() == "fraction"
    assert set(labels[labels.metric == "support"].unit) == {"count"}


def test_write_prompts_saves_each_request_exactly(tmp_path: Path) -> None:
    with FakeOpenAIServer(example_responder) as server:
        config = EvalConfig(
            tasks=["itp", "ssp"], agent="litellm", model="openai/fake", api_base=server.base_url, bertscore=False,
            bootstrap=0, limit=6,
        )  # fmt: skip
        options = RunOptions(progress=False, write_prompts=True)
        Evaluation(config, tmp_path / "run", options=options).run()
        sent = [r["messages"] for r in server.requests[1:]]  # after the probe
    files = sorted((tmp_path / "run" / "prompts").glob("*.json"))
    saved = [json.loads(f.read_text()) for f in files]
    assert len(saved) == len(sent) and all(s["role"] == "agent" for s in saved)
    for entry, file in zip(saved, files):
        assert file.stem == entry["prompt_hash"] == prompt_hash(entry["messages"])
    assert sorted(prompt_hash(m) for m in sent) == sorted(e["prompt_hash"] for e in saved)
    assert {r["prompt_hash"] for r in _records(tmp_path / "run")} == {f.stem for f in files}


def test_dry_run_prints_the_first_prompts_and_calls_nothing(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "run"
    with FakeOpenAIServer(example_responder) as server:
        code = main(
            ["evaluate", "--model", "openai/fake", "--api-base", server.base_url, "--tasks", "itp,er", "--limit", "5",
             "--judge-model", "openai/fake", "--dry-run", "--output", str(out_dir)]
        )  # fmt: skip
        assert server.request_count == 0
    out = capsys.readouterr().out
    assert code == 0 and not out_dir.exists()
    assert "== ITP: 5 instances, 2 batch(es) to ask, 2 model request(s), up to 0 judge request(s)" in out
    assert "== ER: 5 instances, 2 batch(es) to ask, 2 model request(s), up to 5 judge request(s)" in out
    # batches never mix scenarios, so 5 ER instances (4 couple, 1 family) are 2 requests
    assert out.count("--- system ---") == 2 and "dry run: 9 request(s) in all" in out


def _instance(n: int, scenario: str) -> Instance:
    return Instance(task="rpp", instance_id=f"{scenario}{n}", sample_id=f"s{n}", scenario=scenario, row=n, gold={})


def test_limit_is_shared_between_scenarios_in_proportion() -> None:
    instances = [_instance(n, "couple") for n in range(20)] + [_instance(n, "family") for n in range(5)]
    kept = limit_instances(instances, 5)
    # in proportion: 5 * 20/25 = 4 couple, 5 * 5/25 = 1 family
    assert [i.scenario for i in kept].count("couple") == 4 and [i.scenario for i in kept].count("family") == 1
    # evenly spaced within a scenario (positions round(i * 19 / 3)), instance order kept
    assert [i.instance_id for i in kept] == ["couple0", "couple6", "couple13", "couple19", "family0"]
    assert limit_instances(instances, 0) == []
    assert limit_instances(instances, 100) == instances
    per = limit_instances(instances, None, per_scenario=2)
    assert [i.instance_id for i in per] == ["couple0", "couple19", "family0", "family4"]
    both = limit_instances(instances, 3, per_scenario=2)
    assert len(both) == 3 and {i.scenario for i in both} == {"couple", "family"}
    # 3 of 40 couple + 2 family: 2.86 : 0.14 rounds to 3 : 0, then the family takes one of the couples'
    few = limit_instances([_instance(n, "couple") for n in range(40)] + instances[20:22], 3)
    assert [i.scenario for i in few] == ["couple", "couple", "family"]


def test_limit_on_the_demo_reaches_families(tmp_path: Path) -> None:
    config = EvalConfig(tasks=["rpp"], agent="heuristic", bertscore=False, bootstrap=0, limit=6)
    results = Evaluation(config, tmp_path / "run", options=RunOptions(progress=False)).run()
    scopes = results["tasks"]["rpp"]["scopes"]
    assert scopes["all"]["instances"] == 6 and scopes["family"]["instances"] >= 1


def test_progress_shows_tokens_and_cost_only_when_a_model_is_called() -> None:
    from benchmarks.runs import Progress

    class Bar:
        def __init__(self) -> None:
            self.postfix: dict = {}

        def update(self, n: int) -> None:
            pass

        def set_postfix(self, **kwargs) -> None:
            self.postfix = kwargs

    for usage, keys in ((True, {"failures", "tokens", "cost"}), (False, {"failures"})):
        progress = Progress(10, enabled=False, usage=usage)
        progress._bar = Bar()
        progress.update(2, 1, 30, 0.5)
        assert set(progress._bar.postfix) == keys and progress._bar.postfix["failures"] == 1
