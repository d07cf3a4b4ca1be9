"""Fake `hccn_tool` and `npu-smi`: a tiny sh script answering from per-node data files.

A shell script, not Python: a node queries every NPU at start, and 64 simulated nodes
x 16 NPUs of Python start-ups would measure the interpreter, not the agent.
Outputs follow real captures (fixtures/hccn/*.txt): `ipaddr:`/`netmask:` lines,
`link status: UP`, `net health status: Success`, the `tls switch[0]` line, and the
ping summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HCCN_TOOL_SCRIPT = r"""#!/bin/sh
# Fake hccn_tool (ascend-node simulation): answers from $ASCEND_NODE_SIM_DATA.
dev=; what=; addr=
while [ $# -gt 0 ]; do
  case $1 in
    -i) dev=$2; shift 2 ;;
    -g|-s|-inet6) shift ;;
    address|ipv6_address) addr=$2; shift 2 ;;
    -*) what=${1#-}; shift ;;
    *) shift ;;
  esac
done
if [ -n "${ASCEND_NODE_SIM_DELAY:-}" ]; then sleep "$ASCEND_NODE_SIM_DELAY"; fi
d=${ASCEND_NODE_SIM_DATA:?ASCEND_NODE_SIM_DATA is not set}
if [ "$what" = ping ]; then
  if [ -f "$d/$dev.ping.$addr" ]; then cat "$d/$dev.ping.$addr"; exit 0; fi
  if [ -f "$d/unreachable" ] && grep -qxF "$addr" "$d/unreachable"; then
    sed "s/@ADDR@/$addr/g; s/@DEV@/$dev/g" "$d/lost.ping"; exit 0
  fi
  if [ -f "$d/$dev.ping" ]; then sed "s/@ADDR@/$addr/g" "$d/$dev.ping"; exit 0; fi
fi
if [ -f "$d/$dev.$what" ]; then cat "$d/$dev.$what"; exit 0; fi
if [ -f "$d/$dev.$what.exit" ]; then exit "$(cat "$d/$dev.$what.exit")"; fi
echo "Error: invalid device id $dev or command -$what" >&2
exit 255
"""

NPU_SMI_SCRIPT = r"""#!/bin/sh
# Fake npu-smi (ascend-node simulation): `info -m` from $ASCEND_NODE_SIM_DATA/npu-smi-m,
# `info -t spod-info -i <npu> -c <chip>` from spod.<npu>.<chip> (A3 super-pod nodes only).
d=${ASCEND_NODE_SIM_DATA:?ASCEND_NODE_SIM_DATA is not set}
if [ "$#" = 1 ] && [ "$1" = info ] && [ -f "$d/npu-smi-info" ]; then cat "$d/npu-smi-info"; exit 0; fi
if [ "$1 $2" = "info -m" ] && [ -f "$d/npu-smi-m" ]; then cat "$d/npu-smi-m"; exit 0; fi
if [ "$1 $2 $3" = "info -t spod-info" ]; then
  shift 3; npu=; chip=
  while [ $# -gt 0 ]; do
    case $1 in -i) npu=$2; shift 2 ;; -c) chip=$2; shift 2 ;; *) shift ;; esac
  done
  if [ -f "$d/spod.$npu.$chip" ]; then cat "$d/spod.$npu.$chip"; exit 0; fi
  echo "Error: device $npu chip $chip does not support spod-info (simulation)" >&2
  exit 255
fi
echo "npu-smi: unsupported in simulation: $*" >&2
exit 1
"""

FAKE_DAEMON_SCRIPT = r"""#!/bin/sh
# Fake mindieservice_daemon (ascend-node simulation): checks what MindIE checks at
# start (MindIE-LLM src/config_manager @8b4871a), records its PID and environment, prints MindIE's success
# line and exits (a real daemon would serve; ASCEND_NODE_SIM_SERVE=1 keeps it up, idle;
# ASCEND_NODE_SIM_SERVE=health keeps it up serving MindIE's health endpoints, 503 while
# "loading weights" then 200: ascend_node/sim/fake_mindie.py).
fail() { echo "fake daemon: $*" >&2; exit 1; }
[ -n "$MIES_CONTAINER_IP" ] || fail "MIES_CONTAINER_IP is not set"
[ -n "$MASTER_IP" ] || fail "MASTER_IP is not set"
[ -n "$WORLD_SIZE" ] || fail "WORLD_SIZE is not set"
if [ -n "${RANK_TABLE_FILE:-}" ]; then
  [ -L "$RANK_TABLE_FILE" ] && fail "The file: $RANK_TABLE_FILE is a link."
  "$ASCEND_NODE_SIM_PYTHON" -m ascend_node validate "$RANK_TABLE_FILE" --owner-uid "$(id -u)"     >&2 || fail "rank table $RANK_TABLE_FILE is invalid"
  grep -q "\"container_ip\": \"$MIES_CONTAINER_IP\"" "$RANK_TABLE_FILE"     || fail "no server with container_ip $MIES_CONTAINER_IP in $RANK_TABLE_FILE"
