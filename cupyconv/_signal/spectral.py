"""Correlation by FFT with cuFFT plans of our own: the signal API's FFT path without ``cupy.fft``'s
per-call host cost.

``cupy.fft.rfftn`` / ``irfftn`` look their plan up in CuPy's plan cache, pad through a copy of
their own, copy the inverse transform's input (cuFFT's C2R overwrites it) and normalise with a
separate division: 0.55-0.7 ms of host time per correlation on an H100 host, five times the
113 µs its kernels take on a 96^3 volume with a 15^3 kernel (``benchmarks/experiments/README.md: exp_signal_host.py``).
Here each operand is zero-padded into a buffer of its own and transformed by a plan held per
thread and device (cuFFT plans are not safe to run from two threads at once: they own their
work area); one elementwise kernel multiplies the spectra and scales by ``1 / points``, writing
the inverse transform's input, which is ours to overwrite.  Host time: 0.22 ms on that volume.

Applies to 1-3 convolved axes (moved last, the others a broadcast batch); overlap-add blocks,
more axes and ROCm (whose hipFFT refuses C2R plans over several axes) keep ``cupy.fft``
(:func:`cupyconv._signal.fft._full_correlation`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

# Plans kept per thread (least recently used dropped first): a plan holds its cuFFT work area.
MAX_PLANS_PER_THREAD = 16

_local = threading.local()
_product = None


def _spectrum_product():
    """``y = x * h * scale`` (complex spectra; ``scale`` a Python float, cast to their type: a
    scalar does not bind a type of its own), broadcasting: one launch."""
    global _product
    if _product is None:
        import cupy

        _product = cupy.ElementwiseKernel("T x, T h, T scale", "T y", "y = x * h * scale",
                                          "cupyconv_spectrum_product")
    return _product


def _plan(shape: tuple, transformed: tuple, value_type: str, dtype):
    """The cuFFT plan transforming the trailing ``len(transformed)`` axes of a C-contiguous
    ``shape`` array of ``dtype`` (``transformed``: the lengths of the transform, for C2R the real
    output's), from this thread's cache on the current device."""
    import cupy
    from cupyx.scipy.fft import get_fft_plan

    plans = getattr(_local, "plans", None)
    if plans is None:
        plans = _local.plans = OrderedDict()
    key = (cupy.cuda.runtime.getDevice(), shape, transformed, value_type, np.dtype(dtype).char)
    plan = plans.get(key)
    if plan is not None:
        plans.move_to_end(key)
        return plan
    k = len(transformed)
    # get_fft_plan reads only the template's shape, dtype and layout
    template = cupy.empty(shape, dtype)
    plan = get_fft_plan(template, shape=transformed, axes=tuple(range(len(shape) - k, len(shape))),
                        value_type=value_type)
    plans[key] = plan
    if len(plans) > MAX_PLANS_PER_THREAD:
        plans.popitem(last=False)
    return plan


def _forward(a, k: int, fast: tuple, spectrum: tuple, work, cwork, reverse: bool):
    """The spectrum of ``a`` (reversed along its last ``k`` axes where ``reverse``) zero-padded to
    ``fast`` along them."""
    import cupy
    from cupy.cuda import cufft

    lead = a.shape[:a.ndim - k]
    padded = cupy.zeros(lead + fast, work)
    src = cupy.flip(a, axis=tuple(range(a.ndim - k, a.ndim))) if reverse else a
    padded[(Ellipsis,) + tuple(slice(0, n) for n in a.shape[a.ndim - k:])] = src
    out = cupy.empty(lead + spectrum, cwork)
    real = work.kind == "f"
    _plan(padded.shape, fast, "R2C" if real else "C2C", work).fft(padded, out, cufft.CUFFT_FORWARD)
    return out


def full_correlation(x, g, axes: tuple, fast: tuple, work_dtype: str):
    """``corr(x, g)`` in 'full' extent over ``axes`` in ``work_dtype`` (float32/64 or
    complex64/128), each axis zero-padded to its transform length in ``fast`` (at least
    ``x.shape[a] + g.shape[a] - 1``), as a view of a fresh array; None where this path does not
    apply (see the module docstring)."""
    import cupy
    from cupy.cuda import cufft

    nd, k = x.ndim, len(axes)
    if cupy.cuda.runtime.is_hip or not 1 <= k <= 3 or g.ndim != nd or x.size == 0 or g.size == 0:
        return None
    if tuple(axes) != tuple(range(nd - k, nd)):
        # the convolved axes moved last (views; the padding copies read through any strides)
        order = [i for i in range(nd) if i not in axes] + list(axes)
        z = full_correlation(x.transpose(order), g.transpose(order),
                             tuple(range(nd - k, nd)), fast, work_dtype)
        return None if z is None else z.transpose(np.argsort(order))
    try:
        lead = np.broadcast_shapes(x.shape[:nd - k], g.shape[:nd - k])
    except ValueError:
        return None
    work = np.dtype(work_dtype)
    real = work.kind == "f"
    cwork = np.result_type(work, np.complex64)
    sizes = tuple(x.shape[a] + g.shape[a] - 1 for a in axes)
    if 1 in fast:
        # An axis where both operands have length 1 needs no transform; dropping it also keeps
        # the buffers from being C- and F-contiguous at once, which cuFFT's R2C plans refuse.
        keep = [i for i, n in enumerate(fast) if n > 1]
        if not keep:
            return None
        lead_x, lead_g = x.shape[:nd - k], g.shape[:nd - k]
        z = full_correlation(x.reshape(lead_x + tuple(x.shape[nd - k + i] for i in keep)),
                             g.reshape(lead_g + tuple(g.shape[nd - k + i] for i in keep)),
                             tuple(range(nd - k, nd - k + len(keep))),
                             tuple(fast[i] for i in keep), work_dtype)
        return z.reshape(lead + sizes)
    spectrum = fast[:-1] + (fast[-1] // 2 + 1,) if real else fast
    spec_x = _forward(x, k, fast, spectrum, work, cwork, reverse=False)
    spec_g = _forward(g, k, fast, spectrum, work, cwork, reverse=True)  # correlation: g reversed
    product = spec_x if spec_x.shape == lead + spectrum else cupy.empty(lead + spectrum, cwork)
    # cuFFT does not normalise the inverse transform
    _spectrum_product()(spec_x, spec_g, 1.0 / math.prod(fast), product)
    if real:  # (C2R overwrites its input: product is ours)
        z = cupy.empty(lead + fast, work)
        _plan(product.shape, fast, "C2R", cwork).fft(product, z, cufft.CUFFT_INVERSE)
    else:
        z = product
        _plan(product.shape, fast, "C2C", cwork).fft(product, z, cufft.CUFFT_INVERSE)
    return z[(Ellipsis,) + tuple(slice(0, n) for n in sizes)]
