"""`simulate --pd`: a whole PD-disaggregated MindIE service as local processes.

The same processes a PD Job's pods run (docs/pd.md), each with the environment its pod
would have:

- the coordinator's pod: `ascend-node pd-boot -- mindie_motor_coordinator` (announces its pod IP for
  group "0", execs the fake coordinator, which listens on that IP: sim/fake_motor.py);
- the controller's pod: `ascend-node pd-table --watch` (the sidecar that writes the global
  table) and `ascend-node pd-boot -- mindie_motor_controller` (waits for the table, checks the
  controller's configuration against it, execs the fake controller pointed at the live
  file, which re-reads it, accepts or refuses it as the real loader would and tells the
  coordinator);
- every pod of every prefill and decode instance: `ascend-node boot -- mindieservice_daemon`
  under its instance's identity (`pd.roles.instance_environ`), with fake NPUs, into the fake
  MindIE daemon (which checks its instance's table and exits 0, as in `simulate --boot`).

Every pod's address is a string from the ranges `simulate` always uses, which nothing routes
(the agent refuses a loopback pod IP); the fake coordinator and controller map the
coordinator's and the controller's onto loopback addresses (ASCEND_NODE_SIM_MOTOR_ADDRESSES:
one random 127.a.b per run, so that two simulations do not share the coordinator's ports).
The run ends when every server has ended and the fake controller has accepted a table with
every instance and told the coordinator — or when a pod failed, or the service processes
gave up (`--timeout`) — and then the service processes are stopped.

The controller's and the coordinator's configurations are the ones `manifest --kind
mindie-pd` renders for the same shape (`pd.motor_configs.motor_files`, byte for byte, the
table path this run's): every instance centralized (both `enable_dist_dp_server` false,
`deploy_server` "0" for both roles), `node_machine_num` the pods of each role's instances,
which is how the controller tells P from D — the shape `boot` starts, so the fake controller
sees what a real one would be given. What the simulation needs beyond that is in the
environment, not the files: the fakes' loopback addresses (ADDRESSES_ENV) and the table
period (PERIOD_ENV). The fake servers do not serve: the simulation proves the tables, the
hand-over and the controller's view.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional

from ascend_node import pydantic_plugins
from ascend_node.errors import UsageError
from ascend_node.sim.cluster import (
    NodeResult,
    SimNode,
    SimSpec,
    device_ip,
    host_ip,
    launch,
    pod_ip,
    prepare,
    server_summary,
)
from ascend_node.sim.fake_motor import (
    ADDRESSES_ENV,
    PERIOD_ENV,
    STATE_ENV,
    install_motor_fakes,
)
from ascend_node.sim.session import in_workspace

# The fake controller's table period: 0.5 s instead of the rendered
# rank_table_detecting_seconds (5 s), given as ASCEND_NODE_SIM_MOTOR_PERIOD so that the
# configuration file stays the manifest's.
MOTOR_PERIOD = "0.5"
SETTLE = 15.0
"""Seconds past --timeout the service processes get to give up on their own (pd-table
names the missing instance at its --timeout) before simulate stops them."""


@dataclass
class PdSpec:
    prefill: int = 1  # P instances
    decode: int = 1  # D instances
    prefill_pods: int = 2  # pods per P instance
    decode_pods: int = 1
    devices: int = 8
    a3: bool = False
    run_id: str = "sim"
    timeout: float = 60.0
    tool_delay: float = 0.0
    absent: frozenset[tuple[str, int]] = frozenset()  # (task, place) pods that never start

    def tasks(self) -> list[tuple[str, int]]:
        """Every instance task and its pods, P first (the global table's group order)."""
        return ([(f"prefill-{i}", self.prefill_pods) for i in range(self.prefill)]
                + [(f"decode-{j}", self.decode_pods) for j in range(self.decode)])

    def job_env(self) -> dict[str, str]:
        """What Volcano's svc plugin puts into every pod of the Job."""
        env = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1"}
        for task, pods in self.tasks():
            env[f"VC_{task.upper().replace('-', '_')}_NUM"] = str(pods)
        return env

    @property
    def servers(self) -> int:
        return self.prefill * self.prefill_pods + self.decode * self.decode_pods


def parse_absent(text: str, spec: PdSpec) -> frozenset[tuple[str, int]]:
    """`decode-0/0` or `prefill-0/1,decode-0/0` (task/pod); UsageError naming the value."""
    tasks = dict(spec.tasks())
    out = set()
    for part in text.split(","):
        task, sep, place = part.strip().partition("/")
        if not sep or task not in tasks or not place.isdigit():
            raise UsageError(f"--absent {text!r}: {part.strip()!r} is not TASK/POD of this "
                             "service", f"e.g. --absent decode-0/0 (tasks: "
                             f"{', '.join(tasks)})")
        if int(place) >= tasks[task]:
            raise UsageError(f"--absent {text!r}: {task} has pods 0-{tasks[task] - 1}",
                             "name pods that exist")
        out.add((task, int(place)))
    if len(out) == spec.servers:
        raise UsageError(f"--absent {text!r} names every server pod: nothing would serve",
                         "leave at least one server pod out of --absent")
    return frozenset(out)


def motor_files(spec: PdSpec, shared: Path) -> dict[str, str]:
    """ms_controller.json and ms_coordinator.json as `manifest --kind mindie-pd` renders them
    for this shape (`pd.motor_configs`), the live table on `shared`: one source, so the
    simulation cannot drift from the Job a user deploys."""
    from ascend_node.pd.motor_configs import motor_files as render
    from ascend_node.pd.service import global_table_path

    return render(spec.prefill_pods, spec.decode_pods, spec.devices,
                  str(global_table_path(shared, spec.run_id)))


def controller_config(spec: PdSpec, shared: Path) -> dict[str, Any]:
    """The controller's configuration `motor_files` writes, parsed."""
    from ascend_node.pd.motor_configs import CONTROLLER_FILE

    config: dict[str, Any] = json.loads(motor_files(spec, shared)[CONTROLLER_FILE])
    return config


def roles_decided(spec: PdSpec) -> bool:
    """Whether the controller can tell P from D by `node_machine_num`: with every instance
    centralized it can only when P and D instances have different pods; else its role
    manager picks the roles (docs/pd.md, the P/D hazard) and the fake leaves them open."""
    return spec.prefill_pods != spec.decode_pods


def has_every_instance(view: Optional[Mapping[str, Any]], spec: PdSpec) -> bool:
    """Whether the fake controller's accepted view holds every instance in its role: P and
    D counted apart when `node_machine_num` tells them apart, else all undecided."""
    if view is None:
        return False
    counts = (view.get("prefill"), view.get("decode"), view.get("undecided"))
    if roles_decided(spec):
        return counts == (spec.prefill, spec.decode, 0)
    return counts == (0, 0, spec.prefill + spec.decode)


def loopback_base() -> str:
    """A random 127.a.b /24 for this run's service pods (port 1025/1026 free on it)."""
    return f"127.{random.randint(64, 250)}.{random.randint(1, 250)}"


@dataclass
class ServiceProcess:
    """A process of the coordinator's or the controller's pod."""

    name: str  # coordinator, pd-table, controller
    pod_ip: str
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    proc: Optional[subprocess.Popen[bytes]] = None
    out: Optional[IO[bytes]] = None
    err: Optional[IO[bytes]] = None
    exit_code: Optional[int] = None  # None: still running when simulate stopped it
    stopped: bool = False
    stdout: str = ""
    stderr: str = ""

    @property
    def cause(self) -> str:
        lines = self.stderr.splitlines()
        for at in range(len(lines) - 1, -1, -1):
            if lines[at].startswith("ascend-node: error: "):
                return lines[at][len("ascend-node: error: "):]
        tail = [ln for ln in lines if ln.strip()]
        return tail[-1] if tail else ""

    @property
    def failed(self) -> bool:
        return not self.stopped and self.exit_code not in (None, 0)


@dataclass
class PdReport:
    spec: PdSpec
    shared_dir: Path
    workspace: Path
    servers: list[tuple[str, int, NodeResult]]  # (task, place, result) of the pods that ran
    service: list[ServiceProcess]
    table_path: Path
    table: Optional[dict[str, Any]]
    problems: list[str]  # the controller's rules the table breaks ([] valid)
    controller: Optional[dict[str, Any]]  # the fake controller's last accepted view
    refreshes: int  # refreshes the fake coordinator received
    wall_seconds: float
    workspace_kept: bool = True
    instance_tables: dict[str, Optional[str]] = field(default_factory=dict)
    # Seconds from the last instance table to the global table (its file's mtime), and from
    # the global table to the fake controller's first acceptance (the target: 1 s).
    table_lag: Optional[float] = None
    accept_lag: Optional[float] = None

    @property
    def accepted(self) -> bool:
        return has_every_instance(self.controller, self.spec)

    @property
    def ok(self) -> bool:
        return (not self.spec.absent and all(r.exit_code == 0 for _, _, r in self.servers)
                and not any(p.failed for p in self.service) and self.table is not None
                and not self.problems and self.accepted and self.refreshes > 0)

    @property
    def worst_exit(self) -> int:
        codes = [r.exit_code for _, _, r in self.servers if r.exit_code != 0]
        codes += [p.exit_code for p in self.service if p.failed and p.exit_code is not None]
        return max(codes) if codes else (0 if self.ok else 1)


def _base_env() -> dict[str, str]:
    """The user's environment without anything a pod gets from its Job."""
    return {k: v for k, v in pydantic_plugins.handed_on(os.environ).items()
            if not k.startswith(("ASCEND_NODE_", "VC_", "VK_", "K8S_", "KUBEFLOW_", "KFJ_",
                                 "MINDX_", "MINDIE_", "GLOBAL_RANK"))
            and k not in ("ROLE", "POD_UID", "POD_IP", "MODEL_PATH", "ASCEND_VISIBLE_DEVICES")}


def server_pods(spec: PdSpec, work: Path, shared: Path) -> list[tuple[str, int, SimNode]]:
    """Every server pod of every instance, with its instance's identity and its own
    addresses (pod, host and device IPs unique across the service)."""
    from ascend_node.pd.roles import instance_environ, read_pd_identity

    job = spec.job_env()
    out = []
    n = 0
    for task, pods in spec.tasks():
        sim = SimSpec(nodes=pods, devices=spec.devices, masters=0,
                      run_id=f"{spec.run_id}-{task}", timeout=spec.timeout,
                      tool_delay=spec.tool_delay, boot=True, a3=spec.a3)
        for node in prepare(sim, work / task, shared):
            place = node.index
            me = read_pd_identity({**job, "ASCEND_NODE_PD_TASK": task,
                                   "VC_TASK_INDEX": str(place)})
            node.env.update(job)
            node.env.update(instance_environ(me, spec.run_id))
            node.env.update({"ASCEND_NODE_PD_TASK": task, "K8S_POD_IP": pod_ip(n),
                             "K8S_HOST_IP": host_ip(n)})
            for device in node.devices:
                device.ip = device_ip(n, device.device_id)
            node.index = n  # unique across the service (launch keys its results by it)
            out.append((task, place, node))
            n += 1
    return out


def service_processes(spec: PdSpec, work: Path, shared: Path, base: str
                      ) -> list[ServiceProcess]:
    """The coordinator's pod and the controller's pod (two processes: the sidecar and the
    controller), not started."""
    from ascend_node.pd.motor_configs import CONTROLLER_FILE, COORDINATOR_FILE

    fakes = install_motor_fakes(work / "bin")
    files = motor_files(spec, shared)
    coordinator_config = work / "coordinator" / COORDINATOR_FILE
    coordinator_config.parent.mkdir(parents=True, exist_ok=True)
    coordinator_config.write_text(files[COORDINATOR_FILE])
    controller_dir = work / "controller"
    controller_dir.mkdir(parents=True, exist_ok=True)
    config_path = controller_dir / CONTROLLER_FILE
    config_path.write_text(files[CONTROLLER_FILE])
    agent = [sys.executable, "-m", "ascend_node"]

    def pod(task: str, ip: str, host: str, extra: Mapping[str, str]) -> dict[str, str]:
        return {**_base_env(), **spec.job_env(), "ASCEND_NODE_PD_TASK": task,
                "VC_TASK_INDEX": "0", "K8S_POD_IP": ip, "K8S_HOST_IP": host,
                "POD_UID": str(uuid.uuid4()), "ASCEND_NODE_SHARED_DIR": str(shared),
                "ASCEND_NODE_RUN_ID": spec.run_id, "ASCEND_NODE_TIMEOUT": f"{spec.timeout:g}",
                "ASCEND_NODE_STATE_DIR": str(work / task / "state"),
                "ASCEND_NODE_SIM_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", **extra}

    coordinator_ip, controller_ip = "10.201.0.10", "10.201.0.11"
    # The one override of where things listen: the fakes map the service pods' IPs, which
    # nothing routes, onto this run's loopback /24; the rendered ports stay as they are
    # (the coordinator's 1025 and 1026, the controller's refreshes to 1026).
    addresses = f"{coordinator_ip}={base}.10,{controller_ip}={base}.11"
    coordinator_env = pod("coordinator", coordinator_ip, "10.101.0.10", {
        ADDRESSES_ENV: addresses,
        "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": str(coordinator_config),
        STATE_ENV: str(work / "coordinator" / "state.jsonl")})
    controller_env = pod("controller", controller_ip, "10.101.0.11", {
        ADDRESSES_ENV: addresses,
        "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": str(config_path),
        PERIOD_ENV: MOTOR_PERIOD, STATE_ENV: str(controller_dir / "state.jsonl")})
    return [
        ServiceProcess("coordinator", coordinator_ip,
                       [*agent, "pd-boot", "--", str(fakes["coordinator"])], coordinator_env,
                       work / "coordinator"),
        ServiceProcess("pd-table", controller_ip,
                       [*agent, "pd-table", "--controller-config", str(config_path),
                        "--watch"],
                       {**controller_env,  # the sidecar's own state dir, as its container's
                        "ASCEND_NODE_STATE_DIR": str(controller_dir / "pd-table" / "state")},
                       controller_dir / "pd-table"),
        ServiceProcess("controller", controller_ip,
                       [*agent, "pd-boot", "--", str(fakes["controller"])], controller_env,
                       work / "controller"),
    ]


def _start(p: ServiceProcess) -> None:
    p.log_dir.mkdir(parents=True, exist_ok=True)
    p.out = open(p.log_dir / "stdout.txt", "w+b")  # noqa: SIM115
    p.err = open(p.log_dir / "stderr.txt", "w+b")  # noqa: SIM115
    p.proc = subprocess.Popen(p.argv, env=p.env, stdout=p.out, stderr=p.err,
                              stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(processes: Sequence[ServiceProcess], grace: float = 5.0) -> None:
    """SIGTERM every process group still running, SIGKILL after `grace`; read the logs."""
    for p in processes:
        if p.proc is not None and p.proc.poll() is None:
            p.stopped = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in processes:
        if p.proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.proc.pid, signal.SIGKILL)
        code = p.proc.wait()
        p.exit_code = None if p.stopped else (code if code >= 0 else 128 - code)
        for handle, attr in ((p.out, "stdout"), (p.err, "stderr")):
            if handle is not None:
                handle.seek(0)
                setattr(p, attr, handle.read().decode(errors="replace"))
                handle.close()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _controller_view(work: Path) -> Optional[dict[str, Any]]:
    accepted = [x for x in _jsonl(work / "controller" / "state.jsonl")
                if x.get("event") == "accepted"]
    return accepted[-1] if accepted else None


def _refreshes(work: Path) -> int:
    return sum(x.get("event") == "refresh" for x in _jsonl(work / "coordinator" / "state.jsonl"))


def _gave_up(service: Sequence[ServiceProcess], table_written: bool) -> bool:
    """Whether the service cannot come up any more and every process has said why it
    would: the controller (or the coordinator) ended, and `pd-table` either ended too (its
    --timeout names the missing instances) or has written its table (it would only watch)."""
    ended = {p.name: p.proc is not None and p.proc.poll() is not None for p in service}
    table_done = ended.get("pd-table", True) or table_written
    return (ended.get("controller", False) or ended.get("coordinator", False)) and table_done


def run_pd_service(spec: PdSpec, shared_dir: Optional[Path], work: Path,
                   say: Callable[[str], None] = lambda _: None) -> PdReport:
    """Start the service, wait for it to come up (or fail), stop it, report."""
    from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config
    from ascend_node.pd.service import global_table_path

    shared = shared_dir or work / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    service = service_processes(spec, work, shared, loopback_base())
    servers = server_pods(spec, work, shared)
    table_path = global_table_path(shared, spec.run_id)
    t0 = time.monotonic()
    results: list[NodeResult] = []
    try:
        for p in service:
            _start(p)
        running = [node for task, place, node in servers if (task, place) not in spec.absent]
        results = launch(running, spec.timeout)
        served = all(r.exit_code == 0 for r in results) and not spec.absent
        deadline = time.monotonic() + (spec.timeout if served else spec.timeout + SETTLE)
        while time.monotonic() < deadline:
            if _gave_up(service, table_path.exists()):
                break
            if (served and has_every_instance(_controller_view(work), spec)
                    and _refreshes(work)):
                break
            time.sleep(0.2)
    finally:
        _stop(service)
    wall = time.monotonic() - t0
    by_index = {r.index: r for r in results}
    ran = [(task, place, by_index[node.index]) for task, place, node in servers
           if node.index in by_index]
    table: Optional[dict[str, Any]] = None
    problems: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        table = json.loads(table_path.read_text(encoding="utf-8"))
    if table is not None:
        flags = flags_from_controller_config(controller_config(spec, shared))
        problems = [f"{p.path}: {p.message}" for p in check_global_table(table, flags)]
    tables = {}
    stamps = []
    for task, _ in spec.tasks():
        path = shared / f"ranktable-{spec.run_id}-{task}.json"
        tables[task] = path.read_text() if path.is_file() else None
        with contextlib.suppress(OSError):
            stamps.append(path.stat().st_mtime)
    table_lag = accept_lag = None
    with contextlib.suppress(OSError):
        written = table_path.stat().st_mtime
        if len(stamps) == len(spec.tasks()):
            table_lag = round(written - max(stamps), 3)
        accepted = [x for x in _jsonl(work / "controller" / "state.jsonl")
                    if x.get("event") == "accepted"]
        if accepted:
            accept_lag = round(float(accepted[0]["time"]) - written, 3)
    return PdReport(spec, shared, work, ran, service, table_path, table, problems,
                    _controller_view(work), _refreshes(work), wall,
                    instance_tables=tables, table_lag=table_lag, accept_lag=accept_lag)


def simulate_pd(spec: PdSpec, shared_dir: Optional[Path] = None, keep: Optional[bool] = None,
                say: Callable[[str], None] = lambda _: None) -> PdReport:
    """`run_pd_service` in a new workspace, removed afterwards unless `keep` (None: kept
    when something failed)."""
    work = Path(tempfile.mkdtemp(prefix="ascend-node-sim-pd-"))
    def pods(n: int) -> str:
        return f"{n} pod{'s' if n != 1 else ''}"

    say(f"simulate: starting a PD service ({spec.prefill} P x {pods(spec.prefill_pods)}, "
        f"{spec.decode} D x {pods(spec.decode_pods)}, {spec.devices} NPUs each, a "
        f"coordinator, a controller) in {work}")
    report = in_workspace(work, keep, "pod",
                          lambda: run_pd_service(spec, shared_dir, work, say))
    report.workspace_kept = keep if keep is not None else not report.ok
    if not report.workspace_kept:
        shutil.rmtree(work, ignore_errors=True)
    return report


def group_of_task(table: Optional[Mapping[str, Any]], spec: PdSpec, task: str
                  ) -> Optional[str]:
    """The group id the global table gives an instance task (P then D, from "2")."""
    if table is None:
        return None
    order = [t for t, _ in spec.tasks()]
    wanted = str(2 + order.index(task))
    ids = [str(g.get("group_id")) for g in table.get("server_group_list", [])]
    return wanted if wanted in ids else None


def format_pd_report(report: PdReport) -> str:
    """One line per pod (service pods first), the global table and its verdict, the
    controller's view, the overall verdict and where the workspace is."""
    spec = report.spec
    lines = [f"{'pod':<14} {'pod IP':<15} {'server':<15} {'devices':>7} {'ranks':>7} "
             f"{'group':>5} {'exit':>7} {'seconds':>7}"]
    for p in report.service:
        state = "serving" if p.stopped else f"exit {p.exit_code}"
        group = {"coordinator": "0", "pd-table": "1", "controller": "1"}[p.name]
        lines.append(f"{p.name:<14} {p.pod_ip:<15} {'-':<15} {'-':>7} {'-':>7} {group:>5} "
                     f"{state:>7} {'-':>7}")
    ran = {(t, pl): r for t, pl, r in report.servers}
    for task, pods in spec.tasks():
        group = group_of_task(report.table, spec, task) or "-"
        for place in range(pods):
            name = f"{task}/{place}"
            r = ran.get((task, place))
            if r is None:
                lines.append(f"{name:<14} {'-':<15} {'-':<15} {spec.devices:>7} {'-':>7} "
                             f"{group:>5} {'absent':>7} {'-':>7}")
                continue
            row = server_summary(report.instance_tables.get(task), r, spec.devices)
            lines.append(f"{name:<14} {row['pod_ip'] or '-':<15} {row['server'] or '-':<15} "
                         f"{row['devices']:>7} {row['ranks'] or '-':>7} {group:>5} "
                         f"{'exit ' + str(r.exit_code):>7} {r.seconds:>7.2f}")
    for task, place, r in report.servers:
        if r.exit_code != 0:
            lines.append(f"{task}/{place}: exit {r.exit_code}: {r.cause}")
            if r.hint:
                lines.append(f"  hint: {r.hint}")
            if report.workspace_kept:
                lines.append(f"  log: {r.log}")
    for p in report.service:
        if p.failed:
            lines.append(f"{p.name}: exit {p.exit_code}: {p.cause}")
            if report.workspace_kept:
                lines.append(f"  log: {p.log_dir / 'stderr.txt'}")
    lines.append(table_verdict(report))
    view = report.controller
    if view is not None:
        undecided = view.get("undecided", 0)
        roles = f"{view['prefill']} P + {view['decode']} D instances"
        if undecided:
            roles += (f" + {undecided} with the role undecided (P and D instances have "
                      "equal pods, so node_machine_num cannot tell them apart: the real "
                      "controller's role manager picks)")
        lines.append(f"fake controller: accepted the table: groups {', '.join(view['groups'])}"
                     f"; {roles}, {len(view['nodes'])} nodes; coordinator told "
                     f"{report.refreshes} time{'s' if report.refreshes != 1 else ''}")
        if report.table_lag is not None and report.accept_lag is not None:
            lines.append(f"global table written {report.table_lag:.2f} s after the last "
                         f"instance table; accepted by the controller {report.accept_lag:.2f} "
                         "s after that")
    else:
        lines.append("fake controller: accepted no table")
    ok = sum(r.exit_code == 0 for _, _, r in report.servers)
    verdict = "the service came up" if report.ok else "THE SERVICE DID NOT COME UP"
    lines.append(f"{spec.prefill} P x {spec.prefill_pods} + {spec.decode} D x "
                 f"{spec.decode_pods} pods x {spec.devices} NPUs: {ok}/{spec.servers} servers "
                 f"ok{f', {len(spec.absent)} absent' if spec.absent else ''}, {verdict}, "
                 f"{report.wall_seconds:.2f} s wall")
    if report.workspace_kept:
        lines.append(f"workspace kept: {report.workspace} (<task>/node-N/stderr.txt: a "
                     "server's log; coordinator/, controller/: the service pods' logs and "
                     "the fakes' state.jsonl)")
    return "\n".join(lines)


def table_verdict(report: PdReport) -> str:
    where = (str(report.table_path) if report.workspace_kept
             or report.workspace not in report.table_path.parents
             else "removed with the workspace (--keep keeps it, --json prints it)")
    if report.table is None:
        return "global rank table: none written"
    groups = len(report.table.get("server_group_list", []))
    if report.problems:
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        return (f"global rank table: {where}, {groups} groups: REFUSED by the controller's "
                f"rules: {report.problems[0]}{more}")
    return (f"global rank table: {where}, {groups} groups: valid under the controller's "
            "rules")


def pd_report_json(report: PdReport) -> dict[str, Any]:
    spec = report.spec
    ran = {(t, pl): r for t, pl, r in report.servers}
    pods: list[dict[str, Any]] = []
    for p in report.service:
        pods.append({"pod": p.name, "pod_ip": p.pod_ip, "serving": p.stopped,
                     "exit_code": p.exit_code, "cause": p.cause if p.failed else None})
    for task, n in spec.tasks():
        for place in range(n):
            r = ran.get((task, place))
            row: dict[str, Any] = {"pod": f"{task}/{place}", "task": task, "place": place,
                                   "group": group_of_task(report.table, spec, task),
                                   "absent": r is None}
            if r is not None:
                row.update(server_summary(report.instance_tables.get(task), r, spec.devices))
                row.update(exit_code=r.exit_code, seconds=round(r.seconds, 3),
                           cause=(r.cause or None) if r.exit_code else None)
            pods.append(row)
    kept = report.workspace_kept
    return {
        "pd": True, "prefill": spec.prefill, "decode": spec.decode,
        "prefill_pods": spec.prefill_pods, "decode_pods": spec.decode_pods,
        "devices_per_pod": spec.devices, "a3": spec.a3, "ok": report.ok,
        "absent": sorted(f"{t}/{p}" for t, p in spec.absent),
        "pods": pods, "global_table_path": str(report.table_path),
        "global_table_problems": report.problems, "global_table": report.table,
        "controller": report.controller, "coordinator_refreshes": report.refreshes,
        "table_lag_seconds": report.table_lag, "accept_lag_seconds": report.accept_lag,
        "workspace": str(report.workspace), "workspace_kept": kept,
        "wall_seconds": round(report.wall_seconds, 3),
    }
