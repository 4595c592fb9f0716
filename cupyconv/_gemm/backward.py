"""Backward passes on the forward machinery.

Backward-data is split by stride phase (the idea of CUTLASS's strided dgrad and CK's YTilde): the
input pixels h with (h + pad) % s == phi receive gradient only from the taps t with
t * d % s == phi % s, and for those rows dx is a unit-stride forward convolution of dy with the
tap-flipped, channel-transposed subset of w.  Each phase runs on the implicit-GEMM forward kernel,
so every dx element is computed exactly once, by one thread, in a fixed order (rows that no tap
reaches are zero-filled): no atomics, no im2col-sized buffer, bitwise reproducible.  On
channels-last dx the kernel's epilogue writes a phase's rows (every s-th row and column) into dx
itself through its row map; channels-first phases, and 3-d phases strided in both depth and height
(which that map cannot place), go through a buffer and a copy.

Backward-weight is the GEMM dw[k, (tap, c)] = sum over pixels P of dy[P, k] * im2col(x)[P, (tap, c)],
with the im2col matrix read implicitly from channels-last x (conv_wgrad.cu, no buffer) and split-K
(deterministic two-stage) over the long pixel range.

Grouped problems with few channels per group run as merged groups (:mod:`cupyconv._gemm.grouped`)
where each pass's cost estimate says that pays: backward-data on the block-diagonal weights,
backward-weight as the merged weight's gradient, of which only the diagonal blocks are kept.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous, copy_into
from cupyconv._core.dtypes import itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import MATH_SIMT, MATH_WGMMA
from cupyconv._core.precision import gemm_math
from cupyconv._core.program import scratch, zero_fill
from cupyconv._gemm.grouped import (best_factor, expand_weight, extract_weight, forced_factor,
                                    merge_margin, merged_geometry)
from cupyconv._gemm.implicit_cost import IMPLICIT_FACTOR, implicit_conv_seconds
from cupyconv._gemm.kernel_args import ImplicitConv, fprop_out_map
from cupyconv._gemm.launch import launch_conv_wgrad, launch_implicit_conv, plain_launch
from cupyconv._gemm import tma_columns
from cupyconv._gemm.tma_conv import (im2col_backward_data, im2col_backward_weight, im2col_phases,
                                     pointwise_gemm, pointwise_weight_gemm)
from cupyconv._gemm.plans import LAUNCH_S, plan_gemm, repair_seconds


@dataclass(frozen=True)
class PhaseDim:
    """One spatial dim of one stride phase of backward-data.

    Rows h = first + q * stride for q < rows.  Taps ``taps`` (in flipped order) reach dy at
    p = q - pad + j * dilation for the j-th of them: a forward conv with unit stride.
    """

    first: int
    rows: int
    taps: tuple[int, ...]
    pad: int
    dilation: int


def phase_dims(size: int, out: int, kernel: int, stride: int, dilation: int, pad_lo: int):
    """The stride phases of one spatial dim that receive gradient (see :class:`PhaseDim`).

    Rows h with (h + pad_lo) % stride == phi are reached by the taps t with t * dilation % stride
    == phi, so only phases of some tap are listed: at most ``kernel`` of them, however large the
    stride (enumerating all ``stride`` phases would never end for a stride of 2**31).  Rows of no
    listed phase receive no gradient: see :func:`uncovered_rows`.
    """
    taps_of_phase: dict[int, list[int]] = {}
    for t in range(kernel):
        taps_of_phase.setdefault(t * dilation % stride, []).append(t)
    phases = []
    for phi, taps in sorted(taps_of_phase.items()):
        first = (phi - pad_lo) % stride
        if first >= size:
            continue
        rows = -(-(size - first) // stride)
        step = taps[1] - taps[0] if len(taps) > 1 else 1
        b0 = (first + pad_lo - taps[0] * dilation) // stride   # p of row 0 at the first tap
        dstep = step * dilation // stride                       # p moves by this per tap
        phases.append(PhaseDim(first, rows, tuple(reversed(taps)),
                               (len(taps) - 1) * dstep - b0, max(dstep, 1)))
    return phases


def uncovered_rows(size: int, phases) -> int:
    """How many of a dim's ``size`` rows no phase of :func:`phase_dims` reaches (zero gradient)."""
    return size - sum(p.rows for p in phases)


