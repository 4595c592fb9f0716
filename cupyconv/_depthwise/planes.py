"""Plans and launches of the channels-first plane kernels
(``kernel_src/depthwise/depthwise_plane.cu``: the row walk of the signal API's image filter).

They run the forward pass of contiguous channels-first planes at unit stride and dilation, and of
square PLANE_STRIDE2_KF filters at stride 2 (:func:`plane_plan`); backward-data at unit stride and
dilation without a channel multiplier, as the forward pass of its :func:`backward_data_twin` (the
filter rotated by 180 degrees); and the backward-weight of PLANE_WGRAD_KF filters
(:func:`plane_wgrad_plan`).  Which passes take them is the launchers' choice
(:mod:`cupyconv._depthwise.launch`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (DEPTHWISE_PLANE, DEPTHWISE_PLANE_WGRAD, KERNEL_CONSTANTS,
                                    PLANE_SQUARES, PLANE_STRIDE2_KF, PLANE_WGRAD_KF, KernelModule,
                                    depthwise_plane_stride2_module, plane_rows_per_thread,
                                    plane_width)
from cupyconv._core.launch import GRID_YZ_MAX, Launch, ints
from cupyconv._depthwise.applicable import is_depthwise
from cupyconv._depthwise.tiles import acc_bytes


STRIP = KERNEL_CONSTANTS["FP_TW"]        # plane kernel: columns per strip


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


# Work split defaults from benchmarks/experiments/README.md: sweep_depthwise_plane.py (H100, 3x3, batch 32, ms per
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
    acc_size = acc_bytes(geom.dtype)  # taps, biases and buffers are in the compute type
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
    smem = plan.kf ** 2 * (threads + 32) * acc_bytes(geom.dtype)  # KF x KF per thread, 32 per tap
    return Launch(fn, (geom.out_channels, chunks), (threads,),
                  ints((geom.out_channels, geom.out_channels // geom.in_channels, geom.batch)
                       + g3["spatial"][1:] + g3["out_spatial"][1:] + g3["pad_lo"][1:]
                       + (plan.qw, plan.gw, plan.strips, plan.cpp, plan.ipb, plan.d, vec_in)),
                  smem, packed=True)
