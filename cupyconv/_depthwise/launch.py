"""Depthwise convolution (groups == input channels): the launchers of the forward, backward-data
and backward-weight passes, and the choice of kernel for each.

The forward pass (and the 3x3 backward-weight) of contiguous channels-first problems with unit
stride and dilation, and those of square 3x3, 5x5, 7x7 filters at stride 2 (backward-weight: 3x3
and 5x5), run on the plane kernels (the row walk of the signal API's image filter:
:mod:`cupyconv._depthwise.planes`), except narrow planes at unit stride and backward-data at
stride 2, which run on the band kernel (:mod:`cupyconv._depthwise.bands`: :func:`band_choice`);
other channels-first problems run on the tile kernels when their window fits in shared memory
(:mod:`cupyconv._depthwise.tiles`).  Channels-last problems without a channel multiplier whose
activations have unit channel stride run on the channels-last kernels
(:mod:`cupyconv._depthwise.channels_last`), and so does channels-first backward-data with a
stride in H or W that the band kernel does not take, through channels-last copies
(:func:`stage_channels_last`).  Everything else runs on the gather kernels (one thread per output
element, coalesced across channels for channels-last).  Shapes, strides, paddings and dilations
are runtime arguments: one binary per (dtype, kernel family) serves every problem.
"""

from __future__ import annotations

import dataclasses
import math

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous, copy_into
from cupyconv._core.dtypes import compute_dtype
from cupyconv._core.epilogue import run_epilogue_pass
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (CHUNK_SUM, DEPTHWISE_CL_VECS, DEPTHWISE_KF,
                                    DEPTHWISE_WGRAD_GATHER, DEPTHWISE_WGRAD_KF, KERNEL_CONSTANTS,
                                    depthwise_gather_module, depthwise_tile_module,
                                    depthwise_wgrad_module)
from cupyconv._core.launch import (Launch, element_strides, int64s, ints, launch_grid, sm_count,
                                   spatial_args)
from cupyconv._core.program import scratch
from cupyconv._depthwise import bands
from cupyconv._depthwise import channels_last as cl
from cupyconv._depthwise.applicable import is_depthwise
from cupyconv._depthwise.planes import (backward_data_twin, contiguous_planes, plane_launch,
                                        plane_plan, plane_wgrad_launch, plane_wgrad_plan)
from cupyconv._depthwise.tiles import fixed_kernel, tile_plan, vector_rows, wgrad_plan


# Backward-weight's chunk sum: at most CHUNK_SUM_SEGMENTS segments of the chunks, each of at
# least CHUNK_SUM_MIN_PER_SEGMENT chunks (a segment's four partial sums keep four loads in flight).
CHUNK_SUM_SEGMENTS = KERNEL_CONSTANTS["CHUNK_SUM_SEGMENTS"]
CHUNK_SUM_MIN_PER_SEGMENT = 4


def _common_args(geom: ConvGeometry, strides) -> list:
    return spatial_args(geom) + int64s(strides)


def _strides(a, geom: ConvGeometry) -> tuple[int, ...]:
    return element_strides(a, geom.channels_last)


def band_choice(geom: ConvGeometry, transposed: bool, src_strides: tuple[int, ...]):
    """The band kernel's plan where it takes this pass (its source's planes contiguous, and
    :func:`bands.prefer_bands`), else None."""
    if not contiguous_planes(geom, src_strides, output=transposed):
        return None
    plan = bands.band_plan(geom, transposed)
    return plan if plan is not None and bands.prefer_bands(geom, transposed) else None


