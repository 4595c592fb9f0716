"""The tensor-core plan on the host (no GPU): its shared memory, tile sets and the guard against
a forced tile of another main loop."""

import pytest

from cupyconv._core.kernels import (GEMM_TILES, MATH_MMA, MATH_SIMT, MATH_TF32, MMA_TILES,
                                    gemm_tiles, mma_smem_bytes)
from cupyconv._core.precision import PRECISIONS, resolve_precision
from cupyconv._gemm.launch import _resolve
from cupyconv._gemm.plans import GemmPlan


def test_tiles_per_main_loop():
    assert gemm_tiles("float16", MATH_SIMT) == GEMM_TILES["float16"]
    assert gemm_tiles("bfloat16", MATH_MMA) == MMA_TILES[MATH_MMA]
    # every tensor-core slice is 64 bytes: 32 16-bit values or 16 TF32 floats
    assert all(t[2] * 2 == 64 for t in MMA_TILES[MATH_MMA])
    assert all(t[2] * 4 == 64 for t in MMA_TILES[MATH_TF32])


def test_shared_memory_of_the_tensor_core_loops():
    # 4 slices of (128 + 128) rows of 64 + 16 bytes on NVIDIA; 2 on AMD; none for SIMT
    assert mma_smem_bytes((128, 128, 32, 8, 8), MATH_MMA, hip=False) == 4 * 256 * 80
    assert mma_smem_bytes((128, 128, 16, 8, 8), MATH_TF32, hip=True) == 2 * 256 * 80
    assert mma_smem_bytes((128, 128, 8, 8, 8), MATH_SIMT, hip=False) == 0
    # the hand-off buffer (64 rows of 132 floats) fits under the AMD loop's slices
    assert mma_smem_bytes((128, 128, 32, 8, 8), MATH_MMA, hip=True) == max(2 * 256 * 80, 64 * 132 * 4)


def test_a_forced_tile_of_another_main_loop_is_refused():
    plan = GemmPlan(GEMM_TILES["float16"][0], 1, 0.0)
    with pytest.raises(ValueError, match="not one of the float16 tiles"):
        _resolve(plan, None, "gemm", (1, 1, 1, 1), "float16", MATH_MMA, 0)
    ok = _resolve(GemmPlan(MMA_TILES[MATH_MMA][1], 2, 0.0), None, "gemm", (1, 1, 1, 1),
                  "float16", MATH_MMA, 0)
    assert ok.math == MATH_MMA and ok.splits == 2


def test_precision_argument(monkeypatch):
    monkeypatch.delenv("CUPYCONV_ALLOW_TF32", raising=False)
    assert PRECISIONS == ("exact", "tf32")
    assert resolve_precision(None, "float32") == "exact"
    assert resolve_precision("tf32", "float32") == "tf32"
    assert resolve_precision("tf32", "float64") == "exact"  # TF32 concerns float32 only
    monkeypatch.setenv("CUPYCONV_ALLOW_TF32", "1")
    assert resolve_precision(None, "float32") == "tf32"
    assert resolve_precision("exact", "float32") == "exact"
    for bad in ("TF32", "fp16", 1):
        with pytest.raises(ValueError, match="precision must be one of"):
            resolve_precision(bad, "float32")


def test_hopper_build_follows_the_k_range(monkeypatch):
    """The Hopper loop's two-block build for short k ranges per block where there are blocks
    enough to pair, one block otherwise; other loops always one; the build's defines and shared
    memory follow."""
    from cupyconv._core.kernels import MATH_WGMMA, WGMMA_STAGES, conv_fprop_module
    from cupyconv._gemm import plans
    from cupyconv._gemm.plans import WGMMA_SHORT_K, with_build

    monkeypatch.setattr(plans, "sm_count", lambda device_id: 132)
    tile = MMA_TILES[MATH_WGMMA][0]
    many = 128 * 133  # rows for 133 row tiles: more blocks than multiprocessors

    def blocks(splits, m, k):
        return with_build(GemmPlan(tile, splits, 0.0, MATH_WGMMA), (m, 128, k, 1), 0).blocks

    assert blocks(1, many, WGMMA_SHORT_K) == 2
    assert blocks(1, many, WGMMA_SHORT_K + 1) == 1
    assert blocks(4, many, 4 * WGMMA_SHORT_K) == 2  # per split
    assert blocks(1, 128 * 132, WGMMA_SHORT_K) == 1  # one block per multiprocessor: no pair
    assert blocks(2, 128 * 66, WGMMA_SHORT_K) == 1   # (splits count as blocks)
    assert blocks(2, 128 * 67, WGMMA_SHORT_K) == 2
    assert with_build(GemmPlan(MMA_TILES[MATH_MMA][0], 1, 0.0, MATH_MMA), (many, 128, 64, 1),
                      0).blocks == 1
    two = conv_fprop_module("float16", tile, (1,), MATH_WGMMA, 2)
    assert dict(two.defines) == {"CC_MIN_BLOCKS": 2, "CC_WGMMA_STAGES": WGMMA_STAGES[2]}
    assert two.vendors == ("nvidia",)
    # two blocks of the 128x128 build fit one multiprocessor's 228 KB
    assert 2 * mma_smem_bytes(tile, MATH_WGMMA, hip=False, blocks=2) <= 228 * 1024
    assert mma_smem_bytes(tile, MATH_WGMMA, hip=False, blocks=1) == WGMMA_STAGES[1] * 256 * 128 + 1024


