"""Install the `atb_llm` wheel (ATB-Models' Python package) offline, once per wheel.

Platforms unpack the `Ascend-mindie-atb-models_*.tar.gz` onto the image or the shared
model storage and expect `pip install atb_llm-*.whl` before MindIE starts. We do it
with the interpreter that will run the server, without network, and only when needed:

- **Identity is the sha256, not the version.** Every atb_llm wheel is version 0.0.1
  (its setup script hard-codes it), so a rebuilt wheel from a newer ATB-Models looks
  "already satisfied" to pip. We keep a marker (`<state-dir>/atb_llm-wheel.json`)
  with the sha256 we installed and skip only when the marker matches this wheel AND
  `importlib.metadata` in the target interpreter still reports that version (the
  marker alone would lie after a `pip uninstall` or a fresh container layer).
- **`--force-reinstall`** so that a different wheel with the same version replaces
  the installed files.
- **`--no-deps`**: the wheel's requirements (torch, torch_npu, CANN's Python bits)
  are provided by the vendor image and are not on any offline index; letting pip
  resolve them would fail offline or, worse, replace the image's torch. Together
  with `--no-index` nothing is ever fetched. (`--find-links` is then pointless.)
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import sys
import sysconfig
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ascend_node.atomic import atomic_write_text
from ascend_node.errors import ConfigError, ToolError
from ascend_node.rendezvous.volume_call import call
from ascend_node.tools import run_tool

WHEEL_DIR_ENV = "ASCEND_NODE_ATB_WHEEL_DIR"
DEFAULT_WHEEL_DIR = "/opt/package"
WHEEL_PATTERN = re.compile(r"atb_llm-[^-]+-.+\.whl")
MARKER_NAME = "atb_llm-wheel.json"
MARKER_SCHEMA = 1
DEFAULT_PIP_TIMEOUT = 600.0
_QUERY_TIMEOUT = 60.0
# pip >= 23 refuses to install into an interpreter its distribution marks as externally
# managed (PEP 668: Debian 12, Ubuntu 23.04+ system Pythons). The wheel must go into
# exactly the interpreter that runs MindIE, as the vendor's own `pip install
# atb_llm-*.whl` does, so the check is switched off for this call (older pips ignore it).
PIP_ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1"}
_PIP_TAIL = 5

# Asks the target interpreter (not ours) which version of a distribution it sees.
_VERSION_QUERY = """
import sys
try:
    from importlib.metadata import PackageNotFoundError, version
except ImportError:
    sys.exit(2)
try:
    print(version(sys.argv[1]))
except PackageNotFoundError:
    sys.exit(3)
