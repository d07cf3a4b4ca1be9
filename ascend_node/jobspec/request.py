"""Every `manifest` option as one value, and the objects it renders, in apply order (pure).

`ascend-node manifest` prints them; `ascend-node launch` creates them (issue 39: "the Job is the
one `manifest` renders"). Both commands build a `JobRequest` from their flags and call `render`,
so the rules across options (which flags go with which kind, the PD shape, the rendezvous key)
and the objects' order are decided once, here, not in each command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ascend_node.errors import UsageError
from ascend_node.jobspec.job import (
    DEFAULT_NPU_RESOURCE,
    ManifestParams,
    render_job,
    render_key_secret,
    render_rbac,
    render_yaml,
    to_yaml,
)
from ascend_node.jobspec.pd_job import (
    PdShape,
    check_shape,
    render_pd_configmap,
    render_pd_job,
    render_pd_rbac,
    render_pd_yaml,
)

KINDS = ("mindie", "mindie-pd", "training")
KEY_COMMENT = "# the job's rendezvous key (docs/rendezvous.md)\n"


@dataclass(frozen=True)
class JobRequest:
    """`manifest`'s options, by their flag names (`--no-driver-mounts` is `no_driver_mounts`);
    None: the flag was not given. `command` is what follows `--`."""

    kind: str = "mindie"
    name: str = "mindie"
    nodes: Optional[int] = None
    prefill: Optional[int] = None
    decode: Optional[int] = None
    prefill_pods: Optional[int] = None
    decode_pods: Optional[int] = None
    image: str = "mindie:latest"
    pvc: Optional[str] = None
    rendezvous: str = "volume"
    run_id: Optional[str] = None
    npus_per_node: Optional[int] = None
    a3: bool = False
    model_path: str = "/mnt/model"
    namespace: Optional[str] = None
    rdma_resource: Optional[str] = None
    queue: str = "default"
    timeout: int = 900
    npu_resource: str = DEFAULT_NPU_RESOURCE
    no_driver_mounts: bool = False
    rendezvous_key: bool = False
    rendezvous_key_secret: Optional[str] = None
    https: Optional[bool] = None
    load_timeout: Optional[int] = None
    tls_secret: Optional[str] = None
    model_dir: Optional[str] = None
    model_pvc: Optional[str] = None
    model_name: Optional[str] = None
    run_as_user: Optional[int] = None
    launcher: Optional[str] = None
    master_port: Optional[int] = None
    msrun_log_dir: Optional[str] = None
    bind_core: bool = False
    init_container: bool = False
    init_image: Optional[str] = None
    command: Optional[tuple[str, ...]] = None


def request_options() -> list[str]:
    """The `JobRequest` fields a command takes as options (all but the command after `--`):
    `manifest`'s parameters by these names, and `launch`'s."""
    return [f.name for f in fields(JobRequest) if f.name != "command"]


@dataclass(frozen=True)
class Rendered:
    """What a request renders: the Job, and what must exist before it (the rendezvous key's
    Secret, the job's RBAC objects, a PD service's ConfigMap), in apply order."""

    params: ManifestParams
    shape: Optional[PdShape]
    job: dict[str, Any]
    before: list[dict[str, Any]] = field(default_factory=list)
    secret: Optional[dict[str, Any]] = None
    # A warning for the operator (a PD shape whose roles the controller picks), or None.
    note: Optional[str] = None

    def objects(self) -> list[dict[str, Any]]:
        return [*self.before, self.job]

    def yaml_text(self) -> str:
        """The YAML stream `manifest` prints (for `kubectl apply -f -`)."""
        head = "" if self.secret is None else KEY_COMMENT + to_yaml(self.secret) + "---\n"
        if self.shape is not None:
            return head + render_pd_yaml(self.params, self.shape)
        return head + render_yaml(self.params)

    def json_text(self) -> str:
        """`manifest --json`: the Job alone, or a List of every object when there are more."""
        doc = self.job if not self.before else {"apiVersion": "v1", "kind": "List",
                                                "items": self.objects()}
        return json.dumps(doc, indent=2) + "\n"


def render(req: JobRequest, key_text: Optional[str] = None) -> Rendered:
    """The objects `req` asks for; `key_text` is the fresh random key of `--rendezvous-key`
    (the caller draws it: this module stays pure). UsageError names the first bad option."""
    if req.kind not in KINDS:
        raise UsageError(f"--kind {req.kind!r} is not one of mindie, mindie-pd, training",
                         "use --kind mindie, --kind mindie-pd or --kind training")
    pd = req.kind == "mindie-pd"
    shape_flags = {"--prefill": req.prefill, "--decode": req.decode,
                   "--prefill-pods": req.prefill_pods, "--decode-pods": req.decode_pods}
    if pd and req.nodes is not None:
        raise UsageError("--nodes with --kind mindie-pd: a PD service's pods are its "
                         "instances'", "give --prefill/--decode and --prefill-pods/"
                         "--decode-pods (docs/pd.md)")
    given = [flag for flag, value in shape_flags.items() if value is not None]
    if not pd and given:
        raise UsageError(f"{given[0]} is for --kind mindie-pd",
                         "leave it out, or render a PD service with --kind mindie-pd")
    if req.rendezvous_key and req.rendezvous_key_secret:
        raise UsageError("--rendezvous-key and --rendezvous-key-secret both given",
                         "render a new Secret, or name an existing one, not both")
    key_secret = (f"{req.name}-rendezvous-key" if req.rendezvous_key
                  else req.rendezvous_key_secret)
    shape = None
    note = None
    if pd:
        shape = PdShape(**{k: v for k, v in zip(
            ("prefill", "decode", "prefill_pods", "decode_pods"), shape_flags.values())
            if v is not None})
        check_shape(shape, req.name)  # before the instance's size reaches ManifestParams
        note = shape.roles_note()
    params = ManifestParams(
        kind="mindie" if pd else req.kind,  # type: ignore[arg-type]
        name=req.name, nodes=(max(shape.prefill_pods, shape.decode_pods) if shape is not None
                              else 2 if req.nodes is None else req.nodes),
        image=req.image,
        pvc=req.pvc if req.pvc is not None or req.rendezvous == "kube" else "model",
        run_id=req.run_id or req.name, rendezvous=req.rendezvous,
        npus_per_node=(16 if req.a3 else 8) if req.npus_per_node is None else req.npus_per_node,
        model_path=req.model_path, namespace=req.namespace, rdma_resource=req.rdma_resource,
        queue=req.queue, timeout=req.timeout,
        command=list(req.command) if req.command else None, npu_resource=req.npu_resource,
        mount_driver=not req.no_driver_mounts, a3=req.a3, rendezvous_key_secret=key_secret,
        https=req.https, load_timeout=req.load_timeout, tls_secret=req.tls_secret,
        model_dir=req.model_dir, model_pvc=req.model_pvc, model_name=req.model_name,
        run_as_user=req.run_as_user, launcher=req.launcher, master_port=req.master_port,
        msrun_log_dir=req.msrun_log_dir, bind_core=req.bind_core,
        init_container=req.init_container, init_image=req.init_image,
    )
    secret = None
    if req.rendezvous_key:
        if key_text is None:
            raise ValueError("--rendezvous-key needs the caller's fresh key")
        secret = render_key_secret(params, key_text)
    head = [] if secret is None else [secret]
    if shape is not None:
        return Rendered(params, shape, render_pd_job(params, shape),
                        [*head, *render_pd_rbac(params, shape),
                         render_pd_configmap(params, shape)], secret, note)
    return Rendered(params, None, render_job(params), [*head, *render_rbac(params)], secret)
