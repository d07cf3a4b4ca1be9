"""A3 super-pod discovery: `npu-smi info -m` mapping and `npu-smi info -t spod-info`.

No real capture of spod-info exists: fixtures/npu-smi/ holds outputs written from the facts
(its README says how). The A2 side uses the real 910A capture (fixtures/hccn/kg-npu_info.txt).
`npu-smi` is faked by a runner answering per argv, as the real tool's stdout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Optional

import pytest

from ascend_node.discover.devices import parse_npu_chip_map
from ascend_node.discover.superpod import (
    SpodInfo,
    node_super_pod,
    parse_spod_fields,
    query_super_pod,
    spod_info_from,
)
from ascend_node.errors import DeviceError, ToolError
from ascend_node.tools import ToolResult

NPU_SMI_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "npu-smi"
A3_MAP = (NPU_SMI_DIR / "a3-info-m.txt").read_text()
SPOD = (NPU_SMI_DIR / "spod-info-a3.txt").read_text()
SPOD_EXTRA = (NPU_SMI_DIR / "spod-info-a3-extra-keys.txt").read_text()
NPU_SMI = "/usr/local/bin/npu-smi"
CMD = "npu-smi info -t spod-info -i 0 -c 0"


# ------------------------------------------------------------------------ parsers


def test_a3_info_m_maps_physical_ids_to_module_and_die() -> None:
    chips = parse_npu_chip_map(A3_MAP)
    assert sorted(chips) == list(range(16))
    assert chips[0] == (0, 0) and chips[1] == (0, 1) and chips[15] == (7, 1)


def test_910a_info_m_maps_each_card_to_chip_0(hccn_capture: Callable[[str], dict[str, str]]
                                              ) -> None:
    chips = parse_npu_chip_map(hccn_capture("kg-npu_info.txt")["npu-smi info -m"])
    assert chips == {i: (i, 0) for i in range(8)}


@pytest.mark.parametrize(("text", "expect"), [
    (SPOD, {"sdid": "123", "super_pod_size": "48", "super_pod_id": "1", "server_index": "3"}),
    (SPOD_EXTRA, {"sdid": "4711", "super_pod_size": "48", "super_pod_id": "7",
                  "server_index": "0"}),
    ("SDID:5\nSuper Pod ID:2\n", {"sdid": "5", "super_pod_id": "2"}),
    ("  super   pod   id   :   9  \n sdid : 1\n", {"super_pod_id": "9", "sdid": "1"}),
    ("SDID : 1\nSDID : 2\n", {"sdid": "1"}),
    ("no colon here\n\n", {}),
    ("", {}),
])
def test_spod_fields_by_key_tolerating_spacing_case_and_extra_keys(
    text: str, expect: Mapping[str, str]
) -> None:
    assert parse_spod_fields(text) == expect


def test_spod_info_values() -> None:
    assert spod_info_from(SPOD, 0, CMD) == SpodInfo(123, 1, 48, 3)
    assert spod_info_from("SDID : 7\nSuper Pod ID : 0\n", 3, CMD) == SpodInfo(7, 0, None, None)


@pytest.mark.parametrize(("text", "message"), [
    ("Super Pod ID : 1\n", "device 4: `npu-smi info -t spod-info -i 0 -c 0` printed no SDID"),
    ("SDID : \nSuper Pod ID : 1\n", "device 4: `npu-smi info -t spod-info -i 0 -c 0` printed "
                                    "SDID '', not a decimal number"),
    ("SDID : 0x1f\nSuper Pod ID : 1\n", "printed SDID '0x1f', not a decimal number"),
    ("SDID : -1\nSuper Pod ID : 1\n", "printed SDID '-1', not a decimal number"),
    ("SDID : 12\n", "printed no Super Pod ID"),
    ("SDID : 12\nSuper Pod ID : 1\nServer Index : NA\n", "printed Server Index 'NA'"),
])
def test_spod_info_refuses_missing_or_non_numeric_values_naming_the_device(
    text: str, message: str
) -> None:
    with pytest.raises(DeviceError) as err:
        spod_info_from(text, 4, CMD)
    assert message in err.value.cause
    assert err.value.cause.startswith("device 4: ")


def test_node_super_pod_requires_one_pod_and_unique_sdids() -> None:
    pod = node_super_pod({0: SpodInfo(10, 1, 48, 2), 1: SpodInfo(11, 1, 48, 2)})
    assert (pod.super_pod_id, dict(pod.sdids), pod.server_index) == ("1", {0: 10, 1: 11}, 2)
    with pytest.raises(DeviceError, match=r"different super pods \(super pod 1 on devices 0; "
                                          r"super pod 2 on devices 1\)"):
        node_super_pod({0: SpodInfo(10, 1), 1: SpodInfo(11, 2)})
    with pytest.raises(DeviceError, match="devices 0 and 1 report the same SDID 10"):
        node_super_pod({0: SpodInfo(10, 1), 1: SpodInfo(10, 1)})


# ------------------------------------------------------------------------ the caller


def fake_npu_smi(mapping: Optional[str], spod: Mapping[tuple[int, int], str],
                 calls: list[tuple[str, ...]]) -> Callable[..., ToolResult]:
    """npu-smi answering `info -m` with `mapping` (None: not installed) and spod-info per
    (npu, chip) from `spod` (absent: a refusal with exit 255, as a card without super pod)."""
    def run(argv: list[str], timeout: float) -> ToolResult:
        calls.append(tuple(argv))
        if mapping is None:
            raise ToolError(f"`{argv[0]}` not found", "mount npu-smi")
        if argv[1:] == ["info", "-m"]:
            return ToolResult(tuple(argv), 0, mapping, "")
        if argv[1:4] == ["info", "-t", "spod-info"]:
            key = (int(argv[5]), int(argv[7]))
            if key in spod:
                return ToolResult(tuple(argv), 0, spod[key], "")
            return ToolResult(tuple(argv), 255, "", "Error: not supported\n")
        raise AssertionError(argv)
    return run


def a3_answers(pod: int = 1, base: int = 0) -> dict[tuple[int, int], str]:
    return {(d // 2, d % 2): f"\tSDID                           : {base + d}\n"
                             f"\tSuper Pod ID                   : {pod}\n" for d in range(16)}


def test_a3_node_reports_its_super_pod_and_every_sdid() -> None:
    calls: list[tuple[str, ...]] = []
    probe = query_super_pod(tuple(range(16)), NPU_SMI, 5.0, required=False,
                            runner=fake_npu_smi(A3_MAP, a3_answers(3, 200), calls))
    assert probe.super_pod is not None
    assert probe.super_pod.super_pod_id == "3"
    assert dict(probe.super_pod.sdids) == {d: 200 + d for d in range(16)}
    assert (NPU_SMI, "info", "-t", "spod-info", "-i", "7", "-c", "1") in calls
    assert len(calls) == 17  # info -m + one spod-info per device


def test_a_partial_a3_allocation_asks_only_its_devices() -> None:
    calls: list[tuple[str, ...]] = []
    probe = query_super_pod((4, 5), NPU_SMI, 5.0, required=True,
                            runner=fake_npu_smi(A3_MAP, a3_answers(), calls))
    assert probe.super_pod is not None and dict(probe.super_pod.sdids) == {4: 4, 5: 5}
    assert [c[5:] for c in calls[1:]] == [("2", "-c", "0"), ("2", "-c", "1")]


def test_a2_node_is_not_in_a_super_pod_after_two_calls(
    hccn_capture: Callable[[str], dict[str, str]]
) -> None:
    calls: list[tuple[str, ...]] = []
    mapping = hccn_capture("kg-npu_info.txt")["npu-smi info -m"]
    probe = query_super_pod(tuple(range(8)), NPU_SMI, 5.0, required=False,
                            runner=fake_npu_smi(mapping, {}, calls))
    assert probe.super_pod is None
    assert probe.note.startswith("device 0: `/usr/local/bin/npu-smi info -t spod-info -i 0 "
                                 "-c 0` printed no SDID (exit 255")
    assert len(calls) == 2


def test_no_npu_smi_means_no_super_pod_unless_1_2_is_required() -> None:
    calls: list[tuple[str, ...]] = []
    probe = query_super_pod((0, 1), NPU_SMI, 5.0, required=False,
                            runner=fake_npu_smi(None, {}, calls))
    assert probe.super_pod is None and "not found" in probe.note
    with pytest.raises(DeviceError, match=r"^--table-version 1\.2, but `/usr/local/bin/npu-smi` "
                                          "not found"):
        query_super_pod((0, 1), NPU_SMI, 5.0, required=True, runner=fake_npu_smi(None, {}, []))


def test_table_version_1_2_on_an_a2_node_names_device_and_output(
    hccn_capture: Callable[[str], dict[str, str]]
) -> None:
    mapping = hccn_capture("kg-npu_info.txt")["npu-smi info -m"]
    with pytest.raises(DeviceError) as err:
        query_super_pod(tuple(range(8)), NPU_SMI, 5.0, required=True,
                        runner=fake_npu_smi(mapping, {}, []))
    assert err.value.cause == (
        "--table-version 1.2, but device 0: `/usr/local/bin/npu-smi info -t spod-info -i 0 "
        "-c 0` printed no SDID (exit 255: 'Error: not supported')")


def test_one_device_without_sdid_on_an_a3_node_is_refused_by_name() -> None:
    answers = a3_answers()
    answers[(5, 1)] = "\tSuper Pod ID                   : 1\n"
    with pytest.raises(DeviceError, match=r"^device 11: `/usr/local/bin/npu-smi info -t "
                                          r"spod-info -i 5 -c 1` printed no SDID"):
        query_super_pod(tuple(range(16)), NPU_SMI, 5.0, required=False,
                        runner=fake_npu_smi(A3_MAP, answers, []))
    answers = a3_answers()
    del answers[(2, 0)]
    with pytest.raises(DeviceError, match=r"^device 4: `/usr/local/bin/npu-smi info -t "
                                          r"spod-info -i 2 -c 0` printed no SDID"):
        query_super_pod(tuple(range(16)), NPU_SMI, 5.0, required=False,
                        runner=fake_npu_smi(A3_MAP, answers, []))


def test_a_device_missing_from_info_m_is_named() -> None:
    with pytest.raises(DeviceError, match=r"^device 20: `/usr/local/bin/npu-smi info -m` lists "
                                          r"no chip with that physical id"):
        query_super_pod((0, 20), NPU_SMI, 5.0, required=False,
                        runner=fake_npu_smi(A3_MAP, a3_answers(), []))