def _tap_slice(taps: tuple[int, ...]) -> slice:
    """The flipped tap list of a phase (an arithmetic progression) as a slice: a view, no copy."""
    step = taps[0] - taps[1] if len(taps) > 1 else 1
    stop = taps[-1] - step
    return slice(taps[0], stop if stop >= 0 else None, -step)


def _weight_for_phase(w_cf, taps3, groups: int):
    """(C, taps, Kg) weights of one phase: w[k, c, selected taps], taps flipped, k <-> c swapped
    (a copy per call: weights change in place between calls)."""
    k, cg = w_cf.shape[:2]
    sel = w_cf[(slice(None), slice(None)) + tuple(_tap_slice(t) for t in taps3)]
    taps = sel.shape[2:]
    kg = k // groups
    # (G, Cg, *taps, Kg) without merging the (strided) tap dims, which would copy
    sel = sel.reshape((groups, kg, cg) + taps).transpose(0, 2, 3, 4, 5, 1)
    out = scratch((groups * cg, math.prod(taps), kg), w_cf.dtype)
    copy_into(sel, out.reshape(sel.shape))
    return out


def _weight_matrix(geom: ConvGeometry, w):
    """w of a 1x1 problem as the (K, C) matrix it is (a view of a C-contiguous w, either
    layout): backward-data's B, MN-major."""
    return w.reshape(geom.out_channels, -1)


@dataclass(frozen=True)
class Phase:
    """One stride phase of backward-data: the forward problem it runs and where its rows go."""

    prob: ImplicitConv
    taps: tuple[tuple[int, ...], ...]
    window: tuple                  # index of the phase's rows in dx
    shape: tuple[int, ...]         # the phase's rows as an array in dx's layout
    in_place: bool                 # the kernel writes them into dx itself (else through a copy)


@dataclass(frozen=True)
class PhasePlan:
    """The stride phases of a backward-data problem, and whether rows outside them (which no tap
    reaches: stride larger than the dilated kernel) must be zero-filled."""

    phases: tuple[Phase, ...]
    zero_fill: bool


@memoized(1024)
def phase_plan(geom: ConvGeometry) -> PhasePlan:
    """The stride phases of ``geom``'s backward-data, computed once per problem."""
    g3 = geom.as_3d()
    lead = 3 - geom.ndim
    dims = [phase_dims(*args) for args in zip(g3["spatial"], g3["out_spatial"], g3["kernel"],
                                              g3["stride"], g3["dilation"], g3["pad_lo"])]
    zero_fill = any(uncovered_rows(size, d) for size, d in zip(g3["spatial"], dims))
    plan = []
    for phase in itertools.product(*dims):
        rows = tuple(p.rows for p in phase)
        window = tuple(slice(p.first, None, s) for p, s in zip(phase[lead:], geom.stride))
        window = ((slice(None),) + window + (slice(None),) if geom.channels_last
                  else (slice(None), slice(None)) + window)
        prob = ImplicitConv(geom.dtype, geom.channels_last, geom.batch, geom.out_channels,
                            geom.in_channels, geom.groups, g3["out_spatial"], rows,
                            tuple(len(p.taps) for p in phase), (1, 1, 1),
                            tuple(p.dilation for p in phase), tuple(p.pad for p in phase),
                            geom.precision)
        # Channels-first phases keep the buffer: their rows, s apart, rule out the epilogue's
        # vector stores along the pixels, and the scalar stores (one channel plane per lane) ran
        # slower than a dense write and a copy: fp32 NCHW ResNeXt stride-2 layers 584 -> 680 us
        # and 318 -> 412 us (H100, benchmarks/notes/gemm.md, "Session 23").
        in_place = (geom.channels_last
                    and fprop_out_map(prob, _window_strides(geom)) is not None)
        plan.append(Phase(prob, tuple(p.taps for p in phase), window,
                          geom.layout_shape(geom.batch, geom.in_channels, rows[lead:]), in_place))
    return PhasePlan(tuple(plan), zero_fill)


