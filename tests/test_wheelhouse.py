"""The offline wheelhouse really installs the agent with no package index.

`test_wheelhouse_installs_offline` needs the package registry to *build* the wheelhouse
(it is marked `wheelhouse`; ~30 s). The install itself runs with `--no-index`, in a fresh
venv, from a directory outside the source tree, so nothing can leak in from the repo.
The other tests check the pip command lines without any network.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "wheelhouse"


def _load_script() -> Any:
    loader = importlib.machinery.SourceFileLoader("wheelhouse_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.parametrize(
    "arch,glibc,expected",
    [
        ("x86_64", "2.17", ["manylinux2014_x86_64", "manylinux_2_17_x86_64"]),
        ("aarch64", "2.17", ["manylinux2014_aarch64", "manylinux_2_17_aarch64"]),
        ("aarch64", "2.19", ["manylinux2014_aarch64", "manylinux_2_17_aarch64",
                             "manylinux_2_18_aarch64", "manylinux_2_19_aarch64"]),
    ],
)
def test_platform_tags_oldest_first(arch, glibc, expected) -> None:
    assert _load_script().manylinux_platforms(arch, glibc) == expected


@pytest.mark.parametrize("glibc", ["2.12", "3.0"])
def test_glibc_floor_is_manylinux2014(glibc) -> None:
    with pytest.raises(SystemExit, match=re.escape(f"--glibc {glibc}")):
        _load_script().manylinux_platforms("x86_64", glibc)


def test_download_is_binary_only_for_the_exact_target(tmp_path) -> None:
    wheel = tmp_path / "ascend_node-0.1.0-py3-none-any.whl"
    argv = _load_script().download_argv(["pip"], wheel, tmp_path / "out", "aarch64", "3.10",
                                        "2.17")
    assert argv[:2] == ["pip", "download"]
    assert "--only-binary=:all:" in argv
    pairs = list(zip(argv, argv[1:]))
    assert ("--implementation", "cp") in pairs
    assert ("--python-version", "3.10") in pairs
    assert {b for a, b in pairs if a == "--abi"} == {"cp310", "abi3", "none"}
    assert {b for a, b in pairs if a == "--platform"} == {"manylinux2014_aarch64",
                                                          "manylinux_2_17_aarch64"}
    # Dependencies come from the agent wheel's own metadata, not from a second list.
    assert argv[-1] == str(wheel)


def test_unknown_python_is_refused(tmp_path) -> None:
    with pytest.raises(SystemExit, match=re.escape("--python 3.8")):
        _load_script().main(["--python", "3.8", "--out", str(tmp_path)])


@pytest.mark.wheelhouse
def test_wheelhouse_installs_offline(tmp_path) -> None:
    wh = tmp_path / "wheelhouse"
    build = subprocess.run(
        [sys.executable, str(SCRIPT), "--current", "--out", str(wh)],
        capture_output=True, text=True, timeout=600, env=_clean_env(), cwd=tmp_path,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]

    files = sorted(p.name for p in wh.iterdir())
    assert "SHA256SUMS" in files
    wheels = [f for f in files if f != "SHA256SUMS"]
    assert wheels and all(f.endswith(".whl") for f in wheels), files  # binary only
    assert any(f.startswith("ascend_node-") for f in wheels)
    sums = dict(reversed(line.split("  ", 1))
                for line in (wh / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == wheels
    for name, digest in sums.items():
        assert hashlib.sha256((wh / name).read_bytes()).hexdigest() == digest

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300,
                   env=_clean_env())
    py = venv / "bin" / "python"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-index", "--find-links", str(wh),
         "ascend-node"],
        capture_output=True, text=True, timeout=300, env=_clean_env(), cwd=tmp_path,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    probe = subprocess.run(
        [str(py), "-c",
         "import ascend_node, pydantic, typer, psutil; print(ascend_node.__file__)"],
        capture_output=True, text=True, timeout=120, env=_clean_env(), cwd=tmp_path,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).resolve().is_relative_to(venv.resolve())

    cli = subprocess.run([str(venv / "bin" / "ascend-node"), "--help"], capture_output=True,
                         text=True, timeout=120, env=_clean_env(), cwd=tmp_path, check=False)
    assert cli.returncode == 0, cli.stderr
    assert "Usage" in cli.stdout
