"""Launchers of the tiled GEMM kernels (``gemm.cu``, ``conv_fprop.cu``, ``conv_wgrad.cu``).

A launch resolves its plan (explicit, else forced by :func:`forced_plan`, else
:func:`cupyconv._gemm.plans.plan_gemm`'s choice; :func:`record_plans` collects what ran), then
launches the main loop on its grid and, with split-K, the deterministic reduction.  The epilogue
(``epilogue.cuh``; with split-K, the reduction) adds the bias and, for inference, a residual
``z`` and an activation (a code of :mod:`cupyconv._core.activation`, ``act``) before the single
store.  ``z`` has the output's layout: the kernels read it at each output element's offset from
the output's base, through its own base pointer.  Problems with more rows than one launch indexes
run slab by slab (:func:`row_slabs`).  Operand views and scalar arguments:
:mod:`cupyconv._gemm.kernel_args`; staged copies of the operands: :mod:`cupyconv._gemm.staging`.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from dataclasses import replace

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (GEMM_TILES, LONG_K_TILE, MATH_SIMT, MMA_TILES, SPLITK_REDUCE,
                                    conv_fprop_module, conv_wgrad_module, gemm_module, gemm_tiles,
                                    mma_smem_bytes)
from cupyconv._core.launch import (DEFAULT_SMEM, GRID_YZ_MAX, element_strides, int64s, ints,
                                   launch_grid)
from cupyconv._core.precision import gemm_math, runs_instead
from cupyconv._core.program import not_preparable, scratch
from cupyconv._gemm.grouped import merge_forced
from cupyconv._gemm.kernel_args import (ImplicitConv, MatrixView, OutMap, fprop_out_map,
                                        fprop_scalar_args, out_vectorizable, x_vec_level)
from cupyconv._gemm.plans import GemmPlan, dense_plan, plan_gemm, with_build
from cupyconv._gemm.staging import fprop_weight, staged_channels, staged_operands


# Two hooks for the profiler and the autotuner, both off by default (so default launches are
# unchanged): a forced plan that every GEMM launch in the context uses instead of plan_gemm's
# choice, and a list that records the plan of every launch (which tile configuration really ran).
_FORCED: contextvars.ContextVar = contextvars.ContextVar("cupyconv_forced_plan", default=None)
_RECORD: contextvars.ContextVar = contextvars.ContextVar("cupyconv_plan_record", default=None)


@contextlib.contextmanager
def forced_plan(plan: GemmPlan | None):
    """Within the block, GEMM launches with no explicit ``plan=`` use ``plan``'s tile and split
    (None: the default choice).  The tile must be one of ``gemm_tiles(dtype, math)`` for the
    launched dtype and main loop; the main loop itself is the launch's (dtype, precision)."""
    token = _FORCED.set(plan)
    try:
        yield
    finally:
        _FORCED.reset(token)


@contextlib.contextmanager
def record_plans():
    """Collect ``(kernel, (m, n, k, batch), GemmPlan)`` for every GEMM launch within the block."""
    log: list = []
    token = _RECORD.set(log)
    try:
        yield log
    finally:
        _RECORD.reset(token)


def plan_hooks_active() -> bool:
    """Whether a :func:`forced_plan`, :func:`record_plans` or ``grouped.forced_merge`` block is
    active: calls made there must plan afresh (and are not remembered), so the hooks see every
    launch."""
    return _FORCED.get() is not None or _RECORD.get() is not None or merge_forced()


def _resolve(plan: GemmPlan | None, default, kernel: str, shape: tuple, dtype: str,
             math_kind: int, device_id: int) -> GemmPlan:
    """The plan a launch uses: explicit, else forced by the context, else ``default()``; on the
    launch's main loop ``math_kind`` (or on one the device runs instead, where the plan names
    it: ``precision.runs_instead``), whose tiles a given plan must use."""
    plan = plan or _FORCED.get() or default()
    if plan.math != math_kind and not runs_instead(plan.math, math_kind):
        plan = replace(plan, math=math_kind)
    plan = with_build(plan, shape, device_id)
    math_kind = plan.math
    tiles = gemm_tiles(dtype, math_kind) + ((LONG_K_TILE,) if math_kind == MATH_SIMT else ())
    if plan.tile not in tiles:
        raise ValueError(f"GEMM tile {plan.tile} is not one of the {dtype} tiles of this main loop "
                         f"(kernels.gemm_tiles: {tiles})")
    log = _RECORD.get()
    if log is not None:
        log.append((kernel, shape, plan))
    return plan


# Most GEMM columns one launch covers whatever its tile: column tiles go on the grid's y extent,
# so GRID_YZ_MAX tiles of the narrowest tile.
MAX_GRID_COLUMNS = GRID_YZ_MAX * min(t[1] for tiles in (*GEMM_TILES.values(), *MMA_TILES.values())
                                     for t in tiles)


