"""The typer app and the one place where errors become exit codes.

Results go to stdout (`--json` documents carry `schema_version`); logs and errors go to
stderr. An error is one line naming the value at fault plus a hint, and the contract's
exit code; a traceback only with `--debug` or `ASCEND_NODE_DEBUG=1`. The commands live in
`pod_cmds` (what a pod runs), `job_cmds` (what an operator runs against a job) and
`offline_cmds` (what needs no job at all); each resolves its settings, calls one domain
function and prints.

No `from __future__ import annotations` in this package: the typer release that still
supports Python 3.9 reads option metadata from evaluated `Annotated` hints only.
"""


import contextlib
import inspect
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Callable, Optional

import typer
import typer.core

from ascend_node import __version__
from ascend_node.errors import AscendNodeError, Interrupted, Terminated

STARTED = time.monotonic()
JSON_SCHEMA_VERSION = 1

IN_THE_POD = "In the pod (the container's command, its probes)"
FOR_THE_OPERATOR = "For the operator (against a running or finished job)"
OFFLINE = "Offline (no job needed)"
GROUPS = (IN_THE_POD, FOR_THE_OPERATOR, OFFLINE)
"""`--help` lists the commands by who runs them, as docs/design.md does; each command names
its group when it is registered (`@app.command(rich_help_panel=...)`, a field typer keeps
without rich)."""


COMMAND_MODULES = ("pod_cmds", "pd_cmds", "job_cmds", "launch_cmds", "offline_cmds")
"""The modules of `cli/` that define commands, in the order `--help` lists them. Each is
imported only when one of its commands runs or a full list is asked for (`--help`, a
mistyped name's suggestions): a pod's `discover` does not pay for `manifest` or `doctor`
(docs/benchmarks.md, the import budget of tests/pod_imports.json)."""

COMMAND_HOMES = {
    "discover": "pod_cmds", "ranktable": "pod_cmds", "boot": "pod_cmds", "env": "pod_cmds",
    "status": "pod_cmds",
    "pd-announce": "pd_cmds", "pd-table": "pd_cmds", "pd-boot": "pd_cmds",
    "validate": "job_cmds", "doctor": "job_cmds", "report": "job_cmds", "clean": "job_cmds",
    "launch": "launch_cmds",
    "simulate": "offline_cmds", "manifest": "offline_cmds", "version": "offline_cmds",
}
"""Which module defines each command: the one import a command's run needs. A command
missing here still runs (every module is then imported to find it);
tests/test_cli_lazy.py holds this map to what the modules define."""


