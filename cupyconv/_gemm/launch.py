"""Launchers of the tiled GEMM kernels (``gemm.cu``, ``conv_fprop.cu``) and their tile choice.

The epilogue (``epilogue.cuh``; with split-K, the reduction) adds the bias and, for inference,
a residual ``z`` and an activation (a code of :mod:`cupyconv._core.activation`, ``act``) before
the single store.  ``z`` has the output's layout: the kernels read it at each output element's
offset from the output's base, through its own base pointer.

A :class:`MatrixView` describes one dense operand for the kernel's dense loader: element strides
along its rows and along k, and the two-level batch strides (outer, inner) of blockIdx.z split as
(z / G2, z % G2).  The B operand is described by its transpose (rows = the N columns).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from dataclasses import dataclass, replace

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.caches import memoized
from cupyconv._core.copy import UNFOLD_MAX_WIDTH, contiguous, copy_into, unfold_width
from cupyconv._core.dtypes import itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (GEMM_TILES, LONG_K, LONG_K_TILE, MATH_MMA, MATH_SIMT,
                                    MATH_TF32, MATH_WGMMA, MATH_WGMMA_TF32, MMA_TILES, SPLITK_REDUCE,
                                    WGMMA_KINDS, conv_fprop_module,
                                    conv_wgrad_module, gemm_module, gemm_tiles, mma_smem_bytes)
from cupyconv._core.precision import gemm_math, runs_instead
from cupyconv._core.launch import (DEFAULT_SMEM, GRID_YZ_MAX, element_strides, int64s, ints,
                                   launch_grid, sm_count)
from cupyconv._core.program import not_preparable, scratch, zero_fill
from cupyconv._gemm.grouped import merge_forced

# Relative speed of a full tile of each shape (bigger tiles reuse more per load); only the
# comparison between tiles matters.  Measured order on H200: 128x128 > 128x64 > 64x64.
_TILE_SPEED = {(128, 128): 1.0, (128, 64): 0.85, (64, 64): 0.65}


@dataclass(frozen=True)
class MatrixView:
    """Element (row, k) of batch (zo, zi) at ``array[zo*so + zi*si + row*rs + k*ks]``."""

    array: object
    rs: int
    ks: int
    so: int = 0
    si: int = 0

    @property
    def kcontig(self) -> bool:
        return self.ks == 1

    def vectorizable(self, rows: int, k: int, width: int = 4) -> bool:
        """Can the loader move ``width``-element vectors: unit stride along the walked dim, every
        other stride, the base address and that dim's extent multiples of ``width`` elements."""
        other, extent = (self.rs, k) if self.kcontig else (self.ks, rows)
        if not (self.kcontig or self.rs == 1):
            return False
        aligned = self.array.data.ptr % (width * self.array.itemsize) == 0
        return aligned and extent % width == 0 and all(s % width == 0
                                                       for s in (other, self.so, self.si))

    def vec_level(self, rows: int, k: int) -> int:
        """The loader's ``vec``: 2 where the contiguous dim also splits into aligned 16-byte
        chunks (the tensor-core loops' multistage copies: k-contiguous rows for mma.sync, either
        orientation for wgmma), 1 for 4-element vectors, 0 for elements."""
        if not self.vectorizable(rows, k):
            return 0
        chunk = max(4, 16 // self.array.itemsize)
        return 2 if self.vectorizable(rows, k, chunk) else 1


@dataclass(frozen=True)
class OutMap:
    """Row m of the result at (m // L) * outer + (m % L // R) * row + (m % L % R) * inner, column
    n at n * col (out_map.cuh): L rows per image in runs of R (R = 0: one run of L, as for every
    C-contiguous result; a run is an output row of a stride phase of backward-data, whose rows
    lie ``row`` apart in dx)."""

    L: int
    outer: int
    inner: int
    col: int
    R: int = 0
    row: int = 0

    @property
    def run(self) -> int:
        """Rows per run (the kernel's R)."""
        return self.R or self.L

    def kernel_args(self) -> tuple[int, ...]:
        return (self.L, self.outer, self.inner, self.col, self.run, self.row)


def out_vectorizable(c, out: OutMap, batch_strides=()) -> bool:
    """Can the epilogue store 4-vectors: 4 adjacent columns (col == 1) or rows (inner == 1,
    L % 4 == R % 4 == 0) with every other stride, the batch strides and the base 4-element
    aligned."""
    if out.col == 1:
        others = (out.outer, out.inner, out.row)
    elif out.inner == 1:
        others = (out.L, out.run, out.outer, out.row, out.col)
    else:
        return False
    aligned = c.data.ptr % (4 * c.itemsize) == 0
    return aligned and all(s % 4 == 0 for s in others + tuple(batch_strides))


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
# layers and held-out ones, benchmarks/exp_conv_plans.py, benchmarks/notes/gemm.md, "Session 13"): a
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
              precision: str = "exact") -> GemmPlan:
    """The (tile, splits) with the least estimated time for an m x n x k GEMM batch, on the main
    loop that ``dtype`` at ``precision`` gets on the device.

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


# Two hooks for the profiler and the autotuner, both off by default (so default launches are
# unchanged): a forced plan that every GEMM launch in the context uses instead of plan_gemm's
# choice, and a list that records the plan of every launch (which tile configuration really ran).
_FORCED: contextvars.ContextVar = contextvars.ContextVar("cupyconv_forced_plan", default=None)
_RECORD: contextvars.ContextVar = contextvars.ContextVar("cupyconv_plan_record", default=None)


@contextlib.contextmanager
def forced_plan(plan: GemmPlan | None):
    """Within the block, GEMM launches with no explicit ``plan=`` use ``plan``'s tile and split
    (None: the default choice).  The tile must be one of ``gemm_tiles(dtype, math)`` for the
    launched dtype and main loop; the main loop itself is the launch's (dtype, precision)."""
    token = _FORCED.set(plan)
    try:
        yield
    finally:
        _FORCED.reset(token)


