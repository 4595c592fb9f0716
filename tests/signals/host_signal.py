"""Run cupyconv.signal's public functions on the CPU: NumPy stands in for CuPy (arrays are
:class:`HostArray` views), the direct kernels are the NumPy models of their contract
(test_signal_host.py; real 'same' volumes too, not nd_dense_tile) and the FFT path runs through
its ``cupy.fft`` fallback on NumPy's transforms.  Prepared calls are off (every call takes the
full path).  Kernel requests are counted, so validation tests can check that nothing ran before
an error."""

from __future__ import annotations

import contextlib
import sys
import types

import numpy as np

from test_signal_host import _model_kernel, _model_plane_kernel


class HostArray(np.ndarray):
    """A NumPy array that passes for a cupy.ndarray (``with a.device:`` works)."""

    @property
    def device(self):
        return contextlib.nullcontext()


def host(a) -> HostArray:
    """``a`` as the stand-in of a CuPy array (a 0-d array stays an array)."""
    return np.asarray(a).view(HostArray)


def _returning_host(f):
    return lambda *args, **kwargs: host(f(*args, **kwargs))


class HostSignal:
    """Patches cupyconv.signal to run on :class:`HostArray` inputs with the kernel models."""

    def __init__(self, monkeypatch):
        import cupyconv.signal as cs
        from cupyconv._core import jit
        from cupyconv._signal import fft

        fake = types.ModuleType("cupy")
        for name in ("broadcast_to", "moveaxis", "flip", "conj", "ix_", "fft", "pad"):
            setattr(fake, name, getattr(np, name))
        for name in ("ascontiguousarray", "empty", "full", "zeros", "arange", "asarray"):
            setattr(fake, name, _returning_host(getattr(np, name)))
        fake.ndarray = HostArray
        fake.asnumpy = np.asarray
        monkeypatch.setitem(sys.modules, "cupy", fake)
        self.kernels = []
        models = {"filter_direct": _model_kernel, "filter_plane": _model_plane_kernel}

        def get_function(module, template, *args):
            self.kernels.append(template)
            return models[template]

        monkeypatch.setattr(jit, "get_function", get_function)
        monkeypatch.setattr(fft.spectral, "full_correlation", lambda *args: None)
        monkeypatch.setattr(cs, "call_key", lambda name, arrays, options: (None, arrays))
        # (the lean plane path records its launches for the prepared call: here it just runs)
        monkeypatch.setattr(cs, "prepare", lambda run_full, names, inputs, y: run_full(inputs, y))
        monkeypatch.setattr(cs, "same_device", lambda arrays: None)
        # real 'same' volumes stay on filter_direct's model (their nd_dense_tile route:
        # test_signal_host.py's host_dense_tile)
        monkeypatch.setattr(cs, "use_dense_volume", lambda plan, compute: False)
