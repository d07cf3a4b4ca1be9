"""The option types several commands share, each with its help and environment twin.

No `from __future__ import annotations` here (see `app`).
"""


from pathlib import Path
from typing import Annotated, Optional

import typer

SharedDir = Annotated[Optional[Path], typer.Option(
    "--shared-dir", help="Shared volume of the run (env ASCEND_NODE_SHARED_DIR, else $MODEL_PATH)",
    show_default=False)]
RunId = Annotated[Optional[str], typer.Option(
    "--run-id", help="Run id (env ASCEND_NODE_RUN_ID, else KUBEFLOW_RUN_ID, KFJ_RUN_ID)",
    show_default=False)]
Timeout = Annotated[Optional[float], typer.Option(
    "--timeout", help="Seconds to wait for peers, from start (env ASCEND_NODE_TIMEOUT; 900)",
    show_default=False)]
MasterFile = Annotated[Optional[Path], typer.Option(
    "--master-file", help="Where to write the master's IP for launchers and scripts "
    "(env ASCEND_NODE_MASTER_FILE; /master)", show_default=False)]
WorldSizeFile = Annotated[Optional[Path], typer.Option(
    "--world-size-file", help="Where to write the total NPU count "
    "(env ASCEND_NODE_WORLD_SIZE_FILE; /world_size)",
    show_default=False)]
StateDir = Annotated[Optional[Path], typer.Option(
    "--state-dir", help="This container's local directory: table copy, env script, status "
    "(env ASCEND_NODE_STATE_DIR; /run/ascend-node)", show_default=False)]
Devices = Annotated[Optional[str], typer.Option(
    "--devices", help="Physical NPU ids, e.g. 0-7 or 0,1,2,3 (env ASCEND_NODE_DEVICES)",
    show_default=False)]
HccnTool = Annotated[Optional[str], typer.Option(
    "--hccn-tool", help="hccn_tool path (env ASCEND_NODE_HCCN_TOOL)", show_default=False)]
FileOwner = Annotated[Optional[str], typer.Option(
    "--file-owner", help="UID[:GID] owning the local table and config "
    "(env ASCEND_NODE_FILE_OWNER)", show_default=False)]
AllowUneven = Annotated[bool, typer.Option(
    "--allow-uneven-devices", help="Allow different NPU counts per node (training) "
    "(env ASCEND_NODE_ALLOW_UNEVEN_DEVICES)")]
MasterPort = Annotated[Optional[int], typer.Option(
    "--master-port", help="Port for launchers (env ASCEND_NODE_MASTER_PORT, MASTER_PORT; "
    "msrun 8118, torch 29500)",
    show_default=False)]
TableVersion = Annotated[Optional[str], typer.Option(
    "--table-version", help="auto | 1.0 | 1.2: rank-table format; auto = 1.2 when every node "
    "reports an A3 super pod (env ASCEND_NODE_TABLE_VERSION; auto)", show_default=False)]
TableSource = Annotated[Optional[str], typer.Option(
    "--table-source", help="auto | volume | mindcluster: meet peers on the shared volume or "
    "take MindCluster's hccl.json; auto = the file when it exists (env "
    "ASCEND_NODE_TABLE_SOURCE; auto)", show_default=False)]
HcclJson = Annotated[Optional[Path], typer.Option(
    "--hccl-json", help="MindCluster's rank table (env ASCEND_NODE_HCCL_JSON; "
    "/user/serverid/devindex/config/hccl.json)", show_default=False)]
Preflight = Annotated[Optional[str], typer.Option(
    "--preflight", help="strict | warn | off: device health at the rendezvous, pings before "
    "exec (env ASCEND_NODE_PREFLIGHT; strict, warn with a training launcher)",
    show_default=False)]
RendezvousKeyFile = Annotated[Optional[Path], typer.Option(
    "--rendezvous-key-file", help="File holding the job's rendezvous key, e.g. a mounted "
    "Secret; documents on the shared volume are then signed and checked (env "
    "ASCEND_NODE_RENDEZVOUS_KEY_FILE; or the key itself in ASCEND_NODE_RENDEZVOUS_KEY)",
    show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print a JSON document on stdout")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v",
                                       help="Say where every setting came from")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks (env ASCEND_NODE_DEBUG=1)")]
