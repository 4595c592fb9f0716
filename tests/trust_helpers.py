"""Helpers shared by the trust tests (test_gpu_trust.py) and the fuzz (test_gpu_fuzz.py).

Everything here is array-module generic (``xp`` is ``numpy`` or ``cupy``), so the CPU suite can
exercise it on NumPy (test_trust_helpers.py) while the GPU tests run it on CuPy.  Only the public
API of cupyconv and :mod:`cupyconv.reference` are used.

Judging follows the suite's convention: relative error ``||out - ref|| / ||ref||`` in float64
against a float64 reference; float32 within 1e-5, float64 within 1e-12, float16 and bfloat16
within a multiple of the error of the reference itself rounded to that type (the best a 2-byte
output can do).
"""

from __future__ import annotations

import math

import ml_dtypes  # defines bfloat16 for NumPy: np.dtype("bfloat16") resolves once it is imported
import numpy as np

from cupyconv import reference

TOL = {"float32": 1e-5, "float64": 1e-12}
HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}  # 2-byte types: relative tolerance


def to_host(a) -> np.ndarray:
    """A NumPy copy/view of ``a`` (CuPy arrays via ``.get()``)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64; inf when ``out`` holds NaN/inf or the shapes differ."""
    out = to_host(out).astype(np.float64)
    ref = to_host(ref).astype(np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref.ravel())
    return float(np.linalg.norm((out - ref).ravel()) / (denom if denom > 0 else 1.0))


def tolerance(dtype, ref, fp16_factor: float = 2.0, fp16_floor: float = 1e-6) -> float:
    """Largest acceptable :func:`rel_error` of a ``dtype`` result against the float64 ``ref``."""
    name = np.dtype(dtype).name
    if name in HALF:  # fp16_factor and fp16_floor apply to both 2-byte types
        ref = to_host(ref).astype(np.float64)
        return fp16_factor * rel_error(ref.astype(HALF[name]), ref) + fp16_floor
    return TOL[name]


def uniform(rng: np.random.Generator, shape, dtype="float32") -> np.ndarray:
    """Uniform(-1, 1) values rounded to ``dtype`` (host array)."""
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def poison(a):
    """Fill ``a`` with NaN: any element a kernel fails to write shows up as an error."""
    a.fill(float("nan"))
    return a


# ------------------------------------------------------------------------------------ views
def view_spec(rng: np.random.Generator, ndim: int, kind: str = "random") -> dict:
    """A random description of how to lay an array of ``ndim`` dims out in memory.

    ``perm``: physical order of the logical axes (outermost first); ``flip``: axes read backwards
    (negative strides); ``step``: per-axis element step (strided); ``margin``: elements skipped
    before the view on each axis (a slice of a larger buffer); ``offset``: elements skipped at the
    start of the flat buffer (offsets not a multiple of 16 bytes included).
    ``kind``: "contiguous", "random" (any mix), "flip" (only negative strides), "permute" (only a
    transposed layout) or "strided" (steps and margins only).
    """
    spec = dict(perm=list(range(ndim)), flip=[], step=[1] * ndim, margin=[0] * ndim, offset=0)
    if kind == "contiguous":
        return spec
    if kind in ("random", "permute"):
        if kind == "permute" or rng.random() < 0.4:
            spec["perm"] = [int(i) for i in rng.permutation(ndim)]
    if kind in ("random", "flip"):
        if kind == "flip" or rng.random() < 0.4:
            spec["flip"] = sorted(int(i) for i in rng.choice(ndim, size=int(rng.integers(1, ndim + 1)),
                                                             replace=False))
    if kind in ("random", "strided"):
        if kind == "strided" or rng.random() < 0.4:
            spec["step"] = [int(rng.choice([1, 1, 2, 3])) for _ in range(ndim)]
            spec["margin"] = [int(rng.integers(0, 3)) for _ in range(ndim)]
        if rng.random() < 0.4:
            spec["offset"] = int(rng.integers(1, 9))
    return spec


