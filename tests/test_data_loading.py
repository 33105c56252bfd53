"""Loading, validation and round trips of RESCUE-Bench data, including every bad-input case of issue 2."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from conftest import make_row, make_sample, write_jsonl
from pydantic import ValidationError

from rescue_env.data import DataError, load_dataset
from rescue_env.data.loading import read_sample_ids
from rescue_env.data.schema import Sample


def test_excerpt_round_trips_every_key_and_value(excerpt_file: Path) -> None:
    lines = [line for line in excerpt_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    dataset = load_dataset(excerpt_file, strict=True)
    assert len(dataset) == len(lines) == 6
    for line, sample in zip(lines, dataset):
        original = json.loads(line)
        dumped = sample.to_record()
        assert dumped == original
        # == on dicts ignores types of equal numbers; the JSON text must match too (8 stays 8, not 8.0).
        assert json.dumps(dumped, sort_keys=True) == json.dumps(original, sort_keys=True)


def test_text_transcription_loads_without_problems(text_file: Path) -> None:
    dataset = load_dataset(text_file)
    assert dataset.report.problems == []
    assert len(dataset) == 191
    assert (len(dataset.by_scenario("couple")), len(dataset.by_scenario("family"))) == (174, 17)
    assert sum(len(s.rows) for s in dataset) == 7079
    # The text file lacks the visual cue fields: they default to empty and are not written back.
    row = dataset[0].rows[0]
    assert row.body_posture == [] and "body_posture" not in row.to_record()


def test_demo_data_is_valid_and_round_trips() -> None:
    dataset = load_dataset(strict=True)
    assert dataset.report.ok and len(dataset) >= 6
    raw = [json.loads(line) for line in Path(dataset.source).read_text(encoding="utf-8").splitlines() if line]
    assert [s.to_record() for s in dataset] == raw


def test_bad_intensity_names_file_line_sample_row_and_field(tmp_path: Path) -> None:
    rows = [make_row(i, "Ana") for i in range(12)]
    rows[11]["internal_emotion"] = [{"person": "Ana", "emotion_description": "feels low", "intensity": "high"}]
    good = make_sample("good/001", ["Ana", "Therapist"])
    bad = {"sample_id": "ana_and_ben/003", "scenario": "couple", "rows": rows}
    path = write_jsonl(
        tmp_path / "benchmark.jsonl", [good] * 1 + [make_sample(f"x/{i}", ["Ana"]) for i in range(15)] + [bad]
    )
    dataset = load_dataset(path)
    assert [str(p) for p in dataset.report.problems] == [
        "benchmark.jsonl:17 sample ana_and_ben/003 row 12: internal_emotion[0].intensity: 'high' is not a number"
    ]
    assert dataset.report.samples_skipped == 1 and len(dataset) == 16


def test_strict_mode_raises_on_the_first_problem(tmp_path: Path) -> None:
    bad = make_sample("s/1", ["Ana"])
    bad["rows"][0]["internal_emotion"] = [{"person": "Ana", "intensity": True}]
    path = write_jsonl(tmp_path / "d.jsonl", [make_sample("s/0", ["Ana"]), bad, {"rows": 3}])
    with pytest.raises(DataError, match=r"^d.jsonl:2 sample s/1 row 1: internal_emotion\[0\].intensity: True is not"):
        load_dataset(path, strict=True)
    # Without --strict both bad samples are reported and the good one is kept.
    dataset = load_dataset(path)
    assert len(dataset) == 1 and dataset.report.samples_skipped == 2


def test_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "release.jsonl"
    good = json.dumps(make_sample("s/1", ["Ana", "Therapist"]))
    path.write_text(good + "\n" + good.replace("s/1", "s/2")[:-40], encoding="utf-8")
    dataset = load_dataset(path)
    assert len(dataset) == 1
    (problem,) = dataset.report.problems
    assert str(problem).startswith("release.jsonl:2: invalid JSON (truncated line?):")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match=r"^0 samples could be read from .*empty.jsonl: the file is empty$"):
        load_dataset(path)


@pytest.mark.parametrize("content", [b"\x8f\x00\xff\x10" * 64 + b"\n\xfe\xfa", b'{"a": 1}\n[1, 2]\nnot json\n'])
def test_no_valid_sample_is_one_data_error_with_the_report(tmp_path: Path, content: bytes) -> None:
    """Random bytes, or lines that are all invalid: one error (not an empty dataset), with the loader's report."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        load_dataset(path)
    report = info.value.report
    assert report is not None and report.samples_read == report.samples_skipped == len(report.problems) > 0
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"0 samples could be read from {path}: {len(report.problems)} problem")
    assert message.endswith(str(report.problems[0]))