fi
if [ -n "${ASCEND_NODE_SIM_REPORT:-}" ]; then
  { echo "pid=$$"; env; } > "$ASCEND_NODE_SIM_REPORT.tmp" && mv "$ASCEND_NODE_SIM_REPORT.tmp" "$ASCEND_NODE_SIM_REPORT"
fi
# In a container the daemon keeps serving (the container stays up, as MindIE's does);
# `exec` keeps this PID, and SIGTERM from tini ends it with 143. The health server prints
# the success line itself, once its "weights" are loaded (MindIE prints it after the load).
if [ "${ASCEND_NODE_SIM_SERVE:-}" = health ]; then exec "$ASCEND_NODE_SIM_PYTHON" -m ascend_node.sim.fake_mindie; fi
echo "Daemon start success!"
if [ -n "${ASCEND_NODE_SIM_SERVE:-}" ]; then exec sleep infinity; fi
"""

FAKE_SET_ENV_SCRIPT = r"""# Fake CANN set_env.sh (ascend-node simulation): exports like the real one.
export ASCEND_TOOLKIT_HOME="$(dirname "${BASH_SOURCE[0]}")/latest"
export LD_LIBRARY_PATH="${ASCEND_TOOLKIT_HOME}/lib64:${LD_LIBRARY_PATH:-}"
export ASCEND_OPP_PATH="${ASCEND_TOOLKIT_HOME}/opp"
"""

PING_OK = (
    "device {dev} PING @ADDR@\n"
    "recv seq=0,time=1.418000ms\nrecv seq=1,time=0.105000ms\nrecv seq=2,time=0.093000ms\n"
    "3 packets transmitted, 3 received, 0.00% packet loss\n"
)
PING_LOST = (
    "device {dev} PING @ADDR@\n"
    "recv time out seq=0\nrecv time out seq=1\nrecv time out seq=2\n"
    "3 packets transmitted, 0 received, 100.00% packet loss\n"
)


@dataclass
class FakeDevice:
    """What one fake NPU answers. `ip=None` prints nothing for `-ip -g` (as a real
    device without an address does, fixtures/hccn/kg-npu_info.txt)."""

    device_id: int
    ip: Optional[str]
    netmask: str = "255.255.255.0"
    link: str = "UP"
    health: str = "Success"
    tls: int = 0
    unreachable: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    sdid: Optional[int] = None  # A3 super-pod device: its SDID (spod-info answers)
    answers: bool = True  # False: hccn_tool fails every query of it (exit 255)
    holders: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, name, MB)


@dataclass(frozen=True)
class SuperPodSeat:
    """Where an A3 node sits: its super pod, the pod's size and its index in the pod."""

    super_pod_id: int
    size: int
    server_index: int


def spod_info_text(sdid: int, seat: SuperPodSeat) -> str:
    """spod-info output as hicann/hccl rank_table_config_a3.md describes it (SDID, Super Pod
    ID, Super Pod Size, Server Index). No real capture exists: the layout (tab, key padded
    to 31, " : ") copies the real `npu-smi info -i 0 -c 0 -t board` capture in
    fixtures/hccn/kg-npu_info.txt."""
    rows = (("SDID", sdid), ("Super Pod Size", seat.size), ("Super Pod ID", seat.super_pod_id),
            ("Server Index", seat.server_index))
    return "".join(f"\t{key:<31}: {value}\n" for key, value in rows)


def a3_chip(device_id: int) -> tuple[int, int]:
    """A3: 8 modules x 2 dies; physical id 2n and 2n+1 are NPU n, chips 0 and 1.

    8 x 2: Ascend/mind-cluster docs/en/scheduling/usage/basic_scheduling/01_affinity_scheduling/
    03_ascend_ai_processor_based_affinity.md; the 2n/2n+1 numbering is from third-party test
    mocks (vllm-ascend cpu_binding unit test), not an official capture."""
    return device_id // 2, device_id % 2


