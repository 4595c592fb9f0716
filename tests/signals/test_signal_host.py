"""The signal API's host code (launch arguments, batching, FFT path) without a GPU.

CuPy is replaced by NumPy and the direct kernel by a NumPy model of its contract (the formula in
filter_direct.cu's header, read from the very argument list the launcher builds), so argument
order, strides, pads, batch flattening and the FFT path are checked against scipy.signal on the
CPU.  The kernel's tiling itself is exercised by tests/signals/test_gpu_signal.py on the GPU.
"""

import itertools
import sys
import types
import warnings

import numpy as np
import pytest
from scipy import signal

from cupyconv._core import jit
from cupyconv._dispatch import signal as _signal_cost
from cupyconv._signal import direct as _signal_direct
from cupyconv._signal import fft as _signal_fft
from cupyconv._core.kernels import plane_rows_per_thread
from cupyconv._signal.dtypes import check_fillvalue, compute_dtype
from cupyconv._signal.plan import BOUNDARY_CODE, boundary_indices, plan_filter

CODES = {v: k for k, v in BOUNDARY_CODE.items()}


def _model_kernel(grid, block, args, shared_mem=0):
    """What filter_direct computes, from its arguments."""
    x, g, fill_re, fill_im, y = args[:5]
    fill = fill_re + 1j * fill_im if x.dtype.kind == "c" else fill_re
    assert np.asarray(fill_re).dtype == np.asarray(x.real).dtype
    (planes, OD, OH, OW, D, H, W, KD, KH, KW, PD, PH, PW, bnd, xsb, xsd, xsh, xsw, gsb, khc,
     tiles_w) = [int(v) for v in args[5:]]
    assert shared_mem <= _signal_direct.SMEM_LIMIT and 1 <= khc <= KH
    assert grid[0] == tiles_w * -(-OH // block[1]) and tiles_w * block[0] * \
        _signal_direct.outputs_per_thread(x.itemsize) >= OW
    _model_correlate(x, g, fill, y, planes, (OD, OH, OW), (D, H, W), (KD, KH, KW), (PD, PH, PW),
                     CODES[bnd], (xsb, xsd, xsh, xsw), gsb)


def _model_plane_kernel(grid, block, args, shared_mem=0):
    """What filter_plane computes, from its arguments (filter_direct's contract on planes)."""
    x, g, fill, y = args[:4]
    assert x.dtype.kind == "f" and np.asarray(fill).dtype == x.dtype
    (planes, OH, OW, H, W, KH, KW, PH, PW, bnd, gsb, flip, tiles_w, d, vec_in, vec_out) = \
        [int(v) for v in args[4:]]
    if flip:  # the filter is read reversed on both axes
        g = np.ascontiguousarray(g.reshape(-1, KH, KW)[:, ::-1, ::-1])
    rows = 8 * _signal_direct.PLANE_CHUNKS * plane_rows_per_thread(x.itemsize)
    assert shared_mem <= _signal_direct.SMEM_LIMIT and block == (256, 1)
    assert (PW + d) % 4 == 0 and 0 <= d < 4  # every strip's first input column is 4-aligned
    assert tiles_w * 128 >= OW + d > (tiles_w - 1) * 128
    assert grid == (tiles_w * -(-OH // rows), min(planes, 65535))
    # host arrays count as aligned
    assert vec_in == (W % 4 == 0) and vec_out == (OW % 4 == 0 and d == 0)
    _model_correlate(x, g, fill, y, planes, (1, OH, OW), (1, H, W), (1, KH, KW), (0, PH, PW),
                     CODES[bnd], (H * W, 0, W, 1), gsb)


def _model_correlate(x, g, fill, y, planes, out3, in3, k3, pad3, boundary, xs, gsb):
    """The shared formula: y[p] = sum over taps of X(p, o - pad + k) * g[p, k]."""
    (OD, OH, OW), (D, H, W), (KD, KH, KW), (PD, PH, PW) = out3, in3, k3, pad3
    xsb, xsd, xsh, xsw = xs
    fill = [fill]
    xf, gf, yf = x.reshape(-1), g.reshape(-1), y.reshape(-1)
    for p in range(planes):
        b, od = divmod(p, OD)
        idd = boundary_indices(od - PD, KD, D, boundary)
        ih = boundary_indices(-PH, OH + KH - 1, H, boundary)
        iw = boundary_indices(-PW, OW + KW - 1, W, boundary)
        X = np.empty((KD, OH + KH - 1, OW + KW - 1), x.dtype)
        for a, d in enumerate(idd):
            for r, h in enumerate(ih):
                for c, w in enumerate(iw):
                    X[a, r, c] = fill[0] if min(d, h, w) < 0 else \
                        xf[b * xsb + d * xsd + h * xsh + w * xsw]
        G = gf[b * gsb: b * gsb + KD * KH * KW].reshape(KD, KH, KW)
        out = np.zeros((OH, OW), y.dtype)
        for kd in range(KD):
            for kh in range(KH):
                for kw in range(KW):
                    out = out + X[kd, kh:kh + OH, kw:kw + OW] * G[kd, kh, kw]
        yf[p * OH * OW:(p + 1) * OH * OW] = out.reshape(-1)


@pytest.fixture
def numpy_cupy(monkeypatch):
    fake = types.ModuleType("cupy")
    for name in ("ascontiguousarray", "broadcast_to", "moveaxis", "flip", "conj", "empty", "full",
                 "asarray", "arange", "ix_", "fft", "pad", "zeros"):
        setattr(fake, name, getattr(np, name))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    models = {"filter_direct": _model_kernel, "filter_plane": _model_plane_kernel}
    monkeypatch.setattr(jit, "get_function", lambda module, template, *a: models[template])
    # cuFFT plans of our own need the GPU (tests/signals/test_gpu_spectral.py): here the FFT path
    # is modelled through its cupy.fft fallback, with NumPy's transforms
    monkeypatch.setattr(_signal_fft.spectral, "full_correlation", lambda *args: None)


def _run(func, a, b, mode, method, boundary="fill", fillvalue=0, axes=None, dense=False):
    plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func=func, mode=mode,
                       boundary=boundary, axes=axes, prefer_small_kernel=True)
    fill = check_fillvalue(fillvalue, plan.result_dtype)
    if method == "direct":
        z = _signal_direct.run_direct(plan, a, b, fill, compute_dtype(plan.result_dtype))
    elif method == "runner":  # what the public functions call: the lean plane runner where it applies
        compute = compute_dtype(plan.result_dtype)
        run = (_signal_cost.dense_volume_runner(plan, compute) if dense
               else _signal_direct.direct_runner(plan, a, b, fill, compute))
        z = run(a, b)
    else:
        z = _signal_fft.run_fft(plan, a, b, fill, _signal_fft.fft_work_dtype(plan))
        if plan.result_dtype.kind in "iu":
            z = z.real.round().astype(np.int64)
    return z.astype(plan.result_dtype)


CASES = [("correlate", (9, 11), (3, 4), "same"), ("convolve", (12,), (5,), "full"),
         ("correlate", (3, 4), (5, 7), "valid"), ("correlate", (4, 5, 6), (2, 3, 2), "same"),
         ("convolve", (4, 3, 5), (2, 2, 4), "valid"), ("correlate", (5,), (9,), "full")]


@pytest.mark.parametrize("method", ["direct", "fft"])
@pytest.mark.parametrize("dtype", ["float64", "complex128", "int16"])
@pytest.mark.parametrize("func,s1,s2,mode", CASES)
def test_nd_paths_match_scipy(numpy_cupy, func, s1, s2, mode, dtype, method):
    rng = np.random.default_rng(len(s1) + len(s2))
    a = (rng.standard_normal(s1) * 3 + (1j * rng.standard_normal(s1) if "c" in dtype else 0))
    b = (rng.standard_normal(s2) * 3 + (1j * rng.standard_normal(s2) if "c" in dtype else 0))
    a, b = a.astype(dtype), b.astype(dtype)
    ref = getattr(signal, func)(a, b, mode=mode, method="direct")
    got = _run(func, a, b, mode, method)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.allclose(got, ref, atol=1e-9) if dtype != "int16" else np.array_equal(got, ref)


@pytest.mark.parametrize("method", ["direct", "runner", "fft"])
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
@pytest.mark.parametrize("s2,mode", [((3, 4), "same"), ((6, 9), "full"), ((2, 2), "valid"),
                                      ((9, 9), "valid")])
def test_2d_paths_match_scipy(numpy_cupy, func, boundary, s2, mode, method):
    rng = np.random.default_rng(len(s2))
    a = rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7))
    b = rng.standard_normal(s2) + 1j * rng.standard_normal(s2)
    ref = getattr(signal, func)(a, b, mode=mode, boundary=boundary, fillvalue=0.5 - 2j)
    got = _run(func, a, b, mode, method, boundary, 0.5 - 2j)
    assert got.shape == ref.shape and np.allclose(got, ref, atol=1e-9)


