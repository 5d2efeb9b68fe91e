"""The nsys executable: finding it and its report importer, its version, and exporting a
report to SQLite.

:func:`find_nsys` looks where users keep nsys (``--nsys``, ``CGPROF_NSYS``, ``PATH``, the
install folders of :data:`NSYS_GLOBS`); :func:`build_export_argv` is ``nsys export`` of the
tables cgprof reads; :func:`exported` turns a ``.nsys-rep`` a user hands ``cgprof analyze``
into a temporary SQLite file, and a failed export into one line naming the nsys used and
the version the report names (:func:`export_failure`). ``cgprof record`` (:mod:`cgprof.record`)
and the reading layer (:mod:`cgprof.io.loader`, through :data:`cgprof.io.report_export`) both
use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from cgprof import scratch
from cgprof.errors import CgprofError, RecordError, TraceError
from cgprof.schema import TABLES_READ

#: Where nsys usually lives when it is not on PATH, searched in this order. The last one is
#: the full nsys that ships inside Nsight Compute (and inside containers that bundle it).
NSYS_GLOBS: tuple[str, ...] = (
    "/opt/nvidia/nsight-systems/*/bin",
    "/usr/local/cuda*/bin",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64",
)

#: What ``nsys export --tables`` asks for, as one pattern: the tables cgprof reads
#: (:data:`cgprof.schema.TABLES_READ`, the single list the loader and the recorder share)
#: plus the ``ENUM_*`` lookup tables, a few kB that keep the numeric codes in the file
#: readable for anyone querying it by hand. Exact names are listed without anchors so the
#: pattern selects the same tables whether nsys matches it against the whole table name
#: or searches within it.
EXPORT_TABLES: tuple[str, ...] = (*TABLES_READ, "ENUM_")


def is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version_key(path: Path) -> list[object]:
    """Sort key that orders ``2025.3.1`` after ``2024.6.2`` and ``cuda-12.10`` after ``-12.9``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def find_nsys(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    globs: Sequence[str] = NSYS_GLOBS,
) -> Path:
    """Return the nsys executable to use.

    Order: ``explicit`` (``--nsys``; a file, or a folder holding ``nsys``), then
    ``CGPROF_NSYS``, then ``PATH``, then each of ``globs`` (newest version first when a
    pattern matches several installs). An explicit path or ``CGPROF_NSYS`` that is not an
    executable is an error rather than a silent fall-through, so a typo is not hidden by
    another nsys. Raises :class:`RecordError` naming every place looked.
    """
    env = os.environ if env is None else env

    def usable(value: str | os.PathLike[str], label: str) -> Path:
        path = Path(value).expanduser()
        if path.is_dir():
            path = path / "nsys"
        if not is_executable_file(path):
            raise RecordError(f"{label}{value}: no nsys executable there")
        return path

    if explicit is not None and str(explicit) != "":
        return usable(explicit, "--nsys ")
    if env.get("CGPROF_NSYS"):
        return usable(env["CGPROF_NSYS"], "CGPROF_NSYS=")
    on_path = shutil.which("nsys", path=env.get("PATH", ""))
    if on_path:
        return Path(on_path)
    for pattern in globs:
        folders = sorted(Path("/").glob(pattern.lstrip("/")), key=_version_key, reverse=True)
        for folder in folders:
            if is_executable_file(folder / "nsys"):
                return folder / "nsys"
    looked = ", ".join(["--nsys", "$CGPROF_NSYS", "PATH", *globs])
    raise RecordError(
        f"nsys (Nsight Systems) not found; looked in: {looked}. "
        "Install Nsight Systems or point cgprof at it with --nsys PATH or CGPROF_NSYS=PATH"
    )


def _importer_folders(nsys: Path) -> list[Path]:
    folders: list[Path] = []
    for folder in (nsys.parent, nsys.resolve().parent):
        if folder not in folders:
            folders.append(folder)
    return folders


