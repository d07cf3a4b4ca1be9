"""`simulate --pd`'s options, checked before anything starts.

`simulate`'s other options either mean the same for a PD service (`--devices`, `--a3`,
`--timeout`, `--tool-delay`, `--run-id`, `--shared-dir`, `--keep`, `--json`), take a PD
meaning (`--absent` names server pods as TASK/POD), or mean nothing there: a combination
that means nothing is a usage error (exit 2) naming the option, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Optional

from ascend_node.errors import UsageError
from ascend_node.sim.options import check_run_options
from ascend_node.sim.pd_service import PdSpec, parse_absent

# simulate's options a PD service has no use for, by parameter name -> the flag typed
NOT_WITH_PD = {"nodes": "--nodes", "masters": "--masters", "boot_chain": "--boot",
               "super_pod_size": "--super-pod-size", "bad_device": "--bad-device",
               "table_out": "--table-out", "timeline": "--report"}
PD_ONLY = {"prefill": "--prefill", "decode": "--decode", "prefill_pods": "--prefill-pods",
           "decode_pods": "--decode-pods"}
WHY_NOT = {
    "nodes": "a PD service's pods are --prefill x --prefill-pods + --decode x --decode-pods",
    "masters": "instance pods are all workers of their instance (pd.roles.instance_environ)",
    "boot_chain": "every server pod of a PD service boots already",
    "super_pod_size": "each instance is one super pod with --a3",
    "bad_device": "faults are simulate's without --pd",
    "table_out": "the global table's path is printed; copy it with --keep",
    "timeline": "run `ascend-node report --run-id <run>-<task>` on a kept workspace",
}


def build_pd_spec(given: Collection[str], *, pd: bool, prefill: int, decode: int,
                  prefill_pods: int, decode_pods: int, devices: Optional[int], a3: bool,
                  timeout: float, tool_delay: float, run_id: str,
                  absent: Optional[str]) -> PdSpec:
    """The service the user asked for, or UsageError (exit 2) with a one-line cause."""
    if not pd:
        flag = next(PD_ONLY[name] for name in PD_ONLY if name in given)
        raise UsageError(f"{flag} needs --pd", f"{flag} sizes a PD service: add --pd")
    for name, flag in NOT_WITH_PD.items():
        if name in given:
            raise UsageError(f"{flag} means nothing with --pd", WHY_NOT[name])
    check_run_options(timeout, tool_delay, run_id)
    spec = PdSpec(prefill=prefill, decode=decode, prefill_pods=prefill_pods,
                  decode_pods=decode_pods, devices=devices or (16 if a3 else 8), a3=a3,
                  run_id=run_id, timeout=timeout, tool_delay=tool_delay)
    if absent is not None:
        spec.absent = parse_absent(absent, spec)
    return spec
