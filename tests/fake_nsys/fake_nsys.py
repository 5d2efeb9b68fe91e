"""A stand-in for `nsys` in CI (no GPU, no Nsight Systems): `profile`, `export`, `--version`.

The tests install it as an executable named `nsys` (a tiny sh wrapper that execs this
file with the test's Python). It behaves like the real tool where cgprof depends on it:

- `nsys profile [opts] CMD...` runs CMD as a real subprocess in nsys's own process group,
  ignores SIGINT itself (the real nsys catches it, stops the program and still writes the
  report), writes OUTPUT.nsys-rep - or only OUTPUT.qdstrm, like the nsys bundled in
  Nsight Compute - and exits with the program's exit code (128 + N for signal N).
- `nsys export --type=sqlite --output=OUT [--tables=P] [--force-overwrite=true] REP`
  writes a small real SQLite file with a StringIds table.
- `nsys export --help` lists `--tables` or not.

Environment knobs (all optional):
  FAKE_NSYS_LOG           file to append one JSON line per call: {"argv": [...]}
  FAKE_NSYS_PROFILE       rep (default) | qdstrm | none (write nothing, exit 1)
  FAKE_NSYS_EXPORT        ok (default) | fail (half-write OUT, exit 1) | garbage (non-SQLite
                          OUT, exit 0) | empty-if-tables (0-byte OUT when --tables is given)
                          | newer (what an nsys older than the report's says: `Can't parse
                          message of type "QuadDAnalysis.Data.Session"`, nothing written,
                          exit 1)
  FAKE_NSYS_HAS_TABLES    1 (default): `export --help` mentions --tables; 0: it does not
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

# nsys profile switches that take their value as the next word when not written --x=v.
TAKES_VALUE = {
    "-t", "--trace", "-s", "--sample", "-o", "--output", "-f", "--force-overwrite",
    "-d", "--duration", "--cpuctxsw", "--cuda-graph-trace", "-y", "--delay",
}


def log(argv: list[str]) -> None:
    path = os.environ.get("FAKE_NSYS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"argv": argv}) + "\n")


def option(args: list[str], long: str, short: str | None = None) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(long + "="):
            return arg.split("=", 1)[1]
        if arg in (long, short) and i + 1 < len(args):
            return args[i + 1]
    return None


def profile(args: list[str]) -> int:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1 if "=" in args[i] or args[i] not in TAKES_VALUE else 2
    opts, command = args[:i], args[i:]
    out = option(opts, "--output", "-o") or "report1"
    out = out.removesuffix(".nsys-rep")
    force = (option(opts, "--force-overwrite", "-f") or "false") == "true"
    if os.path.exists(out + ".nsys-rep") and not force:
        print(f"The file '{out}.nsys-rep' already exists.", file=sys.stderr)
        return 1
    # The real nsys stops the program on Ctrl-C and still writes its report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proc = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                         signal.SIG_DFL))
    rc = proc.wait()
    rc = 128 - rc if rc < 0 else rc
    mode = os.environ.get("FAKE_NSYS_PROFILE", "rep")
    if mode == "none":
        print("fake nsys: collection failed", file=sys.stderr)
        return 1
    suffix = ".qdstrm" if mode == "qdstrm" else ".nsys-rep"
    with open(out + suffix, "w") as f:
        json.dump({"command": command, "exit_code": rc}, f)
    if mode == "qdstrm":
        print("Unable to retrieve the importer version: skipping importation of the "
              "QDSTRM file", file=sys.stderr)
    else:
        print(f"Generated:\n    {os.path.abspath(out)}.nsys-rep")
    return rc


def export(args: list[str]) -> int:
    if "--help" in args:
        print("usage: nsys export [<args>] <nsys-rep-file>")
        print("  -t, --type=        sqlite, hdf, text, json, info, arrow, arrowdir, parquetdir")
        print("  -o, --output=      output file name")
        if os.environ.get("FAKE_NSYS_HAS_TABLES", "1") == "1":
            print("  --tables=          export only the tables whose names match a pattern")
        return 0
    assert option(args, "--type", "-t") == "sqlite", args
    out = option(args, "--output", "-o")
    rep = args[-1]
    if not os.path.exists(rep):
        print(f"Error: {rep} does not exist", file=sys.stderr)
        return 1
    force = (option(args, "--force-overwrite", "-f") or "false") == "true"
    if os.path.exists(out) and os.path.getsize(out) > 0 and not force:
        print(f"Error: {out} exists", file=sys.stderr)
        return 1
    mode = os.environ.get("FAKE_NSYS_EXPORT", "ok")
    tables = option(args, "--tables")
    if mode == "fail":
        with open(out, "wb") as f:
            f.write(b"SQLite format 3\x00 half-written")
        print("Processing events...", file=sys.stderr)
        print("Error: export failed: simulated crash", file=sys.stderr)
        return 1
    if mode == "newer":
        print('Can\'t parse message of type "QuadDAnalysis.Data.Session"', file=sys.stderr)
        return 1
    if mode == "garbage":
        with open(out, "wb") as f:
            f.write(b"this is not a database")
        return 0
    if mode == "empty-if-tables" and tables is not None:
        open(out, "wb").close()
        return 0
    if os.path.exists(out):
        os.unlink(out)
    con = sqlite3.connect(out)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000')")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER)")
    con.execute("CREATE TABLE FAKE_EXPORT (tables TEXT, report TEXT)")
    with open(rep) as f:
        con.execute("INSERT INTO FAKE_EXPORT VALUES (?, ?)", (tables, f.read()))
    con.commit()
    con.close()
    return 0


def main() -> int:
    argv = sys.argv[1:]
    log(argv)
    if argv[:1] == ["--version"]:
        print("NVIDIA Nsight Systems version 2099.1.1 (fake)")
        return 0
    if argv[:1] == ["profile"]:
        return profile(argv[1:])
    if argv[:1] == ["export"]:
        return export(argv[1:])
    print(f"fake nsys: unsupported {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
