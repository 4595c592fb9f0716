"""The kernel registry: every compiled specialization the package may launch, named in one place.

A :class:`~cupyconv._core.kernel_module.KernelModule` is the unit of compilation (see there).  The
JIT layer compiles these at first use on the device; the GPU-free compile check
(``cupyconv._cli.compile_check``) compiles every entry of :data:`REGISTRY` for NVIDIA and AMD
targets, so CI proves that everything the package can launch builds on both vendors.
"""

from __future__ import annotations

from cupyconv._core.kernel_module import DTYPES, KERNEL_CONSTANTS, KernelModule

# Strided N-d copy (weight transforms, channel moves, scatters of the launch paths) and the
# block-diagonal weights of merged groups.
STRIDED_COPY = KernelModule("common/copy.cu", ("strided_copy", "transpose_copy", "unfold_width",
                                               "block_diagonal"))
DIRECT_CONV = KernelModule("direct/direct_conv.cu", ("direct_conv", "direct_dgrad"))
# Grouped direct kernel (grouped_conv.cu): register tiles (TK output channels, TW pixels) per
# thread; which one runs is the plan's choice (cupyconv._direct.grouped).  One binary per dtype.
GROUPED_TILES = ((4, 8), (8, 4), (16, 4), (16, 2))


def grouped_module(dtype: str) -> KernelModule:
    return KernelModule("direct/grouped_conv.cu", ("grouped_conv",), (dtype,), variants=GROUPED_TILES)


# Residual and activation of the fused epilogue as a pass of their own (after the depthwise kernels).
EPILOGUE_PASS = KernelModule("common/epilogue_pass.cu", ("epilogue_pass",))
IM2COL = KernelModule("gemm/im2col.cu", ("im2col", "im2col_rows"))
SPLITK_REDUCE = KernelModule("gemm/splitk_reduce.cu", ("splitk_reduce",))
COL2IM = KernelModule("gemm/col2im.cu", ("col2im", "col2im_rows"))
# Depthwise kernels (depthwise.cu): forward (transposed = 0) and backward-data (transposed = 1).
# The tile kernels have fixed-size variants for square unit-stride kernels (KF = 3, 5, 7 for
# forward/backward-data, 3, 5 for backward-weight; 0 = any shape): one binary per (dtype, pass).
DEPTHWISE_KF = (0, 3, 5, 7)
DEPTHWISE_WGRAD_KF = (0, 3, 5)


def depthwise_tile_module(dtype: str, transposed: int) -> KernelModule:
    return KernelModule("depthwise/depthwise.cu", ("depthwise_tile",), (dtype,),
                        variants=tuple((transposed, kf) for kf in DEPTHWISE_KF))


def depthwise_gather_module(dtype: str) -> KernelModule:
    return KernelModule("depthwise/depthwise.cu", ("depthwise_gather",), (dtype,), variants=((0,), (1,)))


def depthwise_wgrad_module(dtype: str) -> KernelModule:
    return KernelModule("depthwise/depthwise.cu", ("depthwise_wgrad_tile",), (dtype,),
                        variants=tuple((kf,) for kf in DEPTHWISE_WGRAD_KF))


DEPTHWISE_WGRAD_GATHER = KernelModule("depthwise/depthwise.cu", ("depthwise_wgrad_gather",))
# Backward-weight's second stage: the per-chunk partial sums added in a fixed order.
CHUNK_SUM = KernelModule("depthwise/chunk_sum.cu", ("chunk_sum",))
# Channels-last depthwise kernels (depthwise_cl.cu), mult == 1: one binary per (dtype, KF) and
# pass kind.  KF = 3, 5, 7 run the row walk for W strides S = 1, 2; KF = 0 any shape (S = 0).
# VEC: channels per thread, the widest of DEPTHWISE_CL_VECS[dtype] that C and the alignment allow
# (16 bytes first; the narrower ones for odd channel counts and misaligned views).  Backward-weight
# keeps a 3x3 filter's taps of its channels in DWCL_ACC registers: at most DWCL_ACC // 9 channels.
DEPTHWISE_CL_KF = (0, 3, 5, 7)
DEPTHWISE_CL_STRIDES = (1, 2)
DEPTHWISE_CL_VECS = {"float16": (8, 4, 1), "bfloat16": (8, 4, 1), "float32": (4, 1), "float64": (2, 1)}
DEPTHWISE_CL_WGRAD_VEC = KERNEL_CONSTANTS["DWCL_ACC"] // 9


