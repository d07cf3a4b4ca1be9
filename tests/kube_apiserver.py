"""A real kube-apiserver v1.30 and etcd for the client's tests and benchmarks (issue 38).

The binaries are the control-plane bed's (issue 37 builds them with `go build` from the module
proxy into ~/.cache/ascend-node-kube/<versions>/bin); this module only starts etcd and
kube-apiserver from there, on free loopback ports, with its own PKI (openssl), static bearer
tokens (`--token-auth-file`) for the users a test names, x509 client certificates signed by the
same CA, and RBAC. Not the bed: no Volcano, no nodes, no pods.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tests.kube_tls import free_port, make_pki


def binaries() -> Optional[Path]:
    """The bed's build of Kubernetes v1.30 (kube-apiserver and etcd), if there is one."""
    for bin_dir in sorted((Path.home() / ".cache" / "ascend-node-kube").glob("k8s-v1.30.*/bin")):
        if (bin_dir / "kube-apiserver").exists() and (bin_dir / "etcd").exists():
            return bin_dir
    return None


@dataclass
class Plane:
    url: str
    ca: Path
    pki_dir: Path      # ca.crt and ca.key: client certificates are signed with them
    bin_dir: Path
    api: subprocess.Popen[bytes]
    log: Path


def _wait_ready(url: str, ca: Path, token: str, deadline: float,
                procs: list[subprocess.Popen[bytes]]) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}")
        try:
            req = urllib.request.Request(url + "/readyz",
                                         headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, context=ctx, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("kube-apiserver did not become ready")


@contextmanager
def control_plane(tmp: Path, users: Mapping[str, tuple[str, str]], bin_dir: Path,
                  ready_timeout: float = 180) -> Iterator[Plane]:
    """etcd + kube-apiserver; `users` maps a bearer token to (user name, comma-separated
    groups). The first token must be an admin's (it polls /readyz). Stopped (SIGCONT first,
    in case a test froze it) and waited for on the way out."""
    pki = make_pki(tmp / "pki")
    subprocess.run(["openssl", "genrsa", "-out", str(tmp / "sa.key"), "2048"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(tmp / "sa.key"), "-pubout", "-out",
                    str(tmp / "sa.pub")], check=True, capture_output=True)
    (tmp / "tokens.csv").write_text("".join(
        f'{token},{user},{user}-uid,"{groups}"\n' for token, (user, groups) in users.items()))
    client_port, peer_port, port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client_port}"
    log_path = tmp / "log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    etcd = subprocess.Popen(
        [str(bin_dir / "etcd"), "--name", "kc", "--data-dir", str(tmp / "etcd"),
         "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-cluster", f"kc=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync",
         "--log-level", "warn"], stdout=log, stderr=log)
    api = subprocess.Popen(
        [str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
         "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
         f"--tls-cert-file={pki.cert}", f"--tls-private-key-file={pki.key}",
         f"--token-auth-file={tmp / 'tokens.csv'}", f"--client-ca-file={pki.ca}",
         "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
         f"--service-account-key-file={tmp / 'sa.pub'}",
         f"--service-account-signing-key-file={tmp / 'sa.key'}",
         "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
         "--endpoint-reconciler-type=none", f"--cert-dir={tmp / 'certs'}",
         "--profiling=false", "--v=0"], stdout=log, stderr=log)
    url = f"https://127.0.0.1:{port}"
    try:
        try:
            _wait_ready(url, pki.ca, next(iter(users)), time.monotonic() + ready_timeout,
                        [etcd, api])
        except RuntimeError as exc:
            log.flush()
            raise RuntimeError(f"{exc}; log: {log_path.read_text(errors='replace')[-3000:]}"
                               ) from None
        yield Plane(url, pki.ca, tmp / "pki", bin_dir, api, log_path)
    finally:
        for p in (api, etcd):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in (api, etcd):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
        log.close()
