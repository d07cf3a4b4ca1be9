"""A local copy of the objects a selector matches, kept current by a list and then watches.

What node 0 needs of the slots and a follower of the attempt object: the current objects, a
wake-up on every change, and control back at least every `tick` seconds (for progress lines
and the deadline, which stay the caller's). The API's recipe
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
list, then watch from the list's resourceVersion; when a watch ends, watch again from the last
version seen (BOOKMARK events move it on without a change); when the version is too old
(410 Gone, as an answer or as an ERROR event), list again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.kube.client import Client
from ascend_node.kube.errors import Gone
from ascend_node.kube.resources import Resource


@dataclass(frozen=True)
class Change:
    """What the mirror saw: `kind` is LISTED (a fresh list replaced everything: judge it
    all again), ADDED, MODIFIED, DELETED (`name` is the object's), or TICK (nothing
    changed for `tick` seconds: the caller's clocks)."""

    kind: str
    name: Optional[str] = None


class Mirror:
    """The objects of `res` matching the selectors, by name. Not thread-safe."""

    def __init__(self, client: Client, res: Resource, label_selector: Optional[str] = None,
                 field_selector: Optional[str] = None, tick: int = 10) -> None:
        self.client = client
        self.res = res
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.tick = max(1, int(tick))
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version: Optional[str] = None
        self.lists = 0
        self.watches = 0

    def relist(self) -> None:
        """Replace the copy with a fresh list and remember its version."""
        found = self.client.list(self.res, self.label_selector, self.field_selector)
        self.lists += 1
        items = found.get("items") or []
        self.objects = {o["metadata"]["name"]: o for o in items
                        if isinstance(o, dict) and isinstance(o.get("metadata"), dict)
                        and isinstance(o["metadata"].get("name"), str)}
        self.resource_version = (found.get("metadata") or {}).get("resourceVersion") or None

    def changes(self) -> Iterator[Change]:
        """LISTED first, then every change as it comes, and a TICK whenever a watch ends
        (at most `tick` seconds apart). Endless: the caller stops iterating. Errors of the
        API (`ApiUnanswered`, `Forbidden`, ...) are raised to the caller, and the copy and its
        version stay: a new `changes()` after an unanswered call resumes from where this one
        was. A 410 is not raised: it lists again and says LISTED."""
        while True:
            if self.resource_version is None:
                self.relist()
                yield Change("LISTED")
            try:
                self.watches += 1
                for event in self.client.watch(
                        self.res, resource_version=self.resource_version,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector, timeout_seconds=self.tick):
                    change = self._apply(event)
                    if change is not None:
                        yield change
            except Gone:
                self.resource_version = None
                continue
            yield Change("TICK")

    def _apply(self, event: dict[str, Any]) -> Optional[Change]:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if version:
            self.resource_version = str(version)
        kind = event.get("type")
        name = meta.get("name")
        if kind == "BOOKMARK" or not isinstance(name, str):
            return None
        if kind == "DELETED":
            self.objects.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.objects[name] = obj
        else:
            return None
        return Change(str(kind), name)
