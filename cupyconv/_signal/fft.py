"""The FFT path of the signal API: a :class:`FilterPlan` executed with cuFFT (through our own
plans, :mod:`cupyconv._signal.spectral`, where the convolved axes are the trailing ones; else
``cupy.fft``).

Real operands use the real-input transforms (``rfftn``/``irfftn``: half the spectrum), complex ones
``fftn``/``ifftn``; every transform length is padded to a 2,3,5,7-smooth size (the radices cuFFT and
rocFFT handle fastest).  Boundary modes other than a zero fill are reproduced exactly: a constant
fill ``c`` is ``corr(a - c, g) + c * sum(g)``; 'wrap' and 'symm' gather the padded input with the
same index map the direct kernel uses, then correlate it in 'valid' fashion.

Overlap-add (``oaconvolve``): on an axis where one operand is much longer than the other, the
long one is cut into blocks of ``step`` samples, every block is convolved with the short one by
one batched transform of a small length ``L = step + short - 1``, and the blocks' outputs are
summed back at their offsets (each block's last ``short - 1`` samples onto the next block's
first).  :func:`overlap_add_blocks` picks ``L`` per axis from shapes alone.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.caches import memoized
from cupyconv._signal import spectral
from cupyconv._signal.plan import FilterPlan, boundary_indices, finish, kernel_operand


@memoized(4096)
def next_fast_len(n: int) -> int:
    """Smallest 2,3,5,7-smooth integer >= ``n`` (``n >= 1``); remembered (a Python search of
    tens of microseconds, run per axis on every FFT call)."""
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


def smooth_lengths(lo: int, hi: int) -> list[int]:
    """Every 2,3,5,7-smooth integer in ``[lo, hi]``, ascending."""
    out, p7 = [], 1
    while p7 <= hi:
        p75 = p7
        while p75 <= hi:
            p753 = p75
            while p753 <= hi:
                n = p753
                while n <= hi:
                    if n >= lo:
                        out.append(n)
                    n *= 2
                p753 *= 3
            p75 *= 5
        p7 *= 7
    return sorted(out)


@memoized(1024)
def block_length(long: int, short: int) -> int | None:
    """Overlap-add transform length ``L`` for an axis convolving ``long`` with ``short`` samples,
    or None where blocks do not pay (then that axis is transformed whole, as in ``fftconvolve``).

    As SciPy's ``oaconvolve``: no blocks unless the short operand is under half the long one.
    ``L`` is the smooth length >= ``2 * short - 1`` (so a block's tail only reaches the next
    block) minimizing the transform work ``blocks(L) * L * log2(L)`` with ``blocks(L) =
    ceil(long / (L - short + 1))``; None when the best is a single block (the whole axis)."""
    if short <= 1 or 2 * short >= long:
        return None
    full = next_fast_len(long + short - 1)
    best, best_cost = None, full * math.log2(full)
    for n in smooth_lengths(2 * short - 1, full - 1):
        blocks = -(-long // (n - short + 1))
        cost = blocks * n * math.log2(n)
        if blocks > 1 and cost < best_cost:
            best, best_cost = n, cost
    return best


def overlap_add_blocks(plan: FilterPlan) -> tuple[tuple[int, int, int], ...]:
    """``(axis, L, step)`` for every convolved axis of ``plan`` that overlap-add splits into
    blocks (``step = L - short + 1`` samples of the longer operand per block); empty where no
    axis gains from blocks and the call is a plain FFT convolution."""
    out = []
    for ax in plan.axes:
        na, ng = plan.shape_a[ax], plan.shape_g[ax]
        n = block_length(max(na, ng), min(na, ng))
        if n is not None:
            out.append((ax, n, n - min(na, ng) + 1))
    return tuple(out)


def _fold_blocks(xp, y, d: int, step: int):
    """Merge dims ``d`` (blocks, n) and ``d + 1`` (block output, L) of ``y`` into one axis: block
    ``k`` lands at offset ``k * step``; its last ``L - step`` (<= ``step``) samples add onto the
    next block's first."""
    n, length = y.shape[d], y.shape[d + 1]
    tail = length - step
    lead, rest = y.shape[:d], y.shape[d + 2:]

    def at(*index):
        return (slice(None),) * d + index

    out = xp.zeros(lead + ((n + 1) * step,) + rest, y.dtype)
    out[at(slice(0, n * step))] = y[at(slice(None), slice(0, step))].reshape(
        lead + (n * step,) + rest)
    if tail:
        tails = xp.zeros(lead + (n, step) + rest, y.dtype)
        tails[at(slice(None), slice(0, tail))] = y[at(slice(None), slice(step, length))]
        out[at(slice(step, (n + 1) * step))] += tails.reshape(lead + (n * step,) + rest)
    return out[at(slice(0, n * step + tail))]


