"""A real NFS test bed: one kernel nfsd and >= 2 independent Linux NFS clients, in User
Mode Linux guests (issue 10; the caches: nfs(5); what was measured: docs/rendezvous.md,
"Network filesystems", and docs/benchmarks.md).

Why UML: the host kernel has no NFS, there is no hardware virtualisation, and what the
rendezvous must survive is the *Linux NFS client's* lookup and attribute caches, which
only a real client kernel has. Every guest boots Debian's `linux.uml` with the host's `/`
read-only (hostfs) as its root, so the project's venv Python runs inside it.

Layout, all under ONE work directory that `Bed.close()` removes:

    <work>/uml/           UML's umid directories (mconsole sockets)
    <work>/init.sh        the guests' init (server or client, chosen by BED_ROLE)
    <work>/runner.py      the pod runner inside each client guest (stdlib only)
    <work>/xstate-shim.so LD_PRELOAD shim for AVX-512/AMX hosts (scripts/uml-xstate-shim.c)
    <work>/batch-<k>/     inputs of one run (pod list, fake-tool data) and its results
    <work>/guest-<i>.log  each guest's console

One network namespace holds every guest (UML's multicast Ethernet on the namespace's
`lo`); it is deleted on close. Guests are stopped by process group (`linux.uml` makes
itself a group leader and forks helpers).

Control runs over each client guest's console (stdin/stdout pipes): the host writes
`run <batch file> <start time>` and the runner answers `@@bed done <k>` once its pods
have ended and their results are on hostfs. hostfs never revalidates cached lookups,
so it only carries inputs and results (every batch gets fresh names), never
coordination between guests: the pods meet on the NFS mount alone.

Guests run with glibc's AVX-512 functions switched off (UML 6.1 cannot save AVX-512
state; see the shim's comment) and on AVX-512/AMX hosts through the shim.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Optional

from ascend_node.sim.cluster import SimNode, SimSpec, prepare
from ascend_node.sim.fake_tools import write_node_data

REPO = Path(__file__).resolve().parents[1]
SHIM_SOURCE = REPO / "scripts" / "uml-xstate-shim.c"
UML = "/usr/bin/linux.uml"
UML_MODULES = Path("/usr/lib/uml/modules")
GLIBC_TUNABLES = ("glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,"
                  "-AVX512ER,-AVX512PF")
SUBNET = "10.99.0"
MCAST = "239.192.99.1,1102,1"
GUEST_SHARED = "/run/shared"      # the NFS mount inside a client guest
GUEST_PODS = "/run/pods"          # guest tmpfs: state dirs, master and world-size files
MARK = "@@bed "

INIT_SH = r"""#!/bin/sh
# Init of an nfs-testbed guest (tests/nfs_bed.py). Environment from the kernel command
# line: BED_ROLE server|client, BED_IP, BED_SERVER, BED_VERS, BED_OPTS, BED_RESULTS,
# BED_PYTHON, BED_RUNNER.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "@@bed $*"; }
fail() { say "fail $*"; sleep 1; exec /sbin/poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/mods/lib && ln -s /usr/lib/uml/modules /run/mods/lib/modules
printf '#!/bin/sh\nexec /sbin/modprobe -d /run/mods "$@"\n' > /run/modprobe
chmod 755 /run/modprobe && echo /run/modprobe > /proc/sys/kernel/modprobe
mount -t tmpfs tmpfs /var/lib/nfs
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/lib/nfs/v4recovery \
  /var/lib/nfs/rpc_pipefs /var/lib/nfs/nfsdcltrack /run/rpcbind
: > /var/lib/nfs/etab
: > /var/lib/nfs/rmtab
chown statd /var/lib/nfs/sm /var/lib/nfs/sm.bak 2>/dev/null
ip link set lo up
ip addr add "$BED_IP/24" dev eth0 && ip link set eth0 up || fail "network"
if [ "$BED_ROLE" = server ]; then
  for m in sunrpc lockd nfsd; do /run/modprobe "$m" || fail "modprobe $m"; done
  mkdir -p /run/export && mount -t tmpfs tmpfs /run/export && chmod 1777 /run/export
  mount -t nfsd nfsd /proc/fs/nfsd || fail "mount nfsd"
  rpcbind -w || fail rpcbind
  exportfs -o rw,fsid=0,no_root_squash,insecure,no_subtree_check,sync '*:/run/export' \
    || fail exportfs
  rpc.mountd 2>/dev/null || fail rpc.mountd
  rpc.statd --no-notify 2>/dev/null
  # nfsd hands out NFSv4 delegations through the kernel's file leases: off, none.
  if [ "$BED_DELEGATIONS" = 0 ]; then echo 0 > /proc/sys/fs/leases-enable; fi
  rpc.nfsd -G "${BED_GRACE:-10}" -L "${BED_LEASE:-10}" 8 || fail rpc.nfsd
  say "ready server $(cut -d' ' -f1 /proc/uptime)" \
    "grace $(cat /proc/fs/nfsd/nfsv4gracetime) lease $(cat /proc/fs/nfsd/nfsv4leasetime)"
  # Console commands: `nfsd <k>` answers with nfsd's operation counters on one line.
  stty -echo 2>/dev/null
  while read -r cmd arg; do
    case "$cmd" in
      nfsd) say "nfsd $arg $(cut -d' ' -f1 /proc/uptime) $(tr '\n' '|' < /proc/net/rpc/nfsd)" ;;
      # `restart <k> <seconds>`: stop every nfsd thread (the server forgets no state but
      # answers nothing), start them again after <seconds>; then a new grace period.
      restart) set -- $arg
        rpc.nfsd 0
        say "nfsd-stopped $1 $(cut -d' ' -f1 /proc/uptime)"
        sleep "$2"
        rpc.nfsd -G "${BED_GRACE:-10}" -L "${BED_LEASE:-10}" 8
        say "nfsd-started $1 $(cut -d' ' -f1 /proc/uptime)" ;;
    esac
  done
  while :; do sleep 3600; done
