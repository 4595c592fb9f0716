"""``cupyconv.gemm``: the package's tiled GEMM as a public matrix product."""

from __future__ import annotations

from dataclasses import replace

from cupyconv._core.arrays import prepare_out, require_array, require_float_dtype, same_device
from cupyconv._core.copy import contiguous
from cupyconv._core.limits import check_matrix_product
from cupyconv._core.launch import GRID_YZ_MAX
from cupyconv._core.kernels import MATH_MMA, MATH_TF32
from cupyconv._core.precision import gemm_math, resolve_precision
from cupyconv._core.program import zero_fill
from cupyconv._dispatch.callcache import call_key, lookup, prepare, remember
from cupyconv._gemm.kernel_args import MatrixView, OutMap
from cupyconv._gemm.launch import MAX_GRID_COLUMNS, run_gemm
from cupyconv._gemm.tma import gemm_tile, prepare_gemm_tma, tf32_k_major

__all__ = ["gemm"]


def _elem_strides(a):
    return [s // a.itemsize for s in a.strides]


def gemm(a, b, out=None, *, precision=None):
    """Matrix product ``a @ b`` of CuPy arrays with cupyconv's tiled GEMM kernel.

    Parameters
    ----------
    a : cupy.ndarray
        ``(M, K)`` or a batch ``(B, M, K)``; float16 or bfloat16 (float32 accumulation, tensor
        cores where the GPU has them), float32 or float64.
    b : cupy.ndarray
        ``(K, N)`` or ``(B, K, N)``, same dtype.  A 2-D operand is shared by every batch entry.
    out : cupy.ndarray, optional
        C-contiguous ``(M, N)`` / ``(B, M, N)`` array of the same dtype to write into.
    precision : "exact", "tf32" or None
        float32 only: "tf32" runs on tensor cores with inputs rounded to TF32; None: "tf32" when
        ``CUPYCONV_ALLOW_TF32=1``, else "exact" (see :func:`cupyconv.conv`).

    Operands are read through their strides (transposed views need no copy); an operand with no
    unit stride in its last two dims is copied once.  2-D float16 / bfloat16 products on Hopper
    GPUs of at least half a wave of 128 x 128 tiles whose operands TMA can read (rows 16-byte
    aligned) run on a TMA-fed, warp-specialized kernel (128 x 256 tiles from two waves of them
    on) where ``cuda-bindings`` is installed
    (part of the ``cuda13`` / ``cuda12`` extras); ``CUPYCONV_TMA=0`` keeps them on the other
    loop.  So do 2-D float32 products at ``precision="tf32"`` with k a multiple of 4; the kernel
    reads both operands K-major, so ``a`` with contiguous columns or ``b`` with contiguous rows
    (a row-major ``b``) is first copied transposed, one pass over it.
    """
    key, ops = call_key("gemm", (a, b, out), (resolve_precision(precision, "float32"),))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    a = require_array(a, "a")
    b = require_array(b, "b")
    dtype = require_float_dtype(a, "a")
    require_float_dtype(b, "b", dtype)
    for name, arr in (("a", a), ("b", b)):
        if arr.ndim not in (2, 3):
            raise ValueError(f"{name} must be 2-d (M, K) or 3-d (batch, M, K), got shape {arr.shape}")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"inner dims differ: a is {a.shape} and b is {b.shape} (a.shape[-1] must "
                         f"equal b.shape[-2])")
    batches = {arr.shape[0] for arr in (a, b) if arr.ndim == 3}
    if len(batches) > 1:
        raise ValueError(f"batch sizes differ: a is {a.shape}, b is {b.shape}")
    batch = batches.pop() if batches else None
    check_matrix_product(m, n, k, batch, dtype)
    shape = (m, n) if batch is None else (batch, m, n)
    if out is not None:
        out = require_array(out, "out")
    same_device({"a": a, "b": b, "out": out})
    precision = resolve_precision(precision, dtype)
    with a.device:
        c = prepare_out(out, shape, dtype, {"a": a, "b": b})
        remember(key, prepare(lambda ops, c: _run(*ops, c, precision), ("a", "b"), (a, b), c))
    return c


def _run(a, b, c, precision: str = "exact") -> None:
    """c = a @ b for validated operands at ``precision``; the caller holds their device."""
    if c.size == 0:
        return
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = c.shape[0] if c.ndim == 3 else None
    if k == 0:
        zero_fill(c)
        return
    if precision == "tf32" and c.ndim == 2:  # (TF32 on the TMA kernel reads both K-major)
        a, b = tf32_k_major(a, b, c)
    tile = gemm_tile(a, b, c, wide=True, precision=precision)
    if tile is not None:  # Hopper, 16-bit or TF32: the TMA-fed warp-specialized kernel
        launch, _ = prepare_gemm_tma(a, b, c, tile=tile)
        launch()
        return
    sa, sb = _elem_strides(a), _elem_strides(b)
    if sa[-1] != 1 and sa[-2] != 1:
        a = contiguous(a)
        sa = _elem_strides(a)
    if sb[-1] != 1 and sb[-2] != 1:
        b = contiguous(b)
        sb = _elem_strides(b)
    av = MatrixView(a, rs=sa[-2], ks=sa[-1], so=sa[0] if a.ndim == 3 else 0)
    bv = MatrixView(b, rs=sb[-1], ks=sb[-2], so=sb[0] if b.ndim == 3 else 0)  # rows = n
    # the mma.sync loops copy k-contiguous rows in 16-byte chunks; wgmma reads either orientation
    # (TF32 slices that land MN-major are transposed in shared memory)
    k_major_only = gemm_math(c.dtype.name, precision, c.data.device_id) in (MATH_MMA, MATH_TF32)
    if not av.kcontig and (k_major_only or not bv.kcontig):
        # the (k-strided A, k-strided B) kernel is not built: make A row-major
        a = contiguous(a)
        sa = _elem_strides(a)
        av = MatrixView(a, rs=sa[-2], ks=1, so=sa[0] if a.ndim == 3 else 0)
    n_axis = -1  # b's axis of the n columns
    if not bv.kcontig and k_major_only:
        # likewise B, as its transpose (n, k) made contiguous (one pass over B: small against
        # the product)
        b = contiguous(b.swapaxes(-1, -2))
        sb = _elem_strides(b)
        bv = MatrixView(b, rs=sb[-2], ks=1, so=sb[0] if b.ndim == 3 else 0)
        n_axis = -2
    # One launch per GRID_YZ_MAX batch entries and per MAX_GRID_COLUMNS columns (the grid's z and
    # y extents): slices keep the operands' strides, so the views above still apply.
    for z0 in range(0, batch or 1, GRID_YZ_MAX):
        zs = slice(z0, z0 + GRID_YZ_MAX)
        a_z, b_z, c_z = ((arr[zs] if arr.ndim == 3 else arr) for arr in (a, b, c))
        for n0 in range(0, n, MAX_GRID_COLUMNS):
            ns = slice(n0, n0 + MAX_GRID_COLUMNS)
            b_part = b_z[..., ns] if n_axis == -1 else b_z[..., ns, :]
            c_part = c_z[..., ns]
            run_gemm(c.dtype.name, replace(av, array=a_z), replace(bv, array=b_part), c_part,
                     m, c_part.shape[-1], k, batch=c_part.shape[0] if batch else 1,
                     c_so=m * n, out=OutMap(m, 0, n, 1), precision=precision)