def _window_strides(geom: ConvGeometry) -> tuple[int, ...]:
    """(n, c, d, h, w) element strides (``element_strides``' order) of a stride phase's rows in
    C-contiguous dx: every stride-th row of each spatial dim."""
    c, spatial = geom.in_channels, tuple(geom.spatial)
    inner = c if geom.channels_last else 1
    dims = []
    for size, step in zip(reversed(spatial), reversed(tuple(geom.stride))):
        dims.append(inner * step)
        inner *= size
    channel = 1 if geom.channels_last else inner
    image = inner * (1 if geom.channels_last else c)
    return (image, channel, *([0] * (3 - len(spatial))), *reversed(dims))


def data_seconds(geom: ConvGeometry, device_id: int) -> float:
    """Estimated seconds of backward-data's implicit launches on ``geom`` as given (no group
    merge), one per stride phase.  (The copies of several phases' rows into dx cost the same
    whatever the merge, so the merge choice leaves them out.)"""
    return sum(implicit_conv_seconds(ph.prob, device_id) for ph in phase_plan(geom).phases)


def data_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    """``(F, seconds)``: backward-data's group merge factor on ``geom`` (or the forced one) and
    its estimate, the weight expansion (one launch) included."""
    forced = forced_factor(geom)
    if forced is not None:
        return forced, data_seconds(merged_geometry(geom, forced), device_id)
    return _data_merge(geom, device_id)


@memoized(4096)
def _data_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    return best_factor(geom, lambda g: data_seconds(g, device_id),  # (as forward_merge)
                       LAUNCH_S + repair_seconds(geom.dtype, math.prod(geom.input_shape)),
                       merge_margin(geom, device_id))


def run_backward_data(geom: ConvGeometry, dy, w, dx, bias=None) -> bool:
    """dx = the gradient of conv(x, w) with respect to x, given dy; dx C-contiguous.  The caller
    holds the arrays' device.  ``bias`` (per dx channel, unit stride; a transposed convolution's)
    is added in the phases' epilogues where the phases cover every row of dx; returns whether it
    was (rows no tap reaches are zero-filled, so there it is left to the caller)."""
    import cupy

    factor = data_merge(geom, dx.data.device_id)[0]
    if factor > 1:
        w = expand_weight(geom, w, factor)
        geom = merged_geometry(geom, factor)
    w_cf = w if not geom.channels_last else cupy.moveaxis(w, -1, 1)  # (a view)
    w_cf = w_cf.reshape(w_cf.shape[:2] + geom.as_3d()["kernel"])
    plan = phase_plan(geom)
    if (len(plan.phases) == 1 and not plan.zero_fill and w.flags.c_contiguous
            and plain_launch(None, bias, None, NO_ACTIVATION)
            and pointwise_gemm(plan.phases[0].prob, dy, _weight_matrix(geom, w), dx)):
        return False
    if plain_launch(None, bias, None, NO_ACTIVATION) and im2col_backward_data(geom, dy, w, dx):
        return False  # (stride 1, Hopper, 16-bit, channels-last: TMA's im2col mode)
    if plain_launch(None, bias, None, NO_ACTIVATION) and im2col_phases(
            geom, plan, dy, dx, lambda ph: _weight_for_phase(w_cf, ph.taps, geom.groups)):
        return False  # (strided: each stride phase on the im2col mode, then into dx)
    if plain_launch(None, bias, None, NO_ACTIVATION) and tma_columns.backward_data(geom, dy, w, dx):
        return False  # (few channels, Hopper, 16-bit, channels-last: fp32 columns, col2im)
    if plan.zero_fill:
        zero_fill(dx)  # rows no tap reaches (stride > dilated kernel): one memset
        bias = None
    for ph in plan.phases:
        wt = _weight_for_phase(w_cf, ph.taps, geom.groups)
        if len(plan.phases) == 1 and not plan.zero_fill:  # the one phase is all of dx
            launch_implicit_conv(ph.prob, dy, wt, bias, dx)
            continue
        if ph.in_place:  # the epilogue writes the phase's rows of dx through the row map
            launch_implicit_conv(ph.prob, dy, wt, bias, dx[ph.window])
            continue
        part = scratch(ph.shape, geom.dtype)
        launch_implicit_conv(ph.prob, dy, wt, bias, part)
        copy_into(part, dx[ph.window])
    return bias is not None


