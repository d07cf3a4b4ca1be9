"""HCCL's host ports: which ones it will listen on, and whether they are free and reserved.

HCCL listens on host ports from `HCCL_IF_BASE_PORT` (default 60000; 16 ports up to CANN
8.0, 32 — 60000-60031 — from CANN 8.2; range [0, 65520]: CANN `envref_07_0074`), or on
`HCCL_HOST_SOCKET_PORT_RANGE` (CANN 8.1.RC1 on; ports, ranges, a comma list, or `auto`;
it wins over HCCL_IF_BASE_PORT: CANN `envref_07_0143`). A port another process listens
on fails the bind (`Bind_Failed(EJ0003)`, vllm-ascend #4725: two instances on one host);
a port inside the kernel's ephemeral range that `net.ipv4.ip_local_reserved_ports` does
not cover can be taken by any outgoing connection first (CANN asks to reserve it).

`HCCL_NPU_SOCKET_PORT_RANGE` (default 16666, `envref_07_0144`) is a port on the NPU's own
network, not the host's: no socket table of the container shows it, so it is compared
between nodes (`hccl_settings`), not probed here.

Pure parsers of `/proc/net/tcp` / `tcp6` and the two sysctls; reading them is the
caller's (`read_port_facts`), in the pod's own network namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DEFAULT_BASE_PORT = 60000
BASE_PORT_MAX = 65520
# /proc/net/tcp's `st` column (include/net/tcp_states.h).
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


class PortSpecError(ValueError):
    """A port variable HCCL would refuse; the message names it and its value."""


@dataclass(frozen=True)
class HostPorts:
    """The host ports HCCL will bind, and the variable that chose them."""

    ports: tuple[int, ...]  # empty: `auto` (the OS picks)
    variable: str  # HCCL_HOST_SOCKET_PORT_RANGE, HCCL_IF_BASE_PORT, or "default"
    text: str  # `60000-60031`, as a message shows it


def _digits(text: str) -> bool:
    """ASCII digits only (`str.isdigit` also takes Arabic-Indic and fullwidth digits)."""
    text = text.strip()
    return 0 < len(text) <= 10 and text.isascii() and text.isdigit()


def port_count(cann: Optional[str]) -> int:
    """16 ports up to CANN 8.0, 32 from 8.1 on (unknown: 32, the larger)."""
    if cann:
        head = cann.split(".")
        if (len(head) >= 2 and head[0].isdigit() and head[1].isdigit()
                and (int(head[0]), int(head[1])) <= (8, 0)):
            return 16
    return 32


def parse_port_list(name: str, text: str) -> tuple[int, ...]:
    """`60000-60050`, `60000,60050-60100`, `56000,56005`: sorted ports; PortSpecError
    for anything else (a range running backwards, overlapping parts, a port outside
    [1, 65535])."""
    ports: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        low, sep, high = part.partition("-")
        if not _digits(low) or (sep and not _digits(high)):
            raise PortSpecError(f"{name}={text!r}: {part!r} is not a port or a range")
        first, last = int(low), int(high) if sep else int(low)
        if not 1 <= first <= last <= 65535:
            raise PortSpecError(f"{name}={text!r}: {part!r} is not within 1-65535, low-high")
        ports.extend(range(first, last + 1))
    if len(set(ports)) != len(ports):
        raise PortSpecError(f"{name}={text!r}: its parts overlap")
    return tuple(sorted(ports))


def ranges_text(ports: Sequence[int]) -> str:
    """`60000-60031` / `56000,56005-56007`."""
    out: list[str] = []
    start = prev = None
    for p in sorted(ports):
        if prev is not None and p == prev + 1:
            prev = p
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = p
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


def host_ports(environ: Mapping[str, str], cann: Optional[str] = None) -> HostPorts:
    """The host ports HCCL will use under this environment (PortSpecError when refused)."""
    rng = environ.get("HCCL_HOST_SOCKET_PORT_RANGE", "").strip()
    if rng:
        if rng.lower() == "auto":
            return HostPorts((), "HCCL_HOST_SOCKET_PORT_RANGE", "auto")
        ports = parse_port_list("HCCL_HOST_SOCKET_PORT_RANGE", rng)
        return HostPorts(ports, "HCCL_HOST_SOCKET_PORT_RANGE", ranges_text(ports))
    base_text = environ.get("HCCL_IF_BASE_PORT", "").strip()
    variable = "HCCL_IF_BASE_PORT" if base_text else "default"
    base = DEFAULT_BASE_PORT
    if base_text:
        if not _digits(base_text) or int(base_text) > BASE_PORT_MAX:
            raise PortSpecError(f"HCCL_IF_BASE_PORT={base_text!r} is not an integer in "
                                f"[0, {BASE_PORT_MAX}]")
        base = int(base_text)
    count = port_count(cann)
    ports = tuple(p for p in range(base, base + count) if 1 <= p <= 65535)
    return HostPorts(ports, variable, ranges_text(ports))


@dataclass(frozen=True)
class Socket:
    port: int
    state: str  # LISTEN, ESTABLISHED, ...
    inode: int


def parse_proc_net_tcp(text: str) -> list[Socket]:
    """Local ports and states of `/proc/net/tcp` or `tcp6` (header line skipped).

    A row is `sl local_address rem_address st ... inode`; `local_address` is
    `HEXADDR:HEXPORT`. A row of another form raises ValueError naming it."""
    out = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if not cols:
            continue
        if len(cols) < 10 or ":" not in cols[1]:
            raise ValueError(f"unreadable /proc/net/tcp row {line.strip()!r}")
        port = int(cols[1].rsplit(":", 1)[1], 16)
        state = TCP_STATES.get(cols[3].upper(), cols[3])
        out.append(Socket(port, state, int(cols[9]) if cols[9].isdigit() else 0))
    return out


def parse_reserved_ports(text: str) -> frozenset[int]:
    """`net.ipv4.ip_local_reserved_ports`: `60000-60031,61000` (empty: none)."""
    text = text.strip()
    if not text:
        return frozenset()
    return frozenset(parse_port_list("net.ipv4.ip_local_reserved_ports", text))


def parse_port_range(text: str) -> tuple[int, int]:
    """`net.ipv4.ip_local_port_range`: `32768\t60999`."""
    parts = text.split()
    if len(parts) != 2 or not all(_digits(p) for p in parts):
        raise ValueError(f"unreadable ip_local_port_range {text.strip()!r}")
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class PortFacts:
    """What one node found about HCCL's host ports (published for node 0)."""

    ports: HostPorts
    listening: tuple[int, ...]  # fault: another process listens there
    busy: tuple[int, ...]  # a connection uses it now (an ephemeral port): a warning
    unreserved: tuple[int, ...]  # in the ephemeral range, not reserved: a warning
    ephemeral: tuple[int, int]