def test_a_filter_that_keeps_nothing_is_not_a_data_error(tmp_path: Path) -> None:
    """Valid samples that --sample-ids or --limit leave out: an empty dataset (evaluate says nothing to evaluate)."""
    path = write_jsonl(tmp_path / "d.jsonl", [make_sample("s/1", ["Ana"])])
    assert len(load_dataset(path, sample_ids=["s/9"])) == 0 and len(load_dataset(path, limit=0)) == 0


def test_directory_without_sample_files(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(DataError, match=r"^0 samples could be read from .*: no \*\.json sample files"):
        load_dataset(tmp_path)


def test_non_utf8_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    good = json.dumps(make_sample("s/1", ["Ana"])).encode()
    bad = json.dumps(make_sample("s/2", ["Ana"])).encode().replace(b"thinking", b"thinking \xe9")
    path.write_bytes(good + b"\n" + bad + b"\n")
    dataset = load_dataset(path)
    assert dataset.sample_ids == ["s/1"]
    offset = bad.index(b"\xe9")
    assert [str(p) for p in dataset.report.problems] == [
        f"latin.jsonl:2: not valid UTF-8 (byte 0xe9 at offset {offset})"
    ]


def test_rows_that_are_not_a_list(tmp_path: Path) -> None:
    records = [{"sample_id": "s/1", "rows": {"0": "x"}}, {"sample_id": "s/2"}, make_sample("s/3", ["Ana"])]
    messages = [str(p) for p in load_dataset(write_jsonl(tmp_path / "d.jsonl", records)).report.problems]
    assert messages == [
        "d.jsonl:1 sample s/1: rows: Input should be a valid list (got {'0': 'x'})",
        "d.jsonl:2 sample s/2: rows: Field required",
    ]


def test_duplicate_sample_ids(tmp_path: Path) -> None:
    records = [make_sample("s/1", ["Ana"]), make_sample("s/2", ["Ana"]), make_sample("s/1", ["Bo"])]
    dataset = load_dataset(write_jsonl(tmp_path / "d.jsonl", records))
    assert dataset.sample_ids == ["s/1", "s/2"]
    assert dataset[0].rows[0].primary_speaker == "Ana"  # the first one wins
    assert [str(p) for p in dataset.report.problems] == [
        "d.jsonl:3 sample s/1: duplicate sample id (first seen at d.jsonl:1); skipped"
    ]
    with pytest.raises(DataError, match="duplicate sample id"):
        load_dataset(tmp_path / "d.jsonl", strict=True)


def test_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [[1, 2], make_sample("s/1", ["Ana"])])
    dataset = load_dataset(path)
    assert [str(p) for p in dataset.report.problems] == ["d.jsonl:1: expected a JSON object (one sample), got list"]


def test_missing_path() -> None:
    with pytest.raises(DataError, match="no such file or directory"):
        load_dataset("/nonexistent/benchmark.jsonl")


def test_directory_of_per_sample_files(tmp_path: Path) -> None:
    (tmp_path / "ana_and_ben").mkdir()
    (tmp_path / "family_therapy" / "004").mkdir(parents=True)
    sample = make_sample("ignored", ["Ana", "Therapist"], scenario=None)
    del sample["sample_id"]
    (tmp_path / "ana_and_ben" / "001_seg.json").write_text(json.dumps(sample))
    (tmp_path / "family_therapy" / "004" / "merged.json").write_text(json.dumps(sample))
    (tmp_path / "manifest.json").write_text("")  # the release's empty manifest is ignored (App. C)
    dataset = load_dataset(tmp_path)
    assert dataset.report.ok
    assert dataset.sample_ids == ["ana_and_ben/001_seg", "family_therapy/004/merged"]
    assert [s.scenario for s in dataset] == [None, None]
    assert [len(dataset.by_scenario(s)) for s in ("couple", "family")] == [1, 1]
    # The hash changes with the content.
    before = dataset.sha256
    (tmp_path / "ana_and_ben" / "001_seg.json").write_text(json.dumps({**sample, "rows": []}))
    assert load_dataset(tmp_path).sha256 != before