_BAR = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
_EQ = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"


def npu_smi_info_text(devices: Sequence[FakeDevice], a3: bool) -> str:
    """`npu-smi info` in the 25.x layout of the real captures (fixtures/npu-smi/
    a2-910b4-2npu-vllm-running.txt, a3-16chip-vllm-running-noname.txt): the device table
    (A3 adds `Phy-ID` to each chip's line), then the process table, with each device's
    `holders` as rows."""
    out = ["+" + "-" * 96 + "+",
           f"| {'npu-smi 25.2.0':<32} {'Version: 25.2.0':<62}|", _BAR,
           f"| {'NPU   Name':<26}| {'Health':<14}| {'Power(W)    Temp(C)':<51}|",
           f"| {'Chip  Phy-ID' if a3 else 'Chip':<26}| {'Bus-Id':<14}| "
           f"{'AICore(%)   Memory-Usage(MB)':<51}|", _EQ]
    rows: list[tuple[int, int, FakeDevice]] = []
    for d in devices:
        npu, chip = a3_chip(d.device_id) if a3 else (d.device_id, 0)
        rows.append((npu, chip, d))
        chip_cell = f"{chip:<6}{d.device_id}" if a3 else f"{chip}"
        out += [f"| {f'{npu:<6}Ascend910':<26}| {'OK':<14}| {'90.0        32':<51}|",
                f"| {chip_cell:<26}| {'0000:C1:00.0':<14}| {'0           0    / 0':<51}|",
                _EQ]
    out += [_BAR, f"| {'NPU     Chip':<26}| {'Process id':<14}| {'Process name':<25}| "
                  f"{'Process memory(MB)':<24}|", _EQ]
    for npu in sorted({r[0] for r in rows}):
        held = [(chip, h) for n, chip, d in rows if n == npu for h in d.holders]
        if not held:
            out += [f"| {f'No running processes found in NPU {npu}':<95}|", _EQ]
            continue
        for chip, (pid, name, mb) in held:
            out.append(f"| {f'{npu:<8}{chip}':<26}| {pid:<14}| {name:<25}| {mb:<24}|")
        out.append(_EQ)
    return "\n".join(out) + "\n"


def install_tools(bin_dir: Path) -> tuple[Path, Path]:
    """Write the two scripts into `bin_dir` (once per simulation)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in (("hccn_tool", HCCN_TOOL_SCRIPT), ("npu-smi", NPU_SMI_SCRIPT)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
        out.append(path)
    return out[0], out[1]


# What an operator changes in MindIE's shipped config.json before MindIE will start on
# it (docs/mindie-config.md): plain HTTP (no certificates in the fake install) and the
# model's weight directory, which must hold the model's config.json.
SIM_MODEL_CONFIG = '{"model_type": "llama", "torch_dtype": "float16", "vocab_size": 32000}\n'


def install_boot_fakes(work: Path) -> tuple[Path, Path, Path]:
    """Fake MindIE daemon, a fake CANN set_env.sh, and MindIE's shipped config.json as an
    operator prepares it: `httpsEnabled` false and `modelWeightPath` at a weight directory
    (with its config.json) under `work` — so `boot`'s start-up checks pass."""
    import json

    daemon = work / "bin" / "mindieservice_daemon"
    daemon.parent.mkdir(parents=True, exist_ok=True)
    daemon.write_text(FAKE_DAEMON_SCRIPT)
    daemon.chmod(0o755)
    set_env = work / "Ascend" / "cann" / "set_env.sh"
    set_env.parent.mkdir(parents=True, exist_ok=True)
    set_env.write_text(FAKE_SET_ENV_SCRIPT)
    shipped = json.loads((Path(__file__).with_name("data") / "mindie-config.json").read_text())
    weights = work / "weights" / "llama_65b"
    weights.mkdir(parents=True, exist_ok=True)
    (weights / "config.json").write_text(SIM_MODEL_CONFIG)
    shipped["ServerConfig"]["httpsEnabled"] = False
    shipped["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["modelWeightPath"] = str(
        weights)
    config = work / "mindie-config.json"
    config.write_text(json.dumps(shipped, indent=4) + "\n")
    return daemon, set_env, config


