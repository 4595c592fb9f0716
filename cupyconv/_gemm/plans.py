"""Tile x split-K plans of the tiled GEMM kernels and the cost model that chooses them.

:func:`plan_gemm` gives an m x n x k GEMM batch the tile (one of ``kernels.gemm_tiles`` for the main
loop that its dtype and precision get on the device) and the split-K factor with the least estimated
time: waves of resident blocks at the tile's rate plus the split-K workspace round trip (the SIMT
and mma.sync loops), or the Hopper loop's own model (rounds of resident blocks per multiprocessor),
on the build that :func:`with_build` gives.  The rates (``GEMM_RATE``, ``MATH_RATE``,
``BANDWIDTH``, ``LAUNCH_S``) are what the family's other estimates and the dispatch layer's build
on.  Which plan a launch really runs (explicit, forced, or this choice) is decided at launch:
:func:`cupyconv._gemm.launch.forced_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import itemsize
from cupyconv._core.kernels import (LONG_K, LONG_K_TILE, MATH_MMA, MATH_SIMT, MATH_TF32, MATH_WGMMA,
                                    MATH_WGMMA_TF32, WGMMA_KINDS, gemm_tiles,
                                    wgmma_feeds)
from cupyconv._core.launch import GRID_YZ_MAX, sm_count
from cupyconv._core.precision import gemm_math


# Relative speed of a full tile of each shape (bigger tiles reuse more per load); only the
# comparison between tiles matters.  Measured order on H200: 128x128 > 128x64 > 64x64.
_TILE_SPEED = {(128, 128): 1.0, (128, 64): 0.85, (64, 64): 0.65}


# Rates measured on an H200 (benchmarks/notes/gemm.md, "issue 3: tiled GEMM"): the 128x128 tile's
# SGEMM rate, and the bandwidth that the split-K workspace round trip costs.  The mma.sync loops'
# rates per kind (H100, benchmarks/notes/gemm.md, "Issue 16: tensor cores") drive the same plan.
GEMM_RATE = 40e12
MATH_RATE = {MATH_SIMT: GEMM_RATE, MATH_MMA: 250e12, MATH_TF32: 120e12, MATH_WGMMA: 640e12,
             MATH_WGMMA_TF32: 163e12}
BANDWIDTH = 3e12
# One more launch: the driver call, the workspace allocation and the gap on the device (the host
# side, ~6 us per launch on H100 hosts, is what a Python loop of small calls waits on).
LAUNCH_S = 8e-6
MAX_SPLITS = 64  # backward-weight has k = N * pixels in the 10^4-10^5 range and few tiles


def repair_seconds(dtype: str, result_elements: int) -> float:
    """Estimated seconds of the repair pass that follows a pass over merged groups
    (``_gemm.grouped``; the dispatch layer runs it: ``cupyconv._direct.launch.repair_merged_forward``),
    one launch reading the pass's result of ``result_elements`` elements.  The forward and
    backward-data merge estimates add it: a NaN or inf of one group's input must not reach the
    other groups' outputs through the zero weights between them.  Backward-weight keeps only the
    diagonal blocks and needs none."""
    return LAUNCH_S + result_elements * itemsize(dtype) / BANDWIDTH


# The Hopper loop's own model (H100, CUDA-graph timings of every tile x split x build on ResNet-50
# layers and held-out ones, benchmarks/experiments/README.md: exp_conv_plans.py, benchmarks/notes/gemm.md, "Session 13"): a
# round of resident blocks on a multiprocessor costs a fixed HOPPER_WAVE_S (the first slices'
# latency, the hand-off and the stores, which no other block's main loop hides with one block per
# multiprocessor) plus its products at the tile's share of the multiprocessor's rate (MATH_RATE),
# which the blocks resident together share.  128x64 and 64x64 tiles run at 0.60 and 0.54 of the
# 128x128 tile's rate; the reduction of a split adds HOPPER_SPLIT_S of device time to the workspace
# round trip.
HOPPER_TILE_SPEED = {(128, 128): 1.0, (128, 64): 0.60, (64, 64): 0.54}
HOPPER_WAVE_S = {(128, 128): 9e-6, (128, 64): 6e-6, (64, 64): 6e-6}
HOPPER_SPLIT_S = 3e-6
# Most k (elements) per block for which the Hopper loop takes its two-block build (prologue and
# epilogue overlap the other block's main loop; 128 registers, 3 stages): measured, two blocks win
# at k = 576 and 1152 in fp16 and TF32 (1.16-1.42x) and lose from 2304 (H100, exp_conv_plans.py).
WGMMA_SHORT_K = 1536


@dataclass(frozen=True)
class GemmPlan:
    """Tile shape and split-K factor of one GEMM launch, with its estimated time in seconds, and
    the main loop it runs (``kernels.MATH_*``: fixed by dtype, precision and device, not tuned)
    and, for the Hopper loop, the resident blocks per multiprocessor its build is made for."""

    tile: tuple[int, ...]
    splits: int
    seconds: float
    math: int = MATH_SIMT
    blocks: int = 1


def _plan_time(tile, splits, m, n, k, batch, slots, acc_bytes, rate=GEMM_RATE) -> float:
    """Estimated seconds: the blocks' waves at the tile's rate, plus the split-K round trip.

    Each wave of ``slots`` resident blocks takes as long as a full one; a tile's work counts in
    full even where it hangs over the matrix edge.
    """
    bm, bn = tile[:2]
    tm, tn = math.ceil(m / bm), math.ceil(n / bn)
    blocks = tm * tn * batch * splits
    waves = math.ceil(blocks / slots)
    per_block = 2 * bm * bn * math.ceil(k / splits)
    seconds = waves * slots * per_block / (rate * _TILE_SPEED.get((bm, bn), 0.5))
    if splits > 1:
        seconds += (splits + 1) * m * n * batch * acc_bytes / BANDWIDTH + LAUNCH_S
    return seconds


def _hopper_time(tile, splits, m, n, k, batch, sms, rate) -> float:
    """Estimated seconds on the Hopper loop (HOPPER_* above), on the build ``with_build`` gives:
    each multiprocessor runs its share of the blocks in rounds of ``resident`` at a time, each
    round a fixed cost, the products at the multiprocessor's rate whatever the rounds."""
    bm, bn = tile[:2]
    resident = resident_blocks(tile, splits, (m, n, k, batch), sms)
    per_sm = math.ceil(math.ceil(m / bm) * math.ceil(n / bn) * batch * splits / sms)
    per_block = 2 * bm * bn * math.ceil(k / splits)
    seconds = (math.ceil(per_sm / resident) * HOPPER_WAVE_S[(bm, bn)]
               + per_sm * sms * per_block / (rate * HOPPER_TILE_SPEED[(bm, bn)]))
    if splits > 1:
        seconds += (splits + 1) * m * n * batch * 4 / BANDWIDTH + HOPPER_SPLIT_S
    return seconds