fi
# Each client needs its own name: the NFSv4 client owner it presents to the server is
# built from the hostname, and two guests with the same one are one client to nfsd, which
# then tears down one's session whenever the other (re)establishes its own (a storm of
# EXCHANGE_ID/CREATE_SESSION/DESTROY_SESSION and, now and then, a client frozen for
# seconds: bench/bench_nfs_stall.py). BED_SAME_NAME=1 keeps the old, shared name.
[ "$BED_SAME_NAME" = 1 ] || echo "nfsbed-client-$BED_CLIENT" > /proc/sys/kernel/hostname
for m in sunrpc lockd nfs nfsv3 nfsv4; do /run/modprobe "$m" || fail "modprobe $m"; done
rpcbind -w || fail rpcbind
rpc.statd --no-notify 2>/dev/null
mkdir -p /run/shared /run/pods
if [ "$BED_VERS" = 3 ]; then src="$BED_SERVER:/run/export"; else src="$BED_SERVER:/"; fi
opts="vers=$BED_VERS,nosharecache${BED_OPTS:+,$BED_OPTS}"
i=0
until mount -t nfs -o "$opts" "$src" /run/shared 2>/run/mount.err; do
  i=$((i + 1))
  [ $i -ge 120 ] && fail "mount -o $opts $src: $(cat /run/mount.err)"
  sleep 0.25
done
mkdir -p /run/results && mount -t hostfs none /run/results -o "$BED_RESULTS" \
  || fail "hostfs $BED_RESULTS"