def write_node_data(data_dir: Path, devices: list[FakeDevice],
                    seat: Optional[SuperPodSeat] = None,
                    unreachable: Iterable[str] = ()) -> None:
    """The files one node's fake tools answer from (`seat`: an A3 super-pod node).
    `unreachable`: peer addresses that no device of this node reaches (a node's
    reachability set; `FakeDevice.unreachable` is the same per device)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {"lost.ping": PING_LOST.format(dev="@DEV@"),
                             "unreachable": "".join(f"{a}\n" for a in sorted(unreachable))}
    for d in devices:
        i = d.device_id
        if not d.answers:
            continue
        files[f"{i}.ip"] = f"ipaddr:{d.ip}\nnetmask:{d.netmask}\n" if d.ip is not None else "\n"
        files[f"{i}.link"] = f"link status: {d.link}\n"
        files[f"{i}.net_health"] = f"net health status: {d.health}\n"
        # Init is what a device without a detection address reports (docs/doctor.md).
        if d.health == "Init" or d.ip is None:
            detect = "0.0.0.0"
        else:
            detect = d.ip.rsplit(".", 1)[0] + ".254" if "." in d.ip else d.ip
        files[f"{i}.netdetect"] = f"netdetect address: {detect}\n"
        files[f"{i}.tls"] = (
            f"dev_id:{i}, tls switch[{d.tls}](0:disable, 1:enable), tls preconfigured[1]"
            "(0:non-preset, 1:preset), tls alarm time threshold[60]days\n"
        )
        files[f"{i}.ping"] = PING_OK.format(dev=i)
        for addr in d.unreachable:
            files[f"{i}.ping.{addr}"] = PING_LOST.format(dev=i).replace("@ADDR@", addr)
        files.update({f"{i}.{k}": v for k, v in d.extra.items()})
    if seat is None:
        rows = ["\tNPU ID    Chip ID    Chip Logic ID    Chip Name"]
        rows += [f"\t{d.device_id}    0    {d.device_id}    Ascend 910B3" for d in devices]
    else:
        # The A3 header adds Chip Phy-ID (mind-cluster chip_generation.py); each module also lists its Mcu.
        rows = ["\tNPU ID    Chip ID    Chip Logic ID    Chip Phy-ID    Chip Name"]
        for d in devices:
            npu, chip = a3_chip(d.device_id)
            rows.append(f"\t{npu}    {chip}    {d.device_id}    {d.device_id}    Ascend910")
            if chip == 1:
                rows.append(f"\t{npu}    2    -    -    Mcu")
            if d.sdid is not None:
                files[f"spod.{npu}.{chip}"] = spod_info_text(d.sdid, seat)
    files["npu-smi-m"] = "\n".join(rows) + "\n"
    files["npu-smi-info"] = npu_smi_info_text(devices, seat is not None)
    for name, text in files.items():
        (data_dir / name).write_text(text)


def write_ascend_root(root: Path, cann: str, driver: str = "24.1.rc2.2") -> None:
    """A container's CANN version files, in the real captures' formats
    (fixtures/npu-smi/a2-mindie-2.1-container-versions.txt): the toolkit's version.cfg
    and the driver's version.info."""
    latest = root / "ascend-toolkit" / "latest"
    latest.mkdir(parents=True, exist_ok=True)
    (latest / "version.cfg").write_text(
        "# version: 1.0\n" + "".join(f"{part}_running_version=[8.0.0.0.0:{cann}]\n"
                                     for part in ("runtime", "compiler", "hccl", "toolkit")))
    (root / "driver").mkdir(parents=True, exist_ok=True)
    (root / "driver" / "version.info").write_text(
        f"Version={driver}\nascendhal_version=7.35.23\npackage_version={driver}\n")


def tool_env(hccn_tool: Path, npu_smi: Path, data_dir: Path, delay: float = 0.0
             ) -> Mapping[str, str]:
    env = {
        "ASCEND_NODE_HCCN_TOOL": str(hccn_tool),
        "ASCEND_NODE_NPU_SMI": str(npu_smi),
        "ASCEND_NODE_SIM_DATA": str(data_dir),
    }
    if delay > 0:
        env["ASCEND_NODE_SIM_DELAY"] = f"{delay:g}"
    return env


__all__ = ["FakeDevice", "SuperPodSeat", "a3_chip", "install_tools", "npu_smi_info_text",
           "spod_info_text", "tool_env", "write_ascend_root", "write_node_data"]
