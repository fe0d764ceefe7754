"""Kernel classification by name, in HTA's vocabulary.

HTA (Holistic Trace Analysis) calls a kernel COMMUNICATION when its name starts with
`nccl...Kernel`, MEMORY when it starts with Memcpy / Memset / dma, COMPUTATION unless its name
looks like NCCL, a copy or a sync, and OTHER otherwise. We use the same tests so that our
breakdowns are comparable with HTA's numbers.
"""

from __future__ import annotations

import re

from perfweb_recommender.trace.model import (
    TYPE_COMMUNICATION,
    TYPE_COMPUTATION,
    TYPE_MEMORY,
    TYPE_OTHER,
)

_COMM = re.compile(r"nccl.*Kernel")
# Collectives that are not NCCL's: RCCL/MSCCL, NVLS multimem and the custom all-reduce kernels
# of vLLM / PyTorch symmetric memory (a B200 `multimem_all_reduce_kernel` is communication).
_COMM_OTHER = re.compile(
    r"rccl|msccl|multimem_(all_reduce|all_gather|reduce_scatter)|(one|two)_shot_all_reduce"
    r"|cross_device_reduce|all_reduce_kernel|allreduce_kernel|all_gather_kernel"
    r"|reduce_scatter_kernel",
    re.IGNORECASE,
)
_MEMORY = re.compile(r"Memcpy|Memset|dma")
# Names that are not computation although they are not COMMUNICATION/MEMORY either.
_NOT_COMPUTE = re.compile(r"(nccl.*Kernel)|(.*Memcpy)|(Memset)|(.*Sync)")

# "conv" of convolution, not of typeConvert / convert_*; "float" of fp32, not of BFloat16.
_CONV = r"conv(?!ert)"
_FLOAT = r"(?<![b_])float(?!16|8)"
# Tensor-core kernels: cuBLAS/cuDNN/CUTLASS naming (HMMA/IMMA/GMMA instructions, tensorop
# tiles such as s1688/h884/16816, Hopper wgmma/xmma, Blackwell tcgen/nvjet), and AMD matrix
# cores: Tensile `Cijk_..._MI16x16x1_...` and composable-kernel `xdlops` (MFMA).
_TENSOR_CORE = re.compile(
    r"tensorop|hmma|imma|gmma|xmma|wgmma|s1688|s16816|h884|h1688|h16816|i8816|bf16_s1688"
    r"|_884|_1688|_16816|sm80_|sm86_|sm89_|sm90_|sm100|ampere_fp16|ampere_bf16|volta_h|turing_h"
    r"|flash_?(fwd|bwd|attn)|flash::|fmha|nvjet|tcgen|xdlops|_MI\d+x\d+x\d+",
    re.IGNORECASE,
)
# Dense math kernels (GEMM / convolution) whatever their precision: cuBLAS/cuDNN/CUTLASS, AMD's
# Tensile (`Cijk_*`), MIOpen's implicit GEMM (`igemm_*`), composable kernel, cuBLAS nvjet and
# Blackwell `bmm_*` kernels.
_DENSE_MATH = re.compile(
    r"gemm|gemv|" + _CONV + r"|^(void )?cutlass|cutlass_\d|cublas|wgrad|dgrad|fprop|implicit"
    r"|winograd|fmha|flash_?(fwd|bwd|attn)|flash::|matmul|sgemm|hgemm|xmma|scudnn"
    r"|^Cijk_|^(void )?bmm_|nvjet|xdlops",
    re.IGNORECASE,
)
# fp32 SIMT GEMM/conv kernels that could use tensor cores under AMP/TF32: cuBLAS sgemm, cuDNN's
# single-precision `scudnn` and `<float, ...>` engines (dgrad_engine<float>, wgrad_alg0_engine
# <float>, implicit_convolve_sgemm<float>), and Tensile GEMMs of data type S.
_FP32_SIMT = re.compile(
    r"sgemm|gemmSN|gemv2T|_simt_|fp32_|scudnn|engine<float|<float,"
    r"|"
    + _FLOAT
    + r".*"
    + _CONV
    + r"|"
    + _CONV
    + r".*"
    + _FLOAT
    + r"|^Cijk_A[a-z]+_B[a-z]+_S[BS]?_",
    re.IGNORECASE,
)
# Kernel families of eager PyTorch that a compiler would fuse (TraceLens' elementwise,
# normalisation and concat categories; eager reductions such as RMSNorm's mean count as
# elementwise).
_ELEMENTWISE = re.compile(
    r"elementwise_kernel|elementwise_kernel_manual_unroll|unrolled_elementwise|"
    r"vectorized_elementwise|index_elementwise|FillFunctor|copy_kernel|at::native::reduce_kernel",
    re.IGNORECASE,
)
_NORMALISATION = re.compile(
    r"layer_norm|layernorm|rms_?norm|batch_norm|group_norm|bn_fw|bn_bw|instance_norm",
    re.IGNORECASE,
)
_CONCAT = re.compile(r"CatArray|cat_kernel|concat", re.IGNORECASE)
# Kernels a compiler generated: Inductor's Triton kernels.
_GENERATED = re.compile(r"^triton_|^triton__", re.IGNORECASE)


