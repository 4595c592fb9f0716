"""The Hopper TMA GEMM (gemm_tma.cu, cupyconv._gemm.tma) on an sm_90 GPU: both operand
orientations of B, both tiles, float16 and bfloat16, shapes with M, N and K edges, against the
float64 product of the same inputs (within 2x the rounding of that product to the storage type:
``verify.tolerance``).  Outputs are poisoned first, so an unwritten element fails; an ``out`` with
a row pitch keeps its padding."""

import numpy as np
import pytest

from cupyconv._core.kernels import TMA_DTYPES, TMA_TF32_TILES, TMA_TILES
from cupyconv._core.verify import random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu

# (M, N, K): K and (for row-major B) N multiples of 8 (16-byte rows for TMA)
SHAPES = [(129, 264, 264), (1000, 1000, 1000), (128, 256, 64), (1, 8, 8), (300, 8, 1032),
          (2048, 520, 4096)]


@pytest.fixture(autouse=True)
def _hopper():
    import cupy

    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the TMA GEMM needs an NVIDIA GPU of compute capability 9.0")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings (the cuda13/cuda12 extra)")


def _operands(m, n, k, dtype, b_kmajor, seed=0):
    import cupy

    rng = np.random.default_rng(seed)
    a = cupy.asarray(random_array(rng, (m, k), dtype))
    if b_kmajor:  # b = bt.T, bt row-major (N, K)
        b = cupy.asarray(random_array(rng, (n, k), dtype)).T
    else:
        b = cupy.asarray(random_array(rng, (k, n), dtype))
    return a, b


def _reference(a, b):
    import cupy

    return (a.astype(cupy.float64) @ b.astype(cupy.float64)).get()


