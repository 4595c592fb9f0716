"""The depthwise launch path run on the host: NumPy arrays that look like CuPy arrays to the
launchers (:class:`HostArray`), poisoned allocations (:func:`host_empty`), the channels-first
cases of the host kernel tests (:func:`case_id`, :func:`host_problem`) and the fixtures
(registered in conftest.py): ``host_route``, under which ``jit.get_function`` returns host builds
of the kernel modules (tests/host_kernels.py), and ``no_bands`` / ``bands_preferred``, which
switch the band kernel off or on wherever it applies."""

import contextlib
import dataclasses
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv._core import copy as core_copy
from cupyconv._core import jit
from cupyconv._core import launch as core_launch
from cupyconv._core.caches import clear_caches
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import random_array
from cupyconv._core.kernels import STRIDED_COPY
from cupyconv._depthwise import bands, launch

from host_kernels import compiler, host_module


class HostArray(np.ndarray):
    """A NumPy array with what the launch path reads of a CuPy array: data.ptr, data.device_id and
    a ``device`` context."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.__array_interface__["data"][0], device_id=0)

    @property
    def device(self):
        return contextlib.nullcontext()


def host_empty(shape, dtype, offset_elements=0):
    """A NaN-filled C-contiguous HostArray (as a poisoned CuPy allocation) whose base is 64-byte
    aligned plus ``offset_elements``."""
    dt = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    n = int(np.prod(shape))
    buf = np.empty((n + offset_elements) * dt.itemsize + 64, np.uint8)
    start = -buf.ctypes.data % 64 + offset_elements * dt.itemsize
    out = buf[start:start + n * dt.itemsize].view(dt).reshape(shape).view(HostArray)
    out[...] = np.nan
    return out


def case_id(case) -> str:
    """Test id of a channels-first case (dtype, n, c, mult, spatial, kernel, options)."""
    dtype, n, c, mult, sp, k, o = case
    return (f"{dtype}-n{n}c{c}m{mult}-{'x'.join(map(str, sp))}-k{k}-"
            + "-".join(f"{a}{v}" for a, v in o.items()))


def host_problem(case, x_offset=0):
    """Geometry, x (at ``x_offset`` elements past a 64-byte boundary), w, bias, dy and the conv
    options of a channels-first case, random data seeded by its id."""
    dtype, n, c, mult, sp, k, o = case
    ks = k if isinstance(k, tuple) else (k, k)
    g = ConvGeometry.from_shapes((n, c, *sp), (c * mult, 1, *ks), groups=c, dtype=dtype, **o)
    rng = np.random.default_rng(zlib.crc32(case_id(case).encode()))
    x = host_empty(g.input_shape, dtype, x_offset)
    x[...] = random_array(rng, g.input_shape, dtype)
    w, dy = (random_array(rng, s, dtype).view(HostArray) for s in (g.weight_shape, g.output_shape))
    b = random_array(rng, (c * mult,), dtype).view(HostArray)
    return g, x, w, b, dy, dict(o, groups=c)


_HOST_COPY = dataclasses.replace(STRIDED_COPY, templates=("strided_copy",))
# Launch plans memoized by the launchers: they hold (host) functions, so they are dropped around
# every test that runs the host route.
_MEMOIZED_LAUNCHES = (launch._pass_launch, launch._wgrad_launches, launch._cl_wgrad_launches)


@pytest.fixture
def host_route(monkeypatch):
    """Kernels from jit.get_function run on the host; Launch keeps its packed scalars on the host;
    scratch is poisoned host memory; the tiled transpose is a NumPy copy that records its shape
    (its index math is emulated in tests/core/test_program.py); ``passes`` records the layout of
    each run_pass call, ``kernels`` the (template, variant) of each kernel looked up."""
    if compiler() is None:
        pytest.skip("no host C++ compiler")

    kernels = []

    def get_function(module, template, dtype, variant=()):
        kernels.append((template, tuple(variant)))
        module = _HOST_COPY if module == STRIDED_COPY else module
        name = module.name_expression(template, dtype, variant)

        def call(grid, block, args, shared_mem=0):
            host_module(module).call(name, grid, block, args, shared_mem)
        return call

    tiled = []

    def transpose_copy(src, dst, dims, a, b):
        tiled.append(src.shape)
        dst[...] = src

    passes = []
    run_pass = launch.run_pass

    def recording_run_pass(geom, *args):
        passes.append(geom.layout)
        run_pass(geom, *args)

    monkeypatch.setattr(jit, "get_function", get_function)
    monkeypatch.setattr(core_launch, "upload_constant", lambda a: a)
    monkeypatch.setattr(launch, "scratch", host_empty)
    monkeypatch.setattr(core_copy, "_transpose_copy", transpose_copy)
    monkeypatch.setattr(launch, "run_pass", recording_run_pass)
    for cached in _MEMOIZED_LAUNCHES:
        cached.cache_clear()
    yield SimpleNamespace(tiled=tiled, passes=passes, kernels=kernels)
    for cached in _MEMOIZED_LAUNCHES:
        cached.cache_clear()


def _prefer_bands(monkeypatch, prefer: bool):
    monkeypatch.setattr(bands, "prefer_bands", lambda geom, transposed: prefer)
    clear_caches()  # (launches planned before hold the other route; so do prepared calls)


@pytest.fixture
def no_bands(monkeypatch):
    """The band kernel (depthwise_bands.cu) never preferred, on the host route or the GPU: the
    tests of the routes it would otherwise take over (the plane row walk on narrow planes,
    strided channels-first backward-data through channels-last copies) still reach them."""
    _prefer_bands(monkeypatch, False)
    yield
    clear_caches()


@pytest.fixture
def bands_preferred(monkeypatch):
    """The band kernel wherever it applies (not only where prefer_bands picks it), on the host
    route or the GPU."""
    _prefer_bands(monkeypatch, True)
    yield
    clear_caches()
