"""cupyconv.ndimage end to end on the CPU: the public functions with their kernels compiled as
host C++ (host_ndimage.py), against scipy.ndimage on small arrays.  Covers every boundary mode,
the row / column / direct 1-d kernels and the dense N-d kernel (interior and border paths),
origins, even and odd sizes, integer truncation and complex data.  Skipped without g++."""

import itertools
import warnings

import numpy as np
import pytest
import scipy.ndimage as sn
from nd_cases import rand

from host_ndimage import HostRunner, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")

MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-wrap", "grid-constant",
         "grid-mirror"]


@pytest.fixture
def host(monkeypatch):
    return HostRunner(monkeypatch)




def check(got, ref):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.dtype, ref.dtype)
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 2e-5 if ref.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("mode", MODES)
def test_correlate1d_every_kernel(host, mode):
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(len(mode))
    # (shape, axis): last axis (row kernel), middle and first axes (column kernel)
    for shape, axis in (((3, 11), -1), ((6, 5, 3), 1), ((7, 4), 0), ((2, 3), -1)):
        x = rand(rng, shape, "float64")
        for K in (1, 2, 3, 4, 9):  # 9: longer than most axes here
            w = rng.uniform(-1, 1, K)
            for origin in sorted({-(K // 2), 0, (K - 1) // 2}):
                for fn in ("correlate1d", "convolve1d"):
                    ref = getattr(sn, fn)(x, w, axis, mode=mode, cval=0.5, origin=origin)
                    got = getattr(cn, fn)(x, w, axis, mode=mode, cval=0.5, origin=origin)
                    check(got, ref)
    assert {"nd_line_row", "nd_line_col"} <= set(host.launches)


def test_line_direct_kernel(host, monkeypatch):
    """The no-shared-memory fallback, forced by shrinking the limit."""
    import cupyconv.ndimage as cn
    from cupyconv._ndimage import passes

    monkeypatch.setattr(passes, "SMEM_LIMIT", 0)
    rng = np.random.default_rng(3)
    x = rand(rng, (4, 6), "float32")
    for mode in ("reflect", "constant", "mirror"):
        for axis in (0, 1):
            w = rng.uniform(-1, 1, 4)
            check(cn.correlate1d(x, w, axis, mode=mode, origin=1),
                  sn.correlate1d(x, w, axis, mode=mode, origin=1))
    assert set(host.launches) == {"nd_line_direct"}


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "float32", "complex64"])
def test_dtypes(host, dtype):
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(7)
    x = rand(rng, (5, 7), dtype)
    w = np.array([0.5, -1.25, 0.75])  # negative and fractional sums: truncation and wrap-around
    check(cn.correlate1d(x, w, 0, mode="nearest"), sn.correlate1d(x, w, 0, mode="nearest"))
    check(cn.correlate1d(x, w, 1, mode="constant", cval=-1.5),
          sn.correlate1d(x, w, 1, mode="constant", cval=-1.5))
    check(cn.uniform_filter(x, 3), sn.uniform_filter(x, 3))
    check(cn.sobel(x, 0), sn.sobel(x, 0))
    wc = np.array([1 + 2j, -0.5j, 0.25])
    check(cn.correlate1d(x, wc, 1), sn.correlate1d(x, wc, 1))
    check(cn.convolve1d(x, wc, 0), sn.convolve1d(x, wc, 0))


@pytest.mark.parametrize("path", ["tile", "direct"])
@pytest.mark.parametrize("mode", ["reflect", "constant", "mirror", "wrap", "nearest"])
def test_dense_correlate(host, monkeypatch, mode, path):
    """Small arrays (one tile), both dense kernels: nd_dense_tile and, with its plan refused,
    nd_dense."""
    import cupyconv.ndimage as cn
    from cupyconv._ndimage import passes

    if path == "direct":
        monkeypatch.setattr(passes, "dense_tile_plan", lambda *a: None)
    rng = np.random.default_rng(11)
    x = rand(rng, (6, 7), "float64")
    for wshape in ((3, 3), (2, 4), (1, 5), (3, 1)):
        w = rng.uniform(-1, 1, wshape)
        w[0, 0] = 0.0  # a skipped tap
        for origin in ((0, 0), (-(wshape[0] // 2), (wshape[1] - 1) // 2)):
            for fn in ("correlate", "convolve"):
                ref = getattr(sn, fn)(x, w, mode=mode, cval=-0.25, origin=origin)
                check(getattr(cn, fn)(x, w, mode=mode, cval=-0.25, origin=origin), ref)
    x3 = rand(rng, (4, 5, 3), "int16")
    w3 = rng.uniform(-2, 2, (2, 3, 2))
    check(cn.correlate(x3, w3, mode=mode), sn.correlate(x3, w3, mode=mode))
    check(cn.correlate(x3, w3[0], mode=mode, axes=(0, 2)),
          sn.correlate(x3, w3[0], mode=mode, axes=(0, 2)))
    assert set(host.launches) >= {"nd_dense" if path == "direct" else "nd_dense_tile"}
    assert "nd_dense" not in host.launches or path == "direct"


def _sparse(rng, shape):
    """Random weights with zeros (skipped taps) that break the runs of adjacent taps, and a zero
    plane / row where there is room for one."""
    w = rng.uniform(-1, 1, shape)
    w[rng.uniform(size=shape) < 0.3] = 0.0
    if shape[-1] > 2:
        w[..., 1] = 0.0
    if len(shape) == 3 and shape[0] > 2:
        w[1] = 0.0
    return w


def _staged_only(monkeypatch, walk: bool):
    """Without ``walk``, the row walk (nd_plane) is refused, so the staged kernels run."""
    from cupyconv._ndimage import passes

    if not walk:
        monkeypatch.setattr(passes, "plane_plan", lambda *args, **kwargs: None)


@pytest.mark.parametrize("walk", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_dense_tile_many_tiles(host, monkeypatch, mode, walk):
    """nd_dense_tile over several tiles in every direction (columns past 160, rows past 8,
    planes past 4 with a partial last group), odd and even filters, origins at both ends,
    sparse weights, against scipy.ndimage; with ``walk``, the dense filters run on nd_plane
    (the row walk: strips past 128 columns, row bands past 64, planes of a volume)."""
    import cupyconv.ndimage as cn

    _staged_only(monkeypatch, walk)

    rng = np.random.default_rng([MODES.index(mode), 21])
    x2 = rand(rng, (17, 165), "float32")
    for wshape in ((3, 3), (4, 2), (5, 6)):
        w = _sparse(rng, wshape)
        for origin in ((0, 0), tuple(-(k // 2) for k in wshape), tuple((k - 1) // 2
                                                                    for k in wshape)):
            for fn in ("correlate", "convolve"):
                kw = dict(mode=mode, cval=0.75, origin=origin)
                check(getattr(cn, fn)(x2, w, **kw), getattr(sn, fn)(x2, w, **kw))
    x3 = rand(rng, (9, 10, 6), "float64")
    for wshape in ((3, 3, 3), (2, 4, 3), (4, 1, 2)):
        w = _sparse(rng, wshape)
        for origin in (0, (-(wshape[0] // 2), 0, (wshape[2] - 1) // 2)):
            kw = dict(mode=mode, cval=-1.5, origin=origin)
            check(cn.correlate(x3, w, **kw), sn.correlate(x3, w, **kw))
            check(cn.convolve(x3, w, **kw), sn.convolve(x3, w, **kw))
    # a stack of images filtered in 2-d (planes of one group), halos past the axes
    w = rng.uniform(-1, 1, (7, 9))
    check(cn.correlate(x3, w, mode=mode, axes=(1, 2)), sn.correlate(x3, w, mode=mode, axes=(1, 2)))
    if walk:  # dense weights (no tap SciPy skips): the walk, with halos past the axes
        big = rand(rng, (3, 70, 133), "float32")
        for wshape in ((1, 9, 16), (1, 2, 5)):  # a stack of images, any size
            w = rng.uniform(0.1, 1, wshape)
            kw = dict(mode=mode, cval=0.75, origin=(0, -(wshape[1] // 2), (wshape[2] - 1) // 2))
            check(cn.correlate(big, w, **kw), sn.correlate(big, w, **kw))
            check(cn.convolve(x3, w, mode=mode), sn.convolve(x3, w, mode=mode))
        for k in (3, 5, 7):  # the squares fixed at compile time
            w = rng.uniform(0.1, 1, (k, k))
            kw = dict(mode=mode, cval=-0.5, origin=(k // 2, -(k // 2)))
            check(cn.correlate(big[1], w, **kw), sn.correlate(big[1], w, **kw))
        assert "nd_plane" in host.launches
    else:
        assert set(host.launches) == {"nd_dense_tile"}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "complex128"])
def test_dense_tile_dtypes(host, dtype):
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(5)
    x = rand(rng, (5, 9, 12), dtype)
    w = np.array([[[0.5, -1.25], [0.0, 2.0]], [[1.0, 0.0], [-0.75, 0.25]]])
    check(cn.correlate(x, w, mode="mirror"), sn.correlate(x, w, mode="mirror"))
    wc = w + 1j * w[::-1]
    check(cn.convolve(x, wc, mode="constant", cval=2.0),
          sn.convolve(x, wc, mode="constant", cval=2.0))
    assert set(host.launches) == {"nd_dense_tile"}


def test_dense_tile_plan():
    """The packed plan: taps grouped by plane, coded by place in the staged plane with the
    run flag on right neighbours; arrays past 3 dims and oversized tiles refused."""
    from cupyconv._ndimage import passes

    # a 2 x 2 x 3 filter with its taps at (0, 0, 0..2), (0, 1, 0), (0, 1, 2), (1, 0, 1), centred
    keep = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 2), (1, 0, 1)]
    offsets = np.array(keep, np.int64) - np.array([1, 1, 1])
    prm, grid, smem = passes.dense_tile_plan((9, 20, 170), offsets, 3, 4)
    PY, PX = passes.TILE_Y + 1, passes.TILE_X + 2
    head = [9, 20, 170, 3, 6, PY, PX, -1, -1, -1, 2, 2]
    assert list(prm[:12]) == head
    assert list(prm[12:15]) == [0, 5, 6]  # plane 0: taps 0-4, plane 1: tap 5
    codes = [(0 * PX + 0) * 2, (0 * PX + 1) * 2 + 1, (0 * PX + 2) * 2 + 1, (1 * PX + 0) * 2,
             (1 * PX + 2) * 2, (0 * PX + 1) * 2]
    assert list(prm[15:]) == codes
    assert grid == (2 * 3, 3) and smem == PY * PX * 4 + 6 * 8 + (PY + PX) * 4  # + row, column maps
    # 2-d: one plane, no plane offsets
    prm, grid, _ = passes.dense_tile_plan((5, 7), np.array([[0, -1], [0, 0]]), 0, 8)
    assert list(prm[:3]) == [1, 5, 7] and prm[10] == 1 and list(prm[12:14]) == [0, 2]
    assert grid == (1, 1)
    assert passes.dense_tile_plan((2, 3, 4, 5), np.zeros((1, 4), np.int64), 0, 4) is None
    big = np.argwhere(np.ones((31, 31))) - 15  # 38 x 190 staged doubles: past 48 KiB
    assert passes.dense_tile_plan((64, 64), big, 0, 8) is None
    assert passes.dense_tile_plan((64, 64), big, 0, 4) is not None
    plane_taps = np.argwhere(np.ones((15, 15, 15))) - 7  # the benchmark's 3-d 15^3, float32
    assert passes.dense_tile_plan((256, 256, 256), plane_taps, 2, 4)[2] <= passes.SMEM_LIMIT


def test_separable_filters(host):
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(5)
    x = rand(rng, (9, 8), "float64")
    xi = rand(rng, (6, 7), "uint8")
    for a in (x, xi):
        check(cn.gaussian_filter(a, 1.2), sn.gaussian_filter(a, 1.2))
        check(cn.gaussian_filter(a, (0.8, 1.5), order=(1, 2), mode=("wrap", "mirror")),
              sn.gaussian_filter(a, (0.8, 1.5), order=(1, 2), mode=("wrap", "mirror")))
        check(cn.gaussian_filter(a, 1.0, order=3, radius=2, axes=1),
              sn.gaussian_filter(a, 1.0, order=3, radius=2, axes=1))
        check(cn.uniform_filter(a, (2, 5), origin=(0, -1), mode="constant", cval=3.0),
              sn.uniform_filter(a, (2, 5), origin=(0, -1), mode="constant", cval=3.0))
        check(cn.prewitt(a, 0), sn.prewitt(a, 0))
        check(cn.laplace(a), sn.laplace(a))
    check(cn.gaussian_laplace(x, 1.0), sn.gaussian_laplace(x, 1.0))
    check(cn.gaussian_gradient_magnitude(x, 0.8, truncate=2.0),
          sn.gaussian_gradient_magnitude(x, 0.8, truncate=2.0))
    out = np.empty((8, 9), np.float32).T  # a non-contiguous output array
    r = cn.gaussian_filter(x, 1.0, output=out)
    assert r is out
    check(out, sn.gaussian_filter(x, 1.0, output=np.float32))


INT_DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_outputs_cast_as_scipy(host, dtype):
    """Integer outputs get SciPy's C cast of its double sums as on x86-64 (nd::from_double):
    sobel/prewitt differences wrap in the output dtype between passes (uint64 ones read back
    near 2^64, whose sums leave the range: 0), values from 2^63 up stay in uint64, values out of
    range and NaN give x86's integer indefinite (its low bits in narrow types)."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(INT_DTYPES.index(dtype))
    x = rng.integers(0, 120, (6, 7)).astype(dtype)
    for fn, axis in itertools.product(("sobel", "prewitt"), (0, 1)):
        check(getattr(cn, fn)(x, axis), getattr(sn, fn)(x, axis))
        check(getattr(cn, fn)(x, axis, mode="constant", cval=300.5),
              getattr(sn, fn)(x, axis, mode="constant", cval=300.5))
    for w, cval in itertools.product(([1e10], [-1e10], [3e19], [-3e19], [1.0, -5e9], [0.5, -2.75]),
                                     (0.0, np.nan, -3.5)):
        kw = dict(mode="constant", cval=cval)
        check(cn.correlate1d(x, w, **kw), sn.correlate1d(x, w, **kw))
    if dtype == "uint64":
        big = np.array([2 ** 63 + 2 ** 12, 2 ** 64 - 2 ** 12, 5, 2 ** 63], np.uint64)
        for w in ([1.0], [1.0, 1.0], [-1.0, 0.0, 1.0]):
            check(cn.correlate1d(big, w), sn.correlate1d(big, w))

BAD_CALLS = [
    ("correlate1d", (np.ones(5), [1.0, 2.0]), {"mode": "bogus"}),
    ("correlate1d", (np.ones(5), [1.0, 2.0, 3.0]), {"origin": 2}),
    ("correlate1d", (np.ones(5), [1.0, 2.0, 3.0]), {"origin": -2}),
    ("correlate1d", (np.ones(5), []), {}),
    ("correlate1d", (np.ones(5), [[1.0]]), {}),
    ("correlate1d", (np.ones((2, 5)), [1.0]), {"axis": 2}),
    ("correlate1d", (np.ones(5), [1.0]), {"output": np.ones(4)}),
    ("convolve1d", (np.ones(5), [1.0, 2.0]), {"origin": 1}),
    ("correlate", (np.ones((4, 4)), np.ones((3,))), {}),
    ("correlate", (np.ones((4, 4)), np.ones((3, 3))), {"origin": (0, 2)}),
    ("correlate", (np.ones((4, 4)), np.ones((3, 3))), {"origin": (0, 0, 0)}),
    ("correlate", (np.ones((4, 4)), np.ones((3,))), {"axes": (0, 0)}),
    ("correlate", (np.ones((4, 4)), np.ones((3,))), {"axes": (2,)}),
    ("correlate", (np.ones((4, 4)), np.ones((3, 3))), {"mode": ["reflect", "wrap"]}),
    ("convolve", (np.ones((4, 4)), np.ones((2, 2))), {"origin": 1}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"radius": -1}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"radius": 1.5}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"order": -1}),
    ("gaussian_filter", (np.ones((4, 4)), (1.0, 1.0, 1.0)), {}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"mode": "bogus"}),
    ("gaussian_filter1d", (np.ones(4), -1.0), {}),
    ("uniform_filter1d", (np.ones((4, 4)), 0), {}),
    ("uniform_filter", (np.ones((4, 4)), 3), {"origin": 2}),
    ("uniform_filter1d", (np.ones(4), 4), {"origin": -3}),
    ("sobel", (np.ones((4, 4)),), {"axis": 3}),
    ("laplace", (np.ones((4, 4)),), {"mode": "bogus"}),
    ("correlate1d", (np.ones(4), [1.0j, 1.0]), {"cval": 1j}),
    ("correlate1d", (np.ones(4), [1.0, 1.0]), {"output": "complex64"}),
    ("correlate1d", (np.ones(4), [1.0, 1.0]), {"cval": 1j}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"output": np.complex64}),
    # SciPy's order of checks, where the candidates raise different types: complex weights of
    # real data refuse a complex cval first (ValueError) ...
    ("correlate1d", (np.ones((2, 4)), np.ones((1, 1)) * 1j), {"cval": 1j}),
    ("correlate1d", (np.ones((2, 4)), [1j, 2.0]), {"cval": 1j, "mode": "bogus"}),
    ("convolve1d", (np.ones((2, 4)), np.array([], complex)), {"cval": 1j}),
    ("convolve1d", (np.ones((2, 4)), np.ones((2, 2)) * 1j), {"cval": 1j}),
    ("correlate", (np.ones((4, 4)), np.ones(3) * 1j), {"cval": 1j}),
    ("correlate", (np.ones((4, 4)), np.ones((3, 3)) * 1j), {"cval": 1j, "mode": ["reflect"] * 2}),
    ("convolve", (np.ones((4, 4)), np.ones((3, 3)) * 1j), {"cval": 1j, "origin": 5.0}),
    # ... real data refuses it as the C routine parses it (TypeError), after the pass's mode
    ("sobel", (np.ones((4, 4)),), {"cval": 1j, "mode": "bogus"}),
    ("gaussian_filter", (np.ones((4, 4)), 1.0), {"cval": 1j, "mode": ("reflect", "bogus")}),
    ("uniform_filter1d", (np.ones((4, 4)), 0), {"cval": 1j}),
    ("laplace", (np.ones((4, 4)),), {"cval": 1j, "mode": ("bogus", "reflect")}),
    # origins and sizes: the range first (ValueError), then an integer (TypeError)
    ("correlate1d", (np.ones(5), [1.0, 2.0, 3.0]), {"origin": 5.0}),
    ("correlate", (np.ones((4, 4)), np.ones((3, 3))), {"origin": 5.0}),
    ("uniform_filter1d", (np.ones((4, 4)), 2.5), {"origin": 5}),
    ("correlate1d", (np.ones(5), [1.0, 2.0, 3.0]), {"origin": 1.0}),
    ("uniform_filter1d", (np.ones((4, 4)), 3.0), {}),
    ("convolve1d", (np.ones(5), 2.0), {}),  # 0-d weights: SciPy's IndexError
    # complex data with a real output: the filters that chain passes refuse it (RuntimeError)
    ("gaussian_filter", (np.ones((4, 4)) * 1j, 1.0), {"output": np.float64}),
    ("sobel", (np.ones((4, 4)) * 1j,), {"output": np.float32}),
    ("prewitt", (np.ones((4, 4)) * 1j,), {"output": "float64"}),
    ("laplace", (np.ones((4, 4)) * 1j,), {"output": np.float64}),
    ("gaussian_laplace", (np.ones((4, 4)) * 1j, 1.0), {"output": np.float64}),
    ("gaussian_gradient_magnitude", (np.ones((4, 4)) * 1j, 1.0), {"output": int}),
    ("uniform_filter", (np.ones((4, 4)), 3), {"output": np.complex128}),
]


@pytest.mark.parametrize("fn,args,kwargs", BAD_CALLS)
def test_errors_match_scipy_before_any_launch(host, fn, args, kwargs):
    import cupyconv.ndimage as cn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as ref:
            getattr(sn, fn)(*args, **kwargs)
    with pytest.raises(type(ref.value)) as got:
        getattr(cn, fn)(*args, **kwargs)
    assert type(got.value) is type(ref.value)
    if "cval" in str(ref.value):  # the same check failed, not another of the same type
        assert "cval" in str(got.value)
    assert host.launches == []



def test_weights_with_a_zero_length_dim_match_scipy(host):
    """Weights with a dim of length 0 (CuPy's TestSpecialWeightCases): SciPy does not count such
    dims, checks the origins against the others in order, and returns zeros (an empty sum, in
    the output dtype) where the remaining dims match the input's; else its RuntimeError.  No
    kernel runs."""
    import cupyconv.ndimage as cn

    for shape, dtype in itertools.product([(3, 3), (3, 4, 5)], ["uint8", "float64", "complex64"]):
        x = rand(np.random.default_rng(len(shape)), shape, dtype)
        for wshape in [(0,) + shape, (0, 0) + shape, (0,) + shape[1:], shape[:1] + (0,) + shape[1:],
                       shape[:-1] + (0,)]:
            for wdtype, fn in itertools.product([float, complex], ["correlate", "convolve"]):
                w = np.ones(wshape, wdtype)
                for kw in [{}, {"origin": 1}, {"origin": -1}, {"mode": "constant", "cval": 2},
                           {"output": np.float32}, {"axes": (0,)}, {"mode": "bogus"}]:
                    ref, _ = _outcome(getattr(sn, fn), (x, w), kw)
                    got, _ = _outcome(getattr(cn, fn), (x, w), kw)
                    if isinstance(ref, type):
                        assert got is ref, (fn, wshape, kw, got, ref)
                    else:
                        check(got, ref)
                        assert not ref.any()
    assert host.launches == []


def test_uniform_filter_float_sizes_match_scipy(host):
    """uniform_filter takes SciPy's sizes: a float is truncated (3.0 filters with 3, 2.5 with 2),
    sizes of at most 1 (NaN too) leave their axis alone, an infinite one is SciPy's
    OverflowError and a string its TypeError, before any launch; uniform_filter1d wants an
    integer (TypeError), as SciPy's."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(2)
    for x in (rand(rng, (6, 7), "float64"), rand(rng, (5, 6), "uint8"),
              rand(rng, (4, 5), "complex128")):
        for size in (3.0, 2.5, 1.5, 0.5, np.float32(4.0), np.nan, (3.0, 2), (2.9, 1.0)):
            for kw in ({}, {"origin": -1, "mode": "constant", "cval": 2.0}, {"axes": (1,)}):
                if kw.get("axes") and isinstance(size, tuple):
                    continue
                ref, _ = _outcome(sn.uniform_filter, (x, size), kw)
                got, _ = _outcome(cn.uniform_filter, (x, size), kw)
                if isinstance(ref, type):  # (origin -1 is out of range for a size below 2)
                    assert got is ref, (size, kw, got, ref)
                else:
                    check(got, ref)
    host.launches.clear()
    for size, kw in ((np.inf, {}), ("3", {}), (2.5, {"origin": 1}), (3.0, {"origin": 1.0})):
        ref, _ = _outcome(sn.uniform_filter, (np.ones((4, 4)), size), kw)
        got, _ = _outcome(cn.uniform_filter, (np.ones((4, 4)), size), kw)
        assert isinstance(ref, type) and got is ref, (size, kw, got, ref)
    ref, _ = _outcome(sn.uniform_filter1d, (np.ones((4, 4)), 3.0), {})
    got, _ = _outcome(cn.uniform_filter1d, (np.ones((4, 4)), 3.0), {})
    assert ref is got is TypeError
    assert host.launches == []

def _outcome(fn, args, kwargs):
    """(result or exception type, warning categories) of one call."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the type is compared
            result = type(exc)
    return result, [w.category for w in record]


def test_complex_data_output_rules_match_scipy(host):
    """SciPy's output rules, call by call: correlate1d/correlate/convolve(1d),
    gaussian_filter1d and the uniform filters resolve a real output dtype of complex data by
    promoting it with a UserWarning; gaussian_filter, sobel, prewitt and the Laplace/gradient
    filters hand a real output to their passes, which refuse complex data (RuntimeError);
    real data never goes to a complex output through a pass (RuntimeError), but a filter that
    runs no pass copies the input into any output dtype (complex to real: ComplexWarning), and
    takes any cval.  Same results, dtypes, exceptions and warnings as SciPy."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(4)
    xr, xu = rand(rng, (4, 5), "float64"), rand(rng, (4, 5), "uint8")
    xc = rand(rng, (4, 5), "complex128")
    w1, w1c = np.array([0.5, -1.0, 2.0]), np.array([1 + 1j, 2.0, -0.5j])
    w2, w2c = rng.uniform(-1, 1, (3, 2)), rng.uniform(-1, 1, (3, 2)) * (1 - 2j)
    outputs = [None, np.float64, np.float32, np.uint8, np.complex64, np.dtype("float64"),
               "float64", "complex128", int, complex]
    calls = []
    for x in (xr, xu, xc):
        for w, v in ((w1, w2), (w1c, w2c)):
            calls += [("correlate1d", (x, w), {}), ("convolve1d", (x, w), {"axis": 0}),
                      ("correlate", (x, v), {}), ("convolve", (x, v), {})]
        calls += [("uniform_filter", (x, 3), {}), ("uniform_filter", (x, 1), {"cval": 1j}),
                  ("uniform_filter1d", (x, 3), {}), ("gaussian_filter1d", (x, 1.0), {}),
                  ("gaussian_filter", (x, 1.0), {}), ("gaussian_filter", (x, 0), {"cval": 1j}),
                  ("sobel", (x,), {}), ("prewitt", (x,), {"axis": 0}), ("laplace", (x,), {}),
                  ("laplace", (x,), {"axes": (), "cval": 1j}),
                  ("gaussian_laplace", (x, 1.0), {}), ("gaussian_gradient_magnitude", (x, 1.0), {}),
                  ("gaussian_gradient_magnitude", (x, 1.0), {"axes": ()})]
    for (fn, args, kw), output in itertools.product(calls, outputs):
        kw = dict(kw, output=output)
        ref, ref_warnings = _outcome(getattr(sn, fn), args, kw)
        got, got_warnings = _outcome(getattr(cn, fn), args, kw)
        assert got_warnings == ref_warnings, (fn, kw, got_warnings, ref_warnings)
        if isinstance(ref, type):
            assert got is ref, (fn, kw, got, ref)
        else:
            with np.errstate(invalid="ignore"):
                check(got, ref)


def test_numpy_input_refused():
    import cupyconv.ndimage as cn

    with pytest.raises(TypeError, match="cupy"):
        cn.gaussian_filter(np.ones((3, 3)), 1.0)


# --------------------------------------------------------------------------- fused 2-d passes
SEP_SHAPES = [(5, 7), (64, 32), (70, 45), (3, 9, 40), (2, 66, 33)]  # below, at and past one tile


def _sep_calls(mode, size_even):
    """(name, kwargs) of separable filters: both pass orders (sobel/prewitt along the last axis
    run it first), odd and even sizes, origins, per-axis modes with one constant."""
    s = 4 if size_even else 3
    mixed = ("constant", mode)
    return [
        ("gaussian_filter", dict(sigma=1.3, mode=mode, cval=0.5)),
        ("gaussian_filter", dict(sigma=(0.8, 2.0), order=(1, 0), mode=mode, cval=-0.5,
                                 axes=(-2, -1))),
        ("gaussian_filter", dict(sigma=0.9, radius=(2, 5), mode=mixed, axes=(-1, -2))),
        ("uniform_filter", dict(size=(s, s + 1), mode=mode, cval=1.5, axes=(-2, -1))),
        ("uniform_filter", dict(size=s, origin=-(s // 2), mode=mode, cval=0.25)),
        ("uniform_filter", dict(size=(s + 2, 2), origin=((s + 1) // 2, 0), mode=mixed,
                                axes=(-2, -1))),
        ("sobel", dict(axis=-1, mode=mode, cval=0.75)),
        ("sobel", dict(axis=-2, mode=mode)),
        ("prewitt", dict(axis=-1, mode=mode)),
        ("prewitt", dict(axis=0, mode=mode, cval=2.0)),
    ]


@pytest.mark.parametrize("walk", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
def test_sep2d_fused_filters(host, monkeypatch, mode, dtype, walk):
    """nd_sep2d (two passes in one) against scipy.ndimage: every mode, both pass orders, tiles
    inside (the fast path) and across every border, arrays smaller than a tile and not a
    multiple of it, stacks of planes, halos longer than an axis.  With ``walk``, the pairs the
    row walk takes (one mode; under constant, the last axis first) run on nd_plane."""
    import cupyconv.ndimage as cn

    _staged_only(monkeypatch, walk)

    rng = np.random.default_rng([MODES.index(mode), len(dtype)])
    for shape in SEP_SHAPES:
        x = rand(rng, shape, dtype)
        for name, kw in _sep_calls(mode, shape[-1] % 2 == 0):
            if "axes" in kw or len(shape) == 2 or name in ("sobel", "prewitt"):
                check(getattr(cn, name)(x, **kw), getattr(sn, name)(x, **kw))
    check(cn.gaussian_filter(x, 6.0, mode=mode), sn.gaussian_filter(x, 6.0, mode=mode))
    fused = set(host.launches) - {"nd_line_col", "nd_line_row"}
    assert fused == ({"nd_plane", "nd_sep2d"} if walk else {"nd_sep2d"})


def test_sep2d_which_calls_fuse(host, monkeypatch):
    """Fused: float outputs whose dtype is the compute dtype; 3-d chains whose last-two-axis
    passes are adjacent or may move together (no constant mode between).  Not fused: integer
    outputs (SciPy truncates the intermediate), float32 outputs of float64 sums, complex data,
    tiles past the shared-memory limit.  (The row walk refused: see test_which_calls_walk.)"""
    import cupyconv.ndimage as cn

    _staged_only(monkeypatch, False)

    rng = np.random.default_rng(9)
    launches = _launch_recorder(host)
    x2 = rand(rng, (20, 24), "float32")
    assert launches("gaussian_filter", x2, 1.0) == ["nd_sep2d"]
    assert launches("uniform_filter", x2, 5, output=np.float64) == ["nd_sep2d"]
    assert launches("uniform_filter", x2, (1, 5)) == ["nd_line_row"]  # one filtered axis
    xu = rand(rng, (20, 24), "uint8")
    assert launches("sobel", xu) == ["nd_line_row", "nd_line_col"]
    assert launches("gaussian_filter", xu, 1.0, output=np.float64) == ["nd_sep2d"]
    assert "nd_sep2d" not in launches("gaussian_filter", xu, 1.0, output=np.float32)
    assert "nd_sep2d" not in launches("gaussian_filter", rand(rng, (9, 8), "complex64"), 1.0)
    x3 = rand(rng, (6, 20, 24), "float64")
    assert launches("gaussian_filter", x3, 1.0) == ["nd_line_col", "nd_sep2d"]
    # sobel along axis 2 runs axes 2, 0, 1: the axis-1 pass moves next to the axis-2 one ...
    assert launches("sobel", x3, 2) == ["nd_sep2d", "nd_line_col"]
    # ... unless a constant mode makes the order matter
    assert "nd_sep2d" not in launches("sobel", x3, 2, mode="constant", cval=1.0)
    assert launches("sobel", x3, 0, mode="constant", cval=1.0) == ["nd_line_col", "nd_sep2d"]
    assert "nd_sep2d" not in launches("gaussian_filter", x3, 3.9)  # 33 taps: past SEP_MAX_TAPS
    assert launches("gaussian_filter", x3.astype(np.float32), 1.6) == ["nd_line_col", "nd_sep2d"]
    check(cn.gaussian_laplace(x3, 1.1), sn.gaussian_laplace(x3, 1.1))


def _launch_recorder(host):
    """fn(name, x, *args, **kw): the kernels one cupyconv.ndimage call launches, its result
    checked against scipy.ndimage's."""
    import cupyconv.ndimage as cn

    def launches(fn, x, *args, **kw):
        host.launches.clear()
        check(getattr(cn, fn)(x, *args, **kw), getattr(sn, fn)(x, *args, **kw))
        return list(host.launches)

    return launches


def test_which_calls_walk(host):
    """The row walk (nd_plane) takes real float32/float64 data read, written and summed in one
    dtype: fused pairs with one mode (under constant, only the last-axis-first order) and dense
    2-d/3-d filters with no tap SciPy would skip, at most 16 columns wide."""
    rng = np.random.default_rng(12)
    launches = _launch_recorder(host)
    x2 = rand(rng, (20, 24), "float32")
    assert launches("gaussian_filter", x2, 1.0) == ["nd_sep2d"]  # 9 taps down: staged
    assert launches("gaussian_filter", x2, 0.7, mode="mirror", radius=1) == ["nd_plane"]  # 3 x 3
    assert launches("sobel", x2, -1, mode="constant", cval=0.5) == ["nd_plane"]  # last axis first
    assert launches("uniform_filter", x2, 3, mode="constant") == ["nd_sep2d"]  # axis 0 first
    assert launches("gaussian_filter", x2, 1.0, mode=("reflect", "wrap")) == ["nd_sep2d"]
    assert launches("uniform_filter", x2, 5, output=np.float64) == ["nd_sep2d"]  # float32 in
    x3 = rand(rng, (6, 20, 24), "float64")
    assert launches("sobel", x3, 0, mode="wrap") == ["nd_line_col", "nd_plane"]
    w = rng.uniform(0.5, 1.0, (3, 3))
    assert launches("correlate", x2, w, mode="nearest") == ["nd_plane"]
    assert launches("convolve", x3, rng.uniform(0.5, 1.0, (1, 2, 5))) == ["nd_plane"]
    assert launches("convolve", x3, rng.uniform(0.5, 1.0, (3, 2, 5))) == ["nd_dense_tile"]
    w0 = w.copy()
    w0[1, 1] = 0.0  # a skipped tap: the staged kernel (0 * inf)
    assert launches("correlate", x2, w0) == ["nd_dense_tile"]
    assert launches("correlate", x2, rng.uniform(0.5, 1.0, (3, 17))) == ["nd_dense_tile"]  # wide
    assert launches("correlate", rand(rng, (20, 24), "int32"), w) == ["nd_dense_tile"]
    assert launches("correlate", rand(rng, (9, 8), "complex64"), w) == ["nd_dense_tile"]
    assert launches("correlate", x2, w, output=np.float64) == ["nd_dense_tile"]
    assert launches("correlate", rand(rng, (1, 24), "float32"), w) == ["nd_dense_tile"]  # 1 row


def test_plane_plan():
    from cupyconv._ndimage import passes

    kwb, taps, buffer = passes.plane_plan((1, 70, 45), (3, 5), False, "float32")
    assert (kwb, taps, buffer) == (8, 3 * 8 * 4, 8 * 4 * 128 * 4)
    assert passes.plane_plan((2, 70, 45), (3, 16), True, "float64")[:2] == (16, 20 * 8)
    assert passes.plane_plan((1, 70, 45), (3, 17), False, "float32") is None
    assert passes.plane_plan((1, 70, 45), (4, 3), True, "float32") is None  # 4 rows: staged
    assert passes.plane_plan((1, 70, 45), (3, 3), False, "int32") is None
    assert passes.plane_plan((1, 1, 45), (1, 3), False, "float32") is None
    assert passes.plane_plan((1, 1 << 16, 1 << 15), (3, 3), False, "float32") is None
    # taps past shared memory with the store buffer: 15 x 16 fits, 700 x 16 does not
    assert passes.plane_plan((1, 64, 64), (15, 15), False, "float32") is not None
    assert passes.plane_plan((1, 64, 64), (700, 16), False, "float32") is None
    # (3-d filters are refused before the plan: test_which_calls_walk)


def test_sep2d_plan():
    from cupyconv._ndimage import passes

    prm, grid, smem = passes.sep2d_plan((3, 70, 45), 5, 3, 4)
    assert prm == (3, 70, 45, 5, 3, 2) and grid == (2 * 2, 3)
    py, px = passes.SEP_TY + 2, passes.SEP_TX + 4
    assert smem == (5 + 3 + 3 + (py + 1) * px + max((py + 1) * 32, passes.SEP_TY * px)) * 4
    assert passes.sep2d_plan((7,), 3, 3, 4) is None
    assert passes.sep2d_plan((1 << 16, 1 << 15), 3, 3, 4) is None  # plane of 2^31
    # shared memory: the most taps fit in float32 and complex128 (16 bytes) does not
    most = passes.SEP_MAX_TAPS
    assert passes.sep2d_plan((64, 64), most, most, 4) is not None
    assert passes.sep2d_plan((64, 64), most, most, 16) is None
    assert passes.sep2d_plan((64, 64), 3, passes.SEP_MAX_TAPS + 1, 4) is None
    assert passes.sep2d_plan((64, 64), 3, passes.SEP_MAX_TAPS, 4) is not None


@pytest.mark.parametrize("mode", ["reflect", "constant", "mirror"])
def test_sep2d_interior_tiles(host, monkeypatch, mode):
    """Tiles whose halo lies inside the plane (the kernel's unmapped fast path: rows 64-127 of
    150 and columns 32-63 of 100 with a 3-tap or 5-tap filter) next to border tiles."""
    import cupyconv.ndimage as cn

    _staged_only(monkeypatch, False)

    rng = np.random.default_rng(MODES.index(mode))
    x = rand(rng, (150, 100), "float32")
    check(cn.sobel(x, 0, mode=mode, cval=0.5), sn.sobel(x, 0, mode=mode, cval=0.5))
    check(cn.uniform_filter(x, 5, origin=(1, -2), mode=mode),
          sn.uniform_filter(x, 5, origin=(1, -2), mode=mode))
    assert host.launches == ["nd_sep2d", "nd_sep2d"]


# --------------------------------------------------------------------------- axes= (SciPy 1.15+)
AXES_SHAPES = [(4, 5), (6, 4, 5), (3, 4, 5, 6)]
AXES = [None, (0, -1), (1,), 0, (-1, 0)]


def _axes_cases(ndim):
    """AXES and every dim in reverse order (SciPy then pairs the per-axis correlate weights and
    origins with the dims in order, as without axes)."""
    return AXES + [tuple(range(ndim - 1, -1, -1))]


def _per_axes(value, axes, ndim):
    """``value`` (a tuple of one entry per array dim at most) cut to one entry per entry of
    ``axes``, as CuPy's TestFilterFastAxes cuts its per-axis arguments."""
    n = ndim if axes is None else (1 if np.isscalar(axes) else len(axes))
    return value[:n] if isinstance(value, tuple) else value


@pytest.mark.parametrize("shape", AXES_SHAPES)
def test_gaussian_derivatives_with_axes_match_scipy(host, shape):
    """gaussian_laplace, gaussian_gradient_magnitude and laplace with axes=, per-axis modes and
    cval (CuPy's TestFilterFastAxesSciPy15 grid): the Laplace smooths along ``axes`` only, the
    gradient magnitude along every dim (SciPy hands its sigma to gaussian_filter as given)."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(len(shape))
    for dtype, axes in itertools.product(["uint8", "float64"], _axes_cases(len(shape))):
        x = rand(rng, shape, dtype)
        modes = _per_axes(("reflect", "constant", "mirror", "nearest"), axes, len(shape))
        for sigma, cval in [(0.5, 0), (3.2, 2)]:
            kw = dict(output=np.float64, mode=modes, cval=cval, axes=axes)
            for fn in ("gaussian_gradient_magnitude", "gaussian_laplace"):
                check(getattr(cn, fn)(x, sigma, **kw), getattr(sn, fn)(x, sigma, **kw))
        kw = dict(output=np.float64, mode=_per_axes(("wrap", "nearest", "mirror", "constant"),
                                                    axes, len(shape)), cval=1.5, axes=axes)
        check(cn.laplace(x, **kw), sn.laplace(x, **kw))


def test_gaussian_derivative_sigmas_and_kwargs_with_axes(host):
    """The sigma forms SciPy takes with axes=: gaussian_laplace one per entry of axes (0 on the
    other dims), gaussian_gradient_magnitude one per dim of the input; truncate and radius pass
    to every term's Gaussian; both refuse the other length (RuntimeError) before any launch."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng(8)
    x = rand(rng, (6, 7, 5), "float64")
    calls = [("gaussian_laplace", (0.8, 1.3), dict(axes=(2, 0))),
             ("gaussian_laplace", (0.7, 1.0, 1.2), dict(axes=(1, 2, 0), truncate=2.0)),
             ("gaussian_gradient_magnitude", (0.7, 0.0, 1.2), dict(axes=(1,))),
             ("gaussian_gradient_magnitude", (0.7, 0.9, 1.2), dict(axes=(2, 0), radius=2)),
             ("gaussian_gradient_magnitude", 1.1, dict(axes=-1, radius=(1, 2, 3))),
             ("gaussian_gradient_magnitude", 0.9, dict(axes=(0, 1), mode=("wrap", "reflect"),
                                                        truncate=1.5))]
    for fn, sigma, kw in calls:
        check(getattr(cn, fn)(x, sigma, **kw), getattr(sn, fn)(x, sigma, **kw))
    host.launches.clear()
    for fn, sigma in [("gaussian_laplace", (0.8, 1.3, 1.0)),
                      ("gaussian_gradient_magnitude", (0.8, 1.3))]:
        with pytest.raises(RuntimeError) as ref:
            getattr(sn, fn)(x, sigma, axes=(0, 2))
        with pytest.raises(RuntimeError, match="sigma"):
            getattr(cn, fn)(x, sigma, axes=(0, 2))
        assert "sequence" in str(ref.value)
    assert host.launches == []


@pytest.mark.parametrize("shape", AXES_SHAPES)
def test_filters_with_axes_match_scipy(host, shape):
    """The other filters taking axes= (CuPy's TestFilterFastAxes grids): sigma, radius, size,
    origin and mode given per entry of axes, against SciPy; correlate/convolve's weights and
    origins go to the dims in increasing order where axes names every dim."""
    import cupyconv.ndimage as cn

    rng = np.random.default_rng([len(shape), 1])
    for dtype, axes in itertools.product(["uint8", "float64"], _axes_cases(len(shape))):
        x = rand(rng, shape, dtype)
        nd = len(shape)
        for sigma, radius in [(1.5, None), ((1.5, 2.25, 1.0, 3.0), 2), (2.25, (1, 2, 3, 4))]:
            kw = dict(output=np.float64, axes=axes, truncate=2.75,
                      sigma=_per_axes(sigma, axes, nd), radius=_per_axes(radius, axes, nd),
                      mode=_per_axes(("reflect", "nearest", "mirror", "constant"), axes, nd))
            check(cn.gaussian_filter(x, **kw), sn.gaussian_filter(x, **kw))
        for origin in (0, (0, 1, 1, 0)):
            kw = dict(output=np.float64, axes=axes, cval=2, origin=_per_axes(origin, axes, nd),
                      size=_per_axes((3, 5, 3, 5), axes, nd),
                      mode=_per_axes(("reflect", "constant", "mirror", "wrap"), axes, nd))
            check(cn.uniform_filter(x, **kw), sn.uniform_filter(x, **kw))
            axes_t = range(nd) if axes is None else ((axes,) if np.isscalar(axes) else axes)
            w = rng.uniform(-1, 1, [(3, 5, 3, 5)[a] for a in axes_t])
            for fn, mode in itertools.product(("correlate", "convolve"), ("reflect", "constant")):
                kw = dict(output=np.float64, axes=axes, cval=2, mode=mode,
                          origin=_per_axes(origin, axes, nd))
                check(getattr(cn, fn)(x, w, **kw), getattr(sn, fn)(x, w, **kw))