def kernel_type(name: str) -> int:
    """HTA's kernel type of a GPU event name (a TYPE_* constant); collectives beyond NCCL's
    naming (RCCL, NVLS multimem, custom all-reduce) count as communication too."""
    if _COMM.match(name) or _COMM_OTHER.search(name):
        return TYPE_COMMUNICATION
    if _MEMORY.match(name):
        return TYPE_MEMORY
    if not _NOT_COMPUTE.match(name):
        return TYPE_COMPUTATION
    return TYPE_OTHER


_COLLECTIVES = (
    ("AllReduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("ReduceScatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("AllGather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("AllToAll", re.compile(r"all_?to_?all", re.IGNORECASE)),
    ("Broadcast", re.compile(r"broadcast", re.IGNORECASE)),
    ("SendRecv", re.compile(r"send|recv", re.IGNORECASE)),
    ("Reduce", re.compile(r"reduce", re.IGNORECASE)),
)


def collective_kind(name: str) -> str:
    """The collective a communication kernel runs ("AllReduce", "Broadcast", ...), "Other"
    when its name does not say (e.g. NCCL 2.19's ncclDevKernel_Generic), "" for non-comm."""
    if kernel_type(name) != TYPE_COMMUNICATION:
        return ""
    for kind, pattern in _COLLECTIVES:
        if pattern.search(name):
            return kind
    return "Other"


def is_tensor_core_kernel(name: str) -> bool:
    """Whether a kernel name says it runs on tensor cores (or AMD matrix cores)."""
    return _TENSOR_CORE.search(name) is not None


def is_dense_math_kernel(name: str) -> bool:
    """Whether a kernel is a GEMM or convolution (tensor-core eligible math)."""
    return _DENSE_MATH.search(name) is not None


def is_conv_kernel(name: str) -> bool:
    """Whether a kernel is a convolution (forward, data or weight gradient)."""
    return re.search(_CONV + r"|wgrad|dgrad|scudnn", name, re.IGNORECASE) is not None


def is_fp32_simt_kernel(name: str) -> bool:
    """Whether a dense-math kernel runs in fp32 on the CUDA cores (no tensor cores)."""
    return (
        is_dense_math_kernel(name)
        and not is_tensor_core_kernel(name)
        and (_FP32_SIMT.search(name) is not None)
    )


def fusible_family(name: str) -> str | None:
    """ "elementwise", "normalisation" or "concat" for the eager kernels a compiler fuses, else
    None (GEMMs, attention, communication and generated Triton kernels are not)."""
    if is_dense_math_kernel(name) or _GENERATED.search(name):
        return None
    if kernel_type(name) != TYPE_COMPUTATION:
        return None
    if _CONCAT.search(name):
        return "concat"
    if _NORMALISATION.search(name):
        return "normalisation"
    if _ELEMENTWISE.search(name):
        return "elementwise"
    return None


def is_generated_kernel(name: str) -> bool:
    """Whether a kernel was generated by a compiler (Inductor's Triton kernels)."""
    return _GENERATED.search(name) is not None


def memcpy_kind(name: str) -> tuple[str, str]:
    """Direction and host memory kind of a memcpy event name.

    "Memcpy HtoD (Pageable -> Device)" -> ("HtoD", "pageable"). Unknown parts are "unknown".
    """
    direction = "unknown"
    for candidate in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if candidate in name:
            direction = candidate
            break
    lowered = name.lower()
    if "pageable" in lowered:
        host = "pageable"
    elif "pinned" in lowered:
        host = "pinned"
    elif direction in ("DtoD", "PtoP"):
        host = "device"
    else:
        host = "unknown"
    return direction, host
