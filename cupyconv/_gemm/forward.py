"""Forward convolution through the tiled GEMM: implicit GEMM and explicit im2col + GEMM.

Both express conv as one batched GEMM launch per call (groups, and for channels-first the images,
are the batch), with the bias, the residual z and the activation applied in the GEMM epilogue.
The implicit GEMM runs grouped problems with few channels per group as merged groups with
block-diagonal weights where its cost model says that pays (:mod:`cupyconv._gemm.grouped`).
"""

from __future__ import annotations

import math

from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import MATH_SIMT
from cupyconv._core.launch import GRID_YZ_MAX
from cupyconv._core.precision import gemm_math
from cupyconv._core.program import scratch
from cupyconv._gemm.grouped import (best_factor, expand_weight, forced_factor, merge_margin,
                                    merged_geometry, mergeable)
from cupyconv._gemm.im2col import run_im2col
from cupyconv._gemm.implicit_cost import implicit_conv_seconds
from cupyconv._gemm.kernel_args import ImplicitConv, MatrixView, OutMap
from cupyconv._gemm.launch import plain_launch, run_conv_fprop, run_gemm
from cupyconv._gemm import tma_columns
from cupyconv._gemm.tma_conv import im2col_forward, pointwise_gemm
from cupyconv._gemm.plans import LAUNCH_S, plan_gemm, repair_seconds


def is_pointwise(geom: ConvGeometry) -> bool:
    """1x1 kernel, stride 1, no padding: x itself is the GEMM's A operand."""
    return (all(k == 1 for k in geom.kernel) and all(s == 1 for s in geom.stride)
            and not any(geom.pad_lo + geom.pad_hi))


def _run_matrix_conv(geom: ConvGeometry, a_src, w, bias, y, taps: int, z=None,
                     act: int = NO_ACTIVATION) -> None:
    """y = act(conv + bias + z) as GEMM over an explicit matrix ``a_src``: x itself (1x1) or the
    im2col buffer (z with y's strides, read at y's offsets in the epilogue).

    Channels-last: A = a_src as (N*L) x (C*taps) with group g's columns contiguous, one launch over
    the groups.  Channels-first: A[n] = a_src[n].T, an L x (C*taps) view per image, and the batch is
    (image, group).  B = w, k-contiguous rows of length Cg*taps.
    """
    n_img, c, k = geom.batch, geom.in_channels, geom.out_channels
    g = geom.groups
    cg_t, kg, L = c // g * taps, k // g, math.prod(geom.out_spatial)
    if (taps == 1 and is_pointwise(geom) and plain_launch(None, bias, z, act)
            and pointwise_gemm(ImplicitConv.from_geometry(geom), a_src,
                               w.reshape(k, -1).T, y)):
        return  # (Hopper, 16-bit, channels-last: one launch on the TMA GEMM, _gemm/tma_conv.py)
    b = MatrixView(w, rs=cg_t, ks=1, si=kg * cg_t)
    if geom.channels_last:
        a = MatrixView(a_src, rs=c * taps, ks=1, si=cg_t)
        run_gemm(geom.dtype, a, b, y, n_img * L, kg, cg_t, batch=g, g2=g, c_si=kg,
                 out=OutMap(n_img * L, 0, k, 1), bias=bias, bias_si=kg, z=z, act=act,
                 precision=geom.precision)
    else:
        a = MatrixView(a_src, rs=1, ks=L, so=c * taps * L, si=cg_t * L)
        run_gemm(geom.dtype, a, b, y, L, kg, cg_t, batch=n_img * g, g2=g, c_so=k * L, c_si=kg * L,
                 out=OutMap(L, 0, 1, L), bias=bias, bias_si=kg, z=z, act=act,
                 precision=geom.precision)


def run_implicit_gemm(geom: ConvGeometry, x, w, bias, y, *, z=None,
                      act: int = NO_ACTIVATION) -> None:
    """No buffer: 1x1/stride-1/unpadded convs are a plain GEMM on x; the rest read x through the
    implicit-im2col loader; grouped problems as merged groups where :func:`forward_merge` says so.
    y = act(conv + bias + z), z with y's strides."""
    factor = forward_merge(geom, y.data.device_id)[0]
    if factor > 1:
        w = expand_weight(geom, w, factor)
        geom = merged_geometry(geom, factor)
    if is_pointwise(geom) and pointwise_as_gemm(geom):
        _run_matrix_conv(geom, contiguous(x), contiguous(w), bias, y, taps=1, z=z, act=act)
    elif plain_launch(None, bias, z, act) and im2col_forward(geom, x, w, y):
        pass  # (Hopper, 16-bit, channels-last: TMA's im2col mode ran it, _gemm/tma_conv.py)
    elif (plain_launch(None, bias, z, act) and columns_pay(geom, y.data.device_id)
          and tma_columns.forward(geom, x, w, y)):
        pass  # (the same, few channels: a padded column matrix, _gemm/tma_columns.py)
    else:
        run_conv_fprop(geom, x, w, bias, y, z=z, act=act)


# The few-channel implicit model (``implicit_cost``, fitted on an H100 before the Hopper loop's
# later changes) overestimates these layers about twice on an H200: 380, 306 and 140 us for the
# 191, 150 and 76 us measured on the stems of ResNet-50, EfficientNet-B0 and ConvNeXt-T (bf16,
# batch 32; benchmarks/notes/gemm.md, session 32).  The column route is weighed against it so.
FEW_CHANNEL_H200 = 0.5


