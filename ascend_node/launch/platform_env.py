"""The platform's way of asking: cube-studio's `KFJ_*` environment and the seed's form fields.

cube-studio runs a launcher as one pipeline task's pod and tells it what to run through the
environment it injects (`KFJ_*`, `GPU_RESOURCE_NAME`, `RDMA_RESOURCE_NAME`, `HUBSECRET`,
`DEFAULT_POD_RESOURCES`, `IMAGE_PULL_POLICY`) and through the template's form fields
(`--num_worker`, `--image`, `--working_dir`, `--command`). Every syntax read here is the one
github.com/tencentmusic/cube-studio at commit 852a7bd2 reads or injects — "launcher.py" below is
job-template/job/volcano/launcher.py, "py_k8s.py" job-template/job/pkgs/k8s/py_k8s.py (its
`get_volume_mounts` and `get_gpu`); facts read, no code taken; each is cited where it is parsed.

`read_request` is pure: an environment mapping and the form fields in, a `PlatformRequest`
out — `manifest` keyword arguments (the same option set `ascend-node manifest` takes) plus
what the platform asks that `manifest` does not render yet (its volumes, node selector,
pull secrets, CPU and memory, labels). A bad value raises the contract's error naming the
variable (or flag) and the value: `ConfigError` (exit 1) for the environment, `UsageError`
(exit 2) for a flag (docs/bad-inputs.md, "Environment and flags").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ascend_node.discover.identity import check_run_id
from ascend_node.errors import ConfigError, UsageError
from ascend_node.jobspec.job import DEFAULT_NPU_RESOURCE

# Full-width brackets and comma are accepted where ASCII ones are (py_k8s.py,
# `get_gpu`).
_FULL_WIDTH = str.maketrans({"\uff08": "(", "\uff09": ")", "\uff0c": ","})

# Kubernetes' quantity syntax (k8s.io/apimachinery/pkg/api/resource, `Quantity`): a decimal
# number, then a binary (Ki..Ei), decimal (n u m k M G T P E) or exponent suffix.
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VOLUME_ENTRY = re.compile(r"^(?P<source>[^()]+)\((?P<kind>[A-Za-z0-9-]+)\):(?P<mount>.*)$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")

VOLUME_KINDS = ("pvc", "pvc-share", "nfs", "hostpath", "configmap", "secret")
# Vendor words of `KFJ_TASK_RESOURCE_GPU` that mean Ascend NPUs, and those that mean a GPU
# this agent does not drive (py_k8s.py `get_gpu` maps a vendor word to its resource name).
NPU_VENDORS = ("npu", "ascend", "huawei")
GPU_VENDORS = ("gpu", "nvidia", "amd", "intel")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# The Job name is `<task name>-<6 hex of the run id>`: a retry of the run gets the same name,
# another run of the same pipeline its own. 40 characters leave room for `-worker-<index>`
# within the 63 of a pod's hostname (jobspec.job.MAX_HOSTNAME).
NAME_MAX = 40
# Labels cube-studio's launcher puts on its Job (launcher.py): ours carries the same keys, so
# the platform's views find the Job.
PIPELINE_LABELS = (
    ("KFJ_PIPELINE_ID", "pipeline-id"), ("KFJ_PIPELINE_NAME", "pipeline-name"),
    ("KFJ_TASK_ID", "task-id"), ("KFJ_TASK_NAME", "task-name"),
    ("KFJ_CREATOR", "pipeline-username"), ("KFJ_RUNNER", "run-username"),
)


@dataclass(frozen=True)
class FormFields:
    """The seed template's form fields, under their own names (launcher.py's arguments);
    None: not given. `num_worker` arrives already an integer (the CLI's integer type refuses
    `two` with exit 2 before this runs); its range is checked here."""

    num_worker: Optional[int] = None
    image: Optional[str] = None
    working_dir: Optional[str] = None
    command: Optional[str] = None


@dataclass(frozen=True)
class Volume:
    """One `KFJ_TASK_VOLUME_MOUNT` entry, as the pod must mount it."""

    name: str
    kind: str  # one of VOLUME_KINDS
    source: str  # claim / configmap / secret name, host path, or NFS path
    mount: str
    sub_path: Optional[str] = None  # `pvc`: the creator's folder of a shared claim
    server: Optional[str] = None  # `nfs`: the server's IP


@dataclass(frozen=True)
class PlatformRequest:
    """What the platform asked for: `manifest` options plus what `manifest` does not render."""

    manifest: dict[str, Any]  # keyword arguments of manifest.ManifestParams
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: tuple[Volume, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    pull_secrets: tuple[str, ...] = ()
    pull_policy: Optional[str] = None
    resources: dict[str, str] = field(default_factory=dict)  # requests = limits
    working_dir: Optional[str] = None
    warnings: tuple[str, ...] = ()


def _env_error(var: str, value: str, why: str, hint: str) -> ConfigError:
    return ConfigError(f"{var}={value!r} {why}", hint)


def read_request(environ: Mapping[str, str], form: FormFields,
                 kind: str = "training") -> PlatformRequest:
    """The platform's request from its environment and the form fields (module docstring)."""
    env = {k: v for k, v in environ.items() if v.strip() != ""}  # empty = not injected
    warnings: list[str] = []
    opts: dict[str, Any] = {"kind": kind}

    run_id = env.get("KFJ_RUN_ID")
    if run_id is not None:
        opts["run_id"] = check_run_id(run_id.strip(), "environment KFJ_RUN_ID")
    namespace = env.get("KFJ_NAMESPACE")
    if namespace is not None:
        if not _DNS1123_LABEL.match(namespace):
            raise _env_error("KFJ_NAMESPACE", namespace, "is not a namespace name",
                             "a DNS-1123 label: lower-case letters, digits and '-'")
        opts["namespace"] = namespace
    opts["name"] = job_name(env.get("KFJ_TASK_NAME"), opts.get("run_id"))

    if form.num_worker is not None:
        if form.num_worker < 1:
            raise UsageError(f"--num_worker {form.num_worker} is out of range",
                             "--num_worker is the number of pods, at least 1")
        opts["nodes"] = form.num_worker
    image = form.image if form.image else env.get("KFJ_TASK_IMAGES")
    if image is not None:
        source = "--image" if form.image else "KFJ_TASK_IMAGES"
        image = image.strip()
        if not image or any(c.isspace() for c in image):
            err = f"{source} {image!r} is not one image reference"
            hint = "one image reference, e.g. registry/mindformers:1.3-ascend-node"
            raise UsageError(err, hint) if source == "--image" else ConfigError(err, hint)
        opts["image"] = image
    if form.command is not None:
        if not form.command.strip():
            raise UsageError("--command '' is empty",
                             "the training command, e.g. --command 'python3 train.py'")
        # Run as the seed's launcher runs it: ["bash", "-c", COMMAND] (launcher.py).
        opts["command"] = ["bash", "-c", form.command]
    working_dir = None
    if form.working_dir is not None:
        if not form.working_dir.startswith("/") or ".." in form.working_dir.split("/"):
            raise UsageError(f"--working_dir {form.working_dir!r} is not an absolute path",
                             "e.g. --working_dir /mnt/work")
        working_dir = form.working_dir

    resources: dict[str, str] = {}
    for var, key in (("KFJ_TASK_RESOURCE_CPU", "cpu"), ("KFJ_TASK_RESOURCE_MEMORY", "memory")):
        if var in env:
            resources[key] = _quantity(var, env[var].strip())
    node_selector: dict[str, str] = {}
    if "KFJ_TASK_NODE_SELECTOR" in env:
        node_selector = parse_node_selector(env["KFJ_TASK_NODE_SELECTOR"])
    npu_resource = env.get("GPU_RESOURCE_NAME", DEFAULT_NPU_RESOURCE).strip()
    _resource_name("GPU_RESOURCE_NAME", npu_resource)
    if "KFJ_TASK_RESOURCE_GPU" in env:
        count, npu_type = parse_accelerators(env["KFJ_TASK_RESOURCE_GPU"])
        opts["npus_per_node"] = count
        if npu_type is not None:
            node_selector["gpu-type"] = npu_type  # py_k8s.py get_gpu: the node label gpu-type
    opts["npu_resource"] = npu_resource
    if "RDMA_RESOURCE_NAME" in env and env.get("KFJ_TASK_RESOURCE_RDMA", "0").strip() != "0":
        rdma = env["RDMA_RESOURCE_NAME"].strip()
        _resource_name("RDMA_RESOURCE_NAME", rdma)
        opts["rdma_resource"] = rdma
    if "DEFAULT_POD_RESOURCES" in env:
        for key, value in parse_default_resources(env["DEFAULT_POD_RESOURCES"]).items():
            resources.setdefault(key, value)  # the task's own CPU/memory win

    pull_secrets: tuple[str, ...] = ()
    if "HUBSECRET" in env:
        pull_secrets = parse_pull_secrets(env["HUBSECRET"])
    pull_policy = env.get("IMAGE_PULL_POLICY")
    if pull_policy is not None and pull_policy not in PULL_POLICIES:
        raise _env_error("IMAGE_PULL_POLICY", pull_policy, "is not a pull policy",
                         f"one of {', '.join(PULL_POLICIES)}")
    volumes: tuple[Volume, ...] = ()
    if "KFJ_TASK_VOLUME_MOUNT" in env:
        volumes, skipped = parse_volume_mounts(env["KFJ_TASK_VOLUME_MOUNT"],
                                               env.get("KFJ_CREATOR"))
        warnings += skipped

    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for var, key in PIPELINE_LABELS:
        if var in env:
            annotations[key] = env[var]
            if _LABEL_VALUE.match(env[var]):
                labels[key] = env[var]
    annotations["project"] = env.get("KFJ_TASK_PROJECT_NAME", "public")
    return PlatformRequest(opts, labels, annotations, volumes, node_selector, pull_secrets,
                           pull_policy, resources, working_dir, tuple(warnings))


