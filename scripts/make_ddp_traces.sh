#!/usr/bin/env bash
# Issue 14: DDP on two GPUs, eager vs one CUDA graph per rank: figures, traces, diff.
#
# Run ON A MACHINE WITH TWO GPUs (the nvidia-h200-x2 kind), from anywhere in the repository:
#
#     source .device-kit/setup-on-device.sh    # nsys folder on PATH, libdw for QdstrmImporter
#     bash scripts/make_ddp_traces.sh
#
# 1. Figures (no profiler): `torchrun --nproc-per-node 2 -m cgprof run train --ddp`, eager and
#    graphed in one launch, ResNet-18 batch 16 per rank and the Transformer batch 8 per rank,
#    $STEPS timed steps after $WARMUP warm-up (default 200 / 20): per-rank p50/p99, the
#    graphed speedup, eager-vs-graphed loss equality on both ranks, parameters in sync.
#    Tables go to the log, JSON to $DEST/ddp_{resnet18,transformer}_b*.json.
# 2. Traces: `cgprof record -- torchrun --nproc-per-node 2 ...` (nsys follows torchrun's
#    worker processes: all ranks in one report), the $TRACE_SIZE (default tiny) $TRACE_MODEL
#    (default mlp) eager and graphed, --no-cudnn-benchmark so the two launches run the same
#    kernels. Eager: 12 steps after 3 warm-up; graphed: 12 steps after 12 warm-up (the graph
#    needs 11 DDP-enabled eager warm-up iterations before its capture, and they are recorded
#    too). Each file must stay under 2 MB: a DDP rank-step of the full MLP takes ~93 KB of
#    SQLite (12 + 3 graphed steps x 2 ranks made 2.8 MB), hence the tiny model. Writes
#    traces/ddp_${TRACE_MODEL}_train_{eager,graph}.sqlite, their `nsys stats` oracles in
#    traces/expected/, `cgprof analyze` of each (in the log), and `cgprof diff` HTML into
#    $DEST. $DEST gets 5 files (log, 2 JSON, HTML, tgz): within what the device returns.
# With $OUT set (the device machine), DEST=$OUT and everything is also packed into
# $OUT/ddp_traces.tgz; the whole log is tee'd to $DEST/make_ddp_traces.log.
# Knobs: STEPS, WARMUP, TRACE_MODEL, TRACE_SIZE (default tiny), EAGER_STEPS/EAGER_WARMUP, GRAPH_STEPS/GRAPH_WARMUP,
# FIGURES=0 (traces only).
set -euo pipefail
cd "$(dirname "$0")/.."

export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DEST=${DEST:-${OUT:-/tmp/ddp_traces}}
mkdir -p "$DEST" traces/expected
exec > >(tee "$DEST/make_ddp_traces.log") 2>&1

STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
TRACE_MODEL=${TRACE_MODEL:-mlp}
# The full MLP made a 2.8 MB graphed trace (12 DDP warm-up + 3 steps x 2 ranks, ~93 KB per
# rank-step): the traces use the tiny MLP (4 x Linear(16)), which keeps DDP's bucketed
# all-reduce, the capture and the replay, in far fewer kernels.
TRACE_SIZE=${TRACE_SIZE:-tiny}
EAGER_STEPS=${EAGER_STEPS:-12}
EAGER_WARMUP=${EAGER_WARMUP:-3}
GRAPH_STEPS=${GRAPH_STEPS:-12}
GRAPH_WARMUP=${GRAPH_WARMUP:-12}
FIGURES=${FIGURES:-1}
MAX_BYTES=$((2 * 1024 * 1024))

MADE=()
die() {
  echo "make_ddp_traces: FAILED: $*" >&2
  if [ -n "${OUT:-}" ] && [ "${#MADE[@]}" -gt 0 ]; then
    tar czf "$OUT/ddp_traces.tgz" "${MADE[@]}" traces/expected/ddp_* 2>/dev/null || true
  fi
  exit 1
}

