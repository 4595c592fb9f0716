"""Plans of the channels-first tile kernels (``kernel_src/depthwise/depthwise.cu``) and the chunks
of backward-weight on the tile and gather kernels.

A tile block stages, in shared memory, the source window of a destination tile of each of its
planes (:class:`Tiling`): :func:`tile_plan` gives the forward (or backward-data) pass's tiling,
or None where no block fits (the gather kernels take the pass), and :func:`wgrad_plan` the
backward-weight pass's tiling (or None: gather) and its split of the batch into chunks of
partial sums.  The shared-memory limit and :func:`vector_rows` serve the fused separable kernel
too (:mod:`cupyconv._depthwise.separable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import compute_dtype, itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DEPTHWISE_KF, DEPTHWISE_WGRAD_KF, KERNEL_CONSTANTS
from cupyconv._core.launch import GRID_YZ_MAX


# Dynamic shared memory per block: the 48 KB a launch gets without opting in, less room for the
# kernels' static arrays (zoff: at most 512 B).  A block at exactly 48 KB of windows failed to
# launch (CUDA_ERROR_INVALID_VALUE) on the GPU.
SMEM_LIMIT = 48 * 1024 - 1024
THREADS = KERNEL_CONSTANTS["DW_THREADS"]
DW_ROWS = KERNEL_CONSTANTS["DW_ROWS"]    # most output rows per thread
DW_TAPS = KERNEL_CONSTANTS["DW_TAPS"]    # taps per backward-weight pass
MAX_Z = KERNEL_CONSTANTS["DW_MAX_Z"]     # most planes per block
_TARGET_BLOCKS = 4 * 132  # backward-weight: enough blocks to fill an H100/H200 a few times over


def acc_bytes(dtype: str) -> int:
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
    per_plane = rows_max * pitch * acc_bytes(dtype)
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


def vector_rows(a, strides: tuple[int, ...]) -> bool:
    """Can the tile kernels stage ``a``'s rows 4 elements at a time: contiguous rows whose width,
    every other stride and the base address are multiples of 4 elements (stage_rows4)."""
    *outer, unit = strides[:1] + strides[2:]  # lead, d, h strides; w stride
    width = a.shape[-1]
    return (unit == 1 and width % 4 == 0 and strides[1] % 4 == 0
            and all(v % 4 == 0 for v in outer) and a.data.ptr % (4 * a.itemsize) == 0)


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
                    geom.dtype, extra_per_thread=acc_bytes(geom.dtype), cw=cw)
        if t is not None:
            chunks = max(1, min(planes, math.ceil(_TARGET_BLOCKS / k)))
            per_chunk = math.ceil(planes / chunks)
            chunks = math.ceil(planes / per_chunk)
            if chunks <= GRID_YZ_MAX:
                # no more planes per block than a chunk holds; shared memory shrinks with them
                bz = min(t.bz, per_chunk)
                t = Tiling(t.bx, t.by, bz, t.vr, t.tiles_h, t.tiles_w, t.rows_max, t.pitch,
                           bz * t.rows_max * t.pitch * acc_bytes(geom.dtype)
                           + 4 * math.ceil(t.bx * t.by * bz / 4) * acc_bytes(geom.dtype), t.cw)
                return t, chunks, per_chunk
    pixels = geom.batch * od * oh * ow
    threads_wanted = 64 * 1024
    chunks = max(1, min(pixels, math.ceil(threads_wanted / k)))
    per_chunk = math.ceil(pixels / chunks)
    return None, math.ceil(pixels / per_chunk), per_chunk
