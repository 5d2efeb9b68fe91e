#!/usr/bin/env bash
# cgprof analyze against nsys stats / nsys analyze on the GPU machine, same files, same run
# (issue 10's side-by-side). Run from the project root after
#   source .device-kit/setup-on-device.sh; export PYTHONPATH=$PWD:$PYTHONPATH
# with a kit that carries cgprof's engine (the GPU machine has no DuckDB of its own):
#   bash ../shared/device/prepare.sh duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5
# Writes its logs to $OUT (default /tmp/bench-vs-nsys):
#   bench_1m.txt   scripts/bench_analyze.py --vs-nsys on the 1M-kernel synthetic trace
#   bench_r18.txt  the same on a real 300-step ResNet-18 eager training trace (cgprof record;
#                  target: the first run faster than nsys stats)
#   (REPEAT=N: runs per measurement, best kept; default 2)
#   nsys_rep.txt   a .nsys-rep given straight to cgprof analyze (exported with this nsys)
#                  gives the same JSON as its SQLite export
set -uo pipefail
# Without DuckDB cgprof reads SQLite through sqlite3 (its fallback, several times slower):
# that is not the engine this compares, so stop.
if ! python3 -c "import duckdb, duckdb_extension_sqlite_scanner" 2>/dev/null; then
  echo "bench_vs_nsys_gpu.sh: duckdb and duckdb-extension-sqlite-scanner are not importable;" \
    "carry them (bash ../shared/device/prepare.sh duckdb==1.5.5" \
    "duckdb-extension-sqlite-scanner==1.5.5)" >&2
  exit 2
fi
OUT=${OUT:-/tmp/bench-vs-nsys}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/bench-vs-nsys-work}
mkdir -p "$WORK"
# Compile cgprof once, as an installed package is: a fresh copy of the working tree has no
# .pyc, and every measured process would otherwise compile it from source (~0.36 s there).
python3 -m compileall -q cgprof > /dev/null
# The kit installs its wheels with --no-compile, the device sets PYTHONDONTWRITEBYTECODE and
# its numpy ships without .pyc (407 .py, 0 .pyc on 2026-12-01): every measured process would
# compile those modules from source. Compile the packages on the analyze path once, in place,
# as `pip install` does for a user; print what each one holds.
python3 - <<'PY'
import compileall, importlib.util, pathlib
for mod in ("numpy", "pandas", "pyarrow", "duckdb", "click", "dateutil", "pytz"):
    spec = importlib.util.find_spec(mod)
    if spec is None or spec.origin is None:
        continue
    root = pathlib.Path(spec.origin).parent
    py = sum(1 for _ in root.rglob("*.py"))
    before = sum(1 for _ in root.rglob("*.pyc"))
    ok = before >= py or compileall.compile_dir(str(root), quiet=2)  # one process: a pool cannot re-import a stdin script
    after = sum(1 for _ in root.rglob("*.pyc"))
    print(f"{mod}: {root} ({py} .py, {before} .pyc before, {after} after{'' if ok else ', compile failed'})")
PY
python3 -X importtime -c "import cgprof.metrics, cgprof.report.json_report, cgprof.cli" 2> "$OUT/importtime.txt"
sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -8
echo "host: $(nproc) cores, $(nsys --version), $(python3 -c 'import duckdb, pyarrow, pandas;
print("duckdb", duckdb.__version__, "pyarrow", pyarrow.__version__, "pandas", pandas.__version__)')"
[ -f "$WORK/t1m.sqlite" ] || python3 scripts/synth_trace.py "$WORK/t1m.sqlite"
python3 scripts/bench_analyze.py --trace "$WORK/t1m.sqlite" --repeat ${REPEAT:-2} --vs-nsys \
  2>&1 | tee "$OUT/bench_1m.txt"
if [ ! -f "$WORK/r18.sqlite" ]; then
  python3 -m cgprof record -o "$WORK/r18" --force -- python3 -m cgprof run train \
    --model resnet18 --mode eager --steps 300 --device cuda --seed 0 > "$OUT/record_r18.txt" 2>&1
  tail -3 "$OUT/record_r18.txt"
fi
ls -la "$WORK"/r18.*
python3 scripts/bench_analyze.py --trace "$WORK/r18.sqlite" --repeat ${REPEAT:-2} --vs-nsys \
  --vs-nsys-target 1 \
  2>&1 | tee "$OUT/bench_r18.txt"
{
  /usr/bin/time -f "nsys-rep: %e s, %M KB" python3 -m cgprof analyze "$WORK/r18.nsys-rep" \
    --no-cache --json "$WORK/rep.json" --quiet --force
  python3 -m cgprof analyze "$WORK/r18.sqlite" --no-cache --json "$WORK/sql.json" --quiet --force
  python3 - "$WORK/rep.json" "$WORK/sql.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b):
    d["trace"].pop("path")
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
print("nsys-rep vs sqlite JSON:", "identical (but for the path)" if not diff else f"differ in {diff}")
PY
} 2>&1 | tee "$OUT/nsys_rep.txt"
