"""The state of the group objective and the outcome model F: hand-computed values, fitting, files and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_row

from rescue_env.cli import main
from rescue_env.data import load_dataset
from rescue_env.data.domain import latest_relation_pattern, participants, scenario_of
from rescue_env.data.schema import Sample
from rescue_env.data.splits import SplitConfig, group_of, split_samples
from rescue_env.dynamics.fitting import fit_on_split, outcome_model_for
from rescue_env.dynamics.outcome import (
    NO_INTERVENTION,
    PAIR_STATE_NAMES,
    PATTERNS,
    OutcomeModel,
    SupportAction,
    episode_states,
    latest_relation_patterns,
    point_state,
    recipient_kind,
    transitions,
)
from rescue_env.dynamics.report import dynamics_report
from rescue_env.dynamics.state import Snapshot, StateConfig, age_weight, objective, snapshots, tension, utility


def test_age_weight_by_hand():
    np.testing.assert_allclose(age_weight(np.array([0, 8, 16, 24, np.inf]), 8, 8.0), [1, 1, 0.5, 0.25, 0])


def test_tension_utility_objective_by_hand():
    d = np.array([0.2, 0.6])
    g = np.array([[0.0, 1.0], [0.0, 0.0]])
    assert tension(g) == pytest.approx(0.5)  # one of two ordered pairs is negative
    assert utility(d, g, 0.5) == pytest.approx(0.6 - 0.25)
    assert objective(d, g, 0.5, 1.0) == pytest.approx(0.35 - 0.6)
    assert tension(np.zeros((1, 1))) == 0.0


def _sample() -> Sample:
    rows = [
        make_row(0, "Ana", internal_emotion=[{"person": "Ana", "emotion_description": "feels hurt", "intensity": 7}]),
        make_row(
            1,
            "Ben",
            internal_emotion=[{"person": "Ben", "emotion_description": "feels loved", "intensity": 9}],
            viewpoints_attitudes=[
                {"source": "Ben", "target": "Ana", "viewpoint": "she blames me", "attitude": "resentful"}
            ],
        ),
        make_row(
            2,
            "Therapist",
            support_strategy=[
                {"provider": "Therapist", "target": ["Ana"], "strategy_type": "reframe", "strategy_content": "x"}
            ],
        ),
        make_row(
            3,
            "Ana",
            internal_emotion=[{"person": "Ana", "emotion_description": "feels calmer and hopeful", "intensity": 5}],
        ),
        make_row(4, "Ben"),
    ]
    return Sample.model_validate({"sample_id": "demo_ana_and_ben/001", "scenario": "couple", "rows": rows})


def test_snapshots_read_valence_and_viewpoints():
    snaps = snapshots(_sample(), ["Ana", "Ben"], StateConfig())
    np.testing.assert_allclose(snaps[1].distress_raw, [0.7, 0.0])  # "feels loved", intensity 9, is not distress
    assert snaps[1].g_raw[1, 0] == 1.0 and snaps[1].g_raw[0, 1] == 0.0
    np.testing.assert_allclose(snaps[3].distress_raw, [0.0, 0.0])
    d, _, age, _ = snaps[1].aged(20, StateConfig(decay_after=8, half_life=8))
    assert age[0] == 20 and d[0] == pytest.approx(0.7 * 2 ** (-(20 - 8) / 8))


def test_recipient_kinds():
    assert recipient_kind(NO_INTERVENTION, 3) is None
    assert recipient_kind(SupportAction(True, frozenset({0})), 3) == "alone"
    assert recipient_kind(SupportAction(True, frozenset({0, 1})), 3) == "pair"
    assert recipient_kind(SupportAction(True, frozenset({0, 1, 2})), 3) == "group"
    assert recipient_kind(SupportAction(True, frozenset({0, 1, 2})), 4) == "subgroup"


def test_transitions_pair_the_state_with_the_next_annotation_and_the_action_between():
    sample = _sample()
    d_rows, g_rows = transitions([sample], {sample.sample_id: "g"}, StateConfig(), horizon=5)
    # Decision rows 0, 1, 3 (not the therapist's row 2, not the last row). After row 0: Ana's next annotation is
    # row 3's (0.0), Ben's row 1's (0.0); after row 1: Ana's row 3 (0.0), with the therapist's support of her
    # alone by reframe in between; after row 3 nothing follows within the horizon.
    assert d_rows.y.size == 3
    supported = np.flatnonzero(d_rows.supported)
    assert (
        supported.size == 1 and d_rows.kinds[supported[0]] == "alone" and d_rows.strategies[supported[0]] == "reframe"
    )
    assert d_rows.current[supported[0]] == pytest.approx(0.7)
    # Ben's viewpoint about Ana lands at row 1: the next relational state after decision row 0, from none (0.0).
    np.testing.assert_allclose(g_rows.y, [1.0])
    np.testing.assert_allclose(g_rows.current, [0.0])


def _reference_pairs(d, g, viewpoint_age, family, pattern_block):
    """The pair features one ordered pair at a time (the first implementation of ``point_state``)."""
    n = d.size
    index = [(i, j) for i in range(n) for j in range(n) if i != j]
    pairs = np.zeros((len(index), len(PAIR_STATE_NAMES)))
    for k, (i, j) in enumerate(index):
        age = viewpoint_age[i, j]
        pairs[k, :7] = (g[i, j], np.isfinite(age), np.minimum(age, 30.0) / 30.0, g[j, i], d[i], d[j], float(family))
    pairs[:, 7:] = pattern_block
    return index, pairs


def test_point_state_pairs_equal_the_pair_by_pair_reference():
    rng = np.random.default_rng(0)
    config, never = StateConfig(), 0
    for n in range(0, 6):
        for _ in range(20):
            emotion_row = rng.integers(-1, 40, n)
            viewpoint_row = np.where(rng.random((n, n)) < 0.3, -1, rng.integers(0, 40, (n, n)))  # -1: never
            snap = Snapshot(rng.random(n), emotion_row, rng.random((n, n)), viewpoint_row)
            row, family = int(rng.integers(40, 80)), bool(rng.integers(2))
            state = point_state(snap, row, None, family, PATTERNS[1], config)
            d, g, _, viewpoint_age = snap.aged(row, config)
            index, pairs = _reference_pairs(d, g, viewpoint_age, family, np.eye(len(PATTERNS))[1])
            assert list(state.pair_index) == index
            assert state.pairs.shape == pairs.shape and np.array_equal(state.pairs, pairs)  # bit for bit
            never += int(np.count_nonzero(state.pairs[:, 1] == 0))
    assert never > 50  # never-annotated pairs were covered


def _assert_patterns_equal_the_per_row_rule(samples) -> int:
    labelled = 0
    for sample in samples:
        patterns = latest_relation_patterns(sample)
        assert patterns == [latest_relation_pattern(sample, row) for row in range(len(sample.rows))]
        labelled += sum(p is not None for p in patterns)
    return labelled


def test_latest_relation_patterns_equal_the_per_row_rule():
    sample = _sample()
    sample.rows[1].relation_pattern = "attack_attack"
    sample.rows[3].relation_cycle_state = "not a label"  # outside the taxonomy: the earlier label stays
    assert latest_relation_patterns(sample) == [
        None,
        "attack_attack",
        "attack_attack",
        "attack_attack",
        "attack_attack",
    ]
    assert _assert_patterns_equal_the_per_row_rule([sample, *load_dataset("demo").samples]) > 0


@pytest.mark.shared_data
def test_latest_relation_patterns_equal_the_per_row_rule_on_the_release(text_file):
    assert _assert_patterns_equal_the_per_row_rule(load_dataset(text_file).samples) > 1000


def _assert_episode_states_equal_point_by_point(samples, config: StateConfig) -> int:
    """``episode_states`` (stacked over rows) against ``point_state`` row by row: every array bit for bit."""
    checked = 0
    for sample in samples:
        people = participants(sample)
        episode = episode_states(sample, config, people)
        snaps, patterns = snapshots(sample, people, config), latest_relation_patterns(sample)
        for row, state in zip(episode.rows, episode.states):
            speaker = sample.rows[row].primary_speaker.strip()
            last = people.index(speaker) if speaker in people else None
            one = point_state(snaps[row], row, last, scenario_of(sample) == "family", patterns[row], config)
            assert state.pair_index == one.pair_index
            for name in ("distress", "g", "annotated_pairs", "person", "pairs"):
                a, b = getattr(state, name), getattr(one, name)
                assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b), name
            checked += 1
    return checked


def test_episode_states_equal_point_state_row_by_row():
    samples = [_sample(), *load_dataset("demo").samples]
    assert _assert_episode_states_equal_point_by_point(samples, StateConfig()) > 20
    assert _assert_episode_states_equal_point_by_point(samples, StateConfig(decay_after=0, half_life=2.0)) > 20


@pytest.mark.shared_data
def test_episode_states_equal_point_state_row_by_row_on_the_release(text_file):
    assert _assert_episode_states_equal_point_by_point(load_dataset(text_file).samples, StateConfig()) > 4000


@pytest.fixture(scope="module")
def demo_model() -> OutcomeModel:
    return fit_on_split(load_dataset("demo"), SplitConfig(split="train"))


def test_fit_save_load_and_predict(demo_model, tmp_path):
    path = tmp_path / "F.json"
    demo_model.save(path)
    loaded = OutcomeModel.load(path)
    assert loaded == demo_model and loaded.digest() == demo_model.digest()
    assert demo_model.fitted_on["split"]["split"] == "train" and demo_model.distress.sigma > 0
    sample = load_dataset("demo").samples[0]
    state = episode_states(sample, demo_model.state).states[3]
    everyone = frozenset(range(state.distress.size))
    d, g = demo_model.mean(state, SupportAction(True, everyone, "reframe"))
    assert d.shape == state.distress.shape and np.all((d >= 0) & (d <= 1)) and np.all((g >= 0) & (g <= 1))
    assert np.all(g[~state.annotated_pairs] == 0)
    # effect_scale 0: every action predicts what keeping quiet predicts
    quiet = demo_model.mean(state, NO_INTERVENTION)
    np.testing.assert_allclose(demo_model.mean(state, SupportAction(True, everyone, "join"), 0.0)[0], quiet[0])
    assert not np.allclose(demo_model.mean(state, SupportAction(True, everyone, "join"))[0], quiet[0])
    # sampling is seeded
    draw = [demo_model.sample(state, NO_INTERVENTION, np.random.default_rng(3))[0] for _ in range(2)]
    np.testing.assert_array_equal(draw[0], draw[1])


def test_bad_model_file_is_one_line(tmp_path):
    bad = tmp_path / "F.json"
    bad.write_text('{"format_version": 1}')
    with pytest.raises(ValueError, match="is not an outcome model file") as info:
        OutcomeModel.load(bad)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="cannot read"):
        OutcomeModel.load(tmp_path / "missing.json")


def test_the_env_cache_fits_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RESCUE_ENV_CACHE", str(tmp_path))
    dataset = load_dataset("demo")
    first = outcome_model_for(dataset, "train")
    files = list((tmp_path / "dynamics").glob("*.json"))
    assert len(files) == 1
    assert outcome_model_for(dataset, "train") == first
    with pytest.raises(ValueError, match="dynamics must be"):
        outcome_model_for(dataset, "test")


def test_cli_fit_and_report(tmp_path, capsys):
    out = tmp_path / "F.json"
    assert main(["dynamics", "fit", "-o", str(out)]) == 0
    assert OutcomeModel.load(out).fitted_on["samples"] == 4
    capsys.readouterr()
    assert main(["dynamics", "report", "--bootstrap", "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["distress"]["mse"]) == {"F (ridge)", "gradient boosting", "persistence", "training mean"}
    # Settings are checked when the command line is read: one line, exit code 2, nothing fitted.
    for args, needle in (
        (["dynamics", "fit", "--horizon", "0", "-o", str(out)], "argument --horizon: must be >= 1, got '0'"),
        (["dynamics", "report", "--test-fraction", "2"], "argument --test-fraction: must be a finite number in (0, 1)"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.shared_data
def test_on_the_release_F_beats_persistence_held_out(text_file):
    dataset = load_dataset(text_file)
    split = SplitConfig(split="train")
    train = split_samples(dataset.samples, split)
    test = split_samples(dataset.samples, split.model_copy(update={"split": "test"}))
    model = fit_on_split(dataset, split)
    report = dynamics_report(train, test, group_of(dataset.samples), model, n_boot=50)
    for head in ("distress", "viewpoint"):
        mse = report[head]["mse"]
        assert mse["F (ridge)"][0] < mse["persistence"][0]
        assert report[head]["gain_over_persistence"][1] > 0  # the paired interval excludes no gain
