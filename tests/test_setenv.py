"""Contract of ascend_node.handoff.setenv, with real bash and real scripts in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_node.errors import ConfigError, ToolError
from ascend_node.handoff.setenv import (
    EnvDelta,
    capture_set_env,
    default_set_env_scripts,
    diff_env,
    parse_env0,
    set_env_scripts_from_env,
)

BASE = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return str(path)


# A stand-in for the vendor scripts: finds its install dir the way they do.
LOCATE_SELF = """
here="${BASH_SOURCE[0]}"
if [[ -f "$here" ]] && [[ "$here" =~ set_env.sh ]]; then
    export %(name)s="$(cd "$(dirname "$here")" && pwd)"
    export PATH="$%(name)s/bin:$PATH"
    export LD_LIBRARY_PATH="$%(name)s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    echo "There is no set_env.sh to import"
fi
"""


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ([], []),
        (
            ["ascend-toolkit", "cann", "nnal/atb", "mindie", "atb-models", "llm_model"],
            ["ascend-toolkit", "nnal/atb", "mindie", "atb-models"],
        ),
        (["cann", "llm_model"], ["cann", "llm_model"]),
        (["mindie", "nnal/atb"], ["nnal/atb", "mindie"]),
    ],
)
def test_default_scripts_are_probed_in_vendor_order(
    tmp_path: Path, present: list[str], expected: list[str]
) -> None:
    for component in present:
        script(tmp_path / component / "set_env.sh", "true\n")
    (tmp_path / "cann-dir-only").mkdir()
    assert default_set_env_scripts(str(tmp_path)) == [
        str(tmp_path / c / "set_env.sh") for c in expected
    ]


def test_override_list_is_used_in_its_order(tmp_path: Path) -> None:
    a = script(tmp_path / "a" / "set_env.sh", "")
    b = script(tmp_path / "b" / "set_env.sh", "")
    script(tmp_path / "root" / "mindie" / "set_env.sh", "")
    environ = {"ASCEND_NODE_SET_ENV": f"{b}{os.pathsep}{a}{os.pathsep}"}
    assert set_env_scripts_from_env(environ, str(tmp_path / "root")) == [b, a]
    assert set_env_scripts_from_env({"ASCEND_NODE_SET_ENV": ""}, str(tmp_path / "root")) == []
    assert set_env_scripts_from_env({}, str(tmp_path / "root")) == [
        str(tmp_path / "root" / "mindie" / "set_env.sh")
    ]


def test_override_naming_a_missing_script_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "set_env.sh"
    with pytest.raises(ConfigError, match=f"lists {missing}, which is not a file"):
        set_env_scripts_from_env({"ASCEND_NODE_SET_ENV": str(missing)})


def test_scripts_are_sourced_in_one_shell_from_their_real_paths(tmp_path: Path) -> None:
    cann = script(tmp_path / "cann" / "set_env.sh", LOCATE_SELF % {"name": "ASCEND_TOOLKIT_HOME"})
    atb = script(
        tmp_path / "nnal" / "atb" / "set_env.sh",
        LOCATE_SELF % {"name": "ATB_HOME_PATH"}
        + 'export SEEN_TOOLKIT="$ASCEND_TOOLKIT_HOME"\n'
        + 'export ARGS_SEEN="$#:$*"\n'
        + 'echo "chatter on stdout"\n',
    )
    delta = capture_set_env([cann, atb], BASE)
    toolkit, atb_home = str(tmp_path / "cann"), str(tmp_path / "nnal" / "atb")
    assert delta.changed == {
        "ASCEND_TOOLKIT_HOME": toolkit,
        "ATB_HOME_PATH": atb_home,
        "PATH": f"{atb_home}/bin:{toolkit}/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": f"{atb_home}/lib:{toolkit}/lib",
        "SEEN_TOOLKIT": toolkit,
        "ARGS_SEEN": "0:",  # no positional parameters leak into a sourced script
    }
    assert delta.unset == ()
    assert delta.scripts == (cann, atb)
    assert delta.output == ("chatter on stdout",)


def test_values_with_newlines_equals_and_unsets(tmp_path: Path) -> None:
    s = script(
        tmp_path / "set_env.sh",
        "export MULTI=$'line1\\nline2=x'\nunset LANG\nexport EMPTY=\n",
    )
    delta = capture_set_env([s], BASE)
    assert delta.changed == {"MULTI": "line1\nline2=x", "EMPTY": ""}
    assert delta.unset == ("LANG",)


def test_unchanged_values_and_bash_bookkeeping_are_not_reported(tmp_path: Path) -> None:
    s = script(
        tmp_path / "set_env.sh",
        "export HOME=/root\ncd /tmp\nset -a\nNOT_EXPORTED_BEFORE=1\n",
    )
    delta = capture_set_env([s], {**BASE, "SHLVL": "1", "PWD": "/"})
    # PWD/SHLVL/_ are bash's own; the loop variables after `set -a` are ours.
    assert delta.changed == {"NOT_EXPORTED_BEFORE": "1"}
    assert delta.unset == ()


def test_no_scripts_means_no_change() -> None:
    assert capture_set_env([], BASE) == EnvDelta({}, (), ())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'echo "libascend_hal.so: cannot open" >&2\nreturn 3\n',
            r"failed with status 3: libascend_hal\.so: cannot open",
        ),
        (
            'echo "warming up"\n[ -d /no/such/dir ] && export X=1\n',
            r"failed with status 1: warming up",
        ),
        (
            'echo "fatal: no driver" >&2\nexit 5\n',
            r"exited the shell \(status 5\): fatal: no driver",
        ),
        ("exit 0\n", r"exited the shell \(status 0\) \(no output\)"),
    ],
)
def test_a_failing_script_is_named_with_its_last_lines(
    tmp_path: Path, body: str, message: str
) -> None:
    good = script(tmp_path / "cann" / "set_env.sh", "export OK=1\necho fine >&2\n")
    bad = script(tmp_path / "mindie" / "set_env.sh", body)
    after = script(tmp_path / "atb-models" / "set_env.sh", "export NEVER=1\n")
    with pytest.raises(ToolError, match=f"^`source {bad}` {message}$") as info:
        capture_set_env([good, bad, after], BASE)
    assert "ASCEND_NODE_SET_ENV" in info.value.hint


def test_only_the_last_five_stderr_lines_are_quoted(tmp_path: Path) -> None:
    bad = script(
        tmp_path / "set_env.sh", "for i in 1 2 3 4 5 6 7; do echo line$i >&2; done\nfalse\n"
    )
    with pytest.raises(ToolError) as info:
        capture_set_env([bad], BASE)
    assert info.value.cause.endswith(": line3 | line4 | line5 | line6 | line7")


def test_a_hanging_script_times_out(tmp_path: Path) -> None:
    slow = script(tmp_path / "set_env.sh", "sleep 5\n")
    with pytest.raises(ToolError, match=r"did not finish within 0\.3 s"):
        capture_set_env([slow], BASE, timeout=0.3)


def test_missing_bash_is_a_tool_error(tmp_path: Path) -> None:
    s = script(tmp_path / "set_env.sh", "")
    with pytest.raises(ToolError, match="cannot run bash") as info:
        capture_set_env([s], BASE, bash=str(tmp_path / "no-bash"))
    assert "need bash" in info.value.hint


def test_apply_adds_changes_and_drops_unsets() -> None:
    delta = EnvDelta({"PATH": "/x:/usr/bin", "NEW": "1"}, ("LANG",), ())
    assert delta.apply(BASE) == {"PATH": "/x:/usr/bin", "HOME": "/root", "NEW": "1"}
    assert BASE["LANG"] == "C.UTF-8", "apply returns a new dict"


def test_parse_env0_and_diff() -> None:
    parsed = parse_env0("A=1\0B=x=y\nz\0_=/usr/bin/env\0\0")
    assert parsed == {"A": "1", "B": "x=y\nz", "_": "/usr/bin/env"}
    assert diff_env({"A": "1", "C": "3", "_": "x"}, parsed) == ({"B": "x=y\nz"}, ("C",))
