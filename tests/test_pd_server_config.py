"""A PD server's config.json beyond a plain multi-node one (ascend_node.pd.server_config)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ascend_node.errors import ConfigError
from ascend_node.pd.server_config import patch_pd_server, pd_server_env

STOCK = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "mindie" /
                    "config.json").read_text())


def test_a_stock_config_is_switched_to_pd_mode_and_nothing_else() -> None:
    patched, changes = patch_pd_server(STOCK)
    assert changes == ["ServerConfig.inferMode=dmi"]
    assert patched["ServerConfig"]["inferMode"] == "dmi"
    assert STOCK["ServerConfig"]["inferMode"] == "standard"  # the input is untouched
    rest = copy.deepcopy(patched)
    rest["ServerConfig"]["inferMode"] = "standard"
    assert rest == STOCK
    assert patch_pd_server(patched)[1] == []  # already patched: no change


def test_a_distributed_dp_instance_is_refused_naming_what_to_run() -> None:
    config = copy.deepcopy(STOCK)
    config["BackendConfig"]["distDPServerEnabled"] = True
    with pytest.raises(ConfigError) as err:
        patch_pd_server(config)
    assert "distDPServerEnabled is true" in err.value.cause
    assert "node_manager" in err.value.hint


def test_a_config_without_its_server_section() -> None:
    with pytest.raises(ConfigError, match="no ServerConfig"):
        patch_pd_server({"BackendConfig": {}})


def test_the_management_address_is_the_pod_ip() -> None:
    assert pd_server_env("172.16.2.10") == {"MIES_CONTAINER_MANAGEMENT_IP": "172.16.2.10"}
