"""Record a command under Nsight Systems and export the SQLite file `cgprof analyze` reads.

The flow is ``nsys profile`` -> (``QdstrmImporter`` when nsys could not import its own raw
stream) -> ``nsys export --type sqlite`` -> a read-only check that the result is an nsys
export. The pieces that decide *what* to run are pure functions so that tests can check
them without nsys:

- :func:`cgprof.nsys.find_nsys` - where nsys is (``--nsys``, ``CGPROF_NSYS``, ``PATH``,
  install folders);
- :func:`build_profile_argv` - ``nsys profile`` with cgprof's defaults, each added only when
  the user did not pass that flag in any spelling (nsys-jax's ``override_nsys_default``);
- :func:`cgprof.nsys.build_export_argv` - ``nsys export`` to a temporary name, optionally
  limited to the tables cgprof reads;
- :func:`record` - runs all of it as real subprocesses and returns a :class:`RecordResult`.

Files are handled conservatively: every output (``NAME.sqlite``, ``NAME.nsys-rep``,
``NAME.qdstrm``) is checked *before* anything runs and nothing is overwritten without
``force``; the SQLite file is exported under a temporary name in the same folder and only
renamed into place (atomically) once it has been opened and checked, so a failed or
interrupted export never leaves a half-written ``NAME.sqlite`` behind.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

from cgprof.errors import OutputExistsError, RecordError
from cgprof.nsys import (
    EXPORT_TABLES,
    build_export_argv,
    export_supports_tables,
    find_nsys,
    find_qdstrm_importer,
    is_executable_file,
    qdstrm_importer_candidates,
)

#: Defaults cgprof adds to ``nsys profile`` when the user did not pass the flag.
#: ``cuda,nvtx`` is all the analyzer reads; ``node`` graph tracing keeps one kernel row per
#: replayed graph node (in ``graph`` mode replayed kernels have no kernel rows at all);
#: CPU sampling and context-switch tracing only make the trace bigger and slower to export.
DEFAULT_TRACE = "cuda,nvtx"
DEFAULT_GRAPH_TRACE = "node"
GRAPH_TRACE_CHOICES = ("node", "graph")

_OUTPUT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdstrm")

#: Shared libraries QdstrmImporter is known to miss, and the packages that provide them.
_LIBRARY_PACKAGES = {
    "libdw.so.1": "libdw1 on Debian/Ubuntu, elfutils-libs on RHEL/Fedora",
    "libelf.so.1": "libelf1 on Debian/Ubuntu, elfutils-libelf on RHEL/Fedora",
}

_MISSING_LIBRARY = re.compile(
    r"error while loading shared libraries: (\S+?): cannot open shared object file"
)


@dataclass(frozen=True)
class RecordOptions:
    """What `cgprof record` was asked to do.

    ``command`` is the full argv to profile (already resolved: a ``.py`` script is
    preceded by the interpreter, see :func:`resolve_command`). ``output`` is the base
    name of the outputs (``NAME`` -> ``NAME.nsys-rep`` and ``NAME.sqlite``); ``None``
    derives it from the command. ``graph_trace`` ``None`` means ``node`` unless the user
    passed ``--cuda-graph-trace`` through ``nsys_args``. ``mark_steps`` puts
    :data:`BOOTSTRAP` first on the program's ``PYTHONPATH`` (:func:`program_env`).
    ``untraced`` runs the command once more without the profiler and writes the times of
    its step marks to ``NAME.untraced.json`` (cgprof.untraced); ``None``: only for
    ``cgprof run`` (:func:`runs_cgprof`), since the second run repeats a script's side
    effects.
    """

    command: Sequence[str]
    output: str | os.PathLike[str] | None = None
    force: bool = False
    graph_trace: str | None = None
    nsys: str | os.PathLike[str] | None = None
    nsys_args: Sequence[str] = ()
    all_tables: bool = False
    mark_steps: bool = True
    untraced: bool | None = None


@dataclass(frozen=True)
class RecordResult:
    """What one recording produced.

    ``exit_code`` is the profiled command's exit code as nsys reported it (128 + signal
    number when it died of a signal; 130 when cgprof was interrupted and nsys reported
    success). ``tables_limited`` says whether the export holds only :data:`EXPORT_TABLES`.
    ``warnings`` are the lines already printed to the progress stream.
    """

    sqlite_path: Path
    report_path: Path
    exit_code: int
    interrupted: bool
    imported_qdstrm: bool
    tables_limited: bool
    nsys: Path
    profile_argv: list[str]
    export_argv: list[str]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    untraced_path: Path | None = None
    traced_run_s: float | None = None
    untraced_run_s: float | None = None

    @property
    def next_command(self) -> str:
        """The command a user runs next, quoted for a POSIX shell."""
        return f"cgprof analyze {shlex.quote(str(self.sqlite_path))}"


# --------------------------------------------------------------------------------------
# Building argv (pure)


def resolve_command(words: Sequence[str], python: str | None = None) -> list[str]:
    """Turn ``SCRIPT [ARGS]`` or ``COMMAND [ARGS]`` into the argv nsys launches.

    A first word ending in ``.py`` runs under ``python`` (default: the interpreter cgprof
    runs under, so the script sees the same environment and packages); anything else
    (``python3 -m pkg``, ``torchrun``, ``cgprof run ...``) is taken as given.
    """
    if not words:
        raise RecordError("nothing to record: give a script (train.py) or -- COMMAND")
    if words[0].endswith(".py"):
        return [python or sys.executable, *words]
    return list(words)


def default_output_name(command: Sequence[str]) -> str:
    """Base name for outputs when ``-o`` is not given: the script's or module's name.

    ``python train.py`` -> ``train``; ``python -m pkg.mod`` -> ``mod``;
    ``torchrun --nproc-per-node 2 train.py`` -> ``train``; otherwise the program's name.
    """
    for i, word in enumerate(command):
        if word.endswith(".py"):
            return Path(word).stem
        if word == "-m" and i + 1 < len(command):
            return command[i + 1].rsplit(".", 1)[-1]
    return Path(command[0]).name if command else "cgprof"


def output_base(name: str | os.PathLike[str]) -> Path:
    """``NAME``, ``NAME.sqlite`` or ``NAME.nsys-rep`` -> the base path ``NAME``."""
    text = str(name)
    for suffix in _OUTPUT_SUFFIXES:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
            break
    if not text or text.endswith(os.sep):
        raise RecordError(f"-o {name}: give a file name, e.g. -o runs/train_eager")
    return Path(text)


def with_suffix(base: Path, suffix: str) -> Path:
    """``base`` + ``suffix`` without touching dots already in the name (``run.v2``)."""
    return base.with_name(base.name + suffix)


def _flag_value(
    args: Sequence[str], long: str, short: str | None = None
) -> tuple[bool, str | None]:
    """Whether ``args`` set an nsys flag, and its value, in any spelling nsys accepts.

    nsys takes ``--long=value`` and ``--long value`` for long switches and ``-s value``
    for short ones (its docs ask for a space after short switches; ``-svalue`` is
    accepted here too). The value is ``None`` when it cannot be told.
    """
    for i, arg in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == long or (short is not None and arg == short):
            return True, nxt
        if arg.startswith(long + "="):
            return True, arg[len(long) + 1 :]
        if short is not None and arg.startswith(short) and not arg.startswith("--"):
            return True, arg[len(short) :].lstrip("=")
    return False, None


def user_output(nsys_args: Sequence[str]) -> str | None:
    """The ``-o/--output`` the user passed to nsys through ``--nsys-arg``, if any."""
    given, value = _flag_value(nsys_args, "--output", "-o")
    return value if given else None


#: The folder whose ``sitecustomize`` marks each optimizer step in a recorded Python program
#: (cgprof/bootstrap/sitecustomize.py).
BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"


def program_env(env: Mapping[str, str], mark_steps: bool,
                untraced_dir: Path | None = None) -> dict[str, str]:
    """The environment nsys and the program run in: ``env``, with :data:`BOOTSTRAP` first
    on ``PYTHONPATH`` when ``mark_steps`` or ``untraced_dir`` (every Python process it
    starts loads it). ``untraced_dir``: the untraced run's, where each process writes the
    times of its step marks (``CGPROF_UNTRACED_DIR``)."""
    out = dict(env)
    out.pop("CGPROF_UNTRACED_DIR", None)
    if mark_steps or untraced_dir is not None:
        rest = out.get("PYTHONPATH", "")
        out["PYTHONPATH"] = str(BOOTSTRAP) + (os.pathsep + rest if rest else "")
        out["CGPROF_MARK_STEPS"] = "1" if mark_steps else "0"
    if untraced_dir is not None:
        out["CGPROF_UNTRACED_DIR"] = str(untraced_dir)
    return out


def runs_cgprof(command: Sequence[str]) -> bool:
    """Whether ``command`` is ``cgprof run ...`` (``cgprof run`` or ``python -m cgprof run``):
    a workload whose second, untraced run has no side effects beyond its own output."""
    words = list(command)
    if len(words) >= 2 and Path(words[0]).name == "cgprof" and words[1] == "run":
        return True
    return words[1:4] == ["-m", "cgprof", "run"]


def build_profile_argv(
    nsys: str | os.PathLike[str],
    command: Sequence[str],
    output_base: str | os.PathLike[str],
    graph_trace: str | None = None,
    user_nsys_args: Sequence[str] = (),
    force: bool = False,
) -> list[str]:
    """``nsys profile`` argv: cgprof's defaults, then the user's flags, then the command.

    Each default is added only when the user did not pass that flag (``-t/--trace``,
    ``--cuda-graph-trace``, ``-s/--sample``, ``--cpuctxsw``, ``-o/--output``,
    ``-f/--force-overwrite``); the user's flags pass through untouched, in order.
    ``graph_trace`` is cgprof's ``--graph-trace``; it conflicts with a different
    ``--cuda-graph-trace`` among the user's flags. ``--force-overwrite=true`` is added only
    with ``force`` (cgprof has already refused existing outputs otherwise).
    """
    args = list(user_nsys_args)
    if graph_trace is not None and graph_trace not in GRAPH_TRACE_CHOICES:
        raise RecordError(f"--graph-trace {graph_trace}: choose node or graph")
    defaults: list[str] = []
    if not _flag_value(args, "--trace", "-t")[0]:
        defaults.append(f"--trace={DEFAULT_TRACE}")
    given, value = _flag_value(args, "--cuda-graph-trace")
    if given:
        if graph_trace is not None and value is not None and value != graph_trace:
            raise RecordError(
                f"--graph-trace {graph_trace} conflicts with --nsys-arg --cuda-graph-trace={value}"
            )
    else:
        defaults.append(f"--cuda-graph-trace={graph_trace or DEFAULT_GRAPH_TRACE}")
    if not _flag_value(args, "--sample", "-s")[0]:
        defaults.append("--sample=none")
    if not _flag_value(args, "--cpuctxsw")[0]:
        defaults.append("--cpuctxsw=none")
    if not _flag_value(args, "--output", "-o")[0]:
        defaults.append(f"--output={output_base}")
    if force and not _flag_value(args, "--force-overwrite", "-f")[0]:
        defaults.append("--force-overwrite=true")
    return [str(nsys), "profile", *defaults, *args, *command]


# --------------------------------------------------------------------------------------
# Running


class _Progress:
    """One progress line on ``stream`` while a slow step (import, export) runs.

    On a terminal the line ticks the elapsed seconds in place and ends with
    ``done in 3.2 s``; elsewhere (logs, CI) it is printed when the step starts and again,
    with the time, when it ends, so a log shows where the minutes went.
    """

    def __init__(self, stream: TextIO | None, doing: str) -> None:
        self.stream = stream
        self.doing = doing
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0

    def _write(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._write(f"\r{self.doing} ... {time.monotonic() - self.t0:.0f} s")

    def __enter__(self) -> _Progress:
        self.t0 = time.monotonic()
        if self.tty:
            self._write(f"{self.doing} ...")
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        else:
            self._write(f"{self.doing} ...\n")
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        status = f"done in {time.monotonic() - self.t0:.1f} s" if exc_type is None else "failed"
        prefix = "\r" if self.tty else ""  # on a terminal, overwrite the ticking line
        self._write(f"{prefix}{self.doing} ... {status}\n")


def _exit_status(returncode: int) -> int:
    """A shell-style exit status: ``-N`` (killed by signal N) becomes ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


