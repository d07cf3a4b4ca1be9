"""Rank-table rules of the v1.2 ``super_pod_list`` (A3 SuperPoD)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ascend_node.ranktable.problems import Checker
from ascend_node.ranktable.values import NOT_DECIMAL, is_decimal, kind_of, show


class SuperPods:
    """v1.2 ``super_pod_list`` rules (A3 SuperPoD); inert for other versions."""

    def __init__(
        self, c: Checker, doc: Mapping[str, Any], version: Optional[str], servers: list[Any]
    ) -> None:
        self.c = c
        self.v12 = version == "1.2"
        self.present = self.v12 and "super_pod_list" in doc
        self.raw = doc.get("super_pod_list")
        self.servers = servers
        self.pod_of_server: dict[str, int] = {}
        self.pod_ids: list[str] = []
        self.count = 0
        self.sdids: dict[tuple[int, str], str] = {}

    def check_list(self) -> None:
        if not self.present:
            return
        c = self.c
        pods = self.raw
        if not isinstance(pods, list):
            c.add(
                "$.super_pod_list",
                f"super_pod_list must be a JSON array, got {kind_of(pods)} {show(pods)}",
            )
            self.present = False
            return
        if not pods:
            c.add("$.super_pod_list", "super_pod_list is empty")
            self.present = False
            return
        self.count = len(pods)
        seen_ids: dict[str, int] = {}
        for index, pod in enumerate(pods):
            path = f"$.super_pod_list[{index}]"
            if not isinstance(pod, Mapping):
                c.add(path, f"a super pod must be a JSON object, got {kind_of(pod)} {show(pod)}")
                continue
            pod_id = c.string(pod, "super_pod_id", path, required=True)
            if pod_id is not None:
                if not pod_id:
                    c.add(f"{path}.super_pod_id", "super_pod_id is empty")
                elif pod_id in seen_ids:
                    c.add(
                        f"{path}.super_pod_id",
                        f"super_pod_id {show(pod_id)} is also used by "
                        f"super_pod_list[{seen_ids[pod_id]}]",
                    )
                else:
                    seen_ids[pod_id] = index
            members = pod.get("server_list")
            if not isinstance(members, list) or not members:
                c.add(
                    f"{path}.server_list",
                    f"server_list of a super pod must be a non-empty JSON array, got "
                    f"{kind_of(members)} {show(members)}",
                )
                continue
            for m_index, member in enumerate(members):
                self.check_member(index, f"{path}.server_list[{m_index}]", member)

    def check_member(self, pod_index: int, path: str, member: Any) -> None:
        c = self.c
        if not isinstance(member, Mapping):
            c.add(path, f"a super pod member must be a JSON object, got {kind_of(member)}")
            return
        server_id = c.string(member, "server_id", path, required=True)
        if server_id is None:
            return
        if server_id in self.pod_of_server:
            c.add(
                f"{path}.server_id",
                f"server_id {show(server_id)} is already in "
                f"super_pod_list[{self.pod_of_server[server_id]}]",
            )
            return
        self.pod_of_server[server_id] = pod_index

    def check_membership(self, server_ids: dict[str, int]) -> None:
        """Every server in exactly one super pod, pods listed contiguously, no strangers."""
        if not self.present or self.count == 0:
            return
        c = self.c
        for server_id, pod_index in self.pod_of_server.items():
            if server_id not in server_ids:
                c.add(
                    f"$.super_pod_list[{pod_index}]",
                    f"server_id {show(server_id)} is not in the top-level server_list",
                )
        finished: set[int] = set()
        current: Optional[int] = None
        for server_id, index in sorted(server_ids.items(), key=lambda item: item[1]):
            pod = self.pod_of_server.get(server_id)
            if pod is None:
                c.add(
                    f"$.server_list[{index}]",
                    f"server {show(server_id)} is in no super pod of super_pod_list",
                )
                continue
            if pod != current:
                if pod in finished:
                    c.add(
                        f"$.server_list[{index}]",
                        f"server {show(server_id)} of super pod {pod} is not listed next to "
                        "the other servers of that super pod",
                    )
                if current is not None:
                    finished.add(current)
                current = pod

    def check_device(self, server_id: Optional[str], path: str, device: Mapping[str, Any]) -> None:
        if not self.v12:
            return
        c = self.c
        text = c.string(device, "super_device_id", path, required=self.present)
        if text is None:
            return
        if not is_decimal(text):
            c.add(
                f"{path}.super_device_id",
                f"super_device_id {show(text)} {NOT_DECIMAL}",
            )
            return
        if not self.present or server_id is None:
            return
        pod = self.pod_of_server.get(server_id)
        if pod is None:
            return
        key = (pod, text)
        if key in self.sdids:
            c.add(
                f"{path}.super_device_id",
                f"super_device_id {show(text)} is also used by {self.sdids[key]} in the same "
                "super pod",
            )
        else:
            self.sdids[key] = path