@memoized(2048)
def _pass_launch(geom: ConvGeometry, transposed: bool, has_bias: bool, src_strides: tuple,
                 vec: bool, src_aligned: bool, dst_aligned: bool, cl_vec: int,
                 device: int) -> Launch:
    """Forward (or backward-data) launch: the channels-last kernel where ``cl_vec`` (its channels
    per thread, 0: it does not apply) and its plan allow; the band kernel where
    :func:`band_choice` takes the pass (``src_aligned``: src's base is 16-byte aligned); the
    plane kernel where it applies (to the forward problem, or to backward-data's
    :func:`backward_data_twin`), else the tile kernel where its window fits, else gather."""
    if cl_vec:
        plan = cl.pass_plan(geom, transposed, cl_vec)
        launch = plan and cl.pass_launch(geom, plan, transposed, has_bias, src_strides)
        if launch is not None:
            return launch
    band = band_choice(geom, transposed, src_strides)
    if band is not None:
        return bands.band_launch(geom, band, has_bias, transposed, src_aligned)
    mult = geom.out_channels // geom.in_channels
    chans = geom.in_channels if transposed else geom.out_channels
    src_geom = backward_data_twin(geom) if transposed else geom
    plane = None
    if src_geom is not None and contiguous_planes(src_geom, src_strides):
        plane = plane_plan(src_geom, dst_aligned)
    if plane is not None:
        return plane_launch(src_geom, plane, has_bias, vec, flip=transposed)
    tail = _common_args(geom, src_strides)
    t = tile_plan(geom, transposed)
    if t is None:
        fn = jit.get_function(depthwise_gather_module(geom.dtype), "depthwise_gather", geom.dtype,
                              (int(transposed),))
        grid, block = launch_grid(geom.batch * chans * math.prod(
            geom.spatial if transposed else geom.out_spatial))
        return Launch(fn, grid, block, ints((has_bias, geom.channels_last, geom.batch, chans, mult))
                      + tail, packed=True)
    kf = fixed_kernel(geom, DEPTHWISE_KF[1:])
    fn = jit.get_function(depthwise_tile_module(geom.dtype, int(transposed)), "depthwise_tile",
                          geom.dtype, (int(transposed), kf))
    planes = geom.batch * chans * geom.as_3d()["spatial" if transposed else "out_spatial"][0]
    return Launch(fn, (math.ceil(planes / t.bz), t.tiles), (t.bx, t.by, t.bz),
                  ints((has_bias, chans, mult, planes)) + tail
                  + ints((t.vr, t.tiles_w, t.rows_max, t.pitch, vec)), t.smem, packed=True)


def run_pass(geom: ConvGeometry, src, w, bias, dst, transposed: bool) -> None:
    """The forward (or, ``transposed``, backward-data) pass: dst from src; dst C-contiguous.  The
    caller holds the arrays' device."""
    strides = _strides(src, geom)
    launch = _pass_launch(geom, transposed, bias is not None, strides,
                          not geom.channels_last and vector_rows(src, strides),
                          src.data.ptr % 16 == 0, dst.data.ptr % 16 == 0,
                          cl.vector_width(geom, ((src, strides), (dst, _strides(dst, geom)))),
                          dst.data.device_id)
    # (K, taps) in memory for both layouts (one channel per group)
    launch(src, contiguous(w), bias if bias is not None else dst, dst)


def run_depthwise(geom: ConvGeometry, x, w, bias, y, *, z=None, act: int = NO_ACTIVATION) -> None:
    """y = act(depthwise conv(x, w) + bias + z); y and z (optional) C-contiguous.  The kernels
    add the bias; the residual and the activation code ``act`` go in one pass after them
    (:mod:`cupyconv._core.epilogue`: the fused epilogue of the GEMM kernels is not in these)."""
    with y.device:
        run_pass(geom, x, w, bias, y, False)
        run_epilogue_pass(y, z, act)


