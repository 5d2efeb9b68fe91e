#!/usr/bin/env bash
# Regenerate the sample traces in traces/ with `cgprof record` and the project's own runners.
#
# Run ON THE GPU MACHINE, from anywhere in the repository:
#
#     source .device-kit/setup-on-device.sh    # nsys folder on PATH, libdw for QdstrmImporter
#     bash scripts/make_traces.sh
#
# Writes traces/NAME.sqlite (node-granularity graph tracing unless the name says
# otherwise) and traces/versions.txt (nsys, GPU, driver, PyTorch, and each trace's command).
# Stops at the first failure with a message; the whole log is tee'd to $LOG
# (default: $OUT/make_traces.log on the device machine, else /tmp/make_traces.log).
# With $OUT set, traces/*.sqlite + versions.txt are also packed into $OUT/traces.tgz.
#
# Knobs: MLP_STEPS/MLP_WARMUP (default 20/5), CONV_STEPS/CONV_WARMUP (default 10/3),
# ANALYZE=1 to run `cgprof analyze` on each trace as it is made, ONLY="name1 name2" to make
# just those traces (and their oracles; versions.txt then lists only them, to be merged by
# hand into the committed one).
set -euo pipefail
cd "$(dirname "$0")/.."

export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG=${LOG:-${OUT:-/tmp}/make_traces.log}
exec > >(tee "$LOG") 2>&1

MLP_STEPS=${MLP_STEPS:-20}
MLP_WARMUP=${MLP_WARMUP:-5}
CONV_STEPS=${CONV_STEPS:-10}
CONV_WARMUP=${CONV_WARMUP:-3}
ANALYZE=${ANALYZE:-0}
MAX_BYTES=$((2 * 1024 * 1024))
VERSIONS=traces/versions.txt
MADE=()

die() {
  echo "make_traces: FAILED: $*" >&2
  if [ -n "${OUT:-}" ] && [ "${#MADE[@]}" -gt 0 ]; then
    tar czf "$OUT/traces.tgz" "${MADE[@]}" "$VERSIONS" traces/expected 2>/dev/null || true
    echo "make_traces: packed the traces made before the failure into $OUT/traces.tgz" >&2
  fi
  exit 1
}

# --- preconditions -------------------------------------------------------------------
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || die "torch sees no CUDA GPU; run this on the GPU machine"
NSYS=$(python3 -c 'from cgprof.record import find_nsys; print(find_nsys())') \
  || die "nsys not found; source .device-kit/setup-on-device.sh first, or set CGPROF_NSYS"
echo "make_traces: nsys is $NSYS"
echo "make_traces: does this nsys's export filter tables?"
"$NSYS" export --help 2>&1 | grep -i -A8 -- '--tables' || echo "  (no --tables in nsys export --help)"

mkdir -p traces
{
  echo "nsys: $("$NSYS" --version 2>&1 | head -1)"
  echo "gpu, driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "torch, cuda: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
  echo "python: $(python3 -c 'import sys; print(sys.version.split()[0])')"
  echo "recorded: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commands (run from the repository root):"
} > "$VERSIONS"
cat "$VERSIONS"

# --- one trace ------------------------------------------------------------------------
# trace NAME [cgprof record options] -- COMMAND...   or   trace NAME SCRIPT.py [ARGS]
trace() {
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
    return 0
  fi
  local cmd=(python3 -m cgprof record -o "traces/$name" --force "$@")
  echo
  echo "=== traces/$name.sqlite: ${cmd[*]}"
  local rc=0
  "${cmd[@]}" || rc=$?
  [ "$rc" -eq 0 ] || die "traces/$name: cgprof record exited with code $rc (see above)"
  local size
  size=$(stat -c %s "traces/$name.sqlite")
  echo "traces/$name.sqlite: $size bytes"
  [ "$size" -le "$MAX_BYTES" ] \
    || die "traces/$name.sqlite is $size bytes, over 2 MB: lower its steps (see the knobs above)"
  echo "  $name.sqlite: ${cmd[*]}" >> "$VERSIONS"
  MADE+=("traces/$name.sqlite")
  if [ "$ANALYZE" = 1 ]; then
    python3 -m cgprof analyze "traces/$name.sqlite" || die "cgprof analyze traces/$name.sqlite failed"
  fi
}

# The runners (`cgprof run`); --warmup steps are recorded too (still NVTX-marked).
RUN=(python3 -m cgprof run)
# --no-cudnn-benchmark: eager and graphed runs are separate processes, and cuDNN's autotuner
# may pick different conv kernels in each; the traces should differ only by graphing.
MLP=(--model mlp --steps "$MLP_STEPS" --warmup "$MLP_WARMUP" --device cuda --seed 0)
CONV=(--model resnet18 --steps "$CONV_STEPS" --warmup "$CONV_WARMUP" --device cuda --seed 0
      --no-cudnn-benchmark)

