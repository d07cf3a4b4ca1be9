"""The option types several commands share, each with its help and environment twin.

No `from __future__ import annotations` here (see `app`).
"""


import re
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer


# The option types: each kind of value parsed (and refused) one way, whichever command
# takes it. A refusal is the contract's usage error (exit 2, one line naming the flag and
# the value, a hint); `cli.app.Commands` reports it.
def seconds(flag: str, zero_ok: bool = False, example: str = "60") -> Callable[[Any], float]:
    """A finite number of seconds > 0 (>= 0 with `zero_ok`): not `inf`, `nan` or `-1`."""
    def parse(text: Any) -> float:
        from ascend_node.errors import UsageError
        from ascend_node.quantities import parse_seconds, seconds_rule

        try:
            return parse_seconds(str(text), zero_ok)
        except ValueError:
            raise UsageError(f"{flag} {text} is not {seconds_rule(zero_ok)}",
                             f"e.g. {flag} {example}") from None
    return parse


def integer(flag: str, example: str, lo: Optional[int] = None, hi: Optional[int] = None
            ) -> Callable[[Any], int]:
    """A whole number written in digits (`-` allowed), within [lo, hi] when given. Not
    `1e9`, `2.0` or `0x10`: click's own refusal ("'1e9' is not a valid int.") said
    neither what the option takes nor a value that works. A range that depends on other
    options (`manifest --nodes` per kind) is checked where the options meet."""
    def parse(text: Any) -> int:
        from ascend_node.errors import UsageError

        raw = str(text).strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,20}", raw):
            rule = (f"an integer from {lo} to {hi}" if lo is not None and hi is not None
                    else "an integer, in digits")
            raise UsageError(f"{flag} {str(text)!r} is not an integer",
                             f"{flag} takes {rule}, e.g. {flag} {example}")
        value = int(raw)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = (f"from {lo} to {hi}" if lo is not None and hi is not None else
                    f"of at least {lo}" if lo is not None else f"of at most {hi}")
            raise UsageError(f"{flag} {value} is out of range",
                             f"{flag} takes an integer {span}, e.g. {flag} {example}")
        return value
    return parse


_ATTEMPT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")


def attempt_id(text: Any) -> str:
    """An attempt id as the rendezvous writes them (`1767225600-abcd1234`), or `none`: a
    name inside the run's directory, never a path (`../../etc`)."""
    from ascend_node.errors import UsageError

    value = str(text)
    if not _ATTEMPT.match(value) or ".." in value:
        raise UsageError(f"--attempt {value!r} is not an attempt id",
                         "attempt ids look like 1767225600-abcd1234 (or none); leave "
                         "--attempt out for the current one")
    return value


SharedDir = Annotated[Optional[Path], typer.Option(
    "--shared-dir", help="Shared volume of the run (env ASCEND_NODE_SHARED_DIR, else $MODEL_PATH)",
    show_default=False)]
RunId = Annotated[Optional[str], typer.Option(
    "--run-id", help="Run id shared by the job's pods (env ASCEND_NODE_RUN_ID, else "
    "KUBEFLOW_RUN_ID, KFJ_RUN_ID, else the Volcano job name from VC_*_HOSTS)",
    show_default=False)]
Timeout = Annotated[Optional[float], typer.Option(
    "--timeout", help="Seconds to wait for peers, from start (env ASCEND_NODE_TIMEOUT; 900)",
    show_default=False, parser=seconds("--timeout", example="900"), metavar="SECONDS")]
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
    show_default=False, parser=integer("--master-port", "8118"), metavar="INTEGER")]
TableVersion = Annotated[Optional[str], typer.Option(
    "--table-version", metavar="auto|1.0|1.2",
    help="auto | 1.0 | 1.2: rank-table format; auto = 1.2 when every node "
    "reports an A3 super pod (env ASCEND_NODE_TABLE_VERSION; auto)", show_default=False)]
TableSource = Annotated[Optional[str], typer.Option(
    "--table-source", metavar="auto|volume|mindcluster",
    help="auto | volume | mindcluster: meet peers on the shared volume or "
    "take MindCluster's hccl.json; auto = the file when it exists (env "
    "ASCEND_NODE_TABLE_SOURCE; auto)", show_default=False)]
RendezvousOpt = Annotated[Optional[str], typer.Option(
    "--rendezvous", metavar="volume|kube",
    help="volume | kube: meet the peers on the shared volume, or through the Kubernetes "
    "API with the pod's ServiceAccount (no shared directory needed) (env "
    "ASCEND_NODE_RENDEZVOUS; volume)", show_default=False)]
HcclJson = Annotated[Optional[Path], typer.Option(
    "--hccl-json", help="MindCluster's rank table (env ASCEND_NODE_HCCL_JSON; "
    "/user/serverid/devindex/config/hccl.json)", show_default=False)]
Preflight = Annotated[Optional[str], typer.Option(
    "--preflight", metavar="strict|warn|off",
    help="strict | warn | off: device health at the rendezvous, pings before "
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
