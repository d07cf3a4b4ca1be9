"""The project explains itself: every file its documents point to is in the repository.

A relative link (`[x](rendezvous.md#timing)`) or a mention of a Markdown file
(`docs/benchmarks.md`) in README.md, docs/*.md or images/README.md must name a file of the
repository, relative to the document or to the repository's root, and a `#fragment` must be
a heading of that file. The working notes the project was started from are not part of it
and may not be cited (their facts are stated in place, with their public sources): not by
the documents, and not by the code, tests, scripts and images either, whose comments a
maintainer follows just the same. This file spells the notes' names in pieces, so that it
passes its own scan.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "images" / "README.md",
                    *(ROOT / "docs").glob("*.md")])

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MENTION = re.compile(r"(?<![\w/.-])((?:\.\.?/)?[\w./-]*\.md(?:#[\w-]+)?)")
_OUTSIDE = re.compile(r"\bDESIGN\b|shared/(?:reference|upstream)|\.\./shared\b")
# The notes by name: two distinctive names with or without `.md`, a section of the facts
# note, and the rest as bare (or `reference/`) file names; a repository path such as
# `docs/<name>.md` is not a note (the link test above holds documents to existing files).
_NOTES = re.compile(r"\b(?:mindie[-]checks|ascend[-]facts)\b|\bfacts[ ]§"
                    r"|(?<![\w./-])(?:reference/)?(?:peers|nfs|launchers|containers|style)[.]md\b")
# Everything else a maintainer reads: code, tests, scripts, images, benchmarks, examples,
# fixtures and CI (the documents above have their own test).
SOURCE_DIRS = ("ascend_node", "scripts", "tests", "images", "bench", "examples", "fixtures",
               ".ci")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_\[\]]|\(([^)]*)\)(?=\s|$)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"\]\([^)]*\)", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slug(h) for h in _HEADING.findall(text)}


def references(text: str) -> set[str]:
    found = set(_LINK.findall(text)) | set(_MENTION.findall(text))
    return {r for r in found if "://" not in r and not r.startswith(("#", "mailto:"))}


def resolve(doc: Path, ref: str) -> Path | None:
    target = ref.split("#", 1)[0]
    for base in (doc.parent, ROOT):
        candidate = (base / target).resolve()
        if candidate.exists() and ROOT in candidate.parents:
            return candidate
    return None


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_referenced_file_exists_with_its_heading(doc: Path) -> None:
    problems = []
    for ref in sorted(references(doc.read_text(encoding="utf-8"))):
        target = resolve(doc, ref)
        if target is None:
            problems.append(f"{ref}: no such file in the repository")
        elif "#" in ref and target.suffix == ".md":
            fragment = ref.split("#", 1)[1]
            if fragment not in anchors(target):
                problems.append(f"{ref}: {target.name} has no heading #{fragment}")
    assert problems == []


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_cites_the_notes_outside_the_repository(doc: Path) -> None:
    hits = [line.strip() for line in doc.read_text(encoding="utf-8").splitlines()
            if _OUTSIDE.search(line)]
    assert hits == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    design = "DES" + "IGN.md"
    doc.write_text(f"see {design}, [a](nowhere.md#x) and `docs/design.md#the-chain`\n")
    refs = references(doc.read_text())
    assert refs == {design, "nowhere.md#x", "docs/design.md#the-chain"}
    assert resolve(doc, "nowhere.md#x") is None
    assert resolve(doc, "docs/design.md#the-chain") == ROOT / "docs" / "design.md"
    assert "the-chain" in anchors(ROOT / "docs" / "design.md")
    assert slug("Network filesystems: what each one shows, and what the agent does") == (
        "network-filesystems-what-each-one-shows-and-what-the-agent-does")
    assert slug("`ascend-node doctor`") == "ascend-node-doctor"
    assert _OUTSIDE.search("as DES" + "IGN says") and _OUTSIDE.search("../sha" + "red/reference/x")


def cited_notes(text: str) -> list[str]:
    """Lines of `text` that point at the notes outside the repository, numbered from 1."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if _OUTSIDE.search(line) or _NOTES.search(line)]


def source_files(top: Path) -> list[Path]:
    return sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


@pytest.mark.parametrize("top", SOURCE_DIRS)
def test_no_source_file_cites_the_notes_outside_the_repository(top: str) -> None:
    files = source_files(ROOT / top)
    assert files, f"{top}/ holds no files: the scan would pass vacuously"
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary: nothing a reader follows
            continue
        hits += [f"{path.relative_to(ROOT)}:{hit}" for hit in cited_notes(text)]
    assert hits == []


@pytest.mark.parametrize("line", [
    "see " + "DES" + "IGN.md, Files", "(../sha" + "red/reference/x.md)",
    "the facts (" + "shared/" + "upstream/hccn)", "(" + "mindie" + "-checks 13)",
    "checks (" + "mindie" + "-checks.md \"The file\")", "(" + "ascend" + "-fac" + "ts §2, §3.2)",
    "(facts" + " §1.1)", "(" + "peers" + ".md §1)", "(" + "reference/" + "nf" + "s.md)",
    "`" + "nfs" + ".md`", "recipe: " + "containers" + ".md", "# " + "launchers" + ".md says",
    "see " + "style" + ".md",
])
def test_the_source_scan_finds_each_kind_of_citation(line: str) -> None:
    assert cited_notes(f"x = 1\n{line}\n") == [f"2: {line}"]


@pytest.mark.parametrize("line", [
    "docs/rendezvous.md, \"Network filesystems\"", "images/README.md §5",
    "Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md",
    "the health facts each node publishes", "nfs(5) lookupcache", "peers.devices",
    "Path('/run/shared/visibility')", "a design decision",
])
def test_the_source_scan_lets_the_repositorys_own_citations_pass(line: str) -> None:
    assert cited_notes(line) == []
