"""The tiled GEMM on the GPU against float64 cupy.matmul: every tile, both loader mappings, the
vector and scalar load paths, batches, broadcasts, views, odd sizes."""

import numpy as np
import pytest

import cupyconv
from cupyconv._gemm.kernel_args import MatrixView, OutMap
from cupyconv._gemm.launch import run_conv_fprop, run_gemm
from cupyconv._gemm.plans import GemmPlan, plan_gemm
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import GEMM_TILES, GEMM_VARIANTS, LONG_K_TILE
from cupyconv._core.verify import poison, random_array, rel_error, tolerance
from cupyconv import reference

from gpu_cases import CASES, case_id, rng_for, shapes

pytestmark = pytest.mark.gpu
SHAPES = [(1, 1, 1), (1, 37, 5), (33, 1, 70), (129, 67, 33), (64, 128, 16), (200, 300, 4001),
          (7, 5, 3), (256, 96, 24)]


def _ref(a, b):
    import cupy

    return cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_2d(mnk, dtype):
    import cupy

    m, n, k = mnk
    rng = rng_for("gemm", mnk, dtype)
    a = cupy.asarray(random_array(rng, (m, k), dtype))
    b = cupy.asarray(random_array(rng, (k, n), dtype))
    out = poison(cupy.empty((m, n), dtype))
    assert cupyconv.gemm(a, b, out=out) is out
    ref = _ref(a, b)
    assert rel_error(out, ref) <= tolerance(dtype, ref.get())


@pytest.mark.parametrize("dtype,tile", [(d, t) for d in ("float32", "float64")
                                        for t in GEMM_TILES[d]] + [("float32", LONG_K_TILE)])
@pytest.mark.parametrize("variant", GEMM_VARIANTS)
@pytest.mark.parametrize("splits", [1, 3])
def test_every_tile_loader_mapping_and_split(tile, variant, dtype, splits):
    import cupy

    rng = rng_for("tile", tile, variant, dtype, splits)
    for m, n, k in [(130, 70, 36), (131, 69, 37)]:        # vector path, then scalar path
        a = cupy.asarray(random_array(rng, (m, k), dtype))
        b = cupy.asarray(random_array(rng, (k, n), dtype))
        bias = cupy.asarray(random_array(rng, (n,), dtype))
        a_op = a if variant[0] else cupy.asfortranarray(a)
        b_op = cupy.asfortranarray(b) if variant[1] else b
        sa = [s // a.itemsize for s in a_op.strides]
        sb = [s // b.itemsize for s in b_op.strides]
        av, bv = MatrixView(a_op, sa[0], sa[1]), MatrixView(b_op, sb[1], sb[0])
        assert (av.kcontig, bv.kcontig) == tuple(map(bool, variant))
        c = poison(cupy.empty((m, n), dtype))
        run_gemm(dtype, av, bv, c, m, n, k, out=OutMap(m, 0, n, 1), bias=bias,
                 plan=GemmPlan(tile, splits, 0.0))
        ref = _ref(a, b) + bias.astype(cupy.float64)
        assert rel_error(c, ref) <= tolerance(dtype, ref.get()), (m, n, k)


def test_gemm_batched_broadcast_and_views():
    import cupy

    rng = rng_for("batched")
    a = cupy.asarray(random_array(rng, (5, 70, 33)))
    b = cupy.asarray(random_array(rng, (5, 33, 41)))
    assert rel_error(cupyconv.gemm(a, b), _ref(a, b)) <= 1e-5
    b2 = cupy.asarray(random_array(rng, (33, 41)))
    assert rel_error(cupyconv.gemm(a, b2), _ref(a, b2)) <= 1e-5          # shared B
    assert rel_error(cupyconv.gemm(a[0], b), _ref(a[0], b)) <= 1e-5      # shared A
    at = cupy.asarray(random_array(rng, (33, 70))).T                    # transposed view, no copy
    bt = cupy.asarray(random_array(rng, (41, 33))).T
    assert rel_error(cupyconv.gemm(at, bt), _ref(at, bt)) <= 1e-5
    astr = cupy.asarray(random_array(rng, (140, 66)))[::2, ::2]          # no unit stride: copied
    bstr = cupy.asarray(random_array(rng, (33, 82)))[:, ::2]
    assert rel_error(cupyconv.gemm(astr, bstr), _ref(astr, bstr)) <= 1e-5
    empty = cupyconv.gemm(cupy.ones((3, 0), cupy.float32), cupy.ones((0, 4), cupy.float32))
    assert empty.shape == (3, 4) and not bool(empty.any())


def test_gemm_errors():
    import cupy

    a = cupy.ones((3, 4), cupy.float32)
    with pytest.raises(ValueError, match="inner dims"):
        cupyconv.gemm(a, cupy.ones((5, 2), cupy.float32))
    with pytest.raises(TypeError, match="dtype"):
        cupyconv.gemm(a, cupy.ones((4, 2), cupy.float64))
    with pytest.raises(ValueError, match="2-d"):
        cupyconv.gemm(cupy.ones(4, cupy.float32), a)
    with pytest.raises(ValueError, match="batch sizes"):
        cupyconv.gemm(cupy.ones((2, 3, 4), cupy.float32), cupy.ones((3, 4, 2), cupy.float32))
    with pytest.raises(TypeError, match="cupy.asarray"):
        cupyconv.gemm(np.ones((3, 4), np.float32), a.T)


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("tile", GEMM_TILES["float32"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES[3:7] + CASES[11:14], ids=case_id)
def test_implicit_conv_every_tile_and_split(case, layout, tile, splits):
    import cupy

    rng = rng_for("fprop-tile", case_id(case), layout, tile, splits)
    xs, ws = shapes(case, layout)
    opts = dict(case["opts"], layout=layout)
    xh, wh = random_array(rng, xs), random_array(rng, ws)
    geom = ConvGeometry.from_shapes(xs, ws, dtype="float32", **opts)
    y = poison(cupy.empty(geom.output_shape, cupy.float32))
    bh = random_array(rng, (case["k"],))
    run_conv_fprop(geom, cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh), y,
                   plan=GemmPlan(tile, splits, 0.0))
    assert rel_error(y, reference.conv(xh, wh, bh, **opts)) <= 1e-5


def test_split_k_is_chosen_for_few_tiles_and_is_deterministic():
    import cupy

    plan = plan_gemm("float32", 256, 256, 8192, 1)
    assert plan.splits > 1                      # 4 tiles of 128x128 cannot fill the GPU
    assert plan_gemm("float32", 8192, 8192, 512, 1).splits == 1
    rng = rng_for("splitk")
    a = cupy.asarray(random_array(rng, (256, 8192)))
    b = cupy.asarray(random_array(rng, (8192, 256)))
    c1, c2 = cupyconv.gemm(a, b), cupyconv.gemm(a, b)
    assert cupy.array_equal(c1, c2)
    assert rel_error(c1, _ref(a, b)) <= 1e-5
