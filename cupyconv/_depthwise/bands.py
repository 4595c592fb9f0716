"""Plans and launches of the channels-first band kernel (``kernel_src/depthwise/depthwise_bands.cu``).

A block stages the source rows of a band of destination rows (of one plane, or of several whole
planes) in shared memory, zero padded, computes the band there and writes it out as one flat run:
every access to global memory is contiguous whatever the plane width.  It runs the forward pass
(stride 1 or 2 in H and W) and backward-data (unit stride or 2, no channel multiplier) of
depthwise problems with filters of at most 7 x 7 taps and unit dilation, on planes that are
C-contiguous (:func:`band_plan`).  Which problems take it rather than the plane row walk or the
channels-last detour of strided backward-data is :func:`prefer_bands`: narrow planes at unit
stride, and backward-data at stride 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.copy import magic_divisor
from cupyconv._core.dtypes import compute_dtype, itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (DEPTHWISE_BANDS_KF, DTYPES, KERNEL_CONSTANTS,
                                    depthwise_bands_module)
from cupyconv._core.launch import Launch, int64s

THREADS = KERNEL_CONSTANTS["DWB_THREADS"]
RX = KERNEL_CONSTANTS["DWB_RX"]  # destination columns per item
# Shared memory a block may take (the 48 KB a launch gets without opting in, less a margin), and
# the share of it a plan aims at: six blocks (DWB_MIN_BLOCKS) resident per SM.  Measured on an H100
# (benchmarks/experiments/README.md: exp_depthwise_bands.py, MobileNetV2 + EfficientNet-B0 depthwise layers, batch 32):
# 36 KB at 6 blocks, against 40 KB at 4, 27 or 16 KB at 8, 24 KB at 4: backward-data geomean
# over PyTorch 3.03x against 2.85, 3.03, 2.51, 2.44 (fp32); larger targets keep whole 56^2 planes
# in one block (no halo rows staged twice).
SMEM_LIMIT = 48 * 1024 - 1024
SMEM_TARGET = 36 * 1024
# Items (RX destination columns of one row) per thread a block aims at (2: up to 15 % slower).
ITEMS_PER_THREAD = 4


@dataclass(frozen=True)
class BandPlan:
    """Split of a band launch.  ``cs``: the compute stride (the forward stride; 1 for
    backward-data); ``up``: backward-data's stride (2: computed by phases, items starting
    ``lead`` columns before column 0); a block takes ``band_rows`` destination rows of
    ``planes_per_block`` planes (one plane when ``bands`` > 1); the staged plane is ``srows`` x
    ``pitch`` cells, the output buffer rows ``opitch`` wide; ``segs`` items per destination
    row."""

    kf: int
    cs: int
    up: int
    lead: int
    planes_per_block: int
    band_rows: int
    bands: int
    pitch: int
    srows: int
    segs: int
    opitch: int
    itemsize: int  # of the compute type

    @property
    def smem(self) -> int:
        return _smem_cells(self.planes_per_block, self.band_rows, self.pitch, self.srows,
                           self.opitch, self.kf) * self.itemsize

    @property
    def item_rows(self) -> int:
        """Items per segment of a band: its rows, or by phases its pairs of rows."""
        return self.band_rows if self.up == 1 else _row_pairs(self.band_rows)

    def blocks(self, planes: int) -> int:
        return math.ceil(planes / self.planes_per_block) * self.bands


def _smem_cells(planes: int, band_rows: int, pitch: int, srows: int, opitch: int, kf: int) -> int:
    return planes * (srows * pitch + band_rows * opitch + kf * kf + 1)


def _row_pairs(rows: int) -> int:
    """Row pairs that cover a band of ``rows`` rows starting 0 or 1 row before it (by phases)."""
    return rows // 2 + 1


def _odd(n: int) -> int:
    """n, or n + 1 if even: a row pitch of an odd number of cells puts the rows a warp reads
    together in distinct shared-memory banks."""
    return n | 1


def _shape(geom: ConvGeometry, transposed: bool):
    """(kf, stride, source (H, W), destination (H, W)) of a problem the band kernel takes, or
    None."""
    if geom.channels_last or geom.groups != geom.in_channels or geom.dtype not in DTYPES:
        return None
    g3 = geom.as_3d()
    if (g3["spatial"][0] != 1 or g3["kernel"][0] != 1 or g3["dilation"][1:] != (1, 1)):
        return None
    stride = g3["stride"][1:]
    if stride not in ((1, 1), (2, 2)):
        return None
    if transposed and geom.out_channels != geom.in_channels:
        return None  # a dx plane would gather several dy planes
    kf = next((k for k in DEPTHWISE_BANDS_KF if k >= max(g3["kernel"][1:])), None)
    if kf is None:
        return None
    src, dst = g3["spatial"][1:], g3["out_spatial"][1:]
    if transposed:
        src, dst = dst, src
    return kf, stride[0], src, dst


def _phase_offsets(geom: ConvGeometry) -> tuple[int, int]:
    """(offH, offW) = K - 1 - P in H and W: where backward-data's rotated taps start."""
    g3 = geom.as_3d()
    return tuple(k - 1 - p for k, p in zip(g3["kernel"][1:], g3["pad_lo"][1:]))


