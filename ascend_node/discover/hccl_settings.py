"""The HCCL settings and the software versions every node of a job must agree on.

Every rank must run with the same `HCCL_CONNECT_TIMEOUT`, `HCCL_EXEC_TIMEOUT`,
`HCCL_BUFFSIZE` and `HCCL_NPU_SOCKET_PORT_RANGE`, and the same CANN and driver: a
mismatch surfaces as link-setup time-outs (`EI0006 Getting socket times out`) half an hour
later (vllm-ascend #2248, #486, #9447). Values CANN refuses at run time are found here:
`HCCL_CONNECT_TIMEOUT` an integer in [120, 7200] s (default 120; HCCL waits the value +
20 s), `HCCL_EXEC_TIMEOUT` an integer (default 1836 s on A2/A3), at most 1091 with
`HCCL_OP_EXPANSION_MODE=AIV`, `HCCL_BUFFSIZE` an integer >= 1 (MB, default 200) — the
CANN environment variable reference (hiascend.com, `maintenref/envvar`) — and
`HCCL_NPU_SOCKET_PORT_RANGE` ports/ranges or `auto` (default 16666, `envref_07_0144`).

Versions, as a container shows them (real captures in fixtures/npu-smi/): the driver's
`<root>/driver/version.info` (`Version=24.1.rc2.2`), the toolkit's
`<root>/ascend-toolkit/latest/version.cfg` (`toolkit_running_version=[8.2.0.2.220:8.2.RC2]`)
or `<root>/ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info`
(`version=8.3.RC2`). A file that is absent gives no version (not every image has both);
one that is present but unreadable says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ascend_node.discover.hccl_ports import PortSpecError, parse_port_list

AGREED: dict[str, str] = {
    "HCCL_CONNECT_TIMEOUT": "120",
    "HCCL_EXEC_TIMEOUT": "1836",
    "HCCL_BUFFSIZE": "200",
    "HCCL_NPU_SOCKET_PORT_RANGE": "16666",
}
"""The settings that must be equal on every node, with CANN's default (A2/A3)."""

CONNECT_RANGE = (120, 7200)
AIV_EXEC_MAX = 1091
DEFAULT_ROOT = Path("/usr/local/Ascend")


def effective_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The value each agreed setting takes here (the default when unset or empty)."""
    return {k: environ.get(k, "").strip() or d for k, d in AGREED.items()}


def _int(text: str) -> Optional[int]:
    return int(text) if re.fullmatch(r"[0-9]{1,10}", text) else None


def setting_problems(environ: Mapping[str, str]) -> list[str]:
    """Values CANN refuses at run time, each naming the variable, its value and the rule."""
    out = []
    values = effective_settings(environ)
    timeout = _int(values["HCCL_CONNECT_TIMEOUT"])
    low, high = CONNECT_RANGE
    if timeout is None or not low <= timeout <= high:
        out.append(f"HCCL_CONNECT_TIMEOUT={values['HCCL_CONNECT_TIMEOUT']!r} is not an "
                   f"integer in [{low}, {high}] (seconds)")
    exec_timeout = _int(values["HCCL_EXEC_TIMEOUT"])
    aiv = environ.get("HCCL_OP_EXPANSION_MODE", "").strip().upper() == "AIV"
    if exec_timeout is None:
        out.append(f"HCCL_EXEC_TIMEOUT={values['HCCL_EXEC_TIMEOUT']!r} is not an integer "
                   "(seconds)")
    elif aiv and "HCCL_EXEC_TIMEOUT" in environ and exec_timeout > AIV_EXEC_MAX:
        out.append(f"HCCL_EXEC_TIMEOUT={exec_timeout} is more than {AIV_EXEC_MAX} s, the "
                   "most HCCL_OP_EXPANSION_MODE=AIV allows")
    buff = _int(values["HCCL_BUFFSIZE"])
    if buff is None or buff < 1:
        out.append(f"HCCL_BUFFSIZE={values['HCCL_BUFFSIZE']!r} is not an integer >= 1 (MB)")
    npu = values["HCCL_NPU_SOCKET_PORT_RANGE"]
    if npu.lower() != "auto":
        try:
            parse_port_list("HCCL_NPU_SOCKET_PORT_RANGE", npu)
        except PortSpecError as exc:
            out.append(str(exc))
    return out


def refused_values(environ: Mapping[str, str]) -> list[str]:
    """`setting_problems` and a host port variable HCCL refuses: what `ranktable`/`boot`
    refuse before the rendezvous (a configuration error of this pod, exit 1)."""
    from ascend_node.discover.hccl_ports import host_ports

    out = setting_problems(environ)
    try:
        host_ports(environ)
    except PortSpecError as exc:
        out.append(str(exc))
    return out


# --------------------------------------------------------------------------- versions


class VersionFileError(ValueError):
    """A version file that exists but has no version line (its path and first bytes)."""


def parse_driver_version(text: str) -> str:
    """`Version=24.1.rc2.2` of `driver/version.info`."""
    m = re.search(r"^Version=(\S+)\s*$", text, re.M)
    if not m:
        raise VersionFileError(f"no `Version=` line in {text.strip()[:80]!r}")
    return m.group(1)


def parse_toolkit_version(text: str) -> str:
    """`toolkit_running_version=[8.2.0.2.220:8.2.RC2]` of `version.cfg` (the part after
    the colon), or `version=8.3.RC2` of `ascend_toolkit_install.info`."""
    m = re.search(r"^toolkit_running_version=\[[^:\]]*:([^\]]+)\]\s*$", text, re.M)
    if m:
        return m.group(1).strip()
    m = re.search(r"^version=(\S+)\s*$", text, re.M)
    if m:
        return m.group(1)
    raise VersionFileError(f"no toolkit version line in {text.strip()[:80]!r}")


@dataclass(frozen=True)
class Versions:
    cann: Optional[str]
    driver: Optional[str]
    problems: tuple[str, ...] = ()  # files present but unreadable


def toolkit_files(root: Path) -> list[Path]:
    latest = root / "ascend-toolkit" / "latest"
    return [latest / "version.cfg", *sorted(latest.glob("*-linux/ascend_toolkit_install.info"))]


def read_versions(root: Path = DEFAULT_ROOT) -> Versions:
    """The CANN toolkit and driver versions of this container (None: no such file)."""
    problems: list[str] = []

    def first(paths: list[Path], parse: object) -> Optional[str]:
        for path in paths:
            try:
                text = path.read_text(errors="replace")
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append(f"cannot read {path}: {exc.strerror or exc}")
                continue
            try:
                return parse(text)  # type: ignore[operator, no-any-return]
            except VersionFileError as exc:
                problems.append(f"{path}: {exc}")
        return None

    cann = first(toolkit_files(root), parse_toolkit_version)
    driver = first([root / "driver" / "version.info"], parse_driver_version)
    return Versions(cann, driver, tuple(problems))


__all__ = [
    "AGREED",
    "VersionFileError",
    "Versions",
    "effective_settings",
    "parse_driver_version",
    "parse_toolkit_version",
    "read_versions",
    "setting_problems",
]
