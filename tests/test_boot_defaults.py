"""`boot` with what `ascend-node manifest` renders (issue 26): MindIE's shipped config.json
serves on the manifest's defaults, with the model in a sub-directory of the shared PVC; the
boot-only options refuse bad values before the rendezvous (flag: exit 2, environment: 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ascend_node.chain.boot import boot_options_from_env
from ascend_node.cli import app
from ascend_node.errors import ConfigError, UsageError
from ascend_node.handoff.launchers import msrun_launch
from ascend_node.jobspec.job import ManifestParams, render_job
from ascend_node.sim.cluster import launch
from tests.cluster_helpers import explain
from tests.test_mindie_startup_boot import daemon_ran, shipped_node

# What a pod gets from the kubelet and Volcano, not from the manifest's literal values.
NOT_LITERAL = ("ROLE", "ASCEND_NODE_RUN_ID", "ASCEND_NODE_TIMEOUT", "MODEL_PATH")


def rendered_env(**kw: Any) -> dict[str, str]:
    job = render_job(ManifestParams(kind="mindie", name="j", nodes=1, image="i", pvc="p",
                                    run_id="s", **kw))
    (c,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"] if "value" in e and
            e["name"] not in NOT_LITERAL}


@pytest.mark.multiprocess
@pytest.mark.parametrize("sub", [None, "models/qwen2-7b"])
def test_shipped_config_serves_with_the_manifests_defaults(tmp_path: Path, sub: str | None
                                                           ) -> None:
    shared = tmp_path / "shared"
    weights = shared / sub if sub else shared
    weights.mkdir(parents=True)
    (weights / "config.json").write_text('{"model_type": "qwen2"}\n')
    extra = {"model_path": str(shared)}
    if sub:
        extra.update(model_dir=str(weights), model_name="qwen2-7b")
    env = rendered_env(**extra)
    assert env["ASCEND_NODE_HTTPS"] == "0"  # the default: no flag given
    node = shipped_node(tmp_path, **env)
    node.env["MODEL_PATH"] = str(shared)
    (result,) = launch([node], 30)
    assert result.exit_code == 0, explain([result])
    assert daemon_ran(node) and "Daemon start success!" in result.stdout
    config = json.loads((node.state_dir.parent / "config.json").read_text())
    model = config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert config["ServerConfig"]["httpsEnabled"] is False
    assert model["modelWeightPath"] == str(weights)
    assert model["modelName"] == ("qwen2-7b" if sub else "llama_65b")  # kept when not given
    # the shared directory stayed the PVC root: the table was published there
    assert list(shared.glob("ranktable-*.json"))


@pytest.mark.multiprocess
def test_without_a_choice_boot_still_names_the_remedy(tmp_path: Path) -> None:
    """ASCEND_NODE_HTTPS unset (a hand-written pod): MindIE's shipped https is kept, so
    boot refuses before exec, naming --no-https / ASCEND_NODE_HTTPS=0 (docs/deploy.md)."""
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "config.json").write_text("{}\n")
    node = shipped_node(tmp_path, MODEL_PATH=str(weights))
    (result,) = launch([node], 30)
    assert result.exit_code == 1, explain([result])
    assert "ASCEND_NODE_HTTPS=0" in result.stderr and not daemon_ran(node)


@pytest.mark.parametrize(("kw", "env", "error", "named"), [
    ({"model_name": "bad name"}, {}, UsageError, "--model-name"),
    ({}, {"MODEL_NAME": "-x"}, ConfigError, "MODEL_NAME"),
    ({"model_dir": "relative/dir"}, {}, UsageError, "--model-dir"),
    ({}, {"ASCEND_NODE_MODEL_DIR": "rel"}, ConfigError, "ASCEND_NODE_MODEL_DIR"),
    ({"launcher": "msrun", "launcher_args": "--worker_num=4"}, {}, UsageError,
     "--worker_num"),
    ({"launcher": "msrun", "launcher_args": "bind_core"}, {}, UsageError, "--name=value"),
    ({"launcher": "msrun"}, {"ASCEND_NODE_LAUNCHER_ARGS": "--join=False"}, ConfigError,
     "ASCEND_NODE_LAUNCHER_ARGS"),
    ({"launcher": "torch", "launcher_args": "--log_dir=/x"}, {}, UsageError, "msrun"),
    ({"launcher": "msrun", "launcher_args": "'--log_dir=/x"}, {}, UsageError, "shell words"),
])
def test_boot_options_refuse_bad_values(kw: dict[str, Any], env: dict[str, str],
                                        error: type[Exception], named: str) -> None:
    args: dict[str, Any] = {"launcher": None, "command": ["t.py"], "https": None,
                            "model_name": None, "model_weight_path": None, **kw}
    with pytest.raises(error, match=named):
        boot_options_from_env(env, **args)


def test_a_training_images_own_model_name_variable_is_not_mindies() -> None:
    opts = boot_options_from_env({"MODEL_NAME": "llama 2 (7b)"}, "msrun", ["t.py"], None,
                                 None, None)
    assert opts.launcher == "msrun"


def test_model_dir_is_the_weight_path_and_model_path_the_fallback() -> None:
    def weights(env: dict[str, str], model_dir: str | None = None) -> str | None:
        return boot_options_from_env(env, None, [], None, None, None,
                                     model_dir).model_weight_path

    assert weights({"MODEL_PATH": "/mnt/model"}) == "/mnt/model"
    assert weights({"MODEL_PATH": "/mnt/model", "ASCEND_NODE_MODEL_DIR": "/mnt/model/q"}) \
        == "/mnt/model/q"
    assert weights({"ASCEND_NODE_MODEL_DIR": "/mnt/model/q"}, "/mnt/w") == "/mnt/w"


def test_a_bad_boot_flag_exits_2_before_anything_else(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["boot", "--model-name", "bad name", "--state-dir",
                                      str(tmp_path / "s"), "--", "x"],
                                env={"ASCEND_NODE_SHARED_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "--model-name 'bad name'" in result.output


def test_msrun_gets_its_own_options_before_join() -> None:
    table = {"version": "1.0", "server_count": "1", "status": "completed", "server_list": [
        {"server_id": "10.0.0.1", "container_ip": "10.0.0.1", "device": [
            {"device_id": "0", "device_ip": "1.1.1.1", "rank_id": "0"}]}]}
    launch_ = msrun_launch(table, "10.0.0.1", ["run_mindformer.py"], 8118, 100,
                           ["--log_dir=/x", "--bind_core=True"])
    argv = launch_.argv
    assert argv[argv.index("--log_dir=/x") + 1] == "--bind_core=True"
    assert argv.index("--bind_core=True") < argv.index("--join=True") < argv.index(
        "run_mindformer.py")


@pytest.mark.multiprocess
def test_the_rendered_training_command_reaches_msrun_with_its_options(tmp_path: Path) -> None:
    """The words `manifest --kind training` renders, run by the real `boot` on two pods
    into a recording msrun: the agent's flags from the table, then msrun's own options."""
    from tests.test_boot_e2e import msrun_nodes

    job = render_job(ManifestParams(kind="training", name="t", nodes=2, image="i", pvc="p",
                                    run_id="r", msrun_log_dir="/mnt/model/log",
                                    bind_core=True, command=["train.py", "--x"]))
    (c,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert c["command"][:2] == ["tini", "--"]
    nodes = msrun_nodes(tmp_path, with_mindspore=True)
    for node in nodes:
        node.env.pop("ASCEND_NODE_LAUNCHER")  # the rendered command names it
        node.argv = [node.argv[0], "-m", "ascend_node", *c["command"][3:], *c["args"]]
    results = launch(nodes, 30)
    assert [r.exit_code for r in results] == [0, 0], explain(results)
    args = (tmp_path / f"msrun-args.{nodes[1].env['K8S_POD_IP']}").read_text().split()
    assert "--node_rank=1" in args and "--worker_num=8" in args
    assert args[-5:] == ["--log_dir=/mnt/model/log", "--bind_core=True", "--join=True",
                         "train.py", "--x"]
    # pre-flight is `warn` for a training launcher (docs/preflight.md), as the agent recorded
    for node in nodes:
        phases = [json.loads(line) for line in
                  (node.state_dir / "events.jsonl").read_text().splitlines()]
        (pre,) = [e for e in phases if e.get("phase") == "preflight"]
        assert pre.get("policy") == "warn", pre