def job_name(task_name: Optional[str], run_id: Optional[str]) -> str:
    """`<task name as a DNS-1035 label>-<6 hex of the run id>` (see NAME_MAX): the same run
    retried gets the same name (its earlier Job is deleted first), two runs differ."""
    base = re.sub(r"[^a-z0-9-]+", "-", (task_name or "job").lower().replace("_", "-"))
    base = re.sub(r"-+", "-", base).strip("-")
    if not base or not base[0].isalpha():
        base = "job-" + base if base else "job"
    if run_id is None:
        return base[:NAME_MAX].rstrip("-")
    tag = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:6]
    return f"{base[:NAME_MAX - 7].rstrip('-')}-{tag}"


def _quantity(var: str, value: str) -> str:
    if not _QUANTITY.match(value):
        raise _env_error(var, value, "is not a Kubernetes quantity",
                         "e.g. 8, 500m, 64Gi (k8s resource.Quantity syntax)")
    return value


def _resource_name(var: str, value: str) -> str:
    if not _RESOURCE_NAME.match(value):
        raise _env_error(var, value, "is not an extended resource name",
                         "e.g. huawei.com/Ascend910 or rdma/hca")
    return value


def parse_accelerators(text: str) -> tuple[int, Optional[str]]:
    """`KFJ_TASK_RESOURCE_GPU`: `8`, `8(npu)`, `8(TYPE)`, `8(VENDOR,TYPE)` → (count, TYPE or
    None) (py_k8s.py, `get_gpu`). A GPU vendor, `-1` (a privileged
    container: the agent never asks for one) and `0` (a job without NPUs) are refused."""
    var = "KFJ_TASK_RESOURCE_GPU"
    norm = text.strip().translate(_FULL_WIDTH).replace(" ", "")
    match = re.fullmatch(r"(-?\d+)(?:\(([^()]*)\))?", norm)
    if match is None:
        raise _env_error(var, text, "is not COUNT, COUNT(VENDOR), COUNT(TYPE) or "
                         "COUNT(VENDOR,TYPE)", "e.g. 8 or 8(npu) or 8(npu,910b)")
    count = int(match.group(1))
    words = [w for w in (match.group(2) or "").split(",") if w] if match.group(2) else []
    if match.group(2) is not None and (not words or len(words) > 2):
        raise _env_error(var, text, "has an empty or over-long (...) part",
                         "COUNT(VENDOR) or COUNT(VENDOR,TYPE), e.g. 8(npu,910b)")
    vendor: Optional[str] = None
    npu_type: Optional[str] = None
    if len(words) == 2:
        vendor, npu_type = words
    elif len(words) == 1:
        if words[0].lower() in NPU_VENDORS + GPU_VENDORS:
            vendor = words[0]
        else:
            npu_type = words[0]
    if vendor is not None and vendor.lower() not in NPU_VENDORS:
        raise _env_error(var, text, f"asks for {vendor} accelerators; ascend-node runs "
                         "Ascend NPU jobs", "use COUNT or COUNT(npu), e.g. 8(npu)")
    if count == -1:
        raise _env_error(var, text, "asks for a privileged container; the agent needs "
                         "none (the NPUs come from the device plugin)",
                         "give the NPU count per pod, e.g. 8")
    if not 1 <= count <= 16:
        raise _env_error(var, text, "is out of range: NPUs per pod are 1-16",
                         "give the NPU count per pod, e.g. 8")
    if npu_type is not None and not _LABEL_VALUE.match(npu_type):
        raise _env_error(var, text, f"names type {npu_type!r}, not a label value",
                         "the gpu-type node label's value, e.g. 910b")
    return count, npu_type