@pytest.mark.parametrize("method", ["direct", "fft"])
@pytest.mark.parametrize("s1,s2,axes", [((4, 9, 10), (1, 3, 3), (1, 2)),
                                         ((3, 9, 10), (3, 3, 3), (1, 2)),
                                         ((5, 40), (1, 7), -1), ((2, 6, 5, 3), (2, 3, 2, 1), (1, 2))])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_batched_axes_match_fftconvolve(numpy_cupy, s1, s2, axes, mode, method):
    rng = np.random.default_rng(len(s1))
    a, b = rng.standard_normal(s1), rng.standard_normal(s2)
    ref = signal.fftconvolve(a, b, mode=mode, axes=axes)
    got = _run("convolve", a, b, mode, method, axes=axes)
    assert got.shape == ref.shape and np.allclose(got, ref, atol=1e-9)


SINGLE_WITH_INTEGERS = list(itertools.product(["float32", "complex64", "float16"],
                                              ["bool", "int8", "uint8", "int16", "uint16"]))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("func", ["convolve", "correlate"])
def test_fft_precision_follows_scipy(numpy_cupy, func, mode):
    """method='fft' transforms in SciPy's precision: an integer or bool operand in double (as
    scipy.fft does), so a single-precision result (float32 x uint16 -> float32) is the double
    transform cast, within 2 ulps of the exact sum in every element (SciPy's
    test_convolve_method data: 0/1 integers and normal floats); float16 x float16 in single."""
    rng = np.random.default_rng(42)
    ints, floats = rng.choice([0, 1], size=100), rng.standard_normal(100)
    for d1, d2 in SINGLE_WITH_INTEGERS + [(d2, d1) for d1, d2 in SINGLE_WITH_INTEGERS]:
        a = (floats + 0.5j * floats if "complex" in d1 else floats if "float" in d1 else ints)
        b = (floats + 0.5j * floats if "complex" in d2 else floats if "float" in d2 else ints)
        a, b = a.astype(d1), b.astype(d2)[:37]
        plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func=func, mode=mode)
        assert _signal_fft.fft_work_dtype(plan) == ("complex128" if "complex" in d1 + d2
                                                     else "float64")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert signal.correlate(a, b, mode, method="fft").dtype == plan.result_dtype
        got = _run(func, a, b, mode, "fft")
        wide = [v.astype(np.complex128 if v.dtype.kind == "c" else np.float64) for v in (a, b)]
        exact = getattr(signal, func)(*wide, mode=mode, method="direct")
        ref = exact.astype(plan.result_dtype)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        ulp = np.spacing(np.maximum(np.abs(ref.real), np.abs(ref.imag)))
        assert (np.abs(got - ref) <= 2 * ulp + 1e-12 * np.abs(exact).max()).all(), (d1, d2)
    plan = plan_filter((5,), (3,), np.float16, np.float16, func=func, mode=mode)
    assert _signal_fft.fft_work_dtype(plan) == "float32"


