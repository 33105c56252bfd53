"""The inspect_ai bridge (``bridges/inspect_tasks.py``) reports our metrics.

On the demo data, one local OpenAI-compatible server answers both ``rescue-bench evaluate --batch-size 1`` and
inspect's ``eval()`` of the six ``rescue_*`` tasks (inspect's own ``openai`` provider, model ``openai/fake``), with
answers that depend only on the prompt: the mock model's, varied per prompt (malformed answers, missing items,
other labels and intensities, judge scores 1-5 and invalid verdicts). Both runs send the same prompts, and every
metric of every task is equal per scope (Couple, Family, Both), "not run" included. Also: the command line
(``inspect eval`` with a task file and with the ``rescue`` entry point), no gold in a sample, and the README
snippet, run as written.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")
# inspect_ai 0.3.285 calls a deprecated tenacity argument on every model call
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

from agents.fake_server import FakeOpenAIServer  # noqa: E402
from agents.mock import last_user_text, mock_responder  # noqa: E402
from benchmarks.registry import TASK_NAMES  # noqa: E402
from benchmarks.results import SCOPE_TITLES, SCOPES  # noqa: E402
from rescue_env.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 16  # instances per task (our stratified limit: both scenarios in every task)
PROBE = "Reply with the word OK."  # the runner's probe request (inspect sends none)

# The README's inspect snippet (tests/test_readme.py runs it too, once it is in README.md).
README_SNIPPET = """\
from inspect_ai import eval
from bridges.inspect_tasks import rescue_rpp

# RPP on the demo data, one instance per sample; mockllm/model answers "Default output" (every answer is
# malformed, so scored wrong); use a real model, e.g. model="openai/gpt-4o-mini".
[log] = eval(rescue_rpp(limit=12), model="mockllm/model", display="none", log_dir="inspect-logs")
for name, value in log.results.scores[0].metrics.items():
    print(f"{name:18} {value.value:.3f}")
"""


def _openai_provider_usable() -> bool:
    """inspect's ``openai`` provider needs openai >= 3.4 (``inspect_ai.model._providers.providers``)."""
    try:
        major, minor = (int(p) for p in importlib.metadata.version("openai").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (3, 4)


needs_openai_provider = pytest.mark.skipif(
    not _openai_provider_usable(), reason="inspect's openai provider needs openai>=3.4 (installed: older or none)"
)


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16)


def _rotate(value, by: int):
    if isinstance(value, list) and len(value) > 1 and all(isinstance(v, str) for v in value):
        by %= len(value)
        return value[by:] + value[:by]
    return value


EMOTIONS = ("feels dismissed and frustrated", "feels hurt and sad", "feels hopeful but guarded", "calm")


