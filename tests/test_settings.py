"""Contract of ascend_node.settings: flag over environment over default, with provenance.

Every bad value ends as a ConfigError (exit 1) that quotes the value under the name
the operator wrote it (the flag or the environment variable).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_node.errors import AscendNodeError, ConfigError, UsageError
from ascend_node.settings import OPTIONS, Settings, describe_sources, resolve_settings


def test_defaults_follow_the_contract() -> None:
    s = resolve_settings({}, {})
    assert (s.shared_dir, s.run_id, s.timeout, s.master_file, s.world_size_file, s.state_dir,
            s.devices, s.hccn_tool, s.hccn_conf, s.file_owner, s.tool_timeout,
            s.allow_uneven_devices, s.master_port) == (
        None, None, 900.0, Path("/master"), Path("/world_size"), Path("/run/ascend-node"),
        None, None, Path("/etc/hccn.conf"), None, 10.0, False, None)  # port: per launcher
    assert set(s.sources.values()) == {"default"}
    assert set(s.sources) == {o.name for o in OPTIONS}


def test_every_flag_has_an_environment_twin() -> None:
    names = {o.name: o for o in OPTIONS}
    contract = {
        "--shared-dir": "ASCEND_NODE_SHARED_DIR", "--run-id": "ASCEND_NODE_RUN_ID",
        "--timeout": "ASCEND_NODE_TIMEOUT", "--master-file": "ASCEND_NODE_MASTER_FILE",
        "--world-size-file": "ASCEND_NODE_WORLD_SIZE_FILE", "--state-dir": "ASCEND_NODE_STATE_DIR",
        "--devices": "ASCEND_NODE_DEVICES", "--hccn-tool": "ASCEND_NODE_HCCN_TOOL",
        "--file-owner": "ASCEND_NODE_FILE_OWNER",
        "--allow-uneven-devices": "ASCEND_NODE_ALLOW_UNEVEN_DEVICES",
        "--preflight": "ASCEND_NODE_PREFLIGHT",
    }
    assert {o.flag: o.env for o in names.values() if o.flag in contract} == contract


@pytest.mark.parametrize(
    ("flags", "environ", "value", "source"),
    [
        ({"run_id": "from-flag"}, {"ASCEND_NODE_RUN_ID": "from-env", "KUBEFLOW_RUN_ID": "k"},
         "from-flag", "flag --run-id"),
        ({}, {"ASCEND_NODE_RUN_ID": "from-env", "KUBEFLOW_RUN_ID": "k", "KFJ_RUN_ID": "j"},
         "from-env", "environment ASCEND_NODE_RUN_ID"),
        ({}, {"ASCEND_NODE_RUN_ID": "  ", "KUBEFLOW_RUN_ID": "k", "KFJ_RUN_ID": "j"},
         "k", "environment KUBEFLOW_RUN_ID"),
        ({}, {"KFJ_RUN_ID": "j", "VC_WORKER_HOSTS": "llm-worker-0.llm"}, "j",
         "environment KFJ_RUN_ID"),
        ({}, {"VC_WORKER_HOSTS": "llm-worker-0.llm,llm-worker-1.llm"}, "llm",
         "discovered (Volcano job name)"),
        ({"run_id": None}, {"ASCEND_NODE_RUN_ID": " padded "}, "padded",
         "environment ASCEND_NODE_RUN_ID"),
    ],
)
def test_run_id_precedence(
    flags: dict[str, Any], environ: dict[str, str], value: str, source: str
) -> None:
    s = resolve_settings(flags, environ)
    assert (s.run_id, s.sources["run_id"]) == (value, source)


def test_environment_values_are_parsed_and_attributed() -> None:
    s = resolve_settings({"devices": "0-3"}, {
        "MODEL_PATH": "/models/qwen", "ASCEND_NODE_TIMEOUT": "120", "ASCEND_NODE_DEVICES": "9",
        "ASCEND_NODE_FILE_OWNER": "1000:1001", "ASCEND_NODE_TOOL_TIMEOUT": "2.5",
        "ASCEND_NODE_ALLOW_UNEVEN_DEVICES": "YES", "MASTER_PORT": "29500",
        "ASCEND_NODE_HCCN_CONF": "/host/etc/hccn.conf",
    })
    assert (s.shared_dir, s.timeout, s.devices, s.file_owner, s.tool_timeout,
            s.allow_uneven_devices, s.master_port, s.hccn_conf) == (
        Path("/models/qwen"), 120.0, "0-3", (1000, 1001), 2.5, True, 29500,
        Path("/host/etc/hccn.conf"))
    assert {k: s.sources[k] for k in ("shared_dir", "timeout", "devices", "master_port")} == {
        "shared_dir": "environment MODEL_PATH", "timeout": "environment ASCEND_NODE_TIMEOUT",
        "devices": "flag --devices", "master_port": "environment MASTER_PORT"}


def test_file_owner_gid_defaults_to_the_running_gid() -> None:
    s = resolve_settings({}, {"ASCEND_NODE_FILE_OWNER": "1000"})
    assert s.file_owner == (1000, os.getgid())


def test_false_bool_flag_means_not_given() -> None:
    s = resolve_settings({"allow_uneven_devices": False},
                         {"ASCEND_NODE_ALLOW_UNEVEN_DEVICES": "1"})
    assert (s.allow_uneven_devices, s.sources["allow_uneven_devices"]) == (
        True, "environment ASCEND_NODE_ALLOW_UNEVEN_DEVICES")


@pytest.mark.parametrize(
    ("flags", "environ", "cause", "hint"),
    [
        ({}, {"ASCEND_NODE_TIMEOUT": "abc"},
         "ASCEND_NODE_TIMEOUT='abc' is invalid: 'abc' is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TIMEOUT (or pass --timeout)"),
        ({}, {"ASCEND_NODE_TIMEOUT": "-5"},
         "ASCEND_NODE_TIMEOUT='-5' is invalid: -5 is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TIMEOUT (or pass --timeout)"),
        ({}, {"ASCEND_NODE_TIMEOUT": "1e999"},  # an endless wait (issue 27)
         "ASCEND_NODE_TIMEOUT='1e999' is invalid: inf is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TIMEOUT (or pass --timeout)"),
        ({}, {"ASCEND_NODE_TOOL_TIMEOUT": "nan"},
         "ASCEND_NODE_TOOL_TIMEOUT='nan' is invalid: nan is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TOOL_TIMEOUT"),
        ({}, {"ASCEND_NODE_TOOL_TIMEOUT": "0"},
         "ASCEND_NODE_TOOL_TIMEOUT='0' is invalid: 0 is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TOOL_TIMEOUT"),
        ({}, {"MASTER_PORT": "70000"},
         "MASTER_PORT='70000' is invalid: Input should be less than or equal to 65535",
         "fix or unset MASTER_PORT (or pass --master-port): a value <= 65535"),
        ({}, {"ASCEND_NODE_ALLOW_UNEVEN_DEVICES": "maybe"},
         "ASCEND_NODE_ALLOW_UNEVEN_DEVICES='maybe' is invalid: "
         "'maybe' is not a boolean (use 1/0, true/false)",
         "fix or unset ASCEND_NODE_ALLOW_UNEVEN_DEVICES (or pass --allow-uneven-devices)"),
        ({}, {"ASCEND_NODE_FILE_OWNER": "root"},
         "ASCEND_NODE_FILE_OWNER='root' is invalid: 'root' is not UID[:GID] with numeric ids",
         "fix or unset ASCEND_NODE_FILE_OWNER (or pass --file-owner)"),
        ({}, {"ASCEND_NODE_RUN_ID": "team/job"},
         "run id 'team/job' (from environment ASCEND_NODE_RUN_ID) is not a safe file-name part",
         "use 1-128 characters from [A-Za-z0-9_.-], starting with a letter or digit, "
         "without '..'"),
        ({}, {"KUBEFLOW_RUN_ID": "a b"},
         "run id 'a b' (from environment KUBEFLOW_RUN_ID) is not a safe file-name part", None),
        ({"run_id": "../x"}, {},
         "run id '../x' (from flag --run-id) is not a safe file-name part", None),
        ({"timeout": -1.0}, {}, "--timeout=-1.0 is invalid: Input should be greater than 0",
         "--timeout takes a value > 0"),  # values, not a help that lists none (issue 27)
        ({"timeout": float("inf")}, {}, "--timeout=inf is invalid: Input should be a finite "
         "number", None),
        ({"master_port": 0}, {},
         "--master-port=0 is invalid: Input should be greater than or equal to 1", None),
    ],
)
def test_bad_values_name_the_setting_and_value(
    flags: dict[str, Any], environ: dict[str, str], cause: str, hint: Any
) -> None:
    with pytest.raises(AscendNodeError) as err:
        resolve_settings(flags, environ)
    assert err.value.cause == cause
    # A value written on the command line is a usage error, one from the environment a
    # configuration error.
    assert err.value.exit_code == (2 if flags else 1)
    assert isinstance(err.value, UsageError if flags else ConfigError)
    if hint is not None:
        assert err.value.hint == hint


def test_describe_sources_lists_every_option_with_its_origin() -> None:
    s = resolve_settings({"timeout": 30.0}, {"ASCEND_NODE_RUN_ID": "r1"})
    lines = describe_sources(s)
    assert len(lines) == len(OPTIONS)
    assert "timeout = 30.0  [flag --timeout]" in lines
    assert "run_id = 'r1'  [environment ASCEND_NODE_RUN_ID]" in lines
    assert "master_port = None  [default]" in lines


def test_verbose_prints_paths_as_paths(tmp_path: Path) -> None:
    """Issue 36: `--verbose` printed `state_dir = PosixPath('/run/ascend-node')`."""
    from ascend_node.cli import app
    from tests.cli_helpers import cli_runner

    s = resolve_settings({"shared_dir": Path("/mnt/model")}, {})
    lines = describe_sources(s)
    assert "shared_dir = /mnt/model  [flag --shared-dir]" in lines
    assert "state_dir = /run/ascend-node  [default]" in lines
    state = tmp_path / "state"
    done = cli_runner().invoke(app, ["ranktable", "--verbose", "--state-dir", str(state),
                                     "--shared-dir", str(tmp_path / "nope")], env={})
    assert f"ascend-node: setting state_dir = {state}  [flag --state-dir]" in done.stderr
    assert "PosixPath" not in done.stderr and "WindowsPath" not in done.stderr


def test_settings_are_frozen() -> None:
    s = resolve_settings({}, {})
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError
        s.timeout = 1.0  # type: ignore[misc]
    assert isinstance(s, Settings)


ENV_NAMES = sorted({v for o in OPTIONS for v in (o.env, *o.fallbacks)} | {"VC_WORKER_HOSTS"})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(ENV_NAMES), st.text(max_size=30), max_size=5))
def test_any_environment_resolves_or_raises_config_error(environ: dict[str, str]) -> None:
    try:
        s = resolve_settings({}, environ)
    except ConfigError as exc:
        assert exc.cause and exc.hint
        return
    assert s.timeout > 0 and s.tool_timeout > 0
    assert s.master_port is None or 1 <= s.master_port <= 65535
    assert set(s.sources) == {o.name for o in OPTIONS}


@pytest.mark.parametrize("empty", ["", "  "])
@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.env)
def test_an_empty_environment_twin_counts_as_unset(option: Any, empty: str) -> None:
    """The other half of the rule for empty values (docs/bad-inputs.md, "Empty values"):
    a pod spec renders an absent value as "", so an empty variable is unset, while an
    empty flag is a usage error (tests/test_cli_options.py). Fallbacks too."""
    for var in (option.env, *option.fallbacks):
        s = resolve_settings({}, {var: empty})
        assert getattr(s, option.name) == getattr(resolve_settings({}, {}), option.name)
        assert s.sources[option.name] == "default"


@pytest.mark.parametrize("var", ["ASCEND_NODE_LAUNCHER", "ASCEND_NODE_HTTPS",
                                 "ASCEND_NODE_TLS_CERTS", "MODEL_NAME",
                                 "ASCEND_NODE_MODEL_DIR", "ASCEND_NODE_LAUNCHER_ARGS",
                                 "MODEL_PATH"])
def test_an_empty_boot_variable_counts_as_unset(var: str) -> None:
    from ascend_node.chain.boot import boot_options_from_env

    def opts(environ: dict[str, str]) -> Any:
        return boot_options_from_env(environ, None, [], None, None, None)

    assert opts({var: ""}) == opts({}) == opts({var: " "})


def test_the_other_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_node.cli.app import debug_on
    from ascend_node.rendezvous.seal import load_key
    from ascend_node.statedir import resolve_state_dir

    monkeypatch.setenv("ASCEND_NODE_DEBUG", "")
    assert debug_on(False) is False
    assert resolve_state_dir(None, {"ASCEND_NODE_STATE_DIR": ""}) == Path("/run/ascend-node")
    assert load_key({"ASCEND_NODE_RENDEZVOUS_KEY": ""}, None) is None


def test_every_environment_twin_a_help_names_is_held_to_the_rule() -> None:
    """Every `(env VAR` an option's help names is one of the variables the tests above
    hold to "empty = unset"; a new twin fails here until it is added to them."""
    import re

    import typer.main

    from ascend_node.cli import app

    group: Any = typer.main.get_command(app)
    named = {var for command in group.commands.values() for p in command.params
             for var in re.findall(r"\(env ([A-Z_]+)", getattr(p, "help", None) or "")}
    held = ({o.env for o in OPTIONS} | {"ASCEND_NODE_LAUNCHER", "ASCEND_NODE_HTTPS",
            "MODEL_NAME", "ASCEND_NODE_MODEL_DIR", "ASCEND_NODE_LAUNCHER_ARGS",
            "ASCEND_NODE_DEBUG", "ASCEND_NODE_RENDEZVOUS_KEY", "ASCEND_NODE_STATE_DIR"})
    assert named and named <= held, named - held


@pytest.mark.parametrize(("flags", "environ", "expected", "source"), [
    ({}, {}, "volume", "default"),  # no `auto`: the volume unless kube is chosen
    ({}, {"ASCEND_NODE_RENDEZVOUS": "kube"}, "kube", "environment ASCEND_NODE_RENDEZVOUS"),
    ({}, {"ASCEND_NODE_RENDEZVOUS": " KUBE "}, "kube", "environment ASCEND_NODE_RENDEZVOUS"),
    ({"rendezvous": "volume"}, {"ASCEND_NODE_RENDEZVOUS": "kube"}, "volume",
     "flag --rendezvous"),
    ({}, {"ASCEND_NODE_RENDEZVOUS": "nfs"},
     "ASCEND_NODE_RENDEZVOUS='nfs' is invalid: 'nfs' is not one of volume, kube", None),
    ({"rendezvous": "nfs"}, {}, "--rendezvous='nfs' is invalid", None),
])
def test_the_rendezvous_choice(flags: dict[str, Any], environ: dict[str, str], expected: str,
                               source: Any) -> None:
    if source is None:
        with pytest.raises(AscendNodeError) as err:
            resolve_settings(flags, environ)
        assert err.value.cause.startswith(expected)
        assert err.value.exit_code == (2 if flags else 1)
        return
    got = resolve_settings(flags, environ)
    assert (got.rendezvous, got.sources["rendezvous"]) == (expected, source)


def test_without_a_shared_directory_the_hint_names_the_api() -> None:
    from ascend_node.chain.table import require_rendezvous_settings

    with pytest.raises(ConfigError) as err:
        require_rendezvous_settings(resolve_settings({}, {}))
    assert err.value.cause.startswith("no shared directory")
    assert "--rendezvous kube (ASCEND_NODE_RENDEZVOUS)" in err.value.hint