trace mlp_train_eager -- "${RUN[@]}" train --mode eager "${MLP[@]}"
trace mlp_train_graph -- "${RUN[@]}" train --mode graph "${MLP[@]}"
trace mlp_infer_eager -- "${RUN[@]}" infer --mode eager "${MLP[@]}"
trace mlp_infer_graph -- "${RUN[@]}" infer --mode graph "${MLP[@]}"
trace resnet18_train_eager -- "${RUN[@]}" train --mode eager "${CONV[@]}"
trace resnet18_train_graph -- "${RUN[@]}" train --mode graph "${CONV[@]}"
# The other two benchmark workloads, graphed only, with the benchmark's settings (cuDNN
# autotuning on, channels-last ResNet inference): their replays' compactness and node gaps.
trace resnet18_infer_graph -- "${RUN[@]}" infer --mode graph --model resnet18 \
  --steps "$MLP_STEPS" --warmup "$MLP_WARMUP" --device cuda --seed 0
trace transformer_train_graph -- "${RUN[@]}" train --mode graph --model transformer \
  --steps "$CONV_STEPS" --warmup "$CONV_WARMUP" --device cuda --seed 0
# Their eager twins, so the what-if estimate can be checked against a measured speedup.
trace resnet18_infer_eager -- "${RUN[@]}" infer --mode eager --model resnet18 \
  --steps "$MLP_STEPS" --warmup "$MLP_WARMUP" --device cuda --seed 0
trace transformer_train_eager -- "${RUN[@]}" train --mode eager --model transformer \
  --steps "$CONV_STEPS" --warmup "$CONV_WARMUP" --device cuda --seed 0
# `cgprof run serve`: 8 closed-loop clients (20 ms think time) batched into the graph
# buckets 1,2,4,8; each batch is a `step`. Short, so the trace stays under 2 MB.
trace mlp_serve_graph -- "${RUN[@]}" serve --model mlp --mode graph --device cuda --seed 0 \
  --clients 8 --think-ms 20 --max-batch 8 --max-wait-ms 2 --duration 0.3 --warmup 0.1
# The same graphed MLP training with --cuda-graph-trace=graph: replayed kernels have no rows
# of their own there, only one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per replay.
trace mlp_train_graph_graphtrace --graph-trace graph -- "${RUN[@]}" train --mode graph "${MLP[@]}"
# A user's script that knows nothing of cgprof (plain torch.cuda.nvtx ranges); recorded as
# `cgprof record SCRIPT.py`, so it also runs under the interpreter cgprof runs under.
trace user_train scripts/examples/user_train.py
# The same script graphed by hand (torch.cuda.CUDAGraph, still no cgprof): the measured pair.
trace user_train_graph scripts/examples/user_train.py --graph
# torch.compile(mode="reduce-overhead"): Inductor's CUDA graph trees, steps marked with a
# plain `train_step` range; the model compiled with an eager AdamW (a partial graph), and the
# whole step compiled.
trace compile_train_model scripts/examples/compile_train.py --compile model --steps "$MLP_STEPS"
trace compile_train_step scripts/examples/compile_train.py --compile step --steps "$MLP_STEPS"

# Plain loops with no NVTX and no cgprof import (most users' scripts): the steps must come
# from the launch stream. Training and inference, eager, graphed by hand and compiled.
for task in train infer; do
  for mode in eager graph compile; do
    trace "plain_${task}_${mode}" scripts/examples/plain_loop.py --task "$task" --mode "$mode"
  done
done

# --- the oracle: what nsys's own reports say about each trace ---------------------------
# tests/test_oracle.py checks cgprof's kernel, API and NVTX summaries against these CSVs.
echo
echo "=== nsys stats oracles -> traces/expected/"
mkdir -p traces/expected
for db in "${MADE[@]}"; do
  name=$(basename "$db" .sqlite)
  for report in cuda_gpu_kern_sum cuda_api_sum nvtx_sum; do
    "$NSYS" stats --report "$report" --format csv --force-export=false \
      --output "traces/expected/$name" "$db" > /dev/null \
      || die "nsys stats -r $report $db failed"
    if [ -f "traces/expected/${name}_${report}.csv" ]; then
      mv "traces/expected/${name}_${report}.csv" "traces/expected/$name.$report.csv"
    else
      # nsys skips a report whose data is absent (e.g. no NVTX): an empty file says so.
      echo "  $name: nsys stats -r $report wrote nothing (no such data); empty oracle"
      : > "traces/expected/$name.$report.csv"
    fi
  done
done
ls traces/expected | head -40

# --- checks on the real nsys ------------------------------------------------------------
echo
echo "=== check: a failing command's exit code passes through cgprof record (expect 3)"
check_dir=$(mktemp -d)
rc=0
python3 -m cgprof record -o "$check_dir/exit3" --force -- python3 -c 'import sys; sys.exit(3)' || rc=$?
rm -rf "$check_dir"
[ "$rc" -eq 3 ] || die "exit-code check: cgprof record returned $rc, expected 3"
echo "exit-code check: ok (3)"

echo
echo "=== traces"
ls -l "${MADE[@]}"
cat "$VERSIONS"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/traces.tgz" "${MADE[@]}" "$VERSIONS" traces/expected
  echo "make_traces: packed traces into $OUT/traces.tgz"
fi
echo "make_traces: done"
