"""Which Atlas A3 super pod this node belongs to, and each device's super_device_id.

HCCL's rank table v1.2 (A3 SuperPoD mode) needs, per device, the `super_device_id` (SDID)
that `npu-smi info -t spod-info -i <npu> -c <chip>` prints, and per server the super pod it
sits in (hicann/hccl docs/zh/user_guide/.../rank_table_config_a3.md). `npu-smi` addresses a
device by module (NPU ID) and die (Chip ID), not by the physical id the rank table uses, so
`npu-smi info -m` maps one to the other first (an A3 module holds two dies, each its own
device: same doc).

No capture of real spod-info output exists in this project: the parser follows the
documented "key : value" lines with the keys `SDID`, `Super Pod ID`, `Super Pod Size`,
`Server Index`, finds them by key (never by line position), tolerates any spacing and
keys it does not know, and refuses a missing or non-numeric SDID naming the device.

Whether a node is in a super pod at all: a node whose first device answers spod-info
with neither an SDID nor a super pod id (A2 cards, older drivers, no npu-smi in the
container) is "not in a super pod", which `--table-version auto` turns into a v1.0
table; with `--table-version 1.2` the same answer is an error naming the device.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Union

from ascend_node.discover.devices import parse_npu_chip_map
from ascend_node.errors import DeviceError, ToolError
from ascend_node.tools import ToolResult, run_tool

SPOD_KEYS = {
    "sdid": "sdid",
    "super pod id": "super_pod_id",
    "super pod size": "super_pod_size",
    "server index": "server_index",
}
_DECIMAL = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class SpodInfo:
    """One device's answer to `npu-smi info -t spod-info`."""

    sdid: int
    super_pod_id: int
    super_pod_size: Optional[int] = None
    server_index: Optional[int] = None


@dataclass(frozen=True)
class NodeSuperPod:
    """This node's super pod: its id and every device's SDID, by physical id."""

    super_pod_id: str
    sdids: Mapping[int, int]
    server_index: Optional[int] = None
    super_pod_size: Optional[int] = None


@dataclass(frozen=True)
class SuperPodProbe:
    """What discovery learnt: the super pod (None = not in one) and how it knows."""

    super_pod: Optional[NodeSuperPod]
    note: str


# --------------------------------------------------------------------------- parsers