def grid_fits(n: int, batch: int) -> bool:
    """Whether an n-column GEMM batch fits the launch grid: at most MAX_GRID_COLUMNS columns (y)
    and GRID_YZ_MAX batch entries (z); rows go on x, which takes any 32-bit count."""
    return n <= MAX_GRID_COLUMNS and batch <= GRID_YZ_MAX


def _grid(tile, m, n, batch):
    return (math.ceil(m / tile[0]), math.ceil(n / tile[1]), batch), (tile[0] // tile[3] * (tile[1] // tile[4]),)


def _tiled_kernel(module, template: str, dtype: str, variant: tuple, plan: GemmPlan):
    """The compiled GEMM-family kernel of ``plan`` and its dynamic shared memory (the tensor-core
    loops' k-slices; none for the SIMT loop), opted in above the default limit."""
    import cupy

    fn = jit.get_function(module, template, dtype, variant)
    smem = mma_smem_bytes(plan.tile, plan.math, cupy.cuda.runtime.is_hip, plan.blocks)
    if smem > DEFAULT_SMEM and fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    return fn, smem


def _workspace(dtype: str, splits: int, count: int, placeholder):
    """Split-K partial sums (accumulator type); without a split the kernel never touches it and
    gets ``placeholder`` (the output) instead of a fresh allocation."""
    if splits == 1:
        return placeholder
    return scratch(count * splits, "float64" if dtype == "float64" else "float32")


def reduce_splits(dtype, ws, c, bias, splits, batch, m, n, g2, c_so, c_si, bias_si,
                  out: OutMap, n_fast: bool, z=None, act: int = NO_ACTIVATION) -> None:
    """Second split-K stage: c = act(sum of the parts (deterministic order) + bias + z).
    ``n_fast``: the order the first stage wrote the parts in (n fastest, else m fastest)."""
    fn = jit.get_function(SPLITK_REDUCE, "splitk_reduce", dtype)
    grid, block = launch_grid(batch * m * n)
    fn(grid, block, (ws, c, bias if bias is not None else c, z if z is not None else c,
                     *ints((bias is not None, z is not None, act, splits, batch, m, n,
                            n_fast, g2)),
                     *int64s((c_so, c_si, bias_si) + out.kernel_args())))


def run_gemm(dtype: str, a: MatrixView, b: MatrixView, c, m: int, n: int, k: int, *, batch: int = 1,
             g2: int = 1, c_so: int = 0, c_si: int = 0, out: OutMap, bias=None, bias_si: int = 0,
             z=None, act: int = NO_ACTIVATION, plan: GemmPlan | None = None,
             precision: str = "exact") -> None:
    """C[b] (m x n, placed by ``out``) = act(A[b] (m x k) @ B[b] (k x n) + bias[n] + z[b]) for
    b < batch; ``z`` (optional) has C's strides (read at C's element offsets), bias and the
    activation code ``act`` are optional too.  ``precision`` picks the main loop with the dtype."""
    if not (a.kcontig or a.rs == 1) or not (b.kcontig or b.rs == 1):
        raise ValueError("GEMM operands need a unit stride along rows or k")
    device_id = c.data.device_id
    plan = _resolve(plan, lambda: dense_plan(plan_gemm(dtype, m, n, k, batch, device_id, precision,
                                                       b.kcontig), dtype, k), "gemm", (m, n, k, batch), dtype,
                    gemm_math(dtype, precision, device_id), device_id)
    variant = (int(a.kcontig), int(b.kcontig))
    fn, smem = _tiled_kernel(gemm_module(dtype, plan.tile, variant, plan.math, plan.blocks), "gemm", dtype,
                             variant + (plan.math,), plan)
    grid, block = _grid(plan.tile, m, n, batch * plan.splits)
    ws = _workspace(dtype, plan.splits, batch * m * n, c)
    args = (a.array, b.array, c, bias if bias is not None else c, z if z is not None else c,
            *ints((bias is not None, z is not None, act, m, n, k,
                   out_vectorizable(c, out, (c_so, c_si)))),
            *int64s((a.rs, a.ks, b.rs, b.ks)),
            *ints((a.vec_level(m, k), b.vec_level(n, k), g2)),
            *int64s((a.so, a.si, b.so, b.si, c_so, c_si, bias_si, out.L, out.outer, out.inner,
                     out.col)), *ints((plan.splits,)), ws)
    with c.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            reduce_splits(dtype, ws, c, bias, plan.splits, batch, m, n, g2, c_so, c_si, bias_si,
                          out, out.col == 1, z, act)  # (gemm.cu's parts: n fastest where C's columns are)


# Rows (output pixels) of one implicit-GEMM launch.  The kernels index rows and tile origins in
# 32-bit ints (64-bit arithmetic in their hot loops would cost every problem); a problem with more
# rows, in its output (forward, backward-data) or its reduction (backward-weight), runs as several
# launches over row slabs.  Below 2^31 by a margin, so that a tile overhanging the last row
# cannot overflow.  Tests lower it to split small problems.
MAX_GEMM_ROWS = 2 ** 30


def row_slabs(prob: ImplicitConv, limit: int | None = None):
    """``prob``'s output rows (images x output pixels) as slabs of at most ``limit`` rows, each a
    contiguous run of rows: whole images, or, where one image has more, runs of the outermost
    output dim whose inner dims fit, with every outer index fixed.  Yields ``(sub, index)``: the
    problem of the slab (its pixels' input windows through a shifted padding; the kernel
    predicates every tap, so the shift may make it negative) and its index into the activations
    (batch axis first, then the three spatial dims as ``ConvGeometry.as_3d`` pads them)."""
    limit = limit or MAX_GEMM_ROWS
    out = prob.out_spatial
    pixels = math.prod(out)
    if pixels <= limit:
        per = limit // pixels
        for n0 in range(0, prob.batch, per):
            n1 = min(prob.batch, n0 + per)
            yield replace(prob, batch=n1 - n0), (slice(n0, n1),)
        return
    split = next(d for d in range(3) if math.prod(out[d + 1:]) <= limit)
    run = limit // math.prod(out[split + 1:])
    for n in range(prob.batch):
        for outer in itertools.product(*(range(e) for e in out[:split])):
            for o0 in range(0, out[split], run):
                lo = outer + (o0,)
                hi = tuple(i + 1 for i in outer) + (min(out[split], o0 + run),)
                sub = replace(prob, batch=1,
                              out_spatial=tuple(h - l for l, h in zip(lo, hi)) + out[split + 1:],
                              pad_lo=tuple(p - l * s for p, l, s in
                                           zip(prob.pad_lo, lo + (0,) * 3, prob.stride)))
                yield sub, (slice(n, n + 1),) + tuple(slice(l, h) for l, h in zip(lo, hi))


def slab_view(a, index: tuple, channels_last: bool):
    """The slab ``index`` (from :func:`row_slabs`) of an activation ``a`` with 1-3 spatial dims:
    its batch slice and, where given, the slices of the spatial dims that ``a`` has."""
    # (a slab splits a dim the activation has: the padded leading dims have extent 1, so a slab
    # wider than one image never indexes them)
    batch, spatial = index[0], index[1 + 3 - (a.ndim - 2):]
    if channels_last:
        return a[(batch,) + spatial]
    return a[(batch, slice(None)) + spatial]


def run_conv_fprop(geom: ConvGeometry, x, w, bias, y, plan: GemmPlan | None = None, *, z=None,
                   act: int = NO_ACTIVATION) -> None:
    """Implicit-GEMM forward convolution (no im2col buffer): y = act(conv + bias + z)."""
    wt, w_cf = fprop_weight(geom, w)
    launch_implicit_conv(ImplicitConv.from_geometry(geom), x, wt, bias, y, plan, w_cf, z=z, act=act)


def plain_launch(plan: GemmPlan | None, bias, z, act: int) -> bool:
    """Whether a launch may leave the implicit kernel for the TMA GEMM: no plan given or forced
    (nor recorded: tests that force plans must see the kernel they force), and no epilogue
    options, which the TMA kernel does not have."""
    return (plan is None and not plan_hooks_active() and bias is None and z is None
            and act == NO_ACTIVATION)


def launch_implicit_conv(prob: ImplicitConv, x, wt, bias, y, plan: GemmPlan | None = None,
                         w_cf: bool = False, *, z=None, act: int = NO_ACTIVATION) -> None:
    """y = act(conv(x, wt) + bias + z) with the implicit kernel (bias, z and the activation code
    ``act`` optional); wt is (K, taps, Cg) C-contiguous (or, with ``w_cf``, channels-first
    (K, Cg, taps) C-contiguous), y an (N, K, *out) or (N, *out, K) array whose rows
    :func:`fprop_out_map` can place (C-contiguous, a stride phase's rows of dx, or, within this
    function, a slab of rows of either: see :func:`row_slabs`) and z an array of y's shape and
    strides."""
    m, n, k, groups = prob.gemm
    if m > MAX_GEMM_ROWS:
        cl, y_cl = prob.channels_last, prob.y_channels_last
        for sub, index in row_slabs(prob):
            launch_implicit_conv(sub, slab_view(x, index[:1], cl), wt, bias,
                                 slab_view(y, index, y_cl), plan, w_cf,
                                 z=None if z is None else slab_view(z, index, y_cl), act=act)
        return
    device_id = y.data.device_id
    cg_to = staged_channels(prob, plan, device_id)
    if cg_to:
        prob, x, wt, w_cf = staged_operands(prob, x, wt, w_cf, cg_to)
        m, n, k, groups = prob.gemm
    plan = _resolve(plan, lambda: plan_gemm(prob.dtype, m, n, k, groups, device_id, prob.precision),
                    "conv_fprop", (m, n, k, groups), prob.dtype,
                    gemm_math(prob.dtype, prob.precision, device_id), device_id)
    variant = (int(prob.channels_last),)
    fn, smem = _tiled_kernel(conv_fprop_module(prob.dtype, plan.tile, variant, plan.math, plan.blocks),
                             "conv_fprop", prob.dtype, variant + (plan.math,), plan)
    xs = element_strides(x, prob.channels_last)
    ys = element_strides(y, prob.y_channels_last)
    grid, block = _grid(plan.tile, m, n, groups * plan.splits)
    ws = _workspace(prob.dtype, plan.splits, groups * m * n, y)
    out = fprop_out_map(prob, ys)
    if out is None:
        raise ValueError("the implicit convolution cannot write an output with these strides")
    group_stride = n * out.col
    flags = (bias is not None, z is not None, act,
             0 if w_cf else MatrixView(wt, rs=k, ks=1).vec_level(n, k), w_cf,
             x_vec_level(prob, x, xs), out_vectorizable(y, out, (group_stride,)))
    args = (x, wt, y, bias if bias is not None else y, z if z is not None else y,
            *fprop_scalar_args(prob, xs, out, plan.splits, flags), ws)
    with y.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            reduce_splits(prob.dtype, ws, y, bias, plan.splits, groups, m, n, groups, 0,
                          group_stride, n, out, prob.y_channels_last, z, act)


def launch_conv_wgrad(prob: ImplicitConv, x, dy, dw, plan: GemmPlan | None = None) -> None:
    """Implicit-GEMM backward-weight of a channels-last ``prob``: dw (K, *kernel, Cg) from x and
    a C-contiguous dy, with no im2col buffer; split-K over the output pixels.  More than
    MAX_GEMM_ROWS pixels are summed slab by slab (:func:`row_slabs`), in a fixed order."""
    g = prob.groups
    kg, tcg = prob.out_channels // g, math.prod(prob.kernel) * prob.in_channels // g
    pixels = prob.batch * math.prod(prob.out_spatial)
    if pixels > MAX_GEMM_ROWS:
        not_preparable("slabs of backward-weight are summed with CuPy")
        part = None
        for i, (sub, index) in enumerate(row_slabs(prob)):
            if i == 1:
                part = scratch(dw.shape, dw.dtype)
            launch_conv_wgrad(sub, slab_view(x, index[:1], True), slab_view(dy, index, True),
                              dw if i == 0 else part, plan)
            if i:
                dw += part
        return
    device_id = dw.data.device_id
    xs = element_strides(x, True)
    dy_vec = MatrixView(dy, rs=1, ks=prob.out_channels, si=kg).vec_level(kg, pixels)
    x_vec = x_vec_level(prob, x, xs)
    # B (Im2colTLoader) is MN-major, which rules tiles out of the multistage loop; that loop
    # needs 16-byte chunks of both operands (vec 2), else the register-staged loop takes any tile
    multistage = dy_vec >= 2 and x_vec >= 2
    plan = _resolve(plan, lambda: plan_gemm(prob.dtype, kg, tcg, pixels, g, device_id,
                                            prob.precision, b_kmajor=not multistage),
                    "conv_wgrad", (kg, tcg, pixels, g), prob.dtype,
                    gemm_math(prob.dtype, prob.precision, device_id), device_id)
    fn, smem = _tiled_kernel(conv_wgrad_module(prob.dtype, plan.tile, plan.math, plan.blocks), "conv_wgrad",
                             prob.dtype, (plan.math,), plan)
    out = OutMap(kg, 0, tcg, 1)
    grid, block = _grid(plan.tile, kg, tcg, g * plan.splits)
    ws = _workspace(prob.dtype, plan.splits, g * kg * tcg, dw)
    args = (x, dy, dw,
            *ints((prob.batch, prob.out_channels, g, dy_vec, x_vec,
                   out_vectorizable(dw, out, (kg * tcg,)),
                   prob.in_channels // g)),
            *ints(prob.spatial + prob.out_spatial + prob.kernel + prob.stride + prob.dilation
                  + prob.pad_lo),
            *int64s(xs), *ints((plan.splits,)), ws)
    with dw.device:
        fn(grid, block, args, shared_mem=smem)
        if plan.splits > 1:
            reduce_splits(prob.dtype, ws, dw, None, plan.splits, g, kg, tcg, g, 0, kg * tcg, 0,
                          out, True)
