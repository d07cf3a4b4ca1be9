"""Where scripts/ci-setup-launchers put the real launchers, or why they are not there.

Each launcher lives in its own venv, cached under
`${ASCEND_NODE_LAUNCHERS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/ascend-node-launchers}/`
as `<name>-<version>-py<X.Y>-<machine>/`, usable once its `.ready` file exists. The
versions come from scripts/launcher-versions, the one place that names them.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Optional, Union

ROOT = Path(__file__).resolve().parents[1]
VERSIONS_FILE = ROOT / "scripts" / "launcher-versions"
SETUP = "scripts/ci-setup-launchers"


def versions() -> dict[str, str]:
    """{"MINDSPORE_VERSION": "2.10.0", ...} from scripts/launcher-versions."""
    out = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


def cache_dir() -> Path:
    explicit = os.environ.get("ASCEND_NODE_LAUNCHERS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-node-launchers"


def _tag() -> str:
    return f"py{sys.version_info[0]}.{sys.version_info[1]}-{platform.machine()}"


def find_venv(name: str, versions_to_try: list[str]) -> Union[Path, str]:
    """The first ready venv among `name-<version>`, else the reason none is (for a skip)."""
    reasons = []
    for version in versions_to_try:
        entry = cache_dir() / f"{name}-{version}-{_tag()}"
        if (entry / ".ready").is_file():
            return entry
        why = entry.with_name(entry.name + ".why")
        reasons.append(why.read_text().strip() if why.is_file() else f"{entry} is not installed")
    return f"{'; '.join(reasons)} (run `sh {SETUP}` as root)"


def mindspore_venv() -> Union[Path, str]:
    return find_venv("mindspore", [versions()["MINDSPORE_VERSION"]])


def torch_venv() -> Union[Path, str]:
    """The CPU build (from pip's find-links) first, else PyPI's build of the same release
    with its CUDA libraries, which scripts/ci-setup-launchers installs where the CPU wheel
    is not to be had."""
    version = versions()["TORCH_VERSION"]
    plain: Optional[str] = version.split("+", 1)[0] if "+" in version else None
    return find_venv("torch", [version] + ([plain] if plain else []))
