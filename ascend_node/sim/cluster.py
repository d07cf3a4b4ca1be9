"""Run N real agent processes, each with its own Volcano-like environment.

Each simulated pod is `python -m ascend_node <command>` with ROLE / VC_TASK_INDEX /
VC_MASTER_NUM / VC_WORKER_NUM / K8S_POD_IP / POD_UID set as Volcano and the downward API
would, its own state dir, and its own fake NPUs. They meet on one shared directory,
exactly as pods on one PVC. Addresses are strings from documentation-style ranges that
nothing connects to.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ascend_node import events
from ascend_node.sim.fake_tools import (
    FakeDevice,
    SuperPodSeat,
    install_boot_fakes,
    install_tools,
    tool_env,
    write_node_data,
)

_POD_BASE = ipaddress.IPv4Address("10.200.0.10")
_HOST_BASE = ipaddress.IPv4Address("10.100.0.10")
_DEV_BASE = ipaddress.IPv4Address("10.20.1.0")


def pod_ip(index: int) -> str:
    return str(_POD_BASE + index)


def host_ip(index: int) -> str:
    return str(_HOST_BASE + index)


def device_ip(index: int, device: int) -> str:
    return str(_DEV_BASE + index * 16 + device)


@dataclass
class SimSpec:
    nodes: int = 2
    devices: int = 8
    masters: int = 1
    run_id: str = "sim"
    timeout: float = 60.0
    tool_delay: float = 0.0
    start_delays: Optional[Sequence[float]] = None
    command: Sequence[str] = ("ranktable", "--json")
    boot: bool = False  # run the whole boot chain into a fake MindIE daemon
    extra_env: Mapping[str, str] = field(default_factory=dict)
    a3: bool = False  # Atlas A3 SuperPoD nodes: npu-smi answers spod-info
    super_pod_size: int = 0  # A3 nodes per super pod (0: all nodes in one)

    def seat(self, index: int) -> Optional[SuperPodSeat]:
        if not self.a3:
            return None
        size = self.super_pod_size or self.nodes
        return SuperPodSeat(super_pod_id=index // size, size=size, server_index=index % size)


def sdid(seat: SuperPodSeat, device: int) -> int:
    """A simulated SDID: unique inside a super pod (server index x 16 + device)."""
    return seat.server_index * 16 + device


@dataclass
class SimNode:
    """One simulated pod: its index, environment and fake devices (editable by tests)."""

    index: int
    env: dict[str, str]
    devices: list[FakeDevice]
    state_dir: Path
    data_dir: Path
    start_delay: float = 0.0
    argv: list[str] = field(default_factory=list)
    seat: Optional[SuperPodSeat] = None
    unreachable: set[str] = field(default_factory=set)  # peer IPs no local device reaches


@dataclass
class NodeResult:
    index: int
    exit_code: int
    seconds: float
    stdout: str
    stderr: str
    state_dir: Path
    pod_ip: str = ""

    @property
    def last_error(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def phases(self) -> dict[str, float]:
        """Seconds per top-level phase of this node's newest run (its events.jsonl)."""
        return events.top_level_seconds(events.last_run(events.read_events(self.state_dir)))


@dataclass
class SimReport:
    spec: SimSpec
    shared_dir: Path
    results: list[NodeResult]
    wall_seconds: float
    table_text: Optional[str]

    @property
    def ok(self) -> bool:
        return all(r.exit_code == 0 for r in self.results) and self.identical

    @property
    def identical(self) -> bool:
        texts = set()
        for r in self.results:
            local = r.state_dir / "ranktable.json"
            texts.add(local.read_bytes() if local.is_file() else b"")
        return len(texts) == 1 and b"" not in texts

    @property
    def worst_exit(self) -> int:
        codes = [r.exit_code for r in self.results if r.exit_code != 0]
        return max(codes) if codes else (0 if self.identical else 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.spec.nodes, "devices_per_node": self.spec.devices,
            "a3": self.spec.a3,
            "shared_dir": str(self.shared_dir), "ok": self.ok,
            "identical_tables": self.identical, "wall_seconds": round(self.wall_seconds, 3),
            "results": [{"node": r.index, "exit_code": r.exit_code,
                         "seconds": round(r.seconds, 3), "message": r.last_error,
                         **server_summary(self.table_text, r, self.spec.devices),
                         "phases": r.phases()}
                        for r in self.results],
            "ranktable": json.loads(self.table_text) if self.table_text else None,
        }


