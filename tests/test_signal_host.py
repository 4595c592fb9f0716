"""The signal API's host code (launch arguments, batching, FFT path) without a GPU.

CuPy is replaced by NumPy and the direct kernel by a NumPy model of its contract (the formula in
filter_direct.cu's header, read from the very argument list the launcher builds), so argument
order, strides, pads, batch flattening and the FFT path are checked against scipy.signal on the
CPU.  The kernel's tiling itself is exercised by tests/test_gpu_signal.py on the GPU.
"""

import sys
import types

import numpy as np
import pytest
from scipy import signal

from cupyconv import _signal_direct, _signal_fft, jit
from cupyconv._signal_plan import (BOUNDARY_CODE, boundary_indices, check_fillvalue,
                                   compute_dtype, plan_filter)

CODES = {v: k for k, v in BOUNDARY_CODE.items()}


def _model_kernel(grid, block, args, shared_mem=0):
    """What filter_direct computes, from its arguments."""
    x, g, fill_re, fill_im, y = args[:5]
    fill = [fill_re + 1j * fill_im if x.dtype.kind == "c" else fill_re]
    assert np.asarray(fill_re).dtype == np.asarray(x.real).dtype
    (planes, OD, OH, OW, D, H, W, KD, KH, KW, PD, PH, PW, bnd, xsb, xsd, xsh, xsw, gsb, khc,
     tiles_w) = [int(v) for v in args[5:]]
    assert shared_mem <= _signal_direct.SMEM_LIMIT and 1 <= khc <= KH
    assert grid[0] == tiles_w * -(-OH // block[1]) and tiles_w * block[0] * \
        _signal_direct.outputs_per_thread(x.itemsize) >= OW
    boundary = CODES[bnd]
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
                 "asarray", "arange", "ix_", "fft"):
        setattr(fake, name, getattr(np, name))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(jit, "get_function", lambda *a, **k: _model_kernel)


def _run(func, a, b, mode, method, boundary="fill", fillvalue=0, axes=None):
    plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func=func, mode=mode,
                       boundary=boundary, axes=axes, prefer_small_kernel=True)
    fill = check_fillvalue(fillvalue, plan.result_dtype)
    if method == "direct":
        z = _signal_direct.run_direct(plan, a, b, fill, compute_dtype(plan.result_dtype))
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


@pytest.mark.parametrize("method", ["direct", "fft"])
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


def test_launch_config_fits_shared_memory():
    for item in (4, 8, 16):
        for out3 in [(1, 1, 10), (1, 1, 1 << 20), (1, 4096, 4096), (3, 17, 5)]:
            for k3 in [(1, 1, 1), (1, 3, 3), (1, 63, 63), (1, 200, 200), (5, 5, 5), (1, 1, 4000)]:
                (tx, ty), kwc, khc, smem = _signal_direct.launch_config(item, out3, k3)
                assert smem <= _signal_direct.SMEM_LIMIT and tx * ty <= 256 and tx % 32 == 0
                assert 1 <= khc <= k3[1] and kwc in (4, 8, 16, 32)
