"""The grouped direct kernel (``kernel_src/direct/grouped_conv.cu``): launcher, register-tile
choice and cost estimate.

For grouped convolutions with few channels per group (ResNeXt's 4-32), where the tiled GEMM's
64-128-column tiles hold one group's 4-32 output channels and idle the rest, and where merging
groups into block-diagonal GEMMs (:mod:`cupyconv._gemm.grouped`) multiplies the exact float32
loop's work.  A thread computes TK output channels of one group at TW pixels: per (channel, tap)
step it loads TW inputs, reads TK weights (shared-memory broadcasts) and issues TK * TW
multiply-adds, with no shared-memory traffic for the inputs.
"""

from __future__ import annotations

import math

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import itemsize
from cupyconv._core.epilogue import same_strides
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import GROUPED_TILES, KERNEL_CONSTANTS, grouped_module
from cupyconv._core.launch import (GRID_YZ_MAX, element_strides, int64s, ints, sm_count,
                                   spatial_args)

THREADS = KERNEL_CONSTANTS["GC_THREADS"]
MAX_TAPS = KERNEL_CONSTANTS["GC_MAX_TAPS"]


def smem_bytes(dtype: str) -> int:
    """The kernel's dynamic shared memory: GC_WEIGHTS staged weights (accumulator type) and
    MAX_TAPS 64-bit tap offsets (at most 32 KB + 256 bytes: no opt-in needed)."""
    return KERNEL_CONSTANTS["GC_WEIGHTS"] * (8 if dtype == "float64" else 4) + MAX_TAPS * 8


# Cost model: a warp's (channel, tap) step issues TK * TW FFMA, TK / 4 vector reads of the
# weights (shared-memory broadcasts) and TW input loads with their tap test and address; two
# 256-thread blocks are resident per multiprocessor (__launch_bounds__(256, 2), 80-124 registers),
# 4 warp instructions per clock issue at best (~1.6 GHz under load).  The load's weight and the
# achieved issue share were fitted to 13 measurements of the kernel on an H100 (fp32, the four
# ResNeXt-50 3x3 layers and a stride-2 one, every tile; benchmarks/notes/gemm.md,
# "Issue 17, item 2"): a load costs about 14 FFMA issue slots (the L1 path, not the issue rate, is
# the limit: TK is the FFMAs per load) and the loop's bookkeeping hides behind them; the fit lands
# within 25 % of the measurements.
_INSTR_PER_LOAD = 14
_ISSUE_RATE = 4 * 1.6e9 * 0.65  # warp instructions per second per multiprocessor
_BLOCKS_PER_SM = 2
_STEP_S = 3e-8  # a warp alone on its scheduler: an L1 round trip per step (a floor; not fitted)
_BANDWIDTH = 3e12
# Channels-last: a warp's 32 pixels are C elements apart, so each load touches 32 cache lines
# instead of one or two (a guess at the slowdown, NOT measured; the GEMM paths win there anyway).
_CHANNELS_LAST_FACTOR = 4.0


def grouped_applicable(geom: ConvGeometry) -> bool:
    """1 < groups < channels (depthwise problems have their own kernels), at most MAX_TAPS taps
    (a pixel's valid taps are the bits of a word), one grid row per (group, channel chunk)."""
    g = geom.groups
    kmin = min(t[0] for t in GROUPED_TILES)
    return (1 < g < geom.in_channels and math.prod(geom.kernel) <= MAX_TAPS
            and g * math.ceil(geom.out_channels // g / kmin) <= GRID_YZ_MAX)


def _tile_seconds(geom: ConvGeometry, tile: tuple[int, int], sms: int) -> float:
    """Estimated seconds of ``geom`` with register tile ``tile`` = (TK, TW) on ``sms``
    multiprocessors (see the cost-model notes above)."""
    tk, tw = tile
    g = geom.groups
    cg, kg = geom.in_channels // g, geom.out_channels // g
    pixels = geom.batch * math.prod(geom.out_spatial)
    blocks = math.ceil(pixels / (THREADS * tw)) * g * math.ceil(kg / tk)
    steps = cg * math.prod(geom.kernel)
    per_warp = steps * (tk * tw + _INSTR_PER_LOAD * tw + tk / 4)
    slots = _BLOCKS_PER_SM * sms
    waves = math.ceil(blocks / slots)
    per_sm = min(_BLOCKS_PER_SM, math.ceil(blocks / sms))  # blocks sharing a multiprocessor
    wave = max(per_sm * THREADS // 32 * per_warp / _ISSUE_RATE, steps * _STEP_S)
    seconds = max(waves * wave, geom.bytes_moved(itemsize(geom.dtype)) / _BANDWIDTH)
    return seconds * (_CHANNELS_LAST_FACTOR if geom.channels_last else 1.0)


@memoized(4096)
def grouped_plan(geom: ConvGeometry, sms: int) -> tuple[tuple[int, int], float]:
    """``((TK, TW), seconds)``: the register tile with the least estimated time, and that time."""
    kg = geom.out_channels // geom.groups
    # a tile wider than the group's channels only idles threads: the narrowest tile covers them
    tiles = [t for t in GROUPED_TILES if t[0] <= max(kg, min(u[0] for u in GROUPED_TILES))]
    return min(((t, _tile_seconds(geom, t, sms)) for t in tiles), key=lambda p: p[1])


def grouped_launch(geom: ConvGeometry, x, w, bias, y, z, act: int, tile: tuple[int, int]):
    """``(grid, block, args, shared memory bytes)`` of the kernel with register tile ``tile`` on
    these arrays (CuPy, or NumPy for the CPU tests' host build of the kernel): the launch that
    :func:`run_grouped` makes."""
    if tile not in GROUPED_TILES:
        raise ValueError(f"tile {tile} is not one of kernels.GROUPED_TILES {GROUPED_TILES}")
    tk, tw = tile
    g = geom.groups
    kchunks = math.ceil(geom.out_channels // g / tk)
    cl = geom.channels_last
    pixels = geom.batch * math.prod(geom.out_spatial)
    grid = (math.ceil(pixels / (THREADS * tw)), g * kchunks, 1)
    args = (x, w, bias if bias is not None else y, z if z is not None else y, y,
            *ints((bias is not None, z is not None, act, geom.batch, geom.in_channels // g,
                   geom.out_channels // g, kchunks)),
            *spatial_args(geom),
            *int64s(element_strides(x, cl) + element_strides(w, cl) + element_strides(y, cl)))
    return grid, (THREADS,), args, smem_bytes(geom.dtype)


def run_grouped(geom: ConvGeometry, x, w, bias, y, *, z=None, act: int = NO_ACTIVATION,
                tile: tuple[int, int] | None = None) -> None:
    """y = act(conv(x, w) + bias + z) on the grouped direct kernel (any strides of x, w and y;
    bias, z and the activation code ``act`` optional, z with y's strides).  ``tile`` forces a
    register tile of ``kernels.GROUPED_TILES`` (tests); default: :func:`grouped_plan`'s."""
    if z is not None and not same_strides(z, y):
        raise ValueError("run_grouped reads z through y's strides: pass z with y's strides")
    if tile is None:
        tile = grouped_plan(geom, sm_count(y.data.device_id))[0]
    grid, block, args, smem = grouped_launch(geom, x, w, bias, y, z, act, tile)
    fn = jit.get_function(grouped_module(geom.dtype), "grouped_conv", geom.dtype, tile)
    with y.device:
        fn(grid, block, args, shared_mem=smem)
