"""`boot` with MindIE's shipped config.json: one line and exit 1 before exec, and the
remedies (`--no-https` / `ASCEND_NODE_HTTPS=0` and `MODEL_PATH`, or the certificates
mounted) exec the (fake) daemon. One simulated pod, the real agent, real files."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from ascend_node.sim.cluster import SimNode, SimSpec, launch, prepare
from tests.cluster_helpers import codes, explain

pytestmark = pytest.mark.multiprocess

SHIPPED = Path(__file__).parents[1] / "fixtures" / "mindie" / "config.json"
SHIPPED_WEIGHTS = "/data/atb_testdata/weights/llama1-65b-safetensors"


def shipped_node(tmp: Path, **env: str) -> SimNode:
    """A one-node boot whose config.json is MindIE's shipped file, byte for byte, and whose
    MindIE install (MIES_INSTALL_PATH) holds no certificates."""
    spec = SimSpec(nodes=1, devices=4, run_id="s", timeout=30, boot=True, extra_env=env)
    shared = tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    node = prepare(spec, tmp / "work", shared)[0]
    shutil.copyfile(SHIPPED, node.state_dir.parent / "config.json")
    install = tmp / "mindie-service"
    install.mkdir(exist_ok=True)
    node.env["MIES_INSTALL_PATH"] = str(install)
    return node


def daemon_ran(node: SimNode) -> bool:
    return (node.state_dir.parent / "daemon-report.txt").exists()


def test_shipped_config_stops_boot_with_one_line_and_execs_nothing(tmp_path: Path) -> None:
    node = shipped_node(tmp_path)
    result = launch([node], 30)[0]
    assert result.exit_code == 1, explain([result])
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("ascend-node: error:")]
    assert len(errors) == 1, result.stderr
    cert = tmp_path / "mindie-service" / "security" / "certs" / "server.pem"
    assert errors[0] == (
        "ascend-node: error: MindIE would refuse to start: ServerConfig.httpsEnabled is true "
        f"but ServerConfig.tlsCert file {cert} does not exist (and 15 more TLS paths); "
        "1 more problem(s): BackendConfig.ModelDeployConfig.ModelConfig[0].modelWeightPath")
    hints = [ln for ln in result.stderr.splitlines() if ln.startswith("  hint:")]
    assert len(hints) == 1
    assert "--no-https (or ASCEND_NODE_HTTPS=0)" in hints[0] and "MODEL_PATH" in hints[0]
    assert "Traceback" not in result.stderr
    assert not daemon_ran(node) and "Daemon start success!" not in result.stdout
    status = json.loads((node.state_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 1
    assert "httpsEnabled" in status["message"]


def test_no_https_and_model_path_exec_the_daemon(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"model_type": "llama"}\n')
    node = shipped_node(tmp_path, ASCEND_NODE_HTTPS="0", MODEL_PATH=str(weights))
    result = launch([node], 30)[0]
    assert result.exit_code == 0, explain([result])
    assert daemon_ran(node) and "Daemon start success!" in result.stdout
    config = json.loads((node.state_dir.parent / "config.json").read_text())
    assert config["ServerConfig"]["httpsEnabled"] is False
    assert config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0][
        "modelWeightPath"] == str(weights)


def test_the_flag_alone_leaves_the_weights_as_the_one_problem(tmp_path: Path) -> None:
    node = shipped_node(tmp_path)
    node.argv = [sys.executable, "-m", "ascend_node", "boot", "--no-https", "--",
                 *node.argv[node.argv.index("--") + 1:]]
    result = launch([node], 30)[0]
    assert result.exit_code == 1, explain([result])
    assert result.stderr.count("ascend-node: error:") == 1
    assert (f"ascend-node: error: MindIE would refuse to start: "
            f"BackendConfig.ModelDeployConfig.ModelConfig[0].modelWeightPath {SHIPPED_WEIGHTS}"
            " does not exist") in result.stderr
    assert not daemon_ran(node)


def test_mounted_certificates_keep_https_on_and_exec_the_daemon(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text("{}\n")
    node = shipped_node(tmp_path, MODEL_PATH=str(weights))
    shipped = json.loads(SHIPPED.read_text())["ServerConfig"]
    home = tmp_path / "mindie-service"
    files = [shipped[k] for k in ("tlsCert", "tlsPk", "managementTlsCert", "managementTlsPk",
                                  "metricsTlsCert", "metricsTlsPk")]
    files += [shipped["tlsCaPath"] + n for k in ("tlsCaFile", "managementTlsCaFile",
                                                 "metricsTlsCaFile") for n in shipped[k]]
    for prefix in ("", "management", "metrics"):
        key = f"{prefix}TlsCrl" if prefix else "tlsCrl"
        files += [shipped[key + "Path"] + n for n in shipped[key + "Files"]]
    for rel in files:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("-----BEGIN CERTIFICATE-----\n")
        path.chmod(0o600)
    result = launch([node], 30)[0]
    assert result.exit_code == 0, explain([result])
    assert daemon_ran(node)
    config = json.loads((node.state_dir.parent / "config.json").read_text())
    assert config["ServerConfig"]["httpsEnabled"] is True
    assert codes([result]) == [0]


@pytest.mark.parametrize(("env", "https", "certs"), [
    ({}, None, False),
    ({"ASCEND_NODE_HTTPS": "0"}, False, False),
    ({"ASCEND_NODE_HTTPS": " Off "}, False, False),
    ({"ASCEND_NODE_HTTPS": "true", "ASCEND_NODE_TLS_CERTS": "1"}, True, True),
    ({"ASCEND_NODE_HTTPS": ""}, None, False),
])
def test_https_and_tls_certs_variables(env: dict[str, str], https: object,
                                       certs: bool) -> None:
    from ascend_node.chain.boot import boot_options_from_env

    opts = boot_options_from_env(env, None, [], None, None, None)
    assert (opts.https, opts.tls_certs) == (https, certs)
    assert boot_options_from_env(env, None, [], True, None, None).https is True  # flag wins


@pytest.mark.parametrize("name", ["ASCEND_NODE_HTTPS", "ASCEND_NODE_TLS_CERTS"])
def test_a_misspelt_boolean_is_named_not_read_as_no(name: str) -> None:
    from ascend_node.chain.boot import boot_options_from_env
    from ascend_node.errors import ConfigError

    with pytest.raises(ConfigError, match=f"{name}='of' is not a boolean") as info:
        boot_options_from_env({name: "of"}, None, [], None, None, None)
    assert f"fix or unset {name}" in info.value.hint
