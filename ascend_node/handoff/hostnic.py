"""Which host NIC the collective libraries use, pinned to the pod IP where theirs may differ.

The rank table names each node by its pod IP, and the launchers connect to node 0 on it;
the collective libraries pick their *own* address for the links between workers:

- gloo (torch's CPU backend, torchrun's workers) uses the address the hostname resolves
  to unless `GLOO_SOCKET_IFNAME` names an interface. In a pod the kubelet writes the
  hostname with the pod IP into `/etc/hosts`, so that is right; where the hostname
  resolves elsewhere (127.0.x in many images run by hand, a host-network node name),
  gloo advertises that address and peers cannot connect ("Gloo connectFullMesh failed
  ... remote=[127.0.0.1]", seen with torch 2.13 across two network namespaces).
- HCCL (torch_npu and MindSpore on NPUs) takes its host NIC for the root-info exchange
  from `HCCL_IF_IP`, else `HCCL_SOCKET_IFNAME`, else the first non-docker, non-loopback
  NIC by name (CANN environment-variable reference, HCCL_IF_IP and HCCL_SOCKET_IFNAME
  pages). With one such NIC (a pod's eth0) that is the pod IP; with several
  (host networking, extra CNI networks) it may not be.

So the agent sets the variables only where the default could be wrong, and never over
the user's own: `GLOO_SOCKET_IFNAME=<the pod IP's interface>` (torch) where the hostname
does not resolve to the pod IP; `HCCL_IF_IP=<pod IP>` (msrun, torch) there too, or where
the pod has more than one candidate NIC. MindSpore's own cluster (msrun's scheduler and
workers) connects to `--master_addr` and needs neither (seen: msrun's AllReduce is right
with the hostname resolving to 127.0.0.1). Where no interface holds the pod IP the agent
cannot name one and only warns.

`nic_plan` is pure (table-tested); `probe_nic` asks the system (hostname resolution and
the interfaces' addresses, through psutil).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

GLOO_VAR = "GLOO_SOCKET_IFNAME"
HCCL_IP_VAR = "HCCL_IF_IP"
HCCL_IFNAME_VAR = "HCCL_SOCKET_IFNAME"
# Launchers whose programs use gloo / HCCL host NICs (mindie and ranktable-env are not ours
# to pin: MindIE finds itself by MIES_CONTAINER_IP; rank-table mode reads links from the file).
GLOO_LAUNCHERS = ("torch",)
HCCL_LAUNCHERS = ("msrun", "torch")


@dataclass(frozen=True)
class NicFacts:
    """What the system says: the hostname, what it resolves to, and every interface's
    addresses (`{"eth0": ("10.0.0.5",), "lo": ("127.0.0.1", "::1")}`)."""

    hostname: str
    resolves_to: tuple[str, ...] = ()
    resolve_error: str = ""
    interfaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class NicPlan(NamedTuple):
    env: dict[str, str]  # variables to add to the launcher's environment
    notes: list[str]  # one line each: what was set and why, or a warning


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def interface_of(address: str, interfaces: Mapping[str, tuple[str, ...]]) -> str:
    """The interface holding `address` ("" when none); the first by name when several do."""
    return next((name for name in sorted(interfaces) if address in interfaces[name]), "")


def nic_plan(launcher: str, pod_ip: str, facts: NicFacts, environ: Mapping[str, str]) -> NicPlan:
    """What to set for `launcher` so gloo/HCCL use the pod IP's interface (see module doc)."""
    wants_gloo = launcher in GLOO_LAUNCHERS
    wants_hccl = launcher in HCCL_LAUNCHERS
    if not (wants_gloo or wants_hccl):
        return NicPlan({}, [])
    resolves = pod_ip in facts.resolves_to
    where = (", ".join(facts.resolves_to) if facts.resolves_to
             else f"nothing ({facts.resolve_error or 'no address'})")
    mismatch = f"hostname {facts.hostname} resolves to {where}, not the pod IP {pod_ip}"
    candidates = [name for name, addrs in facts.interfaces.items()
                  if any(not _is_loopback(a) for a in addrs) and name != "lo"]
    iface = interface_of(pod_ip, facts.interfaces)
    user_gloo = environ.get(GLOO_VAR, "").strip()
    user_hccl = environ.get(HCCL_IP_VAR, "").strip() or environ.get(HCCL_IFNAME_VAR, "").strip()

    env: dict[str, str] = {}
    notes: list[str] = []
    gloo_needed = wants_gloo and not resolves and not user_gloo
    hccl_needed = wants_hccl and not user_hccl and (not resolves or len(candidates) > 1)
    if not iface:
        if gloo_needed or hccl_needed:
            names = [v for v, needed in ((GLOO_VAR, gloo_needed), (HCCL_IP_VAR, hccl_needed))
                     if needed]
            notes.append(
                f"{mismatch if not resolves else 'several interfaces'} and no interface holds "
                f"{pod_ip}: the workers may advertise another address; set "
                f"{' and '.join(names)} for the pod's network")
        return NicPlan({}, notes)
    if gloo_needed:
        env[GLOO_VAR] = iface
    if hccl_needed:
        env[HCCL_IP_VAR] = pod_ip
    if env:
        why = mismatch if not resolves else f"several interfaces ({', '.join(sorted(candidates))})"
        notes.append(f"{why}: set {', '.join(f'{k}={v}' for k, v in env.items())} "
                     f"so the workers use {iface}")
    return NicPlan(env, notes)


def probe_nic() -> NicFacts:
    """The hostname, its addresses (getaddrinfo, as gloo resolves it) and the interfaces'."""
    hostname = socket.gethostname()
    resolved: tuple[str, ...] = ()
    error = ""
    try:
        infos = socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP)
        resolved = tuple(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))
    except OSError as exc:
        error = str(exc)
    interfaces: dict[str, tuple[str, ...]] = {}
    try:
        import psutil  # not imported on the start-up path of other commands

        for name, addrs in psutil.net_if_addrs().items():
            interfaces[name] = tuple(
                str(a.address).split("%", 1)[0] for a in addrs
                if a.family in (socket.AF_INET, socket.AF_INET6))
    except (ImportError, OSError):
        interfaces = {}
    return NicFacts(hostname, resolved, error, interfaces)


__all__ = ["NicFacts", "NicPlan", "interface_of", "nic_plan", "probe_nic"]
