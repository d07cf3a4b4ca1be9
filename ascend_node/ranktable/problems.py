"""What the validator reports (`Problem`) and the collector every rule reports into."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.ranktable.limits import MINDIE_MAX_STRING, Target
from ascend_node.ranktable.values import kind_of, show


@dataclass(frozen=True)
class Problem:
    """One rule a rank table (or its file) breaks."""

    path: str  # JSON path like "$.server_list[1].device[3].device_ip", or "file"
    message: str  # one line, names the bad value

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class Checker:
    """Collects problems for one document; every method tolerates any JSON shape."""

    def __init__(self, target: Target) -> None:
        self.mindie = target == "mindie"
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def string(
        self, obj: Mapping[str, Any], key: str, path: str, *, required: bool
    ) -> Optional[str]:
        """The string at ``obj[key]``, or None after reporting why it is unusable."""
        if key not in obj:
            if required:
                self.add(f"{path}.{key}", f"{key} is missing")
            return None
        value = obj[key]
        if not isinstance(value, str):
            self.add(
                f"{path}.{key}",
                f"{key} must be a JSON string, got {kind_of(value)} {show(value)}",
            )
            return None
        if self.mindie and len(value) > MINDIE_MAX_STRING:
            self.add(
                f"{path}.{key}",
                f"{key} {show(value)} is longer than MindIE's {MINDIE_MAX_STRING} characters",
            )
            return None
        return value
