"""Depthwise convolution (groups == input channels): forward, backward-data, backward-weight.

Launchers for ``kernel_src/depthwise.cu`` and ``depthwise_plane.cu``.  The forward pass (and the
3x3 backward-weight) of contiguous channels-first problems with unit stride and dilation, and
those of square 3x3, 5x5, 7x7 filters at stride 2 (backward-weight: 3x3 and 5x5), run on the plane
kernels (the row walk of the signal API's image filter), except narrow planes at unit stride and
backward-data at stride 2, which run on the band kernel (:mod:`cupyconv._depthwise.bands`:
:func:`band_choice`); other channels-first problems run on the tile kernels when their window
fits in shared memory.  Channels-last problems without a channel multiplier whose activations
have unit channel stride run on the channels-last kernels
(:mod:`cupyconv._depthwise.channels_last`), and so does channels-first backward-data with a
stride in H or W that the band kernel does not take, through channels-last copies
(:func:`stage_channels_last`).  Everything else
runs on the gather kernels (one thread per output element, coalesced across channels for
channels-last).  Shapes, strides, paddings and dilations are runtime arguments: one binary per
(dtype, kernel family) serves every problem.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import contiguous, copy_into
from cupyconv._core.dtypes import compute_dtype, itemsize
from cupyconv._core.epilogue import run_epilogue_pass
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (CHUNK_SUM, DEPTHWISE_CL_VECS, DEPTHWISE_KF, DEPTHWISE_PLANE,
                                    DEPTHWISE_PLANE_WGRAD, DEPTHWISE_WGRAD_GATHER,
                                    DEPTHWISE_WGRAD_KF, KERNEL_CONSTANTS, PLANE_SQUARES,
                                    PLANE_STRIDE2_KF, PLANE_WGRAD_KF,
                                    KernelModule, depthwise_gather_module,
                                    depthwise_plane_stride2_module, depthwise_tile_module,
                                    depthwise_wgrad_module, plane_rows_per_thread, plane_width)
from cupyconv._core.launch import (GRID_YZ_MAX, Launch, element_strides, int64s, ints, launch_grid,
                                   sm_count, spatial_args)
from cupyconv._core.program import scratch
from cupyconv._depthwise import bands
from cupyconv._depthwise import channels_last as cl

# Dynamic shared memory per block: the 48 KB a launch gets without opting in, less room for the
# kernels' static arrays (zoff: at most 512 B).  A block at exactly 48 KB of windows failed to
# launch (CUDA_ERROR_INVALID_VALUE) on the GPU.
SMEM_LIMIT = 48 * 1024 - 1024
THREADS = KERNEL_CONSTANTS["DW_THREADS"]
DW_ROWS = KERNEL_CONSTANTS["DW_ROWS"]    # most output rows per thread
DW_TAPS = KERNEL_CONSTANTS["DW_TAPS"]    # taps per backward-weight pass
MAX_Z = KERNEL_CONSTANTS["DW_MAX_Z"]     # most planes per block
STRIP = KERNEL_CONSTANTS["FP_TW"]        # plane kernel: columns per strip
# Backward-weight's chunk sum: at most CHUNK_SUM_SEGMENTS segments of the chunks, each of at
# least CHUNK_SUM_MIN_PER_SEGMENT chunks (a segment's four partial sums keep four loads in flight).
CHUNK_SUM_SEGMENTS = KERNEL_CONSTANTS["CHUNK_SUM_SEGMENTS"]
CHUNK_SUM_MIN_PER_SEGMENT = 4
_TARGET_BLOCKS = 4 * 132  # backward-weight: enough blocks to fill an H100/H200 a few times over


def is_depthwise(geom: ConvGeometry) -> bool:
    """One input channel per group (a single-channel input counts: its K outputs are a channel
    multiplier of K)."""
    return geom.groups == geom.in_channels


def _acc_bytes(dtype: str) -> int:
    """Bytes per element of the compute type (float32 for the 2-byte storage types)."""
    return itemsize(compute_dtype(dtype))


@dataclass(frozen=True)
class Tiling:
    """Block shape of a channels-first tile kernel: BX x BY x BZ threads; per plane a BX-wide,
    BY * vr-tall destination tile; the staged window is at most rows_max x pitch per plane."""

    bx: int
    by: int
    bz: int
    vr: int
    tiles_h: int
    tiles_w: int
    rows_max: int
    pitch: int
    smem: int
    cw: int = 1  # columns per thread (4 for the 3x3 variant)

    @property
    def tiles(self) -> int:
        return self.tiles_h * self.tiles_w

    @property
    def tile_w(self) -> int:
        return self.bx * self.cw


def _window(span: int, k: int, s: int, d: int, transposed: bool) -> int:
    """Most source rows a destination span of ``span`` rows reads (see tile_extent in the kernel)."""
    if transposed:
        return (span - 1 + (k - 1) * d) // s + 2
    return (span - 1) * s + (k - 1) * d + 1


def _tiling(dst_h, dst_w, planes, kh, kw, sh, sw, dh, dw_, dtype, transposed=False,
            extra_per_thread=0, cw=1) -> Tiling | None:
    """Tile shape for a (dst_h x dst_w) destination plane, or None if no block fits in shared
    memory.  Width: at most 32 threads of ``cw`` columns, splitting W evenly (no mostly-idle edge
    tiles); height: up to DW_ROWS rows per thread; small planes put several planes (BZ) in one
    block."""
    bx = math.ceil(math.ceil(dst_w / math.ceil(dst_w / (32 * cw))) / cw)
    by_max = THREADS // bx
    rows_per_tile = math.ceil(dst_h / math.ceil(dst_h / (by_max * DW_ROWS)))
    by = math.ceil(rows_per_tile / min(DW_ROWS, rows_per_tile))
    vr = math.ceil(rows_per_tile / by)
    rows_max = _window(by * vr, kh, sh, dh, transposed)
    # room for the vector staging's shift of up to 3 columns, rows 4-aligned (stage.cuh)
    pitch = 4 * math.ceil((_window(bx * cw, kw, sw, dw_, transposed) + 3) / 4)
    per_plane = rows_max * pitch * _acc_bytes(dtype)
    bz = max(1, min(THREADS // (bx * by), MAX_Z, planes, SMEM_LIMIT // max(per_plane, 1)))
    smem = bz * per_plane + 4 * math.ceil(bx * by * bz / 4) * extra_per_thread  # red: 4-aligned
    if smem > SMEM_LIMIT:
        return None
    return Tiling(bx, by, bz, vr, math.ceil(dst_h / (by * vr)), math.ceil(dst_w / (bx * cw)),
                  rows_max, pitch, smem, cw)


@memoized(1024)
def tile_plan(geom: ConvGeometry, transposed: bool) -> Tiling | None:
    """Tiling of the forward (or, ``transposed``, backward-data) tile kernel; None: use gather."""
    if geom.channels_last:
        return None
    g3 = geom.as_3d()
    dst = g3["spatial"] if transposed else g3["out_spatial"]
    chans = geom.in_channels if transposed else geom.out_channels
    planes = geom.batch * chans * dst[0]
    cw = 4 if fixed_kernel(geom, DEPTHWISE_KF[1:]) == 3 else 1  # the kernel's CW
    t = _tiling(dst[1], dst[2], planes, *g3["kernel"][1:], *g3["stride"][1:], *g3["dilation"][1:],
                geom.dtype, transposed, cw=cw)
    if t is None or t.tiles > GRID_YZ_MAX or planes >= 2 ** 31:
        return None
    return t


def fixed_kernel(geom: ConvGeometry, sizes) -> int:
    """The tile kernels' fixed-size variant for ``geom``: KF when H x W taps are KF x KF (KF in
    ``sizes``) with unit stride and dilation in H and W, else 0 (the any-shape variant)."""
    g3 = geom.as_3d()
    _, kh, kw = g3["kernel"]
    if kh == kw and kh in sizes and g3["stride"][1:] == (1, 1) and g3["dilation"][1:] == (1, 1):
        return kh
    return 0


def depthwise_applicable(geom: ConvGeometry) -> bool:
    """The depthwise kernels run every depthwise problem (the gather kernels have no limits)."""
    return is_depthwise(geom)


@dataclass(frozen=True)
class PlanePlan:
    """Work split of the plane kernel (depthwise_plane.cu): items of RY rows x a strip of 4 * qw
    columns, numbered plane by plane (cpp per plane, strips per row); gw lane groups per warp; a
    block of `warps` warps takes ipb consecutive items (`rounds` per group) and stages the taps of
    the at most sp planes they touch; strip columns start at s * 4 * qw - d.  ``stride``: 1, or 2
    in H and W (square kf filters), where a lane's input window starts ``e`` columns before its
    first input column (the kernel's E)."""

    kwb: int
    kf: int
    qw: int
    gw: int
    strips: int
    cpp: int
    warps: int
    rounds: int
    d: int
    vec_out: bool
    itemsize: int  # of the compute type (float32 for float16 and bfloat16)
    kh: int
    ry: int  # output rows per item: the kernel's DP_ROWS
    stride: int = 1
    e: int = 0

    @property
    def ipb(self) -> int:
        return self.rounds * self.warps * self.gw

    @property
    def sp(self) -> int:
        return math.ceil(self.ipb / self.cpp) + 1

    @property
    def smem(self) -> int:
        """Dynamic shared bytes: taps, biases (padded to 4) and, without vec_out, the buffers."""
        return (self.sp * self.kh * self.kwb + 4 * math.ceil(self.sp / 4)
                + (0 if self.vec_out else self.warps * self.ry * STRIP)) * self.itemsize

    def blocks(self, planes: int) -> int:
        return math.ceil(planes * self.cpp / self.ipb)

    def kernel(self, dtype: str, wgrad: bool = False) -> tuple[KernelModule, tuple[int, ...]]:
        """(module, template variant) of this plan's forward (or backward-weight) kernel."""
        if self.stride == 2:
            return depthwise_plane_stride2_module(dtype, self.kf, wgrad), (self.e,)
        if wgrad:
            return DEPTHWISE_PLANE_WGRAD[dtype], (self.kwb, self.kf, 1, 0)
        return DEPTHWISE_PLANE[dtype], (self.kwb, self.kf, 1, 0)


# Work split defaults from benchmarks/sweep_depthwise_plane.py (H100, 3x3, batch 32, ms per
# launch): float32 (144, 56^2) 4 warps x 2 rounds 0.0602 against 8 x 1 0.0642 and 4 x 1 0.0629;
# float64 4 x 4 0.1196 against 8 x 1 0.1441; (960, 7^2) and (32, 112^2) within 3 % of their best.
# Fewer rounds where the grid would be small (fewer blocks than a few waves of resident ones).
PLANE_WARPS = 4
PLANE_ROUNDS = {4: 2, 8: 4}  # by itemsize
PLANE_MIN_BLOCKS = 1024


@memoized(2048)
def plane_plan(geom: ConvGeometry, vec_out: bool = True, warps: int = PLANE_WARPS,
               rounds: int | None = None, ry: int | None = None) -> PlanePlan | None:
    """The plane kernel's split for ``geom``'s forward pass, or None where it does not apply:
    channels-last, a depth extent, dilation in H or W, a stride other than 1 or (2, 2) (2: only
    square PLANE_STRIDE2_KF filters), or filters wider than the largest width bucket.
    ``vec_out``: the output base is 16-byte aligned (with d == 0 and OW % 4 == 0 the kernel
    stores quads directly, else through a shared buffer).  ``warps`` and
    ``rounds`` (default: PLANE_ROUNDS, fewer on small grids) and ``ry`` (rows per item, with a
    kernel built for it) are there for sweeps."""
    if geom.channels_last or geom.dtype not in DEPTHWISE_PLANE or not is_depthwise(geom):
        return None
    g3 = geom.as_3d()
    if (g3["spatial"][0] != 1 or g3["kernel"][0] != 1 or g3["out_spatial"][0] != 1
            or g3["stride"][1:] not in ((1, 1), (2, 2)) or g3["dilation"][1:] != (1, 1)):
        return None
    kh, kw = g3["kernel"][1:]
    stride = g3["stride"][1]
    kwb = plane_width(kw)
    if kwb is None or (stride == 2 and not (kh == kw and kh in PLANE_STRIDE2_KF)):
        return None
    oh, ow = g3["out_spatial"][1:]
    acc_size = _acc_bytes(geom.dtype)  # taps, biases and buffers are in the compute type
    pw = g3["pad_lo"][2]
    # stride 1: strips start d columns early so that lane windows start on a multiple of 4;
    # stride 2: the window starts e = -PW mod 4 columns early instead (e + kw <= kwb + 2 holds
    # for every square bucket), and strips stay aligned for vector stores.
    d, e = (-pw % 4, 0) if stride == 1 else (0, -pw % 4)
    strips = math.ceil((ow + d) / 128)
    qw = math.ceil(math.ceil((ow + d) / strips) / 4)
    gw = 32 // qw
    ry = ry or plane_rows_per_thread(acc_size)
    cpp = strips * math.ceil(oh / ry)
    items = geom.batch * geom.out_channels * cpp
    if items >= 2 ** 31:
        return None
    if rounds is None:
        rounds = PLANE_ROUNDS[acc_size]
        while rounds > 1 and items < PLANE_MIN_BLOCKS * rounds * warps * gw:
            rounds //= 2
    kf = kh if kh == kw and kh in PLANE_SQUARES else 0
    return PlanePlan(kwb, kf, qw, gw, strips, cpp, warps, rounds, d,
                     vec_out and d == 0 and ow % 4 == 0, acc_size, kh, ry, stride, e)


def contiguous_planes(geom: ConvGeometry, strides: tuple[int, ...], output: bool = False) -> bool:
    """``strides`` (element_strides of a channels-first activation: the input, or with ``output``
    the output) lay the (H, W) planes out C-contiguously, one after the other (strides of unit
    extents do not matter)."""
    _, h, w = geom.as_3d()["out_spatial" if output else "spatial"]
    chans = geom.out_channels if output else geom.in_channels
    lead, chan, _, sh, sw = strides
    return ((sw == 1 or w == 1) and (sh == w or h == 1) and (chan == h * w or chans == 1)
            and (lead == chans * h * w or geom.batch == 1))


def _common_args(geom: ConvGeometry, strides) -> list:
    return spatial_args(geom) + int64s(strides)


def _strides(a, geom: ConvGeometry) -> tuple[int, ...]:
    return element_strides(a, geom.channels_last)


def vector_rows(a, strides: tuple[int, ...]) -> bool:
    """Can the tile kernels stage ``a``'s rows 4 elements at a time: contiguous rows whose width,
    every other stride and the base address are multiples of 4 elements (stage_rows4)."""
    *outer, unit = strides[:1] + strides[2:]  # lead, d, h strides; w stride
    width = a.shape[-1]
    return (unit == 1 and width % 4 == 0 and strides[1] % 4 == 0
            and all(v % 4 == 0 for v in outer) and a.data.ptr % (4 * a.itemsize) == 0)


def plane_launch(geom: ConvGeometry, plane: PlanePlan, has_bias: bool, vec_in: bool,
                 flip: bool = False) -> Launch:
    """The plane kernel's forward launch under ``plane``; ``vec_in``: x's rows are 16-byte aligned
    with a multiple of 4 columns (``vector_rows``); ``flip``: correlate with the filter rotated by
    180 degrees (backward-data through :func:`backward_data_twin`)."""
    g3 = geom.as_3d()
    module, variant = plane.kernel(geom.dtype)
    fn = jit.get_function(module, "depthwise_plane", geom.dtype, variant)
    planes = geom.batch * geom.out_channels
    return Launch(fn, (plane.blocks(planes),), (32 * plane.warps,),
                  ints((has_bias, geom.out_channels, geom.out_channels // geom.in_channels, planes)
                       + g3["spatial"][1:] + g3["out_spatial"][1:] + g3["kernel"][1:]
                       + g3["pad_lo"][1:] + (plane.qw, plane.gw, plane.strips, plane.cpp,
                                             plane.ipb, plane.sp, plane.d, vec_in, plane.vec_out,
                                             flip)),
                  plane.smem, packed=True)


def backward_data_twin(geom: ConvGeometry) -> ConvGeometry | None:
    """The forward problem whose output is ``geom``'s backward-data: at unit stride and dilation
    without a channel multiplier, dx is dy correlated with the filter rotated by 180 degrees,
    padded K - 1 - pad on each side (the plane kernel's ``flip``).  None where that does not hold
    (a stride, a dilation, a multiplier: a dx plane gathers several dy planes), for channels-last
    problems, and for pads beyond K - 1 (a negative twin pad)."""
    if (geom.channels_last or geom.out_channels != geom.in_channels
            or any(s != 1 for s in geom.stride) or any(d != 1 for d in geom.dilation)):
        return None
    pads = tuple((k - 1 - lo, k - 1 - hi)
                 for k, lo, hi in zip(geom.kernel, geom.pad_lo, geom.pad_hi))
    if min(min(p) for p in pads) < 0:
        return None
    return ConvGeometry.from_shapes(geom.output_shape, geom.weight_shape, padding=pads,
                                    groups=geom.groups, layout=geom.layout, dtype=geom.dtype)


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


@memoized(1024)
def wgrad_plan(geom: ConvGeometry) -> tuple[Tiling | None, int, int]:
    """(tiling or None for the gather kernel, chunks, planes or pixels per chunk)."""
    g3 = geom.as_3d()
    k = geom.out_channels
    od, oh, ow = g3["out_spatial"]
    kd, kh, kw = g3["kernel"]
    t = None
    if not geom.channels_last and kw <= DW_TAPS:
        planes = geom.batch * od
        # kernel rows per pass (the fixed-size variant takes all of them in one pass)
        per_pass = kh if fixed_kernel(geom, DEPTHWISE_WGRAD_KF[1:]) else min(kh, max(1, DW_TAPS // kw))
        cw = 4 if fixed_kernel(geom, DEPTHWISE_WGRAD_KF[1:]) == 3 else 1  # the kernel's CW
        t = _tiling(oh, ow, planes, per_pass, kw, *g3["stride"][1:], *g3["dilation"][1:],
                    geom.dtype, extra_per_thread=_acc_bytes(geom.dtype), cw=cw)
        if t is not None:
            chunks = max(1, min(planes, math.ceil(_TARGET_BLOCKS / k)))
            per_chunk = math.ceil(planes / chunks)
            chunks = math.ceil(planes / per_chunk)
            if chunks <= GRID_YZ_MAX:
                # no more planes per block than a chunk holds; shared memory shrinks with them
                bz = min(t.bz, per_chunk)
                t = Tiling(t.bx, t.by, bz, t.vr, t.tiles_h, t.tiles_w, t.rows_max, t.pitch,
                           bz * t.rows_max * t.pitch * _acc_bytes(geom.dtype)
                           + 4 * math.ceil(t.bx * t.by * bz / 4) * _acc_bytes(geom.dtype), t.cw)
                return t, chunks, per_chunk
    pixels = geom.batch * od * oh * ow
    threads_wanted = 64 * 1024
    chunks = max(1, min(pixels, math.ceil(threads_wanted / k)))
    per_chunk = math.ceil(pixels / chunks)
    return None, math.ceil(pixels / per_chunk), per_chunk


# Backward-weight on the plane kernel: rounds per block from the sweep (H100, 3x3, (144, 56^2)
# batch 32), fewer where the (K, chunks) grid would be small.
PLANE_WGRAD_ROUNDS = 4


@memoized(1024)
def plane_wgrad_plan(geom: ConvGeometry, rounds: int | None = None):
    """(plan, chunks) of the plane backward-weight kernel (3x3 and 5x5 filters, PLANE_WGRAD_KF),
    or None: then the tile or gather kernel.  Block (k, chunk) takes plan.ipb of channel k's
    batch * plan.cpp items."""
    plan = plane_plan(geom)
    if plan is None or plan.kf not in PLANE_WGRAD_KF[plan.stride]:
        return None
    items = geom.batch * plan.cpp
    if rounds is None:
        rounds = PLANE_WGRAD_ROUNDS
        groups = plan.warps * plan.gw
        while rounds > 1 and geom.out_channels * items < PLANE_MIN_BLOCKS * rounds * groups:
            rounds //= 2
    plan = dataclasses.replace(plan, rounds=rounds)
    chunks = math.ceil(items / plan.ipb)
    return (plan, chunks) if chunks <= GRID_YZ_MAX else None


def plane_wgrad_launch(geom: ConvGeometry, plan: PlanePlan, chunks: int, vec_in: bool) -> Launch:
    """The plane backward-weight launch (partial sums per chunk) under ``plan``."""
    g3 = geom.as_3d()
    module, variant = plan.kernel(geom.dtype, wgrad=True)
    fn = jit.get_function(module, "depthwise_plane_wgrad", geom.dtype, variant)
    threads = 32 * plan.warps
    smem = plan.kf ** 2 * (threads + 32) * _acc_bytes(geom.dtype)  # KF x KF per thread, 32 per tap
    return Launch(fn, (geom.out_channels, chunks), (threads,),
                  ints((geom.out_channels, geom.out_channels // geom.in_channels, geom.batch)
                       + g3["spatial"][1:] + g3["out_spatial"][1:] + g3["pad_lo"][1:]
                       + (plan.qw, plan.gw, plan.strips, plan.cpp, plan.ipb, plan.d, vec_in)),
                  smem, packed=True)


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
