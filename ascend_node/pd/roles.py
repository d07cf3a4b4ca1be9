"""Who a pod is in a PD service: its role and, for a server, its instance (pure).

The job's shape: **one Volcano task per instance** (`prefill-0`, `prefill-1`, ...,
`decode-0`, ...), plus one task `coordinator` and one `controller`. Why one task per
instance rather than one per role with an instance size: Volcano's task-level policies act
on one task (`RestartTask`), so a decode instance whose pod failed can be restarted alone
while the others keep serving — with one task per role the policy would restart every
instance of that role. And Volcano already gives each task what an instance's rendezvous
needs: `VC_TASK_INDEX` is the pod's place in its task (its instance), `VC_<TASK>_NUM` the
task's replicas (the instance's pods), and the `svc` plugin injects every task's
`VC_<TASK>_NUM` into every pod, so any pod can count the instances of each role
(volcano-sh/volcano pkg/controllers/job/plugins/svc, env; task names upper-cased, `-`
becomes `_`).

Volcano does not tell a pod its task's name; the rendered Job sets it:
`ASCEND_NODE_PD_TASK` (e.g. `decode-0`). A server pod then takes part in its instance's
rank table exactly as a pod of a plain multi-node job does: `instance_environ` maps its
instance onto the identity environment of today's rendezvous (every pod a worker of an
instance-sized job, under a run id of its own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Optional

from ascend_node.errors import ConfigError

TASK_ENV = "ASCEND_NODE_PD_TASK"
PdRole = Literal["coordinator", "controller", "prefill", "decode"]
SERVER_ROLES = ("prefill", "decode")
_TASK = re.compile(r"(coordinator|controller)|(prefill|decode)-(0|[1-9][0-9]{0,3})")
_NUM = re.compile(r"VC_(PREFILL|DECODE)_(0|[1-9][0-9]{0,3})_NUM")


@dataclass(frozen=True)
class PdIdentity:
    """A pod's place in a PD service."""

    role: PdRole
    instance: Optional[int]  # a server's instance number among its role's; None otherwise
    place: int  # VC_TASK_INDEX: the pod's index in its task
    task_pods: int  # VC_<TASK>_NUM: the pods of its task (an instance's size)
    counts: Mapping[str, int]  # instances per server role, from the tasks Volcano lists

    @property
    def task(self) -> str:
        return self.role if self.instance is None else f"{self.role}-{self.instance}"

    @property
    def is_server(self) -> bool:
        return self.instance is not None


def is_pd_server(environ: Mapping[str, str]) -> bool:
    """Whether this pod is a prefill or decode server of a PD service (by its task name;
    `read_pd_identity` judges the rest)."""
    match = _TASK.fullmatch(environ.get(TASK_ENV, "").strip())
    return match is not None and match.group(2) is not None


def task_env_name(task: str) -> str:
    """`VC_<TASK>_NUM` for a task name, as Volcano's svc plugin spells it."""
    return "VC_" + task.upper().replace("-", "_") + "_NUM"


def read_pd_identity(environ: Mapping[str, str]) -> PdIdentity:
    """The pod's role, instance and place, from the environment; ConfigError naming the
    variable when it cannot be told."""
    raw = environ.get(TASK_ENV, "")
    match = _TASK.fullmatch(raw.strip())
    if match is None:
        raise ConfigError(
            f"{TASK_ENV}={raw!r} names no task of a PD service" if raw else
            f"{TASK_ENV} is not set",
            "render the Job with `ascend-node manifest --kind mindie-pd`, which sets it to "
            "the pod's task: coordinator, controller, prefill-<i> or decode-<j>")
    role: PdRole
    if match.group(1):
        role, instance = match.group(1), None  # type: ignore[assignment]
    else:
        role, instance = match.group(2), int(match.group(3))  # type: ignore[assignment]
    task = raw.strip()
    counts = instance_counts(environ)
    if instance is not None and instance >= counts.get(role, 0):
        raise ConfigError(f"{TASK_ENV}={task} but Volcano lists {counts.get(role, 0)} "
                          f"{role} task(s)", "the task names of a PD Job must run from 0 "
                          "without gaps (prefill-0, prefill-1, ...)")
    pods = _number(environ, task_env_name(task))
    place = _number(environ, "VC_TASK_INDEX")
    if not 0 <= place < pods:
        raise ConfigError(f"VC_TASK_INDEX={place} is outside 0..{pods - 1} "
                          f"({task_env_name(task)}={pods})",
                          "VC_TASK_INDEX and the task's replica count come from Volcano's "
                          "env and svc plugins; check the Job's plugins")
    if role == "controller" and pods != 1:
        raise ConfigError(f"{task_env_name(task)}={pods}: a PD service has one controller",
                          "set the controller task's replicas to 1")
    return PdIdentity(role, instance, place, pods, counts)


def instance_counts(environ: Mapping[str, str]) -> dict[str, int]:
    """How many instances of each server role the job has: its `VC_PREFILL_<i>_NUM` and
    `VC_DECODE_<j>_NUM` variables, which must run from 0 without gaps."""
    seen: dict[str, set[int]] = {"prefill": set(), "decode": set()}
    for name in environ:
        found = _NUM.fullmatch(name)
        if found:
            seen[found.group(1).lower()].add(int(found.group(2)))
    counts = {}
    for role, numbers in seen.items():
        if numbers and numbers != set(range(len(numbers))):
            missing = sorted(set(range(max(numbers) + 1)) - numbers)
            raise ConfigError(f"the Job has {role} tasks {sorted(numbers)} but not "
                              f"{', '.join(f'{role}-{m}' for m in missing)}",
                              "name the instance tasks from 0 without gaps")
        counts[role] = len(numbers)
    return counts


def instance_environ(identity: PdIdentity, run_id: str) -> dict[str, str]:
    """The identity variables under which a server pod meets its instance's peers.

    Every pod of the instance is a worker of an instance-sized job (so its global index is
    its place), under the run id `<run>-<task>`: one rendezvous, one rank table and one
    `ranktable-<run>-<task>.json` per instance, with every guarantee of today's."""
    if not identity.is_server:
        raise ValueError(f"the {identity.role} has no instance table")
    return {
        "ROLE": "worker",
        "VC_TASK_INDEX": str(identity.place),
        "VC_MASTER_NUM": "0",
        "VC_WORKER_NUM": str(identity.task_pods),
        "ASCEND_NODE_RUN_ID": f"{run_id}-{identity.task}",
    }


def _number(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        raise ConfigError(f"{name} is not set",
                          "run under a Volcano Job with the env and svc plugins")
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,6}", text):
        raise ConfigError(f"{name}={raw!r} is not a non-negative integer",
                          "it comes from Volcano's env/svc plugins; check the Job")
    return int(text)
