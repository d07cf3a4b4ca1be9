"""`ascend-node boot` end to end: N simulated pods exec a fake MindIE daemon."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_node.sim.cluster import SimSpec, launch, prepare
from tests.cluster_helpers import codes, explain

pytestmark = pytest.mark.multiprocess


def boot_nodes(tmp, nodes=2, devices=4, **env):
    spec = SimSpec(nodes=nodes, devices=devices, run_id="b", timeout=30, boot=True,
                   extra_env=env)
    shared = tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    return prepare(spec, tmp / "work", shared)


def report(node):
    text = (node.state_dir.parent / "daemon-report.txt").read_text()
    pid = int(text.splitlines()[0].split("=", 1)[1])
    env = dict(line.split("=", 1) for line in text.splitlines()[1:] if "=" in line)
    return pid, env


def start_all(nodes):
    from ascend_node.sim.fake_tools import write_node_data

    procs = []
    for node in nodes:
        write_node_data(node.data_dir, node.devices)
        procs.append(subprocess.Popen(node.argv, env=node.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=60) for p in procs]
    return procs, outs


def test_boot_execs_the_daemon_in_place_with_the_table_environment(tmp_path):
    nodes = boot_nodes(tmp_path)
    procs, outs = start_all(nodes)
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err.decode()
        assert b"Daemon start success!" in out
    table = json.loads((tmp_path / "shared" / "ranktable-b.json").read_text())
    for node, proc in zip(nodes, procs):
        pid, env = report(node)
        assert pid == proc.pid, "the daemon must replace the agent (exec), not be its child"
        assert env["MIES_CONTAINER_IP"] == node.env["K8S_POD_IP"]
        assert env["MASTER_IP"] == table["server_list"][0]["container_ip"]
        assert env["WORLD_SIZE"] == "8"
        assert env["RANK_TABLE_FILE"] == env["RANKTABLEFILE"] == str(
            node.state_dir / "ranktable.json")
        assert env["ASCEND_TOOLKIT_HOME"].endswith("/Ascend/cann/latest")  # from set_env.sh
        config = json.loads((node.state_dir.parent / "config.json").read_text())
        assert config["BackendConfig"]["multiNodesInferEnabled"] is True
        assert config["BackendConfig"]["interNodeTLSEnabled"] is False
        assert config["BackendConfig"]["npuDeviceIds"] == [[0, 1, 2, 3]]
        assert (node.state_dir.parent / "config.json").stat().st_mode & 0o777 == 0o640
        status = json.loads((node.state_dir / "status.json").read_text())
        assert status["state"] == "done"
        env_json = json.loads((node.state_dir / "env.json").read_text())
        assert env_json["schema_version"] == 1
        assert env_json["env"]["MIES_CONTAINER_IP"] == node.env["K8S_POD_IP"]


def test_boot_again_repeats_nothing_and_reaches_the_same_result(tmp_path):
    nodes = boot_nodes(tmp_path)
    first = launch(nodes, 30)
    assert codes(first) == [0, 0], explain(first)
    config_before = [(n.state_dir.parent / "config.json").stat().st_mtime_ns for n in nodes]
    table_before = (nodes[1].state_dir / "ranktable.json").read_bytes()
    again = launch([nodes[1]], 30)
    assert codes(again) == [0], explain(again)
    assert "already patched" in again[0].stderr
    assert "opened attempt" not in again[0].stderr
    assert (nodes[1].state_dir.parent / "config.json").stat().st_mtime_ns == config_before[1]
    assert (nodes[1].state_dir / "ranktable.json").read_bytes() == table_before


def test_one_node_mindie_keeps_multi_node_off_and_exports_no_rank_table(tmp_path):
    nodes = boot_nodes(tmp_path, nodes=1)
    results = launch(nodes, 30)
    assert codes(results) == [0], explain(results)
    _, env = report(nodes[0])
    assert "RANK_TABLE_FILE" not in env and "RANKTABLEFILE" not in env
    assert env["WORLD_SIZE"] == "4"
    config = json.loads((nodes[0].state_dir.parent / "config.json").read_text())
    assert config["BackendConfig"]["multiNodesInferEnabled"] is False


@pytest.mark.parametrize(("command", "code"), [
    (["/nonexistent/server"], 127),
    (["no-such-command-anywhere"], 127),
])
def test_missing_command_exits_127(tmp_path, command, code):
    nodes = boot_nodes(tmp_path, nodes=1)
    nodes[0].argv = [sys.executable, "-m", "ascend_node", "boot", "--", *command]
    results = launch(nodes, 30)
    assert codes(results) == [code], explain(results)
    assert command[0] in results[0].last_error or command[0] in results[0].stderr
    status = json.loads((nodes[0].state_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == code


def test_not_executable_command_exits_126(tmp_path):
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    nodes = boot_nodes(tmp_path, nodes=1)
    nodes[0].argv = [sys.executable, "-m", "ascend_node", "boot", "--", str(script)]
    results = launch(nodes, 30)
    assert codes(results) == [126], explain(results)


def msrun_nodes(tmp_path, with_mindspore):
    """Two pods booting into a recording `msrun`; `python` on their PATH finds a
    `mindspore` package or not (tests/test_launchers_real.py runs the real one)."""
    recorder = tmp_path / "bin" / "msrun"
    recorder.parent.mkdir()
    out = tmp_path / "msrun-args"
    recorder.write_text(f'#!/bin/sh\necho "$@" > {out}.$MIES_CONTAINER_IP\n')
    recorder.chmod(0o755)
    python = recorder.parent / "python"
    python.symlink_to(sys.executable)
    site = tmp_path / "site"
    if with_mindspore:
        (site / "mindspore").mkdir(parents=True)
        (site / "mindspore" / "__init__.py").write_text("")
    nodes = boot_nodes(tmp_path, nodes=2, ASCEND_NODE_LAUNCHER="msrun")
    for node in nodes:
        node.env["PATH"] = f"{recorder.parent}:{node.env['PATH']}"
        node.env["PYTHONPATH"] = str(site)
        node.argv = [sys.executable, "-m", "ascend_node", "boot", "--", "train.py", "--x"]
    return nodes


def test_msrun_launcher_gets_its_flags_from_the_table(tmp_path):
    nodes = msrun_nodes(tmp_path, with_mindspore=True)
    results = launch(nodes, 30)
    assert codes(results) == [0, 0], explain(results)
    args = (tmp_path / f"msrun-args.{nodes[1].env['K8S_POD_IP']}").read_text().split()
    assert "--worker_num=8" in args and "--local_worker_num=4" in args
    assert f"--master_addr={nodes[0].env['K8S_POD_IP']}" in args
    assert "--node_rank=1" in args
    # the agent's --timeout is 30 s: msrun's cluster wait is what is left, at least 30 s
    assert "--cluster_time_out=30" in args
    assert args[-3:] == ["--join=True", "train.py", "--x"]


def test_msrun_with_a_python_on_path_that_lacks_mindspore_exits_127_before_exec(tmp_path):
    nodes = msrun_nodes(tmp_path, with_mindspore=False)
    results = launch(nodes, 30)
    assert codes(results) == [127, 127], explain(results)
    python = tmp_path / "bin" / "python"
    for result in results:
        assert (f"ascend-node: error: msrun starts its workers with `python` from PATH, "
                f"and {python} cannot import mindspore (PATH={tmp_path / 'bin'}:") \
            in result.stderr
        status = json.loads((result.state_dir / "status.json").read_text())
        assert status["state"] == "failed" and status["exit_code"] == 127
    assert not list(tmp_path.glob("msrun-args.*")), "msrun must not have started"


@pytest.mark.parametrize(("given", "expected"), [(None, "timeout=30"),
                                                 ("timeout=1800", "timeout=1800")])
def test_torchrun_waits_the_agents_time_left_unless_the_user_chose(tmp_path, given, expected):
    """PET_RDZV_CONF is torchrun's default for --rdzv_conf; the agent's timeout is 30 s."""
    recorder = tmp_path / "bin" / "torchrun"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\necho "$PET_RDZV_CONF" > {tmp_path}/rdzv.$MIES_CONTAINER_IP\n')
    recorder.chmod(0o755)
    nodes = boot_nodes(tmp_path, nodes=2)
    for node in nodes:
        node.env["PATH"] = f"{recorder.parent}:{node.env['PATH']}"
        if given:
            node.env["PET_RDZV_CONF"] = given
        node.argv = [sys.executable, "-m", "ascend_node", "boot", "--launcher", "torch", "--",
                     "torchrun", "train.py"]
    results = launch(nodes, 30)
    assert codes(results) == [0, 0], explain(results)
    for node in nodes:
        assert (tmp_path / f"rdzv.{node.env['K8S_POD_IP']}").read_text().strip() == expected