def parse_node_selector(text: str) -> dict[str, str]:
    """`KFJ_TASK_NODE_SELECTOR`: `key=value` pairs split on `,` `;` newline or tab
    (launcher.py); a key given twice with two values is refused
    (which one the launcher meant is unknowable)."""
    var = "KFJ_TASK_NODE_SELECTOR"
    out: dict[str, str] = {}
    for pair in re.split(r"[,;\n\t]", text):
        pair = pair.strip()
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        prefix, _, name = key.rpartition("/")
        if (not sep or not _LABEL_KEY_NAME.match(name)
                or (prefix and not _DNS1123_SUBDOMAIN.match(prefix))
                or not _LABEL_VALUE.match(value)):
            raise _env_error(var, text, f"has {pair!r}, not a label key=value pair",
                             "pairs like cpu=true,train=true separated by , ; newline or tab")
        if out.get(key, value) != value:
            raise _env_error(var, text, f"gives {key!r} two values ({out[key]!r}, {value!r})",
                             "keep one value per key")
        out[key] = value
    return out


def parse_pull_secrets(text: str) -> tuple[str, ...]:
    """`HUBSECRET`: a comma list of image pull Secret names (launcher.py)."""
    names: list[str] = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if not _DNS1123_SUBDOMAIN.match(name):
            raise _env_error("HUBSECRET", text, f"names {name!r}, not a Secret name",
                             "a comma list of Secret names, e.g. hubsecret,team-registry")
        if name not in names:
            names.append(name)
    return tuple(names)