@memoized(2048)
def band_plan(geom: ConvGeometry, transposed: bool, items_per_thread: int = ITEMS_PER_THREAD,
              smem_target: int = SMEM_TARGET) -> BandPlan | None:
    """The band kernel's split for ``geom``'s forward pass (or, ``transposed``, backward-data), or
    None where the kernel does not take it (channels-last, a depth extent, dilation, a stride
    other than 1 or (2, 2), a filter wider than 7, a channel multiplier in backward-data, a
    plane of 2^31 elements or more, a band of one row that does not fit in shared memory).
    ``items_per_thread`` and ``smem_target`` are there for sweeps."""
    shape = _shape(geom, transposed)
    if shape is None:
        return None
    kf, stride, (sh, sw), (dh, dw) = shape
    if max(sh * sw, dh * dw) >= 2 ** 31:  # the kernel indexes within a plane in 32 bits
        return None
    cs, up = (1, stride) if transposed else (stride, 1)
    acc = itemsize(compute_dtype(geom.dtype))
    if up == 1:
        lead = 0
        segs = math.ceil(dw / RX)
        pitch = segs * RX * cs + kf - cs
        if cs == 1:
            pitch = _odd(pitch)

        def staged_rows(rows):
            return (rows - 1) * cs + kf
    else:  # by phases: dy compact, items from an even distance to offW (depthwise_bands.cu)
        lead = _phase_offsets(geom)[1] % 2
        segs = math.ceil((dw + lead) / RX)
        pitch = _odd((segs - 1) * RX // 2 + (RX + kf - 2) // 2 + 1)

        def staged_rows(rows):  # the pairs' first rows, then the last pair's taps (kf odd)
            return _row_pairs(rows) + (kf - 1) // 2
    opitch = _odd(dw)

    def cells(planes, rows):
        return _smem_cells(planes, rows, pitch, staged_rows(rows), opitch, kf)

    planes = geom.batch * (geom.in_channels if transposed else geom.out_channels)
    target_items = items_per_thread * THREADS
    budget = min(smem_target, SMEM_LIMIT) // acc
    if cells(1, dh) <= budget:  # whole planes, as many as the targets allow
        rows, bands = dh, 1
        per_block = max(1, min(math.ceil(target_items / (dh * segs)), budget // cells(1, dh),
                               planes))
    else:  # bands of one plane (by phases: of an even number of rows, so pairs stay aligned)
        step = 1 if up == 1 else 2
        rows = max(step, min(dh, math.ceil(target_items / segs)) // step * step)
        while rows > step and cells(1, rows) > budget:
            rows -= step
        if cells(1, rows) * acc > SMEM_LIMIT:
            return None
        bands, per_block = math.ceil(dh / rows), 1
    plan = BandPlan(kf, cs, up, lead, per_block, rows, bands, pitch, staged_rows(rows), segs,
                    opitch, acc)
    return plan if plan.blocks(planes) < 2 ** 31 else None


def band_launch(geom: ConvGeometry, plan: BandPlan, has_bias: bool, transposed: bool,
                vec_in: bool) -> Launch:
    """The launch of ``plan``: forward (src x, dst y) or backward-data (src dy, dst dx);
    ``vec_in``: src's base address is 16-byte aligned (the kernel reads it in 16-byte vectors)."""
    g3 = geom.as_3d()
    kh, kw = g3["kernel"][1:]
    src, dst = g3["spatial"][1:], g3["out_spatial"][1:]
    if transposed:  # dx reads the taps rotated, from offsets K - 1 - P
        src, dst = dst, src
        off_h, off_w = _phase_offsets(geom)
    else:
        off_h, off_w = g3["pad_lo"][1:]
    # column offset of the staged plane (by phases: the items' first cells are staged column
    # sg * RX / 2)
    coff = off_w if plan.up == 1 else (plan.lead + off_w) // 2
    planes = geom.batch * (geom.in_channels if transposed else geom.out_channels)
    mult = 1 if transposed else geom.out_channels // geom.in_channels
    magic = []
    for d in (src[0] * src[1], src[1], plan.item_rows, plan.item_rows * plan.segs, dst[1]):
        magic += magic_divisor(d)
    fn = jit.get_function(depthwise_bands_module(geom.dtype, plan.kf), "depthwise_bands",
                          geom.dtype, (plan.cs, plan.up))
    return Launch(fn, (plan.blocks(planes),), (THREADS,),
                  int64s((has_bias, geom.out_channels, mult, planes, *src, *dst, kh, kw, off_h,
                        coff, plan.lead, plan.planes_per_block, plan.band_rows,
                        plan.bands, plan.pitch, plan.srows, plan.segs, plan.opitch,
                        int(transposed), int(vec_in), *magic, plan.item_rows, off_h % 2)),
                  plan.smem, packed=True)


# Destination planes at most this wide take the band kernel at unit (compute) stride; wider ones
# the plane row walk.  Measured as above: on the 14^2 and 7^2 layers the band kernel ran 1.0-1.2x
# the plane walk's speed (fp32 3x3 480ch 14^2 1.56x PyTorch against 1.33x, 1152ch 7^2 1.39x
# against 1.16x; 5x5 480ch 14^2 2.07x against 2.12x), on 28^2 and wider 0.8-0.9x; the forward at
# stride 2 0.8-1.0x at every size.  Backward-data at stride 2 takes it at every size: 1.6-2.4x
# faster than the channels-last kernel through two copies (3x3 96ch 112^2 fp32 2.06x -> 4.04x
# PyTorch, fp16 2.53x -> 3.97x).
BANDS_MAX_WIDTH = 16


def prefer_bands(geom: ConvGeometry, transposed: bool) -> bool:
    """Whether a pass the band kernel takes (:func:`band_plan`) should run on it rather than on the
    plane row walk or, for strided backward-data, the channels-last kernel through copies."""
    shape = _shape(geom, transposed)
    if shape is None:
        return False
    _, stride, _, (_, dw) = shape
    if transposed and stride == 2:
        return True
    return stride == 1 and dw <= BANDS_MAX_WIDTH
