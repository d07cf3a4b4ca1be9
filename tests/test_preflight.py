"""Pre-flight, pure parts: node 0's health judgement, the ping sample, ping verdicts, policy."""

from __future__ import annotations

import pytest

from ascend_node.discover.health import DeviceHealth, NodeHealth
from ascend_node.doctor.ping import PingPair
from ascend_node.errors import ToolError
from ascend_node.preflight.gather import to_health
from ascend_node.preflight.judge import apply_policy, judge_health
from ascend_node.preflight.models import PingRecord, ReachDoc
from ascend_node.preflight.policy import effective_policy, node0_judge, parse_policy
from ascend_node.preflight.reach import judge_reach
from ascend_node.preflight.sample import (
    PAIR_LIMIT,
    classify,
    describe_unreachable,
    sample_pairs,
    table_devices,
)
from ascend_node.rendezvous import decide
from ascend_node.settings import resolve_settings
from ascend_node.tools import ToolResult
from tests.rdzv_docs import member, table_outcome


def node(devices: int = 4, tls: int = 0, link: str = "UP", health: str = "Success",
         **per_device: tuple[str, object]) -> NodeHealth:
    """`per_device`: d<i>=(field, value) overrides one device."""
    out = []
    for i in range(devices):
        values: dict[str, object] = {"link": link, "health": health, "tls": tls}
        over = per_device.get(f"d{i}")
        if over:
            values[over[0]] = over[1]
        out.append(DeviceHealth(device_id=i, **values))  # type: ignore[arg-type]
    return NodeHealth(ip_family=4, devices=tuple(out))


# ------------------------------------------------------------------ judge_health


@pytest.mark.parametrize(
    ("case", "health", "faults", "warnings"),
    [
        ("healthy", {0: node(), 1: node(), 2: node()}, [], []),
        ("Init counts as healthy", {0: node(health="Init"), 1: node()}, [], []),
        ("TLS on one node differs",
         {0: node(), 1: node(), 2: node(tls=1)},
         ["TLS switch differs between devices (HCCL fails with EI0016): switch 1 on worker 1 "
          "(node 2) devices 0-3; switch 0 on master 0 (node 0) devices 0-3, worker 0 (node 1) "
          "devices 0-3; fix: set one value on every device of every node, e.g. `hccn_tool -i "
          "<dev> -tls -s enable 0` for each device of worker 1 (node 2) devices 0-3"], []),
        ("TLS on one device differs",
         {0: node(), 1: node(d3=("tls", 1))},
         ["switch 1 on worker 0 (node 1) device 3; switch 0 on master 0 (node 0) devices 0-3, "
          "worker 0 (node 1) devices 0-2"], []),
        ("link DOWN", {0: node(), 1: node(d2=("link", "DOWN"))},
         ["RoCE link DOWN on worker 0 (node 1) device 2, which the table uses"], []),
        ("net health Fault warns",
         {0: node(d1=("health", "Fault")), 1: node()}, [],
         ["net health Fault (not Success/Init) on master 0 (node 0) device 1"]),
        ("unknown values warn",
         {0: node(d0=("tls", None)), 1: node()}, [],
         ["link, net health or TLS switch unknown on master 0 (node 0) device 0"]),
        ("a member without facts is skipped", {0: node()}, [], []),
    ],
)
def test_judge_health(case, health, faults, warnings):
    verdict = judge_health(health, master_count=1)
    assert len(verdict.faults) == len(faults), verdict
    for fault, want in zip(verdict.faults, faults):
        assert want in fault.reason
    assert len(verdict.warnings) == len(warnings), verdict
    for got, want in zip(verdict.warnings, warnings):
        assert want in got


def test_tls_fault_names_both_sides_nodes_and_many_nodes_are_cut():
    health = {i: node(tls=1 if i == 3 else 0) for i in range(20)}
    fault = judge_health(health, master_count=2).faults[0]
    assert fault.nodes == tuple(range(20))
    assert "switch 1 on worker 1 (node 3) devices 0-3" in fault.reason
    assert "and 13 more nodes" in fault.reason  # 19 on the big side, 6 shown