def test_compile_check_skips_modules_other_vendors_never_launch(monkeypatch):
    from cupyconv._cli import compile_check, compilers
    from cupyconv._core.kernels import MATH_WGMMA, gemm_module

    seen = []
    monkeypatch.setattr(compile_check, "check_module",
                        lambda m, vendor, arch, hiprtc=None: seen.append((vendor, arch)))
    compile_check.run_check([gemm_module("float16", MMA_TILES[MATH_WGMMA][0], (1, 1), MATH_WGMMA)],
                            workers=1)
    assert {v for v, _ in seen} == {"nvidia"} and len(seen) == len(compilers.NVIDIA_ARCHS)


# Measured on an H100 (CUDA-graph timings of every tile x split x build, benchmarks/
# exp_conv_plans.py, benchmarks/notes/gemm.md, "Session 13"): (m, n, k, batch), dtype, precision,
# the fastest (tile, splits, blocks) -- or one within 4 % of it.
HOPPER_MEASURED_BEST = [
    ((100352, 64, 576, 1), "float16", "exact", ((128, 64), 1, 2)),     # res2 3x3
    ((25088, 128, 1152, 1), "float16", "exact", ((128, 128), 1, 2)),   # res3 3x3
    ((25088, 128, 1152, 1), "float32", "tf32", ((128, 128), 1, 2)),
    ((6272, 256, 2304, 1), "float16", "exact", ((128, 128), 1, 1)),    # res4 3x3
    ((3136, 512, 4608, 1), "float32", "tf32", ((128, 128), 1, 1)),     # VGG 14^2
    ((1568, 256, 2304, 1), "float16", "exact", ((64, 64), 1, 1)),      # res4 3x3, batch 8
    ((392, 512, 4608, 1), "float32", "tf32", ((128, 128), 8, 1)),      # res5 3x3, batch 8
    ((392, 512, 4608, 1), "float16", "exact", ((128, 64), 4, 1)),      # (0.0156 vs best 0.0150)
    ((100352, 256, 64, 1), "float16", "exact", ((128, 128), 1, 2)),    # res2 1x1
]


@pytest.mark.parametrize("shape,dtype,precision,best", HOPPER_MEASURED_BEST)
def test_hopper_plan_picks_what_measured_fastest(monkeypatch, shape, dtype, precision, best):
    from cupyconv._core.caches import clear_caches
    from cupyconv._core.kernels import MATH_WGMMA, MATH_WGMMA_TF32
    from cupyconv._gemm import plans

    monkeypatch.setattr(plans, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(plans, "gemm_math", lambda d, p, device_id: (
        MATH_WGMMA_TF32 if d == "float32" else MATH_WGMMA))
    clear_caches()  # (plan_gemm is memoized per device: neither read nor leave a real device's)
    try:
        plan = plans.plan_gemm(dtype, *shape, 0, precision)
    finally:
        clear_caches()
    assert (plan.tile[:2], plan.splits, plan.blocks) == best


def test_wgmma_feeds_mirrors_the_kernel():
    """An MN-major 16-bit B feeds the Hopper loop only where each warpgroup's columns are whole
    64-column atoms (WgmmaTile::feeds): the 64 x 64 tile (two warpgroups of 32 columns) does
    not; K-major B, TF32 and the other loops take every tile."""
    from cupyconv._core.kernels import MATH_WGMMA, MATH_WGMMA_TF32, wgmma_feeds

    fed = {t[:2]: wgmma_feeds(t, MATH_WGMMA, False) for t in MMA_TILES[MATH_WGMMA]}
    assert fed == {(128, 128): True, (128, 64): True, (64, 64): False}
    assert all(wgmma_feeds(t, MATH_WGMMA, True) for t in MMA_TILES[MATH_WGMMA])
    assert all(wgmma_feeds(t, MATH_WGMMA_TF32, False) for t in MMA_TILES[MATH_WGMMA_TF32])
    assert all(wgmma_feeds(t, MATH_MMA, False) for t in MMA_TILES[MATH_MMA])


# Backward-weight, bf16 NHWC batch 32, measured on an H200 (benchmarks/notes/gemm.md, session 29:
# graph us of every tile x split): the 64 x 64 tile, which ran the register-staged mma.sync loop,
# took 3-7x the 128-row tiles' time on every layer, and the plan used to pick it.
# (m = output channels, n = taps x input channels, k = pixels).
WGRAD_SHAPES = [(512, 1024, 6272), (64, 576, 100352), (64, 64, 100352), (64, 256, 100352),
                (16, 32, 401408), (144, 24, 100352), (512, 4608, 1568)]


@pytest.mark.parametrize("shape", WGRAD_SHAPES)
def test_backward_weight_never_plans_a_tile_the_hopper_loop_cannot_feed(monkeypatch, shape):
    from cupyconv._core.caches import clear_caches
    from cupyconv._core.kernels import MATH_WGMMA
    from cupyconv._gemm import plans

    monkeypatch.setattr(plans, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(plans, "gemm_math", lambda d, p, device_id: MATH_WGMMA)
    clear_caches()
    try:
        plan = plans.plan_gemm("bfloat16", *shape, 1, 0, "exact", b_kmajor=False)
        kmajor = plans.plan_gemm("bfloat16", *shape, 1, 0, "exact")
    finally:
        clear_caches()
    assert plan.tile[0] == 128
    assert kmajor.seconds <= plan.seconds  # (the K-major plan chooses among more tiles)