"""


@dataclass(frozen=True)
class WheelInfo:
    path: str
    name: str  # distribution name as in the file name (atb_llm)
    version: str
    sha256: str


@dataclass(frozen=True)
class WheelInstallResult:
    wheel: WheelInfo
    python: str
    pip_ran: bool
    reason: str  # why pip ran, or why not
    pip_argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # what the server needs to find it


def wheel_dirs_from_env(environ: Mapping[str, str]) -> list[str]:
    """`ASCEND_NODE_ATB_WHEEL_DIR` (os.pathsep list), else `/opt/package`."""
    raw = environ.get(WHEEL_DIR_ENV, "").strip()
    if not raw:
        return [DEFAULT_WHEEL_DIR]
    return [d.strip() for d in raw.split(os.pathsep) if d.strip()]


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_wheel(path: str) -> WheelInfo:
    """Name and version (from the wheel's METADATA) and sha256 of a wheel file (marked as
    a call on the volume: the wheel may sit on the shared one, `volume_call`)."""
    with call("read", path):
        return _read_wheel(path)


def _read_wheel(path: str) -> WheelInfo:
    try:
        with zipfile.ZipFile(path) as archive:
            metadata_names = [
                n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)
            ]
            if len(metadata_names) != 1:
                raise ConfigError(f"{path} is not a valid wheel (no single .dist-info/METADATA)")
            text = archive.read(metadata_names[0]).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(
            f"{path} is not a valid wheel: {exc}",
            "re-extract the ATB-Models package; the file may be truncated",
        ) from None
    headers = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = headers.get("Name", ""), headers.get("Version", "")
    if re.sub(r"[-_.]+", "_", name).lower() != "atb_llm" or not version:
        raise ConfigError(f"{path} is not an atb_llm wheel (Name: {name!r}, Version: {version!r})")
    dist_name = os.path.basename(path).split("-", 1)[0]
    return WheelInfo(path=path, name=dist_name, version=version, sha256=_sha256(path))


def find_atb_wheels(dirs: Sequence[str]) -> list[str]:
    """Every `atb_llm-*.whl` file directly in `dirs` (missing dirs are skipped), sorted."""
    found: list[str] = []
    for directory in dirs:
        try:
            with call("list", directory):
                names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ConfigError(f"cannot list wheel directory {directory}: {exc.strerror}") from None
        for name in names:
            path = os.path.join(directory, name)
            if WHEEL_PATTERN.fullmatch(name):
                with call("inspect", path):
                    if os.path.isfile(path):
                        found.append(path)
    return found


def find_atb_wheel(dirs: Sequence[str]) -> WheelInfo:
    """The one atb_llm wheel in `dirs`. Identical copies (same sha256) count once;
    none, or different wheels, is a ConfigError listing what was searched/found."""
    paths = find_atb_wheels(dirs)
    if not paths:
        searched = ", ".join(d if os.path.isdir(d) else f"{d} (missing)" for d in dirs)
        raise ConfigError(
            f"no atb_llm-*.whl in {searched}",
            f"set {WHEEL_DIR_ENV} to the directory of the extracted "
            "Ascend-mindie-atb-models package",
        )
    distinct: dict[str, WheelInfo] = {}
    for path in paths:
        info = read_wheel(path)
        distinct.setdefault(info.sha256, info)
    if len(distinct) > 1:
        listed = ", ".join(info.path for info in distinct.values())
        raise ConfigError(
            f"{len(distinct)} different atb_llm wheels found: {listed}",
            f"keep one, or set {WHEEL_DIR_ENV} to the directory holding the right one",
        )
    return next(iter(distinct.values()))


def private_lib_for(python: str, state_dir: str) -> Optional[str]:
    """Where the wheel goes when this agent cannot write its interpreter's site-packages.

    A non-root image (MindIE's run as uid 1001) owns neither site-packages nor, often, a
    home directory (HOME=/): pip's own fallback, a user install under ~/.local, then fails
    with `Permission denied: '/.local'` (and a venv has no user site at all). The wheel then
    goes into a directory under the state dir (`pip --target`), which this uid can write,
    and the server is given it first on `PYTHONPATH`. None when site-packages is writable,
    or for another interpreter than the agent's (it cannot be asked without running it)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    if os.access(sysconfig.get_paths()["purelib"], os.W_OK):
        return None
    return os.path.join(state_dir, "python-lib")


def _path_env(private_lib: Optional[str]) -> dict[str, str]:
    if private_lib is None:
        return {}
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": private_lib + (os.pathsep + rest if rest else "")}


def installed_version(python: str, dist_name: str,
                      env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The version of `dist_name` that `python` sees, or None when it has none."""
    try:
        result = run_tool([python, "-c", _VERSION_QUERY, dist_name], timeout=_QUERY_TIMEOUT,
                          env={**os.environ, **env} if env else None)
    except ToolError as exc:
        raise ToolError(
            f"cannot run the Python that should get atb_llm ({python}): {exc.cause}",
            "point it at the interpreter that runs MindIE",
        ) from None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def _marker_path(state_dir: str) -> str:
    return os.path.join(state_dir, MARKER_NAME)


def _read_marker(state_dir: str) -> Optional[dict[str, Any]]:
    try:
        with open(_marker_path(state_dir), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None  # absent or unreadable: reinstalling is always safe
    if not isinstance(data, dict) or data.get("schema_version") != MARKER_SCHEMA:
        return None
    return data


def _write_marker(state_dir: str, wheel: WheelInfo, python: str) -> None:
    record = {
        "schema_version": MARKER_SCHEMA,
        "name": wheel.name,
        "version": wheel.version,
        "sha256": wheel.sha256,
        "wheel": wheel.path,
        "python": python,
    }
    try:
        os.makedirs(state_dir, mode=0o750, exist_ok=True)
        atomic_write_text(_marker_path(state_dir), json.dumps(record, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(
            f"cannot write {_marker_path(state_dir)}: {exc.strerror or exc}",
            "make the state dir writable (--state-dir / ASCEND_NODE_STATE_DIR)",
        ) from None


def _drop_marker(state_dir: str) -> None:
    try:
        os.unlink(_marker_path(state_dir))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(
            f"cannot remove {_marker_path(state_dir)}: {exc.strerror}",
            "make the state dir writable (--state-dir / ASCEND_NODE_STATE_DIR)",
        ) from None


def pip_argv(python: str, wheel_path: str) -> list[str]:
    """The exact pip command we run (see the module docstring for each flag)."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--force-reinstall",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-input",
        wheel_path,
    ]


def _tail(result_stdout: str, result_stderr: str) -> str:
    lines = [line.rstrip() for line in result_stderr.splitlines() if line.strip()]
    if not lines:
        lines = [line.rstrip() for line in result_stdout.splitlines() if line.strip()]
    return " | ".join(lines[-_PIP_TAIL:]) or "(no output)"


def install_atb_wheel(
    dirs: Sequence[str],
    state_dir: str,
    *,
    python: str = sys.executable,
    timeout: float = DEFAULT_PIP_TIMEOUT,
    required: bool = True,
) -> Optional[WheelInstallResult]:
    """Install the single atb_llm wheel found in `dirs` into `python`, unless this
    exact wheel (sha256) is already installed there. With `required=False`, finding
    no wheel returns None instead of raising (images that ship atb_llm preinstalled)."""
    if not required and not find_atb_wheels(dirs):
        return None
    wheel = find_atb_wheel(dirs)
    private_lib = private_lib_for(python, state_dir)
    seen_env = _path_env(private_lib)
    marker = _read_marker(state_dir)
    if marker is None:
        reason = "no record of an earlier install"
    elif (marker.get("sha256"), marker.get("python")) != (wheel.sha256, python):
        reason = f"a different wheel was installed before (sha256 {marker.get('sha256')})"
    else:
        current = installed_version(python, wheel.name, seen_env)
        if current == wheel.version:
            return WheelInstallResult(wheel, python, False, "same wheel already installed",
                                      env=seen_env)
        reason = f"{wheel.name} {wheel.version} is no longer installed (found {current})"

    argv = pip_argv(python, wheel.path)
    if private_lib:
        argv[argv.index("install") + 1:argv.index("install") + 1] = ["--target", private_lib,
                                                                     "--upgrade"]
        reason += f"; site-packages is not writable for uid {os.getuid()}: into {private_lib}"
    _drop_marker(state_dir)  # never leave a marker claiming an install that failed
    try:
        result = run_tool(argv, timeout=timeout, env={**os.environ, **PIP_ENV, **seen_env})
    except ToolError as exc:
        if "did not finish" in exc.cause:
            raise ToolError(
                f"pip install {os.path.basename(wheel.path)} did not finish within {timeout:g} s",
                "pip may be waiting on a slow shared volume; check the wheel directory",
            ) from None
        raise ToolError(
            f"cannot run the Python that should get atb_llm ({python}): {exc.cause}",
            "point it at the interpreter that runs MindIE",
        ) from None
    if result.returncode != 0:
        raise ToolError(
            f"pip install {os.path.basename(wheel.path)} failed "
            f"(exit {result.returncode}): {_tail(result.stdout, result.stderr)}",
            f"run `PIP_BREAK_SYSTEM_PACKAGES=1 {' '.join(argv)}` by hand to see the whole output",
        )
    after = installed_version(python, wheel.name, seen_env)
    if after != wheel.version:
        raise ToolError(
            f"pip installed {os.path.basename(wheel.path)} but {python} sees "
            f"{wheel.name} {after} instead of {wheel.version}",
            "another atb_llm earlier on sys.path (PYTHONPATH, user site) shadows it",
        )
    _write_marker(state_dir, wheel, python)
    return WheelInstallResult(wheel, python, True, reason, tuple(argv), seen_env)
