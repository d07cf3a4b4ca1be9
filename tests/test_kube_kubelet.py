"""A real kubelet runs the pods (issue 37, deliverable 3; docs/kube-bed.md "A real kubelet").

`scripts/kube-bed up --kubelet` adds the node `kube-bed-kubelet-0`: kubelet v1.30.2 built from
the same k8s.io/kubernetes module as the API server, over containerd 1.6 (Debian), runc and the
bridge CNI plugin, with a locally built pause image and a fake Ascend device plugin speaking
the kubelet's device-plugin API. What these tests read back — phase, exit codes, termination
messages, pod IPs, NPU allocations — was written by the kubelet and containerd, not by us.

Needs root, Go (the bed's build), openssl, containerd + runc + containernetworking-plugins
(scripts/ci-setup-containers) and the container bed's base image (scripts/container_bed.py,
built once per machine); without one of them the module skips and says which.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube_bed import ROOT, Bed, load_scripts

# containers too: its pods run from the container bed's images (scripts/container_bed.py)
pytestmark = [pytest.mark.kube, pytest.mark.containers]

NPU = "huawei.com/Ascend910"
JOBS_API = "batch.volcano.sh/v1alpha1"


def _container_bed() -> Any:
    name = "container_bed_kubelet"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "container_bed.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _leftovers(run: Path, kk: Any, netns_before: list[str]) -> list[str]:
    left = [f"mount {m}" for m in kk._mounts_under(run)]
    left += [f"shim {p}" for p in kk._shims(run / "kubelet")]
    left += [f"netns {n}" for n in kk.netns_names()
             if n.startswith("cni-") and n not in netns_before]  # netns-*: podman's
    if Path(f"/sys/class/net/{kk.BRIDGE}").exists():
        left.append(f"link {kk.BRIDGE}")
    left += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/kubepods")]
    return left


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Bed, str]]:
    if os.geteuid() != 0:
        pytest.skip("a real kubelet needs root (containerd, runc, CNI, cgroups, mounts)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: the kube bed signs its certificates with it")
    api, bed = load_scripts()
    kk = sys.modules["kube_kubelet"]
    missing = kk.missing()
    if missing:
        pytest.skip(f"not installed: {' '.join(missing)} (scripts/ci-setup-containers "
                    "installs them as root)")
    cb = _container_bed()
    if cb.missing_tools():
        pytest.skip(f"not installed: {' '.join(cb.missing_tools())} (the base image's tools)")
    images = cb.Bed()
    images.configure()
    try:
        base = images.build_base()
    except cb.BedError as exc:
        pytest.skip(f"cannot build the container bed's base image: {exc}")
    run = tmp_path_factory.mktemp("kube-kubelet")
    netns_before = kk.netns_names()
    try:
        bed.up(run, 1, False, True, (base,))
    except SystemExit as e:
        if e.code == 3:
            pytest.skip("no Go toolchain: the kube bed's binaries are built from the Go "
                        "module proxy (scripts/kube-bed-build)")
        raise
    except bed.BedError as e:
        bed.down(run)
        pytest.fail(f"kube bed --kubelet did not come up: {e}")
    try:
        yield Bed(run, bed.client(run), api, [kk.KUBELET_NODE]), base
    finally:
        bed.down(run)
        left = _leftovers(run, kk, netns_before)
        assert not left, f"left after `kube-bed down`: {left}"


def pod(name: str, image: str, command: str, **spec: Any) -> dict[str, Any]:
    main = {"name": "main", "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", command]}
    main.update(spec.pop("main", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "kube-bed-kubelet-0", "restartPolicy": "Never",
                     "containers": [main], **spec}}


def phases(bed: Bed, ns: str, name: str, until: tuple[str, ...],
           timeout: float = 180.0, ips: Any = None) -> tuple[list[str], dict[str, Any]]:
    """Poll the pod; the phases seen in order, and the pod once it reached one of `until`
    (the pod IPs seen are added to `ips`: a finished pod's sandbox, and its IP, are gone)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        got = bed.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        phase = got.get("status", {}).get("phase", "")
        if ips is not None and got.get("status", {}).get("podIP"):
            ips.add(got["status"]["podIP"])
        if not seen or seen[-1] != phase:
            seen.append(phase)
        if phase in until:
            return seen, got
        assert time.monotonic() < deadline, f"{ns}/{name}: phases {seen}, not {until}"
        time.sleep(0.3)


def test_a_plain_pod_runs_to_succeeded_with_the_status_the_kubelet_writes(
        node: tuple[Bed, str]) -> None:
    bed, image = node
    ns = bed.namespace("kubelet-plain")
    bed.kube.create(f"/api/v1/namespaces/{ns}/pods", pod(
        "plain", image, "sleep 3; echo finished > /dev/termination-log"))
    ips: set[str] = set()
    seen, got = phases(bed, ns, "plain", ("Succeeded", "Failed"), ips=ips)
    assert seen[-2:] == ["Running", "Succeeded"], seen
    status = got["status"]
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (0, "Completed", "finished\n")
    assert status["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert len(ips) == 1, ips  # from the bridge CNI's host-local range
    assert ipaddress.ip_address(ips.pop()) in ipaddress.ip_network("10.234.0.0/24")
    info = bed.kube.get("/api/v1/nodes/kube-bed-kubelet-0")["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.30.2"
    assert info["containerRuntimeVersion"].startswith("containerd://1.")


def test_a_failing_container_fails_the_pod_with_its_exit_code(node: tuple[Bed, str]) -> None:
    bed, image = node
    ns = bed.namespace("kubelet-fail")
    bed.kube.create(f"/api/v1/namespaces/{ns}/pods", pod(
        "fails", image, "echo 'hccn_tool: no device' > /dev/termination-log; exit 4"))
    _, got = phases(bed, ns, "fails", ("Succeeded", "Failed"))
    term = got["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (got["status"]["phase"], term["exitCode"], term["reason"], term["message"]) == \
        ("Failed", 4, "Error", "hccn_tool: no device\n")


def test_npus_go_only_to_the_containers_that_ask_for_them(node: tuple[Bed, str]) -> None:
    bed, image = node
    node_obj = bed.kube.get("/api/v1/nodes/kube-bed-kubelet-0")
    assert node_obj["status"]["allocatable"][NPU] == "8"  # from the device plugin
    ns = bed.namespace("kubelet-npus")
    show = "echo ${ASCEND_VISIBLE_DEVICES-unset} > /dev/termination-log"
    bed.kube.create(f"/api/v1/namespaces/{ns}/pods", pod(
        "npus", image, show, main={"resources": {"limits": {NPU: "2"}}},
        initContainers=[{"name": "init", "image": image, "imagePullPolicy": "Never",
                         "command": ["sh", "-c", show]}]))
    _, got = phases(bed, ns, "npus", ("Succeeded", "Failed"))
    init = got["status"]["initContainerStatuses"][0]["state"]["terminated"]["message"]
    main = got["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert init == "unset\n"
    ids = [int(i) for i in main.strip().split(",")]
    assert len(set(ids)) == 2 and ids == sorted(ids) and all(0 <= i < 8 for i in ids), main


def test_a_volcano_job_is_gang_scheduled_and_run_by_the_kubelet(node: tuple[Bed, str]) -> None:
    bed, image = node
    ns = bed.namespace("kubelet-vcjob")
    show = ("echo $VK_TASK_INDEX $ASCEND_VISIBLE_DEVICES $(tr '\\n' , < /etc/volcano/w.host)"
            " > /dev/termination-log; sleep 2")
    job = {
        "apiVersion": JOBS_API, "kind": "Job", "metadata": {"name": "vj"},
        "spec": {"schedulerName": "volcano", "minAvailable": 2, "queue": "default",
                 "plugins": {"env": [], "svc": []},
                 "tasks": [{"name": "w", "replicas": 2, "template": {"spec": {
                     "restartPolicy": "Never",
                     "nodeSelector": {"kubernetes.io/hostname": "kube-bed-kubelet-0"},
                     "containers": [{"name": "main", "image": image,
                                     "imagePullPolicy": "Never", "command": ["sh", "-c", show],
                                     "resources": {"limits": {NPU: "4"}}}]}}}]}}
    bed.kube.create(bed.jobs_path(ns), job)
    bed.wait("vcjob vj Completed", lambda: bed.kube.get(bed.jobs_path(ns, "vj")).get(
        "status", {}).get("state", {}).get("phase") == "Completed", timeout=240)
    out = {}
    for p in bed.pods(ns):
        index, npus, hosts = p["status"]["containerStatuses"][0]["state"]["terminated"][
            "message"].split()
        out[index] = set(npus.split(","))
        assert hosts == "vj-w-0.vj,vj-w-1.vj"  # Volcano's svc plugin, mounted by the kubelet
    assert sorted(out) == ["0", "1"]
    assert len(out["0"] | out["1"]) == 8  # 4 + 4 of the node's 8, none given twice
