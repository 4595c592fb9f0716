"""The FFT path of the signal API: a :class:`FilterPlan` executed with ``cupy.fft``.

Real operands use the real-input transforms (``rfftn``/``irfftn``: half the spectrum), complex ones
``fftn``/``ifftn``; every transform length is padded to a 2,3,5,7-smooth size (the radices cuFFT and
rocFFT handle fastest).  Boundary modes other than a zero fill are reproduced exactly: a constant
fill ``c`` is ``corr(a - c, g) + c * sum(g)``; 'wrap' and 'symm' gather the padded input with the
same index map the direct kernel uses, then correlate it in 'valid' fashion.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._signal.plan import FilterPlan, boundary_indices, finish, kernel_operand


def next_fast_len(n: int) -> int:
    """Smallest 2,3,5,7-smooth integer >= ``n`` (``n >= 1``)."""
    if n <= 1:
        return 1
    best = 1 << (n - 1).bit_length()  # a power of two always qualifies
    p7 = 1
    while p7 < best:
        p75 = p7
        while p75 < best:
            p753 = p75
            while p753 < best:
                # the smallest power of two lifting p753 to >= n
                m = p753 << max(0, (-(-n // p753) - 1).bit_length())
                best = min(best, m)
                p753 *= 3
            p75 *= 5
        p7 *= 7
    return best


def _full_correlation(x, g, axes, work_dtype):
    """``corr(x, g)`` over ``axes`` in 'full' extent (other axes broadcast), by FFT."""
    import cupy

    axes = tuple(axes)  # CuPy's flip wants a tuple of axes, not a list
    sizes = [x.shape[a] + g.shape[a] - 1 for a in axes]
    fast = [next_fast_len(n) for n in sizes]
    h = cupy.flip(g, axis=axes)  # correlation is convolution with the reversed kernel
    if np.dtype(work_dtype).kind == "c":
        spec = cupy.fft.fftn(x, fast, axes) * cupy.fft.fftn(h, fast, axes)
        z = cupy.fft.ifftn(spec, fast, axes)
    else:
        spec = cupy.fft.rfftn(x, fast, axes) * cupy.fft.rfftn(h, fast, axes)
        z = cupy.fft.irfftn(spec, fast, axes)
    keep = dict(zip(axes, sizes))
    return z[tuple(slice(0, keep[i]) if i in keep else slice(None) for i in range(z.ndim))]


def run_fft(plan: FilterPlan, in1, in2, fillvalue, work_dtype: str):
    """The plan's result computed in ``work_dtype`` (float32/64 or complex64/128), not yet cast."""
    import cupy

    a, g = (in2, in1) if plan.swapped else (in1, in2)
    a = a.astype(work_dtype, copy=False)
    g = kernel_operand(plan, g.astype(work_dtype, copy=False), cupy)
    axes = list(plan.axes)
    if not axes:  # every axis broadcasts: an elementwise product
        return finish(plan, a * g, cupy)
    fv = np.asarray(fillvalue).astype(work_dtype)[()]
    starts = {}
    if plan.boundary == "fill":
        x = a - fv if fv != 0 else a
        z = _full_correlation(x, g, axes, work_dtype)
        for k, ax in enumerate(axes):  # full-output index of output 0
            starts[ax] = g.shape[ax] - 1 - plan.pad_lo[k]
        if fv != 0:
            z = z + fv * g.sum(axis=tuple(axes), keepdims=True)
    else:
        index = []
        for i in range(a.ndim):
            if i in axes:
                k = axes.index(i)
                count = plan.out_shape[i] + g.shape[i] - 1
                index.append(cupy.asarray(boundary_indices(-plan.pad_lo[k], count, a.shape[i],
                                                           plan.boundary)))
            else:
                index.append(cupy.arange(a.shape[i]))
        x = a[cupy.ix_(*index)]
        z = _full_correlation(x, g, axes, work_dtype)
        for ax in axes:  # 'valid' part of the padded input
            starts[ax] = g.shape[ax] - 1
    sl = tuple(slice(starts[i], starts[i] + plan.out_shape[i]) if i in axes else slice(None)
               for i in range(a.ndim))
    z = z[sl]
    if z.shape != plan.out_shape:  # a broadcast axis where both operands have length 1 in one
        z = cupy.broadcast_to(z, plan.out_shape)
    return finish(plan, z, cupy)


def fft_work_dtype(plan: FilterPlan) -> str:
    """Transform precision: single for float16/32 and complex64 results, double otherwise."""
    r = np.dtype(plan.result_dtype)
    if r.kind == "c":
        return r.name
    return "float32" if r in (np.float16, np.float32) else "float64"


def fft_points(plan: FilterPlan) -> tuple[int, int]:
    """(points per transform, number of batched transforms) of the plan, for the cost model."""
    per = 1
    for ax in plan.axes:
        per *= next_fast_len(plan.shape_a[ax] + plan.shape_g[ax] - 1)
    batch = math.prod(plan.out_shape[i] for i in plan.batch_axes)
    return per, batch
