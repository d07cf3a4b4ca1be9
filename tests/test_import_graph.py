"""The house's layout holds: no circle among modules or packages, and every unit sits on
its floor (docs/design.md, "The layout"). Imports inside functions count too.

A lazy import (inside a function) hides a circle from Python but not from a reader: two
modules that import each other cannot be understood, tested or moved one at a time. The
chain once imported MindCluster's source and was imported back; the rendezvous and the
pre-flight once imported each other. Now the table sources share their shape through
`sources.base`, only the chain imports a source, and the rendezvous carries the members'
health facts (`discover.health`) and is handed node 0's judge by the chain.
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
    assert "ascend_node.sources.mindcluster" in graph["ascend_node.chain.table"]  # in a function
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_table_sources_do_not_import_the_chain() -> None:
    graph = import_graph()
    assert "ascend_node.chain.table" not in graph["ascend_node.sources.mindcluster"]
    assert "ascend_node.chain.table" not in graph["ascend_node.sources.base"]


# Top to bottom; a unit imports only from its own floor or the floors below. A "unit" is a package
# (`ascend_node.rendezvous`) or a top-level module (`ascend_node.errors`).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("__main__", "cli"),                                 # the commands
    ("doctor", "sim", "launch"),                         # what operators run beside a job
    ("jobspec",),                                        # the Jobs `manifest` and `launch` render
    ("status",),                                         # the probes' reader
    ("chain",),                                          # the chain: orders the steps
    ("pd",),                                             # a PD service's global rank table
    ("sources",),                                        # steps 1-5 from MindCluster's file
    ("report",),                                         # each node's timeline summary
    ("handoff",),                                        # steps 5-8: outputs to exec
    ("settings",),                                       # every option, resolved and checked
    ("preflight",),                                      # rides on the rendezvous
    ("rendezvous",),                                     # step 3 on the shared volume
    ("discover", "ranktable"),                           # steps 1-2 and 4, pure at heart
    ("errors", "atomic", "tools", "logs", "events", "statedir", "quantities",
     "pydantic_plugins", "kube"),  # the ground (kube: the door to the Kubernetes API)
)
GROUND = FLOORS[-1]
STEPS = ("discover", "rendezvous", "preflight", "sources", "handoff", "chain")


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "" is the package itself (__version__)


def unit_graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        out.setdefault(unit(name), set()).update(
            unit(t) for t in targets if unit(t) != unit(name))
    return out


def test_every_unit_has_a_floor() -> None:
    placed = {u for floor in FLOORS for u in floor}
    assert set(unit_graph()) - {""} == placed


def test_no_two_packages_import_each_other() -> None:
    graph = unit_graph()
    mutual = sorted({tuple(sorted((a, b))) for a, bs in graph.items() for b in bs
                     if a in graph.get(b, set())})
    assert mutual == []
    assert cycles(graph) == []


def test_no_unit_imports_from_a_floor_above() -> None:
    floor = {u: i for i, f in enumerate(FLOORS) for u in f}
    floor[""] = len(FLOORS)  # the package's __init__ (the version) is below everything
    upward = sorted(f"{a} -> {b}" for a, bs in unit_graph().items() if a
                    for b in bs if floor[b] < floor[a])
    assert upward == []


def test_the_ground_imports_no_step_and_no_step_a_command() -> None:
    graph = unit_graph()
    assert {u: graph[u] & set(STEPS) for u in GROUND if graph[u] & set(STEPS)} == {}
    assert {u: graph[u] & {"cli"} for u in STEPS if "cli" in graph[u]} == {}


def test_the_rendezvous_knows_nothing_of_the_preflight() -> None:
    graph = import_graph()
    assert {m: sorted(t) for m, t in graph.items() if m.startswith("ascend_node.rendezvous")
            and any(x.startswith("ascend_node.preflight") for x in t)} == {}


def test_the_floors_catch_an_upward_import() -> None:
    floor = {u: i for i, f in enumerate(FLOORS) for u in f}
    assert floor["rendezvous"] > floor["preflight"] > floor["chain"]  # preflight -> rendezvous ok
    assert floor["errors"] > floor["discover"]