# --- preconditions -------------------------------------------------------------------
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
[ "$GPUS" -ge 2 ] || die "torch sees $GPUS GPU(s); this needs two (the nvidia-h200-x2 kind)"
NSYS=$(python3 -c 'from cgprof.record import find_nsys; print(find_nsys())') \
  || die "nsys not found; source .device-kit/setup-on-device.sh first, or set CGPROF_NSYS"
if command -v torchrun > /dev/null; then
  TORCHRUN=(torchrun)
else
  TORCHRUN=(python3 -m torch.distributed.run)
fi
TORCHRUN+=(--standalone --nproc-per-node 2)
echo "make_ddp_traces: nsys $NSYS; launcher ${TORCHRUN[*]}"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'

# --- 1. figures ------------------------------------------------------------------------
RUN=(-m cgprof run train --ddp --mode both --steps "$STEPS" --warmup "$WARMUP" --seed 0)
if [ "$FIGURES" = 1 ]; then
  for spec in resnet18:16 transformer:8; do
    model=${spec%%:*}
    batch=${spec##*:}
    echo
    echo "=== figures: $model, batch $batch per rank, 2 ranks"
    "${TORCHRUN[@]}" "${RUN[@]}" --model "$model" --batch "$batch" \
      --json "$DEST/ddp_${model}_b${batch}.json" --force \
      || die "torchrun $model exited with an error (see above)"
  done
fi

# --- 2. traces -------------------------------------------------------------------------
for mode in eager graph; do
  name=ddp_${TRACE_MODEL}_train_$mode
  if [ "$mode" = eager ]; then
    counts=(--steps "$EAGER_STEPS" --warmup "$EAGER_WARMUP")
  else
    counts=(--steps "$GRAPH_STEPS" --warmup "$GRAPH_WARMUP")
  fi
  cmd=(python3 -m cgprof record -o "traces/$name" --force -- "${TORCHRUN[@]}"
       -m cgprof run train --ddp --mode "$mode" --model "$TRACE_MODEL" --size "$TRACE_SIZE"
       "${counts[@]}" --seed 0 --no-cudnn-benchmark)
  echo
  echo "=== traces/$name.sqlite: ${cmd[*]}"
  "${cmd[@]}" || die "cgprof record of $name failed (see above)"
  size=$(stat -c %s "traces/$name.sqlite")
  echo "traces/$name.sqlite: $size bytes"
  [ "$size" -le "$MAX_BYTES" ] \
    || die "traces/$name.sqlite is $size bytes, over 2 MB: lower ${mode^^}_STEPS"
  echo "make_ddp_traces: command of $name.sqlite: ${cmd[*]}"
  MADE+=("traces/$name.sqlite")
  for report in cuda_gpu_kern_sum cuda_api_sum nvtx_sum; do
    "$NSYS" stats --report "$report" --format csv --force-export=false \
      --output "traces/expected/$name" "traces/$name.sqlite" > /dev/null \
      || die "nsys stats -r $report traces/$name.sqlite failed"
    mv "traces/expected/${name}_${report}.csv" "traces/expected/$name.$report.csv"
  done
  python3 -m cgprof analyze "traces/$name.sqlite" || die "cgprof analyze traces/$name.sqlite failed"
done
echo
echo "=== cgprof diff eager -> graph"
python3 -m cgprof diff "${MADE[0]}" "${MADE[1]}" --labels eager,graph \
  -o "$DEST/ddp_${TRACE_MODEL}_diff.html" || die "cgprof diff failed"

if [ -n "${OUT:-}" ]; then
  # the JSON, text and HTML outputs are in $OUT already (DEST); the traces travel packed
  tar czf "$OUT/ddp_traces.tgz" "${MADE[@]}" traces/expected/ddp_*
  echo "make_ddp_traces: packed the traces and their oracles into $OUT/ddp_traces.tgz"
fi
echo "make_ddp_traces: done"
