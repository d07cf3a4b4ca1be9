"""The suite passes wherever the repository is cloned (issue 40): the non-root cases,
run from a copy of this checkout under a 0700 directory (what `mktemp -d` makes, and
what a home directory under /root is) with a venv inside that copy, as a contributor's
`git clone` + `.ci/run` has it. They once ran the agent as uid 65534 from the checkout's
own venv and source tree, which that uid cannot enter there: `No module named
ascend_node`, and every assertion after it failed on the wrong cause."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from tests.nobody_python import closed_dir, open_temp_dir

ROOT = Path(__file__).resolve().parents[1]

# Every test that starts the agent as uid 65534 (grep setpriv tests/); 5 cases in all.
NON_ROOT_CASES = [
    "tests/test_install.py::"
    "test_a_non_root_agent_installs_under_its_state_dir_and_the_server_finds_it",
    "tests/test_nonroot_outputs.py::test_non_root_defaults_fall_back_under_the_runtime_dir",
    "tests/test_nonroot_outputs.py::"
    "test_an_explicit_path_it_cannot_write_ends_it_before_the_rendezvous",
]


def _checkout_files() -> list[str]:
    """What a clone of this working tree holds: tracked files and new ones not ignored."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], cwd=ROOT, capture_output=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout: {out.stderr.decode().strip()}")
    return [name for name in out.stdout.decode().split("\0") if name]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv")
                    or not shutil.which("git"),
                    reason="the cases run the agent as another uid (root, setpriv; git)")
@pytest.mark.multiprocess
def test_the_non_root_cases_pass_from_a_checkout_under_a_0700_directory() -> None:
    private = Path(tempfile.mkdtemp(prefix="ascend-node-private-"))
    assert private.stat().st_mode & 0o777 == 0o700
    try:
        clone = private / "p"
        for name in _checkout_files():
            source = ROOT / name
            if source.is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, clone / name)
        # The clone's own venv, as `.ci/run` makes it; its packages are this venv's
        # (a .pth line per directory, so nothing is downloaded), except ascend_node:
        # `python -m pytest` in the clone imports the clone's.
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(clone / ".venv")],
                       check=True, timeout=120)
        python = clone / ".venv" / "bin" / "python"
        site = subprocess.run([str(python), "-c",
                               "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()
        ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        Path(site, "outer-venv.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              *NON_ROOT_CASES],
                             cwd=clone, env=env, capture_output=True, text=True, timeout=900)
        tail = "\n".join(run.stdout.splitlines()[-40:])
        assert run.returncode == 0, f"{run.stderr[-2000:]}\n{tail}"
        assert "5 passed" in run.stdout.splitlines()[-1], tail  # none skipped
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_the_directory_that_keeps_other_users_out_is_named() -> None:
    """What a skip of the non-root tests names (tests/nobody_python.py): the first
    directory on the way that others may not enter; a missing one counts as closed."""
    root = open_temp_dir("ascend-node-closed-")
    assert isinstance(root, Path), root
    try:
        (root / "a" / "b").mkdir(parents=True)
        (root / "a" / "b" / "f").write_text("")
        (root / "link").symlink_to(root / "a" / "b")
        cases = [  # (mode of a, mode of a/b, path asked about, expected)
            (0o755, 0o755, root / "a" / "b" / "f", None),
            (0o711, 0o711, root / "a" / "b" / "f", None),  # entering is enough
            (0o755, 0o700, root / "a" / "b" / "f", root / "a" / "b"),
            (0o700, 0o700, root / "a" / "b" / "f", root / "a"),  # the first one
            (0o755, 0o700, root / "a" / "b", root / "a" / "b"),  # the path itself
            (0o755, 0o700, root / "link" / "f", root / "a" / "b"),  # where a link leads
            (0o755, 0o755, root / "a" / "gone" / "f", root / "a" / "gone"),
        ]
        for mode_a, mode_b, path, expected in cases:
            (root / "a").chmod(mode_a)
            (root / "a" / "b").chmod(mode_b)
            assert closed_dir(path) == expected, (oct(mode_a), oct(mode_b), path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