@pytest.mark.parametrize(
    ("policy", "faults", "warnings"),
    [("strict", 1, 1), ("warn", 0, 2), ("off", 0, 0)],
)
def test_apply_policy(policy, faults, warnings):
    health = {0: node(d0=("link", "DOWN"), d1=("health", "Fault")), 1: node()}
    verdict = apply_policy(judge_health(health, 1), policy)
    assert (len(verdict.faults), len(verdict.warnings)) == (faults, warnings)


# ------------------------------------------------------------------ evaluate (node 0)


def with_health(index: int, health: NodeHealth | None, nodes: int = 3):
    return member(index, nodes=nodes, devices=4).model_copy(update={"health": health})


@pytest.mark.parametrize(
    ("policy", "expect"), [("strict", decide.Abort), ("warn", decide.Complete),
                           ("off", decide.Complete)])
def test_evaluate_applies_the_policy_to_a_tls_mismatch(policy, expect):
    slots = {0: with_health(0, node()), 1: with_health(1, node()),
             2: with_health(2, node(tls=1))}
    verdict = decide.evaluate(slots, 3, 1, False, judge=node0_judge(policy))
    assert isinstance(verdict, expect)
    if isinstance(verdict, decide.Abort):
        assert verdict.nodes == (0, 1, 2)
        assert "hccn_tool -i <dev> -tls -s enable 0" in verdict.reason
    elif policy == "warn":
        assert any("TLS switch differs" in w for w in verdict.warnings)
    else:
        assert verdict.warnings == ()


def test_evaluate_aborts_on_a_link_down_before_everyone_is_there():
    slots = {0: with_health(0, node()), 1: with_health(1, node(d2=("link", "DOWN"))),
             2: None}
    verdict = decide.evaluate(slots, 3, 1, False, judge=node0_judge("strict"))
    assert isinstance(verdict, decide.Abort)
    assert verdict.nodes == (1,)
    assert "worker 0 (node 1) device 2" in verdict.reason


def test_health_is_not_part_of_the_digest_so_a_restart_gets_its_table_back():
    """A restarted container whose net health moved from Init to Success (or that runs
    with the pre-flight off) still matches the table's record."""
    before = with_health(1, node(health="Init"))
    after = with_health(1, node(health="Success"))
    off = with_health(1, None)
    assert before.data.digest() == after.data.digest() == off.data.digest()
    outcome = table_outcome([with_health(i, node()) for i in range(3)])
    me = decide.Me(1, "uid-1", off.data.digest(), 1, 3)
    from tests.rdzv_docs import attempt

    action = decide.follower_step(attempt(nodes=3), outcome, after, me, None)
    assert isinstance(action, decide.Done)


def test_member_documents_without_health_still_validate():
    """Documents written by an agent without the pre-flight read as before."""
    doc = member(0)
    raw = doc.model_dump_json(exclude={"health"})
    assert type(doc).model_validate_json(raw).health is None


# ------------------------------------------------------------------ the ping sample


def servers(nodes: int, devices: int) -> list[list[tuple[int, str]]]:
    return [[(d, f"10.20.{n}.{d}") for d in range(devices)] for n in range(nodes)]


@pytest.mark.parametrize(("nodes", "devices"), [(2, 8), (3, 4), (8, 8), (17, 8), (64, 16)])
def test_sample_reaches_every_peer_and_every_local_device(nodes, devices):
    for me in range(nodes):
        pairs = sample_pairs(servers(nodes, devices), me)
        assert len(pairs) == min(max(nodes - 1, devices), PAIR_LIMIT)
        assert {p.peer for p in pairs} == set(range(nodes)) - {me}
        assert {p.device_id for p in pairs} == set(range(devices))
        assert all(p.peer_device == p.device_id for p in pairs)  # same slot, same plane
        assert len(set(pairs)) == len(pairs)


