"""Read the values other steps need out of a built or validated rank table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ascend_node.errors import ClusterInconsistent, InvalidInputError


def master_ip(table: Mapping[str, Any]) -> str:
    """The ``container_ip`` of the server holding rank ``"0"``: MindIE's master address.

    MindIE's model runner takes ``MASTER_IP`` from ``server_list[0].container_ip``; tables we
    build list the rank-0 server first, so both readings agree.
    """
    for server in table.get("server_list", []):
        if any(device.get("rank_id") == "0" for device in server.get("device", [])):
            return str(server.get("container_ip", ""))
    raise InvalidInputError(
        'the rank table has no device with rank_id "0"',
        "run `ascend-node validate` on the table",
    )


def world_size(table: Mapping[str, Any]) -> int:
    """Total number of devices (NPUs) in the table: the ``WORLD_SIZE`` to export."""
    return sum(len(server.get("device", [])) for server in table.get("server_list", []))


def local_server(table: Mapping[str, Any], container_ip: str) -> Optional[dict[str, Any]]:
    """The server whose ``container_ip`` equals ``container_ip`` exactly, else None.

    MindIE finds its own entry by the same exact string match against
    ``MIES_CONTAINER_IP``. Two matches make that choice ambiguous (MindIE silently takes the
    last), so they raise `ClusterInconsistent` instead of picking one.
    """
    matches = [s for s in table.get("server_list", []) if s.get("container_ip") == container_ip]
    if len(matches) > 1:
        raise ClusterInconsistent(
            f"container_ip {container_ip} appears on {len(matches)} servers of the rank table",
            "each pod needs its own IP; check pod networking and the table's membership",
        )
    if not matches:
        return None
    found: dict[str, Any] = matches[0]
    return found