def parse_default_resources(text: str) -> dict[str, str]:
    """`DEFAULT_POD_RESOURCES`: a JSON object merged into requests and limits (launcher.py,
    row `DEFAULT_POD_RESOURCES`): resource name → quantity (a string, or a number)."""
    var = "DEFAULT_POD_RESOURCES"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _env_error(var, text, f"is not JSON ({exc.msg})",
                         'a JSON object, e.g. {"ephemeral-storage": "20Gi"}') from None
    if not isinstance(data, dict):
        raise _env_error(var, text, "is not a JSON object",
                         'a JSON object, e.g. {"ephemeral-storage": "20Gi"}')
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise _env_error(var, text, f"gives {key!r} the value {value!r}, not a quantity",
                             'quantities as strings, e.g. {"ephemeral-storage": "20Gi"}')
        if not _QUANTITY.match(str(value)):
            raise _env_error(var, text, f"gives {key!r} the value {value!r}, not a quantity",
                             'quantities as strings, e.g. {"ephemeral-storage": "20Gi"}')
        if not _RESOURCE_NAME.match(key):
            raise _env_error(var, text, f"names {key!r}, not a resource name",
                             'e.g. {"ephemeral-storage": "20Gi"}')
        out[key] = str(value)
    return out


def volume_name(source: str) -> str:
    """cube-studio's volume name rule (py_k8s.py, `get_volume_mounts`): lower case,
    `_` `/` `.` to `-`, the last 60 characters; then trimmed of `-` at both ends, which the
    API's DNS-1123 rule for a volume name requires (`/data` would start with one)."""
    name = re.sub(r"[_/.]", "-", source.lower())[-60:].strip("-")
    return name