@contextlib.contextmanager
def record_plans():
    """Collect ``(kernel, (m, n, k, batch), GemmPlan)`` for every GEMM launch within the block."""
    log: list = []
    token = _RECORD.set(log)
    try:
        yield log
    finally:
        _RECORD.reset(token)


def plan_hooks_active() -> bool:
    """Whether a :func:`forced_plan`, :func:`record_plans` or ``grouped.forced_merge`` block is
    active: calls made there must plan afresh (and are not remembered), so the hooks see every
    launch."""
    return _FORCED.get() is not None or _RECORD.get() is not None or merge_forced()


def _resolve(plan: GemmPlan | None, default, kernel: str, shape: tuple, dtype: str,
             math_kind: int, device_id: int) -> GemmPlan:
    """The plan a launch uses: explicit, else forced by the context, else ``default()``; on the
    launch's main loop ``math_kind`` (or on one the device runs instead, where the plan names
    it: ``precision.runs_instead``), whose tiles a given plan must use."""
    plan = plan or _FORCED.get() or default()
    if plan.math != math_kind and not runs_instead(plan.math, math_kind):
        plan = replace(plan, math=math_kind)
    plan = with_build(plan, shape, device_id)
    math_kind = plan.math
    tiles = gemm_tiles(dtype, math_kind) + ((LONG_K_TILE,) if math_kind == MATH_SIMT else ())
    if plan.tile not in tiles:
        raise ValueError(f"GEMM tile {plan.tile} is not one of the {dtype} tiles of this main loop "
                         f"(kernels.gemm_tiles: {tiles})")
    log = _RECORD.get()
    if log is not None:
        log.append((kernel, shape, plan))
    return plan


def dense_plan(plan: GemmPlan, dtype: str, k: int) -> GemmPlan:
    """The dense GEMM's plan: 16-deep k-slices for the 128x128 tile of the SIMT loop on long k
    ranges."""
    if (dtype != "float64" and plan.math == MATH_SIMT and plan.tile[:2] == LONG_K_TILE[:2]
            and math.ceil(k / plan.splits) >= LONG_K):
        return replace(plan, tile=LONG_K_TILE)
    return plan


# Most GEMM columns one launch covers whatever its tile: column tiles go on the grid's y extent,
# so GRID_YZ_MAX tiles of the narrowest tile.
MAX_GRID_COLUMNS = GRID_YZ_MAX * min(t[1] for tiles in (*GEMM_TILES.values(), *MMA_TILES.values())
                                     for t in tiles)


def grid_fits(n: int, batch: int) -> bool:
    """Whether an n-column GEMM batch fits the launch grid: at most MAX_GRID_COLUMNS columns (y)
    and GRID_YZ_MAX batch entries (z); rows go on x, which takes any 32-bit count."""
    return n <= MAX_GRID_COLUMNS and batch <= GRID_YZ_MAX