@memoized(1024)
def stage_channels_last(geom: ConvGeometry) -> bool:
    """Whether channels-first backward-data runs on the channels-last kernel through copies (dy
    into a channels-last scratch, the kernel into a channels-last scratch dx, that copied into
    dx) instead of the channels-first tile kernel: depthwise problems without a channel
    multiplier (the channels-last kernel takes none) whose stride in H or W exceeds 1, where the
    channels-last plan fits.  Measured on an H100, batch 32
    (benchmarks/results/depthwise-nets-NVIDIA_H100_80GB_HBM3-3094ad1.md): the transposed tile
    kernel runs such layers at 1-5 % of the copy rate (fp32 3x3 s2 96ch 112^2 1.47 ms, PyTorch
    0.60 ms; 5x5 s2 144ch 56^2 1.31 ms; fp16 the same) where the channels-last kernel takes them
    in 0.096 ms and 0.055 ms; with the two copies (dy is the small side) about 0.24 ms is
    expected for the first (not yet measured).  At unit stride the tile kernel reaches 61-64 % of
    the copy rate (3x3 s1 32ch 112^2, 144ch 56^2) and stays.  Every dtype and spatial rank the
    channels-last kernel has (it walks D as it walks H)."""
    if (geom.channels_last or geom.dtype not in DEPTHWISE_CL_VECS or not is_depthwise(geom)
            or geom.out_channels != geom.in_channels
            or geom.as_3d()["stride"][1:] == (1, 1)):
        return False
    geom_cl = dataclasses.replace(geom, layout="NHWC")
    plan = cl.pass_plan(geom_cl, True, cl.packed_vector_width(geom_cl))
    return plan is not None and cl.pass_shape(
        geom_cl, plan, True, False, cl.packed_strides(geom_cl, geom.out_spatial)) is not None


def _channels_first(a):
    """The channels-first view (N, C, *spatial) of a channels-last array (N, *spatial, C)."""
    return a.transpose(0, a.ndim - 1, *range(1, a.ndim - 1))


def _backward_data_channels_last(geom: ConvGeometry, dy, w, dx) -> None:
    """Channels-first backward-data on the channels-last kernel (see stage_channels_last): dy
    (any view) copied into a channels-last scratch, the pass into a channels-last scratch dx,
    copied into dx.  The copies are copy_into's (the tiled transpose where C and the pixels
    allow; recorded launches, so prepared calls replay them); w is (K, taps) in memory in both
    layouts, so it is passed as it is."""
    geom_cl = dataclasses.replace(geom, layout="NHWC")
    dy_cl = scratch(geom_cl.output_shape, dy.dtype)
    copy_into(dy, _channels_first(dy_cl))
    dx_cl = scratch(geom_cl.input_shape, dx.dtype)
    run_pass(geom_cl, dy_cl, w, None, dx_cl, True)
    copy_into(_channels_first(dx_cl), dx)


def run_depthwise_backward_data(geom: ConvGeometry, dy, w, dx, bias=None) -> bool:
    """dx = gradient of the depthwise conv with respect to its input; dx C-contiguous.  Each dx
    element gathers from every (channel multiple, tap) that reads it, in a fixed order (strided
    channels-first problems through the channels-last kernel: :func:`stage_channels_last`).  A
    ``bias`` is not added here (returns False: the caller adds it)."""
    with dx.device:
        if stage_channels_last(geom) and band_choice(geom, True, _strides(dy, geom)) is None:
            _backward_data_channels_last(geom, dy, w, dx)
        else:
            run_pass(geom, dy, w, None, dx, True)
    return False


