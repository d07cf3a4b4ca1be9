"""Following pods' logs (issue 39, "While it runs"): no line lost or printed twice across a
dropped stream, a stream closed on purpose, any chunking, a pod re-created under its name; a
pod's log read to its end when it ends. Pure bookkeeping: the streams are simulated here as
the API serves them (`timestamps=true` lines, `sinceTime` in whole seconds)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_node.launch.log_follow import (
    Cursor,
    LogBook,
    Resume,
    advance,
    parse_line,
    since_time,
)

T0 = 1_796_461_200  # 2026-12-05T09:00:00Z


def stamp(nanos: int) -> str:
    """As the kubelet writes it: RFC 3339 with nanoseconds, trailing zeros trimmed (Go's
    RFC3339Nano)."""
    secs, frac = divmod(nanos, 1_000_000_000)
    base = since_time(secs * 1_000_000_000)[:-1]
    text = f"{frac:09d}".rstrip("0")
    return base + (f".{text}" if text else "") + "Z"


class Log:
    """A pod's log as the API serves it: every line with its time; `since` filters whole
    seconds, as `sinceTime` (a metav1.Time) does."""

    def __init__(self, entries: list[tuple[int, str]]) -> None:
        self.entries = entries

    def serve(self, since: str | None) -> str:
        floor = 0
        if since is not None:
            floor = parse_line(since + " x")[0]  # type: ignore[index]
        return "".join(f"{stamp(t)} {text}\n" for t, text in self.entries if t >= floor)


@pytest.mark.parametrize("line, want", [
    ("2026-12-05T09:00:00.123456789Z hello", (T0 * 10**9 + 123456789, "hello")),
    ("2026-12-05T09:00:00Z hello world", (T0 * 10**9, "hello world")),
    ("2026-12-05T09:00:00.5Z  two spaces", (T0 * 10**9 + 500_000_000, " two spaces")),
    ("2026-12-05T10:00:00.5+01:00 zone", (T0 * 10**9 + 500_000_000, "zone")),
    ("2026-12-05T09:00:00Z ", (T0 * 10**9, "")),
    ("no timestamp", None),
    ("2026-13-05T09:00:00Z bad month", None),
])
def test_parse_line(line: str, want: tuple[int, str] | None) -> None:
    got = parse_line(line)
    assert (got and (got[0], got[2])) == want if want else got is None


def test_since_time_is_the_floor_second() -> None:
    assert since_time(T0 * 10**9 + 999_999_999) == "2026-12-05T09:00:00Z"


NS = 10**9
CASES = [
    # cursor, lines served after since(), expected printed, expected cursor
    (Cursor(), [f"{stamp(T0 * NS)} a", f"{stamp(T0 * NS + 1)} b"], ["a", "b"],
     Cursor(T0 * NS + 1, 1)),
    # the overlap of a resume: the second's earlier lines were printed
    (Cursor(T0 * NS + 5, 1), [f"{stamp(T0 * NS)} old", f"{stamp(T0 * NS + 5)} last",
                              f"{stamp(T0 * NS + 6)} new"], ["new"], Cursor(T0 * NS + 6, 1)),
    # two lines of one write share a time: one printed, the second not yet
    (Cursor(T0 * NS, 1), [f"{stamp(T0 * NS)} x1", f"{stamp(T0 * NS)} x2",
                          f"{stamp(T0 * NS)} x3"], ["x2", "x3"], Cursor(T0 * NS, 3)),
    # a line without a timestamp cannot be placed: printed, never lost
    (Cursor(T0 * NS, 1), ["unstamped"], ["unstamped"], Cursor(T0 * NS, 1)),
    (Cursor(T0 * NS, 1), [], [], Cursor(T0 * NS, 1)),
]


@pytest.mark.parametrize("cursor, lines, printed, after", CASES)
def test_advance_after_a_reopen(cursor: Cursor, lines: list[str], printed: list[str],
                                after: Cursor) -> None:
    resume = Resume(cursor.last, cursor.repeats)
    assert advance(cursor, resume, lines)[::2] == (after, printed)


def test_within_one_stream_a_line_at_the_cursors_time_is_new() -> None:
    """Two chunks of one stream, a line of the same time in each: both printed."""
    t = T0 * NS
    cursor, resume, out = advance(Cursor(), Resume(), [f"{stamp(t)} a"])
    cursor, resume, more = advance(cursor, resume, [f"{stamp(t)} b"])
    assert out + more == ["a", "b"] and cursor == Cursor(t, 2)


def follow(book: LogBook, uid: str, log: Log, cut: int, rng: random.Random,
           ended: bool = True) -> list[str]:
    """Read `log` through `book`, dropping the stream every `cut` characters (a drop can fall
    in the middle of a line) and in random chunks, until the book says the pod is done."""
    out: list[str] = []
    for _ in range(2_000):
        (opened,) = book.wanted({uid})
        text = log.serve(opened.since)
        # a drop anywhere (mid-line too): after `cut` characters, or at random, or none
        taken = text[:rng.choice([cut, rng.randint(0, len(text)), len(text)])]
        pos = 0
        while pos < len(taken):
            step = rng.randint(1, 40)
            out += book.feed(uid, taken[pos:pos + step])
            pos += step
        out += book.closed(uid, clean_end=ended and len(taken) == len(text))
        if book.done(uid):
            return out
    raise AssertionError("never done")


@pytest.mark.parametrize("cut", [7, 25, 60, 10**6])
def test_no_line_lost_or_repeated_across_drops(cut: int) -> None:
    rng = random.Random(cut)
    entries = []
    t = T0 * NS
    for i in range(200):
        t += rng.choice([0, 0, 1, 1000, NS // 3, NS])  # many lines share a time or a second
        entries.append((t, f"line {i}"))
    book = LogBook()
    book.pod("u1", "t-worker-1", "worker", 1, ended=True)
    got = follow(book, "u1", Log(entries), cut, rng)
    assert got == [f"[worker 1] line {i}" for i in range(200)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
    max_size=12)), min_size=1, max_size=40), st.integers(5, 80), st.integers(0, 1000))
def test_any_log_any_drops(steps: list[tuple[int, str]], cut: int, seed: int) -> None:
    t = T0 * NS
    entries = []
    for gap, text in steps:
        t += [0, 1, NS // 2, NS][gap]
        entries.append((t, text))
    book = LogBook()
    book.pod("u", "p-master-0", "master", 0, ended=True)
    got = follow(book, "u", Log(entries), cut, random.Random(seed))
    assert got == [f"[master 0] {text}" for _, text in entries]


def test_the_last_line_without_a_newline_is_printed_when_the_pod_ended() -> None:
    book = LogBook()
    book.pod("u", "t-master-0", "master", 0, ended=False)
    book.wanted({"u"})
    assert book.feed("u", f"{stamp(T0 * NS)} a\n{stamp(T0 * NS + 1)} tail") == ["[master 0] a"]
    book.pod("u", "t-master-0", "master", 0, ended=True)
    assert book.closed("u", clean_end=True) == ["[master 0] tail"]
    assert book.done("u") and book.wanted({"u"}) == []


def test_a_clean_end_while_the_container_runs_is_a_drop() -> None:
    """An API server ends a long watch or log stream on its own timeout: not the log's end."""
    book = LogBook()
    book.pod("u", "t-master-0", "master", 0, ended=False)
    book.wanted({"u"})
    assert book.feed("u", f"{stamp(T0 * NS)} a\n{stamp(T0 * NS + 1)} par") == ["[master 0] a"]
    assert book.closed("u", clean_end=True) == []
    (again,) = book.wanted({"u"})
    assert again.since == "2026-12-05T09:00:00Z"
    assert book.feed("u", f"{stamp(T0 * NS)} a\n{stamp(T0 * NS + 1)} partial\n") == \
        ["[master 0] partial"]