say "mounted $(cut -d' ' -f1 /proc/uptime) $(grep ' /run/shared ' /proc/mounts | cut -d' ' -f4)"
exec "$BED_PYTHON" "$BED_RUNNER"
"""

RUNNER_PY = r'''"""Pod runner inside a client guest (tests/nfs_bed.py): runs the pods of a
batch that belong to this guest, then writes their results to the hostfs results directory."""
import json, os, subprocess, sys, threading, time, termios


def run_batch(words):
    batch_file, start_at, hard = words[1], float(words[2]), float(words[3])
    batch = json.loads(open(batch_file).read())
    mine = [p for p in batch["pods"] if p["client"] == client]
    procs = []
    for pod in sorted(mine, key=lambda p: p["delay"]):
        wait = start_at + pod["delay"] - time.time()
        if wait > 0:
            time.sleep(wait)
        os.makedirs(pod["pod_dir"], exist_ok=True)
        out = open(os.path.join(pod["pod_dir"], "stdout.txt"), "w+b")
        err = open(os.path.join(pod["pod_dir"], "stderr.txt"), "w+b")
        started = time.time()
        proc = subprocess.Popen(pod["argv"], env=pod["env"], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append((pod, proc, started, out, err))
    results = []
    deadline = start_at + hard
    for pod, proc, started, out, err in procs:
        try:
            code = proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            code = proc.wait()
        ended = time.time()
        out.seek(0)
        err.seek(0)
        table = os.path.join(pod["state_dir"], "ranktable.json")
        results.append({
            "index": pod["index"], "client": client, "exit_code": code,
            "start": started, "end": ended,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "table": open(table).read() if os.path.isfile(table) else None,
            "table_mtime": os.stat(table).st_mtime if os.path.isfile(table) else None,
        })
        out.close()
        err.close()
    path = os.path.join(os.environ["BED_RESULTS_GUEST"], f"{batch['id']}-client-{client}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    print(f"@@bed done {batch['id']}", flush=True)


client = int(os.environ["BED_CLIENT"])
try:
    attrs = termios.tcgetattr(0)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(0, termios.TCSANOW, attrs)
except termios.error:
    pass
print(f"@@bed ready client {client} {time.time():.6f}", flush=True)
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "ping":
        print(f"@@bed pong {words[1]} {time.time():.6f}", flush=True)
        continue
    if words[0] == "stats":
        # per-operation RPC counts of this client's NFS mount (the first number of each
        # "OP: ops trans timeouts ..." line of /proc/self/mountstats)
        ops, inside = {}, False
        for ln in open("/proc/self/mountstats"):
            if ln.startswith("device "):
                inside = " mounted on /run/shared " in ln
            elif inside and ln.startswith("\t") and ":" in ln:
                name, _, rest = ln.strip().partition(":")
                nums = rest.split()
                if name.isupper() and len(nums) >= 8 and nums[0].isdigit():
                    ops[name] = int(nums[0])
        print(f"@@bed stats {words[1]} {time.time():.6f} {json.dumps(ops, separators=(',', ':'))}",
              flush=True)
        continue
    if words[0] == "said":
        # "said <key> <file> <text...>": whether a running pod's stderr holds the text yet
        # (the tests start a server fault once the pods are waiting, not at a fixed time)
        try:
            found = " ".join(words[3:]) in open(words[2], errors="replace").read()
        except OSError:
            found = False
        print(f"@@bed said {words[1]} {int(found)}", flush=True)
        continue
    if words[0] != "run":
        continue
    # a batch runs beside this loop, which keeps answering `stats` while pods run
    threading.Thread(target=run_batch, args=(words,), daemon=True).start()
'''


# The watchdog: a separate process that learns each guest's process group and the
# namespace on its stdin and, when that pipe closes (the bed closed, or the process that
# owns the bed died, even by SIGKILL: a CI timeout), kills those groups and deletes the
# namespace. Killing linux.uml's main process alone leaves its helpers running.
WATCHDOG_PY = r"""
import os, signal, subprocess, sys
groups, netns = [], None
for line in sys.stdin:
    kind, _, value = line.strip().partition(" ")
    if kind == "pgid":
        groups.append(int(value))
    elif kind == "netns":
        netns = value
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
if netns:
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)
"""


class BedError(RuntimeError):
    """The bed could not be set up or did not answer in time (not a test verdict)."""


def why_not() -> str:
    """Why this machine cannot run the bed ('' when it can), for pytest.skip."""
    if sys.platform != "linux":
        return "the NFS test bed needs Linux"
    if os.geteuid() != 0:
        return "the NFS test bed needs root (ip netns add)"
    missing = [p for p in (UML, "/sbin/modprobe", "/usr/sbin/rpc.nfsd", "/sbin/mount.nfs",
                           "/usr/sbin/exportfs", "/usr/sbin/rpcbind")
               if not os.access(p, os.X_OK)]
    if shutil.which("ip") is None:
        missing.append("ip")
    if shutil.which("gcc") is None:
        missing.append("gcc")
    if not UML_MODULES.is_dir():
        missing.append(str(UML_MODULES))
    if missing:
        return (f"missing {', '.join(missing)} (run scripts/ci-setup-nfs: Debian packages "
                "user-mode-linux kmod nfs-kernel-server busybox-static iproute2 gcc libc6-dev)")
    return ""


@dataclass
class PodResult:
    """One pod's end: times are host wall-clock seconds (the guest clock's offset from the
    host's is measured at boot and taken out)."""

    index: int
    client: int
    exit_code: int
    start: float
    end: float
    stdout: str
    stderr: str
    table: Optional[str]
    table_mtime: Optional[float] = None  # when it wrote its local table (host clock)

    @property
    def last_error(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def explain(results: Sequence[PodResult]) -> str:
    return "\n".join(f"pod {r.index} (client {r.client}) exit {r.exit_code} "
                     f"{r.end - r.start:.1f} s: {r.stderr[-1200:]}" for r in results)


@dataclass
class _Guest:
    name: str
    proc: subprocess.Popen[bytes]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    offset: float = 0.0  # guest clock minus host clock
    kept: list[str] = field(default_factory=list)  # answers not yet asked for


class Bed:
    """One NFS server guest and `clients` client guests mounting its export.

    `vers` is "4.2" or "3"; `options` adds mount options ("" = the defaults, e.g.
    "lookupcache=positive"); `nosharecache` is always on, so each guest is one client.
    Use as a context manager, or call `start()` and, always, `close()`.
    """

    def __init__(self, work: Path, vers: str = "4.2", options: str = "", clients: int = 2,
                 mem: str = "384M", boot_timeout: float = 90.0, delegations: bool = True,
                 grace: int = 10, lease: int = 10, same_name: bool = False) -> None:
        self.work = Path(work)
        self.same_name = same_name  # True: every client guest keeps one hostname (the old bed)
        self.grace = grace  # nfsd's NFSv4 grace period and lease time, seconds
        self.lease = lease
        self.delegations = delegations  # False: the server grants no NFSv4 delegations
        self.vers = vers
        self.options = options
        self.clients = clients
        self.mem = mem
        self.boot_timeout = boot_timeout
        self.netns = f"nfsbed-{secrets.token_hex(3)}"
        self.guests: list[_Guest] = []
        self.batches = 0
        self.boot_seconds = 0.0
        self.last_start = 0.0  # host wall-clock time of the last run's common start
        self._netns_made = False
        self._watchdog: Optional[subprocess.Popen[bytes]] = None
        self._runs: dict[str, tuple[str, float, list[int], set[int]]] = {}
        self._placed: dict[int, tuple[int, str]] = {}  # last run: pod -> (client, pod dir)

    # -- set up ----------------------------------------------------------------------
    def __enter__(self) -> Bed:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ip(self, *args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise BedError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def _watch(self, line: str) -> None:
        if self._watchdog is not None and self._watchdog.stdin is not None:
            self._watchdog.stdin.write(line.encode() + b"\n")
            self._watchdog.stdin.flush()

    def start(self) -> float:
        """Boot the server and the clients; returns seconds until every client mounted."""
        reason = why_not()
        if reason:
            raise BedError(reason)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "uml").mkdir(exist_ok=True)
        (self.work / "init.sh").write_text(INIT_SH)
        (self.work / "init.sh").chmod(0o755)
        (self.work / "runner.py").write_text(RUNNER_PY)
        (self.work / "results").mkdir(exist_ok=True)
        shim = self.work / "xstate-shim.so"
        done = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim),
                               str(SHIM_SOURCE), "-ldl"], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise BedError(f"gcc {SHIM_SOURCE}: {done.stderr.strip()}")
        self._watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG_PY],
                                          stdin=subprocess.PIPE, start_new_session=True)
        self._watch(f"netns {self.netns}")
        self._ip("netns", "add", self.netns)
        self._netns_made = True
        self._ip("-n", self.netns, "link", "set", "lo", "up")
        self._ip("-n", self.netns, "link", "set", "lo", "multicast", "on")
        self._ip("-n", self.netns, "route", "add", "224.0.0.0/4", "dev", "lo")
        t0 = time.monotonic()
        self._boot("server", 1, {"BED_ROLE": "server",
                                 "BED_DELEGATIONS": "1" if self.delegations else "0",
                                 "BED_GRACE": str(self.grace), "BED_LEASE": str(self.lease)})
        for c in range(self.clients):
            self._boot(f"client-{c}", 2 + c, {
                "BED_ROLE": "client", "BED_SERVER": f"{SUBNET}.1", "BED_VERS": self.vers,
                "BED_OPTS": self.options, "BED_CLIENT": str(c),
                "BED_RESULTS": str(self.work / "results"), "BED_RESULTS_GUEST": "/run/results",
                "BED_PYTHON": sys.executable, "BED_RUNNER": str(self.work / "runner.py"),
                "BED_SAME_NAME": "1" if self.same_name else "",
            })
        deadline = t0 + self.boot_timeout
        self.server_ready = self._expect(self.guests[0], "ready server", deadline)
        self.server_ready_at = time.monotonic()
        for guest in self.guests[1:]:
            self._expect(guest, "mounted", deadline)
            self._expect(guest, "ready client", deadline)
        self.boot_seconds = time.monotonic() - t0
        for guest in self.guests[1:]:
            guest.offset = self._clock_offset(guest, deadline + 30)
        return self.boot_seconds

    def _boot(self, name: str, host: int, env: dict[str, str]) -> None:
        argv = ["ip", "netns", "exec", self.netns, UML, f"umid={self.netns}-{name}",
                f"uml_dir={self.work / 'uml'}", f"mem={self.mem}", "root=/dev/root",
                "rootfstype=hostfs", "rootflags=/", "ro", f"init={self.work / 'init.sh'}",
                f"eth0=mcast,fe:fd:0a:63:00:{host:02x},{MCAST}", "con0=fd:0,fd:1",
                "con=null", "quiet", f"BED_IP={SUBNET}.{host}",
                f"GLIBC_TUNABLES={GLIBC_TUNABLES}", "PYTHONUNBUFFERED=1",
                *(f"{k}={v}" for k, v in env.items() if v != "")]
        host_env = dict(os.environ, LD_PRELOAD=str(self.work / "xstate-shim.so"),
                        TMPDIR=str(self.work / "uml"))
        log = open(self.work / f"guest-{name}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=host_env,
                                start_new_session=True)
        self._watch(f"pgid {proc.pid}")
        guest = _Guest(name, proc)
        self.guests.append(guest)
        threading.Thread(target=self._pump, args=(proc.stdout, guest, log),
                         daemon=True).start()

    @staticmethod
    def _pump(stream: Optional[IO[bytes]], guest: _Guest, log: IO[bytes]) -> None:
        assert stream is not None
        with log:
            for raw in stream:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").replace("\r", "").rstrip("\n")
                at = line.find(MARK)
                if at >= 0:
                    guest.lines.put(line[at + len(MARK):])
        guest.lines.put("eof")

    def _expect(self, guest: _Guest, prefix: str, deadline: float) -> str:
        for k, kept in enumerate(guest.kept):  # answers that came while we waited for another
            if kept.startswith(prefix):
                return guest.kept.pop(k)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BedError(f"{guest.name}: no '{prefix}' in time; console: "
                               f"{self.work / f'guest-{guest.name}.log'}")
            try:
                line = guest.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line
            if line.startswith(("done ", "stats ", "said ", "nfsd ", "nfsd-")):
                guest.kept.append(line)
            if line.startswith(("fail", "eof")):
                raise BedError(f"{guest.name}: {line} (console: "
                               f"{self.work / f'guest-{guest.name}.log'})")

    def _send(self, guest: _Guest, text: str) -> None:
        assert guest.proc.stdin is not None
        guest.proc.stdin.write(text.encode() + b"\n")
        guest.proc.stdin.flush()

    def _clock_offset(self, guest: _Guest, deadline: float) -> float:
        best: Optional[tuple[float, float]] = None
        for k in range(3):
            sent = time.time()
            self._send(guest, f"ping {k}")
            words = self._expect(guest, f"pong {k}", deadline).split()
            back = time.time()
            sample = (back - sent, float(words[2]) - (sent + back) / 2)
            if best is None or sample[0] < best[0]:
                best = sample
        assert best is not None
        return best[1]

    # -- pods ------------------------------------------------------------------------
    def pods(self, n: int, devices: int = 2, run_id: str = "nfs", timeout: float = 60.0,
             job: Optional[str] = None, **extra_env: str) -> list[SimNode]:
        """N simulated pods (Volcano env, fake tools) whose shared dir is the NFS mount;
        pod i runs on client i % clients. Edit `env`/`devices` before `run()`. `job`
        names the pods' own directories on the guests' tmpfs (default: the run id): a
        second job under one run id gets new pods, as a re-deployed job does."""
        self.batches += 1
        prep = self.work / f"prep-{self.batches}"
        spec = SimSpec(nodes=n, devices=devices, run_id=run_id, timeout=timeout,
                       extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "2", **extra_env})
        nodes = prepare(spec, prep, Path(GUEST_SHARED))
        for node in nodes:
            pod_dir = f"{GUEST_PODS}/{job or run_id}/node-{node.index}"
            node.state_dir = Path(pod_dir) / "state"
            node.env.update({
                "ASCEND_NODE_STATE_DIR": str(node.state_dir),
                "ASCEND_NODE_MASTER_FILE": f"{pod_dir}/master",
                "ASCEND_NODE_WORLD_SIZE_FILE": f"{pod_dir}/world_size",
                "ASCEND_NODE_HCCN_CONF": f"{pod_dir}/hccn.conf",
                "GLIBC_TUNABLES": GLIBC_TUNABLES,
                "HOME": GUEST_PODS,
            })
        return nodes

    def server_counters(self, timeout: float = 60.0) -> dict[str, list[int]]:
        """nfsd's counters now (/proc/net/rpc/nfsd of the server guest): each line's
        name -> its numbers, e.g. "proc3", "proc4", "proc4ops" (nfsd(7))."""
        self.batches += 1
        key = f"n{self.batches}"
        self._send(self.guests[0], f"nfsd {key}")
        line = self._expect(self.guests[0], f"nfsd {key} ", time.monotonic() + timeout)
        out: dict[str, list[int]] = {}
        for row in line.split(" ", 3)[3].split("|"):
            words = row.split()
            if words and all(w.isdigit() for w in words[1:]):
                out[words[0]] = [int(w) for w in words[1:]]
        return out

    def client_counters(self, timeout: float = 60.0) -> list[dict[str, int]]:
        """Each client's RPC count per NFS operation on the shared mount (mountstats)."""
        self.batches += 1
        key = f"s{self.batches}"
        for guest in self.guests[1:]:
            self._send(guest, f"stats {key}")
        return [json.loads(self._expect(g, f"stats {key} ", time.monotonic() + timeout)
                           .split(" ", 3)[3]) for g in self.guests[1:]]

    def start_run(self, nodes: Sequence[SimNode], hard_timeout: float = 120.0,
                  lead: float = 1.0, place: Optional[Callable[[int], int]] = None) -> str:
        """Start a run (see `run`) without waiting for it; `finish_run` collects it.
        `place` maps a node index to its client (default: index % clients)."""
        self.batches += 1
        batch_id = f"batch-{self.batches}"
        bdir = self.work / batch_id
        pods = []
        where = place or (lambda i: i % self.clients)
        for node in nodes:
            data = bdir / f"node-{node.index}" / "hccn"
            write_node_data(data, node.devices)
            env = dict(node.env, ASCEND_NODE_SIM_DATA=str(data))
            pods.append({"index": node.index, "client": where(node.index),
                         "delay": node.start_delay, "argv": node.argv, "env": env,
                         "state_dir": str(node.state_dir),
                         "pod_dir": str(node.state_dir.parent)})
        (bdir / "batch.json").write_text(json.dumps({"id": batch_id, "pods": pods}))
        start = time.time() + lead
        for guest in self.guests[1:]:
            self._send(guest, f"run {bdir / 'batch.json'} {start + guest.offset:.6f} "
                              f"{hard_timeout:g}")
        self.last_start = start
        self._pending = (batch_id, lead + hard_timeout + 30, [n.index for n in nodes],
                         {p["client"] for p in pods})
        self._runs[batch_id] = self._pending
        self._placed = {p["index"]: (p["client"], p["pod_dir"]) for p in pods}
        return batch_id

    def wait_said(self, indices: Sequence[int], text: str, timeout: float = 60.0) -> float:
        """Wait until each given pod of the last run started has written `text` (single
        spaces) to its stderr; returns the host time it was seen. A fault injected at a
        fixed second misses pods a loaded machine started late; one injected once they
        say they wait does not."""
        deadline = time.monotonic() + timeout
        left = list(indices)
        while left:
            for index in list(left):
                client, pod_dir = self._placed[index]
                guest = self.guests[1 + client]
                self.batches += 1
                key = f"q{self.batches}"
                self._send(guest, f"said {key} {pod_dir}/stderr.txt {text}")
                if self._expect(guest, f"said {key} ", deadline).split()[2] == "1":
                    left.remove(index)
            if left:
                if time.monotonic() > deadline:
                    raise BedError(f"pods {left} did not write {text!r} in {timeout:g} s")
                time.sleep(0.5)
        return time.time()

    def finish_run(self, batch_id: Optional[str] = None) -> list[PodResult]:
        """Collect the last run started, or the named one (runs overlap: each guest runs
        each batch in its own thread)."""
        batch_id, wait, order, _used = (self._pending if batch_id is None
                                        else self._runs[batch_id])
        deadline = time.monotonic() + wait
        results: dict[int, PodResult] = {}
        for c, guest in enumerate(self.guests[1:]):
            self._expect(guest, f"done {batch_id}", deadline)
            path = self.work / "results" / f"{batch_id}-client-{c}.json"
            for r in json.loads(path.read_text()):
                r["start"] -= guest.offset
                r["end"] -= guest.offset
                if r.get("table_mtime") is not None:
                    r["table_mtime"] -= guest.offset
                results[r["index"]] = PodResult(**r)
        return [results[i] for i in order]

    def run(self, nodes: Sequence[SimNode], hard_timeout: float = 120.0,
            lead: float = 1.0) -> list[PodResult]:
        """Start every given pod at one common instant (`lead` s from now, plus each
        node's start_delay), wait for all; results in the order given."""
        self.start_run(nodes, hard_timeout, lead)
        return self.finish_run()

    # -- faults of the server --------------------------------------------------------
    def freeze_server(self) -> None:
        """Stop the server guest (SIGSTOP to its process group): a NAS that hangs. Its
        clients' calls wait (hard mounts) or time out (soft) until `thaw_server`."""
        os.killpg(self.guests[0].proc.pid, signal.SIGSTOP)

    def thaw_server(self) -> None:
        os.killpg(self.guests[0].proc.pid, signal.SIGCONT)

    def restart_nfsd(self, down: float, timeout: float = 60.0) -> None:
        """Stop the server's nfsd threads, start them `down` s later (a new grace period
        follows, `grace`); returns once they are stopped, without waiting for the start."""
        self.batches += 1
        key = f"r{self.batches}"
        self._send(self.guests[0], f"restart {key} {down:g}")
        self._expect(self.guests[0], f"nfsd-stopped {key}", time.monotonic() + timeout)

    # -- tear down -------------------------------------------------------------------
    def close(self) -> None:
        """Kill every guest by process group, delete the namespace and the work dir."""
        for guest in self.guests:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(guest.proc.pid, signal.SIGKILL)
                os.killpg(guest.proc.pid, signal.SIGCONT)  # a frozen guest dies too
        for guest in self.guests:
            with contextlib.suppress(subprocess.TimeoutExpired):
                guest.proc.wait(timeout=10)
            for pipe in (guest.proc.stdin, guest.proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        self.guests.clear()
        if self._watchdog is not None:
            if self._watchdog.stdin is not None:
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=20)
            self._watchdog = None
        if self._netns_made:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True,
                           timeout=20)
            self._netns_made = False
        if os.environ.get("NFSBED_KEEP") != "1":
            shutil.rmtree(self.work, ignore_errors=True)
