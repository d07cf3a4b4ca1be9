"""Run N real agent processes, each with its own Volcano-like environment.

Each simulated pod is `python -m ascend_node <command>` with ROLE / VC_TASK_INDEX /
VC_MASTER_NUM / VC_WORKER_NUM / K8S_POD_IP / POD_UID set as Volcano and the downward API
would, its own state dir, and its own fake NPUs. They meet on one shared directory,
exactly as pods on one PVC. Addresses are strings from documentation-style ranges that
nothing connects to.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional

from ascend_node import events, pydantic_plugins
from ascend_node.sim.fake_tools import (
    FakeDevice,
    SuperPodSeat,
    install_boot_fakes,
    install_tools,
    tool_env,
    write_ascend_root,
    write_node_data,
)
from ascend_node.sim.faults import SIM_CANN, BadDevice, apply_bad_devices

_POD_BASE = ipaddress.IPv4Address("10.200.0.10")
_HOST_BASE = ipaddress.IPv4Address("10.100.0.10")
_DEV_BASE = ipaddress.IPv4Address("10.20.1.0")


def quiet_hccl_base_port(port_range: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")
                          ) -> int:
    """An HCCL host port range above this machine's ephemeral range for the simulated pods.

    Every simulated pod shares this machine's network namespace, whose ports in the
    ephemeral range are rarely reserved: HCCL's default range would make every simulation
    warn about this machine (the pre-flight's port check), not about the simulated job.
    A range above the ephemeral one needs no reservation; `port-taken` still moves one
    node onto a port that is taken."""
    try:
        high = int(port_range.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        high = 60999  # Linux's default range ends there
    return min(high + 1, 65535 - 32)


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
    absent: frozenset[int] = frozenset()  # nodes that never start (their pods never came)
    bad_devices: Sequence[BadDevice] = ()  # devices that answer like broken ones

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
    cann: str = SIM_CANN  # what the node's fake toolkit's version.cfg says
    listeners: list[socket.socket] = field(default_factory=list)  # port-taken's sockets


@dataclass
class NodeResult:
    index: int
    exit_code: int
    seconds: float
    stdout: str
    stderr: str
    state_dir: Path
    pod_ip: str = ""
    # Read when the node ended, so that a report outlives the workspace (None: not read).
    table: Optional[bytes] = None
    phase_times: Optional[dict[str, float]] = None

    @property
    def last_error(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    @property
    def log(self) -> Path:
        """The node's stderr, as `launch` writes it (node-N/stderr.txt)."""
        return self.state_dir.parent / "stderr.txt"

    @property
    def cause(self) -> str:
        """The agent's one-line cause (`ascend-node: error: ...`), else its last line."""
        return self._error()[0] or self.last_error

    @property
    def hint(self) -> str:
        return self._error()[1]

    def _error(self) -> tuple[str, str]:
        lines = self.stderr.splitlines()
        for at in range(len(lines) - 1, -1, -1):
            if lines[at].startswith(ERROR_PREFIX):
                following = lines[at + 1] if at + 1 < len(lines) else ""
                hint = following[len(HINT_PREFIX):] if following.startswith(HINT_PREFIX) else ""
                return lines[at][len(ERROR_PREFIX):], hint
        return "", ""

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the node warned about (`HH:MM:SS [who] warning: <text>`, logs.py), each
        once: a pre-flight warning does not stop a start, and must not hide in a log
        that is removed with the workspace."""
        seen: dict[str, None] = {}
        for line in self.stderr.splitlines():
            head, sep, text = line.partition("] warning: ")
            if sep and head[:1].isdigit() and "[" in head:
                seen.setdefault(text.strip(), None)
        return tuple(seen)

    def local_table(self) -> Optional[bytes]:
        """This node's ranktable.json: as read when it ended, else read now."""
        if self.table is not None:
            return self.table
        local = self.state_dir / "ranktable.json"
        return local.read_bytes() if local.is_file() else None

    def phases(self) -> dict[str, float]:
        """Seconds per top-level phase of this node's newest run (its events.jsonl)."""
        if self.phase_times is not None:
            return self.phase_times
        return events.top_level_seconds(events.last_run(events.read_events(self.state_dir)))


ERROR_PREFIX = "ascend-node: error: "
HINT_PREFIX = "  hint: "


@dataclass
class SimReport:
    spec: SimSpec
    shared_dir: Path
    results: list[NodeResult]  # the nodes that ran, in index order (not the absent)
    wall_seconds: float
    table_text: Optional[str]
    workspace: Optional[Path] = None  # node-N/ directories (None: not simulate's own)
    workspace_kept: bool = True

    @property
    def ok(self) -> bool:
        return (not self.spec.absent and all(r.exit_code == 0 for r in self.results)
                and self.identical)

    @property
    def identical(self) -> bool:
        texts = {r.local_table() for r in self.results}
        return len(texts) == 1 and None not in texts

    @property
    def worst_exit(self) -> int:
        codes = [r.exit_code for r in self.results if r.exit_code != 0]
        return max(codes) if codes else (0 if self.identical else 1)

    @property
    def table_version(self) -> Optional[str]:
        """The version field of the shared table (1.0, or 1.2 with super pods)."""
        try:
            doc = json.loads(self.table_text) if self.table_text else None
        except ValueError:
            return None
        version = doc.get("version") if isinstance(doc, dict) else None
        return str(version) if version is not None else None


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
            # (the user's environment: not what this agent process set for itself)
            k: v for k, v in pydantic_plugins.handed_on(os.environ).items()
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
            # The fake CANN's version files; a held NPU is waited for 2 s, not 30.
            "ASCEND_NODE_ASCEND_ROOT": str(node_dir / "Ascend"),
            "ASCEND_NODE_PREFLIGHT_HOLD_WAIT": "2",
            "ASCEND_VISIBLE_DEVICES": ",".join(str(d) for d in range(spec.devices)),
            "PYTHONUNBUFFERED": "1",
            "HCCL_IF_BASE_PORT": str(quiet_hccl_base_port()),
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


Tick = Callable[[float, Sequence[NodeResult], Sequence[int]], None]
"""Called about every `tick` seconds while nodes run: (seconds since the first start,
the nodes that ended, the indices still running or yet to start)."""


@dataclass
class _Running:
    node: SimNode
    proc: subprocess.Popen[bytes]
    started: float
    out: IO[bytes]
    err: IO[bytes]


KILL_GRACE = 60.0
"""A node still running this long after its own --timeout is killed: its agent should
have given up at the timeout."""


def launch(nodes: Sequence[SimNode], timeout: float, on_tick: Optional[Tick] = None,
           tick: float = 0.1, grace: float = KILL_GRACE) -> list[NodeResult]:
    """Start every node (after its start delay) and wait for all; returns in the order
    given. A node still running `grace` s after its timeout (its ASCEND_NODE_TIMEOUT when
    longer than `timeout`) is killed. Any exit from here, an interrupt included, leaves
    no node running.

    A node not started yet is started by its `start_delay` as it reads at each tick, so
    `on_tick` may move it: a test starts a pod on an event (`math.inf` until then) rather
    than at a second a loaded machine makes wrong."""
    for node in nodes:
        write_node_data(node.data_dir, node.devices, node.seat, node.unreachable)
        write_ascend_root(node.state_dir.parent / "Ascend", node.cann)
    pending = list(nodes)
    running: dict[int, _Running] = {}
    ended: dict[int, NodeResult] = {}
    t0 = time.monotonic()
    try:
        while pending or running:
            pending.sort(key=lambda n: n.start_delay)
            now = time.monotonic()
            while pending and t0 + pending[0].start_delay <= now:
                node = pending.pop(0)
                running[node.index] = _start(node)
            for index, run in list(running.items()):
                code = run.proc.poll()
                killed = ""
                limit = max(timeout, _own_timeout(run.node))
                if code is None and time.monotonic() > run.started + limit + grace:
                    _signal_group(run.proc, signal.SIGKILL)
                    code = run.proc.wait()
                    killed = (f"ascend-node simulate: killed: still running "
                              f"{limit + grace:g} s after it started (its --timeout is "
                              f"{limit:g} s)\n")
                if code is not None:
                    ended[index] = _collect(run, code, killed)
                    del running[index]
            if on_tick is not None:
                on_tick(time.monotonic() - t0, [ended[i] for i in sorted(ended)],
                        sorted([*running, *(n.index for n in pending)]))
            if pending or running:
                nap = tick
                if pending:
                    nap = min(nap, max(0.0, t0 + pending[0].start_delay - time.monotonic()))
                time.sleep(nap)
    finally:
        stop_all(list(running.values()))
    return [ended[n.index] for n in nodes]


STOP_GRACE = 5.0
"""Seconds the nodes get to end on SIGTERM (each records its interrupted start, as a pod
does) before their process groups are killed."""


def stop_all(runs: Sequence[_Running], grace: float = STOP_GRACE) -> None:
    """End every node still running and whatever it started (its process group: a fake
    hccn_tool, a fake MindIE daemon): SIGTERM, then SIGKILL after `grace` s."""
    for run in runs:
        _signal_group(run.proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for run in runs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.proc.wait(max(0.0, deadline - time.monotonic()))
        _signal_group(run.proc, signal.SIGKILL)  # the leader's children too
        run.proc.wait()
        run.out.close()
        run.err.close()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Each node leads its own process group (`_start`): signal all of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _own_timeout(node: SimNode) -> float:
    """The node's own peer timeout (0 when its environment gives none that parses)."""
    try:
        return float(node.env.get("ASCEND_NODE_TIMEOUT", "0"))
    except ValueError:
        return 0.0


def _start(node: SimNode) -> _Running:
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    out = open(node.state_dir.parent / "stdout.txt", "w+b")  # noqa: SIM115
    err = open(node.state_dir.parent / "stderr.txt", "w+b")  # noqa: SIM115
    # Its own process group, so that stopping the simulation stops all it started; a
    # terminal's Ctrl-C then reaches simulate alone, which stops the nodes (`stop_all`).
    proc = subprocess.Popen(node.argv, env=node.env, stdout=out, stderr=err,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return _Running(node, proc, time.monotonic(), out, err)


def _collect(run: _Running, code: int, killed: str = "") -> NodeResult:
    """The ended node's result; a node ended by a signal gets 128 + its number, as a
    shell reports it (143 for SIGTERM)."""
    seconds = time.monotonic() - run.started
    run.out.seek(0)
    run.err.seek(0)
    node = run.node
    result = NodeResult(node.index, code if code >= 0 else 128 - code, seconds,
                        run.out.read().decode(errors="replace"),
                        run.err.read().decode(errors="replace") + killed, node.state_dir,
                        node.env.get("K8S_POD_IP", ""))
    run.out.close()
    run.err.close()
    result.table = result.local_table()
    result.phase_times = result.phases()
    return result


def run_cluster(spec: SimSpec, shared_dir: Optional[Path] = None,
                work: Optional[Path] = None, on_tick: Optional[Tick] = None,
                pod_env: Optional[Callable[[SimNode], Mapping[str, str]]] = None
                ) -> SimReport:
    """The whole simulation: prepare, break the named devices, launch all but the absent
    nodes, collect, report. `pod_env(node)`: variables that replace the shared directory
    (`simulate --rendezvous kube`: the pods meet through the API, `sim/kube_sim.py`)."""
    work = work or Path(tempfile.mkdtemp(prefix="ascend-node-sim-"))
    shared = shared_dir or (work / "shared")
    shared.mkdir(parents=True, exist_ok=True)
    nodes = prepare(spec, work, shared)
    if pod_env is not None:
        for node in nodes:
            node.env.pop("ASCEND_NODE_SHARED_DIR", None)
            node.env.pop("ASCEND_NODE_RUN_ID", None)  # the job's name is the run
            node.env.update(pod_env(node))
    apply_bad_devices(nodes, spec.bad_devices)
    if spec.start_delays is None and spec.nodes > 1:
        for node in nodes:
            node.start_delay = random.uniform(0, 0.5)
    t0 = time.monotonic()
    try:
        results = launch([n for n in nodes if n.index not in spec.absent], spec.timeout,
                         on_tick)
    finally:
        for node in nodes:
            for sock in node.listeners:
                sock.close()
    wall = time.monotonic() - t0
    table_path = shared / f"ranktable-{spec.run_id}.json"
    text = table_path.read_text() if table_path.is_file() else None
    if text is None and pod_env is not None:  # no shared copy: node 0's own table
        local = next((r.local_table() for r in results if r.index == 0), None)
        text = local.decode() if local is not None else None
    return SimReport(spec, shared, results, wall, text, workspace=work)


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
