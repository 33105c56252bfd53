"""The project's layering, checked mechanically from the source (``ast``; nothing is imported).

``rescue_env`` (data, envs, dynamics) < ``agents`` (model access, LLM agents) and ``policies`` (non-LLM policies)
< ``benchmarks`` (tasks, runner, reports). A module never imports a higher layer, at module level, under
``TYPE_CHECKING`` or inside a function (only ``rescue_env/cli.py``, the command that wires every layer, may), and
the project's modules import each other without a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rescue_env", "agents", "policies", "benchmarks")
LAYER = {"rescue_env": 0, "agents": 1, "policies": 1, "benchmarks": 2}
EXEMPT = {"rescue_env.cli"}  # the command line: it builds the higher layers' objects and hands them down


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


MODULES = _modules()


def _absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> Iterator[str]:
    """The modules an import statement loads: ``from pkg import sub`` names ``pkg.sub`` when that is a module."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = _absolute(node, module, path)
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in MODULES else base


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, *, runtime_module_level: bool) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import of ``module``; with ``runtime_module_level`` only those that run
    when the module is imported (not inside a function or class body's methods, not under ``TYPE_CHECKING``)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    if not runtime_module_level:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield from ((node.lineno, target) for target in _targets(node, module, path))
        return

    def visit(nodes: list[ast.stmt]) -> Iterator[tuple[int, str]]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield from ((node.lineno, target) for target in _targets(node, module, path))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue  # runs when called, not when imported
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                yield from visit(node.orelse)  # the body runs only for type checkers
            else:  # if / try / with / for / class bodies run at import
                for field in ("body", "orelse", "finalbody", "handlers"):
                    yield from visit(getattr(node, field, None) or [])

    yield from visit(tree.body)


def _layer(module: str) -> int | None:
    return LAYER.get(module.split(".")[0])


def test_the_scan_sees_the_project() -> None:
    for package in PACKAGES:
        assert package in MODULES
    assert {"rescue_env.offline", "agents.client", "agents.mock", "policies.reference", "benchmarks.runs"} <= set(
        MODULES
    )
    seen = dict(_imports("agents.client", runtime_module_level=True))
    assert "agents.mock" in seen.values()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) < 2 and m not in EXEMPT))
def test_no_module_imports_a_higher_layer(module: str) -> None:
    own = _layer(module)
    upward = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
        for line, target in _imports(module, runtime_module_level=False)
        if (layer := _layer(target)) is not None and layer > own
    ]
    assert not upward, "; ".join(upward)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for _, target in _imports(module, runtime_module_level=True):
            if target in MODULES and target != module:
                graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per back edge of a depth-first search (empty when the graph is acyclic)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_cycle_search_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circle_at_module_level() -> None:
    circles = _cycles(_graph())
    assert not circles, "; ".join(" -> ".join(c) for c in circles)


def test_no_import_circle_counting_deferred_imports() -> None:
    """Stricter: imports inside functions and under ``TYPE_CHECKING`` count too (a deferred import that closes a
    circle only hides it). A module loaded by name (``importlib.import_module``, the mock's responder modules) is
    not an edge: that is a plugin registry, not a dependency on the module's code."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for _, target in _imports(module, runtime_module_level=False):
            if target in MODULES and target != module:
                graph[module].add(target)
    circles = _cycles(graph)
    assert not circles, "; ".join(" -> ".join(c) for c in circles)


_FRESH = """
import json, sys
import agents.client
assert "agents.therapist" not in sys.modules and "agents.persona" not in sys.modules
answers = [agents.client.mock_responder(m) for m in json.load(sys.stdin)]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("agents", "benchmarks"))
print(json.dumps({"answers": answers, "loaded": loaded}))
"""


def test_the_mock_answers_every_prompt_kind_after_importing_only_the_client() -> None:
    """In a fresh interpreter that imported only ``agents.client`` (as a client worker process does), the mock
    still answers therapist and persona prompts with their agents' answers, and nothing of ``benchmarks`` loads."""
    import json
    import subprocess
    import sys

    from agents.persona import PERSONA_HEADING, mock_persona
    from agents.therapist import mock_decision, therapist_messages
    from rescue_env.envs.replay import RescueEnv

    env = RescueEnv()
    observation, _ = env.reset(seed=0)
    therapist = therapist_messages(observation)
    persona = [
        {
            "role": "user",
            "content": "You are Ana, one of the clients in a couple-therapy session.\n\n## What just happened\n"
            f"The therapist just spoke to you.\n\n{PERSONA_HEADING}\nAnswer in JSON.",
        }
    ]
    other = [{"role": "user", "content": "hello"}]
    result = subprocess.run(
        [sys.executable, "-c", _FRESH],
        input=json.dumps([therapist, persona, other]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    out = json.loads(result.stdout)
    assert out["answers"] == [mock_decision(therapist), mock_persona(persona), '{"ok": true}']
    assert {"agents.client", "agents.mock", "agents.therapist", "agents.persona"} <= set(out["loaded"])
    assert not [m for m in out["loaded"] if m.startswith("benchmarks")]
