"""A PD server pod's MindIE `config.json` and environment, beyond a plain multi-node one (pure).

What changes for a prefill or decode instance (MindIE-Motor's
`docs/zh/.../pd_separation_service_deployment.md` table 3; its
`boot_helper/update_mindie_server_config.py` and boot.sh; MindIE-LLM
`src/config_manager/server_config.cpp` 618-636):

- `ServerConfig.inferMode` = `dmi` (PD mode; the shipped file says `standard`);
- the multi-node switch, device ids and world size are those of the pod's *instance*, which
  the ordinary patch already writes from the instance's table;
- `MIES_CONTAINER_MANAGEMENT_IP` = the pod IP beside `MIES_CONTAINER_IP` (the controller
  talks to each server's management port on its `server_ip`);
- a server never learns P or D at boot in the centralized case: the controller POSTs the
  role to its management port. A distributed-DP instance (`distDPServerEnabled` true) is
  started by MindIE-Motor's node manager with one config per DP rank: not generated here —
  `pd_server_problems` refuses it, naming what to run instead.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ascend_node.errors import ConfigError

INFER_MODE = "dmi"


def patch_pd_server(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(patched copy, changes) for a centralized P or D instance's server."""
    server = config.get("ServerConfig")
    if not isinstance(server, Mapping):
        raise ConfigError("MindIE config has no ServerConfig object",
                          "start from MindIE's default config.json")
    backend = config.get("BackendConfig")
    if isinstance(backend, Mapping) and backend.get("distDPServerEnabled") is True:
        raise ConfigError(
            "BackendConfig.distDPServerEnabled is true: a distributed-DP instance is started "
            "by MindIE-Motor's node manager with one config per DP rank, which ascend-node "
            "does not generate",
            "run MindIE-Motor's node_manager for this instance, or set distDPServerEnabled "
            "false and deploy_server \"0\" (centralized) (docs/pd.md)")
    patched = copy.deepcopy(dict(config))
    changes: list[str] = []
    if patched["ServerConfig"].get("inferMode") != INFER_MODE:
        patched["ServerConfig"]["inferMode"] = INFER_MODE
        changes.append(f"ServerConfig.inferMode={INFER_MODE}")
    return patched, changes


def pd_server_env(pod_ip: str) -> dict[str, str]:
    """What a PD server's daemon gets beyond a plain multi-node server's environment."""
    return {"MIES_CONTAINER_MANAGEMENT_IP": pod_ip}
