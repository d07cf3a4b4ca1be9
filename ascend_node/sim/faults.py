"""`simulate --bad-device NODE:DEV:KIND`: one fake NPU that answers like a broken one.

Each kind changes only what the fake `hccn_tool` answers for that device (the formats of
fake_tools.py, from real captures), so the agent meets the fault exactly as on a real
node, and lands on the exit code the docs promise for it (docs/simulate.md lists them;
tests/test_simulate_faults.py runs each). The kinds are the faults of docs/bad-inputs.md
and docs/preflight.md that a device can have.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ascend_node.errors import UsageError

SIM_CANN = "8.3.RC2"
"""The CANN toolkit version every simulated node reports (`cann-version` changes one)."""

if TYPE_CHECKING:
    from ascend_node.sim.fake_tools import FakeDevice


class SimNode(Protocol):
    """What breaking a device needs of a simulated node (`cluster.SimNode` has it); a
    protocol, so that this module never imports the cluster that imports it."""

    index: int
    devices: list[FakeDevice]
    unreachable: set[str]
    env: dict[str, str]
    cann: str
    listeners: list[socket.socket]


@dataclass(frozen=True)
class Kind:
    """A device fault: what the fake tool answers, and the exits it leads to."""

    answers: str  # what hccn_tool says for the device
    node_exit: int  # the exit of the node holding the device
    peers_exit: int  # the exit of every other node
    needs_boot: bool = False  # the check that catches it runs in `boot` only
    needs_peer: bool = False  # the fault exists only between two nodes
    node_wide: bool = False  # `NODE:KIND`: the node, not one device, is at fault


KINDS: dict[str, Kind] = {
    "no-ip": Kind("`-ip -g` prints nothing (no RoCE address)", 1, 5),
    "dup-ip": Kind("`-ip -g` gives the IP of the same device on the next node", 5, 5,
                   needs_peer=True),
    "link-down": Kind("`-link -g` says `link status: DOWN`", 5, 5),
    "tls-on": Kind("`-tls -g` says `tls switch[1]` where every other device says 0", 5, 5),
    "net-fault": Kind("`-net_health -g` says `net health status: Fault` (a warning)", 0, 0),
    "tool-fails": Kind("every query of the device fails with exit 255", 1, 5),
    "unreachable": Kind("pings from and to the device are lost (100% loss)", 5, 5,
                        needs_boot=True),
    "npu-busy": Kind("`npu-smi info` lists a process (PID 4242, python3) on the device "
                     "that does not end within the hold wait", 5, 5),
    "port-taken": Kind("a real socket listens on the first port of the node's HCCL range "
                       "(HCCL_IF_BASE_PORT set to it)", 5, 5, node_wide=True),
    "hccl-env": Kind("the node runs with HCCL_CONNECT_TIMEOUT=600 where the others "
                     "have the default 120", 5, 5, needs_peer=True, node_wide=True),
    "cann-version": Kind("the node's toolkit says CANN 8.2.RC1 where the others say "
                         f"{SIM_CANN}", 5, 5, needs_peer=True, node_wide=True),
}
"""Exits with the default pre-flight policy (`strict`). One node alone has no peers:
then the node's own exit is the simulation's."""


@dataclass(frozen=True)
class BadDevice:
    node: int
    device: int
    kind: str

    @property
    def text(self) -> str:
        if KINDS[self.kind].node_wide:
            return f"{self.node}:{self.kind}"
        return f"{self.node}:{self.device}:{self.kind}"


def parse_bad_device(text: str) -> BadDevice:
    """`NODE:DEV:KIND`, e.g. `1:3:link-down`, or `NODE:KIND` for a node-wide kind
    (`1:port-taken`); UsageError naming the value otherwise."""
    parts = text.split(":")
    if len(parts) == 2 and parts[1].strip() in KINDS and KINDS[parts[1].strip()].node_wide:
        parts = [parts[0], "0", parts[1]]
    elif len(parts) == 3 and parts[2].strip() in KINDS and KINDS[parts[2].strip()].node_wide:
        raise UsageError(f"--bad-device {text!r}: {parts[2].strip()} is a fault of the "
                         "whole node", f"write it NODE:KIND, e.g. --bad-device "
                         f"{parts[0].strip()}:{parts[2].strip()}")
    if len(parts) != 3:
        raise UsageError(f"--bad-device {text!r} is not NODE:DEV:KIND",
                         f"e.g. --bad-device 1:3:link-down; kinds: {', '.join(KINDS)}")
    node, device, kind = (p.strip() for p in parts)
    if kind not in KINDS:
        raise UsageError(f"--bad-device {text!r}: {kind!r} is not a kind of fault",
                         f"use one of {', '.join(KINDS)}")
    numbers = []
    for what, value in (("node", node), ("device", device)):
        if not (value.isascii() and value.isdigit()):
            raise UsageError(f"--bad-device {text!r}: {what} {value!r} is not a number",
                             "NODE is a node index (0 = master 0), DEV a device id")
        numbers.append(int(value))
    return BadDevice(numbers[0], numbers[1], kind)


def check_bad_devices(bad: Sequence[BadDevice], nodes: int, devices: int,
                      absent: Sequence[int], boot: bool) -> None:
    """Refuse what names nothing that runs, or a fault no check of this run can see."""
    seen: set[tuple[int, int]] = set()
    for b in bad:
        if b.node >= nodes:
            raise UsageError(f"--bad-device {b.text}: there is no node {b.node} "
                             f"(--nodes {nodes}: 0-{nodes - 1})", "name a node that exists")
        if b.device >= devices:
            raise UsageError(f"--bad-device {b.text}: there is no device {b.device} "
                             f"(--devices {devices}: 0-{devices - 1})",
                             "name a device the node has")
        if b.node in absent:
            raise UsageError(f"--bad-device {b.text}: node {b.node} is --absent",
                             "a node that never starts has no devices to break")
        if (b.node, b.device) in seen:
            raise UsageError(f"--bad-device {b.text}: device {b.device} of node {b.node} "
                             "is named twice", "give each device one kind of fault")
        seen.add((b.node, b.device))
        kind = KINDS[b.kind]
        if kind.needs_boot and not boot:
            raise UsageError(f"--bad-device {b.text} needs --boot",
                             "the pings that find an unreachable device run in boot only")
        if kind.needs_peer and nodes < 2:
            raise UsageError(f"--bad-device {b.text} needs a second node (--nodes 2 or more)",
                             "dup-ip copies the address of the same device on the next "
                             "node; hccl-env and cann-version differ from another node")


def apply_bad_devices(nodes: Sequence[SimNode], bad: Sequence[BadDevice]) -> None:
    """Make each named device answer as its kind says (before the data files are written)."""
    from ascend_node.sim.fake_tools import PING_LOST

    by_index = {n.index: n for n in nodes}
    for b in bad:
        node = by_index[b.node]
        device = node.devices[b.device]
        if b.kind == "no-ip":
            device.ip = None
        elif b.kind == "dup-ip":
            peer = by_index[(b.node + 1) % len(nodes)]
            device.ip = peer.devices[b.device].ip
        elif b.kind == "link-down":
            device.link = "DOWN"
        elif b.kind == "tls-on":
            device.tls = 1
        elif b.kind == "net-fault":
            device.health = "Fault"
        elif b.kind == "tool-fails":
            device.answers = False
        elif b.kind == "unreachable":
            # Its own pings are lost, and so are everyone's pings to it: whichever pair
            # of the bounded sample touches it, the loss is seen.
            device.extra["ping"] = PING_LOST.format(dev=b.device)
            for other in nodes:
                if other is not node and device.ip is not None:
                    other.unreachable.add(device.ip)
        elif b.kind == "npu-busy":
            device.holders.append((4242, "python3", 61440))
        elif b.kind == "port-taken":
            # A real listener in this (the host's) network namespace, on a free port,
            # and the node's HCCL range moved onto it: the agent must find it for real.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
            node.listeners.append(sock)
            node.env["HCCL_IF_BASE_PORT"] = str(sock.getsockname()[1])
        elif b.kind == "hccl-env":
            node.env["HCCL_CONNECT_TIMEOUT"] = "600"
        elif b.kind == "cann-version":
            node.cann = "8.2.RC1"


__all__ = ["KINDS", "BadDevice", "Kind", "apply_bad_devices", "check_bad_devices",
           "parse_bad_device"]