def _cl_strides(kf: int) -> tuple[int, ...]:
    return DEPTHWISE_CL_STRIDES if kf else (0,)


def depthwise_cl_two_rows(dtype: str, vec: int) -> bool:
    """Whether the row walk has an RY = 2 variant (two destination rows per run) at ``vec``
    channels per thread: vectors of at most 16 bytes in the compute type (float32 for 16-bit
    types).  Wider ones spilled (ptxas, sm_90: 8 halves, 260-670 bytes of spills)."""
    return vec * (8 if dtype == "float64" else 4) <= 16


def depthwise_cl_module(dtype: str, kf: int) -> KernelModule:
    """Forward and backward-data (TRANSPOSED = 0, 1) of the channels-last kernels for ``kf``:
    template <T, KF, S, VEC, TRANSPOSED, RY>, RY = 2 where :func:`depthwise_cl_two_rows`."""
    return KernelModule("depthwise/depthwise_cl.cu", ("depthwise_cl",), (dtype,), tile=(kf,),
                        variants=tuple((s, v, t, ry) for s in _cl_strides(kf)
                                       for v in DEPTHWISE_CL_VECS[dtype] for t in (0, 1)
                                       for ry in ((1, 2) if kf and depthwise_cl_two_rows(dtype, v)
                                                  else (1,))))


def depthwise_cl_wgrad_module(dtype: str, kf: int) -> KernelModule:
    """Backward-weight of the channels-last kernels for ``kf``."""
    return KernelModule("depthwise/depthwise_cl.cu", ("depthwise_cl_wgrad",), (dtype,), tile=(kf,),
                        variants=tuple((s, v) for s in _cl_strides(kf)
                                       for v in DEPTHWISE_CL_VECS[dtype]
                                       if v <= DEPTHWISE_CL_WGRAD_VEC))


# Fused depthwise -> pointwise: one instantiation per pointwise outputs per thread (KT; a block
# computes 8 * KT outputs), so small pointwise layers do not pay for idle accumulators.
SEPARABLE_KT = (1, 2, 3, 4, 6, 8)


def separable_module(dtype: str, kt: int) -> KernelModule:
    """The fused separable kernel with ``kt`` pointwise outputs per thread: any-kernel and fixed
    3x3 variants (KF = 0, 3)."""
    return KernelModule("depthwise/separable.cu", ("separable_fused",), (dtype,), variants=((kt, 0), (kt, 3)))

# GEMM main-loop kinds (the kernels' MATH template argument, gemm_mma.cuh): the SIMT loop, the
# tensor-core loop on the storage type (float16, bfloat16), the tensor-core loop on float32
# rounded to TF32, and the Hopper loop (wgmma; compute capability 9.0) on float16 and bfloat16 or
# on float32 rounded to TF32.
MATH_SIMT, MATH_MMA, MATH_TF32, MATH_WGMMA, MATH_WGMMA_TF32 = 0, 1, 2, 3, 4
WGMMA_KINDS = (MATH_WGMMA, MATH_WGMMA_TF32)

# GEMM tile configurations (BM, BN, BK, TM, TN), 256 threads each; on the SIMT loop float16 and
# bfloat16 run on the float32 tiles (they accumulate and stage in float32).  Which one runs is the
# plan's choice.  TM x TN is each thread's share of the accumulator tile in the epilogue.
GEMM_TILES = {
    "float32": ((128, 128, 8, 8, 8), (128, 64, 16, 8, 4), (64, 64, 16, 4, 4)),
    "float64": ((64, 64, 16, 4, 4),),  # double tiles: registers and the 48 KB static limit
}
GEMM_TILES["float16"] = GEMM_TILES["bfloat16"] = GEMM_TILES["float32"]
# Tensor-core tiles: k-slices of 64 bytes in shared memory (32 16-bit values, 16 TF32 floats),
# which ldmatrix reads conflict-free with 16 bytes of row padding.
MMA_TILES = {
    MATH_MMA: ((128, 128, 32, 8, 8), (128, 64, 32, 8, 4), (64, 64, 32, 4, 4)),
    MATH_TF32: ((128, 128, 16, 8, 8), (128, 64, 16, 8, 4), (64, 64, 16, 4, 4)),
    # wgmma reads k-slices of exactly 128 bytes (the swizzle width): 64 16-bit values, 32 floats
    MATH_WGMMA: ((128, 128, 64, 8, 8), (128, 64, 64, 8, 4), (64, 64, 64, 4, 4)),
    MATH_WGMMA_TF32: ((128, 128, 32, 8, 8), (128, 64, 32, 8, 4), (64, 64, 32, 4, 4)),
}
# Dtypes each tensor-core kind serves.
MMA_DTYPES = {MATH_MMA: ("float16", "bfloat16"), MATH_TF32: ("float32",),
              MATH_WGMMA: ("float16", "bfloat16"), MATH_WGMMA_TF32: ("float32",)}