def test_launch_config_fits_shared_memory():
    for item in (4, 8, 16):
        for out3 in [(1, 1, 10), (1, 1, 1 << 20), (1, 4096, 4096), (3, 17, 5)]:
            for k3 in [(1, 1, 1), (1, 3, 3), (1, 63, 63), (1, 200, 200), (5, 5, 5), (1, 1, 4000)]:
                (tx, ty), kwc, khc, smem = _signal_direct.launch_config(item, out3, k3)
                assert smem <= _signal_direct.SMEM_LIMIT and tx * ty <= 256 and tx % 32 == 0
                assert 1 <= khc <= k3[1] and kwc in (4, 8, 16, 32)


def test_plane_kernel_takes_real_2d_planes_only():
    """filter_plane serves float32/64 planes with filters up to 16 columns;
    everything else (complex, integers, 3-d filters, 1-d rows, wide filters) stays general."""
    cfg = _signal_direct.plane_config
    assert cfg("float32", (1, 4096, 4096), (1, 3, 3), (1, 4098, 4098), False)[0] == 4
    assert cfg("float32", (1, 512, 512), (1, 5, 5), (1, 512, 512), True)[0] == 8
    assert cfg("float64", (1, 100, 92), (1, 15, 15), (1, 100, 92), True)[0] == 16
    for args in [("complex64", (1, 64, 64), (1, 3, 3), (1, 64, 64)),
                 ("uint64", (1, 64, 64), (1, 3, 3), (1, 64, 64)),
                 ("float32", (5, 64, 64), (3, 3, 3), (3, 64, 64)),
                 ("float32", (1, 1, 4096), (1, 1, 7), (1, 1, 4096)),
                 ("float32", (1, 64, 64), (1, 3, 17), (1, 64, 64))]:
        assert cfg(*args, False) is None, args
    for item, dtype in ((4, "float32"), (8, "float64")):
        for kh in range(1, 80):
            for kw in range(1, 17):
                got = cfg(dtype, (1, 300, 300), (1, kh, kw), (1, 300, 300), False)
                assert got is not None and got[1] <= _signal_direct.SMEM_LIMIT and got[0] >= kw


