"""The merged-groups repair passes (direct_conv.cu with ``only_nan``: ``repair_merged_forward``,
``repair_merged_data``) executed on the CPU through ``host_kernels``, through their own launchers.

A result polluted the way the GEMM over merged groups pollutes it -- the float64 reference run on
the block-diagonal merged weights, where a NaN or inf of one group's input meets the zeros of the
other groups and makes their outputs NaN -- is repaired into exactly the grouped reference: NaN
and inf masks equal, finite values within tolerance, the outputs that were finite untouched.
Forward (with bias) and backward-data, both layouts, float32 / float16 / float64, results at
16-byte aligned addresses and one element past (the scan's vector and element paths).  Skipped
without a host C++20 compiler."""

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core import jit
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import random_array
from cupyconv._direct import launch as direct_launch
from cupyconv._gemm.grouped import group_blocks

from gpu_cases import rng_for
from host_kernels import compiler, host_module

pytestmark = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")


class HostArray(np.ndarray):
    """A NumPy array with the ``device`` context the launchers enter."""

    @property
    def device(self):
        return contextlib.nullcontext()


@pytest.fixture
def host_kernels(monkeypatch):
    def get_function(module, template, dtype, variant=()):
        name = module.name_expression(template, dtype, variant)
        return lambda grid, block, args: host_module(module).call(name, grid, block, args)

    monkeypatch.setattr(jit, "get_function", get_function)


def _block_diagonal(w, geom, factor):
    """The merged weights (groups // factor groups of factor * Cg channels), zeros off the
    diagonal blocks: what the GEMM over merged groups multiplies by."""
    cl = geom.channels_last
    c_axis = w.ndim - 1 if cl else 1
    shape = list(w.shape)
    shape[c_axis] *= factor
    wm = np.zeros(shape, w.dtype)
    group_blocks(wm, geom.groups, factor, cl, True)[...] = group_blocks(w, geom.groups, factor, cl,
                                                                        False)
    return wm


def _masks_and_values(got, want, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got == np.inf, want == np.inf)
    assert np.array_equal(got == -np.inf, want == -np.inf)
    fin = np.isfinite(want)
    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2}[dtype]
    assert np.abs(got[fin] - want[fin]).max() <= tol * max(1.0, np.abs(want[fin]).max())


def _placed(a, aligned):
    """``a`` as a C-contiguous HostArray at a 16-byte aligned address, or one element past one (the
    scan then tests element by element instead of 16 bytes at a time)."""
    buf = np.empty(a.size + 16 // a.itemsize + 1, a.dtype)
    start = (-buf.ctypes.data % 16) // a.itemsize + (0 if aligned else 1)
    out = buf[start:start + a.size].reshape(a.shape)
    out[...] = a
    return out.view(HostArray)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("aligned", [True, False])
def test_repair_restores_the_grouped_result(host_kernels, layout, dtype, value, aligned):
    groups, factor, cg, kg = 4, 4, 3, 2
    xs = (2, 9, 10, groups * cg) if layout == "NHWC" else (2, groups * cg, 9, 10)
    ws = (groups * kg, 3, 3, cg) if layout == "NHWC" else (groups * kg, cg, 3, 3)
    opts = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=groups, layout=layout)
    geom = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    rng = rng_for("repair-host", layout, dtype, str(value))
    x = random_array(rng, geom.input_shape, dtype)
    w = random_array(rng, geom.weight_shape, dtype)
    w = (np.sign(w) * (0.25 + np.abs(w))).astype(w.dtype)  # (no zero taps)
    b = random_array(rng, (geom.out_channels,), dtype)
    dy = random_array(rng, geom.output_shape, dtype)
    cx = (0, 4, 5, 1) if layout == "NHWC" else (0, 1, 4, 5)      # channel 1: group 0
    cy = (1, 2, 3, 5) if layout == "NHWC" else (1, 5, 2, 3)      # channel 5: group 2
    x[cx], dy[cy] = value, value
    wm = _block_diagonal(w, geom, factor)
    merged = dict(opts, groups=groups // factor)
    nd = numpy_dtype(dtype)
    # forward
    y = _placed(reference.conv(x, wm, b, **merged).astype(nd), aligned)
    want = reference.conv(x, w, b, **opts)
    assert np.isnan(y).sum() > np.isnan(want).sum()  # (the merge's pollution is there to repair)
    finite_before = np.isfinite(np.asarray(y, np.float64))
    kept = np.array(y[finite_before])
    direct_launch.repair_merged_forward(geom, x.view(HostArray), w, b, y)
    _masks_and_values(y, want, dtype)
    assert np.array_equal(y[finite_before], kept)  # only NaN outputs are recomputed
    # backward-data (the bias of a transposed convolution added)
    bx = random_array(rng, (geom.in_channels,), dtype)
    dx = reference.conv_backward_data(dy, wm, geom.input_shape, **merged)
    cshape = (1,) * (dx.ndim - 1) + (-1,) if layout == "NHWC" else (1, -1, 1, 1)
    dx = _placed((dx + bx.astype(np.float64).reshape(cshape)).astype(nd), aligned)
    want = reference.conv_backward_data(dy, w, geom.input_shape, **opts) + \
        bx.astype(np.float64).reshape(cshape)
    assert np.isnan(dx).sum() > np.isnan(want).sum()
    direct_launch.repair_merged_data(geom, dy.view(HostArray), w, bx, dx)
    _masks_and_values(dx, want, dtype)