def make_view(xp, host: np.ndarray, spec: dict, fill=float("nan")):
    """A view of a new ``xp`` buffer laid out per ``spec`` whose elements equal ``host``.

    Memory of the buffer outside the view holds ``fill`` (NaN by default): a kernel that reads
    outside its operand's view gets NaN into its result.
    """
    shape, nd = host.shape, host.ndim
    perm, step, margin = spec["perm"], spec["step"], spec["margin"]
    # physical extent of each logical axis: margin before, then the stepped elements, one spare
    ext = [margin[i] + (shape[i] - 1) * step[i] + 1 + (1 if step[i] > 1 or margin[i] else 0)
           for i in range(nd)]
    phys_shape = tuple(ext[p] for p in perm)
    size = math.prod(phys_shape)
    flat = xp.full(spec["offset"] + size + 3, fill, dtype=host.dtype)
    phys = flat[spec["offset"]:spec["offset"] + size].reshape(phys_shape)
    inv = [0] * nd
    for j, p in enumerate(perm):
        inv[p] = j
    logical = phys.transpose(inv)                                   # axes back in logical order
    view = logical[tuple(slice(margin[i], margin[i] + (shape[i] - 1) * step[i] + 1, step[i])
                         for i in range(nd))]
    view = view[tuple(slice(None, None, -1) if i in spec["flip"] else slice(None)
                      for i in range(nd))]
    view[...] = xp.asarray(host)
    return view


