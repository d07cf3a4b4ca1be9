"""A bed of pods, each in its own network namespace, behind one bridge (root only).

Topology (all inside namespaces made here, nothing in the root namespace):

    hub netns:   br0 10.231.0.1/24  <- veth ends of every pod
    pod netns i: eth0 <address>/24, lo, default route via 10.231.0.1

`Netns.wrap` runs a command in a pod as a container would: its own network, hostname
(UTS namespace), `/etc/hosts` (a bind mount in its own mount namespace) and PID
namespace, where the command is PID 1 and everything it leaves behind dies with it.
Namespaces are deleted by `close()` (a finalizer of the `netns` fixture), even on failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

SUBNET = "10.231.0"
SUBNET6 = "fd00:231::"

# Inside the pod: the hosts file and hostname a pod gets, then the command in its dir.
_POD_INIT = 'mount --bind "$1" /etc/hosts && hostname "$2" && cd "$3" && shift 3 && exec "$@"'


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def _must(*args: str) -> None:
    done = _ip(*args)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Netns:
    """Creates namespaces on demand and deletes every one of them in `close()`."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.names: list[str] = []
        self.hub = ""
        self.links = 0

    def _add(self, name: str) -> None:
        done = _ip("netns", "add", name)
        if done.returncode != 0:
            raise PermissionError(done.stderr.strip() or f"ip netns add exited "
                                                          f"{done.returncode}")
        self.names.append(name)

    def start_hub(self) -> None:
        self.hub = f"anh-{self.tag}"
        self._add(self.hub)
        _must("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _must("-n", self.hub, "addr", "add", f"{SUBNET}.1/24", "dev", "br0")
        _must("-n", self.hub, "link", "set", "br0", "up")

    def pod(self, address: str | None, default_route: bool = True,
            gateway: bool = True, address6: str | None = None) -> str:
        """A pod namespace; `address=None` gives it only loopback.

        `gateway=False` makes the default route `default dev eth0` (no gateway: some CNIs,
        point-to-point links); `address6` adds an IPv6 address (no DAD wait) and, with a
        default route, an IPv6 default route the same way.
        """
        name = f"anp-{self.tag}-{len(self.names)}"
        self._add(name)
        _must("-n", name, "link", "set", "lo", "up")
        if address is None:
            return name
        self.links += 1
        inner, outer = f"anv{self.tag}a{self.links}", f"anv{self.tag}b{self.links}"
        _must("link", "add", inner, "netns", name, "type", "veth", "peer", "name", outer,
              "netns", self.hub)
        _must("-n", name, "link", "set", inner, "name", "eth0")
        _must("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _must("-n", name, "link", "set", "eth0", "up")
        _must("-n", self.hub, "link", "set", outer, "master", "br0")
        _must("-n", self.hub, "link", "set", outer, "up")
        if address6 is not None:
            _must("-n", name, "addr", "add", f"{address6}/64", "dev", "eth0", "nodad")
        if default_route:
            via = ["via", f"{SUBNET}.1"] if gateway else []
            _must("-n", name, "route", "add", "default", *via, "dev", "eth0")
        if default_route and address6 is not None:
            via6 = ["via", f"{SUBNET6}1"] if gateway else []
            _must("-n", name, "-6", "route", "add", "default", *via6, "dev", "eth0")
        return name

    def close(self) -> None:
        for name in reversed(self.names):
            _ip("netns", "del", name)
        self.names.clear()


def open_bed(request: pytest.FixtureRequest) -> Netns:
    """A started hub, closed when the test ends; skips saying why where it cannot be."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed")
    ns = Netns()
    request.addfinalizer(ns.close)
    try:
        ns.start_hub()
    except PermissionError as exc:
        pytest.skip(f"ip netns add failed: {exc}")
    return ns


def wrap(name: str, hostname: str, hosts: str, cwd: Path, argv: Sequence[str]) -> list[str]:
    """`argv` as PID 1 of a pod in netns `name`: hostname `hostname`, `/etc/hosts` holding
    `hosts`, working directory `cwd`. Every step execs, so the exit code and signals are
    the command's; killing the returned process kills the whole pod (--kill-child)."""
    hosts_file = cwd / "etc-hosts"
    hosts_file.write_text(hosts)
    return ["ip", "netns", "exec", name,
            "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts",
            "--propagation", "private",
            "sh", "-c", _POD_INIT, "sh", str(hosts_file), hostname, str(cwd), *argv]
