"""Contract of ascend_node.handoff.install: a real wheel into a real venv, once per sha256."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_node.errors import ConfigError, ToolError
from ascend_node.handoff.install import (
    DEFAULT_WHEEL_DIR,
    MARKER_NAME,
    find_atb_wheel,
    install_atb_wheel,
    installed_version,
    pip_argv,
    read_wheel,
    wheel_dirs_from_env,
)

sys.path.insert(0, str(Path(__file__).parent))
from wheel_builder import build_wheel

from tests.nobody_python import open_temp_dir


@pytest.fixture(scope="session")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One real venv with pip for the whole session (creating one costs ~3 s)."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    return str(root / "bin" / "python")


@pytest.fixture
def python(venv_python: str) -> Iterator[str]:
    """The session venv with no atb_llm in it, before and after each test."""

    def scrub() -> None:
        site = subprocess.run(
            [venv_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for entry in Path(site).glob("atb_llm*"):
            shutil.rmtree(entry)

    scrub()
    yield venv_python
    scrub()


def mark_of(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import atb_llm; print(atb_llm.MARK)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout.strip()


def test_installs_once_then_skips(tmp_path: Path, python: str) -> None:
    wheel = build_wheel(tmp_path / "pkg")
    state = tmp_path / "state"

    first = install_atb_wheel([str(tmp_path / "pkg")], str(state), python=python)
    assert first is not None and first.pip_ran
    assert first.reason == "no record of an earlier install"
    assert first.pip_argv == tuple(pip_argv(python, str(wheel)))
    assert mark_of(python) == "first"
    marker = json.loads((state / MARKER_NAME).read_text())
    assert marker == {
        "schema_version": 1,
        "name": "atb_llm",
        "version": "0.0.1",
        "sha256": read_wheel(str(wheel)).sha256,
        "wheel": str(wheel),
        "python": python,
    }

    second = install_atb_wheel([str(tmp_path / "pkg")], str(state), python=python)
    assert second is not None
    assert (second.pip_ran, second.reason, second.pip_argv) == (
        False,
        "same wheel already installed",
        (),
    )


def test_rebuilt_wheel_with_the_same_version_replaces_the_old_one(
    tmp_path: Path, python: str
) -> None:
    pkg, state = tmp_path / "pkg", str(tmp_path / "state")
    build_wheel(pkg, mark="old-build")
    install_atb_wheel([str(pkg)], state, python=python)
    old_sha = json.loads((tmp_path / "state" / MARKER_NAME).read_text())["sha256"]

    build_wheel(pkg, mark="new-build")  # same file name, same version 0.0.1
    result = install_atb_wheel([str(pkg)], state, python=python)
    assert result is not None and result.pip_ran
    assert result.reason == f"a different wheel was installed before (sha256 {old_sha})"
    assert mark_of(python) == "new-build", "--force-reinstall must replace same-version files"


def test_marker_alone_is_not_trusted_when_the_package_is_gone(tmp_path: Path, python: str) -> None:
    pkg, state = tmp_path / "pkg", str(tmp_path / "state")
    build_wheel(pkg)
    install_atb_wheel([str(pkg)], state, python=python)
    subprocess.run(
        [python, "-m", "pip", "uninstall", "-y", "-q", "atb_llm"], check=True, capture_output=True
    )
    result = install_atb_wheel([str(pkg)], state, python=python)
    assert result is not None and result.pip_ran
    assert result.reason == "atb_llm 0.0.1 is no longer installed (found None)"
    assert installed_version(python, "atb_llm") == "0.0.1"


def test_pip_failure_names_the_wheel_and_quotes_pip(tmp_path: Path, python: str) -> None:
    pkg, state = tmp_path / "pkg", tmp_path / "state"
    build_wheel(pkg, tag="cp27-cp27m-win32")
    state.mkdir()
    (state / MARKER_NAME).write_text('{"schema_version": 1, "sha256": "stale"}')
    with pytest.raises(ToolError) as info:
        install_atb_wheel([str(pkg)], str(state), python=python)
    cause = info.value.cause
    assert cause.startswith("pip install atb_llm-0.0.1-cp27-cp27m-win32.whl failed (exit 1): ")
    assert "is not a supported wheel on this platform" in cause
    assert "--no-index --no-deps --force-reinstall" in info.value.hint
    assert not (state / MARKER_NAME).exists(), "a failed install leaves no marker"


@pytest.mark.parametrize("with_marker", [False, True])
def test_missing_python_is_a_tool_error(tmp_path: Path, with_marker: bool) -> None:
    wheel = build_wheel(tmp_path / "pkg")
    missing = str(tmp_path / "no-python")
    state = tmp_path / "state"
    if with_marker:  # then the installed version is queried first
        state.mkdir()
        record = {"schema_version": 1, "sha256": read_wheel(str(wheel)).sha256, "python": missing}
        (state / MARKER_NAME).write_text(json.dumps(record))
    with pytest.raises(
        ToolError, match=f"cannot run the Python that should get atb_llm \\({missing}\\)"
    ):
        install_atb_wheel([str(tmp_path / "pkg")], str(state), python=missing)


def test_several_directories_and_identical_copies(tmp_path: Path) -> None:
    a = build_wheel(tmp_path / "a")
    (tmp_path / "b").mkdir()
    shutil.copy(a, tmp_path / "b" / a.name)
    found = find_atb_wheel([str(tmp_path / "missing"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert found.path == str(a), "identical copies count once; the first listed wins"


def test_different_wheels_are_ambiguous(tmp_path: Path) -> None:
    a = build_wheel(tmp_path / "a", mark="one")
    b = build_wheel(tmp_path / "b", mark="two")
    with pytest.raises(ConfigError, match=f"2 different atb_llm wheels found: {a}, {b}"):
        find_atb_wheel([str(tmp_path / "a"), str(tmp_path / "b")])


def test_none_found_names_every_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "mindie_llm-1.0-py3-none-any.whl").write_text("x")
    with pytest.raises(ConfigError) as info:
        find_atb_wheel([str(tmp_path / "empty"), str(tmp_path / "gone")])
    assert info.value.cause == f"no atb_llm-*.whl in {tmp_path}/empty, {tmp_path}/gone (missing)"
    assert "ASCEND_NODE_ATB_WHEEL_DIR" in info.value.hint


def test_not_required_and_absent_returns_none(tmp_path: Path) -> None:
    assert install_atb_wheel([str(tmp_path)], str(tmp_path / "s"), required=False) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a zip", "is not a valid wheel"),
        (None, "is not an atb_llm wheel"),
    ],
)
def test_invalid_wheel_files(tmp_path: Path, content: bytes | None, message: str) -> None:
    if content is None:
        build_wheel(tmp_path, name="other_pkg", filename="atb_llm-0.0.1-py3-none-any.whl")
    else:
        (tmp_path / "atb_llm-0.0.1-py3-none-any.whl").write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        find_atb_wheel([str(tmp_path)])


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, [DEFAULT_WHEEL_DIR]),
        ({"ASCEND_NODE_ATB_WHEEL_DIR": "  "}, [DEFAULT_WHEEL_DIR]),
        ({"ASCEND_NODE_ATB_WHEEL_DIR": "/models/atb"}, ["/models/atb"]),
        (
            {"ASCEND_NODE_ATB_WHEEL_DIR": f"/a{os.pathsep}/b{os.pathsep}"},
            ["/a", "/b"],
        ),
    ],
)
def test_wheel_dirs_from_env(environ: dict[str, str], expected: list[str]) -> None:
    assert wheel_dirs_from_env(environ) == expected


def test_pip_command_is_offline_and_without_dependencies() -> None:
    assert pip_argv("/usr/bin/python3", "/opt/package/atb_llm-0.0.1-py3-none-any.whl") == [
        "/usr/bin/python3",
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--force-reinstall",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-input",
        "/opt/package/atb_llm-0.0.1-py3-none-any.whl",
    ]


def test_default_python_is_the_current_interpreter() -> None:
    import inspect

    default = inspect.signature(install_atb_wheel).parameters["python"].default
    assert default == sys.executable


NOBODY = 65534


def test_a_non_root_agent_installs_under_its_state_dir_and_the_server_finds_it(
        nobody_python: Path) -> None:
    """uid 65534 with HOME=/ (what a MindIE image's uid 1001 often has): pip's own user
    fallback would fail on '/.local'; the wheel goes under the state dir instead, first on
    the server's PYTHONPATH. The agent runs from `nobody_python`: a venv whose
    site-packages belongs to root, as an image's interpreter's does, that uid 65534 can
    read wherever this checkout lives (issue 40)."""
    work = open_temp_dir("ascend-node-nonroot-")  # pytest's tmp_path is root's, 0700
    if isinstance(work, str):
        pytest.skip(work)
    try:
        python = str(nobody_python)
        wheels = work / "wheels"
        wheels.mkdir()
        build_wheel(wheels, version="1.0.0", mark="nonroot")
        for entry in [wheels, *wheels.iterdir()]:
            os.chmod(entry, 0o755 if entry.is_dir() else 0o644)
        state = work / "state"
        state.mkdir()
        os.chown(state, NOBODY, NOBODY)
        script = ("import json, sys\n"
                  "from ascend_node.handoff.install import install_atb_wheel\n"
                  f"r = install_atb_wheel([{str(wheels)!r}], {str(state)!r})\n"
                  "print(json.dumps({'ran': r.pip_ran, 'env': dict(r.env), "
                  "'reason': r.reason}))\n")
        env = {"PATH": os.environ["PATH"], "HOME": "/"}

        def as_nobody(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                   "--clear-groups", *argv], env={**env, **extra},
                                  capture_output=True, text=True, timeout=120, cwd="/")

        done = as_nobody(python, "-c", script)
        assert done.returncode == 0, done.stderr
        first = json.loads(done.stdout)
        lib = str(state / "python-lib")
        assert first["ran"] and first["env"]["PYTHONPATH"].split(os.pathsep)[0] == lib
        assert "site-packages is not writable for uid 65534" in first["reason"]
        seen = as_nobody(python, "-c", "import atb_llm; print(atb_llm.MARK)",
                         PYTHONPATH=lib)
        assert seen.stdout.strip() == "nonroot", seen.stderr
        again = json.loads(as_nobody(python, "-c", script).stdout)
        assert again["ran"] is False and again["env"] == first["env"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
