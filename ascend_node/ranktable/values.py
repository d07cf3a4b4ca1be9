"""How the validator judges single values and quotes them in its one-line messages."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Optional, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

# 18 digits keep int() cheap and safe (Python limits int() of long strings); no field of a
# rank table comes anywhere near that.
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")
NOT_DECIMAL = "is not a canonical decimal number (digits only, no leading zero, up to 18)"
# Values quoted in messages are cut here, so a 10 MiB garbage string makes a readable line.
_SHOW_LIMIT = 60


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def show(value: object) -> str:
    """A short, one-line rendering of a value for messages."""
    if isinstance(value, Mapping):
        return f"{{...}} ({len(value)} keys)"
    if isinstance(value, (list, tuple)):
        return f"[...] ({len(value)} items)"
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):  # e.g. an int beyond Python's int-to-str digit limit
        text = f"<{type(value).__name__}>"
    if len(text) > _SHOW_LIMIT:
        size = len(value) if isinstance(value, str) else len(text)
        return f"{text[:_SHOW_LIMIT]}... ({size} chars)"
    return text


def is_decimal(text: str) -> bool:
    """Canonical non-negative decimal: what HCCL and MindIE compare as strings ("0" != "00")."""
    return _DECIMAL.fullmatch(text) is not None


def ip_problem(text: str) -> tuple[Optional[IPAddress], str]:
    """Parse a device address: (address or None, why it is unusable; "" when usable)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None, "is not an IPv4 or IPv6 address"
    if address.is_unspecified:
        return address, "is the unspecified address"
    if address.is_link_local:
        return address, "is link-local (no address configured on the NIC?)"
    if address.is_loopback:
        return address, "is a loopback address"
    if address.is_multicast:
        return address, "is a multicast address"
    return address, ""
