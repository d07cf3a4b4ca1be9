"""What a vendor tool printed reaches the operator once and readable.

An absent device answers both of the agent's queries (`-ip -g`, then `-ip -inet6 -g`) with
the same error; the message once showed it twice inside a repr(), with `\\n` escaped twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_node.tools import shown_output
from tests.cluster_helpers import explain, make_nodes, run


@pytest.mark.parametrize(("text", "shown"), [
    ("", "nothing"),
    ("\n \n", "nothing"),
    ("ipaddr:10.0.0.1\nnetmask:255.255.255.0\n", '"ipaddr:10.0.0.1 | netmask:255.255.255.0"'),
    ("Error: bad id\nError: bad id\n", '"Error: bad id"'),
    ("tls switch[0]\t: 1\n", '"tls switch[0] : 1"'),
    ("a\x1b[31mred\n", '"a\\x1b[31mred"'),
    ("x" * 300, '"' + "x" * 197 + '..."'),
])
def test_shown_output(text: str, shown: str) -> None:
    assert shown_output(text) == shown


@pytest.mark.multiprocess
def test_absent_devices_are_named_with_the_tools_own_words_once(tmp_path: Path) -> None:
    """`ranktable --devices 0-9` where only 0-7 exist (the fake answers 8 and 9 as a real
    hccn_tool does for an id it does not know)."""
    [node] = make_nodes(tmp_path, 1, devices=8, timeout=30)
    node.env["ASCEND_NODE_DEVICES"] = "0-9"
    [result] = run([node])
    assert result.exit_code == 1, explain([result])
    line = next(x for x in result.stderr.splitlines() if x.startswith("ascend-node: error:"))
    assert line == ("ascend-node: error: device 8 has no RoCE IP: `hccn_tool -i 8 -ip -g` "
                    'failed with exit 255 and printed "Error: invalid device id 8 or command -ip"')
    assert "\\" not in result.stderr