def qdstrm_importer_candidates(nsys: Path) -> list[str]:
    """Places searched for ``QdstrmImporter`` beside ``nsys``, in order (for messages).

    A full Nsight Systems install keeps the importer in a sibling of nsys's folder
    (``target-linux-x64/nsys`` next to ``host-linux-x64/QdstrmImporter``); the nsys bundled
    in Nsight Compute has ``host/target-linux-x64/nsys`` and
    ``host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter``. nsys on PATH is often a symlink
    or a ``bin/`` wrapper, so both the given and the resolved folder are searched.
    """
    places: list[str] = []
    for folder in _importer_folders(nsys):
        places += [str(folder / "QdstrmImporter"), str(folder.parent / "*" / "QdstrmImporter")]
    return places


def find_qdstrm_importer(nsys: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """Return ``CGPROF_QDSTRM_IMPORTER``, else the ``QdstrmImporter`` beside ``nsys``, else None."""
    env = os.environ if env is None else env
    if env.get("CGPROF_QDSTRM_IMPORTER"):
        path = Path(env["CGPROF_QDSTRM_IMPORTER"]).expanduser()
        if not is_executable_file(path):
            raise RecordError(
                f"CGPROF_QDSTRM_IMPORTER={path}: no QdstrmImporter executable there"
            )
        return path
    for folder in _importer_folders(nsys):
        siblings = sorted(folder.parent.glob("*/QdstrmImporter"), key=_version_key, reverse=True)
        for candidate in [folder / "QdstrmImporter", *siblings]:
            if is_executable_file(candidate):
                return candidate
    return None


# --------------------------------------------------------------------------------------
# Exporting a report


def export_tables_pattern(tables: Sequence[str] = EXPORT_TABLES) -> str:
    """The ``nsys export --tables`` value.

    nsys 2025.3's ``export --help``: "Value is a comma-separated list of search patterns (no
    spaces)". A ``|``-joined regular expression matched no table there (the export came out
    unusable), so the names are joined with commas; ``ENUM_`` selects the lookup tables whether
    a pattern is matched as a substring or as a regular expression.
    """
    return ",".join(tables)


def build_export_argv(
    nsys: str | os.PathLike[str],
    report: str | os.PathLike[str],
    sqlite_out: str | os.PathLike[str],
    tables: Sequence[str] | None = None,
) -> list[str]:
    """``nsys export --type=sqlite`` argv writing ``sqlite_out`` from ``report``.

    ``tables`` limits the export to those tables (``--tables``, nsys versions that have
    it); ``None`` exports everything. ``--force-overwrite=true`` because ``sqlite_out`` is
    cgprof's own temporary file, which already exists (it was reserved with mkstemp).
    """
    argv = [str(nsys), "export", "--type=sqlite", f"--output={sqlite_out}",
            "--force-overwrite=true"]
    if tables is not None:
        argv.append(f"--tables={export_tables_pattern(tables)}")
    argv.append(str(report))
    return argv


def export_supports_tables(nsys: Path) -> bool:
    """Whether this nsys's ``export`` has ``--tables`` (read from ``nsys export --help``).

    Table filtering is not in every nsys release, so it is detected rather than assumed;
    if the help cannot be read, cgprof exports every table.
    """
    try:
        proc = subprocess.run(
            [str(nsys), "export", "--help"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"--tables\b", proc.stdout + proc.stderr) is not None


def nsys_version(nsys: Path) -> str | None:
    """The first line ``nsys --version`` prints (``NVIDIA Nsight Systems version
    2025.3.2.474-253236389321v0``), or None when it fails or prints nothing."""
    try:
        proc = subprocess.run([str(nsys), "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in (proc.stdout or "").splitlines() if ln.strip()]
    return lines[0] if proc.returncode == 0 and lines else None


#: How much of the start of an ``.nsys-rep`` :func:`report_version` searches.
REPORT_VERSION_BYTES = 4 << 20

#: What names an nsys version inside a report, most telling first: nsys's full version
#: (``2025.3.2.474-253236389321v0``, as ``nsys --version`` ends), then a version after the
#: words "Nsight Systems" (``NVIDIA Nsight Systems version 2025.3.2``, an install folder
#: ``nsight-systems/2025.3.2/``).
_REPORT_VERSIONS = (
    re.compile(rb"(?<![\d.])(20\d\d\.\d{1,2}\.\d{1,3}\.\d{1,6}-\d{6,}v\d+)"),
    re.compile(rb"(?i)nsight[ _-]?systems[^\x00-\x1f]{0,40}?"
               rb"(?<![\d.])(20\d\d\.\d{1,2}\.\d{1,3}(?:\.\d{1,6})?)(?![\d.])"),
)


def report_version(report: Path) -> str | None:
    """The nsys version an ``.nsys-rep`` names in its first REPORT_VERSION_BYTES, or None.

    Best effort: a report is a binary container whose layout nsys does not document, so
    this reads no structure, only text in it that names an nsys version (the patterns of
    _REPORT_VERSIONS). None when there is none (a compressed or other layout): then the
    caller says nothing of the report's version rather than guess one."""
    try:
        with open(report, "rb") as f:
            head = f.read(REPORT_VERSION_BYTES)
    except OSError:
        return None
    for pattern in _REPORT_VERSIONS:
        found = pattern.search(head)
        if found:
            return found.group(1).decode("ascii")
    return None


def export_failure(report: Path, nsys: Path, why: str) -> str:
    """The one line for an ``nsys export`` of ``report`` by ``nsys`` that failed with
    ``why``: which nsys it was (path and ``nsys --version``), the nsys version the report
    names where one can be read (:func:`report_version`), and what to do. A report written
    by a newer nsys than the one exporting it fails inside nsys with ``Can't parse message
    of type "QuadDAnalysis.Data.Session"`` and no word of versions."""
    version = nsys_version(nsys)
    used = f"{nsys} ({version or 'its version unknown: nsys --version failed'})"
    written = report_version(report)
    cmd = f"`nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}`"
    line = f"{report}: `nsys export --type sqlite` failed ({why}) with {used}"
    if written is None:
        return (f"{line}: export it with the nsys that recorded it ({cmd}) or point "
                f"cgprof at that nsys with --nsys PATH or CGPROF_NSYS=PATH")
    short = re.match(r"20\d\d\.\d+\.\d+", written)
    if short and version and re.search(rf"(?<![\d.]){re.escape(short.group(0))}(?!\d)",
                                       version):
        return f"{line}; the report names the same nsys version ({written})"
    return (f"{line}; the report names nsys {written}: export it with that nsys ({cmd}) "
            f"or point cgprof at it with --nsys PATH or CGPROF_NSYS=PATH")


def export_report(report: Path, into: Path) -> Path:
    """Export an ``.nsys-rep`` to SQLite in folder ``into`` with the settings' nsys
    (``--nsys``), else the one :func:`find_nsys` finds."""
    from cgprof.settings import current

    explicit = current().nsys
    try:
        nsys = find_nsys(explicit, globs=NSYS_GLOBS)
    except CgprofError as exc:
        if explicit is not None:  # (the user's own path: say what is wrong with it)
            raise TraceError(f"{report}: {exc}") from None
        looked = ", ".join(["--nsys", "$CGPROF_NSYS", "PATH", *NSYS_GLOBS])
        raise TraceError(
            f"{report}: is an Nsight Systems report and no nsys was found to export it "
            f"(looked in {looked}); pass --nsys PATH, set "
            f"CGPROF_NSYS=PATH or export it yourself with "
            f"`nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}`"
        ) from None
    out = into / (report.stem + ".sqlite")
    argv = build_export_argv(nsys, report, out)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TraceError(f"{report}: cannot run {nsys} ({exc.strerror})") from None
    if proc.returncode != 0 or not out.is_file():
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise TraceError(export_failure(report, nsys, why))
    return out


@contextlib.contextmanager
def exported(report: Path) -> Iterator[Path]:
    """A temporary SQLite export of ``report``, removed afterwards."""
    folder = scratch.folder("cgprof-export-")
    try:
        yield export_report(report, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
