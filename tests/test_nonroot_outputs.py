"""A non-root agent (issue 26): the defaults it cannot write move to documented fallbacks,
and a path asked for explicitly that it cannot write ends it before the rendezvous (the
peers must not wait on a pod that cannot finish). Real processes as uid 65534 (setpriv),
real files; the pure parts with tables."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_node.errors import ConfigError
from ascend_node.handoff.placement import place_outputs, unwritable_file
from ascend_node.settings import resolve_settings
from ascend_node.sim.cluster import SimNode, SimSpec, launch, prepare
from ascend_node.statedir import (
    DEFAULT_STATE_DIR,
    fallback_state_dirs,
    find_state_dir,
    place_state_dir,
    unusable_dir,
)
from tests.cluster_helpers import explain
from tests.nobody_python import open_temp_dir

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="runs the agent as another uid (root, setpriv)")


# ------------------------------------------------------------------ pure-ish, this uid

def test_fallbacks_in_order() -> None:
    assert fallback_state_dirs({"XDG_RUNTIME_DIR": "/run/user/7"}, 7) == [
        Path("/run/user/7/ascend-node"), Path("/tmp/ascend-node-7")]
    assert fallback_state_dirs({"XDG_RUNTIME_DIR": "relative"}, 7) == [
        Path("/tmp/ascend-node-7")]
    assert fallback_state_dirs({}, 1001) == [Path("/tmp/ascend-node-1001")]


def test_a_fallback_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    assert "owned by uid" in (unusable_dir(theirs, os.getuid() + 1) or "")
    assert unusable_dir(theirs, os.getuid()) is None
    (tmp_path / "file").write_text("")
    assert unusable_dir(tmp_path / "file") == "not a directory" or unusable_dir(
        tmp_path / "file")


def test_writable_default_stays_where_it_is(tmp_path: Path) -> None:
    assert place_state_dir(tmp_path / "s", False, {}) == (tmp_path / "s", None)
    assert unwritable_file(tmp_path / "master") is None
    assert unwritable_file(tmp_path / "a" / "master") == (
        f"directory {tmp_path / 'a'} does not exist")  # named, never created
    assert not (tmp_path / "a").exists()
    assert unwritable_file(tmp_path) == "is a directory"


# ------------------------------------------------------------------ as uid 65534


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A work dir uid 65534 can use (pytest's tmp_path is root's, mode 0700)."""
    path = open_temp_dir("an-nonroot-")
    if isinstance(path, str):
        pytest.skip(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _open_up(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        os.chmod(root, 0o777)
        for name in files:
            os.chmod(os.path.join(root, name), 0o777)


def nobody_node(work: Path, python: Path, nodes: int = 1, **env: str) -> SimNode:
    """Node 0 of a simulated job, its agent run as uid 65534 by `python` (the
    `nobody_python` fixture's: this checkout's own venv may sit where that uid cannot
    read, issue 40)."""
    spec = SimSpec(nodes=nodes, devices=2, run_id="nr", timeout=60)
    shared = work / "shared"
    shared.mkdir()
    node = prepare(spec, work / "work", shared)[0]
    for name in ("ASCEND_NODE_STATE_DIR", "ASCEND_NODE_MASTER_FILE",
                 "ASCEND_NODE_WORLD_SIZE_FILE"):
        node.env.pop(name)  # the image's defaults: /run/ascend-node, /master, /world_size
    node.env.pop("PYTHONPATH", None)  # the agent comes from `python`'s venv alone
    node.argv[0] = str(python)
    node.env["XDG_RUNTIME_DIR"] = str(work / "xdg")
    node.env.update(env)
    (work / "xdg").mkdir()
    node.argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 *node.argv, "--verbose"]
    return node


def _as_nobody(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", *argv], env=env, capture_output=True, text=True,
                          timeout=60)


@needs_root
@pytest.mark.multiprocess
def test_non_root_defaults_fall_back_under_the_runtime_dir(open_dir: Path,
                                                          nobody_python: Path) -> None:
    node = nobody_node(open_dir, nobody_python)
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    _open_up(open_dir)
    (result,) = launch([node], 60)
    assert result.exit_code == 0, explain([result])
    state = open_dir / "xdg" / "ascend-node"
    table = json.loads((state / "ranktable.json").read_text())
    assert (state / "master").read_text().strip() == table["server_list"][0]["container_ip"]
    assert (state / "world_size").read_text().strip() == "2"
    assert state.stat().st_uid == NOBODY
    err = result.stderr
    assert f"state dir {DEFAULT_STATE_DIR} is not writable" in err and str(state) in err
    assert "/master is not writable" in err and "/world_size is not writable" in err
    assert "[fallback (" in err  # --verbose shows where each output went
    # the probe and `env` read the same place, with no setting given
    probe = _as_nobody(*node.argv[4:7], "status", "--json", env=node.env)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout)["state"] == "done"
    sourced = _as_nobody(*node.argv[4:7], "env", env=node.env)
    assert sourced.returncode == 0 and f"RANK_TABLE_FILE={state}/ranktable.json" in \
        sourced.stdout.replace("'", "")


