"""The three ranking tasks RPP, STP and SSP: instance sets (Table 6), prompts without gold, tolerant parsing,
scoring of failures as misses, hand-computed summaries and the built-in baseline answers."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from conftest import make_sample, without_annotations

from benchmarks import rpp, ssp, stp
from benchmarks.base import Instance, Prediction, PromptOptions
from rescue_env.data import load_dataset
from rescue_env.data.schema import Sample
from rescue_env.taxonomy import ALL_RELATION_PATTERN_KEYS, relation_patterns, strategies

TASKS = (rpp, stp, ssp)
GOLD_KEY = {"rpp": "pattern", "stp": "target", "ssp": "strategy"}


@lru_cache(maxsize=2)
def _samples(path: str | None) -> tuple[Sample, ...]:
    return tuple(load_dataset(path).samples)


def _demo() -> tuple[Sample, ...]:
    return _samples(None)


def _by_id(samples: Sequence[Sample]) -> dict[str, Sample]:
    return {s.sample_id: s for s in samples}


def _answer(batch: Sequence[Instance], answers: Sequence[dict]) -> str:
    return json.dumps({"answers": [{"id": str(k + 1), **a} for k, a in enumerate(answers)]})


def _batches(task: ModuleType, instances: Sequence[Instance]) -> list[list[Instance]]:
    out = []
    for scenario in ("couple", "family"):
        part = [i for i in instances if i.scenario == scenario]
        out += [part[k : k + task.batch_size] for k in range(0, len(part), task.batch_size)]
    return out


def _first(task: ModuleType, scenario: str = "couple") -> Instance:
    return next(i for i in task.build_instances(_demo()) if i.scenario == scenario)


def _counts(instances: Sequence[Instance]) -> tuple[Counter, Counter]:
    return Counter(i.scenario for i in instances), Counter(s for s, _ in {(i.scenario, i.sample_id) for i in instances})


# ------------------------------------------------------------------------------------------------------------------
# Module surface
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_module_surface(task: ModuleType) -> None:
    assert task.batch_size == 3 and task.generative is False and task.title
    assert task.default_context == (-1 if task is rpp else 3)
    for fn in ("build_instances", "render", "parse", "score", "summary", "details", "oracle_answer"):
        assert callable(getattr(task, fn))
    for fn in ("random_answer", "majority_answer", "heuristic_answer"):
        assert callable(getattr(task, fn))


# ------------------------------------------------------------------------------------------------------------------
# Instance sets: the release (Table 6) and hand-built samples
# ------------------------------------------------------------------------------------------------------------------


def test_real_counts(text_file: Path) -> None:
    samples = _samples(str(text_file))
    # Table 6 says 172 couple samples for RPP; the text release's labelled rows cover 170 under either protocol.
    assert _counts(rpp.build_instances(samples)) == (Counter(couple=1608, family=525), Counter(couple=170, family=17))
    assert _counts(rpp.build_instances(samples, protocol="unified")) == (
        Counter(couple=1609, family=517),
        Counter(couple=170, family=17),
    )
    for task in (stp, ssp):
        instances = task.build_instances(samples)
        assert _counts(instances) == (Counter(couple=1290, family=347), Counter(couple=172, family=17)), task.name
    targets = stp.build_instances(samples)
    assert all(i.gold["target"] in i.inputs["candidates"] for i in targets)
    assert all(len(set(i.inputs["candidates"])) == len(i.inputs["candidates"]) for i in targets)
    assert [i.row for i in targets] == [i.row for i in ssp.build_instances(samples)]


def test_demo_has_instances_for_every_task_and_scenario() -> None:
    for task in TASKS:
        instances = task.build_instances(_demo())
        assert {i.scenario for i in instances} == {"couple", "family"}, task.name
        assert len({i.instance_id for i in instances}) == len(instances)
        assert all(i.task == task.name and i.instance_id.startswith(f"{task.name}:") for i in instances)


def _support_sample() -> Sample:
    def strategy(kind: str, target: list[str]) -> list[dict]:
        return [{"provider": "Therapist", "target": target, "strategy_type": kind, "strategy_content": "x"}]

    record = make_sample("unit/couple", ["Therapist", "Maya", "Jordan", "Therapist", "Maya"] + ["Therapist"] * 4)
    rows = record["rows"]
    rows[0].update(support_strategy=strategy("track", ["Couple"]), relation_cycle_state="attack_attack")
    rows[3].update(support_strategy=strategy("counterbalance", ["Jordan"]), relation_cycle_state="pursue_withdraw")
    rows[5].update(support_strategy=strategy("hug", []), target=["Maya"], relation_cycle_state="not_a_pattern")
    rows[6].update(support_strategy=strategy("", ["Maya"]))
    rows[7].update(support_strategy=strategy("evoke", ["Therapist"]))
    rows[8].update(support_strategy=strategy("join", ["Maya", "Jordan"]), relation_pattern="repair_softening")
    return Sample.model_validate(record)


def test_instance_rules_on_a_hand_built_sample() -> None:
    sample = _support_sample()
    targets = stp.build_instances([sample])
    assert [(i.row, i.gold["target"], i.gold["source"]) for i in targets] == [
        (0, "Couple", "support_strategy"),
        (3, "Jordan", "support_strategy"),
        (5, "Maya", "row_target"),  # App. C: fall back to the row target
        (8, "Couple", "support_strategy"),
    ]
    assert targets[0].inputs == {"candidates": ["Maya", "Jordan", "Couple"]}
    strategies_ = ssp.build_instances([sample])
    assert [(i.row, i.gold["strategy"]) for i in strategies_] == [(0, "track"), (3, "counterbalance"), (8, "join")]
    assert strategies_[2].inputs == {"target": "Couple", "target_members": ["Maya", "Jordan"]}
    # paper protocol: couple gold from relation_cycle_state of therapist rows after the first, in-taxonomy only
    assert [(i.row, i.gold) for i in rpp.build_instances([sample])] == [(3, {"pattern": "pursue_withdraw"})]
    assert [i.row for i in rpp.build_instances([sample], protocol="unified")] == [3, 8]
    assert rpp.build_instances([sample])[0].inputs == {"speaker": "Therapist"}
    with pytest.raises(ValueError):
        rpp.build_instances([sample], protocol="everything")


def test_stp_candidates_never_carry_an_annotated_name() -> None:
    # Row 3's strategy is annotated as aimed at "Lena", who never speaks, is never addressed and is not listed:
    # adding her to the candidates would show the model the answer (issue 23). The row is dropped and counted.
    record = _support_sample().model_dump()
    record["rows"][3]["support_strategy"][0]["target"] = ["Lena"]
    sample = Sample.model_validate(record)
    instances = stp.build_instances([sample])
    assert [i.row for i in instances] == [0, 5, 8]
    assert stp.outside_candidates([sample]) == [("unit/couple", 3)]
    assert stp.outside_candidates([_support_sample()]) == []
    # every instance's candidates are those of the sample with its annotations scrubbed: what the prompt shows
    for s in [sample, *_demo()]:
        for instance in stp.build_instances([s]):
            assert stp.choices(instance) == stp.candidates_of(without_annotations(s))


def test_tasks_count_reports_the_rows_stp_leaves_out(tmp_path: Path, capsys) -> None:
    from conftest import write_jsonl

    from rescue_env.cli import main

    record = _support_sample().model_dump(mode="json")
    record["rows"][3]["support_strategy"][0]["target"] = ["Lena"]
    data = str(write_jsonl(tmp_path / "lena.jsonl", [record]))
    assert main(["tasks", "count", data, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["couple"]["stp"] == {"instances": 3, "samples": 1, "outside_candidates": 1}
    assert main(["tasks", "count", data]) == 0
    assert "STP leaves out 1 therapist row(s)" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------------------
# Prompts: label definitions, context windows, no gold
# ------------------------------------------------------------------------------------------------------------------


def test_prompts_carry_the_closed_sets() -> None:
    samples = _by_id(_demo())
    for scenario in ("couple", "family"):
        text = rpp.render([_first(rpp, scenario)], samples, PromptOptions())[1]["content"]
        assert all(f"- {x.key} ({x.name}): {x.definition}" in text for x in relation_patterns(scenario))
        text = ssp.render([_first(ssp, scenario)], samples, PromptOptions())[1]["content"]
        assert all(f"- {x.key} ({x.name}): {x.definition}" in text for x in strategies(scenario))
        assert "Boundary rules:" in text
        instance = _first(stp, scenario)
        text = stp.render([instance], samples, PromptOptions())[1]["content"]
        assert f"Candidates: {', '.join(instance.inputs['candidates'])}" in text


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_context_ends_before_the_target_row(task: ModuleType) -> None:
    samples = _by_id(_demo())
    for instance in task.build_instances(_demo())[:12]:
        text = task.render([instance], samples, PromptOptions())[1]["content"]
        sample = samples[instance.sample_id]
        assert f"\n[{instance.row + 1}] " not in text and sample.rows[instance.row].dialogue_cleaned not in text
        shown = [p for p in range(len(sample.rows)) if f"\n[{p + 1}] " in text]
        expected = range(instance.row) if task is rpp else range(max(0, instance.row - 3), instance.row)
        assert shown == list(expected)
        assert instance.instance_id not in text and instance.sample_id not in text
    narrow = task.render([instance], samples, PromptOptions(context_size=2))[1]["content"]
    expected = range(max(0, instance.row - 2), instance.row)
    assert [p for p in range(len(sample.rows)) if f"\n[{p + 1}] " in narrow] == list(expected)


def _changed(sample: Sample, row: int, task: ModuleType) -> Sample:
    changed = sample.model_copy(deep=True)
    target = changed.rows[row]
    if task is rpp:
        target.relation_cycle_state = "withdraw_withdraw" if target.relation_cycle_state != "withdraw_withdraw" else "x"
        target.relation_pattern = "mixed_transition" if target.relation_pattern != "mixed_transition" else "x"
    else:
        item = target.support_strategy[0]
        item.strategy_type = "repair" if item.strategy_type != "repair" else "track"
        if task is stp:
            item.target = ["Somebody"] if item.target != ["Somebody"] else ["Else"]
    return changed


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_changing_the_gold_does_not_change_the_prompt(task: ModuleType) -> None:
    samples = _by_id(_demo())
    for batch in _batches(task, task.build_instances(_demo()))[:6]:
        before = task.render(batch, samples, PromptOptions(mode="audiovisual"))
        changed = dict(samples)
        for instance in batch:
            changed[instance.sample_id] = _changed(changed[instance.sample_id], instance.row, task)
        regolded = [i.model_copy(update={"gold": {GOLD_KEY[task.name]: "zzz"}}) for i in batch]
        assert task.render(regolded, changed, PromptOptions(mode="audiovisual")) == before


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_prompts_and_heuristics_ignore_annotations(task: ModuleType) -> None:
    samples = _by_id(_demo())
    scrubbed = {k: without_annotations(s) for k, s in samples.items()}
    instances = task.build_instances(_demo())
    for batch in _batches(task, instances)[:8]:
        assert task.render(batch, scrubbed, PromptOptions()) == task.render(batch, samples, PromptOptions())
    for instance in instances:
        sample_id = instance.sample_id
        assert task.heuristic_answer(instance, scrubbed[sample_id]) == task.heuristic_answer(
            instance, samples[sample_id]
        )


def test_ssp_shows_the_given_target_and_stp_does_not() -> None:
    samples = _by_id(_demo())
    dyad = next(
        i for i in ssp.build_instances(_demo()) if i.scenario == "family" and len(i.inputs["target_members"]) == 2
    )
    text = ssp.render([dyad], samples, PromptOptions())[1]["content"]
    assert f"directed to: Family (recipients: {', '.join(dyad.inputs['target_members'])})." in text
    single = next(i for i in ssp.build_instances(_demo()) if i.inputs["target"] not in ("Couple", "Family"))
    assert f"directed to: {single.inputs['target']}.\n" in ssp.render([single], samples, PromptOptions())[1]["content"]
    assert "directed to:" not in stp.render([_first(stp)], samples, PromptOptions())[1]["content"]


def test_a_batch_holds_one_scenario() -> None:
    with pytest.raises(ValueError, match="one scenario"):
        rpp.render([_first(rpp, "couple"), _first(rpp, "family")], _by_id(_demo()), PromptOptions())


# ------------------------------------------------------------------------------------------------------------------
# Parsing and scoring
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_oracle_round_trip_scores_perfectly(task: ModuleType) -> None:
    samples = _by_id(_demo())
    instances = task.build_instances(_demo())
    scores = []
    for batch in _batches(task, instances):
        task.render(batch, samples, PromptOptions())
        predictions = task.parse(_answer(batch, [task.oracle_answer(i) for i in batch]), batch)
        assert all(p.ok and not p.normalised for p in predictions)
        scores += [task.score(i, p) for i, p in zip(batch, predictions)]
    assert len(scores) == len(instances)
    summary = task.summary(scores)
    assert summary["recall@1"] == summary["mrr"] == 1.0
    if task is rpp:
        assert summary["accuracy"] == summary["macro_f1"] == 1.0
    assert task.details(instances, scores)["failed"] == 0


def test_parse_failures_and_repairs() -> None:
    batch = [_first(rpp), *[i for i in rpp.build_instances(_demo()) if i.scenario == "couple"][1:3]]
    ids = [i.instance_id for i in batch]

    def parsed(text: str | None) -> list[Prediction]:
        predictions = rpp.parse(text, batch)
        assert [p.instance_id for p in predictions] == ids
        return predictions

    assert [p.failure for p in parsed("{not json")] == ["malformed_json"] * 3
    assert [p.failure for p in parsed(None)] == ["no_answer"] * 3
    text = json.dumps(
        {
            "answers": [
                {
                    "id": "1",
                    "ranking": ["Pursue-Withdraw", "attack_attack", "attack_attack", "nonsense", "mixed_transition"],
                },
                {"id": "3", "ranking": ["escalation_conflict", "hug"]},
            ]
        }
    )
    first, second, third = parsed(text)
    assert first.value == ["pursue_withdraw", "attack_attack", "mixed_transition"] and first.normalised
    assert second.failure == "missing_item" and second.value is None
    assert third.failure is not None and third.failure.startswith("out_of_set: escalation_conflict")  # family-only
    long = _answer(batch, [{"ranking": list(relation_patterns("couple").keys())}] * 3)
    assert [len(p.value) for p in parsed(long)] == [3, 3, 3]
    short = parsed(_answer(batch, [{"ranking": ["repair_softening"]}, {"ranking": []}, {"label": "x"}]))
    assert short[0].value == ["repair_softening"] and not short[0].normalised
    assert short[1].failure == short[2].failure == "missing_field"


def test_parse_matches_target_names_and_strategies() -> None:
    target = _first(stp)
    names = target.inputs["candidates"]
    (p,) = stp.parse(_answer([target], [{"ranking": ["couple", names[0], "Therapist"]}]), [target])
    assert p.value == ["Couple", names[0]] and p.normalised
    (p,) = stp.parse(_answer([target], [{"ranking": ["Therapist", "Somebody"]}]), [target])
    assert p.failure == "out_of_set: Therapist"
    strategy = _first(ssp, "family")
    (p,) = ssp.parse(_answer([strategy], [{"ranking": ["evoke", "boundary", "Track"]}]), [strategy])
    assert p.value == ["boundary", "track"] and p.normalised  # evoke is couple-only


def test_failures_and_short_lists_score_as_misses() -> None:
    instance = _first(rpp)
    gold = instance.gold["pattern"]
    other = next(x.key for x in relation_patterns("couple") if x.key != gold)
    failed = rpp.score(instance, Prediction(instance_id=instance.instance_id, failure="malformed_json"))
    assert failed["rank"] == 0 and failed["top1"] is None and failed["ranking"] is None
    short = rpp.score(instance, Prediction(instance_id=instance.instance_id, value=[other]))
    assert short["rank"] == 0  # never padded: the gold cannot appear lower down
    second = rpp.score(instance, Prediction(instance_id=instance.instance_id, value=[other, gold]))
    assert second["rank"] == 2 and second["top1"] == other


def _scored(task: ModuleType, golds: list[str], rankings: list[list[str] | None], scenario: str = "couple") -> list:
    out = []
    for k, (gold, ranking) in enumerate(zip(golds, rankings)):
        instance = Instance(
            task=task.name,
            instance_id=f"x{k}",
            sample_id="s",
            scenario=scenario,
            row=k,
            gold={GOLD_KEY[task.name]: gold},
        )
        prediction = Prediction(instance_id=f"x{k}", value=ranking, failure=None if ranking else "out_of_set: x")
        out.append(task.score(instance, prediction))
    return out


def test_summaries_by_hand() -> None:
    pw, aa, rs, ca = "pursue_withdraw", "attack_attack", "repair_softening", "constructive_alignment"
    scores = _scored(rpp, [pw, aa, rs, pw, aa], [[pw, aa], [pw, aa, rs], [pw, ca, rs], None, [ca, pw]])
    assert [s["rank"] for s in scores] == [1, 2, 3, 0, 0]
    summary = rpp.summary(scores)
    assert summary["accuracy"] == summary["recall@1"] == pytest.approx(1 / 5)
    assert summary["recall@2"] == pytest.approx(2 / 5) and summary["recall@3"] == pytest.approx(3 / 5)
    assert summary["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 5)
    # top-1 F1: pursue_withdraw P=1/3 R=1/2 -> 0.4; attack_attack, repair_softening 0; constructive_alignment
    # predicted once, no support -> 0. Four active labels.
    assert summary["macro_f1"] == pytest.approx(0.4 / 4)
    details = rpp.details([], scores)
    assert details["failed"] == 1 and details["failures"] == {"out_of_set": 1} and details["n"] == 5
    assert details["labels"]["labels"] == list(relation_patterns("couple").keys())
    pooled = scores + _scored(rpp, ["escalation_conflict"], [["escalation_conflict"]], scenario="family")
    assert rpp.details([], pooled)["labels"]["labels"] == list(ALL_RELATION_PATTERN_KEYS)
    assert set(rpp.details([], pooled)["by_scenario"]) == {"couple", "family"}
    assert rpp.summary([])["recall@1"] == 0.0 and rpp.summary([])["macro_f1"] is None

    targets = _scored(stp, ["Maya", "Couple", "Jordan", "Maya"], [["Jordan", "Maya"], ["Couple"], ["Maya"], None])
    assert stp.summary(targets) == pytest.approx(
        {"recall@1": 1 / 4, "recall@2": 2 / 4, "recall@3": 2 / 4, "mrr": 1.5 / 4}
    )
    details = stp.details([], targets)
    assert details["target_kind_confusion"] == {
        "individual": {"individual": 2, "group": 0, "failed": 1},
        "group": {"individual": 0, "group": 1, "failed": 0},
    }
    assert details["wrong_individual"] == 2 and details["gold_counts"] == {"individual": 3, "group": 1}

    moves = _scored(ssp, ["track", "evoke", "join"], [["track"], ["join", "evoke"], ["track", "reframe", "evoke"]])
    assert ssp.summary(moves) == pytest.approx(
        {"recall@1": 1 / 3, "recall@2": 2 / 3, "recall@3": 2 / 3, "mrr": 1.5 / 3}
    )
    report = ssp.details([], moves)["labels"]
    assert report["labels"] == list(strategies("couple").keys()) and report["accuracy"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------------------------------
# Baseline answers
# ------------------------------------------------------------------------------------------------------------------


def _choices(task: ModuleType, instance: Instance) -> list[str]:
    found = task.choices(instance)
    return list(found.keys()) if hasattr(found, "keys") else list(found)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_baseline_answers_are_valid_rankings(task: ModuleType) -> None:
    samples = _by_id(_demo())
    instances = task.build_instances(_demo())
    pool = [i for i in instances if i.scenario == "couple"]
    for instance in instances[:20]:
        valid = _choices(task, instance)
        sample = samples[instance.sample_id]
        answers = [
            task.oracle_answer(instance),
            task.random_answer(instance, sample, np.random.default_rng(7)),
            task.majority_answer(instance, pool),
            task.heuristic_answer(instance, sample),
        ]
        for answer in answers:
            ranking = answer["ranking"]
            assert len(ranking) == min(3, len(valid)) == len(set(ranking)) and set(ranking) <= set(valid)
        assert answers[0]["ranking"][0] == instance.gold[GOLD_KEY[task.name]]
        again = task.random_answer(instance, sample, np.random.default_rng(7))
        assert again == answers[1]


def test_majority_follows_the_pool() -> None:
    instance = _first(ssp)
    pool = [instance.model_copy(update={"gold": {"strategy": s}}) for s in ["join", "evoke", "join", "repair"]]
    assert ssp.majority_answer(instance, pool) == {"ranking": ["join", "evoke", "repair"]}
    thin = pool[:1]  # one gold seen: the rest follow the taxonomy order
    assert ssp.majority_answer(instance, thin)["ranking"] == [
        "join",
        *[x.key for x in strategies("couple") if x.key != "join"][:2],
    ]


def test_stp_heuristic_picks_the_last_client() -> None:
    sample = _support_sample()
    by_row = {i.row: i for i in stp.build_instances([sample])}
    assert stp.heuristic_answer(by_row[3], sample) == {"ranking": ["Jordan", "Couple", "Maya"]}
    assert stp.heuristic_answer(by_row[5], sample) == {"ranking": ["Maya", "Couple", "Jordan"]}
    assert stp.heuristic_answer(by_row[0], sample) == {"ranking": ["Couple", "Maya", "Jordan"]}  # no earlier client


def test_rpp_heuristic_reads_blame_and_apologies() -> None:
    texts = ["You always do this, it's your fault.", "You never listen! This is ridiculous.", "", ""]
    record = make_sample("unit/heat", ["Maya", "Jordan", "Therapist", "Therapist"])
    for row, text in zip(record["rows"], texts):
        row["dialogue_cleaned"] = text or row["dialogue_cleaned"]
    record["rows"][2]["relation_cycle_state"] = "attack_attack"
    sample = Sample.model_validate(record)
    (instance,) = rpp.build_instances([sample])
    assert rpp.heuristic_answer(instance, sample)["ranking"][0] == "attack_attack"
    record["rows"][0]["dialogue_cleaned"] = "I'm sorry, you're right."
    record["rows"][1]["dialogue_cleaned"] = "Thank you. I appreciate that."
    sample = Sample.model_validate(record)
    assert rpp.heuristic_answer(instance, sample)["ranking"][0] == "repair_softening"
