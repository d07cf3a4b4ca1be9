"""Which device id each consumer expects, and the pods MindIE cannot run in (pure).

- The rank table's `device_id` is the **physical** id, as in `/dev/davinciN` and
  `ASCEND_VISIBLE_DEVICES` (HCCL `rank_table_config_a2.md` / `_a3.md`: "device_id: the
  physical id of the NPU"; HCCL checks it against the device it runs on: `ranktable
  config devId[1], but local devId[3]`, vllm-ascend #2618).
- MindIE's `npuDeviceIds` are **logical** ids, the ones the container's runtime numbers
  from 0 (MindIE `service_parameter_configuration.md`), and in multi-node mode MindIE
  overwrites them with the local rank-table `device_id`s (MindIE-LLM
  `src/config_manager/backend_config.cpp`, UpdateMultiNodesInfer), which atb_llm opens as
  `npu:<device_id>` (`atb_llm/utils/dist.py`).
- `ASCEND_RT_VISIBLE_DEVICES` takes logical ids and renumbers the listed devices from 0
  (CANN `envref_07_0028`; not supported together with hccn_tool).

So a multi-node MindIE pod works only when its physical ids are 0..n-1: a pod given
`/dev/davinci10,12,14,16` (vllm-ascend #8519) would need `device_id` 10 for HCCL and 0 for
atb_llm in the same field, and no table satisfies both. The agent refuses such a pod
before the rendezvous, with the reason, instead of letting MindIE fail after loading.
A renumbering ASCEND_RT_VISIBLE_DEVICES breaks the same equality and is refused too.
Training launchers read the table themselves (DEVICE_ID / RANK_TABLE_FILE) and are not
judged here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from ascend_node.discover.devices import id_list


def mindie_device_problem(ids: Sequence[int], source: str, environ: Mapping[str, str],
                          launcher: Optional[str], node_count: int
                          ) -> Optional[tuple[str, str]]:
    """(cause, hint) when multi-node MindIE cannot use these devices; None otherwise."""
    if launcher != "mindie" or node_count < 2 or not ids:
        return None
    expected = list(range(len(ids)))
    if sorted(ids) != expected:
        return (f"MindIE multi-node cannot use devices {id_list(sorted(ids))} (from {source}): "
                "the rank table's device_id must be the physical id for HCCL, and MindIE "
                "opens the same number as a logical id (npu:<device_id>), which in this "
                f"container runs 0-{len(ids) - 1}; only a pod whose NPUs are physical "
                f"0-{len(ids) - 1} satisfies both",
                "request whole nodes (all NPUs of each host) or NPUs numbered from 0, e.g. "
                "huawei.com/Ascend910: 8 per pod; see docs/preflight.md, device ids")
    visible = environ.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    if visible and [v.strip() for v in visible.split(",")] != [str(i) for i in expected]:
        return (f"ASCEND_RT_VISIBLE_DEVICES={visible!r} renumbers the NPUs MindIE opens, "
                f"while the rank table names devices {id_list(expected)} by physical id "
                "(HCCL then finds another device than the table's)",
                "unset ASCEND_RT_VISIBLE_DEVICES and choose the NPUs with the pod's "
                "resources (ASCEND_VISIBLE_DEVICES)")
    return None


__all__ = ["mindie_device_problem"]
