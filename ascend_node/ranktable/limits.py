"""The numeric limits of HCCL's and MindIE's rank-table rules, with where each comes from."""

from __future__ import annotations

from typing import Literal

Target = Literal["mindie", "hccl"]
"""Whose rules to apply: "hccl" alone, or "mindie" (MindIE's own on top of HCCL's)."""

SUPPORTED_VERSIONS = ("1.0", "1.2")
# HCCL: server_id is at most 64 characters (rank_table_config docs).
HCCL_MAX_SERVER_ID = 64
# MindIE reads every rank-table string with a 256-character limit.
MINDIE_MAX_STRING = 256
MINDIE_SERVER_COUNT = (2, 60)
MINDIE_DEVICES_PER_SERVER = (1, 32)
MINDIE_MAX_DEVICE_ID = 63
MINDIE_MAX_RANK_ID = 511