# Backward-weight's loaders move vectors (16-byte chunks on the tensor-core loops, which then
# copy asynchronously) only where the group's channels of dy and x split into them; otherwise
# element by element.  A guess at the slowdown, NOT measured.
_WGRAD_UNALIGNED_FACTOR = 2.0
# On Hopper, backward-weight with fewer than 128 rows (output channels per group) pays more than
# its plan's estimate: with 64 merged output channels instead of 128 the pass took 3.5-4.3x as
# long (H100, ResNeXt-50 3x3 layers, float16; benchmarks/notes/gemm.md, "Issue 17, item 2").
# Part of that was the 64 x 64 tile, which cannot feed the wgmma loop with the MN-major im2col
# operand and ran on mma.sync; plan_gemm no longer picks it (b_kmajor=False, session 29), and the
# 128-row tiles taken instead waste the rows past Kg, which the estimate counts.  The factor
# still steers merges toward 128 rows; it has not been re-measured since.
_WGRAD_WGMMA_ROWS = 128
_WGRAD_NARROW_FACTOR = 3.5


def weight_seconds(geom: ConvGeometry, device_id: int) -> float:
    """Estimated seconds of backward-weight on ``geom`` as given (no group merge): the planned
    GEMM (Kg x taps * Cg over the output pixels), slower where its operands do not vectorize."""
    g = geom.groups
    kg, cg = geom.out_channels // g, geom.in_channels // g
    math_kind = gemm_math(geom.dtype, geom.precision, device_id)
    width = 4 if math_kind == MATH_SIMT else max(4, 16 // itemsize(geom.dtype))
    aligned = geom.channels_last and kg % width == 0 and cg % width == 0
    # (the MN-major rule of launch_conv_wgrad: binding where the multistage loop can run)
    plan = plan_gemm(geom.dtype, kg, cg * math.prod(geom.kernel),
                     geom.batch * math.prod(geom.out_spatial), g, device_id, geom.precision,
                     b_kmajor=not aligned)
    narrow = plan.math == MATH_WGMMA and kg < _WGRAD_WGMMA_ROWS
    return (plan.seconds * (IMPLICIT_FACTOR if aligned else _WGRAD_UNALIGNED_FACTOR)
            * (_WGRAD_NARROW_FACTOR if narrow else 1.0))


def weight_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    """``(F, seconds)``: backward-weight's group merge factor on ``geom`` (or the forced one) and
    its estimate, the extraction of the diagonal blocks (a copy) included."""
    forced = forced_factor(geom)
    if forced is not None:
        return forced, weight_seconds(merged_geometry(geom, forced), device_id)
    return _weight_merge(geom, device_id)


@memoized(4096)
def _weight_merge(geom: ConvGeometry, device_id: int) -> tuple[int, float]:
    # (no margin: it changed no 16-bit pick here, and slowed float32's, benchmarks/notes/gemm.md,
    # "Session 22")
    return best_factor(geom, lambda g: weight_seconds(g, device_id), LAUNCH_S)


def run_backward_weight(geom: ConvGeometry, x, dy, dw) -> None:
    """dw = the gradient of conv(x, w) with respect to w, given dy; dw C-contiguous.  The caller
    holds the arrays' device."""
    if (plain_launch(None, None, None, NO_ACTIVATION)
            and pointwise_weight_gemm(ImplicitConv.from_geometry(geom), x, dy, dw)):
        return
    if (plain_launch(None, None, None, NO_ACTIVATION)
            and tma_columns.backward_weight(geom, x, dy, dw)):
        return  # (few channels, Hopper, 16-bit, channels-last: the column matrix, split-K)
    if (plain_launch(None, None, None, NO_ACTIVATION)
            and im2col_backward_weight(geom, x, dy, dw)):
        return  # (C % 64 == 0, Hopper, 16-bit, channels-last: x through TMA's im2col mode)
    factor = weight_merge(geom, dw.data.device_id)[0]
    if factor > 1:
        dw_m = scratch(merged_geometry(geom, factor).weight_shape, geom.dtype)
        _run_backward_weight(merged_geometry(geom, factor), x, dy, dw_m)
        extract_weight(geom, dw_m, dw, factor)
        return
    _run_backward_weight(geom, x, dy, dw)


# Experiment switch for benchmarks/experiments/exp_wgrad_nchw.py: None lets stage_nchw_x decide, a bool forces.
STAGE_NCHW_X: bool | None = None


def stage_nchw_x(geom: ConvGeometry, device_id: int) -> bool:
    """Whether channels-first backward-weight copies x to channels-last before the kernel (dy is
    always copied) rather than reading it through its strides (channel stride H*W), which
    defeats the loader's vector and asynchronous copies.  Measured on an H100 (ResNet-50 layers,
    batch 32, benchmarks/experiments/exp_wgrad_nchw.py, the copy a tiled transpose): the copy pays wherever
    the channels split into whole 16-byte chunks -- tensor-core loops 3x3 fp16 0.43-0.56 ->
    0.09-0.40 ms, TF32 0.34-0.51 -> 0.15-0.31 ms, 1x1 TF32 0.30-0.38 -> 0.22-0.27 ms; exact fp32
    3x3 4-17 % -- except a stride-2 1x1 layer on the exact fp32 loop (0.32 -> 0.39 ms: the copy
    moves all of x, the kernel reads a quarter).  Without whole chunks (conv1's 3 channels) the
    copy lost 6-9 %."""
    if STAGE_NCHW_X is not None:
        return STAGE_NCHW_X
    chunks = geom.in_channels // geom.groups * itemsize(geom.dtype) % 16 == 0
    skips_input = math.prod(geom.kernel) == 1 and any(s > 1 for s in geom.stride)
    simt = gemm_math(geom.dtype, geom.precision, device_id) == MATH_SIMT
    return chunks and not (simt and skips_input)


def _run_backward_weight(geom: ConvGeometry, x, dy, dw) -> None:
    """run_backward_weight on ``geom`` as given (no group merge)."""
    import cupy

    if not geom.channels_last:  # one kernel formulation: go through channels-last views/copies
        geom_l = replace(geom, layout="NHWC")
        dw_l = scratch(geom_l.weight_shape, geom.dtype)
        x_l = cupy.moveaxis(x, 1, -1)
        if stage_nchw_x(geom, dw.data.device_id):
            x_l = contiguous(x_l)
        launch_conv_wgrad(ImplicitConv.from_geometry(geom_l), x_l,
                          contiguous(cupy.moveaxis(dy, 1, -1)), dw_l)
        copy_into(cupy.moveaxis(dw_l, -1, 1), dw)
        return
    launch_conv_wgrad(ImplicitConv.from_geometry(geom), x, contiguous(dy), dw)