def prepare(spec: SimSpec, work: Path, shared_dir: Path) -> list[SimNode]:
    """Environment and fake devices for every node; nothing is started."""
    hccn_tool, npu_smi = install_tools(work / "bin")
    command = list(spec.command)
    boot_env: dict[str, str] = {}
    config_text = ""
    if spec.boot:
        daemon, set_env, config = install_boot_fakes(work)
        command = ["boot", "--", str(daemon)]
        boot_env = {"ASCEND_NODE_SET_ENV": str(set_env),
                    "ASCEND_NODE_SIM_PYTHON": sys.executable}
        config_text = config.read_text()
    workers = spec.nodes - spec.masters
    nodes = []
    for index in range(spec.nodes):
        role = "master" if index < spec.masters else "worker"
        task = index if role == "master" else index - spec.masters
        node_dir = work / f"node-{index}"
        state = node_dir / "state"
        data = node_dir / "hccn"
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("ASCEND_NODE_", "VC_", "VK_", "K8S_", "KUBEFLOW_", "KFJ_"))
            and k not in ("ROLE", "POD_UID", "POD_IP", "MODEL_PATH", "ASCEND_VISIBLE_DEVICES")
        }
        env.update({
            "ROLE": role, "VC_TASK_INDEX": str(task),
            "VC_MASTER_NUM": str(spec.masters), "VC_WORKER_NUM": str(workers),
            "K8S_POD_IP": pod_ip(index), "K8S_HOST_IP": host_ip(index),
            "POD_UID": str(uuid.uuid4()),
            "ASCEND_NODE_SHARED_DIR": str(shared_dir), "ASCEND_NODE_RUN_ID": spec.run_id,
            "ASCEND_NODE_STATE_DIR": str(state),
            "ASCEND_NODE_MASTER_FILE": str(node_dir / "master"),
            "ASCEND_NODE_WORLD_SIZE_FILE": str(node_dir / "world_size"),
            "ASCEND_NODE_TIMEOUT": f"{spec.timeout:g}",
            "ASCEND_NODE_HCCN_CONF": str(node_dir / "hccn.conf"),
            "ASCEND_NODE_PROGRESS_INTERVAL": "2",
            "ASCEND_VISIBLE_DEVICES": ",".join(str(d) for d in range(spec.devices)),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(tool_env(hccn_tool, npu_smi, data, spec.tool_delay))
        if spec.boot:
            node_dir.mkdir(parents=True, exist_ok=True)
            (node_dir / "config.json").write_text(config_text)
            env.update(boot_env)
            env["MIES_CONFIG_JSON_PATH"] = str(node_dir / "config.json")
            env["ASCEND_NODE_SIM_REPORT"] = str(node_dir / "daemon-report.txt")
        env.update(spec.extra_env)
        seat = spec.seat(index)
        devices = [FakeDevice(d, device_ip(index, d), sdid=sdid(seat, d) if seat else None)
                   for d in range(spec.devices)]
        delay = spec.start_delays[index] if spec.start_delays else 0.0
        nodes.append(SimNode(index, env, devices, state, data, delay,
                             [sys.executable, "-m", "ascend_node", *command], seat))
    return nodes


def launch(nodes: Sequence[SimNode], timeout: float) -> list[NodeResult]:
    """Start every node (after its start delay) and wait for all; returns in index order."""
    for node in nodes:
        write_node_data(node.data_dir, node.devices, node.seat, node.unreachable)
    procs: dict[int, tuple[subprocess.Popen[bytes], float, Any, Any]] = {}
    order = sorted(nodes, key=lambda n: n.start_delay)
    t0 = time.monotonic()
    for node in order:
        wait = t0 + node.start_delay - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        node.state_dir.parent.mkdir(parents=True, exist_ok=True)
        out = open(node.state_dir.parent / "stdout.txt", "w+b")  # noqa: SIM115
        err = open(node.state_dir.parent / "stderr.txt", "w+b")  # noqa: SIM115
        proc = subprocess.Popen(node.argv, env=node.env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        procs[node.index] = (proc, time.monotonic(), out, err)
    results = []
    hard_end = time.monotonic() + timeout + 60
    for node in nodes:
        proc, started, out, err = procs[node.index]
        try:
            code = proc.wait(timeout=max(1.0, hard_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        results.append(NodeResult(node.index, code, seconds,
                                  out.read().decode(errors="replace"),
                                  err.read().decode(errors="replace"), node.state_dir,
                                  node.env.get("K8S_POD_IP", "")))
        out.close()
        err.close()
    return results


def run_cluster(spec: SimSpec, shared_dir: Optional[Path] = None,
                work: Optional[Path] = None) -> SimReport:
    """The whole simulation: prepare, launch, collect, report."""
    work = work or Path(tempfile.mkdtemp(prefix="ascend-node-sim-"))
    shared = shared_dir or (work / "shared")
    shared.mkdir(parents=True, exist_ok=True)
    nodes = prepare(spec, work, shared)
    if spec.start_delays is None and spec.nodes > 1:
        for node in nodes:
            node.start_delay = random.uniform(0, 0.5)
    t0 = time.monotonic()
    results = launch(nodes, spec.timeout)
    wall = time.monotonic() - t0
    table_path = shared / f"ranktable-{spec.run_id}.json"
    text = table_path.read_text() if table_path.is_file() else None
    return SimReport(spec, shared, results, wall, text)


def server_summary(table_text: Optional[str], result: NodeResult, devices: int
                   ) -> dict[str, Any]:
    """This node's server in the table: server_id, pod IP, device count, rank range."""
    out: dict[str, Any] = {"server": None, "pod_ip": result.pod_ip or None,
                           "devices": devices, "ranks": None}
    try:
        table = json.loads(table_text) if table_text else {}
        servers = table.get("server_list", [])
    except (ValueError, AttributeError):
        servers = []
    for server in servers if isinstance(servers, list) else []:
        if not isinstance(server, dict) or server.get("container_ip") != result.pod_ip:
            continue
        ranks = [int(d["rank_id"]) for d in server.get("device", [])]
        out.update(server=server.get("server_id"), devices=len(ranks),
                   ranks=f"{min(ranks)}-{max(ranks)}" if ranks else None)
    return out


def write_table(report: SimReport, path: Path) -> None:
    """`--table-out`: the shared table, written atomically; ConfigError naming the path."""
    from ascend_node.atomic import atomic_write_text
    from ascend_node.errors import ConfigError

    if report.table_text is None:
        raise ConfigError(f"no rank table to write to {path}: no node completed one",
                          "see the per-node messages above")
    try:
        atomic_write_text(path, report.table_text)
    except OSError as exc:
        raise ConfigError(f"cannot write --table-out {path}: {exc.strerror or exc}",
                          "choose a path in an existing, writable directory") from exc


# Columns of the per-node breakdown, in the order a bootstrap goes through them.
PHASE_COLUMNS = ("startup", "discovery", "rendezvous", "outputs", "install", "set_env",
                 "config")


def format_report(report: SimReport) -> str:
    """One line per server (where it sits in the table, its exit, where its time went),
    failures with their last message, then the verdict. The table itself is in the shared
    dir (its path is printed), in `--json`, and in `--table-out FILE`."""
    phases = [r.phases() for r in report.results]
    columns = [p for p in PHASE_COLUMNS if any(p in ph for ph in phases)]
    header = (f"{'node':>5}  {'server':<15} {'pod IP':<15} {'devices':>7} {'ranks':>9} "
              f"{'exit':>4} {'seconds':>7}" + "".join(f" {c:>10}" for c in columns))
    lines = [header]
    for r, ph in zip(report.results, phases):
        row = server_summary(report.table_text, r, report.spec.devices)
        lines.append(
            f"{r.index:>5}  {row['server'] or '-':<15} {row['pod_ip'] or '-':<15} "
            f"{row['devices']:>7} {row['ranks'] or '-':>9} {r.exit_code:>4} "
            f"{r.seconds:>7.2f}"
            + "".join(f" {ph[c]:>10.3f}" if c in ph else f" {'-':>10}" for c in columns))
    for r in report.results:
        if r.exit_code != 0:
            lines.append(f"node {r.index}: exit {r.exit_code}: {r.last_error or 'no message'}")
    tables = [r.state_dir / "ranktable.json" for r in report.results]
    held = {t.read_bytes() for t in tables if t.is_file()}
    holding = sum(t.is_file() for t in tables)
    if report.identical:
        verdict = "identical tables on every node"
    elif len(held) > 1:
        verdict = "TABLES DIFFER between nodes"
    else:
        verdict = f"{holding}/{len(tables)} nodes hold the table"
    lines.append(
        f"{report.spec.nodes} nodes x {report.spec.devices} NPUs: "
        f"{sum(r.exit_code == 0 for r in report.results)} ok, {verdict}, "
        f"{report.wall_seconds:.2f} s wall; shared dir {report.shared_dir}"
    )
    if report.table_text:
        lines.append(f"rank table: {report.shared_dir / f'ranktable-{report.spec.run_id}.json'}"
                     " (--json prints it, --table-out FILE copies it)")
    return "\n".join(lines)