def describe_view(a) -> str:
    """Shape, element strides, offset within its allocation (where known) and dtype of an array."""
    if a is None:
        return "None"
    item = a.dtype.itemsize
    strides = tuple(s // item for s in a.strides)
    # (a NumPy array's .data is a memoryview, which refuses bfloat16: ask NumPy for the address)
    ptr = a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr
    return f"shape={tuple(a.shape)} elem_strides={strides} ptr%16={ptr % 16} dtype={a.dtype}"


# ----------------------------------------------------- huge problems: checks by rows and chunks
def _cf(a, layout):
    """Batch-0 channels-first view (C, H, W) of a 2-d activation (N=1) in ``layout``."""
    return a[0] if layout == "NCHW" else a[0].transpose(2, 0, 1)


def _wcf(w, layout):
    """Channels-first weight view (K, C, kh, kw)."""
    return w if layout == "NCHW" else w.transpose(0, 3, 1, 2)


def _padded_rows(xp, a_cf, r0, r1, pad):
    """Rows ``[r0, r1)`` of channels-first ``a_cf`` (C, H, W) in float64, with zero rows where the
    range leaves the array and ``pad`` zero columns on both sides."""
    c, h, w = a_cf.shape
    blk = xp.zeros((c, r1 - r0, w + 2 * pad), dtype=xp.float64)
    lo, hi = max(r0, 0), min(r1, h)
    if hi > lo:
        blk[:, lo - r0:hi - r0, pad:pad + w] = a_cf[:, lo:hi, :].astype(xp.float64)
    return blk


def chunked_check(xp, op, result, a, b, w_host, layout, kernel=3, pad=1, rows_per_chunk=1024):
    """Relative error of ``result`` of a stride-1, groups-1, N=1 2-d problem with a square
    ``kernel`` and symmetric ``pad`` (``pad == kernel // 2``: "same" size), computed chunk by
    chunk with plain ``xp`` array arithmetic in float64 (no float64 copy of the whole problem).

    op "forward": result y = conv(a=x, w); "backward_data": result dx = bwd_data(a=dy, w);
    "backward_weight": result dw = bwd_weight(a=x, b=dy) (``w_host`` unused: the result is the
    weight).  Returns (||result - ref||, ||ref||) accumulated over the chunks.
    """
    assert pad == kernel // 2
    if op == "backward_weight":
        x_cf, dy_cf = _cf(a, layout), _cf(b, layout)
        c, h, width = x_cf.shape
        k = dy_cf.shape[0]
        dw = np.zeros((k, c, kernel, kernel))
        for r0 in range(0, h, rows_per_chunk):
            r1 = min(h, r0 + rows_per_chunk)
            blk = _padded_rows(xp, x_cf, r0 - pad, r1 + pad, pad)          # x rows r0-p .. r1+p
            dyb = dy_cf[:, r0:r1, :].astype(xp.float64)
            for i in range(kernel):
                for j in range(kernel):
                    win = blk[:, i:i + (r1 - r0), j:j + width]              # (C, rows, W)
                    dw[:, :, i, j] += to_host(xp.tensordot(dyb, win, axes=([1, 2], [1, 2])))
        got = to_host(_wcf(result, layout)).astype(np.float64)
        return float(np.linalg.norm(got - dw)), float(np.linalg.norm(dw))
    wk = _wcf(np.asarray(w_host, dtype=np.float64), layout)               # (K, C, kh, kw)
    src = _cf(a, layout)
    out_cf = _cf(result, layout)
    c_src, h, width = src.shape
    num = den = 0.0
    for r0 in range(0, h, rows_per_chunk):
        r1 = min(h, r0 + rows_per_chunk)
        blk = _padded_rows(xp, src, r0 - pad, r1 + pad, pad)
        n_out = out_cf.shape[0]
        for o in range(n_out):
            ref = xp.zeros((r1 - r0, width), dtype=xp.float64)
            for s in range(c_src):
                for i in range(kernel):
                    for j in range(kernel):
                        if op == "forward":      # y[o] += w[o, s, i, j] * x[s, h + i - p, w + j - p]
                            coef = wk[o, s, i, j]
                            win = blk[s, i:i + (r1 - r0), j:j + width]
                        else:                    # dx[o] += w[s, o, i, j] * dy[s, h - i + p, w - j + p]
                            coef = wk[s, o, i, j]
                            win = blk[s, 2 * pad - i:2 * pad - i + (r1 - r0),
                                      2 * pad - j:2 * pad - j + width]
                        if coef != 0.0:
                            ref += float(coef) * win
            diff = out_cf[o, r0:r1, :].astype(xp.float64) - ref
            num += float((diff * diff).sum())
            den += float((ref * ref).sum())
    return math.sqrt(num), math.sqrt(den)


def crop_rows_check(op, result, a, b, w_host, layout, rows, kernel=3, pad=1):
    """Exact check of the output rows ``rows`` of a stride-1 "same" 2-d problem (N=1) against
    :mod:`cupyconv.reference` on the few input rows each output row depends on.

    op "forward"/"backward_data": ``a`` is x/dy, ``result`` is y/dx, rows index the result.
    Returns the worst relative error over the rows.
    """
    h = _cf(a, layout).shape[1]
    worst = 0.0
    wk = np.asarray(w_host, dtype=np.float64)
    for r in rows:
        lo, hi = max(0, r - pad), min(h, r + pad + 1)
        sl = (slice(None), slice(lo, hi)) if layout == "NHWC" else (slice(None), slice(None),
                                                                    slice(lo, hi))
        crop = to_host(a[sl])
        # padding rows: only where the window leaves the array (zeros), otherwise real rows
        padding = [(pad - (r - lo), pad - (hi - 1 - r)), (pad, pad)]
        if op == "forward":
            ref = reference.conv(crop, wk, padding=padding, layout=layout)
        else:
            # dx row r gets dy rows r-p..r+p (clipped to lo..hi-1): the backward pass of a
            # forward conv whose input is the single row r and whose output rows are lo..hi-1
            if layout == "NHWC":
                in_shape = (1, 1, crop.shape[2], wk.shape[-1])
            else:
                in_shape = (1, wk.shape[1], 1, crop.shape[3])
            top = r + pad - lo
            fpad = [(top, (hi - lo) + kernel - 2 - top), (pad, pad)]
            ref = reference.conv_backward_data(crop, wk, in_shape, padding=fpad, layout=layout)
        row = (slice(None), slice(r, r + 1)) if layout == "NHWC" else (slice(None), slice(None),
                                                                       slice(r, r + 1))
        worst = max(worst, rel_error(result[row], ref))
    return worst


def boundary_rows(h: int, width: int, channels: int, layout: str, limit: int = 2 ** 31,
                  extra=()) -> list[int]:
    """Rows worth checking in a (1, C, H, W) / (1, H, W, C) array: the first and last rows, the
    middle, and the rows around every place where a flat element index crosses ``limit``
    (``2**31``: where 32-bit index arithmetic wraps)."""
    rows = {0, 1, h // 2, h - 2, h - 1, *extra}
    if layout == "NHWC":
        r = limit // (width * channels)
        rows |= {r - 1, r, r + 1}
    else:
        for c in range(channels):
            start = c * h * width
            if start <= limit < start + h * width:
                r = (limit - start) // width
                rows |= {r - 1, r, r + 1}
    return sorted(r for r in rows if 0 <= r < h)