def columns_pay(geom: ConvGeometry, device_id: int) -> bool:
    """Whether the forward ``geom`` goes to the few-channel column route
    (:mod:`cupyconv._gemm.tma_columns`): where it applies and its estimate beats the implicit
    loop's (scaled by FEW_CHANNEL_H200).  Measured: the 3x3 and 4x4 stems gain (150 -> 87 us,
    76 -> 50-66 us), ResNet-50's 7x7 stem would lose (191 -> 254 us) and keeps the loop."""
    return (tma_columns.applies(geom, device_id) and tma_columns.seconds(geom)
            < FEW_CHANNEL_H200 * forward_merge(geom, device_id)[1])


def pointwise_as_gemm(geom: ConvGeometry) -> bool:
    """Channels-first 1x1 runs one GEMM per (image, group) of L rows: worth it only when L fills
    tiles; small images go through the implicit kernel, whose rows span images (as do batches of
    more (image, group) pairs than the launch grid's z extent holds)."""
    if geom.channels_last:
        return True
    return math.prod(geom.spatial) >= 1024 and geom.batch * geom.groups <= GRID_YZ_MAX


def gemm_launch_shape(geom: ConvGeometry, algorithm: str, device_id: int | None = None):
    """``(kernel, (m, n, k, batch))`` of the one tiled-GEMM launch that ``algorithm`` makes for
    ``geom`` (kernel "gemm": the dense GEMM, "conv_fprop": the implicit one), or None for the
    algorithms that do not use the tiled GEMM.  The cost model and the plan report read it.
    With ``device_id``, the implicit GEMM's launch on that device, after its group merge
    (:func:`forward_merge`); without, the launch of ``geom`` as given."""
    if algorithm == "implicit_gemm" and device_id is not None:
        geom = merged_geometry(geom, forward_merge(geom, device_id)[0])
    m, n, k, b = geom.gemm_forward
    dense = algorithm == "im2col_gemm" or (algorithm == "implicit_gemm" and is_pointwise(geom)
                                            and pointwise_as_gemm(geom))
    if algorithm not in ("implicit_gemm", "im2col_gemm"):
        return None
    if not dense:
        return "conv_fprop", (m, n, k, b)
    if geom.channels_last:
        return "gemm", (m, n, k, b)
    # channels-first: one GEMM per (image, group) over that image's output pixels (_run_matrix_conv)
    return "gemm", (math.prod(geom.out_spatial), n, k, b * geom.batch)


def implicit_seconds(geom: ConvGeometry, device_id: int) -> float:
    """Estimated seconds of the implicit GEMM on ``geom`` as given (no group merge): the planned
    GEMM time, times the implicit view's factor where x is read through it."""
    kernel, shape = gemm_launch_shape(geom, "implicit_gemm")
    if kernel == "gemm":  # 1x1: a plain GEMM on x, no view to decode
        return plan_gemm(geom.dtype, *shape, device_id, geom.precision).seconds
    return implicit_conv_seconds(ImplicitConv.from_geometry(geom), device_id)


# The implicit GEMM's estimate against its measured time on grouped problems on tensor cores (H100,
# the ResNeXt-50 3x3 layers in float16 with every merge factor; benchmarks/notes/gemm.md,
# "Issue 17, item 2"): the kernels took 1.6-3.6x the estimate channels-last and 6-11x channels-first
# (whose loader reads x element by element and never copies asynchronously).  The forward's choice
# against the grouped direct kernel, whose estimate was fitted, needs that level.  Not applied to
# dense problems (not measured this way) nor to the SIMT loop, whose rates were measured on dense
# layers.
_GROUPED_TENSOR_CORE_FACTOR = {True: 2.5, False: 8.0}  # by channels_last


def _grouped_level(geom: ConvGeometry, device_id: int) -> float:
    if not mergeable(geom) or gemm_math(geom.dtype, geom.precision, device_id) == MATH_SIMT:
        return 1.0
    return _GROUPED_TENSOR_CORE_FACTOR[geom.channels_last]


def forward_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    """``(F, seconds)``: the group merge factor of the implicit GEMM's forward on ``geom`` (1: no
    merge; or the one ``grouped.forced_merge`` sets) and its estimated time, the expansion of the
    weights included, at the level measured on grouped problems."""
    forced = forced_factor(geom)
    if forced is not None:
        return forced, (_grouped_level(geom, device_id)
                        * implicit_seconds(merged_geometry(geom, forced), device_id))
    return _forward_merge(geom, device_id)


@memoized(4096)
def _forward_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    # the expansion is one launch over a few thousand weights (grouped.expand_weight); the repair
    # pass reads y once
    level = _grouped_level(geom, device_id)
    return best_factor(geom, lambda g: level * implicit_seconds(g, device_id),
                       LAUNCH_S + repair_seconds(geom.dtype, math.prod(geom.output_shape)),
                       merge_margin(geom, device_id))


def run_im2col_gemm(geom: ConvGeometry, x, w, bias, y, *, z=None, act: int = NO_ACTIVATION) -> None:
    """Explicit im2col into a buffer, then one batched GEMM: y = act(conv + bias + z), z with y's
    strides."""
    if is_pointwise(geom):  # 1x1, stride 1, unpadded: the column matrix is x itself
        col = contiguous(x)
    else:
        col = scratch(geom.col_shape, geom.dtype)
        run_im2col(geom, x, col, groups=geom.groups if geom.channels_last else 1)
    _run_matrix_conv(geom, col, contiguous(w), bias, y, taps=math.prod(geom.kernel), z=z, act=act)
