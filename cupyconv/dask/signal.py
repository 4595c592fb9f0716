"""``scipy.signal``'s correlate / convolve of a dask ``in1`` with a small concrete ``in2``: ``in1``
zero-padded as the mode needs, each chunk in 'valid' mode with a right halo
(:func:`cupyconv.dask.graph._map_windows`)."""

from __future__ import annotations

import functools

import numpy as np

from cupyconv.dask.chunks import (_backend, _dask_array, _for_block, _is_cupy, _require_dask,
                                  _shared)
from cupyconv.dask.graph import _map_windows


def _signal_filter(func, in1, in2, mode, method, gpu):
    x = _require_dask(in1, "in1")
    da = _dask_array()
    if isinstance(in2, da.Array):
        raise TypeError("in2 must be a concrete (NumPy or CuPy) array, not a dask array: call "
                        ".compute() on it first (it is embedded once in the graph)")
    w = in2.get() if _is_cupy(in2) else np.asarray(in2)
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be 'full', 'same' or 'valid', got {mode!r}")
    if method not in ("auto", "direct", "fft"):
        raise ValueError(f"method must be 'auto', 'direct' or 'fft', got {method!r}")
    if w.ndim != x.ndim:
        raise ValueError(f"in1 and in2 should have the same dimensionality, got in1.ndim "
                         f"{x.ndim} and in2.ndim {w.ndim}")
    if 0 in x.shape or 0 in w.shape:
        raise ValueError(f"in1 and in2 must not be empty, got shapes {x.shape} and {w.shape}")
    if mode == "valid" and any(k > n for n, k in zip(x.shape, w.shape)):
        # SciPy would swap the operands; the small in2 cannot take the dask array's place
        raise ValueError(f"in1 (the dask array) must be at least as large as in2 in every "
                         f"dimension for 'valid' mode, got shapes {x.shape} and {w.shape}")
    windows = {}
    for ax, k in enumerate(w.shape):
        # zeros around in1 so that every output is a 'valid' window of the padded array:
        # 'full' pads k - 1 on each side; 'same' keeps the centred part of 'full', which starts
        # (k - 1) // 2 into it (SciPy's centring, also for even k); 'valid' pads nothing
        start = {"full": 0, "same": (k - 1) // 2, "valid": k - 1}[mode]
        windows[ax] = (k - 1 - start, start if mode == "same" else k - 1 - start, k - 1, 1)
    dtype = np.result_type(x.dtype, w.dtype)

    return _map_windows(x, windows, {}, functools.partial(_signal_block, func=func, method=method),
                        dtype, gpu, weights=_shared((w,)))


def _signal_block(block, weights, func, method):
    """``scipy.signal``'s ``func`` (the backend's) in 'valid' mode on one block."""
    return getattr(_backend(block, "signal"), func)(block, *_for_block(weights, block),
                                                    mode="valid", method=method)


def signal_correlate(in1, in2, mode="full", method="auto", *, gpu=None):
    """:func:`cupyconv.signal.correlate` (``scipy.signal.correlate`` semantics) of a dask array
    ``in1`` with a small concrete (NumPy or CuPy) ``in2`` of the same number of dims.

    Named ``signal_*`` because :func:`correlate` here is ``ndimage.correlate``.  Each chunk is
    correlated in 'valid' mode with a halo of ``in2.shape - 1`` from its right neighbours after
    ``in1`` is zero-padded as the mode needs ('full': ``k - 1`` on each side; 'same': SciPy's
    centring, ``k - 1 - (k - 1) // 2`` before and ``(k - 1) // 2`` after); CuPy chunks run
    ``cupyconv.signal.correlate``, NumPy chunks ``scipy.signal.correlate`` (``method`` is passed
    to both; with 'auto' a chunk may take another method than the whole array, so results agree
    to rounding).  In 'valid' mode ``in1`` must be the larger operand in every dim.
    """
    return _signal_filter("correlate", in1, in2, mode, method, gpu)


def signal_convolve(in1, in2, mode="full", method="auto", *, gpu=None):
    """:func:`cupyconv.signal.convolve` (``scipy.signal.convolve`` semantics) of a dask array
    ``in1`` with a small concrete ``in2``; chunking as in :func:`signal_correlate` (convolution
    reads the same window of ``in1`` as correlation, with the kernel reversed)."""
    return _signal_filter("convolve", in1, in2, mode, method, gpu)