def _grid(tile, m, n, batch):
    return (math.ceil(m / tile[0]), math.ceil(n / tile[1]), batch), (tile[0] // tile[3] * (tile[1] // tile[4]),)


def _tiled_kernel(module, template: str, dtype: str, variant: tuple, plan: GemmPlan):
    """The compiled GEMM-family kernel of ``plan`` and its dynamic shared memory (the tensor-core
    loops' k-slices; none for the SIMT loop), opted in above the default limit."""
    import cupy

    fn = jit.get_function(module, template, dtype, variant)
    smem = mma_smem_bytes(plan.tile, plan.math, cupy.cuda.runtime.is_hip, plan.blocks)
    if smem > DEFAULT_SMEM and fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    return fn, smem


def _workspace(dtype: str, splits: int, count: int, placeholder):
    """Split-K partial sums (accumulator type); without a split the kernel never touches it and
    gets ``placeholder`` (the output) instead of a fresh allocation."""
    if splits == 1:
        return placeholder
    return scratch(count * splits, "float64" if dtype == "float64" else "float32")


def _reduce(dtype, ws, c, bias, splits, batch, m, n, g2, c_so, c_si, bias_si, out: OutMap,
            n_fast: bool, z=None, act: int = NO_ACTIVATION) -> None:
    """Second split-K stage: c = act(sum of the parts (deterministic order) + bias + z).
    ``n_fast``: the order the first stage wrote the parts in (n fastest, else m fastest)."""
    fn = jit.get_function(SPLITK_REDUCE, "splitk_reduce", dtype)
    grid, block = launch_grid(batch * m * n)
    fn(grid, block, (ws, c, bias if bias is not None else c, z if z is not None else c,
                     *ints((bias is not None, z is not None, act, splits, batch, m, n,
                            n_fast, g2)),
                     *int64s((c_so, c_si, bias_si) + out.kernel_args())))


def run_gemm(dtype: str, a: MatrixView, b: MatrixView, c, m: int, n: int, k: int, *, batch: int = 1,
             g2: int = 1, c_so: int = 0, c_si: int = 0, out: OutMap, bias=None, bias_si: int = 0,
             z=None, act: int = NO_ACTIVATION, plan: GemmPlan | None = None,
             precision: str = "exact") -> None:
    """C[b] (m x n, placed by ``out``) = act(A[b] (m x k) @ B[b] (k x n) + bias[n] + z[b]) for
    b < batch; ``z`` (optional) has C's strides (read at C's element offsets), bias and the
    activation code ``act`` are optional too.  ``precision`` picks the main loop with the dtype."""
    if not (a.kcontig or a.rs == 1) or not (b.kcontig or b.rs == 1):
        raise ValueError("GEMM operands need a unit stride along rows or k")
    device_id = c.data.device_id
    plan = _resolve(plan, lambda: dense_plan(plan_gemm(dtype, m, n, k, batch, device_id, precision),
                                             dtype, k), "gemm", (m, n, k, batch), dtype,
                    gemm_math(dtype, precision, device_id), device_id)
    variant = (int(a.kcontig), int(b.kcontig))
    fn, smem = _tiled_kernel(gemm_module(dtype, plan.tile, variant, plan.math, plan.blocks), "gemm", dtype,
                             variant + (plan.math,), plan)
    grid, block = _grid(plan.tile, m, n, batch * plan.splits)
    ws = _workspace(dtype, plan.splits, batch * m * n, c)
    args = (a.array, b.array, c, bias if bias is not None else c, z if z is not None else c,
            *ints((bias is not None, z is not None, act, m, n, k,
                   out_vectorizable(c, out, (c_so, c_si)))),
            *int64s((a.rs, a.ks, b.rs, b.ks)),
            *ints((a.vec_level(m, k), b.vec_level(n, k), g2)),
            *int64s((a.so, a.si, b.so, b.si, c_so, c_si, bias_si, out.L, out.outer, out.inner,
                     out.col)), *ints((plan.splits,)), ws)
    with c.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            _reduce(dtype, ws, c, bias, plan.splits, batch, m, n, g2, c_so, c_si, bias_si, out,
                    out.col == 1, z, act)  # (gemm.cu's parts: n fastest where C's columns are)


@dataclass(frozen=True)
class ImplicitConv:
    """A forward convolution as the implicit kernel sees it: spatial dims padded in front to 3.

    Built from a :class:`ConvGeometry`, or directly by the backward-data pass, whose stride phases
    are forward convolutions of dy with unit stride and paddings no geometry would accept (the
    kernel predicates every tap, so any pad_lo works and pad_hi is implied by out_spatial).
    """

    dtype: str
    channels_last: bool
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    spatial: tuple[int, int, int]
    out_spatial: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    dilation: tuple[int, int, int]
    pad_lo: tuple[int, int, int]
    precision: str = "exact"
    # y's layout where it differs from x's (channels-first y from a channels-last staged x)
    out_channels_last: bool | None = None

    @property
    def y_channels_last(self) -> bool:
        return self.channels_last if self.out_channels_last is None else self.out_channels_last

    @classmethod
    def from_geometry(cls, geom: ConvGeometry) -> "ImplicitConv":
        g3 = geom.as_3d()
        return cls(geom.dtype, geom.channels_last, geom.batch, geom.in_channels, geom.out_channels,
                   geom.groups, g3["spatial"], g3["out_spatial"], g3["kernel"], g3["stride"],
                   g3["dilation"], g3["pad_lo"], geom.precision)

    @property
    def gemm(self) -> tuple[int, int, int, int]:
        """(M, N, K, batch) of the GEMM: pixels x out-channels-per-group x (taps, channels)."""
        return (self.batch * math.prod(self.out_spatial), self.out_channels // self.groups,
                self.in_channels // self.groups * math.prod(self.kernel), self.groups)


# What reading an operand through the implicit im2col view costs over a dense GEMM of its shape (a
# factor on the planned GEMM time, measured on an H200, benchmarks/notes/gemm.md,
# "issue 3: tiled GEMM"): with channels per group a multiple of the k-slice, one tap decode per
# slice; otherwise every element decodes its tap with divisions (and the tensor-core loops lose
# their 16-byte copies).
IMPLICIT_FACTOR = 1.15
IMPLICIT_GENERIC_FACTOR = 3


# Tensor-core launches of few-channel problems (channels staged to whole chunks or unfolded:
# ResNet's conv1, one-channel images, volumes and signals) are bound by each block's latency and
# its gathered operand traffic, not by the MMA rate: a block takes FEW_CHANNEL_BLOCK_S plus its
# operand bytes at FEW_CHANNEL_SM_BANDWIDTH (per multiprocessor), and the staging copy moves x
# at STAGING_BANDWIDTH.  Fitted on fp16 conv1 at batch 32, padded (263 us) and unfolded
# (161 us); held out, a one-channel 80-tap 1-d layer: 318 us predicted, 284 measured (H100,
# benchmarks/notes/gemm.md, "Session 12").  The GEMM-rate estimate alone put such layers at
# 1/10-1/40 of their time.
FEW_CHANNEL_BLOCK_S = 3.5e-6
FEW_CHANNEL_SM_BANDWIDTH = 20e9
STAGING_BANDWIDTH = 5e11


def implicit_conv_seconds(prob: ImplicitConv, device_id: int) -> float:
    """Estimated seconds of one implicit-kernel launch of ``prob``: the planned GEMM time times
    the view's factor (the channel count per group decides whether k-slices keep to one tap); for
    channels that are not whole chunks on the tensor-core loops, at least the few-channel block
    model on the staged problem, and the staging copy."""
    m, n, k, groups = prob.gemm
    plan = plan_gemm(prob.dtype, m, n, k, groups, device_id, prob.precision)
    cg = prob.in_channels // prob.groups
    seconds = (IMPLICIT_FACTOR if cg % plan.tile[2] == 0 else IMPLICIT_GENERIC_FACTOR) * plan.seconds
    cg_to = staged_channels(prob, plan, device_id)
    if cg_to in (0, cg):
        return seconds
    width = unfolded_channels(prob, cg_to)
    if width:
        k_run = math.prod(prob.kernel[:2]) * width
        staged = prob.batch * math.prod(prob.spatial[:2]) * prob.out_spatial[2] * width
    else:
        k_run = math.prod(prob.kernel) * cg_to
        staged = prob.batch * math.prod(prob.spatial) * groups * cg_to
    copy = (prob.batch * math.prod(prob.spatial) * prob.in_channels + staged) * itemsize(prob.dtype)
    return (max(seconds, few_channel_seconds(prob.dtype, prob.precision, m, n, k_run, groups,
                                             device_id))
            + copy / STAGING_BANDWIDTH + LAUNCH_S)


def few_channel_seconds(dtype: str, precision: str, m: int, n: int, k: int, batch: int,
                        device_id: int) -> float:
    """The few-channel block model's time of an m x n x k GEMM batch on its planned tiles."""
    plan = plan_gemm(dtype, m, n, k, batch, device_id, precision)
    bm, bn = plan.tile[:2]
    waves = math.ceil(math.ceil(m / bm) * math.ceil(n / bn) * batch * plan.splits
                      / sm_count(device_id))
    operand_bytes = (bm + bn) * math.ceil(k / plan.splits) * itemsize(dtype)
    return waves * (FEW_CHANNEL_BLOCK_S + operand_bytes / FEW_CHANNEL_SM_BANDWIDTH)


def few_channels(dtype: str, precision: str, channels: int, device_id: int) -> bool:
    """Whether ``channels`` per group fall short of whole 16-byte chunks on a tensor-core loop
    (the few-channel block model's domain)."""
    if gemm_math(dtype, precision, device_id) == MATH_SIMT:
        return False
    return channels % (16 // itemsize(dtype)) != 0


# Rows (output pixels) of one implicit-GEMM launch.  The kernels index rows and tile origins in
# 32-bit ints (64-bit arithmetic in their hot loops would cost every problem); a problem with more
# rows, in its output (forward, backward-data) or its reduction (backward-weight), runs as several
# launches over row slabs.  Below 2^31 by a margin, so that a tile overhanging the last row
# cannot overflow.  Tests lower it to split small problems.
MAX_GEMM_ROWS = 2 ** 30


def row_slabs(prob: ImplicitConv, limit: int | None = None):
    """``prob``'s output rows (images x output pixels) as slabs of at most ``limit`` rows, each a
    contiguous run of rows: whole images, or, where one image has more, runs of the outermost
    output dim whose inner dims fit, with every outer index fixed.  Yields ``(sub, index)``: the
    problem of the slab (its pixels' input windows through a shifted padding; the kernel
    predicates every tap, so the shift may make it negative) and its index into the activations
    (batch axis first, then the three spatial dims as ``ConvGeometry.as_3d`` pads them)."""
    limit = limit or MAX_GEMM_ROWS
    out = prob.out_spatial
    pixels = math.prod(out)
    if pixels <= limit:
        per = limit // pixels
        for n0 in range(0, prob.batch, per):
            n1 = min(prob.batch, n0 + per)
            yield replace(prob, batch=n1 - n0), (slice(n0, n1),)
        return
    split = next(d for d in range(3) if math.prod(out[d + 1:]) <= limit)
    run = limit // math.prod(out[split + 1:])
    for n in range(prob.batch):
        for outer in itertools.product(*(range(e) for e in out[:split])):
            for o0 in range(0, out[split], run):
                lo = outer + (o0,)
                hi = tuple(i + 1 for i in outer) + (min(out[split], o0 + run),)
                sub = replace(prob, batch=1,
                              out_spatial=tuple(h - l for l, h in zip(lo, hi)) + out[split + 1:],
                              pad_lo=tuple(p - l * s for p, l, s in
                                           zip(prob.pad_lo, lo + (0,) * 3, prob.stride)))
                yield sub, (slice(n, n + 1),) + tuple(slice(l, h) for l, h in zip(lo, hi))


def slab_view(a, index: tuple, channels_last: bool):
    """The slab ``index`` (from :func:`row_slabs`) of an activation ``a`` with 1-3 spatial dims:
    its batch slice and, where given, the slices of the spatial dims that ``a`` has."""
    # (a slab splits a dim the activation has: the padded leading dims have extent 1, so a slab
    # wider than one image never indexes them)
    batch, spatial = index[0], index[1 + 3 - (a.ndim - 2):]
    if channels_last:
        return a[(batch,) + spatial]
    return a[(batch, slice(None)) + spatial]


# Reading channels-first weights in the kernel (strided, scalar loads) made the implicit GEMM
# 12-17 % slower on ResNet-50 at batch 32 (H100, benchmarks/notes/gemm.md, "Issue 15"); the
# transposed copy costs one launch.  The kernel reads them itself on problems whose GEMM takes
# less than about LAUNCH_S / 0.15 (all of ResNet-50's layers at batch 1), and gets the copy above
# that.
_W_CF_MAX_FLOPS = LAUNCH_S / 0.15 * GEMM_RATE


def fprop_weight(geom: ConvGeometry, w):
    """``(weights, channels_first)`` as the implicit kernel reads them: C-contiguous (K, taps, Cg)
    (channels-last weights, or a transposed copy of channels-first ones), or, on small problems,
    C-contiguous channels-first (K, Cg, *kernel), which the kernel's weight loader reads in
    (tap, c) order itself."""
    w = contiguous(w)
    if geom.channels_last:
        return w, False
    k, cg = w.shape[:2]
    wt = w.reshape(k, cg, -1).transpose(0, 2, 1)
    if wt.flags.c_contiguous:  # one tap: (K, 1, Cg) is w itself
        return wt, False
    if geom.flops <= _W_CF_MAX_FLOPS:
        return w, True
    # (a copy per call: weights change in place between calls, e.g. in training)
    return contiguous(wt), False


def _x_vec_level(prob: ImplicitConv, x, strides) -> int:
    """The implicit loaders' ``vec`` for x: 1 where 4 consecutive channels are one aligned vector
    (channels-last, unit channel stride), 2 where 16-byte chunks of channels are too."""
    cg = prob.in_channels // prob.groups

    def fits(width):
        return (prob.channels_last and strides[1] == 1 and cg % width == 0
                and x.data.ptr % (width * x.itemsize) == 0
                and all(s % width == 0 for i, s in enumerate(strides) if i != 1))

    if not fits(4):
        return 0
    return 2 if fits(max(4, 16 // x.itemsize)) else 1


def run_conv_fprop(geom: ConvGeometry, x, w, bias, y, plan: GemmPlan | None = None, *, z=None,
                   act: int = NO_ACTIVATION) -> None:
    """Implicit-GEMM forward convolution (no im2col buffer): y = act(conv + bias + z)."""
    wt, w_cf = fprop_weight(geom, w)
    launch_implicit_conv(ImplicitConv.from_geometry(geom), x, wt, bias, y, plan, w_cf, z=z, act=act)


def fprop_out_map(prob: ImplicitConv, ys: tuple) -> OutMap | None:
    """The implicit kernel's output row map for an output ``y`` of element strides ``ys``
    (``element_strides``, in y's layout), or None where its rows cannot be mapped: runs of OW
    pixels whose (d, h) rows must lie a fixed stride apart.  C-contiguous outputs and the stride
    phases of 1-d and 2-d backward-data (every s-th row and column of dx) always can be; a 3-d
    phase strided in both d and h cannot.  Levels that are contiguous are folded away, so that
    C-contiguous outputs cost the epilogue no more divisions than they need."""
    m = prob.gemm[0]
    ysn, ysc, ysd, ysh, ysw = ys
    od, oh, ow = (1,) * (3 - len(prob.out_spatial)) + tuple(prob.out_spatial)
    pixels = od * oh * ow
    if oh == 1:
        run_stride = ysd
    elif od == 1 or ysd == oh * ysh:
        run_stride = ysh
    else:
        return None
    if od * oh == 1 or run_stride == ow * ysw:  # the runs are contiguous: one run per image
        if ysn == pixels * ysw:  # and so are the images: one run in all
            return OutMap(m, 0, ysw, ysc)
        return OutMap(pixels, ysn, ysw, ysc)
    return OutMap(pixels, ysn, ysw, ysc, ow, run_stride)


@memoized(4096)
def _fprop_scalar_args(prob: ImplicitConv, xs: tuple, out: OutMap, splits: int,
                       flags: tuple) -> tuple:
    """conv_fprop's scalar arguments, built once per (problem, strides, splits, flags): repeated
    calls skip converting some 40 Python ints.  flags = (has_bias, has_z, act, w_vec, w_cf, x_vec,
    c_vec)."""
    has_bias, has_z, act, w_vec, w_cf, x_vec, c_vec = flags
    return (*ints((has_bias, has_z, act, prob.batch, prob.out_channels, w_vec, w_cf, x_vec,
                   prob.y_channels_last, c_vec, prob.in_channels // prob.groups)),
            *ints(prob.spatial + prob.out_spatial + prob.kernel + prob.stride + prob.dilation
                  + prob.pad_lo),
            *int64s(xs + out.kernel_args()), *ints((prob.groups, splits)))


# Experiment switch for benchmarks/exp_stage_nchw.py: None lets staged_channels decide; True
# (False) stages (never stages) channels-first x with whole chunks on the tensor-core loops.
STAGE_CF_X: bool | None = None


def staged_channels(prob: ImplicitConv, plan: GemmPlan | None, device_id: int) -> int:
    """The channels per group of the channels-last copy of x that ``prob`` runs on (y keeps its
    layout), or 0 where it runs on x as it is.  Only on the tensor-core loops, whose multistage
    copies move 16-byte chunks of channels straight to shared memory; the register-staged loop
    they fall back to otherwise gathers single elements.

    - Channels-last groups whose channels are not whole chunks (ResNet's 3-channel conv1) run on
      a copy zero-padded to whole chunks (zero weights for the padding): conv1 TF32 0.53 -> 0.35
      ms, fp16 0.33 -> 0.29 ms (H100, benchmarks/notes/gemm.md, "Issue 16, session 3").
    - Channels-first x (padded the same way) with a kernel larger than 1x1: the copy (a tiled
      transpose) costs less than the multistage loop saves: ResNet-50 3x3 layers at batch 32,
      forward fp16 0.13-0.28 -> 0.07-0.11 ms, TF32 0.17-0.20 -> 0.12-0.18 ms, backward-data
      alike (H100, benchmarks/exp_stage_nchw.py).  1x1 layers read x as it is: a stride-2 1x1
      reads a quarter of x, which the copy would move whole (TF32 0.149 -> 0.198 ms), and
      backward-data's 1x1 phases lost (0.08 -> 0.20 ms)."""
    math_kind = plan.math if plan is not None else gemm_math(prob.dtype, prob.precision, device_id)
    if math_kind == MATH_SIMT:
        return 0
    cg = prob.in_channels // prob.groups
    chunk = 16 // itemsize(prob.dtype)
    padded = -(-cg // chunk) * chunk
    if not prob.channels_last:
        stage = math.prod(prob.kernel) > 1 if STAGE_CF_X is None else STAGE_CF_X
        if stage:
            return padded
    return padded if padded != cg else 0


# Width unfolding (the forward pass of layers whose channels are not whole chunks): the columns
# (tap along W, channel) of one output pixel's kernel row become the channels of a staged copy
# of x (one unfold_width launch), and the kernel keeps its other dims with width 1.  ResNet-50's
# conv1 (3 channels, 7x7) then reads K = 7 x 24 instead of 49 x 8 (fp16: 8-channel chunks):
# 0.279 -> 0.214 ms at batch 32, a one-channel 80-tap 1-d layer 0.25 -> 0.16 ms, 5x5 and 3x3x3
# one-channel layers 1.2-1.4x faster; TF32 conv1 (K 7 x 24 against 49 x 4) and VGG's TF32 3x3
# on 3 channels (no K saved) gain nothing (H100, benchmarks/exp_unfold.py).  Used where it
# shrinks K by UNFOLD_GAIN or more; UNFOLD_W, the experiment switch, forces it on or off.
UNFOLD_GAIN = 1.5
UNFOLD_W: bool | None = None


def unfolded_channels(prob: ImplicitConv, cg_to: int) -> int:
    """Channels per pixel of the width-unfolded copy of x that ``prob`` (staged to ``cg_to``
    channels) runs on (the kernel width's taps times the channels, padded to whole 16-byte
    chunks), or 0 where it runs on the channel-padded copy."""
    kw, cg = prob.kernel[2], prob.in_channels // prob.groups
    if prob.groups != 1 or kw == 1 or cg == cg_to:
        return 0
    chunk = 16 // itemsize(prob.dtype)
    width = -(-kw * cg // chunk) * chunk
    # (the unfolding kernel indexes a row's columns in 32 bits and tabulates them)
    if prob.out_spatial[2] * width >= 2 ** 30 or width > UNFOLD_MAX_WIDTH:
        return 0
    if UNFOLD_W is not None:
        return width if UNFOLD_W else 0
    return width if width * UNFOLD_GAIN <= kw * cg_to else 0


def _unfolded(prob: ImplicitConv, x, wt, w_cf: bool, width: int):
    """``prob`` on the width-unfolded copy of x (:func:`copy.unfold_width`: channels-last,
    ``width`` channels per output column, x[..., ow * SW + j * DW - PW, c] at channel j * C + c)
    and its weights as (K, taps / KW, width) to match."""
    k_out, c = prob.out_channels, prob.in_channels
    kw = prob.kernel[2]
    x_u = unfold_width(x, element_strides(x, prob.channels_last), prob.spatial,
                       prob.out_spatial[2], kw, prob.stride[2], prob.dilation[2], prob.pad_lo[2],
                       width)
    rows = math.prod(prob.kernel[:2])
    w_src = (wt.reshape(k_out, c, rows, kw).transpose(0, 2, 3, 1) if w_cf
             else wt.reshape(k_out, rows, kw, c))
    w_u = scratch((k_out, rows, width), wt.dtype)
    if width > kw * c:
        zero_fill(w_u)
    copy_into(w_src, _split_last(w_u, kw, c))
    unfolded = replace(prob, channels_last=True, in_channels=width,
                       spatial=prob.spatial[:2] + (prob.out_spatial[2],),
                       kernel=prob.kernel[:2] + (1,), stride=prob.stride[:2] + (1,),
                       dilation=prob.dilation[:2] + (1,), pad_lo=prob.pad_lo[:2] + (0,),
                       out_channels_last=prob.y_channels_last)
    return unfolded, x_u, w_u, False


def _split_last(a, parts: int, size: int):
    """The first ``parts * size`` elements of C-contiguous ``a``'s last dim, as a view with that
    dim split into (parts, size)."""
    from cupy.lib.stride_tricks import as_strided

    return as_strided(a, a.shape[:-1] + (parts, size),
                      a.strides[:-1] + (size * a.itemsize, a.itemsize))


def channels_last_copy(x, channels_last: bool, groups: int, cg_to: int):
    """x (channels-first or channels-last) as a C-contiguous channels-last copy whose groups'
    channels are zero-padded to ``cg_to`` each."""
    import cupy

    x_l = x if channels_last else cupy.moveaxis(x, 1, -1)
    cg = x_l.shape[-1] // groups
    if cg == cg_to:
        return contiguous(x_l)
    out = scratch(x_l.shape[:-1] + (groups * cg_to,), x.dtype)
    zero_fill(out)
    copy_into(x_l.reshape(x_l.shape[:-1] + (groups, cg)),
              out.reshape(out.shape[:-1] + (groups, cg_to))[..., :cg])
    return out


def padded_last_dim(a, size: int):
    """C-contiguous ``a`` with its last dim zero-padded to ``size`` (itself where it has it)."""
    if a.shape[-1] == size:
        return contiguous(a)
    out = scratch(a.shape[:-1] + (size,), a.dtype)
    zero_fill(out)
    copy_into(a, out[..., :a.shape[-1]])
    return out


def _staged(prob: ImplicitConv, x, wt, w_cf: bool, cg_to: int):
    """``prob`` on the channels-last copy of x with ``cg_to`` channels per group, and its
    weights as (K, taps, cg_to), zero for the padding channels."""
    if w_cf:
        k_out, cg = wt.shape[:2]
        wt = wt.reshape(k_out, cg, -1).transpose(0, 2, 1)
    x_l = channels_last_copy(x, prob.channels_last, prob.groups, cg_to)
    staged = replace(prob, channels_last=True, in_channels=prob.groups * cg_to,
                     out_channels_last=prob.y_channels_last)
    return staged, x_l, padded_last_dim(wt, cg_to), False


def launch_implicit_conv(prob: ImplicitConv, x, wt, bias, y, plan: GemmPlan | None = None,
                         w_cf: bool = False, *, z=None, act: int = NO_ACTIVATION) -> None:
    """y = act(conv(x, wt) + bias + z) with the implicit kernel (bias, z and the activation code
    ``act`` optional); wt is (K, taps, Cg) C-contiguous (or, with ``w_cf``, channels-first
    (K, Cg, taps) C-contiguous), y an (N, K, *out) or (N, *out, K) array whose rows
    :func:`fprop_out_map` can place (C-contiguous, a stride phase's rows of dx, or, within this
    function, a slab of rows of either: see :func:`row_slabs`) and z an array of y's shape and
    strides."""
    m, n, k, groups = prob.gemm
    if m > MAX_GEMM_ROWS:
        cl, y_cl = prob.channels_last, prob.y_channels_last
        for sub, index in row_slabs(prob):
            launch_implicit_conv(sub, slab_view(x, index[:1], cl), wt, bias,
                                 slab_view(y, index, y_cl), plan, w_cf,
                                 z=None if z is None else slab_view(z, index, y_cl), act=act)
        return
    device_id = y.data.device_id
    cg_to = staged_channels(prob, plan, device_id)
    if cg_to:
        width = unfolded_channels(prob, cg_to)
        if width:
            prob, x, wt, w_cf = _unfolded(prob, x, wt, w_cf, width)
        else:
            prob, x, wt, w_cf = _staged(prob, x, wt, w_cf, cg_to)
        m, n, k, groups = prob.gemm
    plan = _resolve(plan, lambda: plan_gemm(prob.dtype, m, n, k, groups, device_id, prob.precision),
                    "conv_fprop", (m, n, k, groups), prob.dtype,
                    gemm_math(prob.dtype, prob.precision, device_id), device_id)
    variant = (int(prob.channels_last),)
    fn, smem = _tiled_kernel(conv_fprop_module(prob.dtype, plan.tile, variant, plan.math, plan.blocks),
                             "conv_fprop", prob.dtype, variant + (plan.math,), plan)
    xs = element_strides(x, prob.channels_last)
    ys = element_strides(y, prob.y_channels_last)
    grid, block = _grid(plan.tile, m, n, groups * plan.splits)
    ws = _workspace(prob.dtype, plan.splits, groups * m * n, y)
    out = fprop_out_map(prob, ys)
    if out is None:
        raise ValueError("the implicit convolution cannot write an output with these strides")
    group_stride = n * out.col
    flags = (bias is not None, z is not None, act,
             0 if w_cf else MatrixView(wt, rs=k, ks=1).vec_level(n, k), w_cf,
             _x_vec_level(prob, x, xs), out_vectorizable(y, out, (group_stride,)))
    args = (x, wt, y, bias if bias is not None else y, z if z is not None else y,
            *_fprop_scalar_args(prob, xs, out, plan.splits, flags), ws)
    with y.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            _reduce(prob.dtype, ws, y, bias, plan.splits, groups, m, n, groups, 0, group_stride,
                    n, out, prob.y_channels_last, z, act)


def launch_conv_wgrad(prob: ImplicitConv, x, dy, dw, plan: GemmPlan | None = None) -> None:
    """Implicit-GEMM backward-weight of a channels-last ``prob``: dw (K, *kernel, Cg) from x and
    a C-contiguous dy, with no im2col buffer; split-K over the output pixels.  More than
    MAX_GEMM_ROWS pixels are summed slab by slab (:func:`row_slabs`), in a fixed order."""
    g = prob.groups
    kg, tcg = prob.out_channels // g, math.prod(prob.kernel) * prob.in_channels // g
    pixels = prob.batch * math.prod(prob.out_spatial)
    if pixels > MAX_GEMM_ROWS:
        not_preparable("slabs of backward-weight are summed with CuPy")
        part = None
        for i, (sub, index) in enumerate(row_slabs(prob)):
            if i == 1:
                part = scratch(dw.shape, dw.dtype)
            launch_conv_wgrad(sub, slab_view(x, index[:1], True), slab_view(dy, index, True),
                              dw if i == 0 else part, plan)
            if i:
                dw += part
        return
    device_id = dw.data.device_id
    plan = _resolve(plan, lambda: plan_gemm(prob.dtype, kg, tcg, pixels, g, device_id, prob.precision),
                    "conv_wgrad", (kg, tcg, pixels, g), prob.dtype,
                    gemm_math(prob.dtype, prob.precision, device_id), device_id)
    fn, smem = _tiled_kernel(conv_wgrad_module(prob.dtype, plan.tile, plan.math, plan.blocks), "conv_wgrad",
                             prob.dtype, (plan.math,), plan)
    xs = element_strides(x, True)
    out = OutMap(kg, 0, tcg, 1)
    grid, block = _grid(plan.tile, kg, tcg, g * plan.splits)
    ws = _workspace(prob.dtype, plan.splits, g * kg * tcg, dw)
    args = (x, dy, dw,
            *ints((prob.batch, prob.out_channels, g,
                   MatrixView(dy, rs=1, ks=prob.out_channels, si=kg).vec_level(kg, pixels),
                   _x_vec_level(prob, x, xs), out_vectorizable(dw, out, (kg * tcg,)),
                   prob.in_channels // g)),
            *ints(prob.spatial + prob.out_spatial + prob.kernel + prob.stride + prob.dilation
                  + prob.pad_lo),
            *int64s(xs), *ints((plan.splits,)), ws)
    with dw.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            _reduce(prob.dtype, ws, dw, None, plan.splits, g, kg, tcg, g, 0, kg * tcg, 0, out,
                    True)
