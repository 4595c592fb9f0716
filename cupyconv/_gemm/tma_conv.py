"""Channels-last 1x1 convolutions on the TMA GEMM (``_gemm/tma.py``).

A 1x1 convolution with unit stride and no padding over channels-last activations is one dense
GEMM over the pixels: forward y[P, K] = x[P, C] @ w[K, C]^T, backward-data dx[P, C] =
dy[P, K] @ w[K, C] (w read as it is: an MN-major B, no transposed copy).  On Hopper,
16-bit, those run on the TMA-fed, warp-specialized kernel, faster than the loops they ran on
before (the dense GEMM for the forward, the implicit GEMM for the gradients).  Routed through
cupyconv's calls against ``CUPYCONV_TMA=0`` (H200, bf16, batch 32, 20 ResNet-50 /
EfficientNet-B0 / ConvNeXt-T layers, ``exp_tma_1x1.py``; benchmarks/notes/gemm.md, session 31):
forward 1.03-1.76x but 0.95x on 240->40 at 28^2 (by 0.5 us), backward-data 1.2-2.7x,
backward-weight 1.2-2.1x (1.0x on the two 7^2 layers).  (Before the kernel's epilogue went
through shared memory, session 29, forward lost where a tile has one or two k slices and a wide
output, 64->256 at 56^2 54.8 against 42.8 us, and was routed only from 256 input channels or
below 64 outputs; it now takes 24.4 us there.)

Backward-weight of the same problems is dw[K, C] = dy[P, K]^T @ x[P, C]: both operands
MN-major, the reduction over the pixels long and the output small, so the kernel splits k
(its fp32 parts summed in order by the split-K reduction) until the work units fill the GPU.

No epilogue options (bias, activation, residual) and no grouped or strided problems: those stay
on the other loops.
"""

from __future__ import annotations

import math

from cupyconv._core.kernels import TMA_TILES
from cupyconv._core.launch import sm_count
from cupyconv._gemm.kernel_args import ImplicitConv
from cupyconv._gemm.tma import TMA_DTYPES, gemm_tile, prepare_gemm_tma, runs_on_tma

# The TMA tile backward-weight takes (the forward and backward-data take gemm_tile's, the same):
# 128 x 128 beat 128 x 256 on 15 of the 17 layers measured.
CONV_TILE = TMA_TILES[1]


def pointwise_gemm(prob: ImplicitConv, x, b, y) -> bool:
    """Run ``prob`` (forward or a backward-data phase) as ``y = x @ b`` on the TMA kernel where
    it applies, and return whether it did.
    ``x`` and ``y`` are the activations (C-contiguous, channels-last), ``b`` the weight as a
    (k, n) matrix view (either orientation: :func:`cupyconv._gemm.tma.check_operands`).  The
    caller has ruled out epilogue options and forced plans."""
    if not _is_plain_pointwise(prob, x, y):
        return False
    m, n, k, _ = prob.gemm
    a, c = x.reshape(m, k), y.reshape(m, n)
    tile = gemm_tile(a, b, c)  # (None also where channels break 16-byte rows)
    if tile is None:
        return False
    prepare_gemm_tma(a, b, c, tile=tile)[0]()
    return True


def pointwise_weight_gemm(prob: ImplicitConv, x, dy, dw) -> bool:
    """Backward-weight of ``prob`` (see :func:`pointwise_gemm`) as ``dw = dy^T @ x`` on the TMA
    kernel with split-K where it applies; returns whether it ran.  ``dw`` C-contiguous, (K, C)
    as a matrix in either layout."""
    if not _is_plain_pointwise(prob, x, dy) or not dw.flags.c_contiguous:
        return False
    pixels, k_out, c_in = prob.gemm[0], prob.out_channels, prob.in_channels
    a, b, c = dy.reshape(pixels, k_out).T, x.reshape(pixels, c_in), dw.reshape(k_out, c_in)
    if not runs_on_tma(a, b, c, CONV_TILE):
        return False
    splits = weight_splits(k_out, c_in, pixels, sm_count(dw.data.device_id))
    if splits is None:
        return False
    prepare_gemm_tma(a, b, c, tile=CONV_TILE, splits=splits)[0]()
    return True


def weight_splits(m: int, n: int, k: int, sms: int) -> int | None:
    """Split-K parts of an m x n x k backward-weight GEMM on CONV_TILE: enough work units
    (tiles x parts) for one round over the multiprocessors, each part at least 4 k slices; None
    where that still leaves more than half of them idle (few pixels: the implicit loop)."""
    tiles = math.ceil(m / CONV_TILE[0]) * math.ceil(n / CONV_TILE[1])
    slices = math.ceil(k / CONV_TILE[2])
    splits = max(1, min(sms // tiles, slices // 4))
    return splits if tiles * splits >= sms // 2 else None


def _is_plain_pointwise(prob: ImplicitConv, x, y) -> bool:
    """A 1x1, unit-stride, unpadded, ungrouped channels-last problem of C-contiguous
    activations ``x`` and ``y`` (input and output of the GEMM) in a dtype the TMA kernel takes."""
    if prob.dtype not in TMA_DTYPES:
        return False
    if (prob.groups != 1 or any(v != 1 for v in prob.kernel + prob.stride)
            or any(prob.pad_lo) or prob.out_spatial != prob.spatial):
        return False
    return (prob.channels_last and prob.y_channels_last and x.flags.c_contiguous
            and y.flags.c_contiguous)
