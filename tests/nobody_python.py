"""An interpreter with this checkout's agent installed that uid 65534 can run (issue 40).

The non-root tests start the agent as uid 65534 (setpriv). Started from the checkout's own
venv, the agent is only importable where every directory above the checkout lets other
users in: a clone under a 0700 directory (`mktemp -d`, root's home) gave `No module named
ascend_node` and every later assertion failed on the wrong cause. So those tests run the
agent from a venv of their own, under a world-readable directory of /tmp, the way an image
carries it: a root-owned venv (site-packages not writable by the agent) holding a copy of
this checkout's `ascend_node` package and the installed files of the distributions it
requires (plus pip, which `handoff.install` runs).

Why a copy and not a built wheel: building one needs the build backend with its wheel
support (setuptools < 70.1 needs the `wheel` package, a 3.12 venv has no setuptools at
all), i.e. the package registry; copying the files pip already installed needs nothing and
takes about a second. The venv's base interpreter must be one uid 65534 can read in full
(its stdlib included) and of this Python's X.Y, since pydantic-core and psutil are
compiled for it: this interpreter's own base when it is open to others, else
/usr/bin/python3.X or /usr/local/bin/python3.X.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Optional, Union

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def closed_dir(path: Path) -> Optional[Path]:
    """The first directory on the way to `path` (itself included, when a directory) that
    users other than its owner may not enter, or None when all let them in.

    Group bits are not consulted: uid 65534 is in no group a file here belongs to. A
    missing directory counts as closed (nobody can reach what is not there)."""
    path = Path(os.path.realpath(path))
    for directory in [*reversed(path.parents), path]:
        try:
            mode = directory.stat().st_mode
        except OSError:
            return directory
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return directory
    return None


def _prefix_of(python: str) -> Optional[Path]:
    done = subprocess.run([python, "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True, timeout=60)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def base_interpreter() -> Union[Path, str]:
    """This Python's X.Y that uid 65534 can run with its stdlib, else why there is none."""
    own = getattr(sys, "_base_executable", None) or sys.executable
    xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [own, f"/usr/bin/python{xy}", f"/usr/local/bin/python{xy}"]
    reasons = []
    for candidate in candidates:
        if not os.access(candidate, os.X_OK):
            continue
        prefix = _prefix_of(candidate)
        if prefix is None:
            continue
        closed = closed_dir(Path(candidate)) or closed_dir(prefix)
        if closed is None:
            return Path(candidate)
        reasons.append(f"{candidate} (Python in {prefix}): directory {closed} is closed to "
                       "other users")
    return (f"no Python {xy} that uid {NOBODY} can run: "
            + ("; ".join(reasons) or "none of " + ", ".join(candidates) + " exists"))


def requirement_closure(name: str) -> list[metadata.Distribution]:
    """The installed distributions `name` needs to run (its extras left out), itself first."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonicalize_name(todo.pop(0))
        if key in seen:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def _copy_installed(dist: metadata.Distribution, site: Path) -> None:
    """The files pip installed for `dist` under site-packages (its RECORD), bytecode and
    anything outside site-packages (console scripts) left out."""
    for entry in dist.files or []:
        parts = Path(str(entry)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts:
            continue
        source = Path(str(dist.locate_file(entry)))
        if not source.is_file():
            continue
        target = site.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c",
                          "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return Path(out.strip())


def build(root: Path) -> Union[Path, str]:
    """Make `root/venv` (root must be world-readable) and return its python, or the
    reason no interpreter fits (the caller skips with it). Anything else going wrong is
    an error, not a skip: a skip here would hide every non-root test."""
    base = base_interpreter()
    if isinstance(base, str):
        return base
    venv = root / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = _site_packages(python)
    # This checkout's package, as its wheel would carry it (package data included).
    shutil.copytree(ROOT / "ascend_node", site / "ascend_node",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for dist in requirement_closure("ascend-node") + requirement_closure("pip"):
        if canonicalize_name(dist.metadata["Name"]) != "ascend-node":
            _copy_installed(dist, site)
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
    probe = subprocess.run(
        [*AS_NOBODY, str(python), "-c", "import ascend_node.cli, pip; print(ascend_node.__file__)"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"})
    where = probe.stdout.strip()
    if probe.returncode != 0 or not where.startswith(str(site)):
        raise RuntimeError(f"uid {NOBODY} cannot import the agent from {venv}: "
                           f"{probe.stderr.strip() or where}")
    return python


def open_temp_dir(prefix: str) -> Union[Path, str]:
    """A fresh directory under the system temp dir that other users may enter, or why
    there is none (a TMPDIR under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    closed = closed_dir(path)
    if closed is None:
        return path
    shutil.rmtree(path, ignore_errors=True)
    return (f"temp directory {closed} is closed to other users (set TMPDIR to one they "
            "may enter)")
