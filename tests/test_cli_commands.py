"""CLI contract of validate, status, env, clean and manifest: exit codes and messages."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ascend_node.cli import app
from ascend_node.handoff.outputs import StatusDoc, write_env, write_status
from tests.cli_helpers import cli_runner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = cli_runner()


def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env or {}, catch_exceptions=False)


# ------------------------------------------------------------------ validate


def test_validate_accepts_mindies_own_table(tmp_path):
    table = tmp_path / "rt.json"
    shutil.copy(FIXTURES / "ranktables" / "ranktable-2x8.json", table)
    table.chmod(0o640)
    result = invoke("validate", str(table))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "valid for mindie" in result.stdout


def test_validate_lists_every_problem_with_its_json_path(tmp_path):
    doc = json.loads((FIXTURES / "ranktables" / "ranktable-2x8.json").read_text())
    doc["server_list"][1]["device"][3]["device_ip"] = "-1"
    doc["server_count"] = "3"
    table = tmp_path / "rt.json"
    table.write_text(json.dumps(doc))
    table.chmod(0o644)
    result = invoke("validate", str(table), "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["schema_version"] == 1 and out["valid"] is False
    paths = {p["path"] for p in out["problems"]}
    assert "$.server_list[1].device[3].device_ip" in paths
    assert "$.server_count" in paths
    assert "file" in paths  # mode 0644 is above MindIE's 0640


def test_validate_unknown_target_is_a_usage_error(tmp_path):
    result = invoke("validate", str(tmp_path / "x.json"), "--for", "nccl")
    assert result.exit_code == 2
    assert "--for 'nccl' is not one of mindie, hccl" in result.stderr


def test_validate_hccl_allows_one_server(tmp_path):
    table = tmp_path / "one.json"
    shutil.copy(FIXTURES / "ranktables" / "one-node.json", table)
    table.chmod(0o600)
    assert invoke("validate", str(table), "--for", "hccl").exit_code == 0
    mindie = invoke("validate", str(table))
    assert mindie.exit_code == 1 and "server_count" in mindie.stdout


def test_validate_for_hccl_accepts_mindclusters_0644_hccl_json(tmp_path):
    table = tmp_path / "hccl.json"
    shutil.copy(FIXTURES / "mindcluster" / "hccl-2x8-completed.json", table)
    table.chmod(0o644)
    result = invoke("validate", str(table), "--for", "hccl")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout == f"{table}: valid for hccl\n"
    mindie = invoke("validate", str(table))
    assert mindie.exit_code == 1 and "MindIE requires 0640 or stricter" in mindie.stdout


# Issue 36, item 7: `--owner-uid -1` was accepted, a key named twice passed, `validate -`
# and `validate /dev/stdin` were refused ("a symlink").
@pytest.mark.parametrize("uid", ["-1", "4294967295"])
def test_validate_refuses_an_owner_uid_no_process_has(tmp_path, uid):
    table = tmp_path / "rt.json"
    shutil.copy(FIXTURES / "ranktables" / "ranktable-2x8.json", table)
    result = invoke("validate", str(table), "--owner-uid", uid)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"ascend-node: error: --owner-uid {uid} is out of range",
        "  hint: --owner-uid takes an integer from 0 to 4294967294, e.g. --owner-uid 1001"]
    assert result.stdout == ""


def _with_a_key_named_twice() -> str:
    text = (FIXTURES / "ranktables" / "ranktable-2x8.json").read_text()
    doc = json.loads(text)
    ip = doc["server_list"][1]["device"][3]["device_ip"]
    # the same key again in that device's object, and "status" again at the top: `json`
    # keeps the last of each, silently
    return text.replace(f'"device_ip": "{ip}"', f'"device_ip": "{ip}", "device_ip": "10.9.9.9"'
                        ).replace('"version"', '"status": "completed", "version"', 1)


def test_validate_refuses_a_key_named_twice_at_its_json_path(tmp_path):
    table = tmp_path / "rt.json"
    table.write_text(_with_a_key_named_twice())
    table.chmod(0o640)
    result = invoke("validate", str(table), "--json")
    assert result.exit_code == 1, result.stdout + result.stderr
    problems = {p["path"]: p["message"] for p in json.loads(result.stdout)["problems"]}
    assert set(problems) == {"$.server_list[1].device[3].device_ip", "$.status"}, problems
    assert problems["$.status"].startswith("key 'status' appears 2 times in one object")


def test_validate_global_refuses_a_key_named_twice(tmp_path):
    table = tmp_path / "global.json"
    table.write_text('{"version": "1.0", "version": "1.0", "status": "completed"}')
    table.chmod(0o640)
    result = invoke("validate", "--global", str(table))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert f"{table}: $.version: key 'version' appears 2 times" in result.stdout


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_validate_reads_the_table_from_stdin_when_asked(name):
    import subprocess
    import sys

    good = (FIXTURES / "ranktables" / "ranktable-2x8.json").read_text()
    for text, code, shown in ((good, 0, "<stdin>: valid for mindie"),
                              (_with_a_key_named_twice(), 1,
                               "<stdin>: $.server_list[1].device[3].device_ip: key "
                               "'device_ip' appears 2 times")):
        # a real pipe: /dev/stdin is then a symlink to a FIFO, never "a file"
        done = subprocess.run([sys.executable, "-m", "ascend_node", "validate", name],
                              input=text, capture_output=True, text=True, timeout=60)
        assert done.returncode == code, done.stdout + done.stderr
        assert shown in done.stdout, done.stdout
        assert "symlink" not in done.stdout


def test_validate_from_stdin_has_no_owner_to_check():
    result = runner.invoke(app, ["validate", "-", "--owner-uid", "0"], input="{}")
    assert result.exit_code == 2
    assert "--owner-uid with -: a table read from stdin has no owner" in result.stderr


def test_validate_still_names_a_symlinked_file_as_mindie_does(tmp_path):
    table = tmp_path / "rt.json"
    shutil.copy(FIXTURES / "ranktables" / "ranktable-2x8.json", table)
    table.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(table)
    result = invoke("validate", str(link))
    assert result.exit_code == 1
    assert "is a symlink: MindIE refuses links" in result.stdout


# ------------------------------------------------------------------ status


@pytest.mark.parametrize(("state", "pid", "code", "words"), [
    ("done", os.getpid(), 0, "done"),
    ("failed", os.getpid(), 1, "exited 4: timed out"),
    ("in_progress", os.getpid(), 3, "in_progress"),
    ("in_progress", 2**22 + 12345, 1, "gone without a verdict"),
], ids=["done", "failed", "in-progress-alive", "in-progress-gone"])  # the same in every worker
def test_status_exit_codes_for_probes(tmp_path, state, pid, code, words):
    write_status(tmp_path, StatusDoc(state=state, phase="rendezvous", command="boot",
                                     exit_code=4 if state == "failed" else None,
                                     message="timed out" if state == "failed" else "",
                                     pid=pid))
    result = invoke("status", "--state-dir", str(tmp_path))
    assert result.exit_code == code, result.stdout
    assert words in result.stdout


def test_status_before_any_bootstrap_is_in_progress(tmp_path):
    result = invoke("status", "--state-dir", str(tmp_path / "none"), "--json")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["state"] == "not_started"


def test_status_says_when_its_state_dir_does_not_exist(tmp_path):
    """Issue 36: still 3 (a startup probe may run before the agent made its directory),
    but the words tell a state dir that is not there from one not written yet."""
    missing = invoke("status", "--state-dir", str(tmp_path / "none"))
    assert missing.exit_code == 3
    assert missing.stdout.splitlines()[0] == (
        f"not_started: no bootstrap has run yet (there is no state in {tmp_path / 'none'}: "
        "the directory does not exist; check --state-dir / ASCEND_NODE_STATE_DIR if a "
        "bootstrap ran)")
    empty = invoke("status", "--state-dir", str(tmp_path))
    assert empty.exit_code == 3
    assert empty.stdout.splitlines()[0] == (
        f"not_started: no bootstrap has run yet ({tmp_path}/status.json is missing)")


@pytest.mark.parametrize(("args", "cause"), [
    (["--wait-timeout", "5"], "--wait-timeout bounds --wait"),
    (["--serving-timeout", "5"], "--serving-timeout bounds --serving's question to MindIE"),
    (["--live"], "--live asks MindIE's liveness endpoint"),
])
def test_status_refuses_an_option_that_qualifies_one_not_given(tmp_path, args, cause):
    result = invoke("status", "--state-dir", str(tmp_path), *args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.splitlines()[0] == f"ascend-node: error: {cause}"
    assert result.stdout == ""


def test_status_wait_returns_in_progress_after_its_timeout(tmp_path):
    write_status(tmp_path, StatusDoc(state="in_progress", phase="rendezvous", command="boot"))
    result = invoke("status", "--state-dir", str(tmp_path), "--wait", "--wait-timeout", "0.3")
    assert result.exit_code == 3


# ------------------------------------------------------------------ env


def test_env_prints_the_last_bootstrap_for_sh_and_json(tmp_path):
    write_env(tmp_path, {"MASTER_IP": "10.0.0.1", "WEIRD": "it's $(rm -rf /)"}, None)
    sh = invoke("env", "--state-dir", str(tmp_path))
    assert sh.exit_code == 0
    assert "export MASTER_IP=10.0.0.1" in sh.stdout
    assert "export WEIRD='it'\"'\"'s $(rm -rf /)'" in sh.stdout
    js = invoke("env", "--state-dir", str(tmp_path), "--format", "json")
    assert json.loads(js.stdout)["env"]["WEIRD"] == "it's $(rm -rf /)"


def test_env_before_any_bootstrap_says_what_to_do(tmp_path):
    result = invoke("env", "--state-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "no completed bootstrap" in result.stderr
    assert "hint: run `ascend-node ranktable`" in result.stderr


def test_env_script_is_sourced_identically_by_sh_and_bash(tmp_path):
    import subprocess

    value = "a b\"c'd$e`f\\g\nh"
    write_env(tmp_path, {"X": value}, None)
    for shell in ("sh", "bash"):
        out = subprocess.run([shell, "-c", f'. "{tmp_path}/source_mul_env.sh"; printf %s "$X"'],
                             capture_output=True, text=True, check=True).stdout
        assert out == value, shell


# ------------------------------------------------------------------ clean


def test_clean_removes_only_this_runs_state(tmp_path):
    (tmp_path / ".ascend-node" / "r1" / "attempts").mkdir(parents=True)
    (tmp_path / ".ascend-node" / "r2").mkdir(parents=True)
    (tmp_path / "ranktable-r1.json").write_text("{}")
    (tmp_path / "ranktable-r2.json").write_text("{}")
    result = invoke("clean", "--shared-dir", str(tmp_path), "--run-id", "r1", "--yes")
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / ".ascend-node" / "r1").exists()
    assert not (tmp_path / "ranktable-r1.json").exists()
    assert (tmp_path / ".ascend-node" / "r2").exists() and (tmp_path / "ranktable-r2.json").exists()


def test_clean_does_not_follow_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    shared = tmp_path / "shared"
    (shared / ".ascend-node").mkdir(parents=True)
    (shared / ".ascend-node" / "r1").symlink_to(victim)
    assert invoke("clean", "--shared-dir", str(shared), "--run-id", "r1", "-y").exit_code == 0
    assert (victim / "keep").exists()


def test_clean_refuses_an_unsafe_run_id(tmp_path):
    result = invoke("clean", "--shared-dir", str(tmp_path), "--run-id", "../etc", "-y")
    assert result.exit_code == 2  # written on the command line: a usage error
    assert "run id '../etc' (from flag --run-id) is not a safe file-name part" in result.stderr


def _run_state(shared: Path) -> Path:
    (shared / ".ascend-node" / "r1" / "attempts").mkdir(parents=True)
    (shared / "ranktable-r1.json").write_text("{}")
    return shared / ".ascend-node" / "r1"


def test_clean_without_yes_and_without_a_terminal_refuses_with_2(tmp_path):
    state = _run_state(tmp_path)
    result = invoke("clean", "--shared-dir", str(tmp_path), "--run-id", "r1")
    assert result.exit_code == 2, result.stderr
    assert (f"clean would remove run 'r1' state from {tmp_path}, and there is no terminal "
            "to ask: nothing removed") in result.stderr
    assert "hint: pass --yes to remove it without asking" in result.stderr
    assert state.exists() and (tmp_path / "ranktable-r1.json").exists()


def _clean_on_a_terminal(shared: Path, answer: bytes) -> tuple[int, str]:
    """`ascend-node clean` with a real pseudo-terminal as stdin, answering the prompt."""
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ascend_node", "clean", "--shared-dir", str(shared),
             "--run-id", "r1"], stdin=follower, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        os.close(follower)
        follower = -1
        os.write(leader, answer)
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, out.decode()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


def test_clean_on_a_terminal_asks_and_removes_on_yes(tmp_path):
    state = _run_state(tmp_path)
    code, out = _clean_on_a_terminal(tmp_path, b"y\n")
    assert code == 0, out
    assert f"remove run 'r1' state from {tmp_path}?" in out
    assert not state.exists() and not (tmp_path / "ranktable-r1.json").exists()


def test_clean_on_a_terminal_keeps_everything_on_no(tmp_path):
    state = _run_state(tmp_path)
    code, out = _clean_on_a_terminal(tmp_path, b"n\n")
    assert code == 1, out
    assert "nothing removed" in out
    assert state.exists() and (tmp_path / "ranktable-r1.json").exists()


def test_manifest_range_errors_are_usage_errors_like_a_bad_kind():
    for args, named in ((["--nodes", "0"], "error: --nodes 0 is out of range"),
                        (["--npus-per-node", "17"], "error: --npus-per-node 17 is out of range"),
                        (["--npus-per-node", "0"], "error: --npus-per-node 0 is out of range"),
                        (["--timeout", "0"], "error: --timeout 0 is out of range"),
                        (["--run-id", "a/b"], "run id 'a/b' (from --run-id)"),
                        (["--pvc", "A_B"], "error: --pvc 'A_B' is not"),
                        (["--name", "Bad_Name"], "job name 'Bad_Name'"),
                        (["--kind", "batch"], "--kind 'batch'")):
        result = invoke("manifest", *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert named in result.stderr and "hint: " in result.stderr


# ------------------------------------------------------------------ manifest


def test_manifest_renders_a_volcano_job_with_the_exit_code_policies():
    result = invoke("manifest", "--kind", "mindie", "--name", "llm", "--nodes", "2",
                    "--image", "img:1", "--pvc", "models", "--json")
    assert result.exit_code == 0, result.stderr
    job = json.loads(result.stdout)
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert job["spec"]["minAvailable"] == 2
    policies = {p.get("exitCode"): p["action"] for p in job["spec"]["policies"]}
    assert policies[4] == "RestartJob" and policies[5] == "AbortJob"


def test_manifest_bad_kind_is_a_usage_error():
    result = invoke("manifest", "--kind", "batch")
    assert result.exit_code == 2
    assert "--kind 'batch'" in result.stderr
