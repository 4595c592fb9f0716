"""The depthwise launch path run on the host: NumPy arrays that look like CuPy arrays to the
launchers (:class:`HostArray`), poisoned allocations (:func:`host_empty`) and the ``host_route``
fixture (registered in conftest.py), under which ``jit.get_function`` returns host builds of the
kernel modules (tests/host_kernels.py)."""

import contextlib
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv._core import copy as core_copy
from cupyconv._core import jit
from cupyconv._core import launch as core_launch
from cupyconv._core.caches import clear_caches
from cupyconv._core.dtypes import numpy_dtype
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


@pytest.fixture
def no_bands(monkeypatch):
    """The band kernel (depthwise_bands.cu) never preferred, on the host route or the GPU: the
    tests of the routes it would otherwise take over (the plane row walk on narrow planes,
    strided channels-first backward-data through channels-last copies) still reach them."""
    monkeypatch.setattr(bands, "prefer_bands", lambda geom, transposed: False)
    clear_caches()  # (launches planned before hold the other route; so do prepared calls)
    yield
    clear_caches()
