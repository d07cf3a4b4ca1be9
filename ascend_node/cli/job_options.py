"""The options `manifest` and `launch` share: one declaration each, so both commands take
every Job option under the same flag, with the same help and the same parser (issue 39: `launch`
takes "every `manifest` option"). Each is named for its `jobspec.request.JobRequest` field.

No `from __future__ import annotations` here (see `app`).
"""

from typing import Annotated, Optional

import typer

from ascend_node.cli.options import integer

Nodes = Annotated[Optional[int], typer.Option(
    "--nodes",
    parser=integer("--nodes", "2"), metavar="INTEGER",
    help="Pods (one per server) (2; not with --kind mindie-pd)",
    show_default=False)]
Prefill = Annotated[Optional[int], typer.Option(
    "--prefill",
    parser=integer("--prefill", "1"), metavar="INTEGER",
    help="mindie-pd: prefill instances (1)", show_default=False)]
Decode = Annotated[Optional[int], typer.Option(
    "--decode",
    parser=integer("--decode", "1"), metavar="INTEGER",
    help="mindie-pd: decode instances (1)", show_default=False)]
PrefillPods = Annotated[Optional[int], typer.Option(
    "--prefill-pods",
    parser=integer("--prefill-pods", "2"), metavar="INTEGER",
    help="mindie-pd: pods per prefill instance (2)",
    show_default=False)]
DecodePods = Annotated[Optional[int], typer.Option(
    "--decode-pods",
    parser=integer("--decode-pods", "1"), metavar="INTEGER",
    help="mindie-pd: pods per decode instance (1)",
    show_default=False)]
NpusPerNode = Annotated[Optional[int], typer.Option(
    "--npus-per-node",
    parser=integer("--npus-per-node", "8"), metavar="INTEGER",
    help="NPUs per pod, 1-16 (8; 16 with --a3)", show_default=False)]
A3 = Annotated[bool, typer.Option(
    "--a3", help="Atlas 900 A3 SuperPoD: 16 NPUs per pod, super-pod node selector")]
ModelPath = Annotated[str, typer.Option("--model-path", help="Mount path of the PVC")]
Queue = Annotated[str, typer.Option("--queue", help="Volcano queue of the Job")]
NoDriverMounts = Annotated[bool, typer.Option(
    "--no-driver-mounts", help="Do not mount the host's driver, /etc/hccn.conf, npu-smi, "
    "/usr/local/dcmi, /etc/ascend_install.info (the runtime provides them)")]
RendezvousKey = Annotated[bool, typer.Option(
    "--rendezvous-key", help="Also render a Secret <name>-rendezvous-key holding a fresh "
    "random key, mounted in every pod: rendezvous documents are then signed")]
RendezvousKeySecret = Annotated[Optional[str], typer.Option(
    "--rendezvous-key-secret", help="Mount this existing Secret (item `key`) as the "
    "job's rendezvous key", show_default=False)]
Https = Annotated[Optional[bool], typer.Option(
    "--https/--no-https", help="MindIE serves https, with the certificates of "
    "--tls-secret, or plain http (default: --no-https, for a cluster-internal Service)",
    show_default=False)]
LoadTimeout = Annotated[Optional[int], typer.Option(
    "--load-timeout",
    parser=integer("--load-timeout", "7200"), metavar="INTEGER",
    help="Seconds MindIE may load its weights after exec before the "
    "startup probe gives up (7200)", show_default=False)]
TlsSecret = Annotated[Optional[str], typer.Option(
    "--tls-secret", help="With --https: the Secret holding MindIE's 16 certificate files, "
    "mounted where MindIE looks for them (docs/deploy.md)", show_default=False)]
ModelDir = Annotated[Optional[str], typer.Option(
    "--model-dir", help="MindIE's modelWeightPath: a directory under --model-path, or "
    "where --model-pvc is mounted (default: --model-path)", show_default=False)]
ModelPvc = Annotated[Optional[str], typer.Option(
    "--model-pvc", help="A claim holding the weights, mounted read-only at --model-dir",
    show_default=False)]
ModelName = Annotated[Optional[str], typer.Option(
    "--model-name", help="MindIE's modelName (default: the image's config.json)",
    show_default=False)]
RunAsUser = Annotated[Optional[int], typer.Option(
    "--run-as-user",
    parser=integer("--run-as-user", "1001"), metavar="INTEGER",
    help="Run the pods as this uid (and gid): securityContext, fsGroup "
    "and a state emptyDir (MindIE's images: 1001)", show_default=False)]
Launcher = Annotated[Optional[str], typer.Option(
    "--launcher", help="Training: msrun (default) or torch; `boot` runs it",
    show_default=False)]
MasterPort = Annotated[Optional[int], typer.Option(
    "--master-port",
    parser=integer("--master-port", "8118"), metavar="INTEGER",
    help="Training: the launcher's port (msrun 8118, torchrun 29500)",
    show_default=False)]
MsrunLogDir = Annotated[Optional[str], typer.Option(
    "--msrun-log-dir", help="Training with msrun: its --log_dir", show_default=False)
]
BindCore = Annotated[bool, typer.Option(
    "--bind-core", help="Training with msrun: --bind_core=True")]
InitContainer = Annotated[bool, typer.Option(
    "--init-container", help="MindIE: `ascend-node ranktable` in an init container, the "
    "server image runs unchanged (images/README.md)")]
InitImage = Annotated[Optional[str], typer.Option(
    "--init-image", help="With --init-container: the agent's image (default: --image)",
    show_default=False)]


def fresh_key() -> str:
    """A new rendezvous key for `--rendezvous-key` (256 random bits, hex): drawn here, at the
    edge, so that `jobspec` stays pure."""
    import secrets

    return secrets.token_hex(32)
