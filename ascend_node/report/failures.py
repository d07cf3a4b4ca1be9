"""Failed nodes grouped by what they said, as `simulate` and `report` both print them (pure).

Sixty-four nodes that end with one abort say it once (`nodes 1, 4, 5: exit 5: ...`); a
node's own failure (exit 1) comes before the time-outs (4) and aborts (5) it causes, and
node lists are in number order (1, 2, 10), never in string order (1, 10, 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FailureGroup:
    """Nodes that ended alike: one exit code, one cause, one hint."""

    nodes: tuple[int, ...]
    exit_code: int
    cause: str
    hint: str = ""

    def line(self) -> str:
        return f"{who(self.nodes)}: exit {self.exit_code}: {self.cause}"


def who(nodes: Sequence[int]) -> str:
    """`node 3`, or `nodes 1, 4, 10` (global indices, in number order)."""
    ordered = sorted(nodes)
    if len(ordered) == 1:
        return f"node {ordered[0]}"
    return "nodes " + ", ".join(str(n) for n in ordered)


def group_failures(failed: Iterable[tuple[int, int, str, str]]) -> list[FailureGroup]:
    """(node, exit code, cause, hint) of every failed node -> its groups, own failures
    first, then by exit code and first node."""
    groups: dict[tuple[int, str, str], list[int]] = {}
    for node, code, cause, hint in failed:
        groups.setdefault((code, cause or "no message", hint), []).append(node)
    found = [FailureGroup(tuple(sorted(nodes)), code, cause, hint)
             for (code, cause, hint), nodes in groups.items()]
    return sorted(found, key=lambda f: (f.exit_code, f.nodes))


__all__ = ["FailureGroup", "group_failures", "who"]
