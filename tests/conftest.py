"""Shared fixture: real hccn_tool / npu-smi captures, split into per-command blocks.

The captures in fixtures/hccn/ are a command line followed by what it printed. Tests
feed those blocks to the parsers and to pytest-subprocess fakes, so every faked tool
speaks the format a real driver printed, not one we imagined.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from tests.kube_bed import Bed
from tests.kube_bed import open_bed as open_kube_bed
from tests.netns_bed import Netns, open_bed
from tests.nobody_python import build, open_temp_dir

HCCN_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hccn"

# A command line in a capture: a vendor binary by path (one capture drops the leading
# slash) or one of the shell commands the collection script ran.
_COMMAND = re.compile(r"^(?:/?usr/local/\S+|cat|pip|lspci)(?:\s.*)?$")


def split_capture(text: str) -> dict[str, str]:
    """{"hccn_tool -i 0 -ip -g": "ipaddr:...\\nnetmask:...\\n", ...}, first occurrence wins.

    Keys name the binary without its directory; a block keeps its lines verbatim
    (tabs included), drops trailing blank lines, and ends with a newline unless empty.
    """
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if _COMMAND.match(line):
            binary, _, args = line.partition(" ")
            key = " ".join([binary.rsplit("/", 1)[-1], *args.split()])
            current = [] if key in blocks else blocks.setdefault(key, [])
            continue
        if current is not None:
            current.append(line)
    out = {}
    for key, lines in blocks.items():
        while lines and not lines[-1].strip():
            lines.pop()
        out[key] = "\n".join(lines) + "\n" if lines else ""
    return out


@pytest.fixture(scope="session")
def hccn_capture() -> Callable[[str], dict[str, str]]:
    """`hccn_capture("kg-npu_info.txt")["npu-smi info -m"]` -> what that command printed."""
    cache: dict[str, dict[str, str]] = {}

    def load(name: str) -> dict[str, str]:
        if name not in cache:
            cache[name] = split_capture((HCCN_FIXTURES / name).read_text(encoding="utf-8"))
        return cache[name]

    return load



@pytest.fixture
def netns(request: pytest.FixtureRequest) -> Netns:
    """Pods in their own network namespaces (tests/netns_bed.py); root only, else a skip."""
    return open_bed(request)


@pytest.fixture(scope="session")
def nobody_python() -> Iterator[Path]:
    """A root-owned venv under an open temp dir, with this checkout's agent, that uid 65534
    can run wherever the checkout lives (tests/nobody_python.py; issue 40). Root and
    setpriv only, else a skip; so is a machine with no Python uid 65534 may read."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("runs the agent as another uid (root, setpriv)")
    root = open_temp_dir("ascend-node-nobody-py-")
    if isinstance(root, str):
        pytest.skip(root)
    try:
        python = build(root)
        if isinstance(python, str):
            pytest.skip(python)
        yield python
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kube_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The real API server and Volcano on loopback with 4 fake nodes (tests/kube_bed.py);
    built on first use, skipped (saying why) without Go or openssl."""
    yield from open_kube_bed(tmp_path_factory)


# The suite runs side by side in pytest-xdist workers (`-n 4 --dist loadgroup`, the
# README's test command): most of its wall time is waiting on real substrates (a pod's
# timeout, a UML guest's boot, an API server's watch), not CPU. What may share a worker is
# decided here, not left to chance:
# * the tests of one real substrate stay in one worker, in their order, as when the suite
#   ran in one process: the container bed's work directory is held by one process at a time
#   (scripts/container_bed.py `lock`), and the kube bed's node agent and its real kubelet
#   run their pods with it, so every `containers` test is one group; the kube bed's other
#   tests (no pod runs: the test writes the pods' states) share one control plane in a
#   second group; the NFS guests share one multicast wire (tests/nfs_bed.py MCAST); the
#   launchers' torch venv and Chromium are one each;
# * every other test stays with its module, so a module-scoped fixture (an API server of
#   its own, a built wheel) is set up once, as it is without xdist.
# The substrate groups are the longest, so they are queued first: a worker takes each as
# soon as the run starts instead of after the in-process modules.
_SUBSTRATE_GROUPS = (
    ("containers", "podman"), ("nfs", "nfs"), ("launchers", "launchers"),
    ("browser", "browser"), ("sshfs", "sshfs"),
)


def _xdist_group(item: pytest.Item) -> tuple[int, str]:
    for rank, (marker, group) in enumerate(_SUBSTRATE_GROUPS):
        if item.get_closest_marker(marker) is not None:
            return rank, group
    if "kube_bed" in getattr(item, "fixturenames", ()):
        return 0, "kube"
    return len(_SUBSTRATE_GROUPS), item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ranks: dict[int, int] = {}
    for index, item in enumerate(items):
        rank, group = _xdist_group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        ranks[id(item)] = rank * len(items) + index
    items.sort(key=lambda item: ranks[id(item)])


def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """A worker whose groups did not take would run one substrate in two workers at once:
    refuse that loudly rather than let the second wait out the first and skip. (Called in
    the xdist controller with each worker's collected ids.)"""
    ungrouped = [nodeid for nodeid in ids if "@" not in nodeid.rpartition("]")[2]
                 and "@" not in nodeid.rpartition("::")[2]]
    if ungrouped and getattr(getattr(node, "config", None), "getvalue", lambda _: None)(
            "dist") == "loadgroup":
        pytest.exit(
            f"pytest-xdist did not group {ungrouped[0]} (and {len(ungrouped) - 1} more): "
            "this pytest breaks `--dist loadgroup` (pytest-dev/pytest-xdist#1386); install "
            "the versions pyproject.toml's test extra allows", returncode=4)
