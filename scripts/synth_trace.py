#!/usr/bin/env python3
"""Write a large synthetic, nsys-shaped trace (default 1M kernels, 1M API calls) for benchmarks.

    python3 scripts/synth_trace.py /tmp/synth.sqlite              # 1M + 1M rows
    python3 scripts/synth_trace.py /tmp/small.sqlite --n-kernels 20000 --n-runtime 20000 \\
        --n-steps 200

    from synth_trace import generate
    stats = generate("/tmp/synth.sqlite", n_kernels=1_000_000, n_runtime=1_000_000)

The file has the schema of a real Nsight Systems 2025.3 export (the small tables are written
by `tests/nsysdb.make_nsys_db`, the big ones with the same DDL from `tests/nsys_ddl.py`) and
the shape of a PyTorch training run recorded with `--cuda-graph-trace=node`
(META_DATA_CAPTURE mode Node), 1 process, 2 threads, 1 GPU, 3 streams:

- init: a burst of `cuGetProcAddress_v2` driver calls (eventClass 1) on the main thread;
- NVTX range `warmup` (domain `cgprof`): 3 eager forwards on side stream 13;
- range `capture`: stream capture of one forward (`cudaStreamBeginCapture`, one
  `cudaLaunchKernel_v7000` per node with no kernel row, `cudaStreamEndCapture`,
  `cudaGraphInstantiateWithFlags`) and the CUDA_GRAPH_NODE_EVENTS rows that makes;
- range `eager`: `(1 - graph_fraction) * n_steps` ranges `step` (payload = step index), each a
  1 MiB `cudaMemcpyAsync` HtoD, one `cudaLaunchKernel_v7000` per kernel (its start precedes
  the kernel; unique correlationIds), ~10 % of the kernels on side stream 14 (they overlap
  stream 7), filler API calls, and a closing `cudaStreamSynchronize` (+ its
  SYNCHRONIZATION row) that waits for the GPU;
- range `graph`: the other steps, each a memcpy, one `cudaGraphLaunch_v10000` whose
  correlationId all of that replay's kernels share (non-NULL graphNodeId, back to back on
  stream 7 with ~0.3 us gaps), filler calls and the closing sync;
- thread 2 polls (`cudaEventQuery_v3020`, `cudaStreamQuery_v3020`) across the whole run.

Every step runs the same "model": a fixed sequence of kernels drawn from ~50 realistic names
(PyTorch elementwise/reduce templates, cuBLAS/cutlass GEMMs, flash attention, triton).
Filler calls make the API table exactly `n_runtime` rows. Per stream, kernels (and the
memcpy) never overlap; per thread, API calls never overlap; all times are integer ns.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nsysdb import GN, N, global_pid, global_tid, make_nsys_db  # noqa: E402

PID = 4242
TID_MAIN = PID
TID_AUX = PID + 17
STREAM_MAIN, STREAM_WARMUP, STREAM_SIDE = 7, 13, 14
T0 = 4_700_000_000  # ns; nsys timelines do not start at 0
N_WARMUP = 3
MEMCPY_BYTES = 1 << 20
N_INIT = 880  # cuGetProcAddress_v2 burst at start-up, as in the samples
# The pool's durations are those of a mid-size model; scaled down to a small-batch one, so that
# eager steps are launch-bound (GPU idle between kernels) and graph replays are not: the case
# CUDA graphs are for, and the one cgprof's metrics must tell apart.
DURATION_SCALE = 0.3

# (demangled name, grid, block, registers, static shared memory B, median duration ns)
KERNELS: list[tuple[str, tuple[int, int, int], tuple[int, int, int], int, int, int]] = [
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)", (1024, 1, 1), (128, 1, 1), 24, 0, 4_200),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)3>>(int, T2, T3)", (1024, 1, 1), (128, 1, 1), 24, 0, 4_000),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)", (512, 1, 1), (128, 1, 1), 16, 0, 1_900),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase &, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", (1024, 1, 1), (128, 1, 1), 26, 0, 3_500),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", (2048, 1, 1), (128, 1, 1), 30, 0, 6_800),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", (2048, 1, 1), (128, 1, 1), 28, 0, 6_100),  # noqa: E501
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", (4096, 1, 1), (128, 1, 1), 32, 0, 8_300),  # noqa: E501
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T4, T5, T6, T7)", (1024, 1, 1), (128, 1, 1), 30, 0, 5_200),  # noqa: E501
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, unsigned int, float, (int)4, (int)4>>(T3)", (132, 1, 1), (32, 16, 1), 40, 0, 9_700),  # noqa: E501
    ("void at::native::reduce_kernel<(int)256, (int)2, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, (int)4, (int)4>>(T3)", (64, 1, 1), (32, 8, 1), 38, 0, 7_400),  # noqa: E501
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", (512, 1, 1), (256, 1, 1), 36, 0, 11_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)", (512, 1, 1), (256, 1, 1), 40, 0, 14_500),  # noqa: E501
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, (unsigned int)32, (unsigned int)32, (unsigned int)256, (bool)0, (bool)1, (bool)1>(long, long, const T1 *, const T1 *, const T2 *, const T2 *, T1 *, T1 *)", (8, 1, 1), (32, 32, 1), 64, 8192, 12_800),  # noqa: E501
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)", (4096, 1, 1), (256, 1, 1), 32, 0, 16_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<(int)4, float, float, float, at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(T2 *, const T4 *, const T4 *, long)", (4096, 1, 1), (256, 1, 1), 32, 0, 17_500),  # noqa: E501
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, (int)9, (bool)0, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)", (1024, 1, 1), (128, 1, 1), 40, 0, 9_100),  # noqa: E501
    ("void at::native::index_elementwise_kernel<(int)128, (int)4, void at::native::gpu_index_kernel<void at::native::index_kernel_impl<at::native::OpaqueType<(int)4>>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>)::[lambda(char *, const char *, long) (instance 1)]>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>, const T1 &, bool)::[lambda(int) (instance 1)]>(long, T3)", (256, 1, 1), (128, 1, 1), 30, 0, 6_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::indexing_backward_kernel<float, (int)4>(const long *, const long *, const T1 *, T1 *, long, long, long, long, bool)", (256, 1, 1), (32, 4, 1), 48, 0, 21_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<(int)4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, (int)4, (at::native::ADAM_MODE)1, (bool)0>, bool *, float *, double, double, double, double, double, bool>(T1, T2, T3...)", (320, 1, 1), (512, 1, 1), 72, 0, 38_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<(int)1>, at::native::(anonymous namespace)::UnaryOpScalarFunctor<float, (int)1, (int)1, (int)0>, at::native::(anonymous namespace)::ZeroFunctor<float>>(T1, T2, T3...)", (320, 1, 1), (512, 1, 1), 40, 0, 9_000),  # noqa: E501
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)", (1, 1, 1), (1024, 1, 1), 32, 8192, 7_600),  # noqa: E501
    ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(T1 *, const T1 *, const T2 *, const T1 *, const T1 *, bool, int, int, long, long)", (1, 1, 1), (1024, 1, 1), 30, 0, 5_400),  # noqa: E501
    ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, (int)1, (int)4, bool>(at::cuda::detail::TensorInfo<const T1, T3>, at::cuda::detail::TensorInfo<T1, T3>, at::cuda::detail::TensorInfo<T6, T3>, T3, T2, at::PhiloxCudaState)", (1056, 1, 1), (256, 1, 1), 36, 0, 7_900),  # noqa: E501
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl *, void at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl *>(const at::TensorBase &, double, double, T1)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, T3, T4)::[lambda(curandStatePhilox4_32_10 *) (instance 2)]>(long, at::PhiloxCudaState, T3, T4)", (264, 1, 1), (256, 1, 1), 38, 0, 5_800),  # noqa: E501
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::OpaqueType<(unsigned int)4>, unsigned int, (int)2, (int)128, (int)1>(T1 *, at::native::(anonymous namespace)::CatArrInputTensorMetadata<T1, T2, T4, T5>, at::native::(anonymous namespace)::TensorSizeStride<T2, (unsigned int)4>, int, T2)", (256, 2, 1), (512, 1, 1), 30, 0, 6_600),  # noqa: E501
    ("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float>>(T1 *, const T1 *, unsigned int, unsigned int, unsigned int, T1, T2)", (512, 1, 1), (16, 32, 1), 34, 4096, 8_800),  # noqa: E501
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>(const T3 *, const T1 *, T1 *, int, long, int, int)", (128, 1, 1), (32, 32, 1), 40, 8192, 18_000),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)", (1024, 1, 1), (128, 1, 1), 22, 0, 3_800),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::sqrt_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", (512, 1, 1), (128, 1, 1), 20, 0, 2_900),  # noqa: E501
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(T1::Params)", (8, 4, 1), (256, 1, 1), 168, 0, 32_000),  # noqa: E501
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_tn_align1>(T1::Params)", (8, 4, 1), (256, 1, 1), 168, 0, 30_500),  # noqa: E501
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x3_nt_align4>(T1::Params)", (16, 8, 1), (256, 1, 1), 232, 0, 45_000),  # noqa: E501
    ("void splitKreduce_kernel<(int)32, (int)16, int, float, float, float, float, (bool)1, (bool)0, (bool)0>(cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *, const T6 *, const T6 *, const T7 *, const T4 *, T7 *, void *, long, T6 *, int *)", (8, 4, 1), (32, 16, 1), 32, 0, 2_300),  # noqa: E501
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", (66, 2, 1), (384, 1, 1), 168, 0, 41_000),  # noqa: E501
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", (132, 1, 1), (384, 1, 1), 168, 0, 52_000),  # noqa: E501
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_on_kernel__5x_cublas", (132, 1, 1), (256, 1, 1), 154, 0, 36_000),  # noqa: E501
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", (132, 1, 1), (384, 1, 1), 168, 0, 47_000),
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_NNN", (132, 1, 1), (384, 1, 1), 168, 0, 49_000),
    ("ampere_sgemm_128x64_tn", (16, 8, 1), (128, 1, 1), 126, 12544, 40_000),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, (int)128, (int)16, (int)4, (int)4, (bool)0, (bool)0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>, float>>(T13, T6, T6)", (64, 1, 1), (128, 16, 1), 40, 0, 6_700),  # noqa: E501
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)64, (int)128, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)", (16, 8, 4), (128, 1, 1), 255, 0, 61_000),  # noqa: E501
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)8, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0>(Flash_bwd_params)", (8, 32, 1), (256, 1, 1), 255, 0, 98_000),  # noqa: E501
    ("void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)8, cutlass::bfloat16_t>>, (bool)1, (bool)0>(Flash_bwd_params, int)", (8, 32, 1), (256, 1, 1), 64, 0, 4_400),  # noqa: E501
    ("triton_poi_fused_add_mul_0", (512, 1, 1), (128, 1, 1), 20, 0, 3_100),
    ("triton_poi_fused__to_copy_add_gelu_1", (1024, 1, 1), (128, 1, 1), 24, 0, 5_900),
    ("triton_red_fused__softmax_2", (4096, 1, 1), (256, 1, 1), 38, 0, 12_300),
    ("triton_per_fused_native_layer_norm_3", (512, 1, 1), (128, 1, 1), 36, 0, 8_200),
    ("triton_per_fused_native_layer_norm_backward_4", (512, 1, 1), (128, 1, 1), 44, 0, 10_900),
    ("triton_tem_fused_addmm_relu_5", (64, 2, 1), (256, 1, 1), 168, 49152, 28_000),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase &, T1, T1)::[lambda(float, float) (instance 1)], std::array<char *, (unsigned long)3>>(int, T2, T3)", (1024, 1, 1), (128, 1, 1), 22, 0, 4_100),  # noqa: E501
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char *, (unsigned long)3>>(int, T2, T3)", (512, 1, 1), (128, 1, 1), 24, 0, 2_700),  # noqa: E501
]

# (name, eventClass, weight): API calls that launch nothing, spread between a step's launches
MAIN_FILLER = [
    ("cudaStreamIsCapturing_v10000", 0, 0.30),
    ("cuKernelGetFunction", 1, 0.25),
    ("cudaStreamGetCaptureInfo_v12030", 0, 0.15),
    ("cudaEventRecord_v3020", 0, 0.15),
    ("cudaOccupancyMaxActiveClusters_v11070", 0, 0.15),
]
AUX_FILLER = [("cudaEventQuery_v3020", 0, 0.7), ("cudaStreamQuery_v3020", 0, 0.3)]


def short_name(demangled: str) -> str:
    """nsys's shortName: the base function name, without return type, scope or templates."""
    name = re.sub(r"^void ", "", demangled)
    name = re.split(r"[<(]", name, maxsplit=1)[0]
    return name.split("::")[-1]


