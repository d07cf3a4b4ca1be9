"""`--preflight strict|warn|off`: what a failed check does (docs/design.md, "Commands").

`strict` ends the start-up with 5 (the default, and always the default for
`ranktable`); `warn` logs and goes on (the default when `boot` hands over to a training
launcher, whose users often run on partly healthy clusters on purpose); `off` runs
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Optional

if TYPE_CHECKING:
    from ascend_node.discover.health import NodeHealth
    from ascend_node.rendezvous.decide import HealthJudge, HealthVerdict

Policy = Literal["strict", "warn", "off"]
POLICIES: tuple[Policy, ...] = ("strict", "warn", "off")
TRAINING_LAUNCHERS = ("msrun", "ranktable-env", "torch")


def parse_policy(text: str) -> Policy:
    """For the settings table: the value as given, else ValueError naming the choices."""
    low = text.strip().lower()
    for p in POLICIES:
        if low == p:
            return p
    raise ValueError(f"{text!r} is not one of {', '.join(POLICIES)}")


def effective_policy(chosen: Optional[Policy], command: str,
                     launcher: Optional[str] = None) -> Policy:
    """The policy in force: the one given, else `warn` for `boot` into a training launcher,
    else `strict`."""
    if chosen is not None:
        return chosen
    if command == "boot" and launcher in TRAINING_LAUNCHERS:
        return "warn"
    return "strict"


def node0_judge(policy: str) -> Optional[HealthJudge]:
    """What node 0 does with the health facts the members publish, for the rendezvous.

    None under `off` (the facts are carried, never judged). The judge's module is imported
    on its first call, so a job whose members published nothing never loads it."""
    if policy == "off":
        return None

    def judge(published: Mapping[int, NodeHealth], master_count: int) -> HealthVerdict:
        from ascend_node.preflight.judge import apply_policy, judge_health

        return apply_policy(judge_health(published, master_count), policy)

    return judge