def test_a_pod_recreated_under_its_name_is_read_from_its_start() -> None:
    """RestartJob deletes the pods and creates them again with the same names: a new uid is
    a new log, read whole, after the old one was read to its end."""
    book = LogBook()
    book.pod("old", "t-worker-0", "worker", 0, ended=False)
    (first,) = book.wanted({"old"})
    assert first.since is None
    out = book.feed("old", f"{stamp(T0 * NS + 5 * NS)} attempt 1: exit 4\n")
    book.pod("old", "t-worker-0", "worker", 0, ended=True)
    out += book.closed("old", clean_end=True)
    book.pod("new", "t-worker-0", "worker", 0, ended=False)
    (second,) = book.wanted({"new"})
    assert (second.name, second.since) == ("t-worker-0", None)
    # the new pod's clock may even be behind the old one's (another node): nothing skipped
    out += book.feed("new", f"{stamp(T0 * NS)} attempt 2: start\n")
    assert out == ["[worker 0] attempt 1: exit 4", "[worker 0] attempt 2: start"]
    assert book.done("old") and not book.all_done()


def test_a_deleted_pod_is_no_longer_wanted() -> None:
    book = LogBook()
    book.pod("u", "t-worker-0", "worker", 0, ended=False)
    book.gone("u")
    assert book.wanted({"u"}) == [] and book.all_done()


def test_a_stream_is_opened_once_until_it_closes() -> None:
    book = LogBook()
    book.pod("u", "t-worker-0", "worker", 0, ended=False)
    assert book.wanted(set()) == []  # not started: no log to read yet
    assert len(book.wanted({"u"})) == 1
    assert book.wanted({"u"}) == []
    book.closed("u", clean_end=False)
    assert len(book.wanted({"u"})) == 1
