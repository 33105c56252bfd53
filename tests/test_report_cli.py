"""`rescue-bench report`: which report it writes for what it is given, and one-line errors (exit 2, nothing
written) for what it cannot report on."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescue_env.cli import main


def _report(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def six_task_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "heuristic"
    assert main(["evaluate", "--agent", "heuristic", "--no-bertscore", "--bootstrap", "20", "-o", str(out)]) == 0
    return out


def test_a_dataset_report_prints_the_paper_comparison_and_its_path(tmp_path: Path, capsys) -> None:
    code, out, err = _report(capsys, "--data", "demo", "-o", str(tmp_path / "data"))
    assert code == 0, err
    # demo data: one line, not dozens of "x" lines; --verbose lists them
    assert out.startswith("demo data: not expected to match the paper; ") and " x " not in out
    assert f"report: {tmp_path / 'data' / 'report.html'}" in out
    code, out, err = _report(capsys, "--data", "demo", "-o", str(tmp_path / "data"), "--verbose")
    assert "this data next to the paper" in out and "x Table 3: Samples (Couple): 4 | paper 174" in out
    assert (tmp_path / "data" / "report.md").is_file() and list((tmp_path / "data" / "figures").glob("*.png"))


def test_one_run_gets_its_report_beside_it_and_two_runs_a_comparison(six_task_run: Path, tmp_path, capsys) -> None:
    code, out, err = _report(capsys, str(six_task_run))
    assert code == 0, err
    assert (six_task_run / "report" / "report.html").is_file() and str(six_task_run / "report") in out
    other = tmp_path / "random"
    assert main(["evaluate", "--agent", "random", "--no-bertscore", "--bootstrap", "20", "-o", str(other)]) == 0
    capsys.readouterr()
    code, out, err = _report(capsys, str(six_task_run), str(other), "-o", str(tmp_path / "cmp"), "--bootstrap", "50")
    assert code == 0, err
    assert (tmp_path / "cmp" / "comparison.csv").is_file() and (tmp_path / "cmp" / "paired.csv").is_file()


@pytest.mark.parametrize(
    "args,message",
    [
        ((), "nothing to report"),
        (("--data", "demo", "RUN"), "not both"),
        (("MISSING",), "not a directory"),
        (("EMPTY",), "no finished run here"),
        (("RUN", "RUN"), "given twice"),
        (("RUN", "--episode", "x"), "--episode is for rollout runs"),
    ],
)
def test_what_cannot_be_reported_is_one_line_and_exit_2(six_task_run: Path, tmp_path: Path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    names = {"RUN": str(six_task_run), "MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty")}
    code, out, err = _report(capsys, *(names.get(a, a) for a in args), "-o", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()
