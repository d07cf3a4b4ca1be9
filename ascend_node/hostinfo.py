"""The impure edges of identity: the default-route address and the pod's sandbox facts."""

from __future__ import annotations

import os
import socket
from typing import Optional

from ascend_node.netcheck import unusable_reason


def default_route_ip() -> Optional[str]:
    """IPv4 (else IPv6) address of the interface holding the default route, via netifaces."""
    try:
        import netifaces
    except ImportError:  # pragma: no cover - dependency declared in pyproject
        return None
    try:
        gateways = netifaces.gateways()
        default = gateways.get("default", {})
    except (OSError, ValueError):
        return None
    if not isinstance(default, dict):
        return None
    first: Optional[str] = None
    for fam in (netifaces.AF_INET, netifaces.AF_INET6):
        entry = default.get(fam)
        if not entry:
            continue
        iface = entry[1]
        try:
            addrs = netifaces.ifaddresses(iface).get(fam, [])
        except ValueError:
            continue
        for addr in addrs:
            value = str(addr.get("addr", "")).split("%", 1)[0]
            if not value:
                continue
            # An interface lists its fe80:: address too; skip it rather than fail on it.
            if unusable_reason(value) is None:
                return value
            first = first or value
    return first  # unusable or None: identity reports it with the reason


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
