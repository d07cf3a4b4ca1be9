"""HCCL rank table: build it, render it byte-identically, and lint it.

Why one package does all three: the builder and the validator encode the same rules (HCCL:
hicann/hccl docs/zh/user_guide/.../rank_table_config_a2.md, _a3.md; MindIE: MindIE-LLM
src/config_manager/ranktable_config.cpp, atb_llm/utils/env.py @8b4871a). Every table
`build_rank_table` makes must pass `validate_rank_table`, and the tests hold the two to
that.

Modules: `build` (the table from the membership), `version` (v1.0 or v1.2), `render` (its
canonical text), `readers` (master IP, world size, this node's entry), `validate` (document
rules, with the decisions the sources leave open; `servers`, `superpods`, `limits`, `values`
and `problems` hold its parts), `filecheck` (the file rules MindIE applies before parsing).
Import from here: the package is the public interface, the module split is not.
"""

from __future__ import annotations

from ascend_node.ranktable.build import DeviceEntry, ServerEntry, build_rank_table
from ascend_node.ranktable.filecheck import (
    MAX_FILE_SIZE,
    MAX_PATH_LENGTH,
    parse_table_json,
    validate_file,
    validate_text,
)
from ascend_node.ranktable.limits import (
    HCCL_MAX_SERVER_ID,
    MINDIE_DEVICES_PER_SERVER,
    MINDIE_MAX_DEVICE_ID,
    MINDIE_MAX_RANK_ID,
    MINDIE_MAX_STRING,
    MINDIE_SERVER_COUNT,
    SUPPORTED_VERSIONS,
    Target,
)
from ascend_node.ranktable.problems import Problem
from ascend_node.ranktable.readers import local_server, master_ip, world_size
from ascend_node.ranktable.render import render_rank_table
from ascend_node.ranktable.validate import validate_rank_table
from ascend_node.ranktable.values import IPAddress
from ascend_node.ranktable.version import (
    REQUESTED_VERSIONS,
    NodeSuperPodReport,
    RequestedVersion,
    TableVersion,
    VersionConflict,
    choose_table_version,
)

__all__ = [
    "HCCL_MAX_SERVER_ID",
    "MAX_FILE_SIZE",
    "MAX_PATH_LENGTH",
    "MINDIE_DEVICES_PER_SERVER",
    "MINDIE_MAX_DEVICE_ID",
    "MINDIE_MAX_RANK_ID",
    "MINDIE_MAX_STRING",
    "MINDIE_SERVER_COUNT",
    "REQUESTED_VERSIONS",
    "SUPPORTED_VERSIONS",
    "DeviceEntry",
    "IPAddress",
    "NodeSuperPodReport",
    "Problem",
    "RequestedVersion",
    "ServerEntry",
    "TableVersion",
    "Target",
    "VersionConflict",
    "build_rank_table",
    "choose_table_version",
    "local_server",
    "master_ip",
    "parse_table_json",
    "render_rank_table",
    "validate_file",
    "validate_rank_table",
    "validate_text",
    "world_size",
]