def parse_volume_mounts(text: str, creator: Optional[str]) -> tuple[tuple[Volume, ...],
                                                                     list[str]]:
    """`KFJ_TASK_VOLUME_MOUNT`: entries split on `,` or `;`, each `SOURCE(KIND):MOUNT`
    (py_k8s.py, `get_volume_mounts`). An entry whose source or mount was already seen is
    skipped as cube-studio skips it, and said (the second list). `pvc` mounts the creator's
    folder of the claim, so it needs `KFJ_CREATOR`. `storage` is not supported yet."""
    var = "KFJ_TASK_VOLUME_MOUNT"
    volumes: list[Volume] = []
    skipped: list[str] = []
    seen_sources: set[str] = set()
    seen_mounts: set[str] = set()
    for entry in re.split(r"[,;]", text.translate(_FULL_WIDTH)):
        entry = entry.strip()
        if not entry:
            continue
        match = _VOLUME_ENTRY.match(entry)
        if match is None:
            raise _env_error(var, text, f"has {entry!r}, not SOURCE(KIND):MOUNT",
                             "e.g. kubeflow-user-workspace(pvc):/mnt")
        source, kind = match.group("source").strip(), match.group("kind").lower()
        mount = match.group("mount").strip().rstrip("/") or "/"
        if kind not in VOLUME_KINDS:
            raise _env_error(var, text, f"has {entry!r} of kind {kind!r}, which launch does "
                             "not mount", f"kinds: {', '.join(VOLUME_KINDS)}")
        if not mount.startswith("/") or mount == "/" or ".." in mount.split("/"):
            raise _env_error(var, text, f"has {entry!r}: mount {mount!r} is not an absolute "
                             "path below /", "e.g. kubeflow-user-workspace(pvc):/mnt")
        if source in seen_sources or mount in seen_mounts:
            skipped.append(f"{var}: {entry!r} skipped: its source or mount came earlier")
            continue
        seen_sources.add(source)
        seen_mounts.add(mount)
        sub_path = server = None
        path = source
        if (kind in ("pvc", "pvc-share", "configmap", "secret")
                and not _DNS1123_SUBDOMAIN.match(source)):
            raise _env_error(var, text, f"has {entry!r}: {source!r} is not a {kind} name",
                             "lower-case letters, digits, '-' and '.'")
        if kind == "pvc":
            if creator is None or not _LABEL_VALUE.match(creator) or not creator:
                raise ConfigError(
                    f"{var} has {entry!r} (a per-user folder of the claim) but KFJ_CREATOR="
                    f"{creator!r} names no user folder",
                    "set KFJ_CREATOR, or mount the whole claim with (pvc-share)")
            sub_path, mount = creator, f"{mount}/{creator}"
        elif kind == "nfs":
            server, _, rest = source.partition("/")
            path = "/" + rest
            if not _IPV4.match(server) or not rest:
                raise _env_error(var, text, f"has {entry!r}: not IP/PATH(nfs)",
                                 "e.g. 10.0.0.5/exports/data(nfs):/data")
        elif kind == "hostpath" and not source.startswith("/"):
            raise _env_error(var, text, f"has {entry!r}: host path {source!r} is not "
                             "absolute", "e.g. /data/datasets(hostpath):/datasets")
        name = volume_name(source)
        if not _DNS1123_LABEL.match(name) or any(v.name == name for v in volumes):
            raise _env_error(var, text, f"has {entry!r}: its volume name {name!r} is not a "
                             "DNS-1123 label or is another entry's",
                             "rename the source so the names differ in their last 60 characters")
        volumes.append(Volume(name, kind, path, mount, sub_path, server))
    return tuple(volumes), skipped