def test_directory_problem_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.json").write_text('{"rows": [{"target": "Ana"}]}')
    (tmp_path / "a" / "c.json").write_text(json.dumps(make_sample("ignored", ["Ana"])))  # one valid sample
    (problem,) = load_dataset(tmp_path).report.problems
    assert str(problem) == "a/b.json sample a/b row 1: target: Input should be a valid list (got 'Ana')"


@pytest.mark.parametrize(
    "content",
    ["s/2\n\ns/3\n", '["s/2", "s/3"]', '{"sample_ids": ["s/3", "s/2"]}'],
    ids=["plain-text", "json-list", "json-object"],
)
def test_sample_id_filter_formats(tmp_path: Path, content: str) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [make_sample(f"s/{i}", ["Ana"]) for i in range(1, 5)])
    ids = tmp_path / "ids.txt"
    ids.write_text(content)
    assert read_sample_ids(ids) in (["s/2", "s/3"], ["s/3", "s/2"])
    assert load_dataset(data, sample_ids=ids).sample_ids == ["s/2", "s/3"]  # input order is kept


def test_filter_then_limit_and_missing_ids(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [make_sample(f"s/{i}", ["Ana"]) for i in range(1, 5)])
    dataset = load_dataset(data, sample_ids=["s/4", "s/2", "s/9"], limit=1)
    assert dataset.sample_ids == ["s/2"]
    assert dataset.report.missing_sample_ids == ["s/9"]
    assert load_dataset(data, limit=0).sample_ids == []


def test_bad_sample_id_list(tmp_path: Path) -> None:
    ids = tmp_path / "ids.json"
    ids.write_text('{"samples": ["a"]}')
    with pytest.raises(DataError, match="expected a JSON list of strings"):
        read_sample_ids(ids)


def test_optional_fields_default_and_are_not_invented(tmp_path: Path) -> None:
    sample = Sample.model_validate({"sample_id": "s/1", "rows": [{"primary_speaker": "Ana"}]})
    row = sample.rows[0]
    assert (row.relation_cycle_state, row.relation_pattern, row.body_posture, row.start_time) == (
        None,
        None,
        [],
        0.0,
    )
    assert row.to_record() == {"primary_speaker": "Ana"}
    assert sample.to_record() == {"sample_id": "s/1", "rows": [{"primary_speaker": "Ana"}]}


def test_unknown_keys_survive_the_round_trip() -> None:
    record = {
        "sample_id": "s/1",
        "extra": {"a": 1},
        "rows": [{"primary_speaker": "Ana", "new_field": [1, "x"]}],
    }
    assert Sample.model_validate(record).to_record() == record


_ROW = {"start_time": 0, "end_time": 1, "primary_speaker": "Ana", "dialogue_cleaned": "hi"}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [{**_ROW, "internal_emotion": [{"person": "Ana", "intensity": 11}]}],
            " row 1: internal_emotion[0].intensity: must be between 0 and 10, got 11",
        ),
        (
            [{**_ROW, "internal_emotion": [{"person": "Ana", "intensity": -3}]}],
            " row 1: internal_emotion[0].intensity: must be between 0 and 10, got -3",
        ),
        ([{**_ROW, "start_time": -1}], " row 1: start_time: must be >= 0, got -1"),
        ([_ROW, {**_ROW, "start_time": 5, "end_time": 2}], " row 2: end_time 2 is before start_time 5"),
        ([], ": rows: List should have at least 1 item after validation, not 0 (got [])"),
        ([_ROW, {}], " row 2: primary_speaker is missing or empty: every row has a speaker"),
        ([{**_ROW, "primary_speaker": "  "}], " row 1: primary_speaker is missing or empty: every row has a speaker"),
    ],
)
def test_values_the_release_never_has_are_problems(tmp_path: Path, rows: list, expected: str) -> None:
    path = tmp_path / "d.jsonl"
    good = {"sample_id": "ok/1", "rows": [_ROW]}
    path.write_text(json.dumps({"sample_id": "bad/1", "rows": rows}) + "\n" + json.dumps(good) + "\n")
    report = load_dataset(path).report
    (problem,) = report.problems
    assert str(problem) == "d.jsonl:1 sample bad/1" + expected
    assert report.samples_loaded == 1 and report.samples_skipped == 1