@pytest.mark.parametrize("dtype", TMA_DTYPES)
@pytest.mark.parametrize("b_kmajor", [0, 1])
@pytest.mark.parametrize("tile", TMA_TILES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tma_gemm_matches_float64(shape, tile, b_kmajor, dtype):
    import cupy

    from cupyconv._gemm.tma import gemm_tma

    m, n, k = shape
    a, b = _operands(m, n, k, dtype, b_kmajor)
    out = cupy.empty((m, n), dtype=a.dtype)
    out.fill(np.nan)
    got = gemm_tma(a, b, out, tile=tile)
    assert got is out
    ref = _reference(a, b)
    err = rel_error(got.astype(cupy.float64), ref)
    assert err <= tolerance(dtype, ref), f"relative error {err:.3e}"


@pytest.mark.parametrize("dtype", TMA_DTYPES)
@pytest.mark.parametrize("a_kmajor", [0, 1])
@pytest.mark.parametrize("b_kmajor", [0, 1])
@pytest.mark.parametrize("splits", [1, 3, 64])
def test_a_in_either_orientation_and_split_k(splits, b_kmajor, a_kmajor, dtype):
    """A stored [K, M] (a = at.T, backward-weight's dy^T) as well as [M, K], with k split into
    parts summed in order (64 asked for 33 slices: 33 parts of one slice; 3: 11 each), edges
    in every dim; a second run gives the same bits."""
    import cupy

    from cupyconv._gemm.tma import gemm_tma

    m, n, k = 200, 136, 2056
    a, b = _operands(m, n, k, dtype, b_kmajor, seed=5)
    if not a_kmajor:
        a = cupy.ascontiguousarray(a.T).T
    out = cupy.full((m, n), np.nan, dtype=a.dtype)
    got = gemm_tma(a, b, out, tile=TMA_TILES[1], splits=splits)
    ref = _reference(a, b)
    assert rel_error(got.astype(cupy.float64), ref) <= tolerance(dtype, ref)
    assert bool((gemm_tma(a, b, tile=TMA_TILES[1], splits=splits) == got).all())


@pytest.mark.parametrize("tile", TMA_TF32_TILES)
@pytest.mark.parametrize("shape,splits", [((129, 264, 264), 1), ((1000, 1000, 1000), 1),
                                          ((300, 9, 1032), 1), ((200, 136, 2056), 3)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_tf32_products_are_within_tf32_rounding_of_float64(shape, splits, tile):
    """float32 operands (a row-major, b = bt.T: both K-major) as TF32 products: within 2x the
    error that the float64 product of TF32-rounded operands has (verify.tf32_tolerance: what
    cuBLAS's TF32 reaches), N odd and split-K among the cases, out poisoned and given a row
    pitch.  (TMA's TFLOAT32 copies round the operands to nearest,
    as this bound needs: experiments/exp_tma_tf32.py.)"""
    import cupy

    from cupyconv._core.verify import round_tf32, tf32_tolerance
    from cupyconv._gemm.tma import gemm_tma

    m, n, k = shape
    rng = np.random.default_rng(m + n)
    a = cupy.asarray(random_array(rng, (m, k), "float32"))
    b = cupy.asarray(random_array(rng, (n, k), "float32")).T
    big = cupy.full((m, n + 3), np.nan, dtype=cupy.float32)
    out = big[:, :n]
    assert gemm_tma(a, b, out, tile=tile, splits=splits) is out
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    rounded = (cupy.asarray(round_tf32(a)).astype(cupy.float64)
               @ cupy.asarray(round_tf32(b)).astype(cupy.float64))
    assert rel_error(out.astype(cupy.float64), ref) <= tf32_tolerance(ref, rounded)
    assert bool(cupy.isnan(big[:, n:]).all())  # (the pitch's padding untouched)


@pytest.mark.parametrize("dtype", TMA_DTYPES)
def test_out_with_a_row_pitch_and_odd_width(dtype):
    """ldc > N, N odd (scalar stores at the edge), the padding columns left alone."""
    import cupy

    from cupyconv._gemm.tma import gemm_tma

    m, n, k = 200, 257, 136
    a, b = _operands(m, n, k, dtype, b_kmajor=1, seed=1)
    big = cupy.full((m, n + 7), 7.0, dtype=a.dtype)
    out = big[:, :n]
    out.fill(np.nan)
    gemm_tma(a, b, out)
    ref = _reference(a, b)
    assert rel_error(out.astype(cupy.float64), ref) <= tolerance(dtype, ref)
    assert bool((big[:, n:].astype(cupy.float32) == 7.0).all())


def test_persistent_blocks_take_several_tiles():
    """More tiles than multiprocessors: every block loops (ring phases across tiles)."""
    import cupy

    from cupyconv._gemm.tma import gemm_tma

    m, n, k = 4096, 4096, 512  # 32 x 16 = 512 tiles of 128 x 256
    a, b = _operands(m, n, k, "float16", b_kmajor=0, seed=2)
    got = gemm_tma(a, b)
    ref = (a.astype(cupy.float32) @ b.astype(cupy.float32)).astype(cupy.float64)
    assert rel_error(got.astype(cupy.float64), ref) <= tolerance("float16", ref)


def test_empty_and_k0_products():
    import cupy

    from cupyconv._gemm.tma import gemm_tma

    a = cupy.ones((16, 0), cupy.float16)
    b = cupy.ones((0, 8), cupy.float16)
    assert bool((gemm_tma(a, b) == 0).all())
    assert gemm_tma(cupy.ones((0, 8), cupy.float16), cupy.ones((8, 8), cupy.float16)).shape == (0, 8)


def _spy(monkeypatch):
    """Count the TMA launches that cupyconv.gemm prepares."""
    import importlib

    # (the module: ``import cupyconv.gemm as m`` would give the function the package exports)
    public = importlib.import_module("cupyconv.gemm")

    calls = []
    real = public.prepare_gemm_tma

    def spy(*args, **kwargs):
        calls.append(kwargs.get("tile"))
        return real(*args, **kwargs)

    monkeypatch.setattr(public, "prepare_gemm_tma", spy)
    return calls


@pytest.mark.parametrize("dtype", TMA_DTYPES)
@pytest.mark.parametrize("b_kmajor", [0, 1])
def test_public_gemm_runs_on_tma_and_rereads_new_operands(monkeypatch, dtype, b_kmajor):
    """cupyconv.gemm takes the TMA kernel (by default) for a product of more than half a wave
    of tiles, and a second call with new arrays of the same shapes computes the product of the
    new arrays: it replays the first call's recording (one prepare in all), whose tensor maps
    hold the first call's addresses and must be encoded again for the new ones."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches

    clear_caches()  # (a prepared call of these shapes from another test would skip the spy)
    calls = _spy(monkeypatch)
    m, n, k = 1536, 1032, 520
    for seed in (1, 2):
        a, b = _operands(m, n, k, dtype, b_kmajor, seed=seed)
        out = cupy.full((m, n), np.nan, dtype=a.dtype)
        got = cupyconv.gemm(a, b, out=out)
        assert got is out
        want = _reference(a, b)
        assert rel_error(got.astype(cupy.float64), want) <= tolerance(dtype, want)
    assert calls == [TMA_TILES[1]]


@pytest.mark.parametrize("case", ["small", "batched", "unaligned", "switched_off"])
def test_public_gemm_keeps_its_other_loops_where_tma_does_not_apply(monkeypatch, case):
    import cupy

    import cupyconv

    from cupyconv._core.caches import clear_caches

    clear_caches()  # (the routing is decided when a call is prepared)
    calls = _spy(monkeypatch)
    m, n, k = (256, 256, 4096) if case == "small" else (1536, 1024, 520)
    a, b = _operands(m, n, k, "float16", 0, seed=3)
    if case == "batched":
        a, b = cupy.stack([a, a]), cupy.stack([b, b])
    if case == "unaligned":  # rows 1 element past 16-byte alignment
        a = cupy.empty((m, k + 1), a.dtype)[:, 1:]
        a[...] = _operands(m, n, k, "float16", 0, seed=3)[0]
    if case == "switched_off":
        monkeypatch.setenv("CUPYCONV_TMA", "0")
    got = cupyconv.gemm(a, b)
    want = (a.astype(cupy.float64) @ b.astype(cupy.float64)).get()
    assert rel_error(got.astype(cupy.float64), want) <= tolerance("float16", want)
    assert calls == []


@pytest.mark.parametrize("orientation", ["a_row_b_row", "a_col_b_kmajor", "both_kmajor"])
def test_public_gemm_runs_tf32_on_tma_from_any_orientation(monkeypatch, orientation):
    """cupyconv.gemm(precision="tf32") of float32 operands takes the TMA kernel's TF32 tile,
    copying an operand the kernel cannot read K-major (a with contiguous columns, a row-major
    b) transposed first; within TF32 rounding of float64, out poisoned; a second call with new
    arrays replays the first's recording (one prepare) and computes the new product."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches
    from cupyconv._core.kernels import TMA_TF32_TILES
    from cupyconv._core.verify import round_tf32, tf32_tolerance

    clear_caches()
    calls = _spy(monkeypatch)
    m, n, k = 1536, 1032, 520
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        a = cupy.asarray(random_array(rng, (m, k), "float32"))
        b = cupy.asarray(random_array(rng, (k, n), "float32"))
        if orientation == "a_col_b_kmajor":
            a, b = cupy.ascontiguousarray(a.T).T, cupy.ascontiguousarray(b.T).T
        elif orientation == "both_kmajor":
            b = cupy.ascontiguousarray(b.T).T
        out = cupy.full((m, n), np.nan, dtype=cupy.float32)
        assert cupyconv.gemm(a, b, out=out, precision="tf32") is out
        ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
        rounded = (cupy.asarray(round_tf32(a)).astype(cupy.float64)
                   @ cupy.asarray(round_tf32(b)).astype(cupy.float64))
        assert rel_error(out.astype(cupy.float64), ref) <= tf32_tolerance(ref, rounded)
    assert calls == [TMA_TF32_TILES[1]]
    clear_caches()


def test_public_gemm_keeps_exact_float32_off_the_tma_kernel(monkeypatch):
    """float32 at the default precision ("exact") never reaches the TMA kernel's TF32."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches

    clear_caches()
    calls = _spy(monkeypatch)
    monkeypatch.delenv("CUPYCONV_ALLOW_TF32", raising=False)
    rng = np.random.default_rng(4)
    a = cupy.asarray(random_array(rng, (1536, 520), "float32"))
    b = cupy.asarray(random_array(rng, (520, 1032), "float32"))
    got = cupyconv.gemm(a, b)
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    assert rel_error(got.astype(cupy.float64), want) <= 1e-5
    assert calls == []
    clear_caches()