@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
def test_lean_plane_runner_matches_scipy(numpy_cupy, func, mode, boundary):
    """Real contiguous planes take the lean runner (one allocation, one plane launch, the filter
    reversed by the kernel for convolution); single images and stacks with shared or per-image
    filters."""
    rng = np.random.default_rng([len(func), len(mode), len(boundary)])
    a, b = rng.standard_normal((9, 13)), rng.standard_normal((3, 4))
    plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func=func, mode=mode,
                       boundary=boundary, axes=None, prefer_small_kernel=True)
    assert _signal_direct.lean_plane_runner(plan, a, b, 0.5, "float64") is not None
    ref = getattr(signal, func)(a, b, mode=mode, boundary=boundary, fillvalue=0.5)
    assert np.allclose(_run(func, a, b, mode, "runner", boundary, 0.5), ref, atol=1e-12)
    if boundary == "fill":
        stack = rng.standard_normal((3, 9, 13))
        for ks in (rng.standard_normal((1, 3, 4)), rng.standard_normal((3, 3, 4))):
            fn = signal.fftconvolve if func == "convolve2d" else \
                (lambda s, k, **kw: signal.fftconvolve(s, k[:, ::-1, ::-1], **kw))
            ref = fn(stack, ks, mode=mode, axes=(1, 2))
            got = _run(func.replace("2d", ""), stack, ks, mode, "runner", axes=(1, 2))
            assert got.shape == ref.shape and np.allclose(got, ref, atol=1e-9)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("s1,s2,axes", [((50,), (4,), None), ((6,), (47,), None),
                                         ((3, 50, 6), (1, 4, 47), (1, 2)),
                                         ((50, 3, 47), (6, 3, 4), (0, 2)),
                                         ((1000,), (37,), None), ((2, 300), (1, 9), -1)])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_overlap_add_matches_scipy_oaconvolve(numpy_cupy, s1, s2, axes, mode, dtype):
    """The overlap-add path (blocks on the long axes, one transform on the others) against
    scipy.signal.oaconvolve, with NumPy's FFT standing in for cupy.fft."""
    rng = np.random.default_rng(len(s1) + len(s2))
    a = rng.standard_normal(s1) + (1j * rng.standard_normal(s1) if dtype == "complex128" else 0)
    b = rng.standard_normal(s2) + (1j * rng.standard_normal(s2) if dtype == "complex128" else 0)
    try:
        ref = signal.oaconvolve(a, b, mode=mode, axes=axes)
    except ValueError:
        with pytest.raises(ValueError):
            plan_filter(s1, s2, a.dtype, b.dtype, func="oaconvolve", mode=mode, axes=axes)
        return
    plan = plan_filter(s1, s2, a.dtype, b.dtype, func="oaconvolve", mode=mode, axes=axes)
    blocks = _signal_fft.overlap_add_blocks(plan)
    assert blocks  # every case here has a long axis worth cutting into blocks
    got = _signal_fft.run_fft(plan, a, b, 0, _signal_fft.fft_work_dtype(plan), blocks)
    assert got.shape == ref.shape and np.allclose(got, ref, atol=1e-10)


