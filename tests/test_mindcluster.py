"""MindCluster's hccl.json as the rank-table source: the pure parts, table-tested.

Fixtures in fixtures/mindcluster/ are written from the documented shape (their README).
The multi-process contract (a separate writer, the CLI, boot) is in
tests/test_mindcluster_cluster.py.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ascend_node.errors import ClusterInconsistent, PeerTimeout
from ascend_node.ranktable import render_rank_table, validate_rank_table
from ascend_node.settings import resolve_settings
from ascend_node.sources.base import choose_table_source
from ascend_node.sources.mindcluster_file import (
    HcclJsonWait,
    Pending,
    Ready,
    convert_for_mindie,
    describe_pending,
    judge_hccl_json,
    present_ranks,
    revalidate_dirs,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mindcluster"
PATH = Path("/user/serverid/devindex/config/hccl.json")


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return doc


def name(i: int) -> str:
    return "master 0 (node 0)" if i == 0 else f"worker {i - 1} (node {i})"


# ------------------------------------------------------------------ source and settings


@pytest.mark.parametrize(("requested", "exists", "source", "why"), [
    ("auto", True, "mindcluster", f"auto: MindCluster's {PATH} exists"),
    ("auto", False, "volume", f"auto: no MindCluster file at {PATH}"),
    ("volume", True, "volume", "--table-source volume"),
    ("mindcluster", False, "mindcluster", f"--table-source mindcluster ({PATH})"),
])
def test_choose_table_source(requested: str, exists: bool, source: str, why: str) -> None:
    got = choose_table_source(requested, PATH, exists)
    assert (got.source, got.why) == (source, why)


def test_settings_defaults_and_environment_twins() -> None:
    s = resolve_settings({}, {})
    assert (s.table_version, s.table_source, s.hccl_json) == ("auto", "auto", PATH)
    s = resolve_settings({}, {"ASCEND_NODE_TABLE_VERSION": "1.2",
                              "ASCEND_NODE_TABLE_SOURCE": " MindCluster ",
                              "ASCEND_NODE_HCCL_JSON": "/etc/mc/hccl.json"})
    assert (s.table_version, s.table_source, str(s.hccl_json)) == (
        "1.2", "mindcluster", "/etc/mc/hccl.json")
    assert s.sources["table_source"] == "environment ASCEND_NODE_TABLE_SOURCE"
    s = resolve_settings({"table_version": "1.0"}, {"ASCEND_NODE_TABLE_VERSION": "1.2"})
    assert (s.table_version, s.sources["table_version"]) == ("1.0", "flag --table-version")


@pytest.mark.parametrize(("var", "value", "words"), [
    ("ASCEND_NODE_TABLE_VERSION", "2.0", "ASCEND_NODE_TABLE_VERSION='2.0' is invalid: '2.0' is "
                                         "not one of auto, 1.0, 1.2"),
    ("ASCEND_NODE_TABLE_SOURCE", "nfs", "ASCEND_NODE_TABLE_SOURCE='nfs' is invalid: 'nfs' is not "
                                        "one of auto, volume, mindcluster"),
])
def test_bad_choices_are_named(var: str, value: str, words: str) -> None:
    from ascend_node.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        resolve_settings({}, {var: value})
    assert err.value.cause == words


# ------------------------------------------------------------------ reading the file


COMPLETED = (FIXTURES / "hccl-2x8-completed.json").read_bytes()
INITIALIZING = (FIXTURES / "hccl-2x8-initializing.json").read_bytes()


@pytest.mark.parametrize(("raw", "kind", "reason"), [
    (None, Pending, "the file does not exist yet"),
    (b"", Pending, "the file is not complete JSON (0 bytes; half-written?)"),
    (COMPLETED[: len(COMPLETED) // 2], Pending,
     f"the file is not complete JSON ({len(COMPLETED) // 2} bytes; half-written?)"),
    (b"\xff\xfe", Pending, "the file is not complete JSON (2 bytes; half-written?)"),
    (b"[]", Pending, "the file holds a JSON list, not a rank table"),
    (INITIALIZING, Pending, "status 'initializing'"),
    (b'{"server_list": []}', Pending, "status None"),
    (COMPLETED, Ready, ""),
])
def test_judge_hccl_json(raw: bytes | None, kind: type, reason: str) -> None:
    got = judge_hccl_json(raw)
    assert isinstance(got, kind)
    if isinstance(got, Pending):
        assert got.reason == reason


def test_progress_names_the_missing_pods_when_the_job_size_is_known() -> None:
    state = judge_hccl_json(INITIALIZING)
    assert isinstance(state, Pending)
    assert present_ranks(state.doc or {}) == [0]
    assert describe_pending(state, 3, name) == (
        "status 'initializing', 1 of 3 servers listed; missing: worker 0 (node 1), "
        "worker 1 (node 2)")
    assert describe_pending(state, None, name) == "status 'initializing', 1 server(s) listed"
    assert describe_pending(Pending("the file does not exist yet"), 3, name) == (
        "the file does not exist yet")


def test_wait_times_out_with_exit_4_naming_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "config" / "hccl.json"
    path.parent.mkdir()
    path.write_bytes(INITIALIZING)
    now = [100.0]
    wait = HcclJsonWait(path, deadline=103.0, timeout=3.0, node_count=2, name=name,
                        clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    with pytest.raises(PeerTimeout) as err:
        wait.run()
    assert err.value.exit_code == 4
    assert err.value.cause == (
        f"timed out after 3 s waiting for MindCluster's rank table {path}: status "
        "'initializing', 1 of 2 servers listed; missing: worker 0 (node 1)")


def test_wait_returns_the_completed_document(tmp_path: Path) -> None:
    path = tmp_path / "hccl.json"
    path.write_bytes(COMPLETED)
    assert HcclJsonWait(path, deadline=0.0, timeout=1.0).run() == json.loads(COMPLETED)


def test_each_poll_reopens_the_directories_down_from_the_nearest_existing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any) -> int:
        opened.append(str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", spy)
    existing = tmp_path / "config"
    existing.mkdir()
    revalidate_dirs(existing / "hccl.json")
    assert opened == [str(existing)]
    opened.clear()
    revalidate_dirs(existing / "sub" / "hccl.json")
    # the parent is missing: every level from / down to the nearest existing one
    assert opened[0] == str(existing / "sub")
    assert opened[1] == "/"
    assert opened[-2:] == [str(existing), str(existing / "sub")]
    assert len(opened) == len(existing.parts) + 2


# ------------------------------------------------------------------ the table MindIE gets


def test_pod_uid_server_ids_become_host_ips_and_the_table_is_mindie_valid() -> None:
    got = convert_for_mindie(load("hccl-2x8-completed.json"), "172.16.4.9", PATH)
    assert got.index == 1 and got.node_count == 2
    table = got.table
    assert list(table) == ["version", "status", "server_count", "server_list"]
    assert (table["version"], table["status"], table["server_count"]) == ("1.0", "completed", "2")
    assert [s["server_id"] for s in table["server_list"]] == ["192.168.10.11", "192.168.10.12"]
    assert [s["container_ip"] for s in table["server_list"]] == ["172.16.3.5", "172.16.4.9"]
    assert table["server_list"][1]["device"][0] == {
        "device_id": "0", "device_ip": "10.20.1.1", "rank_id": "8"}
    assert all(set(s) == {"server_id", "container_ip", "device"} for s in table["server_list"])
    assert validate_rank_table(table, "mindie") == []


def test_one_pod_one_node_variant_gives_the_same_table() -> None:
    a = convert_for_mindie(load("hccl-2x8-completed.json"), "172.16.3.5", PATH)
    b = convert_for_mindie(load("hccl-2x8-onepodonenode.json"), "172.16.3.5", PATH)
    assert render_rank_table(a.table) == render_rank_table(b.table)


def test_rank_0_server_is_listed_first_whatever_the_file_order() -> None:
    doc = load("hccl-2x8-completed.json")
    doc["server_list"].reverse()
    got = convert_for_mindie(doc, "172.16.3.5", PATH)
    assert got.index == 0
    assert got.table["server_list"][0]["device"][0]["rank_id"] == "0"
    assert got.table == convert_for_mindie(load("hccl-2x8-completed.json"), "172.16.3.5",
                                           PATH).table


def test_shared_host_ips_fall_back_to_pod_ips() -> None:
    doc = load("hccl-2x8-completed.json")
    for server in doc["server_list"]:
        server["host_ip"] = "192.168.10.11"
    got = convert_for_mindie(doc, "172.16.3.5", PATH)
    assert [s["server_id"] for s in got.table["server_list"]] == ["172.16.3.5", "172.16.4.9"]


def test_a3_super_pod_file_gives_v1_0_by_default_and_keeps_v1_2_when_asked() -> None:
    doc = load("hccl-a3-2x16-v1.2.json")
    plain = convert_for_mindie(doc, "172.16.3.5", PATH)
    assert plain.table["version"] == "1.0" and "super_pod_list" not in plain.table
    assert all(set(d) == {"device_id", "device_ip", "rank_id"}
               for s in plain.table["server_list"] for d in s["device"])
    assert validate_rank_table(plain.table, "mindie") == []
    kept = convert_for_mindie(doc, "172.16.3.5", PATH, "1.2")
    assert kept.table["version"] == "1.2"
    assert kept.table["super_pod_list"] == [{"super_pod_id": "0", "server_list": [
        {"server_id": "192.168.10.11"}, {"server_id": "192.168.10.12"}]}]
    assert kept.table["server_list"][1]["device"][15]["super_device_id"] == "131"
    assert validate_rank_table(kept.table, "mindie") == []


def mutated(name_: str, change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(load(name_))
    change(doc)
    return doc


@pytest.mark.parametrize(("doc", "pod_ip", "version", "words"), [
    (load("hccl-2x8-completed.json"), "172.16.9.9", "auto",
     f"MindCluster's rank table {PATH} has no server with container_ip 172.16.9.9 (it lists "
     "172.16.3.5, 172.16.4.9)"),
    (load("hccl-2x8-completed.json"), "172.16.3.5", "1.2",
     f"--table-version 1.2, but MindCluster's rank table {PATH} is version '1.0' without "
     "super_pod_list"),
    (mutated("hccl-2x8-completed.json",
             lambda d: d["server_list"][1]["device"][0].update(device_ip="10.20.0.1")),
     "172.16.3.5", "auto", f"MindCluster's rank table {PATH} is invalid: "
                           "$.server_list[1].device[0].device_ip: device_ip \"10.20.0.1\" is "
                           "also used by $.server_list[0].device[0]"),
    (mutated("hccl-2x8-completed.json",
             lambda d: d["server_list"][1].pop("container_ip")),
     "172.16.3.5", "auto", "has container_ip None, not an IP address"),
    (mutated("hccl-2x8-completed.json",
             lambda d: d["server_list"][1]["device"][7].update(rank_id="20")),
     "172.16.3.5", "auto", "is invalid: $.server_list[1].device[7].rank_id: rank_id \"20\" is "
                           "not below the 16 devices"),
    (mutated("hccl-2x8-completed.json", lambda d: d["server_list"][1]["device"].pop()),
     "172.16.3.5", "auto", "cannot be handed to MindIE: $.server_list[1].device: server has 7 "
                           "devices but server_list[0] has 8"),
    (mutated("hccl-a3-2x16-v1.2.json",
             lambda d: [x.update(device_ip="") for s in d["server_list"] for x in s["device"]]),
     "172.16.3.5", "auto", f"MindCluster's rank table {PATH} cannot be handed to MindIE: "
                           "$.server_list[0].device[0].device_ip"),
])
def test_unusable_files_are_inconsistent_exit_5_with_the_cause(
    doc: dict[str, Any], pod_ip: str, version: str, words: str
) -> None:
    with pytest.raises(ClusterInconsistent) as err:
        convert_for_mindie(doc, pod_ip, PATH, version)
    assert err.value.exit_code == 5
    assert words in err.value.cause, err.value.cause


# ------------------------------------------------------------------ doctor


def test_doctor_says_which_source_and_the_file_state() -> None:
    from ascend_node.doctor.source import check_table_source

    volume = check_table_source(choose_table_source("auto", PATH, False), "auto", None)
    assert (volume.id, volume.status) == ("table.source", "ok")
    assert volume.message == (f"rank table from volume (auto: no MindCluster file at {PATH}); "
                              "--table-version auto")
    mc = choose_table_source("mindcluster", PATH, True)
    ready = check_table_source(mc, "1.2", judge_hccl_json(COMPLETED))
    assert ready.status == "ok"
    assert ready.message.endswith("hccl.json is completed with 2 server(s), version '1.0'")
    waiting = check_table_source(mc, "auto", judge_hccl_json(INITIALIZING))
    assert waiting.status == "warn"
    assert waiting.message.endswith("hccl.json is not usable yet: status 'initializing'")
    assert "MindCluster marks it completed" in waiting.remedy
