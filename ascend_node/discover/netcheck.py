"""IP address rules shared by identity (pod/host IPs) and devices (RoCE IPs).

One home for "is this address usable", so a pod IP and a device IP are judged the
same way everywhere (discovery, rendezvous, validate, doctor).
"""

from __future__ import annotations

import ipaddress
from typing import Optional, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def parse_ip(text: str) -> Optional[IPAddress]:
    """The address in `text`, or None when it is not a plain IPv4/IPv6 literal."""
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def unusable_reason(text: str) -> Optional[str]:
    """Why `text` cannot identify a node or device on the network, or None if it can.

    HCCL and MindIE reject these later with far less helpful messages (MindIE-LLM
    ranktable_config.cpp: `format is invalid (neither IPv4 nor IPv6)`): `-1` is MindCluster's
    failed-query sentinel (ascend-operator pkg/ranktable/common/common.go validateDeviceIP),
    `-.-.-.-` GPUStack's (gpustack/gpustack issues 2551, 2821).
    """
    if not text.strip():
        return "no address"
    addr = parse_ip(text)
    if addr is None:
        return "not an IPv4/IPv6 address"
    if addr.is_unspecified:
        return "unspecified address"
    if addr.is_loopback:
        return "loopback address"
    if addr.is_link_local:
        return "link-local address"
    if addr.is_multicast:
        return "multicast address"
    return None


def family(text: str) -> int:
    """4 or 6 (0 when not an address)."""
    addr = parse_ip(text)
    return addr.version if addr is not None else 0
