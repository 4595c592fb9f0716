"""Channels-last depthwise plans and launches (``kernel_src/depthwise/depthwise_cl.cu``).

Problems in the channels-last layout with one filter per channel (no channel multiplier) whose
source activations have unit channel stride run here: a thread owns VEC consecutive channels (a
16-byte vector where C and the arrays' alignment allow) and walks a run of ``DWCL_RX`` pixels
along W.  Everything else in channels-last (a channel multiplier, a channel stride other than 1,
filters too large for shared memory) keeps the gather kernels of :mod:`cupyconv._depthwise.launch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.dtypes import compute_dtype, itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (DEPTHWISE_CL_KF, DEPTHWISE_CL_STRIDES, DEPTHWISE_CL_VECS,
                                    DEPTHWISE_CL_WGRAD_VEC, KERNEL_CONSTANTS,
                                    depthwise_cl_module, depthwise_cl_two_rows,
                                    depthwise_cl_wgrad_module)
from cupyconv._core.launch import GRID_YZ_MAX, Launch, spatial_args

THREADS = KERNEL_CONSTANTS["DW_THREADS"]
RX = KERNEL_CONSTANTS["DWCL_RX"]        # destination pixels per run
WGRAD_ACC = KERNEL_CONSTANTS["DWCL_ACC"]  # backward-weight accumulators per thread
WGRAD_TAPS = KERNEL_CONSTANTS["DWCL_TAPS"]  # ... most taps per pass
MAX_CGB = 64        # channel vectors per block: 64 x 16 B = 1 KB of each pixel per block row
GRID_X_MAX = 2 ** 31 - 1
# Dynamic shared memory for the staged filters (as the tile kernels': the 48 KB a launch gets
# without opting in, less room for static arrays).
SMEM_LIMIT = 48 * 1024 - 1024
# Forward/backward-data: runs per thread (rounds) where the grid is large, since each block
# stages its filters once; rounds double while the grid keeps MIN_BLOCKS blocks (about four
# waves of two resident 256-thread blocks on a 132-SM H100: an estimate, not yet measured).
MIN_BLOCKS = 1024
MAX_ROUNDS = 4
# Backward-weight: the chunks fill one wave of resident blocks (WGRAD_MIN_BLOCKS per SM, the
# kernel's launch bounds), every block the same number of runs: a second, part-filled wave cost up
# to twice the time (ncu, session 18: 314 blocks where 264 fit at once, 1.19 waves).  Each
# thread takes at least WGRAD_MIN_RUNS runs.  WGRAD_PLAN_SMS: the multiprocessors planned for
# without a device (host tests, emulation); launches plan for their device's.
WGRAD_MIN_BLOCKS = KERNEL_CONSTANTS["DWCL_WGRAD_MIN_BLOCKS"]
WGRAD_WAVES = 1
WGRAD_MIN_RUNS = 1
# Backward-weight: most channel vectors per block (the block's other threads take more runs).
# The chunks of one wave are WGRAD_MIN_BLOCKS * SMs / (channel blocks * passes), and each writes
# C * taps partial sums that chunk_sum reads back: narrower blocks, fewer chunks, less of that
# traffic.  Measured on an H200 (19 MobileNetV2 / EfficientNet-B0 layers, benchmarks/notes/
# depthwise.md, session 30): geomean vs PyTorch at 64 / 32 / 16 / 8 vectors, fp32 1.52 / 1.62 /
# 1.56 / 1.49x, fp16 0.79 / 0.84 / 0.82 / 0.70x (960 ch 7^2 fp16 15.2 -> 13.3 us at 32).
WGRAD_MAX_CGB = 32
WGRAD_PLAN_SMS = 132


def _acc_bytes(dtype: str) -> int:
    return itemsize(compute_dtype(dtype))


def walk_variant(geom: ConvGeometry) -> tuple[int, int]:
    """(KF, S) of the kernel for ``geom``: the row walk (KF = KH = KW in 3, 5, 7; W stride S in 1,
    2; W dilation 1) or the any-shape variant (0, 0)."""
    g3 = geom.as_3d()
    _, kh, kw = g3["kernel"]
    sw, dw_ = g3["stride"][2], g3["dilation"][2]
    if kh == kw and kh in DEPTHWISE_CL_KF[1:] and sw in DEPTHWISE_CL_STRIDES and dw_ == 1:
        return kh, sw
    return 0, 0


def max_pass_vec(geom: ConvGeometry) -> int:
    """The most channels per thread of a forward / backward-data launch: 16-bit kernels larger
    than 3x3 take 4, not 8.  Measured on an H100 (benchmarks/experiments/README.md: exp_depthwise_cl.py, MobileNetV2 and
    EfficientNet-B0 depthwise layers, fp16 channels-last): 5x5 forward 1.4-1.9x faster at 4
    (e.g. 1152 ch 7^2 0.058 -> 0.037 ms; the 8-wide variants hold 128 registers per thread at
    half the threads), 3x3 at 8 up to 1.45x faster (144 ch 56^2 0.057 -> 0.040 ms)."""
    if itemsize(geom.dtype) == 2 and math.prod(geom.kernel) > 9:
        return 4
    return max(DEPTHWISE_CL_VECS[geom.dtype])


def vector_width(geom: ConvGeometry, operands, wgrad: bool = False) -> int:
    """Channels per thread for ``operands`` ((array, element_strides) pairs: the activations a
    kernel reads or writes), or 0 where the channels-last kernels do not apply: not channels-last,
    a channel multiplier, or a channel stride other than 1.  The widest of the dtype's
    instantiated widths that divides C, every base address (in elements) and every other stride
    (for backward-weight, ``wgrad``, at most DEPTHWISE_CL_WGRAD_VEC)."""
    if not geom.channels_last or geom.out_channels != geom.in_channels:
        return 0
    c = geom.in_channels
    if any(strides[1] != 1 and c > 1 for _, strides in operands):
        return 0
    item = itemsize(geom.dtype)
    widest = DEPTHWISE_CL_WGRAD_VEC if wgrad else max_pass_vec(geom)
    for vec in DEPTHWISE_CL_VECS[geom.dtype]:
        if vec > widest:
            continue
        if c % vec == 0 and all(a.data.ptr % (vec * item) == 0
                                and all(s % vec == 0 for i, s in enumerate(strides) if i != 1)
                                for a, strides in operands):
            return vec
    return 0  # (unreachable: every dtype instantiates VEC = 1)


@dataclass(frozen=True)
class ClPlan:
    """Work split of a channels-last launch: blocks of cgb channel vectors (threadIdx.x) by ``by``
    runs (threadIdx.y), ``cblocks`` blocks across the channels (grid y).  A run is RX destination
    pixels along W of ``ry`` consecutive rows; each group of ``ry`` rows (n, d, h) holds
    runs_per_row runs, the first starting ``lead`` columns before column 0."""

    kf: int
    s: int
    vec: int
    ry: int
    cgb: int
    by: int
    cblocks: int
    runs_per_row: int
    runs: int
    lead: int

    @property
    def block(self) -> tuple[int, int]:
        return (self.cgb, self.by)


def _channel_blocks(channels: int, vec: int, most: int) -> tuple[int, int] | None:
    """(cgb, cblocks): channel vectors per block (at most ``most``), split evenly over the
    fewest blocks; None if that grid is too tall or no vector fits."""
    groups = channels // vec
    most = min(most, MAX_CGB, groups)
    if most < 1:
        return None
    cblocks = math.ceil(groups / most)
    if cblocks > GRID_YZ_MAX:
        return None
    return math.ceil(groups / cblocks), cblocks


def _runs(planes: int, dst_h: int, dst_w: int, lead: int, ry: int = 1) -> tuple[int, int]:
    """(runs per row, runs) over ``planes`` planes of ``dst_h`` rows of ``dst_w`` pixels, ``ry``
    rows per run."""
    runs_per_row = math.ceil((dst_w + lead) / RX)
    return runs_per_row, planes * math.ceil(dst_h / ry) * runs_per_row


# Destination rows per run of the forward / backward-data row walk where H has unit stride and
# dilation (a module setting for sweeps).
MAX_RY = 2


def rows_per_run(geom: ConvGeometry, vec: int) -> int:
    """RY of a forward / backward-data launch at ``vec`` channels per thread: 2 on the row walk
    at unit stride and dilation in H where the kernel has the variant, else 1."""
    g3 = geom.as_3d()
    if (walk_variant(geom)[0] and g3["stride"][1] == 1 and g3["dilation"][1] == 1
            and depthwise_cl_two_rows(geom.dtype, vec)):
        return MAX_RY
    return 1


@memoized(2048)
def pass_plan(geom: ConvGeometry, transposed: bool, vec: int) -> ClPlan | None:
    """The forward (or, ``transposed``, backward-data) split for ``geom`` at ``vec`` channels per
    thread, or None where the block's filters do not fit in shared memory."""
    kf, s = walk_variant(geom)
    taps = math.prod(geom.kernel)
    fit = _channel_blocks(geom.in_channels, vec,
                          SMEM_LIMIT // (taps * vec * _acc_bytes(geom.dtype)))
    if fit is None:
        return None
    cgb, cblocks = fit
    g3 = geom.as_3d()
    dd, dh, dw_ = g3["spatial" if transposed else "out_spatial"]
    # backward-data's row walk starts runs where (x0 + PW) % S == 0 (depthwise_cl.cu: dwcl::walk)
    lead = g3["pad_lo"][2] % s if (transposed and kf) else 0
    ry = rows_per_run(geom, vec)
    runs_per_row, runs = _runs(geom.batch * dd, dh, dw_, lead, ry)
    return ClPlan(kf, s, vec, ry, cgb, THREADS // cgb, cblocks, runs_per_row, runs, lead)


def _rounds(plan: ClPlan) -> int:
    """Runs per thread: one, or up to MAX_ROUNDS on grids of many blocks."""
    rounds = 1
    while rounds < MAX_ROUNDS and math.ceil(plan.runs / (plan.by * rounds * 2)) >= MIN_BLOCKS:
        rounds *= 2
    return rounds


@dataclass(frozen=True)
class LaunchShape:
    """What a channels-last launch needs besides its function and arrays: the template variant
    (after the dtype and KF), grid, block, dynamic shared bytes and the packed scalars."""

    variant: tuple[int, ...]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    scalars: tuple[int, ...]


def pass_shape(geom: ConvGeometry, plan: ClPlan, transposed: bool, has_bias: bool,
               src_strides: tuple[int, ...]) -> LaunchShape | None:
    """The forward (backward-data) launch of ``plan``; src read through ``src_strides``
    (element_strides, channel stride 1).  None if the grid is too large."""
    rounds = _rounds(plan)
    blocks = math.ceil(plan.runs / (plan.by * rounds))
    if blocks > GRID_X_MAX:
        return None
    smem = math.prod(geom.kernel) * plan.cgb * plan.vec * _acc_bytes(geom.dtype)
    scalars = ((int(has_bias), geom.in_channels, plan.runs_per_row, rounds, plan.lead, plan.runs)
               + _spatial(geom) + tuple(src_strides))
    return LaunchShape((plan.s, plan.vec, int(transposed), plan.ry), (blocks, plan.cblocks),
                       plan.block, smem, scalars)


def _spatial(geom: ConvGeometry) -> tuple[int, ...]:
    """The spatial block of the kernels' scalars, as :func:`cupyconv._core.launch.spatial_args`."""
    return tuple(int(v) for v in spatial_args(geom))


def pass_launch(geom: ConvGeometry, plan: ClPlan, transposed: bool, has_bias: bool,
                src_strides: tuple[int, ...]) -> Launch | None:
    """The :class:`Launch` of :func:`pass_shape` (None if the grid is too large)."""
    shape = pass_shape(geom, plan, transposed, has_bias, src_strides)
    if shape is None:
        return None
    fn = jit.get_function(depthwise_cl_module(geom.dtype, plan.kf), "depthwise_cl", geom.dtype,
                          shape.variant)
    return Launch(fn, shape.grid, shape.block, shape.scalars, shape.smem, packed=True)


@dataclass(frozen=True)
class ClWgradPlan:
    """Backward-weight split: ``plan``'s blocks over the forward output's runs, ``chunks`` chunks
    of runs_per_chunk runs (grid x), ``passes`` passes of taps (grid z)."""

    plan: ClPlan
    chunks: int
    runs_per_chunk: int
    passes: int


def wgrad_taps_per_pass(vec: int) -> int:
    """Taps a backward-weight thread accumulates at once (TP in depthwise_cl_wgrad)."""
    return min(WGRAD_ACC // vec, WGRAD_TAPS)


@memoized(2048)
def wgrad_plan(geom: ConvGeometry, vec: int, sms: int = WGRAD_PLAN_SMS) -> ClWgradPlan | None:
    """The backward-weight split for ``geom`` at ``vec`` (at most DEPTHWISE_CL_WGRAD_VEC)
    channels per thread on a device of ``sms`` multiprocessors, or None where its grid does not
    fit."""
    if vec > DEPTHWISE_CL_WGRAD_VEC:
        raise ValueError(f"backward-weight takes at most {DEPTHWISE_CL_WGRAD_VEC} channels per thread")
    kf, s = walk_variant(geom)
    fit = _channel_blocks(geom.in_channels, vec, WGRAD_MAX_CGB)
    if fit is None:
        return None
    cgb, cblocks = fit
    g3 = geom.as_3d()
    od, oh, ow = g3["out_spatial"]
    runs_per_row, runs = _runs(geom.batch * od, oh, ow, 0)
    plan = ClPlan(kf, s, vec, 1, cgb, THREADS // cgb, cblocks, runs_per_row, runs, 0)
    tp = wgrad_taps_per_pass(vec)
    kd, kh, _ = g3["kernel"]
    if kf:  # whole kernel rows per pass (PR in the kernel)
        passes = math.ceil(kd * kh / max(1, tp // kf))
    else:
        passes = math.ceil(math.prod(geom.kernel) / tp)
    if passes > GRID_YZ_MAX:
        return None
    wave = sms * WGRAD_MIN_BLOCKS * WGRAD_WAVES  # blocks resident at once
    chunks = max(1, min(math.ceil(runs / (plan.by * WGRAD_MIN_RUNS)), wave // (cblocks * passes)))
    runs_per_chunk = math.ceil(runs / chunks)
    chunks = math.ceil(runs / runs_per_chunk)
    return ClWgradPlan(plan, chunks, runs_per_chunk, passes)


def wgrad_shape(geom: ConvGeometry, wp: ClWgradPlan, x_strides: tuple[int, ...],
                dy_strides: tuple[int, ...]) -> LaunchShape:
    """The partial-sum launch of ``wp``: writes (chunks, C, taps) sums in the compute type."""
    p = wp.plan
    smem = p.cgb * p.by * p.vec * _acc_bytes(geom.dtype)
    scalars = ((geom.in_channels, p.runs_per_row, p.runs, wp.runs_per_chunk) + _spatial(geom)
               + tuple(x_strides) + tuple(dy_strides) + divmod(p.by, p.runs_per_row))
    return LaunchShape((p.s, p.vec), (wp.chunks, p.cblocks, wp.passes), p.block, smem, scalars)


def wgrad_launch(geom: ConvGeometry, wp: ClWgradPlan, x_strides: tuple[int, ...],
                 dy_strides: tuple[int, ...]) -> Launch:
    """The :class:`Launch` of :func:`wgrad_shape`."""
    shape = wgrad_shape(geom, wp, x_strides, dy_strides)
    fn = jit.get_function(depthwise_cl_wgrad_module(geom.dtype, wp.plan.kf), "depthwise_cl_wgrad",
                          geom.dtype, shape.variant)
    return Launch(fn, shape.grid, shape.block, shape.scalars, shape.smem, packed=True)


def packed_vector_width(geom: ConvGeometry) -> int:
    """Channels per thread of a forward / backward-data launch whose activations are laid out as
    conv makes them (C-contiguous, from an aligned allocation): what :func:`vector_width` returns
    for such arrays, known without them."""
    return next(v for v in DEPTHWISE_CL_VECS[geom.dtype]
                if v <= max_pass_vec(geom) and geom.in_channels % v == 0)


def packed_strides(geom: ConvGeometry, spatial: tuple[int, ...]) -> tuple[int, ...]:
    """The element strides (lead, channel, d, h, w; as ``launch.element_strides``) of a
    C-contiguous channels-last activation of ``geom``'s channels and ``spatial`` extents."""
    step, spatial_strides = geom.in_channels, []
    for n in reversed(spatial):
        spatial_strides.insert(0, step)
        step *= n
    return (step, 1, *([0] * (3 - len(spatial))), *spatial_strides)


def applies(geom: ConvGeometry) -> bool:
    """Whether the channels-last kernels take ``geom`` when its arrays are laid out as conv makes
    them (C-contiguous, aligned): for the cost model, which sees no arrays."""
    if not geom.channels_last or geom.out_channels != geom.in_channels:
        return False
    return pass_plan(geom, False, packed_vector_width(geom)) is not None
