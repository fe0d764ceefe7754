"""Kernel names from real traces (../shared/peer-traces) are classified the way a reader would."""

from __future__ import annotations

import pytest

from perfweb_recommender.trace.classify import (
    fusible_family,
    is_dense_math_kernel,
    is_fp32_simt_kernel,
    is_generated_kernel,
    is_tensor_core_kernel,
    kernel_type,
)
from perfweb_recommender.trace.model import TYPE_COMMUNICATION, TYPE_COMPUTATION

# name -> (dense math, tensor core, fp32 on CUDA cores); all from the peer traces.
DENSE = {
    # V100 fp32 ResNet-50 (hta/ns_resolution_trace): cuDNN's fp32 convolutions
    "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int)": (
        True,
        False,
        True,
    ),
    "void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int)": (
        True,
        False,
        True,
    ),
    "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1": (True, False, True),
    "cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1": (True, False, True),
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false>(int)": (
        True,
        False,
        True,
    ),
    "volta_sgemm_64x64_nt": (True, False, True),
    # MI300X (tracelens/mi300): Tensile GEMMs on matrix cores (MFMA, MI16x16x1)
    "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1": (
        True,
        True,
        False,
    ),
    # MIOpen implicit-GEMM convolutions (mi210) and composable-kernel xdlops GEMMs
    "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x256x32_wt16x64x4_ws1x1": (True, False, False),
    "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weight": (True, True, False),
    # B200 (tracelens/b200): Blackwell bmm and cuBLAS nvjet kernels
    "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_sm100f": (
        True,
        True,
        False,
    ),
    "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT": (True, True, False),
}
NOT_DENSE = (
    # "Convert" is not a convolution; BFloat16 is not fp32; cutlass:: in a template argument
    "std::enable_if<vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*)",
    "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<"
    "cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)",
)


@pytest.mark.parametrize("name", sorted(DENSE))
def test_it_classifies_dense_math_by_precision_and_unit(name: str) -> None:
    dense, tensor, fp32 = DENSE[name]
    assert (is_dense_math_kernel(name), is_tensor_core_kernel(name), is_fp32_simt_kernel(name)) == (
        dense,
        tensor,
        fp32,
    )


@pytest.mark.parametrize("name", NOT_DENSE)
def test_it_does_not_take_other_kernels_for_dense_math(name: str) -> None:
    assert not is_dense_math_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
        "void vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(vllm::RankData*)",
    ],
)
def test_it_counts_every_collective_as_communication(name: str) -> None:
    assert kernel_type(name) == TYPE_COMMUNICATION


def test_it_keeps_hta_computation_for_ordinary_kernels() -> None:
    assert kernel_type("volta_sgemm_64x64_nt") == TYPE_COMPUTATION


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (
            "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::"
            "gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16>>>(int)",
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::"
            "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(int)",
            "concat",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel"
            "<c10::BFloat16, float>(int, float)",
            "normalisation",
        ),
        ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1", None),
        ("triton_poi_fused_add_mul_0", None),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),
    ],
)
def test_it_names_the_fusible_families_of_eager_kernels(name: str, family: str | None) -> None:
    assert fusible_family(name) == family


def test_it_recognises_inductor_kernels_as_generated() -> None:
    assert is_generated_kernel("triton_red_fused__log_softmax_1")
    assert not is_generated_kernel("volta_sgemm_64x64_nt")
