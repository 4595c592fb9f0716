"""Grouped convolution on the tiled GEMM by merging groups (block-diagonal weights).

The implicit-GEMM kernels run one GEMM per group (the launch's batch): Kg output channels by
Cg * taps.  With ResNeXt's 4-32 channels per group most of a 64- or 128-column tile idles, the
k-slices straddle taps (Cg not a multiple of the slice depth BK: a division per element in the
loader) and the tensor-core loops lose their 16-byte copies.  Merging F adjacent groups into one
of F * Cg input and F * Kg output channels whose weights are block-diagonal (zero outside the F
diagonal blocks) gives the same convolution with full tiles and whole chunks, for F times the
multiply-adds: cheap on tensor cores, where the merge pays; the cost model
(:func:`best_factor`, fed by each pass's estimate) keeps F = 1 where it does not.

Forward and backward-data run on the merged weights (backward-data transposes each block, as it
transposes the whole), which one launch of ``block_diagonal`` (common/copy.cu) writes whole;
backward-weight computes the merged weight's gradient and keeps only its diagonal blocks (the
zeros' gradients are never returned).  This module is the one place that knows the block layout:
:func:`group_blocks` (views, on NumPy and CuPy arrays alike) and :func:`block_diagonal_args` (the
kernel's view of it), both checked on the CPU against an explicit construction.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import replace
from typing import Callable

from cupyconv._core.geometry import ConvGeometry

# Most channels (input or output) of a merged group: beyond the widest tile (128 columns, 128 rows
# of backward-weight) merging only adds zeros, as multiply-adds and as weights to copy.
MAX_MERGED_CHANNELS = 256


def mergeable(geom: ConvGeometry) -> bool:
    """Grouped, not depthwise (1 < groups < channels; depthwise problems have their own kernels)."""
    return 1 < geom.groups < geom.in_channels


def merge_factors(geom: ConvGeometry) -> tuple[int, ...]:
    """The factors F > 1 by which ``geom``'s groups may be merged: divisors of groups whose merged
    group has at most MAX_MERGED_CHANNELS input and output channels."""
    if not mergeable(geom):
        return ()
    g = geom.groups
    widest = max(geom.in_channels, geom.out_channels) // g
    return tuple(f for f in range(2, min(g, MAX_MERGED_CHANNELS // widest) + 1) if g % f == 0)


def merged_geometry(geom: ConvGeometry, factor: int) -> ConvGeometry:
    """``geom`` with every ``factor`` adjacent groups merged into one."""
    if factor == 1:
        return geom
    if geom.groups % factor:
        raise ValueError(f"merge factor {factor} does not divide groups ({geom.groups})")
    return replace(geom, groups=geom.groups // factor)


# A hook for the tests and benchmarks, off by default: a merge factor that every GEMM pass in the
# context uses instead of its cost model's (plan_hooks_active: such calls are planned afresh).
_FORCED: contextvars.ContextVar = contextvars.ContextVar("cupyconv_forced_merge", default=None)


@contextlib.contextmanager
def forced_merge(factor: int | None):
    """Within the block, the implicit-GEMM passes merge groups by ``factor`` (1: never; None:
    their cost models' choice).  The factor must divide the groups of every problem run there."""
    token = _FORCED.set(factor)
    try:
        yield
    finally:
        _FORCED.reset(token)


def merge_forced() -> bool:
    return _FORCED.get() is not None


def forced_factor(geom: ConvGeometry) -> int | None:
    """The factor :func:`forced_merge` sets for ``geom`` (None: none is forced).  Raises
    ValueError where it cannot merge ``geom``'s groups."""
    f = _FORCED.get()
    if f is None or f == 1:
        return f
    if not mergeable(geom) or geom.groups % f:
        raise ValueError(f"forced merge factor {f} cannot merge {geom.groups} groups of "
                         f"{geom.in_channels} channels (1 < groups < channels, a divisor)")
    return f


# How much faster a larger merge factor must be estimated than the best smaller one to be taken,
# in the forward and backward-data passes on the tensor-core loops.  F multiplies the
# multiply-adds, and near the best factor the estimates do not separate the factors reliably: on
# the H100's ResNeXt-50 sweep (fp16 channels-last, 7 layers x 3 passes,
# benchmarks/experiments/README.md: profile_grouped.py, benchmarks/notes/gemm.md, "Session 22") the least estimate took
# F = 32 over F = 16 for 128@56 forward and backward-data (within 2 % by estimate; measured 7-9 %
# slower); with the margin every forward and backward-data pick is the measured best or within
# 1 % of it.
# Backward-weight keeps the least estimate: the margin changed none of its 16-bit picks, and on
# the SIMT loop (float32 exact) it moved them one factor down, 8-11 % slower on four ResNeXt
# layers; the SIMT loop's forward and backward-data keep it too (not measured with a margin).
MERGE_MARGIN = 0.9


def merge_margin(geom: ConvGeometry, device_id: int) -> float:
    """The margin :func:`best_factor` applies to ``geom`` on the device: MERGE_MARGIN on the
    tensor-core loops, none (1.0) on the SIMT loop."""
    from cupyconv._core.kernels import MATH_SIMT
    from cupyconv._core.precision import gemm_math

    return 1.0 if gemm_math(geom.dtype, geom.precision, device_id) == MATH_SIMT else MERGE_MARGIN


def best_factor(geom: ConvGeometry, seconds: Callable[[ConvGeometry], float],
                extra_seconds: float, margin: float = 1.0) -> tuple[int, float]:
    """``(F, estimated seconds)``: the merge factor for which ``seconds(merged geometry)`` plus,
    for F > 1, ``extra_seconds`` (the weight expansion or extraction launches) is least, where
    each larger factor must beat the best smaller one by the factor ``margin`` (1: any gain;
    :func:`merge_margin`); F = 1 on ties and for problems that cannot merge."""
    best = (1, seconds(geom))
    for f in merge_factors(geom):
        t = seconds(merged_geometry(geom, f)) + extra_seconds
        if t < best[1] * margin:
            best = (f, t)
    return best


def _as_strided(a, shape, strides):
    """A view of ``a``'s memory (NumPy or CuPy) with the given shape and byte strides."""
    if type(a).__module__.startswith("numpy"):
        from numpy.lib.stride_tricks import as_strided
    else:
        from cupy.lib.stride_tricks import as_strided
    return as_strided(a, shape=shape, strides=strides)


def group_blocks(w, groups: int, factor: int, channels_last: bool, merged: bool):
    """A view of weights ``w`` as ``(groups // factor, factor, Kg, *rest)``: the block of original
    group ``(i, j)`` = group ``i * factor + j``, with ``rest`` the per-group weight's other dims
    (``(Cg, *kernel)`` channels-first, ``(*kernel, Cg)`` channels-last).

    ``merged=False``: ``w`` is the per-group weight (K, Cg, ...) itself (only its first axis is
    split).  ``merged=True``: ``w`` is a merged weight with ``factor * Cg`` input channels per
    group, and the view holds its diagonal blocks: group j of a merged group reads channels
    ``j * Cg .. (j + 1) * Cg - 1`` of it, so stepping j steps both the output rows (Kg of them)
    and the channel block (Cg channels).
    """
    k = w.shape[0]
    kg = k // groups
    c_axis = w.ndim - 1 if channels_last else 1
    s = w.strides
    cg = w.shape[c_axis] // (factor if merged else 1)
    rest = tuple(cg if i == c_axis else n for i, n in enumerate(w.shape))[1:]
    step = kg * s[0] + (cg * s[c_axis] if merged else 0)
    return _as_strided(w, (groups // factor, factor, kg) + rest,
                       (factor * kg * s[0], step, s[0]) + tuple(s[1:]))


def block_diagonal_args(geom: ConvGeometry, factor: int) -> tuple[int, ...]:
    """The scalar arguments of ``block_diagonal`` (common/copy.cu) that expand ``geom``'s weights
    merged by ``factor``: (elements of the merged weight, outer, Cg, inner, Kg, factor), the
    per-group weight seen as (K, outer, Cg, inner): (K, taps, Cg, 1) channels-last, (K, 1, Cg,
    taps) channels-first."""
    taps = math.prod(geom.kernel)
    cg, kg = geom.in_channels // geom.groups, geom.out_channels // geom.groups
    outer, inner = (taps, 1) if geom.channels_last else (1, taps)
    return (geom.out_channels * taps * factor * cg, outer, cg, inner, kg, factor)


def expand_weight(geom: ConvGeometry, w, factor: int):
    """The block-diagonal weight of ``geom`` merged by ``factor`` (a scratch array in the merged
    geometry's weight shape), written whole, zeros included, by one recorded launch (weights
    change in place between calls, e.g. in training, so this runs on every call)."""
    from cupyconv._core import jit
    from cupyconv._core.copy import contiguous
    from cupyconv._core.kernels import STRIDED_COPY
    from cupyconv._core.launch import int64s, ints, launch_grid
    from cupyconv._core.program import scratch

    w = contiguous(w)
    wm = scratch(merged_geometry(geom, factor).weight_shape, w.dtype)
    total, *dims = block_diagonal_args(geom, factor)
    grid, block = launch_grid(total)
    fn = jit.get_function(STRIDED_COPY, "block_diagonal", w.dtype.name)
    fn(grid, block, (w, wm, *int64s((total,)), *ints(dims)))
    return wm


def extract_weight(geom: ConvGeometry, wm, w, factor: int) -> None:
    """``w`` (the per-group weight gradient, C-contiguous as the public functions give it) = the
    diagonal blocks of the merged ``wm`` (C-contiguous, the merged geometry's weight shape): one
    strided copy, recorded."""
    from cupyconv._core.copy import copy_into

    cl = geom.channels_last
    copy_into(group_blocks(wm, geom.groups, factor, cl, True),
              group_blocks(w, geom.groups, factor, cl, False))
