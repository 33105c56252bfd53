"""The trained ER solver (benchmarks/solvers/emotion.py): an intensity regressor and a phrase voted by the nearest
training instances. That its features never read an annotation is tested with the other solvers' (test_solvers.py)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import er
from benchmarks.base import Instance, PromptOptions
from benchmarks.solvers.emotion import EmotionSolver, current_row, row_features
from benchmarks.solvers.features import InstanceView, view
from rescue_env.data import load_dataset
from rescue_env.rendering import ParsedRow


@pytest.fixture(scope="module")
def demo():
    samples = {s.sample_id: s for s in load_dataset("demo")}
    instances = er.build_instances(list(samples.values()))
    views = {i.instance_id: view(er, i, samples, PromptOptions()) for i in instances}
    return samples, instances, views


def _shown(*lines: str) -> InstanceView:
    return InstanceView(rows=tuple(ParsedRow(line) for line in lines), other="Current row:")


def test_row_features_by_hand() -> None:
    item = _shown(
        '[1] 00:00.0-00:04.0 Therapist -> Maya: "Maya, what happened?"',
        '[2] 00:05.0-00:09.0 Maya -> Therapist: "I was hurt and angry! Why? Why does he never listen?"',
    )
    assert current_row(item) == "I was hurt and angry! Why? Why does he never listen?"
    # distress words (hurt, angry, never), two "?", one "!", log1p(11 words), no overlap, to the therapist
    assert row_features(item).tolist() == [3.0, 2.0, 1.0, pytest.approx(np.log1p(11)), 0.0, 1.0]
    assert row_features(InstanceView(rows=(), other="")).tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_the_phrase_is_the_medoid_of_the_neighbours_golds() -> None:
    # Every training row is the same, so every neighbour weighs the same: the phrase that shares most words with
    # the others wins ("feels angry and hurt" overlaps both "feels angry" and "feels hurt"; "content" none).
    row = '[1] 00:00.0-00:04.0 Maya -> Jordan: "You never listen to me"'
    phrases = ["feels angry", "content", "feels angry and hurt", "feels hurt"]
    instances = [
        Instance(
            instance_id=f"er:s{k}:1",
            task="er",
            sample_id=f"s{k}",
            row=0,
            scenario="couple",
            gold={"emotion": phrase, "intensity": 2 * k},
            inputs={"speaker": "Maya"},
        )  # fmt: skip
        for k, phrase in enumerate(phrases)
    ]
    views = {i.instance_id: _shown(row, row) for i in instances}
    solver = EmotionSolver(embeddings=False).fit(instances, views)
    answer = solver.answer(instances[0], _shown(row, row))
    assert answer["emotion"] == "feels angry and hurt"
    assert isinstance(answer["intensity"], int) and 0 <= answer["intensity"] <= 10


def test_answers_are_training_phrases_and_deterministic(demo) -> None:
    _, instances, views = demo
    train, test = instances[::2], instances[1::2]
    first = EmotionSolver(seed=0).fit(train, views)
    second = EmotionSolver(seed=0).fit(train, views)
    known = {i.gold["emotion"] for i in train}
    for instance in test:
        answer = first.answer(instance, views[instance.instance_id])
        assert answer == second.answer(instance, views[instance.instance_id])
        assert answer["emotion"] in known and 0 <= answer["intensity"] <= 10
    with pytest.raises(ValueError, match="no training instance"):
        EmotionSolver().fit([], views)
