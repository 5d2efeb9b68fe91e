"""A stand-in for Nsight Systems' `QdstrmImporter -i X.qdstrm` (writes X.nsys-rep).

FAKE_IMPORTER: ok (default) | libdw (fail to start like the real binary on a machine
without libdw, exit 127) | fail (a corrupt stream, exit 2). FAKE_NSYS_LOG: as fake_nsys.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    argv = sys.argv[1:]
    path = os.environ.get("FAKE_NSYS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"importer": argv}) + "\n")
    mode = os.environ.get("FAKE_IMPORTER", "ok")
    if mode == "libdw":
        print(f"{sys.argv[0]}: error while loading shared libraries: libdw.so.1: "
              "cannot open shared object file: No such file or directory", file=sys.stderr)
        return 127
    if mode == "fail":
        print("Importing...", file=sys.stderr)
        print("Error: the QDSTRM file is corrupt", file=sys.stderr)
        return 2
    assert argv[0] == "-i", argv
    qdstrm = argv[1]
    with open(qdstrm) as src, open(qdstrm.removesuffix(".qdstrm") + ".nsys-rep", "w") as dst:
        dst.write(src.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
