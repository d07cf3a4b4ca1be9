"""pydantic's plugin look-up: off in the agent's own process, never in what it hands on.

When pydantic builds its first validator it looks for plugins: it imports
`importlib.metadata` and reads the entry points of every installed distribution. The agent
uses no pydantic plugin, and the look-up is on every pod's start-up path: ~20 ms of one
pod's ~0.37 s of CPU in the test venv (about 40 distributions, `docs/benchmarks.md`), more
in an inference image that holds hundreds of them.

pydantic's documented switch is the environment variable `PYDANTIC_DISABLE_PLUGINS`
(`__all__`: none; pydantic's docs, "Plugins"), read at every look-up, so it has to be in
this process's environment while models are built. The agent sets it only where nobody
else did, with a second variable saying it did (`MARKER`): the agent's own children (the
simulation's pods, a `doctor` that runs the agent) inherit both and know the setting is
the agent's, not the user's. Both are taken out again of the environment the agent
`exec`s into (the server, the launcher: `handoff.exec`), so that what the server gets is
what the pod was given; a value the user set is theirs and stays.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

VARIABLE = "PYDANTIC_DISABLE_PLUGINS"
OFF = "__all__"
MARKER = "ASCEND_NODE_SET_PYDANTIC_DISABLE_PLUGINS"


def disable_in_this_process(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn pydantic's plugin look-up off for this process, unless the variable is set."""
    if VARIABLE not in environ:
        environ[VARIABLE] = OFF
        environ[MARKER] = "1"


def handed_on(env: Mapping[str, str]) -> dict[str, str]:
    """`env` as another program should get it: without the variable if the agent set it
    (and nobody changed it since), unchanged otherwise."""
    out = dict(env)
    if out.pop(MARKER, None) is not None and out.get(VARIABLE) == OFF:
        del out[VARIABLE]
    return out
