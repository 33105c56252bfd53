"""Load RESCUE-Bench data: the release JSONL, a directory of per-sample JSON files, or the embedded demo data.

Every problem in the input becomes a ``LoadProblem`` that names the file, line, sample id, row and field, e.g.
``benchmark.jsonl:17 sample ana_and_ben/003 row 12: internal_emotion[0].intensity: 'high' is not a number``.
By default a bad sample is skipped and loading goes on; ``strict=True`` raises ``DataError`` on the first problem.
Input from which no sample at all could be read (empty, random bytes, every sample invalid) raises ``DataError``
with one line, "0 samples could be read from PATH: ..." (``nothing_read``), in every mode.
No data error ever surfaces as a Python traceback from the command line.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rescue_env.data.schema import ROW_CHECKS, Sample, Scenario, error_message, row_problem

DEMO = "demo"
"""Name that selects the embedded demo dataset wherever a data path is expected."""

_DEMO_FILE = "rescue_demo.jsonl"


class LoadProblem(BaseModel):
    """One problem found while loading; ``str()`` gives the one-line message users see."""

    file: str
    line: int | None = None
    sample_id: str | None = None
    row: int | None = None
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where]
        if self.sample_id is not None:
            parts.append(f"sample {self.sample_id}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        text = " ".join(parts) + ": "
        if self.field:
            text += f"{self.field}: "
        return text + self.message


class DataError(Exception):
    """Raised for unusable input (strict mode, a missing path, input from which no valid sample could be read:
    see ``nothing_read``)."""

    def __init__(
        self, problems: LoadProblem | Sequence[LoadProblem] | str, *, report: LoadReport | None = None
    ) -> None:
        # ``report``: what loading found before it gave up (``data validate`` lists all of its problems).
        self.report = report
        if isinstance(problems, str):
            self.problems: list[LoadProblem] = list(report.problems) if report is not None else []
            message = problems
        else:
            self.problems = [problems] if isinstance(problems, LoadProblem) else list(problems)
            message = "\n".join(str(p) for p in self.problems)
        super().__init__(message)


class LoadReport(BaseModel):
    """What loading did: how many samples were read, kept, skipped, and why."""

    source: str
    samples_read: int = 0
    samples_loaded: int = 0
    samples_skipped: int = 0
    problems: list[LoadProblem] = []
    missing_sample_ids: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Dataset:
    """Validated samples in input order, with where they came from and a content hash for results files."""

    samples: list[Sample] = field(repr=False)  # an error that shows an env's arguments must not dump the data
    source: str
    sha256: str
    report: LoadReport
    _by_id: dict[str, Sample] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {s.sample_id: s for s in self.samples}

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def __getitem__(self, index: int) -> Sample:
        return self.samples[index]

    def get(self, sample_id: str) -> Sample:
        try:
            return self._by_id[sample_id]
        except KeyError:
            raise KeyError(f"no sample {sample_id!r} in {self.source}") from None

    @property
    def sample_ids(self) -> list[str]:
        return [s.sample_id for s in self.samples]

    def by_scenario(self, scenario: Scenario) -> list[Sample]:
        from rescue_env.data.domain import scenario_of

        return [s for s in self.samples if scenario_of(s) == scenario]


def demo_path() -> Path:
    """Path of the embedded demo dataset (written by the rescue-env authors, not part of the release)."""
    return Path(str(resources.files("rescue_env.data").joinpath("demo", _DEMO_FILE)))


def resolve_path(path: str | Path | None) -> Path:
    if path is None or str(path) == DEMO:
        return demo_path()
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise DataError(f"{path}: no such file or directory")
    return resolved


def load_dataset(
    path: str | Path | None = None,
    *,
    sample_ids: Iterable[str] | str | Path | None = None,
    limit: int | None = None,
    strict: bool = False,
) -> Dataset:
    """Load and validate samples from ``path`` (default: the demo data).

    ``path`` is the release JSONL (one sample per line), a directory of per-sample ``*.json`` files (sample id =
    relative path without extension, as the authors' scripts expect; ``manifest.json`` files are ignored), or
    ``"demo"``. ``sample_ids`` (ids, or a file holding them) keeps only those samples, before ``limit`` keeps the
    first N. Bad samples are skipped and reported in ``dataset.report``; ``strict`` raises on the first one. When
    no sample is valid, ``DataError`` (``nothing_read``; its ``report`` holds every problem); a filter that keeps
    none of the valid samples gives an empty dataset.
    """
    source = resolve_path(path)
    if limit is not None and limit < 0:
        raise DataError(f"limit must be >= 0, got {limit}")
    wanted = _as_id_set(sample_ids)
    report = LoadReport(source=str(source))
    with _no_gc():
        if source.is_dir():
            records, digest = _read_directory(source, report, strict)
        else:
            records, digest = _read_jsonl(source, report, strict)
    if not records:
        # Every command that reads data stops here, with one line and exit 1, whatever made every sample unusable:
        # an all-zero table or "no instances" would hide that the input itself is bad.
        raise nothing_read(source, report)

    samples: list[Sample] = []
    seen: dict[str, str] = {}
    for sample, origin in records:
        if sample.sample_id in seen:
            _fail(
                report,
                LoadProblem(
                    file=origin.file,
                    line=origin.line,
                    sample_id=sample.sample_id,
                    message=f"duplicate sample id (first seen at {seen[sample.sample_id]}); skipped",
                ),
                strict,
            )
            continue
        seen[sample.sample_id] = origin.where
        if wanted is not None and sample.sample_id not in wanted:
            continue
        if limit is not None and len(samples) >= limit:
            continue
        samples.append(sample)

    if wanted is not None:
        report.missing_sample_ids = sorted(wanted - seen.keys())
    report.samples_loaded = len(samples)
    return Dataset(samples=samples, source=str(source), sha256=digest, report=report)


def nothing_read(source: str | Path, report: LoadReport | None = None, reason: str | None = None) -> DataError:
    """The one error of input from which no sample could be read: an empty file, a directory without sample
    files, or a file (or directory) whose every sample is invalid (random bytes, another format ...).

    ``0 samples could be read from PATH: REASON``, the reason being the loader's count of problems and the first.
    """
    if reason is None:
        problems = report.problems if report is not None else []
        first = " ".join(str(problems[0]).split()) if problems else ""  # one line, whatever the message holds
        if not problems:
            reason = "no sample found"
        elif len(problems) == 1:
            reason = f"1 problem: {first}"
        else:
            reason = f"{len(problems)} problems, the first: {first}"
    return DataError(f"0 samples could be read from {source}: {reason}", report=report)


def read_sample_ids(path: str | Path) -> list[str]:
    """Read a sample-id list: a JSON list, a JSON object with ``sample_ids``, or plain text (one id per line)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read sample-id list: {exc}") from None
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: invalid JSON in sample-id list: {exc}") from None
        if isinstance(data, dict):
            data = data.get("sample_ids")
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise DataError(f"{path}: expected a JSON list of strings or an object with 'sample_ids'")
        ids = data
    else:
        ids = text.splitlines()
    return [i.strip() for i in ids if i.strip()]


# --- internals -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Origin:
    file: str
    line: int | None

    @property
    def where(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@contextmanager
def _no_gc() -> Iterator[None]:
    """No cyclic garbage collection while samples are built, and none right after over them.

    Parsing the release makes ~2 x 10^5 container objects and no garbage cycle, yet with the collector on, each
    burst of allocations triggers collections that rescan everything built so far: about half of the loading time.
    So the collector is off during the parse, and the new objects (long-lived by nature) then go straight to the
    oldest generation (``gc.freeze()`` + ``gc.unfreeze()``: two list splices, no traversal) instead of being
    scanned by the first young collection after it. They stay collectable, by the next full collection like any
    old object, and reference counting frees them as usual. When the caller froze objects of its own, the
    permanent generation is left alone (and the first collection pays the scan). The collector's state is
    restored."""
    was_enabled = gc.isenabled()
    others_frozen = gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if not others_frozen:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


def _as_id_set(sample_ids: Iterable[str] | str | Path | None) -> set[str] | None:
    if sample_ids is None:
        return None
    if isinstance(sample_ids, (str, Path)):
        return set(read_sample_ids(sample_ids))
    return {str(i).strip() for i in sample_ids if str(i).strip()}


def _fail(report: LoadReport, problem: LoadProblem, strict: bool) -> None:
    if strict:
        raise DataError(problem)
    report.problems.append(problem)
    report.samples_skipped += 1


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, or a one-line ``DataError`` (permission denied, vanished, a device error...)."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(LoadProblem(file=str(path), message=f"cannot read: {exc.strerror or exc}")) from None


def _read_jsonl(path: Path, report: LoadReport, strict: bool) -> tuple[list[tuple[Sample, _Origin]], str]:
    raw = _read_bytes(path)
    name = path.name
    if not raw or raw.isspace():  # (not raw.strip(): that copies the whole file)
        raise nothing_read(path, report, reason="the file is empty")
    out: list[tuple[Sample, _Origin]] = []
    # hashlib releases the GIL on large buffers: the digest is computed on another core while this one parses.
    with ThreadPoolExecutor(max_workers=1) as pool:
        digest = pool.submit(lambda: hashlib.sha256(raw).hexdigest())
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            origin = _Origin(name, number)
            sample = _parse_sample(line, origin, report, strict)
            if sample is not None:
                out.append((sample, origin))
        return out, digest.result()


def _read_directory(root: Path, report: LoadReport, strict: bool) -> tuple[list[tuple[Sample, _Origin]], str]:
    files = sorted(p for p in root.rglob("*.json") if p.name != "manifest.json")
    if not files:
        raise nothing_read(root, report, reason="no *.json sample files in this directory")
    hasher = hashlib.sha256()
    out: list[tuple[Sample, _Origin]] = []
    for file in files:
        rel = file.relative_to(root).with_suffix("").as_posix()
        raw = _read_bytes(file)
        hasher.update(rel.encode() + b"\0" + raw + b"\0")
        origin = _Origin(file.relative_to(root).as_posix(), None)
        sample = _parse_sample(raw, origin, report, strict, sample_id=rel)
        if sample is not None:
            out.append((sample, origin))
    return out, hasher.hexdigest()


def _parse_sample(
    raw: bytes, origin: _Origin, report: LoadReport, strict: bool, sample_id: str | None = None
) -> Sample | None:
    report.samples_read += 1
    if sample_id is None:
        # Fast path: pydantic parses and validates the raw bytes in one pass (invalid UTF-8 fails it too); only a
        # failure pays for the second, diagnostic parse below, which finds the one-line message.
        try:
            return Sample.model_validate_json(raw)
        except ValidationError:
            pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        _fail(report, LoadProblem(file=origin.file, line=origin.line, message=problem), strict)
        return None
    try:
        data = json.loads(text)
    except RecursionError:
        message = "invalid JSON: nested too deeply to read (no sample of the release nests more than a few levels)"
        _fail(report, LoadProblem(file=origin.file, line=origin.line, message=message), strict)
        return None
    except json.JSONDecodeError as exc:
        hint = "" if text.rstrip().endswith("}") else " (truncated line?)"
        message = f"invalid JSON{hint}: {exc.msg} (column {exc.colno})"
        _fail(report, LoadProblem(file=origin.file, line=origin.line, message=message), strict)
        return None
    if not isinstance(data, dict):
        message = f"expected a JSON object (one sample), got {type(data).__name__}"
        _fail(report, LoadProblem(file=origin.file, line=origin.line, message=message), strict)
        return None
    if sample_id is not None:
        # Authors' directory layout: the id is the file's relative path (reference-spec 2.1).
        data = {**data, "sample_id": sample_id}
    try:
        return Sample.model_validate(data)
    except ValidationError as exc:
        ident = data.get("sample_id") if isinstance(data.get("sample_id"), str) else None
        errors = _sample_errors(exc, data)
        problem = _problem_from_error(errors[0], origin, ident)
        if len(errors) > 1:
            problem.message += f" (and {len(errors) - 1} more problem(s) in this sample)"
        _fail(report, problem, strict)
        return None


def _sample_errors(exc: ValidationError, data: dict[str, Any]) -> list[Any]:
    """The sample's problems in reading order: the field errors, and each row whose fields are valid but whose
    speaker or times are not (``schema.row_problem``) at that row's place among the rows' errors.

    ``Sample`` checks the rows' consistency once, after all fields are valid, and stops at the first bad row; here
    every such row is found, also next to field errors elsewhere in the sample, as a check per row would."""
    errors = [e for e in exc.errors(include_url=False) if not (e["type"] in ROW_CHECKS and not e["loc"])]
    rows = data.get("rows")
    if not isinstance(rows, list) or any(tuple(e["loc"]) == ("rows",) for e in errors):
        return errors or exc.errors(include_url=False)
    failed = {e["loc"][1] for e in errors if len(e["loc"]) >= 2 and e["loc"][0] == "rows"}
    checks = []
    for position, row in enumerate(rows):
        if position in failed or not isinstance(row, dict):
            continue
        problem = row_problem(row.get("primary_speaker", ""), row.get("start_time", 0.0), row.get("end_time", 0.0))
        if problem is not None:
            checks.append({"type": problem.type, "loc": ("rows", position), "msg": problem.message(), "input": row})
    in_rows = [e for e in errors if e["loc"][:1] == ("rows",)] + checks
    in_rows.sort(key=lambda e: e["loc"][1])  # stable: a row's own errors keep their order
    return [e for e in errors if e["loc"][:1] != ("rows",)] + in_rows or exc.errors(include_url=False)


VALUE_IN_MESSAGE = frozenset({"not_a_number", "missing", "out_of_range", "reversed_times", "no_speaker"})
"""Error types whose message already says what was read (``schema``'s own checks), so no "(got ...)" is added."""


def _problem_from_error(error: Any, origin: _Origin, sample_id: str | None) -> LoadProblem:
    loc = list(error["loc"])
    row = None
    if len(loc) >= 2 and loc[0] == "rows" and isinstance(loc[1], int):
        row = loc[1] + 1
        loc = loc[2:]
    field_path = ""
    for part in loc:
        field_path += f"[{part}]" if isinstance(part, int) else (f".{part}" if field_path else str(part))
    message = error_message(error) or error["msg"]
    if error["type"] not in VALUE_IN_MESSAGE and "input" in error:
        message += f" (got {_short_repr(error['input'])})"
    return LoadProblem(
        file=origin.file,
        line=origin.line,
        sample_id=sample_id,
        row=row,
        field=field_path or None,
        message=message,
    )


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