@pytest.mark.parametrize(("nodes", "devices"), [(3, 4), (8, 8), (17, 8), (64, 16)])
def test_a_peer_is_pinged_on_a_different_plane_by_each_node(nodes, devices):
    """Not every node on one slot: the cluster's pings spread over the peers' planes."""
    slots: dict[int, set[int]] = {}
    for me in range(nodes):
        for p in sample_pairs(servers(nodes, devices), me):
            slots.setdefault(p.peer, set()).add(p.peer_device)
    assert all(len(s) >= min(nodes - 1, devices) for s in slots.values()), slots


def test_sample_above_the_limit_pings_the_next_nodes_and_everyone_is_pinged():
    nodes = PAIR_LIMIT + 36
    pinged = set()
    for me in range(nodes):
        pairs = sample_pairs(servers(nodes, 2), me, limit=PAIR_LIMIT)
        assert len(pairs) == PAIR_LIMIT
        assert [p.peer for p in pairs[:3]] == [(me + k) % nodes for k in (1, 2, 3)]
        pinged |= {p.peer for p in pairs}
    assert pinged == set(range(nodes))


def test_sample_of_one_node_or_uneven_devices():
    assert sample_pairs(servers(1, 8), 0) == []
    uneven = [[(0, "a"), (1, "b"), (2, "c"), (3, "d")], [(4, "e"), (5, "f")]]
    pairs = sample_pairs(uneven, 0)
    assert {(p.device_id, p.peer_device) for p in pairs} == {(0, 4), (1, 5), (2, 4), (3, 5)}


def test_table_devices_reads_the_table_in_server_order():
    table = {"server_list": [
        {"device": [{"device_id": "1", "device_ip": "x1"}, {"device_id": "0", "device_ip": "x0"}]},
        {"device": [{"device_id": "0", "device_ip": "y0"}]}]}
    assert table_devices(table) == [[(0, "x0"), (1, "x1")], [(0, "y0")]]


# ------------------------------------------------------------------ ping verdicts

PAIR = PingPair(3, 2, 3, "10.20.2.3")
OK = ("device 3 PING 10.20.2.3\nrecv seq=0,time=1.418000ms\n"
      "3 packets transmitted, 3 received, 0.00% packet loss\n")
LOST = ("device 3 PING 10.20.2.3\nrecv time out seq=0\n"
        "3 packets transmitted, 0 received, 100.00% packet loss\n")
SOME = "3 packets transmitted, 2 received, 33.33% packet loss\n"


@pytest.mark.parametrize(
    ("res", "result", "detail"),
    [
        (ToolResult(("t",), 0, OK, ""), "ok", ""),
        (ToolResult(("t",), 0, LOST, ""), "unreachable", "3 sent, 0 received, 100.00% loss"),
        (ToolResult(("t",), 0, SOME, ""), "ok", "33.33% loss"),
        (ToolResult(("t",), 255, "", "Error: invalid device id 3"), "unknown",
         "no ping summary (exit 255)"),
        (ToolError("`hccn_tool -i 3 -ping` did not finish within 5 s"), "unknown",
         "did not finish within 5 s"),
    ],
)
def test_classify(res, result, detail):
    rec = classify(1, PAIR, res)
    assert rec.result == result
    assert detail in rec.detail
    assert (rec.source, rec.device_id, rec.peer, rec.peer_device) == (1, 3, 2, 3)


def rec(source: int, peer: int, result: str = "ok", detail: str = "") -> PingRecord:
    return PingRecord(source=source, device_id=1, peer=peer, peer_device=1,
                      address=f"10.20.{peer}.1", result=result, detail=detail)  # type: ignore[arg-type]


def reach(index: int, *pings: PingRecord) -> ReachDoc:
    return ReachDoc(run_id="r", attempt_id="a", global_index=index, token=f"t{index}",
                    seconds=0.1, pings=pings)


