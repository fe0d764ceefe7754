"""Kernel classification by name, in HTA's vocabulary.

HTA (Holistic Trace Analysis) calls a kernel COMMUNICATION when its name starts with
`nccl...Kernel`, MEMORY when it starts with Memcpy / Memset / dma, COMPUTATION unless its name
looks like NCCL, a copy or a sync, and OTHER otherwise. We use the same tests so that our
breakdowns are comparable with HTA's numbers.
"""

from __future__ import annotations

import re

from recommender.trace.model import (
    TYPE_COMMUNICATION,
    TYPE_COMPUTATION,
    TYPE_MEMORY,
    TYPE_OTHER,
)

_COMM = re.compile(r"nccl.*Kernel")
_MEMORY = re.compile(r"Memcpy|Memset|dma")
# Names that are not computation although they are not COMMUNICATION/MEMORY either.
_NOT_COMPUTE = re.compile(r"(nccl.*Kernel)|(.*Memcpy)|(Memset)|(.*Sync)")

# Tensor-core kernels: cuBLAS/cuDNN/CUTLASS naming (HMMA/IMMA/GMMA instructions, tensorop
# tiles such as s1688/h884/16816, Hopper wgmma/xmma).
_TENSOR_CORE = re.compile(
    r"tensorop|hmma|imma|gmma|xmma|wgmma|s1688|s16816|h884|h1688|h16816|i8816|bf16_s1688"
    r"|_884|_1688|_16816|sm80_|sm86_|sm89_|sm90_|ampere_fp16|ampere_bf16|volta_h|turing_h"
    r"|flash|fmha",
    re.IGNORECASE,
)
# Dense math kernels (GEMM / convolution) whatever their precision.
_DENSE_MATH = re.compile(
    r"gemm|gemv|conv|cutlass|cublas|wgrad|dgrad|fprop|implicit|winograd|fmha|flash|matmul"
    r"|sgemm|hgemm|xmma|sm80_|sm90_",
    re.IGNORECASE,
)
# fp32 SIMT GEMM/conv kernels that could use tensor cores under AMP/TF32.
_FP32_SIMT = re.compile(r"sgemm|gemmSN|gemv2T|_simt_|fp32|float.*conv|conv.*float", re.IGNORECASE)


def kernel_type(name: str) -> int:
    """HTA's kernel type of a GPU event name (a TYPE_* constant)."""
    if _COMM.match(name):
        return TYPE_COMMUNICATION
    if _MEMORY.match(name):
        return TYPE_MEMORY
    if not _NOT_COMPUTE.match(name):
        return TYPE_COMPUTATION
    return TYPE_OTHER


def is_tensor_core_kernel(name: str) -> bool:
    """Whether a kernel name says it runs on tensor cores."""
    return _TENSOR_CORE.search(name) is not None


def is_dense_math_kernel(name: str) -> bool:
    """Whether a kernel is a GEMM or convolution (tensor-core eligible math)."""
    return _DENSE_MATH.search(name) is not None


def is_fp32_simt_kernel(name: str) -> bool:
    """Whether a dense-math kernel runs in fp32 on the CUDA cores (no tensor cores)."""
    return (
        is_dense_math_kernel(name)
        and not is_tensor_core_kernel(name)
        and (_FP32_SIMT.search(name) is not None)
    )


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