def test_deep_nesting_and_unreadable_files_are_one_line_errors(tmp_path: Path, monkeypatch) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"sample_id": "s/1", "rows": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DataError, match="nested too deeply"):
        load_dataset(deep, strict=True)
    locked = tmp_path / "locked.jsonl"
    locked.write_text("{}\n")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(DataError, match="locked.jsonl: cannot read: Permission denied"):
        load_dataset(locked)


_NO_SPEAKER = " row 1: primary_speaker is missing or empty: every row has a speaker"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (  # every inconsistent row counts, each at its own place
            [{**_ROW, "primary_speaker": ""}, _ROW, {**_ROW, "start_time": 5, "end_time": 2}],
            _NO_SPEAKER + " (and 1 more problem(s) in this sample)",
        ),
        (  # a row's consistency comes before a later row's field problem
            [{**_ROW, "primary_speaker": " "}, _ROW, {**_ROW, "internal_emotion": [{"intensity": 11}]}],
            _NO_SPEAKER + " (and 1 more problem(s) in this sample)",
        ),
        (  # a row with a field problem is not checked for consistency as well
            [{**_ROW, "primary_speaker": "", "internal_emotion": [{"intensity": "x"}]}, {**_ROW, "end_time": -1}],
            " row 1: internal_emotion[0].intensity: 'x' is not a number (and 1 more problem(s) in this sample)",
        ),
        ([{**_ROW, "start_time": 1e20, "end_time": 1}], " row 1: end_time 1 is before start_time 1e+20"),
        (
            [{**_ROW, "end_time": 10**30}, {**_ROW, "start_time": 0.5, "end_time": 0.25}],
            " row 2: end_time 0.25 is before start_time 0.5",
        ),
    ],
)
def test_several_problems_in_one_sample(tmp_path: Path, rows: list, expected: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"sample_id": "bad/1", "rows": rows}) + "\n" + json.dumps({"sample_id": "ok/1", "rows": [_ROW]})
    )
    (problem,) = load_dataset(path).report.problems
    assert str(problem) == "d.jsonl:1 sample bad/1" + expected


def test_the_schema_itself_refuses_inconsistent_rows_and_keeps_number_types() -> None:
    with pytest.raises(ValidationError, match="row 2: end_time 2 is before start_time 5"):
        Sample.model_validate({"sample_id": "s", "rows": [_ROW, {**_ROW, "start_time": 5, "end_time": 2}]})
    with pytest.raises(ValidationError, match="not a number"):
        Sample.model_validate({"sample_id": "s", "rows": [{**_ROW, "start_time": "5"}]})
    row = Sample.model_validate_json(json.dumps({"sample_id": "s", "rows": [{**_ROW, "end_time": 7.5}]})).rows[0]
    assert (type(row.start_time), type(row.end_time)) == (int, float)  # 0 stays 0, 7.5 stays 7.5


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        dataset = load_dataset()
        assert gc.isenabled() is enabled and gc.get_freeze_count() == 0  # nothing left frozen
        old = {id(o) for o in gc.get_objects(generation=2)}
        assert id(dataset.samples[0].rows[0]) in old  # promoted without a scan, still collectable
    finally:
        gc.enable() if was else gc.disable()


def test_objects_the_caller_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        load_dataset()
        assert gc.get_freeze_count() > 0  # the loader's promotion (freeze + unfreeze) was skipped
    finally:
        gc.unfreeze()