def parse_spod_fields(text: str) -> dict[str, str]:
    """The known "key : value" pairs of spod-info output, keyed by our field names.

    Keys match case-insensitively with any run of spaces inside (`Super  Pod ID`);
    unknown keys and lines without a colon are ignored; the first value of a key wins.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name = SPOD_KEYS.get(" ".join(key.split()).lower())
        if name is not None and name not in out:
            out[name] = value.strip()
    return out


def spod_info_from(text: str, device_id: int, command: str) -> SpodInfo:
    """Parse one device's spod-info answer strictly; DeviceError names the device.

    SDID and Super Pod ID are required and decimal; size and server index are optional
    (only informative) but must be decimal when present.
    """
    fields = parse_spod_fields(text)
    printed = " ".join(text.split())[:200]
    values: dict[str, Optional[int]] = {}
    for name in ("sdid", "super_pod_id", "super_pod_size", "server_index"):
        raw = fields.get(name)
        label = _label(name)
        if raw is None:
            if name in ("sdid", "super_pod_id"):
                raise DeviceError(
                    f"device {device_id}: `{command}` printed no {label} ({printed!r})",
                    "HCCL v1.2 needs every device's SDID; check the driver (npu-smi) on this "
                    "node, or pass --table-version 1.0 to build an AI-server-mode table",
                )
            values[name] = None
            continue
        if not _DECIMAL.fullmatch(raw):
            raise DeviceError(
                f"device {device_id}: `{command}` printed {label} {raw!r}, not a decimal "
                "number",
                "HCCL reads super_device_id as a decimal string; check the driver version",
            )
        values[name] = int(raw)
    sdid, pod = values["sdid"], values["super_pod_id"]
    assert sdid is not None and pod is not None
    return SpodInfo(sdid, pod, values["super_pod_size"], values["server_index"])


_LABELS = {"sdid": "SDID", "super_pod_id": "Super Pod ID", "super_pod_size": "Super Pod Size",
           "server_index": "Server Index"}


def _label(name: str) -> str:
    return _LABELS[name]


def node_super_pod(infos: Mapping[int, SpodInfo]) -> NodeSuperPod:
    """One super pod for the whole node, SDIDs unique: else DeviceError naming devices."""
    by_pod: dict[int, list[int]] = {}
    for dev_id in sorted(infos):
        by_pod.setdefault(infos[dev_id].super_pod_id, []).append(dev_id)
    if len(by_pod) > 1:
        parts = "; ".join(f"super pod {pod} on devices {', '.join(map(str, devs))}"
                          for pod, devs in sorted(by_pod.items()))
        raise DeviceError(
            f"the devices of this node report different super pods ({parts})",
            "one server belongs to one super pod; check the devices given to this pod",
        )
    owner: dict[int, int] = {}
    for dev_id in sorted(infos):
        sdid = infos[dev_id].sdid
        if sdid in owner:
            raise DeviceError(
                f"devices {owner[sdid]} and {dev_id} report the same SDID {sdid}",
                "every device of a super pod has its own SDID; check the driver (npu-smi)",
            )
        owner[sdid] = dev_id
    first = infos[min(infos)]
    return NodeSuperPod(
        super_pod_id=str(first.super_pod_id),
        sdids={dev_id: info.sdid for dev_id, info in sorted(infos.items())},
        server_index=first.server_index,
        super_pod_size=first.super_pod_size,
    )


# --------------------------------------------------------------------------- caller


def spod_command(npu_smi: str, npu: int, chip: int) -> list[str]:
    return [npu_smi, "info", "-t", "spod-info", "-i", str(npu), "-c", str(chip)]


def query_super_pod(
    ids: Sequence[int],
    npu_smi: str,
    tool_timeout: float,
    required: bool,
    runner: Callable[..., ToolResult] = run_tool,
    max_workers: int = 16,
) -> SuperPodProbe:
    """This node's super pod from npu-smi; `required` (--table-version 1.2) makes every
    "not in a super pod" answer an error naming the device and what the tool printed.

    The first device is asked alone: on a node that is not in a super pod that costs
    two tool calls (`info -m` and one spod-info), not one per device.
    """
    if not ids:
        return SuperPodProbe(None, "no devices")

    def absent(note: str, hint: str) -> SuperPodProbe:
        if required:
            raise DeviceError(f"--table-version 1.2, but {note}", hint)
        return SuperPodProbe(None, note)

    mapping_cmd = [npu_smi, "info", "-m"]
    try:
        mapped = runner(mapping_cmd, timeout=tool_timeout)
    except ToolError as exc:
        return absent(f"{exc.cause}: cannot map devices to npu-smi's NPU/chip ids",
                      "mount npu-smi (/usr/local/bin/npu-smi) into the container")
    chips = parse_npu_chip_map(mapped.stdout)
    missing = [i for i in ids if i not in chips]
    if ids[0] in missing:
        return absent(
            f"`{' '.join(mapping_cmd)}` lists no chip with physical id {ids[0]}",
            "check the devices given to this pod (ASCEND_VISIBLE_DEVICES / --devices)",
        )

    def ask(dev_id: int) -> tuple[int, str, Union[ToolResult, ToolError]]:
        npu, chip = chips[dev_id]
        cmd = spod_command(npu_smi, npu, chip)
        try:
            return dev_id, " ".join(cmd), runner(cmd, timeout=tool_timeout)
        except ToolError as exc:
            return dev_id, " ".join(cmd), exc

    first_id, first_cmd, first = ask(ids[0])
    if isinstance(first, ToolError):
        return absent(f"device {first_id}: {first.cause}",
                      "use --table-version auto or 1.0 on nodes outside an A3 super pod")
    fields = parse_spod_fields(first.stdout)
    if "sdid" not in fields and "super_pod_id" not in fields:
        printed = " ".join((first.stdout + first.stderr).split())[:200]
        return absent(
            f"device {first_id}: `{first_cmd}` printed no SDID (exit {first.returncode}: "
            f"{printed!r})",
            "use --table-version auto or 1.0 on nodes outside an A3 super pod",
        )
    if missing:
        raise DeviceError(
            f"device {missing[0]}: `{' '.join(mapping_cmd)}` lists no chip with that "
            "physical id, so its SDID cannot be read",
            "check the devices given to this pod (ASCEND_VISIBLE_DEVICES / --devices)",
        )
    infos = {first_id: spod_info_from(first.stdout, first_id, first_cmd)}
    rest = list(ids[1:])
    if rest:
        workers = max(1, min(max_workers, len(rest)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spod") as pool:
            answers = list(pool.map(ask, rest))
        for dev_id, cmd, answer in answers:
            if isinstance(answer, ToolError):
                raise DeviceError(f"device {dev_id}: {answer.cause}", answer.hint)
            infos[dev_id] = spod_info_from(answer.stdout, dev_id, cmd)
    pod = node_super_pod(infos)
    return SuperPodProbe(pod, f"super pod {pod.super_pod_id} (npu-smi info -t spod-info)")
