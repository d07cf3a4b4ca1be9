"""The doctor's verdicts: one `CheckResult` per check, folded into a `DoctorReport`.

Every check returns a `CheckResult` built from `Finding`s, so the report can print one line
per check with every cause and each remedy once, and map the worst status to the exit code
the contract gives doctor (0 healthy, 3 degraded, 1 failed).

A check that had nothing to judge (no devices, no rank table yet, no peers) says "skip" and
why, instead of "ok": an empty list passing every rule is not health. A skip is not a
problem either, so it leaves the exit code alone; the summary counts skips apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from ascend_node.discover.devices import id_list as id_list

Status = Literal["ok", "skip", "warn", "fail"]
_SEVERITY: dict[str, int] = {"ok": 0, "skip": 0, "warn": 1, "fail": 2}
EXIT_CODES: dict[str, int] = {"ok": 0, "skip": 0, "warn": 3, "fail": 1}
COUNTED: tuple[Status, ...] = ("ok", "skip", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    """One problem a check found (one device, one pair, one file)."""

    status: Status
    cause: str
    remedy: str = ""


@dataclass(frozen=True)
class CheckResult:
    """One line of the report: a stable id, the verdict, what was seen, what to do."""

    id: str
    status: Status
    message: str
    remedy: str = ""
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status, "message": self.message,
            "remedy": self.remedy,
            "findings": [{"status": f.status, "cause": f.cause, "remedy": f.remedy}
                         for f in self.findings],
        }


def verdict(check_id: str, findings: Sequence[Finding], ok_message: str) -> CheckResult:
    """Fold findings into one result: worst status, every cause, each remedy once."""
    bad = [f for f in findings if f.status in ("warn", "fail")]
    if not bad:
        return CheckResult(check_id, "ok", ok_message)
    status: Status = max((f.status for f in bad), key=lambda s: _SEVERITY[s])
    remedies: list[str] = []
    for f in bad:
        if f.remedy and f.remedy not in remedies:
            remedies.append(f.remedy)
    return CheckResult(check_id, status, "; ".join(f.cause for f in bad),
                       " / ".join(remedies), tuple(bad))


def ok(check_id: str, message: str) -> CheckResult:
    return CheckResult(check_id, "ok", message)


def skip(check_id: str, why: str) -> CheckResult:
    """A check with nothing to judge; `why` says what was missing (and where to look)."""
    return CheckResult(check_id, "skip", why)


@dataclass(frozen=True)
class DoctorReport:
    """Everything doctor found; `exit_code` is 0 healthy, 3 degraded (a warn), 1 failed."""

    node: Optional[str]
    checks: tuple[CheckResult, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        worst = max((_SEVERITY[c.status] for c in self.checks), default=0)
        return ("ok", "warn", "fail")[worst]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    @property
    def problems(self) -> dict[str, Status]:
        return {c.id: c.status for c in self.checks if c.status in ("warn", "fail")}

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks) for s in COUNTED}
        state = {"ok": "healthy", "warn": "degraded", "fail": "failed"}[self.status]
        return {"node": self.node, "status": state, "exit_code": self.exit_code,
                "counts": counts, "checks": [c.to_json() for c in self.checks],
                "facts": self.facts}

    def format_text(self) -> str:
        lines = [f"ascend-node doctor: {self.node or 'unknown node'}"]
        width = max((len(c.id) for c in self.checks), default=10)
        pad = " " * (6 + width + 1)
        for c in self.checks:
            if len(c.findings) <= 1:
                lines.append(f"{c.status:<5} {c.id:<{width}} {c.message}")
            else:
                lines.append(f"{c.status:<5} {c.id:<{width}} {len(c.findings)} problems:")
                lines.extend(f"{pad}- {f.cause}" for f in c.findings)
            if c.remedy:
                lines.append(f"{pad}fix: {c.remedy}")
        counts = self.to_json()["counts"]
        state = {"ok": "healthy", "warn": "degraded", "fail": "failed"}[self.status]
        lines.append(f"{state}: {counts['fail']} fail, {counts['warn']} warn, "
                     f"{counts['ok']} ok, {counts['skip']} skipped (exit {self.exit_code})")
        return "\n".join(lines)