def answer(body: dict) -> str:
    """The mock model's answer, varied by a hash of the prompt (so both runs get the same answer to a prompt)."""
    messages = body["messages"]
    prompt = last_user_text(messages)
    h = _digest(prompt)
    if "Answer with JSON only, exactly in this form:" in prompt:  # the judge
        if h % 7 == 0:
            return "I would rate this a four."  # no JSON: a failed verdict
        if h % 7 == 1:
            return json.dumps({"score": 9, "reason": "out of range"})
        return json.dumps({"score": 1 + h % 5, "reason": "varied"})
    if h % 9 == 0:
        return "I cannot help with that"  # malformed_json
    if h % 9 == 1:
        return json.dumps({"answers": []})  # missing_item
    text = mock_responder(messages)
    try:
        payload = json.loads(text)
        items = payload["answers"]
    except (ValueError, KeyError, TypeError):
        return text
    for item in items:
        for key, value in list(item.items()):
            item[key] = _rotate(value, h // 7)
        if "should_speak" in item and h % 2:
            item["should_speak"] = "no"
        if "intensity" in item:
            item["intensity"] = h % 11
            item["emotion"] = EMOTIONS[h % len(EMOTIONS)]
    return json.dumps(payload)


def _prompts(requests: list[dict]) -> Counter:
    """The chat requests as (role, text) tuples, probes left out. Inspect's openai provider sends the system
    message as "developer" to a model it takes for a reasoning model (as it does a name it does not know)."""
    out: Counter = Counter()
    for body in requests:
        messages = tuple(
            (
                "system" if m["role"] == "developer" else m["role"],
                m["content"] if isinstance(m["content"], str) else last_user_text([m]),
            )
            for m in body["messages"]
        )
        if messages != (("user", PROBE),):
            out[messages] += 1
    return out


@needs_openai_provider
def test_inspect_eval_reports_our_metrics_per_scope(tmp_path: Path, monkeypatch) -> None:
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from bridges import inspect_tasks

    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-the-local-server")
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path / "inspect-logs"))
    with FakeOpenAIServer(answer) as server:
        url = server.base_url
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        # rescue-bench evaluate, unbatched, judged by the same server
        options = ["--tasks", "all", "--batch-size", "1", "--limit", str(LIMIT), "--bootstrap", "0"]
        model = ["--model", "openai/fake", "--api-base", url, "--judge-model", "openai/fake", "--judge-api-base", url]
        code = main(
            ["evaluate", *options, *model, "--no-progress", "--allow-failures", "--output", str(tmp_path / "ours")]
        )
        assert code == 0
        ours_requests = list(server.requests)

        # inspect: the model under test and the judge ("grader" role) on the same server, chat completions API
        fake = {"responses_api": False}
        tasks = [
            getattr(inspect_tasks, f"rescue_{name}")(
                limit=LIMIT, **({"judge": "grader"} if name in ("er", "vp") else {})
            )
            for name in TASK_NAMES
        ]
        logs = inspect_eval(
            tasks,
            model="openai/fake",
            model_args=fake,
            model_roles={"grader": get_model("openai/fake", base_url=url, **fake)},
            log_dir=str(tmp_path / "inspect-logs"),
            display="none",
        )
        inspect_requests = server.requests[len(ours_requests) :]

    # the same prompts (the model's and the judge's), one per instance
    assert _prompts(inspect_requests) == _prompts(ours_requests)

    ours = json.loads((tmp_path / "ours" / "results.json").read_text())
    assert [log.status for log in logs] == ["success"] * len(TASK_NAMES)
    failures = 0
    for name, log in zip(TASK_NAMES, logs):
        task = ours["tasks"][name]
        assert len(log.samples) == task["instances"]
        failures += task["failures"]
        got = {key: metric.value for key, metric in log.results.scores[0].metrics.items()}
        expected = {}
        for scope in SCOPES:
            assert task["scopes"][scope]["instances"] > 0, (name, scope)
            for key, entry in task["scopes"][scope]["metrics"].items():
                if entry["value"] is not None:  # "not run" (None) is no metric in inspect's results
                    expected[f"{SCOPE_TITLES[scope].lower()}/{key}"] = entry["value"]
        assert got.keys() == expected.keys(), name
        # BERTScore is computed per instance in inspect, in batches of pairs in ours: equal to 1e-6
        exact = [key for key in got if not key.endswith("/bertscore")]
        assert {k: got[k] for k in exact} == {k: expected[k] for k in exact}, name
        assert {k: got[k] for k in got if k not in exact} == pytest.approx(
            {k: expected[k] for k in got if k not in exact}, abs=1e-6
        ), name
        if name in ("er", "vp"):  # the judge ran and BERTScore ran, in both
            assert {"both/bertscore", "both/s_er" if name == "er" else "both/judge"} <= got.keys(), name
        # no gold in what a solver sees: an empty target, observable metadata only; the gold is in the score
        sample = log.samples[0]
        assert sample.target == "" and set(sample.metadata) == {"task", "scenario", "sample_id", "row"}
        assert "gold" in sample.scores["rescue_scorer"].metadata["rescue"]
    assert failures > 0  # the varied answers reached the failure paths, and both scored them wrong


@needs_openai_provider
def test_inspect_command_line_runs_a_task_file_and_the_entry_point(tmp_path: Path) -> None:
    # The entry point as pyproject.toml declares it ([project.entry-points.inspect_ai] rescue = ...), installed
    # here as a bare dist-info on PYTHONPATH, so this test does not depend on how the checkout was installed.
    info = tmp_path / "site" / "rescue_bridge_entry_point-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rescue-bridge-entry-point\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[inspect_ai]\nrescue = bridges.inspect_tasks\n")
    with FakeOpenAIServer(answer) as server:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(info.parent), str(ROOT)]),
            "OPENAI_API_KEY": "dummy-key-for-the-local-server",
            "OPENAI_BASE_URL": server.base_url,
        }
        command = [
            sys.executable,
            "-m",
            "inspect_ai",
            "eval",
            "rescue/rescue_rpp",
            "bridges/inspect_tasks.py@rescue_itp",
        ]
        options = ["--model", "openai/fake", "-M", "responses_api=false", "-T", "limit=4", "--display", "plain"]
        done = subprocess.run(
            [*command, *options, "--log-dir", str(tmp_path / "logs")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert server.request_count == 8  # 4 instances of each task, one request each
    output = done.stdout + done.stderr
    assert re.search(r"both/accuracy\s+\d", output) and re.search(r"both/f1\s+\d", output)


def _texts(value) -> list[str]:
    """The gold's phrases (strings of three words or more: an annotation, never a name shown as a choice)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) and len(value.split()) >= 3 else []


def test_no_gold_in_samples_and_the_readme_snippet_runs_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    from bridges import inspect_tasks

    for name in TASK_NAMES:
        options = {"bertscore": False} if name in ("er", "vp") else {}
        built = getattr(inspect_tasks, f"rescue_{name}")(limit=6, **options)
        instances = {i.instance_id: i for i in inspect_tasks._instances(name, "demo", "paper")}
        for sample in built.dataset:
            assert sample.target == ""
            shown = json.dumps(sample.metadata) + " ".join(str(m.content) for m in sample.input)
            assert not [text for text in _texts(instances[sample.id].gold) if text in shown], sample.id
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "bridges.inspect_tasks" in readme:  # once the README carries it, it carries exactly this snippet
        assert README_SNIPPET in re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(README_SNIPPET, "README snippet", "exec"), {})
    printed = capsys.readouterr().out
    assert re.search(r"^both/accuracy\s+0\.000$", printed, re.M), printed
