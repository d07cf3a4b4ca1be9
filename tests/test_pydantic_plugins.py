"""pydantic's plugin look-up is off in the agent's process and nowhere else: the server the
agent execs, and a simulated pod, get the environment the user gave (`ascend_node.
pydantic_plugins`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ascend_node import pydantic_plugins as plugins

V, M = plugins.VARIABLE, plugins.MARKER


@pytest.mark.parametrize(("given", "inside", "handed_on"), [
    ({}, {V: "__all__", M: "1"}, {}),                   # ours: set, then taken out again
    ({V: "__all__"}, {V: "__all__"}, {V: "__all__"}),   # the user's own: untouched
    ({V: "logfire"}, {V: "logfire"}, {V: "logfire"}),   # the user's list of plugins off
    ({V: "__all__", M: "1"}, {V: "__all__", M: "1"}, {}),  # inherited from the agent
])
def test_the_setting_is_the_agents_only_where_the_user_gave_none(
        given: dict[str, str], inside: dict[str, str], handed_on: dict[str, str]) -> None:
    environ = {"PATH": "/bin", **given}
    plugins.disable_in_this_process(environ)
    assert environ == {"PATH": "/bin", **inside}
    assert plugins.handed_on(environ) == {"PATH": "/bin", **handed_on}


def test_a_user_who_changes_the_value_after_the_agent_set_it_keeps_theirs() -> None:
    environ: dict[str, str] = {}
    plugins.disable_in_this_process(environ)
    environ[V] = "logfire"
    assert plugins.handed_on(environ) == {V: "logfire"}


@pytest.mark.parametrize("users", [None, "true"])
def test_the_program_the_agent_execs_gets_the_users_environment(users: str | None) -> None:
    """Through the console script's own entry point and `handoff.exec.exec_command`, as
    `boot` ends: the exec'd program prints its environment."""
    env = {k: v for k, v in os.environ.items() if k not in (V, M)}
    if users is not None:
        env[V] = users
    code = ("import os; from ascend_node import pydantic_plugins as p; "
            "from ascend_node.handoff.exec import exec_command; "
            "p.disable_in_this_process(); "
            "assert os.environ[p.VARIABLE]; "
            "exec_command(['env'], dict(os.environ))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60).stdout.splitlines()
    mine = [line for line in out if line.startswith((V + "=", M + "="))]
    assert mine == ([] if users is None else [f"{V}={users}"])


def test_the_agents_own_process_looks_up_no_plugin() -> None:
    """What the saving is: pydantic never reads the installed distributions' entry points
    in a pod command's process."""
    env = {k: v for k, v in os.environ.items() if k not in (V, M)}
    code = ("import sys; from ascend_node.cli import main\n"
            "import importlib.metadata as md\n"
            "calls = []\n"
            "real = md.entry_points\n"
            "md.entry_points = lambda **kw: calls.append(kw) or real(**kw)\n"
            "import pydantic.plugin._loader as loader\n"
            "loader.entry_points = md.entry_points\n"
            "try:\n    main(['version'])\nexcept SystemExit:\n    pass\n"
            "from pydantic import BaseModel\n"
            "class Doc(BaseModel):\n    x: int\n"
            "Doc(x=1)\n"
            "print(len(calls))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert out[-1] == "0"
