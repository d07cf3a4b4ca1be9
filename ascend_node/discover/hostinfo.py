"""The impure edges of identity: the default-route address, the pod's sandbox facts, and
`identify`, which hands both to the pure `discover.identity.read_identity`."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Optional

from ascend_node.discover.identity import NodeIdentity, fallback_incarnation, read_identity
from ascend_node.discover.netcheck import unusable_reason

# Documentation addresses (RFC 5737, RFC 3849): assigned to nobody, so in a pod the only
# route that covers them is the default route.
DEFAULT_ROUTE_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))


def route_source(family: int, destination: str) -> Optional[str]:
    """The source address the kernel would use towards `destination`, or None (no route).

    `connect()` on a UDP socket only asks the kernel to choose a route and a source
    address; nothing is sent. This is the kernel's own answer, so it holds where reading
    interfaces and gateways does not: a default route with no gateway (`ip route add
    default dev eth0`, point-to-point and some CNIs), several default routes with metrics,
    policy routing, a `src` hint on the route, an interface with several addresses.
    """
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((destination, 9))
            return str(sock.getsockname()[0]).split("%", 1)[0]
    except OSError:  # ENETUNREACH: no route; EAFNOSUPPORT: no IPv6 in this kernel
        return None


def pick_default_ip(candidates: Iterable[Optional[str]]) -> Optional[str]:
    """The first usable address among the per-family answers (IPv4 first), else the first
    unusable one, so that identity names it and says why, else None. Pure."""
    first: Optional[str] = None
    for value in candidates:
        if not value:
            continue
        if unusable_reason(value) is None:
            return value
        first = first or value
    return first


def default_route_ip() -> Optional[str]:
    """The address this pod's default route leaves from, IPv4 first, gateway or not."""
    answers = (route_source(fam, dest) for fam, dest in DEFAULT_ROUTE_PROBES)
    return pick_default_ip(answers)  # lazy: IPv6 is asked only when IPv4 gives nothing usable


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def sandbox_facts() -> tuple[str, str, str]:
    """(hostname, boot id, network namespace link) for the fallback incarnation."""
    try:
        netns = os.readlink("/proc/self/ns/net")
    except OSError:
        netns = ""
    return socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"), netns


def identify(environ: Mapping[str, str]) -> NodeIdentity:
    """This pod's identity: the environment, else the default route and sandbox facts."""
    def fallback(pod_ip: str) -> str:
        hostname, boot_id, netns = sandbox_facts()
        return fallback_incarnation(pod_ip, hostname, boot_id, netns)

    return read_identity(environ, default_route_ip, fallback)