@memoized(4096)
def plan_gemm(dtype: str, m: int, n: int, k: int, batch: int, device_id: int = 0,
              precision: str = "exact", b_kmajor: bool = True) -> GemmPlan:
    """The (tile, splits) with the least estimated time for an m x n x k GEMM batch, on the main
    loop that ``dtype`` at ``precision`` gets on the device.  ``b_kmajor``: whether the kernel
    loads B K-major (else MN-major: backward-weight's transposed im2col, a row-major dense B),
    which rules out the tiles the Hopper loop cannot feed that way (``kernels.wgmma_feeds``).

    Splits are tried only where the tiles alone make fewer than two waves (beyond that the wave
    tail is small and the workspace round trip is not worth it), and while each part keeps at
    least 4 k-slices.
    """
    math_kind = gemm_math(dtype, precision, device_id)
    # resident blocks per multiprocessor: two SIMT blocks (their register cap); one tensor-core
    # block (about 200 registers per thread, up to 80 KB of shared memory)
    slots = (2 if math_kind == MATH_SIMT else 1) * sm_count(device_id)
    acc_bytes = 8 if dtype == "float64" else 4
    best = None
    for tile in gemm_tiles(dtype, math_kind):
        if not wgmma_feeds(tile, math_kind, b_kmajor):
            continue
        slices = math.ceil(k / tile[2])
        tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1]) * batch
        max_splits = min(MAX_SPLITS, max(1, slices // 4)) if tiles < 2 * slots else 1
        max_splits = max(1, min(max_splits, GRID_YZ_MAX // batch))  # (batch, part) is grid z
        for splits in range(1, max_splits + 1):
            if math_kind in WGMMA_KINDS:
                t = _hopper_time(tile, splits, m, n, k, batch, slots, MATH_RATE[math_kind])
            else:
                t = _plan_time(tile, splits, m, n, k, batch, slots, acc_bytes,
                               MATH_RATE[math_kind])
            if best is None or t < best.seconds:
                best = GemmPlan(tile, splits, t, math_kind)
    return with_build(best, (m, n, k, batch), device_id)


def resident_blocks(tile, splits: int, shape: tuple, sms: int) -> int:
    """Blocks per multiprocessor of the build the Hopper loop takes for an (m, n, k, batch) GEMM
    on ``tile`` with ``splits``: two where each block's k range is at most WGMMA_SHORT_K and
    there are blocks enough to pair (alone on a multiprocessor the two-block build is slower:
    fewer stages, capped registers; H100, 0.022 against 0.016 ms); else one."""
    m, n, k, batch = shape
    blocks = math.ceil(m / tile[0]) * math.ceil(n / tile[1]) * batch * splits
    return 2 if math.ceil(k / splits) <= WGMMA_SHORT_K and blocks > sms else 1


def with_build(plan: GemmPlan, shape: tuple, device_id: int) -> GemmPlan:
    """``plan`` with the build (``resident_blocks``) its main loop takes for an (m, n, k, batch)
    GEMM on device ``device_id`` (queried only for the Hopper loop)."""
    blocks = (resident_blocks(plan.tile, plan.splits, shape, sm_count(device_id))
              if plan.math in WGMMA_KINDS else 1)
    return plan if plan.blocks == blocks else replace(plan, blocks=blocks)


def dense_plan(plan: GemmPlan, dtype: str, k: int) -> GemmPlan:
    """The dense GEMM's plan: 16-deep k-slices for the 128x128 tile of the SIMT loop on long k
    ranges."""
    if (dtype != "float64" and plan.math == MATH_SIMT and plan.tile[:2] == LONG_K_TILE[:2]
            and math.ceil(k / plan.splits) >= LONG_K):
        return replace(plan, tile=LONG_K_TILE)
    return plan
