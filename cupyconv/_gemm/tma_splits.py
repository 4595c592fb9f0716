"""How many split-K parts the TMA kernel's convolution GEMMs run in (``_gemm/tma_conv.py``).

A split shortens the k slices each work unit runs and adds work units where an output has few
tiles, but its fp32 parts are written, read back and added in order by a reduction: an estimate
of both (:func:`split_seconds`) picks the parts (:func:`best_splits`).  Backward-weight (a long
reduction over the pixels onto a small output) splits where that fills the multiprocessors
(:func:`weight_splits`); forward and backward-data take the kernel from 1 / SPLIT_MIN_TILE_SHARE
of a wave of output tiles (:func:`few_tile_splits`).  The mechanics of a split launch (its
workspace and reduction) are ``tma.split_parts``.
"""

from __future__ import annotations

import math

from cupyconv._core.kernels import TMA_TILES
from cupyconv._gemm.tma import kernel_tiles, output_tiles

# The TMA tile the convolutions take: 128 x 128 beat 128 x 256 on 15 of 17 1x1 layers
# (benchmarks/notes/gemm.md, session 29); 128 x 64 for outputs of at most 64 channels, where a
# 128-column tile spends half its products or more on columns past the output.
CONV_TILE = TMA_TILES[1]
NARROW_TILE = TMA_TILES[2]


def conv_tile(dtype: str, n: int | None = None) -> tuple:
    """The tile of a convolution's GEMM on the TMA kernel whose output has ``n`` columns (None:
    any): NARROW_TILE where n is at most its 64, else CONV_TILE; for float32 (TF32) their twin
    of the same bytes (k slices of 32 floats)."""
    tile = NARROW_TILE if n is not None and n <= NARROW_TILE[1] else CONV_TILE
    return kernel_tiles(dtype)[TMA_TILES.index(tile)]


# What split-K costs on the TMA kernel with CONV_TILE (H200, bf16, fitted on the 6 problems of
# benchmarks/notes/gemm.md, "Session 33, issue 46: split-K charged for its reduction"): a
# launch, then each work unit's k slices (slower where B comes through the im2col mode), then,
# split, the reduction: a second launch and the fp32 parts written by the kernel and read back.
# The reduction measured 6-15 us, so a split pays only on long k over small outputs: at 7^2 x 32
# images (25 slices) 1x1 2048 -> 512 backward-weight ran 11.1 us unsplit, 21.8 in 2 parts;
# 64 -> 64 3x3 at 56^2 (1568 slices) 750 us unsplit, 37 in 26 parts.
LAUNCH_FIXED_S = 2.5e-6
SLICE_S = 0.34e-6
IM2COL_SLICE_S = 0.48e-6
REDUCE_FIXED_S = 6e-6
REDUCE_BANDWIDTH = 3e12   # bytes / s of the fp32 parts, written and read


def split_seconds(tiles: int, slices: int, splits: int, outputs: int, sms: int,
                  slice_s: float) -> float:
    """Estimated seconds of a TMA-kernel GEMM of ``tiles`` output tiles (``outputs`` elements)
    over ``slices`` k slices in ``splits`` parts on ``sms`` multiprocessors: rounds of work
    units, each its part's slices, plus the reduction where split."""
    rounds = math.ceil(tiles * splits / sms)
    seconds = LAUNCH_FIXED_S + rounds * math.ceil(slices / splits) * slice_s
    if splits > 1:
        seconds += REDUCE_FIXED_S + splits * outputs * 8 / REDUCE_BANDWIDTH
    return seconds


def best_splits(tiles: int, slices: int, outputs: int, sms: int, slice_s: float) -> int:
    """The split-K parts (1 to one per multiprocessor, each part at least 4 k slices) that
    :func:`split_seconds` estimates fastest; the fewest among equals."""
    most = max(1, min(sms, slices // 4))
    return min(range(1, most + 1),
               key=lambda p: (split_seconds(tiles, slices, p, outputs, sms, slice_s), p))


def weight_splits(m: int, n: int, k: int, sms: int, slice_s: float = None,
                  tile=CONV_TILE) -> int | None:
    """Split-K parts of an m x n x k backward-weight GEMM on ``tile``: None where even parts
    of 4 k slices each leave more than half the multiprocessors idle (few pixels: the implicit
    loop), else the count :func:`best_splits` estimates fastest (``slice_s``: the seconds of one
    k slice, default SLICE_S, fitted on CONV_TILE; the narrow tile's slices are charged alike)."""
    tiles = output_tiles(m, n, tile)
    slices = math.ceil(k / tile[2])
    if tiles * max(1, min(sms // tiles, slices // 4)) < sms // 2:
        return None
    return best_splits(tiles, slices, m * n, sms, SLICE_S if slice_s is None else slice_s)


# The forward and backward-data GEMMs split K where their output has fewer 128 x 128 tiles
# than half the multiprocessors, down to this share of them (fewer tiles: the implicit loop and
# its plans).  ResNet-50's 512-channel 3x3 layers at 7^2 / 14^2 (batch 32) have 52 tiles on 132
# SMs and ran at 0.57-0.59x cuDNN on the im2col mode without a split (benchmarks/notes/gemm.md,
# session 31); split, 1.15x the implicit loop (session 33).
SPLIT_MIN_TILE_SHARE = 8


def few_tile_splits(tiles: int, slices: int, sms: int, outputs: int,
                    slice_s: float = SLICE_S) -> int:
    """The split-K parts of a forward or backward-data GEMM whose output has ``tiles`` 128 x 128
    tiles (``outputs`` elements) over ``slices`` k slices on ``sms`` multiprocessors: 0 (the TMA
    kernel does not take it) below 1 / SPLIT_MIN_TILE_SHARE of the multiprocessors' worth of
    tiles, else what :func:`best_splits` estimates fastest (mostly 1: the reduction costs more
    than the slices a split saves on these layers' short k)."""
    if tiles * SPLIT_MIN_TILE_SHARE < sms:
        return 0
    return best_splits(tiles, slices, outputs, sms, slice_s)