class Commands(typer.core.TyperGroup):
    """The root command: groups `--help` by who runs each command (plain text: rich costs
    start-up, docs/benchmarks.md), never cuts a summary, and ends an option value refused
    while parsing (`cli.options`) as every error ends: one line, a hint, its exit code.

    Commands are registered lazily: the group starts with what was imported and loads a
    command's module (`COMMAND_HOMES`) when that command is looked up; `commands`, the
    full mapping click and typer list from, imports every module first."""

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Any]:
        self._load(COMMAND_MODULES)
        return self._loaded

    @commands.setter
    def commands(self, value: Any) -> None:
        self._loaded: dict[str, Any] = dict(value or {})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self._loaded:
            home = COMMAND_HOMES.get(cmd_name)
            self._load((home,) if home else COMMAND_MODULES)
        return self._loaded.get(cmd_name)

    def _registered(self, modules: tuple[str, ...]) -> list[tuple[str, Any]]:
        """Import the modules (their `@app.command`s register on `app`); every
        registration so far with its name, in `--help`'s order."""
        for module in modules:
            # __import__, not importlib.import_module: the same import `-X importtime`
            # sees (tests/test_pod_imports.py reads the budget from it).
            __import__(f"ascend_node.cli.{module}")
        infos = sorted(app.registered_commands, key=_listing_order)
        return [(info.name or typer.main.get_command_name(getattr(info.callback, "__name__", "")),
                 info) for info in infos]

    def _load(self, modules: tuple[str, ...]) -> None:
        """Turn each new registration into a click command, kept in `--help`'s order."""
        registered = self._registered(modules)
        if all(name in self._loaded for name, _ in registered):
            return
        for name, info in registered:
            if name not in self._loaded:
                self._loaded[name] = typer.main.get_command_from_info(
                    info, pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=app.rich_markup_mode)
        rank = {name: i for i, (name, _) in enumerate(registered)}
        self._loaded = dict(sorted(self._loaded.items(),
                                   key=lambda item: rank.get(item[0], len(rank))))

    def _summaries(self) -> list[tuple[str, Any]]:
        """Every command as `--help` lists it: its name, group and summary, read from its
        registration into a click command without parameters. Building the real ones (each
        option's type and default from the signature) would cost ~10 ms of a `--help`
        (docs/benchmarks.md); click's own `get_short_help_str` still makes the summary."""
        summaries = []
        for name, info in self._registered(COMMAND_MODULES):
            cmd = self._loaded.get(name)
            if cmd is None:
                text = info.help if info.help is not None else inspect.getdoc(info.callback)
                cmd = typer.core.TyperCommand(
                    name=name, help=inspect.cleandoc(text) if text else text,
                    short_help=info.short_help, hidden=info.hidden,
                    deprecated=info.deprecated, rich_help_panel=info.rich_help_panel)
            summaries.append((name, cmd))
        return summaries

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        shown = [(name, cmd) for name, cmd in self._summaries() if not cmd.hidden]
        for group in (*GROUPS, None):
            rows = [(name, cmd.get_short_help_str(limit=500)) for name, cmd in shown
                    if getattr(cmd, "rich_help_panel", None) == group
                    or (group is None and getattr(cmd, "rich_help_panel", None) not in GROUPS)]
            if rows:
                with formatter.section(group or "Commands"):
                    formatter.write_dl(rows)

    invoked: Optional[str] = None
    """The command this process was asked to run, once click has resolved it (`main`
    ends a pod command without the interpreter's teardown: `end_now`)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        Commands.invoked = name
        if cmd is not None and not ctx.resilient_parsing:
            found = empty_option(value_options(cmd), rest)
            if found is not None:
                from ascend_node.errors import UsageError

                flag, value = found
                raise UsageError(f"{flag} {value!r} is {'blank' if value else 'empty'}",
                                 f"give {flag} a value, or leave it out for its default "
                                 "(an empty environment variable counts as unset)")
        return name, cmd, rest

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except AscendNodeError as exc:  # raised by an option type, before the command ran
            raise typer.Exit(report_error(exc, debug_on(False))) from None


def value_options(command: Any) -> frozenset[str]:
    """Every name (`--devices`, `-o`) of the options of `command` that take a value."""
    return frozenset(name for p in command.params
                     if getattr(p, "param_type_name", "") == "option"
                     and not getattr(p, "is_flag", False) and not getattr(p, "count", False)
                     for name in (*p.opts, *p.secondary_opts))


def empty_option(takes_value: frozenset[str], words: list[str]
                 ) -> Optional[tuple[str, str]]:
    """The first option given an empty or blank value (`--devices ''`, `--state-dir=`)
    among the words before `--`, and that value; or None.

    One rule for every option of every command: an option typed with nothing in it is
    a mistake (an unset shell variable, `--devices "$DEVS"`), never "the default". Left
    to each type, `''` became the current directory (`Path('')`), npu-smi's device list,
    or a refusal, depending on the option. The environment twin of an option is the
    other way round: an empty variable counts as unset (settings.resolve_settings,
    statedir, chain.boot), since a pod spec renders an absent value as `""`
    (docs/bad-inputs.md, "Empty values")."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return None
        name, eq, value = word.partition("=")
        if eq and name.startswith("--") and name in takes_value:
            if not value.strip():
                return name, value
        elif word in takes_value:
            if i + 1 < len(words) and not words[i + 1].strip():
                return word, words[i + 1]
            i += 1  # its value, whatever it looks like
        i += 1
    return None


class ServerCommand(typer.core.TyperCommand):
    """A command that takes another program's command line after `--` (`boot`,
    `pd-boot`, `manifest`): every word before the first `--` is this command's, parsed as
    any command parses its own (an unknown option is click's usage error, exit 2, naming
    the nearest known options as `ranktable` does: `No such option: --launcer (Possible
    options: --launcher, --launcher-args)`); every word after it is the server's,
    untouched. The first `--` ends the command's own words even where an option's value
    could be `--` (`--launcher-args --`): that option then lacks its value, said so. A stray word
    before `--` (`boot msrun`) is a usage error too, naming it: a typo must never become
    the command a pod execs (127 after the whole rendezvous) or a rendered Job's `args`.

    Register with `@app.command(cls=ServerCommand)`; `ctx.args` is then exactly what
    followed `--` (tests/test_cli_options.py holds every such command to this class)."""

    SEPARATOR = "--"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Stray words are collected, then refused here with a hint; unknown options are
        # never carried into the server's command.
        self.context_settings = {**self.context_settings, "allow_extra_args": True,
                                 "ignore_unknown_options": False}

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        words = list(args)
        cut = words.index(self.SEPARATOR) if self.SEPARATOR in words else len(words)
        own, server = words[:cut], words[cut + 1:]
        super().parse_args(ctx, own)
        stray = list(ctx.args)
        if stray and not ctx.resilient_parsing:
            noun = "word" if len(stray) == 1 else "words"
            shown = " ".join(stray)
            ctx.fail(f"Unexpected {noun} {shown!r} before '--': the command to run and "
                     f"its arguments go after '--' (ascend-node {ctx.info_name} [OPTIONS] "
                     f"-- {' '.join([*stray, *server])})")
        ctx.args = server
        return server