def mangled_name(demangled: str) -> str:
    """A plausible Itanium-style mangled name (extern "C" kernels keep their name)."""
    if not demangled.startswith("void "):
        return demangled
    scope = re.split(r"[<(]", demangled[5:], maxsplit=1)[0].split("::")
    scope = [p for p in scope if p and " " not in p]
    body = "".join(f"{len(p)}{p}" for p in scope)
    return f"_ZN{body}Ev" if len(scope) > 1 else f"_Z{body}v"


# --- vectorised building blocks ---------------------------------------------------------------


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return np.maximum(1, np.rint(median * rng.lognormal(0.0, sigma, n))).astype(np.int64)


def _segment_starts(seg: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal, sorted segment ids."""
    first = np.ones(len(seg), dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    return first


def _segmented_cumsum(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of x restarting at each new segment (seg sorted)."""
    cs = np.cumsum(x)
    first = np.flatnonzero(_segment_starts(seg))
    base = (cs - x)[first]
    return cs - np.repeat(base, np.diff(np.append(first, len(x))))


def serial_schedule(
    seg: np.ndarray, ready: np.ndarray, dur: np.ndarray, gap: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """FIFO execution on one engine per segment (a stream within a step).

    Item i starts at max(ready_i, end_{i-1} + gap_i) and ends dur_i later; items are sorted
    by (segment, submission order). Closed form, no Python loop: with P the segmented
    cumsum of dur+gap, end_i = P_i + max_{j<=i in segment}(ready_j - P_{j-1} - gap_j)."""
    step = dur + gap
    p = _segmented_cumsum(step, seg)
    v = ready - (p - step) - gap
    rank = np.cumsum(_segment_starts(seg)) - 1
    big = int(v.max() - v.min()) + 1 if len(v) else 1
    end = p + np.maximum.accumulate(v + rank * big) - rank * big
    return end - dur, end


@dataclass
class Calls:
    """API calls: start/end (ns), thread, name index, and a tag for what they caused."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    name: np.ndarray  # index into the API name table


@dataclass
class Block:
    """A run of steps: API calls, GPU work tied to calls by row index, and step ranges."""

    calls: Calls
    kernels: dict[str, np.ndarray]  # start, end, stream, seq (model position), call, node
    memcpy: dict[str, np.ndarray]  # start, end, stream, call
    sync: dict[str, np.ndarray]  # start, end, stream, call
    step_start: np.ndarray
    step_end: np.ndarray
    end: int


class ApiNames:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.classes: list[int] = []
        self.index: dict[str, int] = {}

    def __call__(self, name: str, event_class: int = 0) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
            self.classes.append(event_class)
        return self.index[name]


def _steps_block(
    rng: np.random.Generator,
    api: ApiNames,
    t_begin: int,
    n_kernels: np.ndarray,
    n_filler: np.ndarray,
    seq_stream: np.ndarray,
    seq_dur: np.ndarray,
    graphed: bool,
    filler_names: np.ndarray,
    filler_p: np.ndarray,
    memcpy_stream_id: int = STREAM_MAIN,
) -> Block:
    """Steps of one kind, vectorised over all steps.

    Eager: each kernel has its own launch call; graphed: one cudaGraphLaunch per step and
    `n_kernels[s]` replayed kernels sharing it. Every step opens with a 1 MiB HtoD
    cudaMemcpyAsync and closes with a cudaStreamSynchronize that returns when the GPU is
    done, so steps are independent given their start time: compute all in step-relative
    time, then lay the steps end to end."""
    n_steps = len(n_kernels)
    k = len(seq_stream)
    n_launch = np.ones(n_steps, dtype=np.int64) if graphed else n_kernels
    # the middle of each step: launches and fillers in random order (launches keep theirs)
    n_mid = n_launch + n_filler
    mid_step = np.repeat(np.arange(n_steps), n_mid)
    offsets = np.repeat(np.cumsum(n_mid) - n_mid, n_mid)
    within = np.arange(len(mid_step)) - offsets
    is_launch = within < np.repeat(n_launch, n_mid)
    order = np.lexsort((rng.random(len(mid_step)), mid_step))
    mid_launch = is_launch[order]
    # all calls of the run: memcpy (kind 0), the middle (1 launch / 2 filler), sync (3)
    step = np.concatenate([np.arange(n_steps), mid_step, np.arange(n_steps)])
    last = 1 << 40
    pos = np.concatenate([np.full(n_steps, -1), np.arange(len(mid_step)), np.full(n_steps, last)])
    kind = np.concatenate([np.zeros(n_steps), np.where(mid_launch, 1, 2), np.full(n_steps, 3)])
    o = np.lexsort((pos, step))
    step, kind = step[o], kind[o].astype(np.int8)
    n = len(step)

    dur = np.empty(n, dtype=np.int64)
    gap = np.empty(n, dtype=np.int64)
    dur[kind == 0] = _lognormal(rng, 4_800, 0.15, int((kind == 0).sum()))
    n1 = int((kind == 1).sum())
    dur[kind == 1] = _lognormal(rng, 9_000 if graphed else 4_600, 0.25, n1)
    dur[kind == 2] = _lognormal(rng, 1_100, 0.35, int((kind == 2).sum()))
    dur[kind == 3] = 0  # set below, once the GPU side is known
    gap[:] = _lognormal(rng, 600, 0.4, n)  # between C++-side calls
    gap[kind == 1] = _lognormal(rng, 5_500, 0.5, n1)  # Python work of one op before a launch
    gap[_segment_starts(step)] = _lognormal(rng, 2_500, 0.3, n_steps)  # after the range push
    rel_end = _segmented_cumsum(gap + dur, step)
    rel_start = rel_end - dur

    # GPU: memcpy then kernels, FIFO per (step, stream)
    memcpy_call = np.flatnonzero(kind == 0)
    launch_call = np.flatnonzero(kind == 1)
    sync_call = np.flatnonzero(kind == 3)
    m_ready = rel_start[memcpy_call] + 2_200
    m_dur = _lognormal(rng, MEMCPY_BYTES / 24.0, 0.05, n_steps)  # ~24 GB/s pinned HtoD
    if graphed:
        k_step = np.repeat(np.arange(n_steps), n_kernels)
        k_seq = np.arange(len(k_step)) - np.repeat(np.cumsum(n_kernels) - n_kernels, n_kernels)
        k_call = np.repeat(launch_call, n_kernels)
        # every node is ready when the graph launch reaches the GPU; replays run back to back
        k_ready = rel_start[k_call] + 7_000
        k_gap = _lognormal(rng, 290, 0.15, len(k_step))
        k_stream = np.full(len(k_step), STREAM_MAIN)
    else:
        k_step = step[launch_call]
        k_seq = np.arange(len(k_step)) - np.repeat(np.cumsum(n_kernels) - n_kernels, n_kernels)
        k_call = launch_call
        # the kernel may start before its launch call returns
        latency = rng.integers(1_000, 3_000, len(k_step))
        k_ready = rel_start[k_call] + (dur[k_call] * 6) // 10 + latency
        k_gap = _lognormal(rng, 1_300, 0.2, len(k_step))
        k_stream = seq_stream[k_seq % k]
    jitter = rng.lognormal(0, 0.08, len(k_step))
    k_dur = np.maximum(800, np.rint(seq_dur[k_seq % k] * jitter)).astype(np.int64)

    memcpy_stream = np.full(n_steps, memcpy_stream_id)
    g_step = np.concatenate([np.arange(n_steps), k_step])
    g_stream = np.concatenate([memcpy_stream, k_stream])
    g_order = np.concatenate([np.full(n_steps, -1), k_seq])
    g_ready = np.concatenate([m_ready, k_ready])
    g_dur = np.concatenate([m_dur, k_dur])
    g_gap = np.concatenate([np.zeros(n_steps, dtype=np.int64), k_gap])
    o = np.lexsort((g_order, g_stream, g_step))
    seg = g_step[o] * 64 + g_stream[o]
    g_start = np.empty_like(g_ready)
    g_end = np.empty_like(g_ready)
    g_start[o], g_end[o] = serial_schedule(seg, g_ready[o], g_dur[o], g_gap[o])
    gpu_done = np.zeros(n_steps, dtype=np.int64)
    np.maximum.at(gpu_done, g_step, g_end)

    # the closing cudaStreamSynchronize returns once the GPU is idle
    s_start = rel_start[sync_call]
    s_end = np.maximum(s_start + 2_400, gpu_done + rng.integers(900, 1_800, n_steps))
    rel_end[sync_call] = s_end
    step_len = s_end + 800 + _lognormal(rng, 14_000, 0.3, n_steps)  # range pop, Python loop
    step_start = t_begin + np.cumsum(step_len) - step_len
    base = step_start[step]

    names = np.empty(n, dtype=np.int64)
    names[kind == 0] = api("cudaMemcpyAsync_v3020")
    names[kind == 1] = api("cudaGraphLaunch_v10000" if graphed else "cudaLaunchKernel_v7000")
    n2 = int((kind == 2).sum())
    names[kind == 2] = filler_names[rng.choice(len(filler_names), n2, p=filler_p)]
    names[kind == 3] = api("cudaStreamSynchronize_v3020")
    calls = Calls(base + rel_start, base + rel_end, np.full(n, TID_MAIN), names)
    kbase = step_start[k_step]
    return Block(
        calls=calls,
        kernels={
            "start": kbase + g_start[n_steps:],
            "end": kbase + g_end[n_steps:],
            "stream": k_stream,
            "seq": k_seq,
            "call": k_call,
            "node": (np.int64(2) << 32) + k_seq if graphed else np.full(len(k_seq), -1),
        },
        memcpy={
            "start": step_start + g_start[:n_steps],
            "end": step_start + g_end[:n_steps],
            "stream": memcpy_stream,
            "call": memcpy_call,
        },
        sync={
            "start": step_start + s_start + 500,
            "end": step_start + s_end - 300,
            "stream": memcpy_stream,
            "call": sync_call,
        },
        step_start=step_start,
        step_end=step_start + s_end + 800,
        end=int(step_start[-1] + step_len[-1]) if n_steps else t_begin,
    )


def _split(total: int, parts: int) -> np.ndarray:
    """`total` spread over `parts` as evenly as possible (the first ones get the remainder)."""
    out = np.full(parts, total // parts, dtype=np.int64)
    out[: total % parts] += 1
    return out


# --- the generator ----------------------------------------------------------------------------


def generate(
    path: str | Path,
    n_kernels: int = 1_000_000,
    n_runtime: int = 1_000_000,
    n_steps: int = 10_000,
    graph_fraction: float = 0.5,
    seed: int = 0,
    *,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the synthetic trace to `path`; return row counts and timings (seconds)."""
    t_wall = time.perf_counter()
    path = Path(path)
    if path.exists():
        if not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True (--force) to replace it")
        path.unlink()
    rng = np.random.default_rng(seed)
    n_graph = int(round(n_steps * graph_fraction))
    n_eager = n_steps - n_graph
    k = n_kernels // (n_steps + N_WARMUP)  # kernels per forward = nodes of the graph
    if k < 1:
        raise ValueError(f"n_kernels={n_kernels} gives no kernel per step for {n_steps} steps")
    leftover = n_kernels - k * (n_steps + N_WARMUP)
    m_warm = np.full(N_WARMUP, k, dtype=np.int64)
    m_eager = np.full(n_eager, k, dtype=np.int64)
    if n_eager:
        m_eager += _split(leftover, n_eager)
    else:
        m_warm += _split(leftover, N_WARMUP)
    capture_calls = (k + 3) if n_graph else 0
    structured = (
        int(m_warm.sum()) + 2 * N_WARMUP + int(m_eager.sum()) + 2 * n_eager + 3 * n_graph
        + capture_calls
    )
    filler = n_runtime - structured
    if filler < 0:
        raise ValueError(f"n_runtime={n_runtime} is below the {structured} calls the steps need")
    n_init = min(N_INIT, filler)
    main_fill = (filler - n_init) // 2
    n_aux = filler - n_init - main_fill
    fill_per_step = _split(main_fill, N_WARMUP + n_eager + n_graph)

    # the model: a fixed kernel sequence; ~10 % of eager kernels go to a side stream
    seq_kernel = rng.choice(len(KERNELS), k)
    seq_dur = np.rint(np.array([KERNELS[i][5] for i in seq_kernel]) * DURATION_SCALE).astype(
        np.int64
    )
    seq_stream = np.where(rng.random(k) < 0.1, STREAM_SIDE, STREAM_MAIN)
    seq_stream[0] = STREAM_MAIN

    api = ApiNames()
    fnames = np.array([api(n, c) for n, c, _ in MAIN_FILLER])
    fp = np.array([w for _, _, w in MAIN_FILLER])

    # init burst
    t = T0
    init_dur = _lognormal(rng, 900, 0.3, n_init)
    init_gap = _lognormal(rng, 350, 0.3, n_init)
    init_end = t + np.cumsum(init_dur + init_gap)
    init = Calls(init_end - init_dur, init_end, np.full(n_init, TID_MAIN),
                 np.full(n_init, api("cuGetProcAddress_v2", 1)))
    if n_init:
        init.name[0] = api("cuInit", 1)
        t = int(init_end[-1]) + 2_000_000

    nvtx: list[N] = []

    def add_range(text: str, start: int, end: int, payload: int | None = None) -> None:
        nvtx.append(N(start, end, text, domain="cgprof", registered=True, tid=TID_MAIN,
                      pid=PID, payload=payload))

    f_warm, f_eager, f_graph = np.split(fill_per_step, [N_WARMUP, N_WARMUP + n_eager])
    warm = _steps_block(rng, api, t + 3_000, m_warm, f_warm, np.full(k, STREAM_WARMUP), seq_dur,
                        False, fnames, fp, memcpy_stream_id=STREAM_WARMUP)
    add_range("warmup", t, warm.end + 1_000)
    t = warm.end + 500_000

    # stream capture: launches without kernels, node creation events, instantiation
    node_events: list[GN] = []
    cap = Calls(*(np.zeros(capture_calls, dtype=np.int64) for _ in range(4)))
    if n_graph:
        cap_start = t
        names = (
            [api("cudaStreamBeginCapture_v10000")]
            + [api("cudaLaunchKernel_v7000")] * k
            + [api("cudaStreamEndCapture_v10000"), api("cudaGraphInstantiateWithFlags_v11040")]
        )
        durs = np.concatenate([[5_000], _lognormal(rng, 3_200, 0.2, k), [8_000, 250_000]])
        gaps = np.concatenate([[2_000], _lognormal(rng, 5_500, 0.5, k), [3_000, 4_000]])
        ends = t + np.cumsum(durs + gaps)
        cap = Calls(ends - durs, ends, np.full(len(durs), TID_MAIN), np.array(names))
        for j in range(k):
            node_events.append(GN(int(cap.start[1 + j]) + 900, (1 << 32) + j, pid=PID))
        inst = int(cap.start[-1])
        for j in range(k):
            node_events.append(GN(inst + 2_000 + 2_000 * j, (2 << 32) + j, pid=PID))
            node_events.append(GN(inst + 3_000 + 2_000 * j, (2 << 32) + j, (1 << 32) + j, pid=PID))
        add_range("capture", cap_start, int(ends[-1]) + 1_000)
        t = int(ends[-1]) + 200_000

    eager = _steps_block(rng, api, t + 3_000, m_eager, f_eager, seq_stream, seq_dur, False,
                         fnames, fp)
    if n_eager:
        add_range("eager", t, eager.end + 1_000)
        t = eager.end + 200_000
    graph = _steps_block(rng, api, t + 3_000, np.full(n_graph, k, dtype=np.int64), f_graph,
                         np.full(k, STREAM_MAIN), seq_dur, True, fnames, fp)
    if n_graph:
        add_range("graph", t, graph.end + 1_000)
        t = graph.end
    step_index = 0
    for block in (eager, graph):
        for s, e in zip(block.step_start.tolist(), block.step_end.tolist(), strict=True):
            add_range("step", s, e, step_index)
            step_index += 1

    # thread 2 polls events across the whole run
    spacing = max(1, (t - T0) // max(1, n_aux))
    aux_start = T0 + np.arange(n_aux, dtype=np.int64) * spacing
    aux_start += rng.integers(0, max(1, spacing // 4), n_aux)
    aux_dur = np.minimum(_lognormal(rng, 1_400, 0.3, n_aux), max(1, spacing // 2))
    anames = np.array([api(n, c) for n, c, _ in AUX_FILLER])
    aux = Calls(aux_start, aux_start + aux_dur, np.full(n_aux, TID_AUX),
                anames[rng.choice(len(anames), n_aux, p=[w for _, _, w in AUX_FILLER])])

    # correlationIds: one per API call, increasing with start time across both threads
    parts = [init, warm.calls, cap, eager.calls, graph.calls, aux]
    offsets = np.cumsum([0] + [len(p.start) for p in parts])
    r_start = np.concatenate([p.start for p in parts])
    r_end = np.concatenate([p.end for p in parts])
    r_tid = np.concatenate([p.tid for p in parts])
    r_name = np.concatenate([p.name for p in parts])
    order = np.argsort(r_start, kind="stable")
    corr = np.empty(len(order), dtype=np.int64)
    corr[order] = np.arange(1, len(order) + 1)
    assert len(order) == n_runtime, (len(order), n_runtime)

    def gpu(block: Block, part: int, key: str) -> dict[str, np.ndarray]:
        d = dict(getattr(block, key))
        d["corr"] = corr[offsets[part] + d.pop("call")]
        return d

    kern = [gpu(warm, 1, "kernels"), gpu(eager, 3, "kernels"), gpu(graph, 4, "kernels")]
    memc = [gpu(b, i, "memcpy") for b, i in ((warm, 1), (eager, 3), (graph, 4))]
    sync = [gpu(b, i, "sync") for b, i in ((warm, 1), (eager, 3), (graph, 4))]
    k_all = {c: np.concatenate([d[c] for d in kern]) for c in kern[0]}
    k_all["kernel"] = np.concatenate([seq_kernel[d["seq"] % k] for d in kern])
    assert len(k_all["start"]) == n_kernels, (len(k_all["start"]), n_kernels)
    t_gen = time.perf_counter() - t_wall

    # small tables through the builder; big ones appended below with the same DDL
    make_nsys_db(
        path,
        nvtx=nvtx,
        graph_node_events=node_events,
        gpus=[(0, "NVIDIA H200")],
        threads=[(PID, TID_MAIN, "python3"), (PID, TID_AUX, "pt_pin_memory")],
        processes=[(PID, "python3")],
        graph_trace_mode="node",
        empty=["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_KERNEL"],
    )
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        first_id = conn.execute("SELECT coalesce(max(id), -1) + 1 FROM StringIds").fetchone()[0]
        ids: dict[str, int] = {}

        def sid(value: str) -> int:
            return ids.setdefault(value, first_id + len(ids))

        api_ids = np.array([sid(n) for n in api.names], dtype=np.int64)
        demangled = np.array([sid(e[0]) for e in KERNELS], dtype=np.int64)
        short = np.array([sid(short_name(e[0])) for e in KERNELS], dtype=np.int64)
        mangled = np.array([sid(mangled_name(e[0])) for e in KERNELS], dtype=np.int64)
        conn.executemany(
            "INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, v) for v, i in ids.items()]
        )

        gtid = np.where(r_tid == TID_MAIN, global_tid(PID, TID_MAIN), global_tid(PID, TID_AUX))
        eclass = np.array(api.classes, dtype=np.int64)[r_name]
        rt = np.column_stack([r_start, r_end, eclass, gtid, corr, api_ids[r_name]])[order]
        _insert_chunks(
            conn,
            'INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid,'
            " correlationId, nameId, returnValue) VALUES (?, ?, ?, ?, ?, ?, 0)",
            rt,
        )
        gpid = global_pid(PID)
        m = {c: np.concatenate([d[c] for d in memc]) for c in memc[0]}
        mo = np.argsort(m["start"], kind="stable")
        _insert_chunks(
            conn,
            'INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, "end", deviceId, contextId,'
            " greenContextId, streamId, correlationId, globalPid, bytes, copyKind, srcKind,"
            " dstKind, copyCount)"
            f" VALUES (?, ?, 0, 1, 0, ?, ?, {gpid}, {MEMCPY_BYTES}, 1, 1, 2, 1)",
            np.column_stack([m["start"], m["end"], m["stream"], m["corr"]])[mo],
        )
        y = {c: np.concatenate([d[c] for d in sync]) for c in sync[0]}
        yo = np.argsort(y["start"], kind="stable")
        _insert_chunks(
            conn,
            'INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, "end", deviceId, contextId,'
            " streamId, correlationId, globalPid, syncType, eventId, eventSyncId)"
            f" VALUES (?, ?, 0, 1, ?, ?, {gpid}, 2, 4294967295, 4294967295)",
            np.column_stack([y["start"], y["end"], y["stream"], y["corr"]])[yo],
        )
        kk = k_all["kernel"]
        grid = np.array([e[1] for e in KERNELS])[kk]
        block = np.array([e[2] for e in KERNELS])[kk]
        regs = np.array([e[3] for e in KERNELS])[kk]
        smem = np.array([e[4] for e in KERNELS])[kk]
        ko = np.argsort(k_all["start"], kind="stable")
        grid_id = np.empty(len(ko), dtype=np.int64)
        grid_id[ko] = np.arange(1, len(ko) + 1)
        cols = np.column_stack([
            k_all["start"], k_all["end"], k_all["stream"], k_all["corr"], demangled[kk],
            short[kk], mangled[kk], regs, grid, block, smem, grid_id, k_all["node"],
        ])[ko]
        head = (
            'INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, "end", deviceId, contextId,'
            " greenContextId, streamId, correlationId, globalPid, demangledName, shortName,"
            " mangledName, launchType, cacheConfig, registersPerThread, gridX, gridY, gridZ,"
            " blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,"
            " localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, graphNodeId,"
            " sharedMemoryLimitConfig) VALUES (?, ?, 0, 1, 0, ?, ?, "
            f"{gpid}, ?, ?, ?, 1, 0, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?, 0, "
        )
        is_node = cols[:, -1] >= 0
        _insert_chunks(conn, head + "NULL, 0)", cols[~is_node][:, :-1])
        _insert_chunks(conn, head + "?, 0)", cols[is_node])
        conn.commit()
    finally:
        conn.close()
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "kernels": n_kernels,
        "runtime": n_runtime,
        "steps": n_steps,
        "eager_steps": n_eager,
        "graph_steps": n_graph,
        "kernels_per_step": k,
        "nvtx": len(nvtx) + 1,  # + the domain-create row
        "generate_s": round(t_gen, 3),
        "total_s": round(time.perf_counter() - t_wall, 3),
    }


#: Columns holding a process (globalPid/globalTid: the pid sits at bits 24-47) or a GPU.
_PROCESS_COLS = ("globalPid", "globalTid", "endGlobalTid")
_DEVICE_COLS = ("deviceId", "srcDeviceId", "dstDeviceId", "cuDevice")


def _rank_copy(table: str, col: str, r: int) -> str:
    """The SQL value of column ``col`` of ``table`` in rank ``r``'s copy of a row."""
    if col in _PROCESS_COLS:
        return f"{col} + {r << 24}"
    if col in _DEVICE_COLS or (table, col) in (("TARGET_INFO_GPU", "id"), ("PROCESSES", "pid")):
        return f"{col} + {r}"
    return col


def replicate_ranks(path: str | Path, n_ranks: int) -> None:
    """Make the one-process trace at ``path`` a ``n_ranks``-rank one, as a torchrun launch
    recorded into one report is: rank r is a copy of every row of the process, as process
    ``PID + r`` on GPU ``r`` (same clock, same steps, same names)."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            if not any(c in _PROCESS_COLS or c in _DEVICE_COLS for c in cols):
                continue
            last = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
            for r in range(1, n_ranks):
                conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT "
                             f"{', '.join(_rank_copy(table, c, r) for c in cols)} FROM {table} "
                             f"WHERE rowid <= {last} ORDER BY rowid")
        conn.commit()
    finally:
        conn.close()


def _insert_chunks(
    conn: sqlite3.Connection, sql: str, rows: np.ndarray, chunk: int = 200_000
) -> None:
    """executemany in chunks, so the Python ints of one chunk at a time exist."""
    for i in range(0, len(rows), chunk):
        conn.executemany(sql, rows[i : i + chunk].tolist())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--n-kernels", type=int, default=1_000_000)
    ap.add_argument("--n-runtime", type=int, default=1_000_000)
    ap.add_argument("--n-steps", type=int, default=10_000)
    ap.add_argument("--graph-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-ranks", type=int, default=1,
                    help="processes (ranks), one GPU each, every one with the counts above "
                         "(a torchrun launch recorded into one report)")
    ap.add_argument("--force", action="store_true", help="replace an existing file")
    args = ap.parse_args(argv)
    if args.n_ranks < 1:
        print("synth_trace: --n-ranks must be >= 1", file=sys.stderr)
        return 1
    try:
        stats = generate(args.path, args.n_kernels, args.n_runtime, args.n_steps,
                         args.graph_fraction, args.seed, overwrite=args.force)
    except (FileExistsError, ValueError) as exc:
        print(f"synth_trace: {exc}", file=sys.stderr)
        return 1
    if args.n_ranks > 1:
        replicate_ranks(args.path, args.n_ranks)
        stats["bytes"] = args.path.stat().st_size
        print(f"{args.n_ranks} ranks (processes {PID}..{PID + args.n_ranks - 1}, GPUs "
              f"0..{args.n_ranks - 1}), each:", end=" ")
    print(
        f"wrote {stats['path']}: {stats['kernels']} kernels, {stats['runtime']} API calls, "
        f"{stats['steps']} steps ({stats['eager_steps']} eager, {stats['graph_steps']} graphed, "
        f"{stats['kernels_per_step']} kernels each), {stats['bytes'] / 1e6:.1f} MB "
        f"in {stats['total_s']:.1f} s (arrays {stats['generate_s']:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
