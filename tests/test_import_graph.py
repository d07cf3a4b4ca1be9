"""No circle among the agent's modules, counting imports inside functions too.

A lazy import (inside a function) hides a circle from Python but not from a reader: two
modules that import each other cannot be understood, tested or moved one at a time.
`bootstrap` and `mindcluster_chain` once did; the table sources now share their shape
through `tablesource` and only the chain imports a source.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ascend_node"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every ascend_node module `path` imports anywhere in its text (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                found.append([*path[path.index(nxt):], nxt])
            elif nxt not in done:
                visit(nxt, [*path, nxt])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    return found


def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "ascend_node.mindcluster_chain" in graph["ascend_node.bootstrap"]  # in a function
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_table_sources_do_not_import_the_chain() -> None:
    graph = import_graph()
    assert "ascend_node.bootstrap" not in graph["ascend_node.mindcluster_chain"]
    assert "ascend_node.bootstrap" not in graph["ascend_node.tablesource"]
