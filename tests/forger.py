"""A writer on the shared volume that is not part of the job, for the forgery tests.

It knows only what anyone who mounts the volume can see: the documents' public shapes
(JSON), never the job's key. Every action happens at a protocol moment the test names
(`wait_for_slots`, `wait_for_outcome`, ...), never after a sleep, so each scenario plays
out the same on a loaded machine. `hold` re-plants a document whenever it is replaced,
from a thread, until `stop()`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

Doc = dict[str, Any]


class Forger:
    def __init__(self, shared: Path, run_id: str = "t") -> None:
        self.root = shared / ".ascend-node" / run_id
        self.run_id = run_id
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.planted = 0  # how many times `hold` (re)planted its document

    # ------------------------------------------------------------------ watching

    def _until(self, cond: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        end = time.monotonic() + timeout
        while True:
            got = cond()
            if got:
                return got
            if time.monotonic() > end:
                raise AssertionError(f"forger: timed out waiting for {what}")
            time.sleep(0.02)

    def attempt_id(self) -> str:
        doc = self._until(lambda: self.read(self.root / "attempt.json"), "attempt.json")
        return str(doc["attempt_id"])

    def slot_path(self, index: int) -> Path:
        return self.root / "attempts" / self.attempt_id() / f"node-{index}.json"

    @property
    def outcome_path(self) -> Path:
        return self.root / "attempts" / self.attempt_id() / "outcome.json"

    def read(self, path: Path) -> Optional[Doc]:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def wait_for_slots(self, indices: list[int]) -> dict[int, Doc]:
        """Until every slot in `indices` holds a member document; returns them."""
        def ready() -> Optional[dict[int, Doc]]:
            docs = {i: self.read(self.slot_path(i)) for i in indices}
            if all(d is not None and d.get("kind") == "member" for d in docs.values()):
                return {i: d for i, d in docs.items() if d is not None}
            return None
        return self._until(ready, f"the slots of nodes {indices}")  # type: ignore[no-any-return]

    def wait_for_outcome(self, where: Optional[Path] = None) -> Doc:
        path = where or self.outcome_path
        return self._until(lambda: self.read(path), f"{path}")  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ forging

    def plant(self, path: Path, doc: Doc) -> None:
        """Replace `path` atomically (rename), as the agent itself writes."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".forger-{os.getpid()}-{threading.get_ident()}"
        temp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        os.replace(temp, path)

    def hold(self, path: Path, doc: Doc) -> None:
        """Plant `doc` at `path` now and whenever something else replaces it."""
        text = json.dumps(doc, separators=(",", ":")) + "\n"

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    current = path.read_text()
                except OSError:
                    current = None
                if current != text:
                    self.plant(path, doc)
                    self.planted += 1
                time.sleep(0.005)

        self.plant(path, doc)
        self.planted += 1
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    # ------------------------------------------------------------------ documents

    @staticmethod
    def with_table(outcome: Doc, edit: Callable[[Doc], None]) -> Doc:
        """`outcome` with its table text edited by `edit` and the sha256 recomputed:
        every other field exactly as it was."""
        table = json.loads(outcome["ranktable_text"])
        edit(table)
        text = json.dumps(table, indent=2)
        return {**outcome, "ranktable_text": text,
                "ranktable_sha256": hashlib.sha256(text.encode()).hexdigest()}

    @staticmethod
    def retarget_devices(server_index: int, prefix: str = "192.0.2.") -> Callable[[Doc], None]:
        """An edit that moves one server's device IPs to `prefix` (TEST-NET-1)."""
        def edit(table: Doc) -> None:
            for n, dev in enumerate(table["server_list"][server_index]["device"]):
                dev["device_ip"] = f"{prefix}{10 + n}"
        return edit

    def outcome_from_slots(self, slots: dict[int, Doc], node_count: int,
                           edit: Optional[Callable[[Doc], None]] = None) -> Doc:
        """A table outcome built from the slots as node 0 would (v1.0, host IPs as
        server ids), optionally edited: the real members' incarnations and digests."""
        servers, next_rank = [], 0
        for i in range(node_count):
            data = slots[i]["data"]
            devices = sorted(data["devices"], key=lambda d: d["device_id"])
            servers.append({"server_id": data["host_ip"], "container_ip": data["pod_ip"],
                            "device": [{"device_id": str(d["device_id"]),
                                        "device_ip": d["device_ip"],
                                        "rank_id": str(next_rank + n)}
                                       for n, d in enumerate(devices)]})
            next_rank += len(devices)
        table = {"version": "1.0", "status": "completed", "server_count": str(node_count),
                 "server_list": servers}
        if edit is not None:
            edit(table)
        text = json.dumps(table, indent=2)
        return {
            "schema_version": 1, "run_id": self.run_id, "kind": "outcome",
            "attempt_id": self.attempt_id(), "result": "table",
            "members": [{"global_index": i, "incarnation": slots[i]["incarnation"],
                         "digest": digest(slots[i]["data"])} for i in range(node_count)],
            "ranktable_text": text, "ranktable_sha256": hashlib.sha256(text.encode()).hexdigest(),
        }

    def member_for(self, index: int, template: Doc, pod_ip: str) -> Doc:
        """A member document for node `index` (not arrived), shaped like `template`."""
        data = json.loads(json.dumps(template["data"]))
        data.update(global_index=index, task_index=index - 1, pod_ip=pod_ip,
                    host_ip=pod_ip.replace("10.", "10.99.", 1))
        for dev in data["devices"]:
            dev["device_ip"] = f"192.0.2.{100 + index * 8 + dev['device_id']}"
        doc = {k: v for k, v in template.items() if k != "auth"}  # it has no key
        return {**doc, "incarnation": f"forged-{index}", "data": data,
                "contested": False, "health": None}


def digest(data: Doc) -> str:
    """`MemberData.digest()` from the public shape: sorted compact JSON, nulls dropped."""
    def drop_none(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop_none(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [drop_none(v) for v in value]
        return value
    text = json.dumps(drop_none(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