# --------------------------------------------------------------------------- 3-d on nd_dense_tile
@pytest.fixture
def host_dense_tile(numpy_cupy, monkeypatch):
    """numpy_cupy, with ndimage's nd_dense_tile run as host C++ (its own source) and the cached
    device copies replaced by host arrays; returns the list of templates launched."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from host_kernels import HostModule, compiler

    from cupyconv._ndimage import passes

    if compiler() is None:
        pytest.skip("no host C++ compiler")
    launched, modules = [], {}
    models = {"filter_direct": _model_kernel, "filter_plane": _model_plane_kernel}

    def get_function(module, template, dtype, variant=()):
        if template in models:
            return models[template]
        name = module.name_expression(template, dtype, variant)

        def launch(grid, block, args, shared_mem=0):
            x, w, y, prm = args
            launched.append(template)
            if module not in modules:
                modules[module] = HostModule(module)
            modules[module].call(name, grid, block, (x, w, y, prm), shared_mem)

        return launch

    monkeypatch.setattr(jit, "get_function", get_function)
    monkeypatch.setattr(passes, "device_copy", lambda h: np.ascontiguousarray(h))
    return launched


@pytest.mark.parametrize("func", ["correlate", "convolve"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("s1,s2", [((6, 9, 37), (3, 3, 3)), ((5, 7, 8), (2, 4, 3)),
                                   ((3, 4, 5), (5, 2, 7)), ((11, 4, 6), (2, 3, 4)),
                                   ((5, 13, 7), (3, 4, 2))])
def test_same_volumes_run_on_dense_tile(host_dense_tile, func, dtype, s1, s2):
    """'same' over the three axes of a real volume runs ndimage's nd_dense_tile with taps at
    ``t - pad_lo`` and zeros outside, the longest axis moved last (and back): even filter sizes
    (SciPy's centring), filters larger than the volume along an axis, convolution's reversed
    filter."""
    rng = np.random.default_rng(len(s1) + sum(s2))
    a, b = rng.standard_normal(s1).astype(dtype), rng.standard_normal(s2).astype(dtype)
    plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func=func, mode="same")
    perm, _ = _signal_cost.dense_volume_layout(plan, dtype)
    assert perm[-1] == int(np.argmax(s1)) and sorted(perm) == [0, 1, 2]
    got = _run(func, a, b, "same", "runner", dense=True)
    ref = getattr(signal, func)(a.astype(np.float64), b.astype(np.float64), mode="same",
                                method="direct")
    assert host_dense_tile == ["nd_dense_tile"]
    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape and got.flags.c_contiguous
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_dense_tile_route_limits():
    """Only real 'same' volumes over all three axes with zero fill and taps that fit the tile
    can take nd_dense_tile; the cost model picks it where its padded tiles cost less than
    filter_direct, and the direct estimate is the cheaper kernel's."""
    from cupyconv._dispatch import signal as cost

    def layout(s1, s2, dtype="float32", **kw):
        kw.setdefault("mode", "same")
        plan = plan_filter(s1, s2, dtype, dtype, func="correlate", **kw)
        return _signal_cost.dense_volume_layout(plan, compute_dtype(plan.result_dtype)), plan

    (perm, offsets), plan = layout((64, 64, 64), (3, 5, 7))
    assert perm == (0, 1, 2) and offsets.shape == (105, 3)
    assert offsets.min(axis=0).tolist() == [-1, -2, -3]
    (perm, offsets), _ = layout((300, 20, 30), (3, 5, 7))
    assert perm == (1, 2, 0) and offsets.min(axis=0).tolist() == [-2, -3, -1]
    for s1, s2, kw in [((64, 64, 64), (3, 3, 3), {"mode": "full"}),
                       ((64, 64, 64), (3, 3, 3), {"mode": "valid"}),
                       ((64, 64, 64), (3, 3, 3), {"dtype": "complex64"}),
                       ((64, 64, 64), (21, 21, 21), {}),          # the taps overflow the tile
                       ((4, 64, 64, 64), (1, 3, 3, 3), {"axes": (1, 2, 3)}),  # a batch axis
                       ((64, 64), (3, 3), {})]:
        got, plan = layout(s1, s2, **kw)
        compute = compute_dtype(plan.result_dtype)
        assert got is None and cost.dense_volume_ms(plan, compute) is None, (s1, s2, kw)
        assert not cost.use_dense_volume(plan, compute)
    for s1, s2 in [((160, 120, 80), (7, 7, 7)), ((48, 256, 256), (9, 3, 3)), ((64, 64, 64), (3, 3, 3))]:
        plan = layout(s1, s2)[1]
        dense, fd = cost.dense_volume_ms(plan, "float32"), cost.filter_direct_ms(plan, "float32")
        assert cost.use_dense_volume(plan, "float32") == (dense < fd)
        assert cost.direct_ms(plan, "float32") == min(dense, fd)