@contextmanager
def _forwarding_signals(on_signal: Callable[[int], None]) -> Iterator[list[int]]:
    """While profiling, pass Ctrl-C (SIGINT) and SIGTERM on to nsys's process group.

    nsys runs in its own session, so a Ctrl-C at the terminal reaches only cgprof; cgprof
    hands it to nsys and the program (as a terminal would) and keeps waiting: nsys reacts
    by stopping the program and writing the report of what it captured, which cgprof then
    exports. Yields a one-element list the caller fills with nsys's pid once it has
    started; a signal that arrives before that is passed on as soon as it is filled in
    (see :meth:`Recorder.profile`). Signal handlers can only be set from the main thread;
    elsewhere this is a no-op and signals behave as usual.
    """
    group: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield group
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        on_signal(signum)
        if group:
            _signal_group(group[0], signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield group
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def check_export(path: Path) -> list[str]:
    """Open ``path`` read-only and return its table names if it is an nsys export.

    An nsys export always has ``StringIds``; a file without it (an empty file, or one
    nsys left half-written) raises :class:`RecordError`.
    """
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise RecordError(f"nsys export wrote {path} but it cannot be opened: {exc}") from None
    if "StringIds" not in names:
        raise RecordError(
            f"nsys export wrote {path} but it is not an nsys export (no StringIds table)"
        )
    return names


class Recorder:
    """Runs one recording; :func:`record` is the function to call.

    Kept as a class so each step (profile, import, export) is a method with the shared
    state (paths, progress stream, warnings) in one place.
    """

    def __init__(self, options: RecordOptions, progress: TextIO | None,
                 env: Mapping[str, str]) -> None:
        self.options = options
        self.progress = progress
        self.env = env
        self.warnings: list[str] = []

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress.write(line + "\n")
            self.progress.flush()

    def warn(self, line: str) -> None:
        self.warnings.append(line)
        self.say(f"cgprof: warning: {line}")

    def outputs(self) -> tuple[Path, Path, Path, Path]:
        """(base, .sqlite, .nsys-rep, .qdstrm) for this recording."""
        opts = self.options
        from_nsys = user_output(opts.nsys_args)
        if opts.output is not None and from_nsys is not None:
            raise RecordError(
                f"-o {opts.output} conflicts with --nsys-arg output {from_nsys}; give one"
            )
        name = opts.output if opts.output is not None else from_nsys
        if name is None:
            name = default_output_name(opts.command)
        if "%" in str(name):
            # nsys expands %p, %h, %q{VAR} in output names; cgprof would not know the result.
            raise RecordError(f"-o {name}: nsys % patterns are not supported in cgprof record")
        base = output_base(name)
        return (base, with_suffix(base, ".sqlite"), with_suffix(base, ".nsys-rep"),
                with_suffix(base, ".qdstrm"))

    def check_command(self) -> None:
        command = self.options.command
        if not command:
            raise RecordError("nothing to record: give a script (train.py) or -- COMMAND")
        for word in command[:2]:
            # The script is the first or (after the interpreter) second word.
            if word.endswith(".py") and not Path(word).is_file():
                raise RecordError(f"{word}: no such script")
        program = command[0]
        if os.sep in program:
            if not is_executable_file(Path(program)):
                raise RecordError(f"{program}: not an executable file")
        elif shutil.which(program, path=self.env.get("PATH", "")) is None:
            raise RecordError(f"{program}: command not found")

    def run(self) -> RecordResult:
        opts = self.options
        base, sqlite_path, rep_path, qdstrm_path = self.outputs()
        self.check_command()
        from cgprof.untraced import sidecar_for

        sidecar = sidecar_for(sqlite_path)
        untraced = self.wants_untraced()
        # Refuse before running anything: a training run can take hours, and finding out
        # afterwards that the result may not be written would waste it.
        for path in (sqlite_path, rep_path, qdstrm_path, *([sidecar] if untraced else [])):
            if path.exists() and not opts.force:
                raise OutputExistsError(path)
        nsys = find_nsys(opts.nsys, self.env)
        profile_argv = build_profile_argv(
            nsys, opts.command, base, opts.graph_trace, opts.nsys_args, opts.force
        )
        folder = base.parent
        try:
            if folder != Path("."):
                folder.mkdir(parents=True, exist_ok=True)
            # A file made and removed there now, rather than nsys failing after the run.
            fd, probe = tempfile.mkstemp(prefix=f".{base.name}.", suffix=".probe", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise RecordError(f"{base}: cannot write the trace into folder {folder} "
                              f"({exc.strerror or exc})") from None
        # With --force, clear the previous run's report and raw stream first: otherwise a
        # run in which nsys writes only a .qdstrm would leave the old .nsys-rep looking new.
        if opts.force:
            for stale in (rep_path, qdstrm_path, sidecar):
                stale.unlink(missing_ok=True)

        t0 = time.monotonic()
        exit_code, interrupted = self.profile(profile_argv)
        traced_s = time.monotonic() - t0
        imported = False
        if not rep_path.exists():
            if qdstrm_path.exists():
                self.import_qdstrm(nsys, qdstrm_path, rep_path)
                imported = True
            else:
                raise RecordError(
                    f"nsys profile exited with code {exit_code} and wrote no report "
                    f"({rep_path}); see nsys's messages above"
                )
        if interrupted:
            self.warn(f"interrupted; exporting what was captured before the stop to {sqlite_path}")
        elif exit_code != 0:
            self.warn(
                f"the command exited with code {exit_code}; "
                f"its partial trace is still exported to {sqlite_path}"
            )
        export_argv, limited = self.export(nsys, rep_path, sqlite_path)
        untraced_s = None
        written = None
        if untraced and (interrupted or exit_code != 0):
            self.warn("no untraced run: the recorded run did not end cleanly")
        elif untraced:
            written, untraced_s = self.run_untraced(sidecar, [sqlite_path, rep_path], traced_s)
        return RecordResult(
            sqlite_path=sqlite_path,
            report_path=rep_path,
            exit_code=exit_code,
            interrupted=interrupted,
            imported_qdstrm=imported,
            tables_limited=limited,
            nsys=nsys,
            profile_argv=profile_argv,
            export_argv=export_argv,
            warnings=tuple(self.warnings),
            untraced_path=written,
            traced_run_s=traced_s,
            untraced_run_s=untraced_s,
        )

    def wants_untraced(self) -> bool:
        opts = self.options
        return runs_cgprof(opts.command) if opts.untraced is None else opts.untraced

    def run_untraced(self, sidecar: Path, exports: list[Path],
                     traced_s: float) -> tuple[Path | None, float | None]:
        """Run the command again without the profiler, timing its step marks; write
        ``sidecar`` (cgprof.untraced) and return it with the run's wall time, or (None,
        None) with a warning when the run failed or marked nothing."""
        from cgprof import scratch
        from cgprof import untraced as U

        folder = scratch.folder("cgprof-untraced-")
        try:
            argv = list(self.options.command)
            self.say("cgprof: untraced run: " + shlex.join(argv))
            t0 = time.monotonic()
            try:
                code = subprocess.run(argv, env=program_env(
                    self.env, self.options.mark_steps, folder)).returncode
            except KeyboardInterrupt:
                self.warn("the untraced run was interrupted; no untraced times")
                return None, None
            except OSError as exc:
                raise RecordError(f"cannot run {argv[0]}: {exc.strerror}") from None
            took = time.monotonic() - t0
            if code != 0:
                self.warn(f"the untraced run exited with code {_exit_status(code)}; "
                          "no untraced times")
                return None, took
            processes = U.read_processes(folder)
            if not processes:
                self.warn("the untraced run marked no steps (no NVTX range, cgprof mark, "
                          "optimizer step or graph replay); no untraced times")
                return None, took
            facts = {"command": argv, "exit_code": code, "untraced_run_s": round(took, 3),
                     "traced_run_s": round(traced_s, 3)}
            U.write(sidecar, exports, processes, facts, force=self.options.force)
            self.say(f"cgprof: untraced run took {took:.1f} s (the recorded run "
                     f"{traced_s:.1f} s); its step times are in {sidecar}")
            return sidecar, took
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def profile(self, argv: list[str]) -> tuple[int, bool]:
        """Run ``nsys profile``, its output streaming straight through; (exit code, interrupted).

        nsys returns the profiled program's exit code, so that is what cgprof passes on.
        """
        self.say("cgprof: " + shlex.join(argv))
        received: list[int] = []

        def on_signal(signum: int) -> None:
            if not received:
                self.say("\ncgprof: stopping the command; the trace so far will be exported")
            received.append(signum)

        with _forwarding_signals(on_signal) as group:
            try:
                proc = subprocess.Popen(argv, start_new_session=True,
                                        env=program_env(self.env, self.options.mark_steps))
            except OSError as exc:
                raise RecordError(f"cannot run {argv[0]}: {exc.strerror}") from None
            group.append(proc.pid)  # its own session: the pid is the process-group id
            if received:
                _signal_group(proc.pid, received[-1])
            returncode = proc.wait()
        interrupted = bool(received)
        exit_code = _exit_status(returncode)
        if interrupted and exit_code == 0:
            exit_code = 130  # the shell's code for "stopped by Ctrl-C"
        return exit_code, interrupted

    def import_qdstrm(self, nsys: Path, qdstrm: Path, rep: Path) -> None:
        """Turn the raw ``.qdstrm`` nsys left into ``.nsys-rep`` with ``QdstrmImporter``.

        The nsys bundled in Nsight Compute cannot find its importer ("Unable to retrieve
        the importer version: skipping importation of the QDSTRM file") and stops at the
        raw stream; the importer ships a folder away. Like nsys after its own import, the
        ``.qdstrm`` is removed once the report exists; on failure it is kept, so the user
        can import it by hand.
        """
        importer = find_qdstrm_importer(nsys, self.env)
        by_hand = (
            f"QdstrmImporter -i {shlex.quote(str(qdstrm))} && "
            f"nsys export --type=sqlite {shlex.quote(str(rep))}"
        )
        if importer is None:
            looked = ", ".join(qdstrm_importer_candidates(nsys))
            raise RecordError(
                f"nsys wrote only {qdstrm} and QdstrmImporter was not found "
                f"(looked in: $CGPROF_QDSTRM_IMPORTER, {looked}); set "
                f"CGPROF_QDSTRM_IMPORTER to its path, or run: {by_hand}"
            )
        argv = [str(importer), "-i", str(qdstrm)]
        with _Progress(self.progress, f"cgprof: importing {qdstrm}"):
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, env=dict(self.env))
            except OSError as exc:
                raise RecordError(f"cannot run {importer}: {exc.strerror}") from None
            output = proc.stdout + proc.stderr
            missing = _MISSING_LIBRARY.search(output)
            if missing:
                library = missing.group(1)
                package = _LIBRARY_PACKAGES.get(library, "the package that provides it")
                raise RecordError(
                    f"QdstrmImporter cannot start: shared library {library} is missing. "
                    f"Install it ({package}) or add its folder to LD_LIBRARY_PATH, "
                    f"then run: {by_hand}"
                )
            if proc.returncode != 0 or not rep.exists():
                raise RecordError(
                    f"QdstrmImporter failed on {qdstrm} (exit code {proc.returncode}): "
                    f"{_tail(output) or 'no output'}"
                )
        qdstrm.unlink()

    def export(self, nsys: Path, rep: Path, sqlite_path: Path) -> tuple[list[str], bool]:
        """Export ``rep`` to ``sqlite_path`` via a checked temporary file; (argv, limited).

        A table-limited export must hold ``StringIds`` and at least one CUPTI or NVTX
        table; if it does not (reported elsewhere: a 0-byte file when nsys does not accept
        the pattern), it is redone once as a full export, with a warning.
        """
        limited = not self.options.all_tables and export_supports_tables(nsys)
        argv = self._export_once(nsys, rep, sqlite_path, limited)
        if argv is None:
            self.warn("nsys export --tables gave an unusable file; exporting all tables instead")
            limited = False
            argv = self._export_once(nsys, rep, sqlite_path, limited)
            assert argv is not None
        return argv, limited

    def _export_once(self, nsys: Path, rep: Path, sqlite_path: Path,
                     limited: bool) -> list[str] | None:
        """One export attempt. Returns None if a limited export produced an unusable file."""
        from cgprof import scratch

        fd, tmp_name = scratch.file(f".{sqlite_path.name}.", ".sqlite", sqlite_path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        argv = build_export_argv(nsys, rep, tmp, EXPORT_TABLES if limited else None)
        what = "tables cgprof reads" if limited else "all tables"
        try:
            with _Progress(self.progress, f"cgprof: exporting {sqlite_path} ({what})"):
                try:
                    proc = subprocess.run(argv, capture_output=True, text=True,
                                          env=dict(self.env))
                except OSError as exc:
                    raise RecordError(f"cannot run {nsys}: {exc.strerror}") from None
            if proc.returncode != 0:
                raise RecordError(
                    f"nsys export failed on {rep} (exit code {proc.returncode}): "
                    f"{_tail(proc.stdout + proc.stderr) or 'no output'}"
                )
            try:
                names = check_export(tmp)
            except RecordError:
                if limited:
                    return None
                raise
            if limited and not any(n.startswith(("CUPTI_", "NVTX_")) for n in names):
                return None
            if sqlite_path.exists() and not self.options.force:
                # It appeared while the command ran; still never overwrite it.
                raise OutputExistsError(sqlite_path)
            os.replace(tmp, sqlite_path)
            return argv
        finally:
            tmp.unlink(missing_ok=True)


def record(
    options: RecordOptions,
    progress: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> RecordResult:
    """Profile ``options.command`` under nsys and export ``NAME.sqlite`` for `cgprof analyze`.

    ``progress`` receives cgprof's own lines (the nsys command, import/export progress,
    warnings); default ``sys.stderr``. nsys's and the program's output go straight to this
    process's stdout/stderr. ``env`` is the environment for nsys and the program (default
    ``os.environ``). The program's exit code is in the result, not raised: a crashed or
    interrupted run still has its partial trace exported. Raises :class:`RecordError` or
    :class:`OutputExistsError` when no usable trace can be produced.
    """
    stream = sys.stderr if progress is None else progress
    return Recorder(options, stream, os.environ if env is None else env).run()