def judge_ports(ports: HostPorts, sockets: Iterable[Socket], reserved: frozenset[int],
                ephemeral: tuple[int, int]) -> PortFacts:
    """Pure: which of HCCL's ports are taken, busy or unreserved."""
    wanted = set(ports.ports)
    listening = sorted({s.port for s in sockets if s.port in wanted and s.state == "LISTEN"})
    busy = sorted({s.port for s in sockets if s.port in wanted
                   and s.state not in ("LISTEN", "TIME_WAIT", "CLOSE")} - set(listening))
    low, high = ephemeral
    unreserved = sorted(p for p in wanted if low <= p <= high and p not in reserved)
    return PortFacts(ports, tuple(listening), tuple(busy), tuple(unreserved), ephemeral)


PROC_NET = Path("/proc/net")
PROC_SYS_NET = Path("/proc/sys/net/ipv4")


def read_port_facts(environ: Mapping[str, str], cann: Optional[str] = None,
                    proc_net: Path = PROC_NET, proc_sys: Path = PROC_SYS_NET) -> PortFacts:
    """Read this network namespace's sockets and sysctls. PortSpecError for a refused
    variable; OSError/ValueError when the kernel files cannot be read."""
    ports = host_ports(environ, cann)
    sockets: list[Socket] = []
    for name in ("tcp", "tcp6"):
        path = proc_net / name
        try:
            sockets.extend(parse_proc_net_tcp(path.read_text()))
        except FileNotFoundError:
            if name == "tcp":
                raise
    reserved = parse_reserved_ports((proc_sys / "ip_local_reserved_ports").read_text())
    ephemeral = parse_port_range((proc_sys / "ip_local_port_range").read_text())
    return judge_ports(ports, sockets, reserved, ephemeral)


__all__ = [
    "HostPorts",
    "PortFacts",
    "PortSpecError",
    "Socket",
    "host_ports",
    "judge_ports",
    "parse_port_list",
    "parse_port_range",
    "parse_proc_net_tcp",
    "parse_reserved_ports",
    "port_count",
    "ranges_text",
    "read_port_facts",
]