@needs_root
@pytest.mark.multiprocess
@pytest.mark.parametrize("var", ["ASCEND_NODE_MASTER_FILE", "ASCEND_NODE_WORLD_SIZE_FILE",
                                 "ASCEND_NODE_STATE_DIR"])
def test_an_explicit_path_it_cannot_write_ends_it_before_the_rendezvous(
        open_dir: Path, nobody_python: Path, var: str) -> None:
    """Two nodes, only node 0 started: it must not wait its 60 s for a peer, and leaves
    in the rendezvous directory only its failure for the peer to hear (issue 36: peers
    of a pod that failed before the rendezvous end with 5 naming it, not 4 at their
    timeout): an attempt it aborted with its cause, no member slot a table could hold."""
    target = "/root-only/x" if var != "ASCEND_NODE_STATE_DIR" else "/run/root-only"
    node = nobody_node(open_dir, nobody_python, nodes=2, **{var: target})
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    _open_up(open_dir)
    (result,) = launch([node], 60)
    assert result.exit_code == 1, explain([result])
    assert result.seconds < 20, result.seconds
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("ascend-node: error:")]
    assert len(errors) == 1 and "cannot write" in errors[0] and target.split("/x")[0] in \
        errors[0], result.stderr
    assert var in errors[0] or var == "ASCEND_NODE_STATE_DIR"
    run = open_dir / "shared" / ".ascend-node" / "nr"
    attempt = json.loads((run / "attempt.json").read_text())
    outcome = json.loads((run / "attempts" / attempt["attempt_id"] / "outcome.json")
                         .read_text())
    assert outcome["result"] == "abort" and outcome["failed_by"] == node.env["POD_UID"]
    assert outcome["reason"] == "master 0 (node 0) failed: " + errors[0].split(": ", 2)[2]
    left = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}
    assert left == {"attempt.json", f"attempts/{attempt['attempt_id']}/outcome.json",
                    f"timeline/{attempt['attempt_id']}/node-0.json"}, left


def test_explicit_unwritable_master_file_is_a_config_error(tmp_path: Path) -> None:
    """The pure decision, for this uid: a regular file where a directory must be."""
    (tmp_path / "f").write_text("")
    settings = resolve_settings({"master_file": tmp_path / "f" / "master",
                                 "state_dir": tmp_path / "s"}, {})
    with pytest.raises(ConfigError, match="--master-file"):
        place_outputs(settings, {})
    settings = resolve_settings({"state_dir": tmp_path / "s"},
                                {"ASCEND_NODE_WORLD_SIZE_FILE": str(tmp_path / "f" / "w")})
    with pytest.raises(ConfigError, match="environment ASCEND_NODE_WORLD_SIZE_FILE"):
        place_outputs(settings, {})


def test_find_state_dir_looks_where_the_agent_fell_back(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import ascend_node.statedir as statedir

    default = tmp_path / "run" / "ascend-node"  # this machine's real one may hold a status
    monkeypatch.setattr(statedir, "DEFAULT_STATE_DIR", default)
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert find_state_dir(None, env) == default
    (tmp_path / "ascend-node").mkdir()
    (tmp_path / "ascend-node" / "status.json").write_text("{}")
    assert find_state_dir(None, env) == tmp_path / "ascend-node"
    assert find_state_dir(tmp_path / "x", env) == tmp_path / "x"  # explicit wins
    default.mkdir(parents=True)
    (default / "status.json").write_text("{}")
    assert find_state_dir(None, env) == default  # the default first, when it has one
