"""What each `hccn_tool -i N -net_health -g` state means, and what to do (docs/doctor.md).

`net health` is the result of the driver's periodic probe from the device to its
*detection address* (`netdetect_N` in /etc/hccn.conf, set with `hccn_tool -i N -netdetect
-s address <ip>`, read with `-netdetect -g`: `netdetect address: 11.12.165.1`, a capture in
fixtures/hccn/). It says whether that one address answers, not whether HCCL's peers do:
`Init` with a detection address of `0.0.0.0` means no address was ever configured — the
probe never ran — not a broken link. MindCluster treats Success and Init as healthy
(Ascend/mind-cluster component/ascend-common/devmanager/common/constants.go).

The states are the ones the tool prints (the issue tracker's and the captures' wording:
`Socket failed` in fixtures/hccn/kg-npu_info.txt); the causes below are read from each
state's name and the probe it reports on, not from an official table (none is published
that this project could cite).
"""

from __future__ import annotations

from typing import Optional

DETECT_FIX = ("set one with `hccn_tool -i {i} -netdetect -s address <gateway or a peer "
              "device IP>` on the host (or netdetect_{i}= in /etc/hccn.conf)")

STATES: dict[str, tuple[str, str]] = {
    "success": ("the detection address answers", ""),
    "init": ("no probe result yet: the probe has not run, usually because no detection "
             "address is configured", DETECT_FIX),
    "socket fail": ("the device could not open the probe's socket (its network stack or "
                    "address is not up)", "check `hccn_tool -i {i} -ip -g` and `-link -g`; "
                    "restart the device's network with the driver if both look right"),
    "receive timeout": ("the probe was sent but no answer came back in time",
                        "check the path to the detection address (switch port, VLAN, ACL) "
                        "and that the address itself is up"),
    "unreachable": ("the detection address cannot be reached from the device (no route "
                    "or ARP answer)", "check the device's netmask and gateway "
                    "(`hccn_tool -i {i} -gateway -g`) and that the detection address is on "
                    "a reachable subnet"),
    "time exceeded": ("the probe's TTL ran out on the way (a routing loop or too many hops)",
                      "check the routes between the device and its detection address"),
    "fault": ("the probe reports a fault of the device's network", "check the link "
              "(`hccn_tool -i {i} -link -g`, history `-link_stat -g`) and the optical module"),
    "thread error": ("the driver's probe thread failed (a driver problem, not the network)",
                     "check the driver's logs (`/var/log/npu/`); a driver restart or host "
                     "reboot may be needed"),
    "detect ip set": ("a detection address was just set and the probe has not reported "
                      "yet", "ask again in a few seconds"),
    "unknown": ("the driver reports no known state", "ask again; if it stays, check the "
                "driver's logs"),
}


def explain(state: str, device: int, netdetect: Optional[str]) -> tuple[str, str]:
    """(cause, remedy) for one device's state; `netdetect` None when not asked."""
    key = state.strip().lower()
    if key == "socket failed":
        key = "socket fail"
    cause, remedy = STATES.get(key, (f"a state this agent does not know ({state!r})",
                                     "see the driver's documentation for hccn_tool"))
    if key == "init":
        if netdetect in ("0.0.0.0", "::"):
            cause = ("no detection address is configured (netdetect address "
                     f"{netdetect}), so the probe never ran; this is not a broken link")
        elif netdetect:
            cause = (f"the probe to {netdetect} has not reported yet")
            remedy = "ask again in a few seconds; if it stays Init, check the address"
    return cause, remedy.format(i=device)


__all__ = ["STATES", "explain"]