def _chunk_reduce(geom: ConvGeometry, chunks: int) -> Launch:
    """Sum the backward-weight partial sums (chunks, K, taps) over the chunks into dw (K, taps),
    in an order fixed by the plan (chunk_sum.cu): blocks of 32 filter taps, the chunks split into
    up to CHUNK_SUM_SEGMENTS segments summed side by side."""
    count = geom.out_channels * math.prod(geom.kernel)
    fn = jit.get_function(CHUNK_SUM, "chunk_sum", geom.dtype)
    segments = max(1, min(CHUNK_SUM_SEGMENTS, chunks // CHUNK_SUM_MIN_PER_SEGMENT))
    return Launch(fn, (math.ceil(count / 32),), (32, segments), ints((chunks, count)))


@memoized(2048)
def _cl_wgrad_launches(geom: ConvGeometry, x_strides: tuple, dy_strides: tuple, vec: int,
                       device: int) -> tuple[Launch, Launch, int] | None:
    """(partial-sum launch, chunk-reduce launch, workspace elements) of backward-weight on the
    channels-last kernel at ``vec`` channels per thread, or None where its plan does not fit."""
    wp = cl.wgrad_plan(geom, vec, sm_count(device))
    if wp is None:
        return None
    return (cl.wgrad_launch(geom, wp, x_strides, dy_strides), _chunk_reduce(geom, wp.chunks),
            wp.chunks * geom.out_channels * math.prod(geom.kernel))


@memoized(2048)
def _wgrad_launches(geom: ConvGeometry, x_strides: tuple, dy_strides: tuple, vec: bool,
                    plane: bool, device: int) -> tuple[Launch, Launch, int]:
    """(partial-sum launch, chunk-reduce launch, workspace elements) of backward-weight, on the
    plane kernel if ``plane``; the plane and tile kernels take dy contiguous (its strides are not
    used)."""
    t, chunks, per_chunk = wgrad_plan(geom)
    k, taps = geom.out_channels, math.prod(geom.kernel)
    mult = k // geom.in_channels
    if plane:  # (the caller checked that x's planes are contiguous)
        plan, chunks = plane_wgrad_plan(geom)
        main = plane_wgrad_launch(geom, plan, chunks, vec)
    elif t is not None:
        kf = fixed_kernel(geom, DEPTHWISE_WGRAD_KF[1:])
        fn = jit.get_function(depthwise_wgrad_module(geom.dtype), "depthwise_wgrad_tile",
                              geom.dtype, (kf,))
        planes = geom.batch * geom.as_3d()["out_spatial"][0]
        main = Launch(fn, (k, chunks), (t.bx, t.by, t.bz),
                      ints((k, mult, planes, per_chunk)) + _common_args(geom, x_strides)
                      + ints((t.vr, t.tiles_w, t.tiles, t.rows_max, t.pitch, vec)), t.smem,
                      packed=True)
    else:
        fn = jit.get_function(DEPTHWISE_WGRAD_GATHER, "depthwise_wgrad_gather", geom.dtype)
        grid, block = launch_grid(chunks * k)
        main = Launch(fn, grid, block, ints((chunks, per_chunk, geom.batch, k, mult))
                      + _common_args(geom, x_strides) + int64s(dy_strides), packed=True)
    return main, _chunk_reduce(geom, chunks), chunks * k * taps


def run_depthwise_backward_weight(geom: ConvGeometry, x, dy, dw) -> None:
    """dw = gradient of the depthwise conv with respect to its weight; dw C-contiguous.  Partial
    sums per chunk of the batch, then one fixed-order reduction: bitwise reproducible."""
    xs = _strides(x, geom)
    if geom.channels_last:
        dys = _strides(dy, geom)
        vec = cl.vector_width(geom, ((x, xs), (dy, dys)), wgrad=True)
        launches = vec and _cl_wgrad_launches(geom, xs, dys, vec, dw.data.device_id)
        if launches:
            main, reduce, count = launches
            with dw.device:
                partial = scratch(count, compute_dtype(geom.dtype))
                main(x, dy, partial)
                reduce(partial, dw)
            return
    plane = plane_wgrad_plan(geom) is not None and contiguous_planes(geom, xs)
    tiled = plane or wgrad_plan(geom)[0] is not None
    main, reduce, count = _wgrad_launches(geom, xs, () if tiled else _strides(dy, geom),
                                          tiled and vector_rows(x, xs), plane, dw.data.device_id)
    with dw.device:
        if tiled:  # the plane and tile kernels read dy contiguous
            dy = contiguous(dy)
        partial = scratch(count, compute_dtype(geom.dtype))
        main(x, dy, partial)
        reduce(partial, dw)