def _listing_order(info: Any) -> int:
    """A registration's place in `--help`: by its module's place in `COMMAND_MODULES`
    (whichever was imported first), then by its place in the module (sorting is stable)."""
    module = getattr(info.callback, "__module__", "").rpartition(".")[2]
    return COMMAND_MODULES.index(module) if module in COMMAND_MODULES else len(COMMAND_MODULES)


app = typer.Typer(
    cls=Commands,
    name="ascend-node",
    help="Bootstrap agent for multi-node Huawei Ascend NPU jobs: discovers NPUs, meets peers "
    "on a shared volume to build the HCCL rank table, and hands over to MindIE or a "
    "training launcher.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich costs ~100 ms of start-up (issue 13)
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        with exit_codes(False):
            out(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version_flag: Annotated[bool, typer.Option(
        "--version", help="Print the agent's version and exit", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    # The flag people type first; the `version` command stays for scripts that use it.
    pass


def debug_on(flag: bool) -> bool:
    return flag or os.environ.get("ASCEND_NODE_DEBUG", "") in ("1", "true", "yes")


MAX_VALUE = 200
"""Characters of a quoted value in an error line: a value is named, not echoed whole (a
5,000-character K8S_POD_IP would bury the cause and its hint). Tool output is quoted cut to
200 already (`tools.shown_output`), so it passes whole."""
MAX_LINE = 2000
"""The last guard: no error line is longer, whatever it quotes."""
_LONG_QUOTED = re.compile(r"(['\"])([^'\"\n]{" + str(MAX_VALUE + 1) + r",})\1")


def clip_line(line: str) -> str:
    """`ASCEND_NODE_TIMEOUT='9999...' (5,050 characters) is invalid: ...`"""
    line = _LONG_QUOTED.sub(lambda m: f"{m[1]}{m[2][:MAX_VALUE]}...{m[1]} "
                            f"({len(m[2]):,} characters)", line)
    if len(line) <= MAX_LINE:
        return line
    return f"{line[:MAX_LINE]}... ({len(line) - MAX_LINE:,} more characters)"


def report_error(exc: BaseException, debug: bool) -> int:
    if isinstance(exc, AscendNodeError):
        code = exc.exit_code
        text = f"ascend-node: error: {exc.cause}"
        if exc.hint:
            text += f"\n  hint: {exc.hint}"
    else:
        code = 1
        text = (f"ascend-node: internal error: {exc.__class__.__name__}: {exc}\n"
                "  hint: rerun with --debug and report the traceback")
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    text = "\n".join(clip_line(line) for line in text.split("\n"))
    try:
        sys.stderr.flush()
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left
    return code


@contextmanager
def exit_codes(debug: bool, on_failure: Optional[Callable[[BaseException, int], None]] = None
            ) -> Iterator[None]:
    """Every way a command ends, as the contract says: its result flushed to stdout (a
    reader that went away ends it quietly with 141, stdout that cannot take it is one
    line and exit 1), every failure one line and its exit code, never a traceback."""
    try:
        try:
            yield
        except typer.Exit:
            _flush_stdout()
            raise
        _flush_stdout()
        _exit_if_abandoned(0)
    except typer.Exit:
        raise
    except BrokenPipeError:
        _closed_stdout()
    except (Exception, KeyboardInterrupt) as exc:
        if isinstance(exc, (KeyboardInterrupt, typer.Abort)):  # Ctrl-C, at a prompt too:
            # recorded as SIGTERM is (status.json)
            exc = Interrupted(f"interrupted by signal {signal.SIGINT.value} (SIGINT)",
                              "stopped by hand; nothing was left half-written")
        code = report_error(exc, debug)
        if on_failure is not None:
            on_failure(exc, code)
        _exit_if_abandoned(code)
        raise typer.Exit(code) from None


def _exit_if_abandoned(code: int) -> None:
    """A thread left inside a call on a shared volume that does not answer
    (`rendezvous.volume_call`) must not hold the exit: flush, then end the process
    without waiting for it (the kernel ends NFS waits for a dying process)."""
    volume_call = sys.modules.get("ascend_node.rendezvous.volume_call")
    if volume_call is not None and volume_call.abandoned():
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        import logging  # loaded already by then (the rendezvous logs); not on a probe's path

        logging.shutdown()
        os._exit(code)


POD_COMMANDS = frozenset(name for name, home in COMMAND_HOMES.items() if home == "pod_cmds")
"""The commands a pod runs (its entrypoint, its init container, its probes): each ends
with `end_now` when run as the console script."""


def end_now(code: Any) -> None:
    """End the process with `code` (a `SystemExit`'s) without the interpreter's teardown.

    A pod's command has written everything when it returns (its files renamed whole, its
    events one `write()` each, stdout flushed by `exit_codes`); what is left is the
    interpreter freeing ~40,000 objects of typer, pydantic and ours module by module: 30-40
    ms of CPU at the end of every pod, on the critical path of the last one to finish
    (docs/benchmarks.md, issue 30). The exit handlers still run (logging's flush), and
    stdout and stderr are flushed; returns (the normal exit follows) when the code is not
    a number, when a thread that the interpreter would wait for is still running, or
    when a stream cannot be flushed (the normal exit reports it as it always did)."""
    if code is None:
        code = 0
    if not isinstance(code, int) or isinstance(code, bool):
        return
    import atexit
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:
        return
    atexit._run_exitfuncs()  # logging.shutdown and whatever else registered one
    with contextlib.suppress(Exception):
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    os._exit(code & 0xFF)


class OutputError(AscendNodeError):
    """stdout cannot take the result: closed (`>&-`), a full disk (`> /dev/full`)."""


def out(text: str = "", end: str = "\n") -> None:
    """The one place a command writes its result to stdout; a failure to write is an
    `OutputError` naming it (a closed pipe stays a BrokenPipeError: see exit_codes)."""
    stream = sys.stdout
    if stream is None:
        raise _stdout_closed()
    try:
        stream.write(text + end)
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        raise _stdout_failed(exc) from None


def _stdout_closed() -> OutputError:
    return OutputError("cannot write the result: stdout is closed",
                       "run it with stdout open; > /dev/null discards the result")


def _stdout_failed(exc: BaseException) -> OutputError:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    errno = f" (errno {exc.errno})" if isinstance(exc, OSError) and exc.errno else ""
    return OutputError(f"cannot write the result to stdout: {why}{errno}",
                       "send stdout where there is room, e.g. a file on another disk")


CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE
"""141: what a shell reports for `cat` when the reader of its output went away."""


def _closed_stdout() -> None:
    """The reader of stdout went away (`ascend-node simulate --json | head -2`): end
    quietly, as `cat` does, with no message and no traceback. Later writes (and the
    flush at exit) go to /dev/null instead of failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    raise typer.Exit(CLOSED_PIPE_EXIT)


def _flush_stdout() -> None:
    """Flush while a failure can still end the command with one line (at exit, Python
    would report it as an exception it ignored). A buffer that cannot be written is
    dropped, so that the interpreter's own flush at exit does not fail again."""
    stream = sys.stdout
    if stream is None:
        return  # nothing was written (out() refuses a closed stdout)
    try:
        stream.flush()
    except BrokenPipeError:
        _closed_stdout()
    except (OSError, ValueError) as exc:
        _discard_stdout()
        raise _stdout_failed(exc) from None


def _discard_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass


def on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(f"terminated by signal {signum} ({signal.Signals(signum).name})",
                     "the pod is being stopped; nothing was left half-written")


def settings_from(verbose: bool, **flags: Any) -> Any:
    from ascend_node.settings import describe_sources, resolve_settings

    settings = resolve_settings(flags, os.environ)
    if verbose:
        for line in describe_sources(settings):
            print(f"ascend-node: setting {line}", file=sys.stderr)
    return settings


def option_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The contract's options among a command's parameters (None = not given)."""
    from ascend_node.settings import OPTIONS

    return {opt.name: values[opt.name] for opt in OPTIONS if opt.name in values}


def emit(doc: dict[str, Any]) -> None:
    out(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **doc}, indent=2))
