"""The documents and the command line agree (issue 27): every `--option` a document names
exists on some command (or belongs to a tool the documents quote, listed below by owner),
every option of every command is documented somewhere, every `ASCEND_NODE_*` variable a
document names is read by the code, and every one the agent reads is documented.

The foreign flags are listed by the tool that owns them, so a new one is a decision, and a
flag of ours that disappears (`--poll-interval` once) fails here instead of in a user's
hands.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from ascend_node.cli import app
from tests.test_doc_links import DOCUMENTS, ROOT

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]")
_VAR = re.compile(r"(?<![A-Za-z0-9_])ASCEND_NODE_[A-Z0-9_]*[A-Z0-9]")

FOREIGN: dict[str, frozenset[str]] = {
    # MindSpore's msrun and torch's torchrun, as docs/launchers.md shows them.
    "msrun": frozenset({"--worker_num", "--local_worker_num", "--master_addr", "--master_port",
                        "--node_rank", "--log_dir", "--join", "--cluster_time_out",
                        "--bind_core"}),
    "torchrun": frozenset({"--rdzv_backend", "--rdzv_conf"}),
    "pytest": frozenset({"--durations"}),
    "kubectl": frozenset({"--from-literal", "--from-file"}),  # --dry-run: launch has one
    "curl (docs/deploy.md)": frozenset({"--cacert"}),
    "pip": frozenset({"--no-index", "--find-links", "--target", "--no-compile"}),
    "podman / buildah / Containerfile RUN": frozenset({
        "--no-cache", "--build-arg", "--cgroup-parent", "--change", "--entrypoint", "--hostname",
        "--ip", "--network", "--rm", "--stop-timeout", "--subnet", "--mount", "--timestamps",
        "--tail"}),
    "mmdebstrap (images/README.md)": frozenset({"--variant", "--include"}),
    "pip wheel (images/README.md)": frozenset({"--no-deps"}),
    "Volcano's svc plugin": frozenset({"--disable-network-policy"}),
    "a training script's own argument (docs/launchers.md)": frozenset({"--config"}),
    "the docs' examples of unknown options and typos": frozenset({
        "--bogus", "--pcv", "--launcer", "--motor-confg"}),
    "etcd, kube-apiserver and the kubelet (docs/kube-bed.md)": frozenset({
        "--unsafe-no-fsync", "--authorization-mode", "--client-ca-file",
        "--endpoint-reconciler-type", "--root-dir", "--kubelet-client-certificate",
        "--kubelet-preferred-address-types", "--kubelet-certificate-authority",
        "--bind-address", "--root-ca-file"}),
}
"""Flags the documents quote for other programs. The benchmark and CI scripts' own options
(`bench/*.py`, `scripts/*`) are read from their sources below."""


def _ours() -> set[str]:
    root = typer.main.get_command(app)
    flags = {o for p in root.params for o in p.opts if o.startswith("--")}
    for command in root.commands.values():  # type: ignore[attr-defined]
        for p in command.params:
            flags |= {o for o in (*p.opts, *getattr(p, "secondary_opts", ()))
                      if o.startswith("--")}
    return flags


def _scripts_flags() -> set[str]:
    found: set[str] = set()
    for path in [*(ROOT / "bench").glob("*.py"), *(ROOT / "scripts").glob("*")]:
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            found |= set(re.findall(r"""add_argument\(\s*["'](--[\w-]+)""", text))
    return found


def _documented(pattern: re.Pattern[str]) -> dict[str, set[str]]:
    where: dict[str, set[str]] = {}
    for doc in DOCUMENTS:
        for match in pattern.finditer(doc.read_text(encoding="utf-8")):
            where.setdefault(match.group(0), set()).add(str(doc.relative_to(ROOT)))
    return where


def _code_vars(*dirs: str) -> set[str]:
    found: set[str] = set()
    for d in dirs:
        for path in (ROOT / d).rglob("*"):
            if (path.is_file() and path.suffix in ("", ".py", ".sh")
                    and "__pycache__" not in path.parts):
                found |= set(_VAR.findall(path.read_text(encoding="utf-8", errors="replace")))
    return found


def test_every_documented_option_exists() -> None:
    allowed = _ours() | _scripts_flags() | {"--help"}
    for flags in FOREIGN.values():
        allowed |= flags
    unknown = {flag: sorted(docs) for flag, docs in _documented(_FLAG).items()
               if flag not in allowed}
    assert unknown == {}, "documented options that no command has (or add the owner to FOREIGN)"


def test_every_option_is_documented_somewhere() -> None:
    documented = set(_documented(_FLAG))
    assert sorted(_ours() - documented) == []


def test_no_foreign_flag_shadows_one_of_ours() -> None:
    ours = _ours()
    shadowed = {owner: sorted(flags & ours) for owner, flags in FOREIGN.items() if flags & ours}
    assert shadowed == {}


INTERNAL_PREFIX = "ASCEND_NODE_SIM_"
"""What `simulate` hands its fake tools (`sim/fake_tools.py`): plumbing, not a setting."""


def test_every_documented_variable_is_read_by_the_code() -> None:
    code = _code_vars("ascend_node", "tests", "scripts", ".ci", "images", "bench")
    unknown = {var: sorted(docs) for var, docs in _documented(_VAR).items() if var not in code}
    assert unknown == {}


def test_every_variable_the_agent_reads_is_documented() -> None:
    documented = set(_documented(_VAR))
    agent = {v for v in _code_vars("ascend_node") if not v.startswith(INTERNAL_PREFIX)}
    assert sorted(agent - documented) == []


def test_the_check_fails_on_what_it_guards() -> None:
    """The scans see what they must: a made-up flag and variable in a document's words."""
    text = "run `ascend-node ranktable --poll-interval 0.5` with ASCEND_NODE_NO_SUCH=1"
    assert "--poll-interval" in _FLAG.findall(text) and "--poll-interval" not in _ours()
    assert _VAR.findall(text) == ["ASCEND_NODE_NO_SUCH"]
    assert "__ASCEND_NODE_I" not in _VAR.findall("for __ASCEND_NODE_I in") and \
        _VAR.findall("for __ASCEND_NODE_I in") == []
    assert Path(ROOT / "README.md") in DOCUMENTS


def _section(doc: str, heading: str) -> str:
    text = (ROOT / doc).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else len(text)]


def test_deploy_lists_every_example_and_every_manifest_option() -> None:
    """Issue 36: deploy.md's examples left out mindie-pd-1p2-1d8.yaml and its parameters
    `--load-timeout`. The table of examples names every file of examples/volcano/, the
    table of parameters every option of `manifest`."""
    head = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    for example in sorted((ROOT / "examples" / "volcano").glob("*.yaml")):
        assert f"| `{example.name}` |" in head, example.name
    table = _section("docs/deploy.md", "## Parameters")
    root = typer.main.get_command(app)
    manifest = root.commands["manifest"]  # type: ignore[attr-defined]
    shared = {"--json", "--debug", "--help"}
    for p in manifest.params:
        for flag in (*p.opts, *getattr(p, "secondary_opts", ())):
            if flag.startswith("--") and flag not in shared:
                assert f"`{flag}`" in table or f"`{flag} " in table, flag


def test_the_quick_starts_absent_node_comes_with_a_short_timeout() -> None:
    """`--absent 2` alone waits the default 60 s before anything is said: every place that
    suggests it to a newcomer gives the `--timeout` that keeps it short."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme[readme.index("## Quick start"):].split("\n## ", 1)[0]
    for match in re.finditer(r"--absent \S+", quick):
        assert "--timeout" in quick[match.start():match.start() + 40], quick