def gemm_tiles(dtype: str, math: int) -> tuple[tuple[int, ...], ...]:
    """The tile configurations of ``dtype`` on main loop ``math``."""
    return GEMM_TILES[dtype] if math == MATH_SIMT else MMA_TILES[math]


def wgmma_feeds(tile: tuple[int, ...], math: int, b_kmajor: bool) -> bool:
    """Whether the Hopper loop runs ``tile`` with B loaded K-major (``b_kmajor``) or MN-major,
    mirroring ``WgmmaTile::feeds`` (gemm_mma.cuh): an MN-major 16-bit B tile of a warpgroup must
    span whole 64-column atoms.  A tile it cannot feed runs the register-staged mma.sync loop,
    which measured 3.5-10x slower (backward-weight's 64 x 64 tile, benchmarks/notes/gemm.md,
    session 29).  TF32 takes any tile (MN-major slices are transposed once landed); the other
    loops are not concerned."""
    if math != MATH_WGMMA or b_kmajor:
        return True
    bm, bn, _, tm, tn = tile
    warpgroups = (bm // tm) * (bn // tn) // 128
    columns_per_warpgroup = bn // (warpgroups // (bm // 64))
    return columns_per_warpgroup % 64 == 0


def mma_smem_bytes(tile: tuple[int, ...], math: int, hip: bool, blocks: int = 1) -> int:
    """Dynamic shared memory of a tensor-core GEMM kernel, the largest of what its loops take
    (gemm_mma.cuh, which this mirrors): the resident k-slices of A and B -- rows of BK elements
    plus 16 bytes of padding (``MmaTile``; the Hopper kind's fallback keeps two), or 128-byte
    rows from a 1024-byte aligned base (``WgmmaTile``, WGMMA_STAGES[blocks] of them) -- and the
    fp32 hand-off buffer of BM / (TM / 4) rows (``HandOff``).  0 for the SIMT loop (static
    shared memory)."""
    if math == MATH_SIMT:
        return 0
    bm, bn, bk, tm, _ = tile
    item = 4 if math in (MATH_TF32, MATH_WGMMA_TF32) else 2
    stages = KERNEL_CONSTANTS["MMA_STAGES_AMD" if hip else "MMA_STAGES"]
    hand_off = bm // (tm // 4) * (bn + 4) * 4
    if math in WGMMA_KINDS:
        return max(WGMMA_STAGES[blocks] * (bm + bn) * bk * item + 1024,
                   2 * (bm + bn) * (bk * item + 16), hand_off)
    return max(stages * (bm + bn) * (bk * item + 16), hand_off)


# The dense GEMM's 128x128 tile with 16-deep k-slices: 8-10 % faster than BK = 8 on long k ranges
# (4096^3, 8192^3), slower on the short ones of conv layers (benchmarks/notes/gemm.md,
# "issue 3: tiled GEMM").  The implicit conv kernel does not use it (it spills under that kernel's
# register cap).  SIMT loop only.
LONG_K_TILE = (128, 128, 16, 8, 8)
LONG_K = 2048  # per-block k range from which the dense GEMM switches to LONG_K_TILE
# (A k-contiguous, B k-contiguous) combinations the launchers use: row-major A @ row-major B,
# and the two operand orders of convolution through GEMM.
GEMM_VARIANTS = ((1, 0), (1, 1), (0, 1))


CONV_FPROP_VARIANTS = ((0,), (1,))  # channels-last off / on


# One binary per (dtype, tile, variant, main loop): a GEMM instantiation takes about a second to
# compile, and a first call should pay for only the one it runs.  CC_MIN_BLOCKS is the register
# cap (blocks per multiprocessor): measured on an H200, the dense GEMM is 7 % faster uncapped at
# 4096^3-8192^3, while the implicit conv kernel is up to 4 % faster with two blocks
# (benchmarks/notes/gemm.md, "issue 3: tiled GEMM").  The mma.sync loops hold their fragments and
# the next slice in registers: uncapped.  The Hopper loop comes in two builds, one resident block
# per multiprocessor (uncapped, WGMMA_STAGES[1] slices) for long k ranges and two (128 registers,
# WGMMA_STAGES[2] slices) for short ones, where one block's prologue and epilogue overlap the
# other's main loop (the plan picks: _gemm.plans.WGMMA_SHORT_K).
WGMMA_STAGES = {1: 4, 2: 3}  # two 128x128 blocks of 3 slices fit in 228 KB of shared memory


def _build(math: int, simt_blocks: int, blocks: int) -> dict:
    """The defines of a GEMM-family module, and the vendors that can launch it (wgmma modules
    run on NVIDIA compute capability 9.0 only; the AMD compile check skips them)."""
    if math == MATH_SIMT:
        return {"defines": (("CC_MIN_BLOCKS", simt_blocks),)}
    if math in WGMMA_KINDS:
        return {"defines": (("CC_MIN_BLOCKS", blocks), ("CC_WGMMA_STAGES", WGMMA_STAGES[blocks])),
                "vendors": ("nvidia",)}
    return {"defines": (("CC_MIN_BLOCKS", 1),)}


# The sources of the GEMM-family modules below: their variant's last template argument is the
# main-loop kind (MATH_*).
GEMM_SOURCES = ("gemm/gemm.cu", "gemm/conv_fprop.cu", "gemm/conv_wgrad.cu")


def main_loop(module: KernelModule) -> int | None:
    """The GEMM main-loop kind (``MATH_*``) a GEMM-family module is built on; None for the
    modules of other families."""
    return module.variants[0][-1] if module.source in GEMM_SOURCES else None


def gemm_module(dtype: str, tile: tuple[int, ...], variant: tuple[int, ...],
                math: int = MATH_SIMT, blocks: int = 1) -> KernelModule:
    return KernelModule("gemm/gemm.cu", ("gemm",), (dtype,), tile=tile,
                        variants=(tuple(variant) + (math,),), **_build(math, 1, blocks))


def conv_fprop_module(dtype: str, tile: tuple[int, ...], variant: tuple[int, ...],
                      math: int = MATH_SIMT, blocks: int = 1) -> KernelModule:
    return KernelModule("gemm/conv_fprop.cu", ("conv_fprop",), (dtype,), tile=tile,
                        variants=(tuple(variant) + (math,),), **_build(math, 2, blocks))


def conv_wgrad_module(dtype: str, tile: tuple[int, ...], math: int = MATH_SIMT,
                      blocks: int = 1) -> KernelModule:
    return KernelModule("gemm/conv_wgrad.cu", ("conv_wgrad",), (dtype,), tile=tile,
                        variants=((math,),), **_build(math, 2, blocks))


def _gemm_family(dtype: str, math: int):
    """Every GEMM-family module of ``dtype`` on main loop ``math``."""
    for tile in gemm_tiles(dtype, math):
        for blocks in (1, 2) if math in WGMMA_KINDS else (1,):
            yield from (gemm_module(dtype, tile, v, math, blocks) for v in GEMM_VARIANTS)
            yield from (conv_fprop_module(dtype, tile, v, math, blocks) for v in CONV_FPROP_VARIANTS)
            yield conv_wgrad_module(dtype, tile, math, blocks)
    if math == MATH_SIMT and dtype != "float64":
        yield from (gemm_module(dtype, LONG_K_TILE, v) for v in GEMM_VARIANTS)


# The Hopper GEMM fed by TMA (gemm/gemm_tma.cu; host side cupyconv._gemm.tma): template
# <T, BM, BN, BK, STAGES, A_MODE, B_KMAJOR>, a tile (BM, BN, BK, STAGES) and a mode of A per
# binary: TMA_A_KMAJOR (row-major [M, K]), TMA_A_MNMAJOR (stored [K, M], backward-weight's dy^T)
# or TMA_A_IM2COL (a convolution's channels-last input through TMA's im2col mode, the weights
# as a 3-D map), or TMA_B_IM2COL (backward-weight: dy^T as A, x through the im2col mode as B).
# Each binary holds both orientations of B (0: row-major [K, N], 1: stored [N, K]; in the
# im2col mode 1 is the forward's weights, 0 backward-data's), but TMA_B_IM2COL's, whose B is
# MN-major only.  128 x 256 with 4 stages of 48 KB, or 128 x 128 with 6 of 32 KB: 192 KB of
# the 227 KB a block may take; 128 x 64 (outputs of at most 64 channels: half the products of a
# 128-column tile wasted there) with 8 of 24 KB.  sm_90a only (wgmma, TMA, setmaxnreg): NVIDIA's
# compile check builds it for sm_80 too, where it is a trapping stub.
TMA_TILES = ((128, 256, 64, 4), (128, 128, 64, 6), (128, 64, 64, 8))
TMA_DTYPES = ("float16", "bfloat16")
# TF32 (float32 operands, TF32 products): the same tiles in bytes (k slices of 32 floats), A
# K-major (dense or through the im2col mode) and B K-major only.  Its fp32 result is stored from
# the fragments, with no epilogue staging rows in shared memory.
TMA_TF32_TILES = ((128, 256, 32, 4), (128, 128, 32, 6), (128, 64, 32, 8))
TMA_TF32_DTYPE = "float32"
TMA_A_MNMAJOR, TMA_A_KMAJOR, TMA_A_IM2COL = 0, 1, 2
# Backward-weight: A = dy^T (MN-major, as TMA_A_MNMAJOR), B = im2col(x), MN-major (B orientation 0).
TMA_B_IM2COL = 3


def gemm_tma_module(dtype: str, tile: tuple[int, ...] = TMA_TILES[0],
                    a_mode: int = TMA_A_KMAJOR) -> KernelModule:
    if dtype == TMA_TF32_DTYPE:
        b_orientations = ((1,),)  # (TF32: K-major B only)
    elif a_mode == TMA_B_IM2COL:
        b_orientations = ((0,),)  # (backward-weight's im2col B: MN-major)
    else:
        b_orientations = ((0,), (1,))
    return KernelModule("gemm/gemm_tma.cu", ("gemm_tma",), (dtype,),
                        tile=tuple(tile) + (int(a_mode),), variants=b_orientations,
                        vendors=("nvidia",))


# Signal API filter kernel: one module per compute type, one instantiation per filter-width bucket.
FILTER_WIDTHS = (4, 8, 16, 32)
FILTER_DTYPES = ("float32", "float64", "complex64", "complex128", "uint64")
FILTER_DIRECT = {d: KernelModule("signal/filter_direct.cu", ("filter_direct",), (d,),
                                 variants=tuple((w,) for w in FILTER_WIDTHS)) for d in FILTER_DTYPES}
# Its fast special case for real 2-D planes (filter_plane.cu): one instantiation per width bucket
# (any filter size up to it) and one per common square filter fixed at compile time.
PLANE_WIDTHS = (4, 8, 16)
PLANE_SQUARES = (3, 5, 7)
PLANE_DTYPES = ("float32", "float64")


def plane_width(kw: int):
    """The smallest filter_plane width bucket holding ``kw`` columns (None: too wide)."""
    return next((w for w in PLANE_WIDTHS if w >= kw), None)


def plane_rows_per_thread(itemsize: int) -> int:
    """RY of the plane row walk (``fp::rows_per_thread`` in plane_walk.cuh)."""
    return KERNEL_CONSTANTS["FP_RY_NARROW" if itemsize <= 4 else "FP_RY_WIDE"]


PLANE_VARIANTS = tuple((w, 0) for w in PLANE_WIDTHS) + tuple((plane_width(k), k) for k in PLANE_SQUARES)
FILTER_PLANE = {d: KernelModule("signal/filter_plane.cu", ("filter_plane",), (d,), variants=PLANE_VARIANTS)
                for d in PLANE_DTYPES}
# The depthwise forward on the same row walk (depthwise_plane.cu): the same width buckets and
# squares; float16 and bfloat16 too (computed in float32).  Template <T, KWB, KF, S, E>: here
# stride S = 1 and window offset E = 0 (no defaults: HIPRTC finds no lowered name for a name
# expression that leaves a defaulted argument out).
DEPTHWISE_PLANE = {d: KernelModule("depthwise/depthwise_plane.cu", ("depthwise_plane",), (d,),
                                   variants=tuple(v + (1, 0) for v in PLANE_VARIANTS))
                   for d in DTYPES}
# Its backward-weight at stride 1: 3x3 and 5x5 (a lane keeps KF x KF sums in registers).
PLANE_WGRAD_STRIDE1_KF = (3, 5)
DEPTHWISE_PLANE_WGRAD = {d: KernelModule("depthwise/depthwise_plane.cu", ("depthwise_plane_wgrad",), (d,),
                                         variants=tuple((plane_width(kf), kf, 1, 0)
                                                        for kf in PLANE_WGRAD_STRIDE1_KF))
                         for d in DTYPES}
# Stride 2 in H and W on the same kernels, square filters only: one binary per (dtype, KF, pass),
# one instantiation per window offset E = -PW mod 4 (plane_walk.cuh), so a first call compiles
# four small kernels, not every filter size's.  Backward-weight: 3x3 and 5x5.
PLANE_STRIDE2_KF = (3, 5, 7)
PLANE_STRIDE2_WGRAD_KF = (3, 5)
# The plane backward-weight kernel's filter sizes, by stride.
PLANE_WGRAD_KF = {1: PLANE_WGRAD_STRIDE1_KF, 2: PLANE_STRIDE2_WGRAD_KF}


def depthwise_plane_stride2_module(dtype: str, kf: int, wgrad: bool = False) -> KernelModule:
    """The stride-2 plane kernel (forward, or backward-weight if ``wgrad``) for ``kf`` x ``kf``
    filters: template ``<T, KWB, KF, 2, E>``, variants E = 0 .. 3."""
    template = "depthwise_plane_wgrad" if wgrad else "depthwise_plane"
    return KernelModule("depthwise/depthwise_plane.cu", (template,), (dtype,),
                        tile=(plane_width(kf), kf, 2), variants=tuple((e,) for e in range(4)))


# Channels-first depthwise on bands of rows staged in shared memory (depthwise_bands.cu): filters
# of at most KF x KF taps, one binary per (dtype, KF) with the compute strides CS = 1, 2.
DEPTHWISE_BANDS_KF = (3, 5, 7)


def depthwise_bands_module(dtype: str, kf: int) -> KernelModule:
    """The band kernel for filters of at most ``kf`` x ``kf`` taps: template <T, KF, CS, UP>
    (forward at stride 1 or 2, backward-data at stride 2 by phases)."""
    return KernelModule("depthwise/depthwise_bands.cu", ("depthwise_bands",), (dtype,), tile=(kf,),
                        variants=((1, 1), (2, 1), (1, 2)))


REGISTRY: tuple[KernelModule, ...] = tuple(FILTER_DIRECT.values()) + tuple(FILTER_PLANE.values()) + tuple(
    DEPTHWISE_PLANE.values()) + tuple(DEPTHWISE_PLANE_WGRAD.values()) + tuple(
    depthwise_plane_stride2_module(dtype, kf, wgrad) for dtype in DTYPES
    for wgrad, kfs in ((False, PLANE_STRIDE2_KF), (True, PLANE_STRIDE2_WGRAD_KF)) for kf in kfs) + tuple(
    depthwise_bands_module(dtype, kf) for dtype in DTYPES for kf in DEPTHWISE_BANDS_KF) + tuple(
    grouped_module(dtype) for dtype in DTYPES) + (
    STRIDED_COPY, DIRECT_CONV, EPILOGUE_PASS, IM2COL, COL2IM, DEPTHWISE_WGRAD_GATHER, CHUNK_SUM, SPLITK_REDUCE) + tuple(
    separable_module(dtype, kt) for dtype in DTYPES for kt in SEPARABLE_KT) + tuple(
    m for dtype in DTYPES for m in (depthwise_tile_module(dtype, 0), depthwise_tile_module(dtype, 1),
                                    depthwise_gather_module(dtype), depthwise_wgrad_module(dtype))
) + tuple(m for dtype in DTYPES for kf in DEPTHWISE_CL_KF
          for m in (depthwise_cl_module(dtype, kf), depthwise_cl_wgrad_module(dtype, kf))) + tuple(m for dtype in DTYPES for m in _gemm_family(dtype, MATH_SIMT)) + tuple(
    m for math, dtypes in MMA_DTYPES.items() for dtype in dtypes for m in _gemm_family(dtype, math)) + tuple(
    gemm_tma_module(dtype, tile, a_mode) for dtype in TMA_DTYPES for tile in TMA_TILES
    for a_mode in (TMA_A_KMAJOR, TMA_A_MNMAJOR, TMA_A_IM2COL, TMA_B_IM2COL)) + tuple(
    gemm_tma_module(TMA_TF32_DTYPE, tile, a_mode) for tile in TMA_TF32_TILES
    for a_mode in (TMA_A_KMAJOR, TMA_A_IM2COL))