def _overlap_add_convolution(x, h, axes, blocks, complex_work: bool):
    """Full linear convolution of ``x`` and ``h`` over ``axes`` (others broadcast), the axes in
    ``blocks`` ((axis, L, step) triples) by overlap-add, the rest by one transform each."""
    import cupy

    split = {ax: (n, step) for ax, n, step in blocks}
    shape_x, shape_h, pad_x, pad_h, fft_axes, fft_lens = [], [], [], [], [], []
    pair = {}  # convolved axis -> the dim of its block count (its block samples follow)
    for i in range(x.ndim):
        nx, nh = x.shape[i], h.shape[i]
        if i not in axes:
            shape_x += [nx]
            shape_h += [nh]
            pad_x += [(0, 0)]
            pad_h += [(0, 0)]
            continue
        if i in split:
            n, step = split[i]
            count = -(-max(nx, nh) // step)
            # the longer operand is cut into `count` blocks of `step`; the shorter is one block
            bx, bh = ((count, step), (1, nh)) if nx >= nh else ((1, nx), (count, step))
        else:
            n, bx, bh = next_fast_len(nx + nh - 1), (1, nx), (1, nh)
        shape_x += bx
        shape_h += bh
        pad_x.append((0, bx[0] * bx[1] - nx))
        pad_h.append((0, bh[0] * bh[1] - nh))
        pair[i] = len(shape_x) - 2
        fft_axes.append(len(shape_x) - 1)
        fft_lens.append(n)
    xb = cupy.pad(x, pad_x).reshape(shape_x)
    hb = cupy.pad(h, pad_h).reshape(shape_h)
    if complex_work:
        y = cupy.fft.ifftn(cupy.fft.fftn(xb, fft_lens, fft_axes)
                           * cupy.fft.fftn(hb, fft_lens, fft_axes), fft_lens, fft_axes)
    else:
        y = cupy.fft.irfftn(cupy.fft.rfftn(xb, fft_lens, fft_axes)
                            * cupy.fft.rfftn(hb, fft_lens, fft_axes), fft_lens, fft_axes)
    # Fold the (blocks, L) pairs back into axes, last first so earlier dims keep their index.
    for i in sorted(axes, reverse=True):
        d = pair[i]
        full = x.shape[i] + h.shape[i] - 1
        if i in split:
            y = _fold_blocks(cupy, y, d, split[i][1])
        else:
            y = y.reshape(y.shape[:d] + (y.shape[d] * y.shape[d + 1],) + y.shape[d + 2:])
        y = y[(slice(None),) * d + (slice(0, full),)]
    return y


def _full_correlation(x, g, axes, work_dtype, blocks=()):
    """``corr(x, g)`` over ``axes`` in 'full' extent (other axes broadcast), by FFT; the axes in
    ``blocks`` (see :func:`overlap_add_blocks`) by overlap-add."""
    import cupy

    axes = tuple(axes)  # CuPy's flip wants a tuple of axes, not a list
    complex_work = np.dtype(work_dtype).kind == "c"
    if blocks:
        return _overlap_add_convolution(x, cupy.flip(g, axis=axes), axes, blocks, complex_work)
    sizes = [x.shape[a] + g.shape[a] - 1 for a in axes]
    fast = [next_fast_len(n) for n in sizes]
    z = spectral.full_correlation(x, g, axes, tuple(fast), work_dtype)
    if z is not None:
        return z
    h = cupy.flip(g, axis=axes)  # correlation is convolution with the reversed kernel
    if complex_work:
        spec = cupy.fft.fftn(x, fast, axes) * cupy.fft.fftn(h, fast, axes)
        z = cupy.fft.ifftn(spec, fast, axes)
    else:
        spec = cupy.fft.rfftn(x, fast, axes) * cupy.fft.rfftn(h, fast, axes)
        z = cupy.fft.irfftn(spec, fast, axes)
    keep = dict(zip(axes, sizes))
    return z[tuple(slice(0, keep[i]) if i in keep else slice(None) for i in range(z.ndim))]


def run_fft(plan: FilterPlan, in1, in2, fillvalue, work_dtype: str, blocks=()):
    """The plan's result computed in ``work_dtype`` (float32/64 or complex64/128), not yet cast;
    ``blocks``: the axes to convolve by overlap-add (:func:`overlap_add_blocks`, zero fill only).
    A plan with no convolved axis is the plain product, computed in ``work_dtype``."""
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
        z = _full_correlation(x, g, axes, work_dtype, blocks)
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
    """Transform precision: SciPy's (``plan.fft_dtype``): single only where both operands are
    float16/float32/complex64, so a float32 result of a float32 and an integer operand is
    transformed in double, as in SciPy, and only then cast."""
    return plan.fft_dtype.name


def fft_points(plan: FilterPlan) -> tuple[int, int]:
    """(points per transform, number of batched transforms) of the plan, for the cost model."""
    per = 1
    for ax in plan.axes:
        per *= next_fast_len(plan.shape_a[ax] + plan.shape_g[ax] - 1)
    batch = math.prod(plan.out_shape[i] for i in plan.batch_axes)
    return per, batch
