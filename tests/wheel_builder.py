"""Build real (tiny) wheels for the installer tests, by hand with zipfile.

A wheel is a zip with the package files plus `<name>-<version>.dist-info/` holding
METADATA, WHEEL and RECORD (every file with its urlsafe-base64 sha256 and size).
pip validates all three, so these are what a real `atb_llm` wheel looks like to it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(
    directory: Path,
    *,
    version: str = "0.0.1",
    mark: str = "first",
    name: str = "atb_llm",
    tag: str = "py3-none-any",
    filename: str | None = None,
) -> Path:
    """Write `<name>-<version>-<tag>.whl` into `directory`; `atb_llm.MARK == mark`
    tells which build got installed (same version, different content = new sha256)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'MARK = "{mark}"\n__version__ = "{version}"\n'.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: test stand-in for ATB-Models' atb_llm\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: ascend-node-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
        ).encode(),
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (filename or f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for n, d in files.items():
            archive.writestr(n, d)
    return path
