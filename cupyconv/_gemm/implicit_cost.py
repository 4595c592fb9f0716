"""Estimated time of the implicit-GEMM kernel: the planned GEMM time times what reading an operand
through the implicit im2col view costs and, for channels that are not whole 16-byte chunks on the
tensor-core loops, the few-channel block model and the staging copy (:mod:`cupyconv._gemm.staging`).
"""

from __future__ import annotations

import math

from cupyconv._core.dtypes import itemsize
from cupyconv._core.kernels import MATH_SIMT
from cupyconv._core.launch import sm_count
from cupyconv._core.precision import gemm_math
from cupyconv._gemm.kernel_args import ImplicitConv
from cupyconv._gemm.plans import LAUNCH_S, plan_gemm
from cupyconv._gemm.staging import staged_channels, unfolded_channels


# What reading an operand through the implicit im2col view costs over a dense GEMM of its shape (a
# factor on the planned GEMM time, measured on an H200, benchmarks/notes/gemm.md,
# "issue 3: tiled GEMM"): with channels per group a multiple of the k-slice, one tap decode per
# slice; otherwise every element decodes its tap with divisions (and the tensor-core loops lose
# their 16-byte copies).
IMPLICIT_FACTOR = 1.15
IMPLICIT_GENERIC_FACTOR = 3


# Tensor-core launches of few-channel problems (channels staged to whole chunks or unfolded:
# ResNet's conv1, one-channel images, volumes and signals) are bound by each block's latency and
# its gathered operand traffic, not by the MMA rate: a block takes FEW_CHANNEL_BLOCK_S plus its
# operand bytes at FEW_CHANNEL_SM_BANDWIDTH (per multiprocessor), and the staging copy moves x
# at STAGING_BANDWIDTH.  Fitted on fp16 conv1 at batch 32, padded (263 us) and unfolded
# (161 us); held out, a one-channel 80-tap 1-d layer: 318 us predicted, 284 measured (H100,
# benchmarks/notes/gemm.md, "Session 12").  The GEMM-rate estimate alone put such layers at
# 1/10-1/40 of their time.
FEW_CHANNEL_BLOCK_S = 3.5e-6
FEW_CHANNEL_SM_BANDWIDTH = 20e9
STAGING_BANDWIDTH = 5e11


def implicit_conv_seconds(prob: ImplicitConv, device_id: int) -> float:
    """Estimated seconds of one implicit-kernel launch of ``prob``: the planned GEMM time times
    the view's factor (the channel count per group decides whether k-slices keep to one tap); for
    channels that are not whole chunks on the tensor-core loops, at least the few-channel block
    model on the staged problem, and the staging copy."""
    m, n, k, groups = prob.gemm
    plan = plan_gemm(prob.dtype, m, n, k, groups, device_id, prob.precision)
    cg = prob.in_channels // prob.groups
    seconds = (IMPLICIT_FACTOR if cg % plan.tile[2] == 0 else IMPLICIT_GENERIC_FACTOR) * plan.seconds
    cg_to = staged_channels(prob, plan, device_id)
    if cg_to in (0, cg):
        return seconds
    width = unfolded_channels(prob, cg_to)
    if width:
        k_run = math.prod(prob.kernel[:2]) * width
        staged = prob.batch * math.prod(prob.spatial[:2]) * prob.out_spatial[2] * width
    else:
        k_run = math.prod(prob.kernel) * cg_to
        staged = prob.batch * math.prod(prob.spatial) * groups * cg_to
    copy = (prob.batch * math.prod(prob.spatial) * prob.in_channels + staged) * itemsize(prob.dtype)
    return (max(seconds, few_channel_seconds(prob.dtype, prob.precision, m, n, k_run, groups,
                                             device_id))
            + copy / STAGING_BANDWIDTH + LAUNCH_S)


def few_channel_seconds(dtype: str, precision: str, m: int, n: int, k: int, batch: int,
                        device_id: int) -> float:
    """The few-channel block model's time of an m x n x k GEMM batch on its planned tiles."""
    plan = plan_gemm(dtype, m, n, k, batch, device_id, precision)
    bm, bn = plan.tile[:2]
    waves = math.ceil(math.ceil(m / bm) * math.ceil(n / bn) * batch * plan.splits
                      / sm_count(device_id))
    operand_bytes = (bm + bn) * math.ceil(k / plan.splits) * itemsize(dtype)
    return waves * (FEW_CHANNEL_BLOCK_S + operand_bytes / FEW_CHANNEL_SM_BANDWIDTH)


def few_channels(dtype: str, precision: str, channels: int, device_id: int) -> bool:
    """Whether ``channels`` per group fall short of whole 16-byte chunks on a tensor-core loop
    (the few-channel block model's domain)."""
    if gemm_math(dtype, precision, device_id) == MATH_SIMT:
        return False
    return channels % (16 // itemsize(dtype)) != 0