def test_judge_reach_collects_unreachable_pairs_warnings_and_missing_nodes():
    docs = {0: reach(0, rec(0, 1)), 1: reach(1, rec(1, 2, "unreachable", "3 sent, 0 received")),
            2: reach(2, rec(2, 0, "unknown", "timed out"))}
    bad, warns, missing = judge_reach(docs, 4, 1)
    assert [(r.source, r.peer) for r in bad] == [(1, 2)]
    assert warns == ("worker 1 (node 2) device 1 -> master 0 (node 0) device 1 (10.20.0.1): "
                     "no answer (timed out)",)
    assert missing == (3,)


def test_unreachable_message_names_source_and_target_node_device_ip():
    text = describe_unreachable([rec(2, 0, "unreachable", "3 sent, 0 received")], 1)
    assert text == ("1 sampled device pair(s) unreachable over RoCE: worker 1 (node 2) device 1 "
                    "-> master 0 (node 0) device 1 (10.20.0.1): 3 sent, 0 received")
    many = describe_unreachable([rec(i, 0, "unreachable") for i in range(1, 8)], 1)
    assert many.startswith("7 sampled") and many.endswith("and 3 more")


# ------------------------------------------------------------------ gathered facts


def test_to_health_keeps_unknown_values_with_the_tools_words():
    from ascend_node.doctor.local import DeviceState

    states = [DeviceState(0, link="UP", health="Success", tls=0),
              DeviceState(1, errors={"tls": "`hccn_tool -i 1 -tls -g` printed nothing (exit 255)"})]
    health = to_health(states, ["10.0.0.1", "10.0.0.2"])
    assert health.ip_family == 4
    assert health.devices[1].tls is None and "exit 255" in health.devices[1].unknown
    assert to_health([], ["2001:db8::1"]).ip_family == 6


# ------------------------------------------------------------------ policy


@pytest.mark.parametrize(
    ("chosen", "command", "launcher", "expect"),
    [(None, "ranktable", None, "strict"), (None, "boot", "mindie", "strict"),
     (None, "boot", "msrun", "warn"), (None, "boot", "torch", "warn"),
     (None, "boot", "ranktable-env", "warn"), ("strict", "boot", "torch", "strict"),
     ("off", "ranktable", None, "off")],
)
def test_effective_policy(chosen, command, launcher, expect):
    assert effective_policy(chosen, command, launcher) == expect


def test_policy_from_the_environment_and_a_bad_value_named():
    from ascend_node.errors import ConfigError

    assert resolve_settings({}, {"ASCEND_NODE_PREFLIGHT": " Warn "}).preflight == "warn"
    assert resolve_settings({}, {}).preflight is None
    with pytest.raises(ConfigError) as err:
        resolve_settings({}, {"ASCEND_NODE_PREFLIGHT": "lax"})
    assert "ASCEND_NODE_PREFLIGHT='lax' is invalid: 'lax' is not one of strict, warn, off" \
        in err.value.cause
    from ascend_node.errors import UsageError

    with pytest.raises(UsageError) as err:
        resolve_settings({"preflight": "lax"}, {})
    assert "--preflight='lax' is invalid" in err.value.cause
    assert parse_policy("OFF") == "off"


def test_the_flag_reaches_the_settings_and_a_bad_value_exits_2(monkeypatch):
    from ascend_node.cli import app
    from tests.cli_helpers import cli_runner

    monkeypatch.delenv("ASCEND_NODE_PREFLIGHT", raising=False)
    result = cli_runner().invoke(app, ["ranktable", "--preflight", "lax"])
    assert result.exit_code == 2  # a bad value on the command line is a usage error
    assert "--preflight='lax' is invalid" in result.stderr
    helped = cli_runner().invoke(app, ["boot", "--help"])
    assert "--preflight" in helped.stdout and "ASCEND_NODE_PREFLIGHT" in helped.stdout


def test_ping_warnings_are_capped():
    from ascend_node.preflight.sample import WARNINGS_SHOWN, reach_warnings

    warns = reach_warnings([rec(i, 0, "unknown", "timed out") for i in range(1, 40)], 1)
    assert len(warns) == WARNINGS_SHOWN + 1
    assert warns[-1] == "and 23 more sampled pairs with packet loss or no answer"
